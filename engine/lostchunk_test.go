package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"mvkv/internal/heap"
)

// lostChunkValue is a large value of lostChunkState and the data chunk of
// it whose page is damaged.
type lostChunkValue struct {
	size  int
	chunk int // which data chunk, in value order
	val   []byte
	blk   uint32 // the damaged page
}

// lostChunkState writes, beside a small key, out-of-line values whose
// chunks fill pages of their own, closes cleanly and tears on disk the
// page of one data chunk of each (the first, or a later one, as vals
// says), after noting where those chunks were.
func lostChunkState(t *testing.T, dir string, vals map[string]*lostChunkValue) {
	t.Helper()
	db := openTest(t, dir, Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1})
	mustPut(t, db, "small", "s")
	seed := uint32(1)
	for k, v := range vals {
		v.val = patterned(v.size, seed)
		seed++
		mustPut(t, db, k, string(v.val))
	}
	for k, v := range vals {
		_, ptr := rawPointer(t, db, k)
		p, err := parseToastPointer(ptr)
		if err != nil {
			t.Fatal(err)
		}
		tids := p.tids
		if p.indirect {
			if tids, err = db.directoryTIDs(p.tids[0]); err != nil {
				t.Fatal(err)
			}
		}
		v.blk = tids[v.chunk].Block
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for _, v := range vals {
		tearBlock(t, dir, v.blk)
	}
}

// directoryTIDs reads the data chunk TIDs a directory chunk lists.
func (db *DB) directoryTIDs(d heap.TID) ([]heap.TID, error) {
	dir, err := db.appendChunk(nil, d, true, tidsPerDirectory*tidSize, db.chunkXmin(d))
	if err != nil {
		return nil, err
	}
	return parseDirectory(dir, -1)
}

// chunkXmin is the xmin of the tuple at tid (0 if it cannot be read).
func (db *DB) chunkXmin(tid heap.TID) uint64 {
	buf, err := db.pool.Get(tid.Block)
	if err != nil {
		return 0
	}
	defer buf.Release()
	buf.RLock()
	defer buf.RUnlock()
	raw, err := heap.Tuple(buf.Page(), tid.Slot)
	if err != nil {
		return 0
	}
	return heap.TupleXmin(raw)
}

// eachHeapTuple calls fn for each tuple on the heap's pages that reads, in
// block and slot order, under the page's share lock: fn must not touch the
// buffer pool.
func eachHeapTuple(t *testing.T, db *DB, fn func(tid heap.TID, raw []byte)) {
	t.Helper()
	for blk := range db.pool.NBlocks() {
		buf, err := db.pool.Get(blk)
		if err != nil {
			t.Fatal(err)
		}
		buf.RLock()
		page := buf.Page()
		if !heap.IsNew(page) {
			for s := range heap.NumSlots(page) {
				if raw, err := heap.Tuple(page, uint16(s)); err == nil {
					fn(heap.TID{Block: blk, Slot: uint16(s)}, raw)
				}
			}
		}
		buf.RUnlock()
		buf.Release()
	}
}

// chunkTuples counts the chunk tuples on the heap's pages.
func chunkTuples(t *testing.T, db *DB) int {
	t.Helper()
	n := 0
	eachHeapTuple(t, db, func(_ heap.TID, raw []byte) {
		if heap.TupleInfomask(raw)&heap.Chunk != 0 {
			n++
		}
	})
	return n
}

// TestLostChunkDeleteAndOverwrite: a key whose newest version reads but
// whose out-of-line value lost a chunk (its page fails its checks, or
// zero_damaged_pages read it as empty) can be deleted and overwritten:
// Delete, Put, UpdatePrefix (whose function learns the value is
// unreadable when the lost chunk holds its first bytes, and is not
// stopped by a later one) and DeleteRangePrefix need none of the old
// chunks. Get and Update keep failing, naming the chunk's file and
// offset. Vacuum then frees the old versions and the chunks left of them
// (the damaged pages once zero_damaged_pages gives them up), and Verify
// finds nothing; a restart keeps it so.
func TestLostChunkDeleteAndOverwrite(t *testing.T) {
	for _, zeroed := range []bool{false, true} {
		t.Run(fmt.Sprintf("zero_damaged_pages=%v", zeroed), func(t *testing.T) {
			testLostChunk(t, zeroed)
		})
	}
}

