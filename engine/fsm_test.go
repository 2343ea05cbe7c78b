package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"mvkv/internal/heap"
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

// The map hands out the lowest block with room first, whatever its
// category, and empty pages last (lowest first among them).
func TestFreeSpaceMapTakesLowestBlockFirst(t *testing.T) {
	var f freeSpaceMap
	f.init()
	for _, b := range []struct {
		blk  uint32
		free int
	}{{90, 7000}, {40, 3000}, {70, 1100}, {10, heap.PageSize}, {55, 3000}, {5, heap.PageSize}, {60, 6000}} {
		f.record(b.blk, b.free)
	}
	var got []uint32
	for {
		blk, ok := f.take(900)
		if !ok {
			break
		}
		got = append(got, blk)
	}
	if want := []uint32{40, 55, 60, 70, 90, 5, 10}; !slices.Equal(got, want) {
		t.Fatalf("take order %v, want %v", got, want)
	}
	// A tuple too large for the low blocks goes to the lowest that fits.
	f.record(3, 1000)
	f.record(8, 5000)
	f.record(2, heap.PageSize)
	if blk, ok := f.take(4000); !ok || blk != 8 {
		t.Fatalf("take(4000) = %d, %v; want 8", blk, ok)
	}
	f.forgetFrom(3)
	if blk, ok := f.take(1); !ok || blk != 2 {
		t.Fatalf("after forgetFrom(3): take(1) = %d, %v; want 2", blk, ok)
	}
}

// After a mass delete and its vacuum, keys written again that do not fit
// the insert targets go to the lowest emptied pages, not anywhere in the
// heap, so that the pages above them stay empty.
func TestKeysAfterMassDeleteFillTheFront(t *testing.T) {
	off := false
	dir := t.TempDir()
	db := openTest(t, dir, Options{Autovacuum: noAutovacuum, VacuumTruncate: &off})
	val := strings.Repeat("v", 5000) // one a page
	for i := range 200 {
		mustPut(t, db, fmt.Sprintf("old%03d", i), val)
	}
	for i := range 200 {
		mustDelete(t, db, fmt.Sprintf("old%03d", i))
	}
	mustVacuum(t, db)
	blocks := db.pool.NBlocks()
	targets := map[uint32]bool{}
	for i := range db.targets.blk {
		targets[db.targets.blk[i].Load()] = true
	}
	var high uint32
	for i := range 40 {
		k := fmt.Sprintf("new%03d", i)
		mustPut(t, db, k, val)
		e := db.idx.get([]byte(k))
		if e == nil {
			t.Fatalf("%s not in the index", k)
		}
		if b := e.headTID().Block; !targets[b] {
			high = max(high, b)
		}
	}
	if n := db.pool.NBlocks(); n != blocks {
		t.Fatalf("the heap grew from %d to %d blocks with 160 pages free", blocks, n)
	}
	// 40 keys, a page each: those not on an insert target on the lowest
	// 40 blocks.
	if high >= 40 {
		t.Fatalf("a new key landed on block %d, above the lowest 40 of %d", high, blocks)
	}
	db.Close()
}

// A new key at a low fillfactor asks the free space map for its tuple and
// the room the fillfactor keeps (PostgreSQL's RelationGetBufferForTuple
// asks for len + saveFreeSpace), not for the tuple alone: every page the
// map hands out is taken out of it, so at fillfactor 10 an insert that
// asked for half a page read and locked every half-empty page in turn,
// found that none kept 90% free, and left them all out of the map until
// the next vacuum scanned them: the updates that could have used them
// extended the heap instead.
func TestLowFillFactorInsertKeepsFreeSpaceMap(t *testing.T) {
	for _, ff := range []int{10, 30, 100} {
		t.Run(fmt.Sprint("fillfactor=", ff), func(t *testing.T) {
			db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum, FillFactor: ff})
			defer db.Close()
			val := strings.Repeat("v", 200)
			for i := range 300 {
				mustPut(t, db, fmt.Sprint("k", i), val)
			}
			mustVacuum(t, db) // records every page's free space
			recorded := func() int {
				db.fsm.mu.Lock()
				defer db.fsm.mu.Unlock()
				return len(db.fsm.cat)
			}
			before, blocks := recorded(), db.pool.NBlocks()
			if before == 0 && ff < 100 {
				t.Fatal("vacuum recorded no page with free space; the test no longer tests the map")
			}
			const n = 30
			for i := range n {
				mustPut(t, db, fmt.Sprint("new", i), val)
			}
			after := recorded()
			t.Logf("%d blocks, %d recorded in the map; after %d new keys %d blocks, %d recorded", blocks, before, n, db.pool.NBlocks(), after)
			if after < before-n {
				t.Fatalf("%d new keys took %d pages out of the free space map (%d left of %d)", n, before-after, after, before)
			}
		})
	}
}

// An out-of-line value's chunks keep no fillfactor room, as PostgreSQL's
// TOAST table keeps none: with the room asked for, a chunk larger than the
// fillfactor's share of a page fitted only a new page, so at fillfactor 10
// every rewrite of a large value extended the heap, and the pages vacuum
// emptied of the old value's chunks were never used again.
func TestLowFillFactorLargeValueReusesFreedPages(t *testing.T) {
	for _, ff := range []int{10, 50, 100} {
		t.Run(fmt.Sprint("fillfactor=", ff), func(t *testing.T) {
			db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum, FillFactor: ff})
			defer db.Close()
			for i := range 40 {
				mustPut(t, db, "big", strings.Repeat(string(rune('a'+i%26)), 20000)) // three chunks
				mustVacuum(t, db)
			}
			// Two copies of the value (the live one and the one being
			// written) and the key's page need about eight pages; each
			// rewrite that extends adds three.
			if n := db.pool.NBlocks(); n > 20 {
				t.Fatalf("40 rewrites of a 20,000-byte value, each vacuumed after, left a heap of %d blocks", n)
			}
		})
	}
}
