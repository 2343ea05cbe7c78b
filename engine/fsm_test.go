package engine

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

func TestFreeSpaceMapTake(t *testing.T) {
	var f freeSpaceMap
	f.init()
	f.record(1, 100) // below fsmMinFree: not recorded
	f.record(2, 1000)
	f.record(3, 5000)
	if _, ok := f.take(6000); ok {
		t.Error("took a page for 6000 bytes; none has that much")
	}
	if blk, ok := f.take(4000); !ok || blk != 3 {
		t.Errorf("take(4000) = %d, %v; want 3", blk, ok)
	}
	if _, ok := f.take(4000); ok {
		t.Error("a taken page was handed out twice")
	}
	f.record(2, 200) // shrank below the minimum: forgotten
	if blk, ok := f.take(1); ok {
		t.Errorf("take(1) = %d; every page is full or taken", blk)
	}
}

// Space vacuum frees goes to new versions before the heap grows (with
// vacuum_truncate off, which would give the emptied pages back to the file
// system instead: TestVacuumTruncatesEmptyTail).
func TestInsertsReuseVacuumedSpace(t *testing.T) {
	off := false
	db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum, VacuumTruncate: &off})
	defer db.Close()
	val := strings.Repeat("v", 500)
	ctx := context.Background()
	put := func(from, to int) {
		err := db.Update(ctx, func(tx *Txn) error {
			for i := from; i < to; i++ {
				if err := tx.Put([]byte(fmt.Sprint("k", i)), []byte(val)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	put(1000, 1300) // keys of one length, so both rounds need the same space
	for i := 1000; i < 1300; i++ {
		mustDelete(t, db, fmt.Sprint("k", i))
	}
	mustVacuum(t, db)
	blocks := db.pool.NBlocks()
	put(2000, 2300)
	if n := db.pool.NBlocks(); n > blocks {
		t.Errorf("the heap grew from %d to %d blocks although vacuum had emptied it", blocks, n)
	}
}