func testLostChunk(t *testing.T, zeroed bool) {
	ctx := context.Background()
	dir := t.TempDir()
	three := 3 * chunkSize // three data chunks, each filling a page
	vals := map[string]*lostChunkValue{
		"keep":         {size: three, chunk: 1},
		"del-first":    {size: three, chunk: 0},
		"del-mid":      {size: three, chunk: 1},
		"put-first":    {size: three, chunk: 0},
		"range-first":  {size: three, chunk: 0},
		"range-mid":    {size: three, chunk: 2},
		"large-middle": {size: 2 << 20, chunk: 100}, // through a directory
	}
	lostChunkState(t, dir, vals)
	o := Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1, ZeroDamagedPages: zeroed}
	db := openTest(t, dir, o)
	defer func() { db.Close() }()

	// Reads of the values fail, naming the lost chunk's file and offset.
	for _, k := range []string{"keep", "del-first", "large-middle"} {
		v := vals[k]
		err := db.View(ctx, func(tx *Txn) error { _, err := tx.Get([]byte(k)); return err })
		where := fmt.Sprintf("%s at offset %d (block %d)", filepath.Join(heapDir, "00000000"), int64(v.blk)*heap.PageSize, v.blk)
		if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), where) {
			t.Fatalf("Get of %s, whose chunk %d was lost: %v; want ErrCorruption naming %s", k, v.chunk, err, where)
		}
		if zeroed && !strings.Contains(err.Error(), "zero_damaged_pages") {
			t.Fatalf("Get of %s: %v; want the page named as read as empty", k, err)
		}
	}
	// Update reads the whole value: it fails and aborts its transaction.
	tx, err := db.Begin(ctx, TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = tx.Update([]byte("keep"), func([]byte, bool) ([]byte, error) { t.Fatal("Update's function ran"); return nil, nil })
	if !errors.Is(err, ErrCorruption) {
		t.Fatalf("Update of keep: %v", err)
	}
	tx.Rollback()

	errSkip := errors.New("skip")
	prefixOf := func(k string) (prefix []byte, length int, found bool, unreadable error) {
		err := db.Update(ctx, func(tx *Txn) error {
			err := tx.UpdatePrefix([]byte(k), 16, func(p []byte, l int, f bool, u error) ([]byte, error) {
				prefix, length, found, unreadable = p, l, f, u
				return nil, errSkip
			})
			if !errors.Is(err, errSkip) {
				return fmt.Errorf("UpdatePrefix of %s: %v, want the function's error", k, err)
			}
			return tx.Delete([]byte(k))
		})
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	// The first chunk lost: the function hears so, and the key goes.
	if p, l, f, u := prefixOf("del-first"); !f || p != nil || l != 0 || !errors.Is(u, ErrCorruption) || !strings.Contains(u.Error(), fmt.Sprintf("(block %d)", vals["del-first"].blk)) {
		t.Fatalf("UpdatePrefix of del-first: prefix %q, length %d, found %v, unreadable %v", p, l, f, u)
	}
	// A later chunk lost: the first bytes read as ever.
	if p, l, f, u := prefixOf("del-mid"); !f || !bytes.Equal(p, vals["del-mid"].val[:16]) || l != three || u != nil {
		t.Fatalf("UpdatePrefix of del-mid: prefix %x, length %d, found %v, unreadable %v", p, l, f, u)
	}
	mustPut(t, db, "put-first", "new")
	mustDelete(t, db, "large-middle")
	type seen struct {
		prefix     []byte
		length     int
		unreadable error
	}
	got := map[string]seen{}
	if err := db.Update(ctx, func(tx *Txn) error {
		n, err := tx.DeleteRangePrefix([]byte("range-"), []byte("range."), 16, func(k, p []byte, l int, u error) {
			got[string(k)] = seen{p, l, u}
		})
		if err == nil && n != 2 {
			err = fmt.Errorf("deleted %d keys, want 2", n)
		}
		return err
	}); err != nil {
		t.Fatalf("DeleteRangePrefix: %v", err)
	}
	if s := got["range-first"]; s.prefix != nil || !errors.Is(s.unreadable, ErrCorruption) {
		t.Fatalf("DeleteRangePrefix gave range-first %+v", s)
	}
	if s := got["range-mid"]; !bytes.Equal(s.prefix, vals["range-mid"].val[:16]) || s.length != three || s.unreadable != nil {
		t.Fatalf("DeleteRangePrefix gave range-mid %+v", s)
	}
	for _, k := range []string{"del-first", "del-mid", "large-middle", "range-first", "range-mid"} {
		if _, ok := get(t, db, k); ok {
			t.Fatalf("%s found after its delete", k)
		}
	}
	if v, ok := get(t, db, "put-first"); !ok || v != "new" {
		t.Fatalf("put-first after Put: %q, %v", v, ok)
	}

	if !zeroed {
		// Vacuum reads every page it does not skip, and fails on a
		// damaged one until zero_damaged_pages gives it up.
		if _, err := db.Vacuum(ctx); !errors.Is(err, ErrCorruption) {
			t.Fatalf("vacuum over damaged pages: %v", err)
		}
		db.SetZeroDamagedPages(true)
	}
	mustDelete(t, db, "keep")
	st, err := db.Vacuum(ctx)
	if err != nil {
		t.Fatalf("vacuum: %v", err)
	}
	// Every chunk but the lost ones: two of each value of three, and
	// the large value's data chunks but one, and its directory.
	large := (2<<20 + largeChunkSize - 1) / largeChunkSize
	if want := uint64(6*2 + large - 1 + 1); st.ChunksRemoved != want {
		t.Fatalf("vacuum freed %d chunks, want %d: %+v", st.ChunksRemoved, want, st)
	}
	if n := chunkTuples(t, db); n != 0 {
		t.Fatalf("%d chunk tuples left after vacuum", n)
	}
	mustVerify(t, db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	o.ZeroDamagedPages = false
	db = openTest(t, dir, o)
	db.waitOpenScan()
	if d := db.Damage(); d.DamagedPages != 0 {
		t.Fatalf("damage after vacuum and a restart: %+v", d)
	}
	for k := range vals {
		v, ok := get(t, db, k)
		if want := k == "put-first"; ok != want || (ok && v != "new") {
			t.Fatalf("after a restart %s reads %q, %v", k, v, ok)
		}
	}
	if v, ok := get(t, db, "small"); !ok || v != "s" {
		t.Fatalf("small after a restart: %q, %v", v, ok)
	}
	mustVerify(t, db)
}

// TestLostChunkPastHeapEnd: the last page of the heap held a chunk of a
// value and was read as empty under zero_damaged_pages; vacuum cuts the
// heap's empty tail, and a read of the value then fails naming the block
// past the heap's end, not with the buffer pool's bare error, while a
// Delete still removes the key.
func TestLostChunkPastHeapEnd(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	o := Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1}
	db := openTest(t, dir, o)
	// A second version of the value: its chunks go past the first's
	// version tuple, at the heap's end.
	mustPut(t, db, "big", string(patterned(3*chunkSize, 1)))
	mustPut(t, db, "big", string(patterned(3*chunkSize, 2)))
	_, ptr := rawPointer(t, db, "big")
	tids, err := chunkTIDs(ptr)
	if err != nil {
		t.Fatal(err)
	}
	blk := tids[2].Block
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	tearBlock(t, dir, blk)
	o.ZeroDamagedPages = true
	db = openTest(t, dir, o)
	defer db.Close()
	if db.pool.NBlocks() != blk+1 {
		t.Fatalf("the lost chunk is on block %d of %d: the test no longer loses the heap's last page", blk, db.pool.NBlocks())
	}
	if _, err := db.Vacuum(ctx); err != nil {
		t.Fatal(err)
	}
	if db.pool.NBlocks() > blk {
		t.Fatalf("vacuum left %d blocks: the test no longer cuts the lost page off", db.pool.NBlocks())
	}
	err = db.View(ctx, func(tx *Txn) error { _, err := tx.Get([]byte("big")); return err })
	if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), fmt.Sprintf("(block %d)", blk)) || !strings.Contains(err.Error(), "past the heap's end") {
		t.Fatalf("Get of a value whose chunk's page vacuum cut off: %v", err)
	}
	mustDelete(t, db, "big")
	if _, err := db.Vacuum(ctx); err != nil {
		t.Fatal(err)
	}
	if n := chunkTuples(t, db); n != 0 {
		t.Fatalf("%d chunk tuples left after vacuum", n)
	}
	mustVerify(t, db)
}

