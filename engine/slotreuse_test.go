package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"mvkv/clog"
	"mvkv/internal/heap"
)

// Slots reused between two steps that each read a slot: vacuum's two
// passes, a writer's choice of predecessor and its placement, a reader's
// header copy and its CLOG lookup. Each test replays one interleaving step
// by step with the engine's own functions; each failed before the fix it
// names.

// vacuumPassOne runs the first pass of a vacuum over the whole heap, as a
// run does, and returns the run for its second pass. The caller holds
// db.vac.mu.
func vacuumPassOne(t *testing.T, db *DB) *vacuumRun {
	t.Helper()
	v := &vacuumRun{db: db, ctx: context.Background(), ring: db.pool.NewRing(vacuumRingFrames), work: map[uint32]*pageWork{}}
	v.st.OldestXmin = db.oldestXmin()
	v.st.FreezeCutoff = v.st.OldestXmin - min(v.st.OldestXmin, uint64(db.opts.VacuumFreezeMinAge))
	for blk := uint32(0); blk < db.pool.NBlocks(); blk++ {
		if err := db.whileOpen(func() error { av, _ := db.pageAllVisible(blk); _, err := v.scanPage(blk, av); return err }); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

// pruneBlockForTest prunes block blk as a reader that finds it full would,
// and returns what the prune did.
func pruneBlockForTest(t *testing.T, db *DB, blk uint32) pruneResult {
	t.Helper()
	return pruneBlockByForTest(t, db, blk, pruneByRead)
}

// pruneBlockByForTest is pruneBlockForTest with the cause the statistics
// count the prune under.
func pruneBlockByForTest(t *testing.T, db *DB, blk uint32, cause pruneCause) pruneResult {
	t.Helper()
	buf, err := db.pool.Get(blk)
	if err != nil {
		t.Fatal(err)
	}
	db.ckptInterlock.RLock()
	buf.Lock()
	res, err := db.prunePageLocked(buf, cause, nil)
	buf.Unlock()
	db.ckptInterlock.RUnlock()
	buf.Release()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("prune of block %d: removed %d", blk, res.removed)
	return res
}

// TestVacuumPassTwoKeepsNewVersionInDeletedHeadSlot: pass 1 lists a head
// whose key was deleted below the horizon; before pass 2 the key is
// inserted again (the old head is no longer the head, and pruning frees
// it) and updated, and the update's version lands in the freed slot. Pass
// 2 must see that the slot holds another version (its xmin) and leave it:
// it used to free it and drop the key's index entry, losing a committed
// value without an error, past a reopen, with Verify finding nothing.
func TestVacuumPassTwoKeepsNewVersionInDeletedHeadSlot(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir, Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1})
	mustPut(t, db, "k", "v1")
	mustDelete(t, db, "k")
	d := db.idx.get([]byte("k")).headTID()
	t.Logf("deleted head at %s", d)

	db.vac.mu.Lock()
	v := vacuumPassOne(t, db)
	t.Logf("pass 1 listed heads %+v", v.work[d.Block].heads)

	// Inserted again (v2), the page pruned, and v3 in the head's slot.
	putPrunePut(t, db, "v2", "v3", d)
	passTwoThenRead(t, db, dir, v, d.Block, "v3")
}

