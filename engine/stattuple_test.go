package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"mvkv/internal/heap"
)

func TestStatTuple(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum})
	const accounts, history = 300, 200
	for i := 0; i < accounts; i++ {
		mustPut(t, db, fmt.Sprintf("a:%05d", i), strings.Repeat("x", 90))
	}
	for i := 0; i < history; i++ {
		mustPut(t, db, fmt.Sprintf("h:%05d", i), strings.Repeat("y", 30))
	}
	release := holdSnapshot(t, db) // no pruning: the old versions stay
	for i := 0; i < 50; i++ {
		mustPut(t, db, fmt.Sprintf("a:%05d", i), strings.Repeat("z", 90))
	}
	mustPut(t, db, "big", strings.Repeat("b", 3*heap.PageSize))
	class := func(k []byte) string {
		if k == nil {
			return "chunk"
		}
		return string(k[:min(2, len(k))])
	}
	u, pages, err := db.StatTuple(context.Background(), class)
	if err != nil {
		t.Fatal(err)
	}
	if pages != uint64(db.pool.NBlocks()) {
		t.Errorf("read %d pages of %d", pages, db.pool.NBlocks())
	}
	if u["a:"].Tuples != accounts+50 || u["h:"].Tuples != history || u["bi"].Tuples != 1 || u["chunk"].Tuples != 4 {
		t.Errorf("tuples by class: %+v", u)
	}
	var sum uint64
	for c, x := range u {
		if x.Pages == 0 || x.Pages > pages || x.TupleBytes > x.Pages*heap.PageSize {
			t.Errorf("%s: %+v in %d pages", c, x, pages)
		}
		sum += x.TupleBytes
	}
	if sum > pages*heap.PageSize {
		t.Errorf("%d tuple bytes in %d pages", sum, pages)
	}
	// Vacuum removes the 50 old account versions.
	release()
	mustVacuum(t, db)
	if u, _, err = db.StatTuple(context.Background(), class); err != nil || u["a:"].Tuples != accounts {
		t.Errorf("after vacuum: %+v, %v", u["a:"], err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := db.StatTuple(ctx, class); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled: %v", err)
	}
	db.Close()
	if _, _, err := db.StatTuple(context.Background(), class); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
}

// The space vacuum frees among updated keys goes to their next versions,
// not to new keys: after updates and a vacuum, new keys land on pages of
// their own (but for the partly filled insert targets the load left), while
// pages emptied by deletes are reused by them.
func TestNewKeysKeepOffUpdatedPages(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum})
	defer db.Close()
	for i := 0; i < 600; i++ {
		mustPut(t, db, fmt.Sprintf("a:%05d", i), strings.Repeat("x", 90))
	}
	for i := 0; i < 600; i += 5 { // 5 is prime to the 8 insert targets: every page loses some
		mustPut(t, db, fmt.Sprintf("a:%05d", i), strings.Repeat("y", 90))
	}
	mustVacuum(t, db)
	for i := 0; i < 3000; i++ {
		mustPut(t, db, fmt.Sprintf("n:%05d", i), strings.Repeat("z", 30))
	}
	seen := map[string]bool{}
	mixed := 0
	for blk := uint32(0); blk < db.pool.NBlocks(); blk++ {
		var pg statPageTuples
		if _, err := db.statPage(blk, &pg); err != nil {
			t.Fatal(err)
		}
		clear(seen)
		for _, tup := range pg.tuples {
			if !tup.chunk {
				seen[string(pg.keys[tup.start:tup.start+2])] = true
			}
		}
		if seen["a:"] && seen["n:"] {
			mixed++
		}
	}
	// Only the insert targets the load left partly filled may hold both.
	if mixed > nInsertTargets {
		t.Errorf("%d pages hold both updated and new keys", mixed)
	}
	// Deleting a run of keys empties pages; new keys reuse them.
	for i := 0; i < 600; i++ {
		mustDelete(t, db, fmt.Sprintf("a:%05d", i))
	}
	mustVacuum(t, db)
	before := db.pool.NBlocks()
	for i := 3000; i < 3600; i++ {
		mustPut(t, db, fmt.Sprintf("n:%05d", i), strings.Repeat("z", 30))
	}
	if after := db.pool.NBlocks(); after > before {
		t.Errorf("heap grew from %d to %d pages with emptied pages free", before, after)
	}
}