// TestAbortedChunkOnDamagedPageLosesNothing: a key's newest version is a
// large overwrite whose transaction aborted (rolled back, a reader having
// hinted it so, or crashed: in progress at a checkpoint and never ended),
// and a page holding a chunk of that aborted value fails its checks.
// Open's check of the pages finds the damage, but does not count the key
// lost: nobody reads the aborted value, and the key reads its committed
// one, whose chunks are intact.
func TestAbortedChunkOnDamagedPageLosesNothing(t *testing.T) {
	for _, crashed := range []bool{false, true} {
		t.Run(fmt.Sprintf("crashed=%v", crashed), func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			o := Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1}
			db := openTest(t, dir, o)
			committed := patterned(3*chunkSize, 1)
			mustPut(t, db, "k", string(committed))
			tx, err := db.Begin(ctx, TxnOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := tx.Put([]byte("k"), patterned(3*chunkSize, 2)); err != nil {
				t.Fatal(err)
			}
			_, ptr := rawPointer(t, db, "k") // the aborted write's version
			tids, err := chunkTIDs(ptr)
			if err != nil {
				t.Fatal(err)
			}
			blk := tids[1].Block
			aborted := db.idx.get([]byte("k")).headTID()
			if aborted.Block == blk {
				t.Fatalf("the chunk shares block %d with the version: the test would lose the version", blk)
			}
			dataDir := dir
			if crashed {
				// A checkpoint writes the chunks out; the copy is what
				// a crash leaves, the write never ended.
				if err := db.Checkpoint(); err != nil {
					t.Fatal(err)
				}
				dataDir = t.TempDir()
				copyDir(t, dir, dataDir)
				tx.Rollback()
				db.Close()
			} else {
				if err := tx.Rollback(); err != nil {
					t.Fatal(err)
				}
				// A reader walks past the aborted version, hinting it.
				if v, ok := get(t, db, "k"); !ok || v != string(committed) {
					t.Fatalf("k after the rollback: %d bytes, %v", len(v), ok)
				}
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
			}
			tearBlock(t, dataDir, blk)
			db = openTest(t, dataDir, o)
			defer db.Close()
			db.waitOpenScan()
			if head := db.idx.get([]byte("k")).headTID(); head != aborted {
				t.Fatalf("the index names %s for k, not the aborted version %s: the test no longer checks that version's chunks", head, aborted)
			}
			if d := db.Damage(); d.CorruptPages != 1 || d.KeysLost != 0 {
				t.Fatalf("damage after reopening: %+v; want one damaged page and no key lost", d)
			}
			if v, ok := get(t, db, "k"); !ok || v != string(committed) {
				t.Fatalf("k after reopening: %d bytes, %v; want its committed value", len(v), ok)
			}
		})
	}
}