// TestVacuumPassTwoKeepsNewVersionInAbortedHeadSlot: as the test above,
// for a head pass 1 lists because its inserter aborted: the key is updated
// (the aborted version is pruned) and updated again into the aborted
// head's slot before pass 2 reaches the page. Pass 2 used to find "its"
// head TID still in the index and free the key's committed newest version
// (every later read failed with data corruption).
func TestVacuumPassTwoKeepsNewVersionInAbortedHeadSlot(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir, Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1})
	ctx := context.Background()
	mustPut(t, db, "k", "v1") // V1
	// T2 updates k and rolls back: an aborted head A above V1.
	tx, _ := db.Begin(ctx, TxnOptions{})
	if err := tx.Put([]byte("k"), []byte("aborted")); err != nil {
		t.Fatal(err)
	}
	tx.Rollback()
	a := db.idx.get([]byte("k")).headTID()
	t.Logf("aborted head A at %s", a)

	// Vacuum, pass 1 only (vacuum.go run's first loop).
	db.vac.mu.Lock()
	v := vacuumPassOne(t, db)
	t.Logf("pass 1 listed heads %+v", v.work[a.Block].heads)

	// Meanwhile: T3 updates k (A is no longer the head and is pruned, as a
	// reader or writer that finds the page full would prune it), then T4
	// updates k and its version lands in A's freed slot.
	// (An open snapshot keeps V1, so that A's slot is the lowest one
	// the prune frees.)
	snap, _ := db.Begin(ctx, TxnOptions{Isolation: RepeatableRead, ReadOnly: true})
	if _, err := snap.Get([]byte("k")); err != nil {
		t.Fatal(err)
	}
	putPrunePut(t, db, "v3", "v4", a)

	snap.Rollback()
	passTwoThenRead(t, db, dir, v, a.Block, "v4")
}

// putPrunePut writes first to key k, prunes the page of slot (where k's
// listed head was), writes second to k, and wants second's version in
// slot: the interleaving the pass-two tests replay between vacuum's passes.
func putPrunePut(t *testing.T, db *DB, first, second string, slot heap.TID) {
	t.Helper()
	mustPut(t, db, "k", first)
	t.Logf("%s at %s", first, db.idx.get([]byte("k")).headTID())
	pruneBlockForTest(t, db, slot.Block)
	mustPut(t, db, "k", second)
	h := db.idx.get([]byte("k")).headTID()
	t.Logf("%s (the head) at %s", second, h)
	if h != slot {
		t.Fatalf("%s did not land in slot %s: placement changed, rebuild the test", second, slot)
	}
}

// passTwoThenRead runs vacuum's second pass over blk with the work pass
// one listed (the caller holds vacuum off; released here), then wants key
// k to read want (its committed newest value, which pass 2 once freed),
// Verify to pass, and k to read want again after a reopen. It closes db.
func passTwoThenRead(t *testing.T, db *DB, dir string, v *vacuumRun, blk uint32, want string) {
	t.Helper()
	if err := db.whileOpen(func() error { return v.revisit(blk, v.work[blk], true) }); err != nil {
		t.Fatal(err)
	}
	db.vac.mu.Unlock()
	read := func(db *DB, when string) {
		t.Helper()
		var got []byte
		err := db.View(context.Background(), func(tx *Txn) error {
			var err error
			got, err = tx.Get([]byte("k"))
			return err
		})
		if err != nil || string(got) != want {
			t.Errorf("%s: Get(k) = %q, %v; want %q, the committed newest value", when, got, err, want)
		}
	}
	read(db, "after pass 2")
	if rep, err := db.Verify(); err != nil || !rep.OK() {
		t.Errorf("Verify after pass 2: %v %v", err, rep.Problems)
	}
	db.Close()
	db = openTest(t, dir, Options{Autovacuum: noAutovacuum})
	defer db.Close()
	read(db, "after a reopen")
}

// alignXid makes the next transaction's xid a multiple of 8, so that every
// new key of the test goes to the same insert target (placeTuple's slot is
// xid % nInsertTargets).
func alignXid(db *DB) {
	db.procs.mu.Lock()
	db.procs.nextXid = (db.procs.nextXid + 7) &^ 7
	db.procs.mu.Unlock()
}

func alignedPut(t *testing.T, db *DB, k, v string) {
	t.Helper()
	alignXid(db)
	mustPut(t, db, k, v)
}

func freeSpaceOf(t *testing.T, db *DB, blk uint32) int {
	buf, err := db.pool.Get(blk)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Release()
	buf.RLock()
	defer buf.RUnlock()
	return heap.FreeSpace(buf.Page())
}

// TestNewVersionNeverNamesItsOwnSlot: a key deleted, re-inserted by a
// transaction that rolls back, then written twice by one transaction W
// whose first new version lands, after W's own prune of the page, in the
// slot of the deleted version it chose as its predecessor. Its Prev named
// its own slot, and W's second write marked it Updated with xmax = xmin =
// W, an update link no walk could leave: an older snapshot (which must see
// the key as deleted) walked it for seconds and failed with data
// corruption, and after a rollback so did every reader and writer.
func TestNewVersionNeverNamesItsOwnSlot(t *testing.T) {
	for _, abort := range []bool{false, true} {
		t.Run(fmt.Sprint("abort=", abort), func(t *testing.T) { selfLinkCase(t, abort) })
	}
}

func selfLinkCase(t *testing.T, abort bool) {
	db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1})
	defer db.Close()
	ctx := context.Background()
	big := strings.Repeat("v", 500)
	alignedPut(t, db, "k", big) // V0, block 0
	e := db.idx.get([]byte("k"))
	if e.headTID().Block != 0 {
		t.Fatalf("k at %s", e.headTID())
	}
	tupSize := heap.TupleHeaderSize + 1 + len(big) + 8 + heap.ItemIDSize
	for i := 0; freeSpaceOf(t, db, 0) >= 2*tupSize; i++ {
		alignedPut(t, db, fmt.Sprintf("f%02d", i), big)
	}
	// A last filler that leaves about 100 bytes.
	last := freeSpaceOf(t, db, 0) - 100 - heap.TupleHeaderSize - 3 - heap.ItemIDSize
	alignedPut(t, db, "fzz", strings.Repeat("w", last))
	for _, k := range []string{"f00", "f01", "f02", "fzz"} {
		if b := db.idx.get([]byte(k)).headTID().Block; b != 0 {
			t.Fatalf("%s on block %d", k, b)
		}
	}
	// H: an older snapshot, open while k is deleted and re-inserted.
	h, _ := db.Begin(ctx, TxnOptions{Isolation: RepeatableRead, ReadOnly: true})
	if _, err := h.Get([]byte("nokey")); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	// D deletes k.
	alignXid(db)
	mustDelete(t, db, "k")
	// T re-inserts k with a small value and rolls back: an aborted head
	// above V0, so V0 is no longer its key's index head.
	alignXid(db)
	tx, _ := db.Begin(ctx, TxnOptions{})
	if err := tx.Put([]byte("k"), []byte("a")); err != nil {
		t.Fatal(err)
	}
	tx.Rollback()
	// Three fillers are deleted too (minPrune xmaxes on the page).
	for _, k := range []string{"f00", "f01", "f02"} {
		alignXid(db)
		mustDelete(t, db, k)
	}
	t.Logf("head after rollback %s, block 0 free %d", db.idx.get([]byte("k")).headTID(), freeSpaceOf(t, db, 0))

	// A reader computed the horizon a moment ago, while H was open
	// (recentHorizon caches it for a millisecond).
	t.Logf("horizon %d", db.recentHorizon())
	h.Rollback()
	// S: a snapshot in which k is deleted.
	s, _ := db.Begin(ctx, TxnOptions{Isolation: RepeatableRead, ReadOnly: true})
	defer s.Rollback()
	if _, err := s.Get([]byte("nokey")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("S: %v", err)
	}
	st := db.Stats()
	t.Logf("before W: block 0 free %d, slot 0 state %v, prunes by read %d by update %d, pending %d", freeSpaceOf(t, db, 0), slotState(t, db, heap.TID{Block: 0, Slot: 0}), st.Heap.PrunesByRead, st.Heap.PrunesByUpdate, db.pending.of(0).Load())
	// W writes k twice.
	alignXid(db)
	w, _ := db.Begin(ctx, TxnOptions{})
	if err := w.Put([]byte("k"), []byte(big)); err != nil {
		t.Fatal(err)
	}
	v1 := db.idx.get([]byte("k")).headTID()
	v, err := db.readVersion(v1, "k", false)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("W's first version at %s: xmin %d prev %s", v1, v.hdr.Xmin, v.hdr.Prev)
	if v.hdr.Prev == v1 {
		t.Errorf("W's first version at %s names its own slot as its predecessor", v1)
	}
	if err := w.Put([]byte("k"), []byte("second")); err != nil {
		t.Fatal(err)
	}
	if abort {
		w.Rollback()
	} else if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	v, _ = db.readVersion(v1, "k", false)
	t.Logf("after W's second write: %s xmin %d xmax %d infomask %#x prev %s", v1, v.hdr.Xmin, v.hdr.Xmax, v.hdr.Infomask, v.hdr.Prev)

	if abort {
		begin := time.Now()
		err := db.Update(ctx, func(tx *Txn) error { return tx.Put([]byte("k"), []byte("new")) })
		t.Logf("writer after W's rollback: %v after %v", err, time.Since(begin))
		begin = time.Now()
		vs, err := db.Vacuum(ctx)
		t.Logf("vacuum: %v after %v (removed %d)", err, time.Since(begin), vs.TuplesRemoved)
	}
	begin := time.Now()
	_, err = s.Get([]byte("k"))
	t.Logf("S: Get(k) took %v", time.Since(begin))
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("S: Get(k) = %v, want ErrNotFound", err)
	}
	if abort {
		// A fresh reader, and a writer.
		begin = time.Now()
		_, ok := get(t, db, "k")
		t.Logf("new reader: found %v after %v", ok, time.Since(begin))
	}
	if rep, err := db.Verify(); err != nil || !rep.OK() {
		t.Errorf("Verify: %v %v", err, rep.Problems)
	} else {
		t.Logf("Verify: OK")
	}
}

func slotState(t *testing.T, db *DB, tid heap.TID) heap.LineState {
	buf, err := db.pool.Get(tid.Block)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Release()
	buf.RLock()
	defer buf.RUnlock()
	return heap.SlotState(buf.Page(), tid.Slot)
}

// TestReaderCopyOutlivesCLOGTruncation: a reader's chain walk copies a
// tuple header under the page's share lock, lets the lock go, and only then
// asks the CLOG about the copied xmin. A vacuum that freezes the tuple and
// truncates the CLOG in between used to leave the reader with "xid below
// the truncation point"; it must read the tuple again and find it frozen.
func TestReaderCopyOutlivesCLOGTruncation(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum, VacuumFreezeMinAge: -1})
	defer db.Close()
	mustPut(t, db, "k", "old") // inserted, never read: no hint bits
	perSeg := uint64(clog.XidsPerPage * clog.PagesPerSegment)
	db.procs.mu.Lock()
	db.procs.nextXid = 3 * perSeg
	db.procs.mu.Unlock()
	mustPut(t, db, "other", "x")

	// The reader: a REPEATABLE READ snapshot, the index head, the header copy.
	tx, err := db.Begin(context.Background(), TxnOptions{Isolation: RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	snap, _ := tx.snapshot()
	e := db.idx.get([]byte("k"))
	v, err := db.readVersion(e.headTID(), e.key(), true)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("copied header: xmin %d infomask %#x; snapshot %s", v.hdr.Xmin, v.hdr.Infomask, snap)

	// Vacuum runs in the gap (the reader's snapshot is registered).
	st := mustVacuum(t, db)
	t.Logf("vacuum: OldestXmin %d RelFrozenXid %d, CLOG truncated below %d", st.OldestXmin, st.RelFrozenXid, db.clog.OldestXid())

	// The reader resumes: visibleVersion's visit on the copy.
	ok, err := snap.XidVisible(v.hdr.Xmin, 0, func(uint64) (bool, error) { return db.xminCommitted(&v) })
	if err != nil {
		t.Fatalf("reader's visibility check after vacuum: %v", err)
	}
	if !ok {
		t.Fatalf("version not visible")
	}
}
