package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"mvkv/internal/heap"
	"mvkv/vfs"
	"mvkv/wal"
)

// The crash ladder of crashladder_test.go with a vacuum (freezing
// everything below the horizon) after every few transactions: a crash at
// any file-system operation, vacuum's pruning records and page writes
// included, must recover to a commit prefix that verifies (chains intact,
// index heads right), also after a crash during recovery. The buffer pool
// is the smallest allowed, so pages (hinted and pruned ones included) are
// evicted and written between checkpoints.
func TestVacuumCrashLadder(t *testing.T) {
	seeds := []uint64{testSeed(t, *ladderSeed)}
	for _, seed := range seeds {
		work := ladderWorkload(seed, max(*ladderTxns/2, 10))
		sample := *ladderSample
		if sample <= 0 {
			sample = 3
			if raceEnabled {
				sample = 32 // .ci/run checks every point without -race
			}
		}
		points, checked, removed, err := vacuumCrashLadder(seed, work, sample)
		if err != nil {
			t.Fatalf("seed %d (-crash.seed=%d reproduces): %v", seed, seed, err)
		}
		if removed == 0 {
			t.Fatalf("seed %d: vacuum removed nothing; the ladder tested nothing of it", seed)
		}
		t.Logf("seed %d: %d operations, %d crash copies checked, %d versions removed", seed, points, checked, removed)
	}
}

func vacuumCrashLadder(seed uint64, work []ladderTxn, sample int) (points, checked int, removed uint64, failure error) {
	states, commitOf := ladderStates(ladderState{}, work)
	m := vfs.NewMemFS()
	m.MkdirAll("/db")
	m.SyncDir("/")
	opts := Options{FS: m, CheckpointTimeout: -1, WALWriterDelay: 5 * time.Millisecond,
		SharedBuffers: 16 * heap.PageSize, WALSegmentSize: 1 << 20, Autovacuum: noAutovacuum, VacuumFreezeMinAge: -1}
	db, err := Open("/db", opts)
	if err != nil {
		return 0, 0, 0, err
	}
	var prog ladderProgress
	m.SetOpHook(ladderCrashHook(seed, sample, states, rand.New(rand.NewPCG(seed, 8)), &prog, &points, &checked, &failure))
	ctx := context.Background()
	for i, w := range work {
		if i == len(work)/3 {
			if err := db.Checkpoint(); err != nil {
				failure = err
				break
			}
		}
		if i%7 == 6 {
			st, err := db.Vacuum(ctx)
			if err != nil {
				failure = fmt.Errorf("vacuum before txn %d: %v", i, err)
				break
			}
			removed += st.TuplesRemoved
		}
		committed, err := runLadderTxn(ctx, db, i, w, func() { prog.begun(commitOf[i]) })
		if err != nil {
			failure = err
			break
		}
		if !committed {
			continue
		}
		if w.sync {
			prog.acked(commitOf[i])
		}
	}
	if failure == nil {
		st, err := db.Vacuum(ctx)
		removed += st.TuplesRemoved
		if err != nil {
			failure = err
		}
	}
	db.Close()
	m.SetOpHook(nil)
	return points, checked, removed, failure
}

// A hint bit never reaches disk ahead of the commit record it relies on:
// an asynchronous commit is read (which would hint it) and its page written
// and synced while the commit record is still in the WAL buffer; the crash
// copy's heap must not say committed, and recovery must not show the row.
// Once the WAL is flushed, the next read sets the hint and the hint is what
// reaches disk.
func TestHintBitWaitsForCommitRecord(t *testing.T) {
	m := vfs.NewMemFS()
	m.MkdirAll("/db")
	m.SyncDir("/")
	opts := Options{FS: m, CheckpointTimeout: -1, WALWriterDelay: time.Hour, Autovacuum: noAutovacuum, SharedBuffers: 2 << 20, WALSegmentSize: 1 << 20}
	db, err := Open("/db", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	off := SyncCommitOff
	tx, _ := db.Begin(ctx, TxnOptions{SynchronousCommit: &off})
	if err := tx.Put([]byte("k"), []byte("async")); err != nil {
		t.Fatal(err)
	}
	// The insert is durable, so writing its page flushes no WAL; the
	// commit record stays in the buffer (the WAL writer sleeps an hour).
	if err := db.wal.Flush(db.wal.InsertLSN()); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	tid := db.idx.get([]byte("k")).headTID()
	if v, ok := get(t, db, "k"); !ok || v != "async" {
		t.Fatalf("k = %q, %v", v, ok)
	}
	// Write the heap page and sync it, as an eviction and a checkpoint's
	// sync would.
	if err := db.pool.FlushAll(); err != nil {
		t.Fatal(err)
	}
	onDisk := func(c *vfs.MemFS) uint16 {
		t.Helper()
		st, err := heap.OpenStorage(c, "/db/heap")
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		page := make([]byte, heap.PageSize)
		if err := st.ReadBlock(tid.Block, page); err != nil {
			t.Fatal(err)
		}
		raw, err := heap.Tuple(page, tid.Slot)
		if err != nil {
			t.Fatal(err)
		}
		return heap.TupleInfomask(raw)
	}
	crash := m.CrashCopy(vfs.DropUnsynced, nil)
	if mask := onDisk(crash); mask&heap.XminCommitted != 0 {
		t.Fatalf("committed hint on disk (infomask %#x) before the commit record is durable", mask)
	}
	if db.Stats().Heap.HintBitsSet != 0 {
		t.Fatalf("%d hint bits set before the commit record was flushed", db.Stats().Heap.HintBitsSet)
	}
	re, err := Open("/db", Options{FS: crash, Autovacuum: noAutovacuum, SharedBuffers: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := get(t, re, "k"); ok {
		t.Error("an asynchronous commit lost in the crash is visible after recovery")
	}
	re.Close()

	if err := db.wal.Flush(db.wal.InsertLSN()); err != nil {
		t.Fatal(err)
	}
	get(t, db, "k")
	if db.Stats().Heap.HintBitsSet == 0 {
		t.Fatal("no hint bit set once the commit record was durable")
	}
	if err := db.pool.FlushAll(); err != nil {
		t.Fatal(err)
	}
	if mask := onDisk(m.CrashCopy(vfs.DropUnsynced, nil)); mask&heap.XminCommitted == 0 {
		t.Errorf("hint not on disk after the flush (infomask %#x)", mask)
	}
	// A reader now finds the hint and skips the CLOG.
	before := db.Stats()
	get(t, db, "k")
	if d := db.Stats().Sub(before); d.Heap.HintHits == 0 || d.CLOG.Lookups != 0 {
		t.Errorf("read with the hint set: %d hint hits, %d CLOG lookups", d.Heap.HintHits, d.CLOG.Lookups)
	}
}

// The first hint-only change to a page after a checkpoint logs a full-page
// image, so the page torn while being written with the hint is rebuilt.
func TestHintBitLogsFullPageImage(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir, Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1})
	mustPut(t, db, "k", "v")
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	before := db.Stats()
	if v, ok := get(t, db, "k"); !ok || v != "v" {
		t.Fatalf("k = %q, %v", v, ok)
	}
	d := db.Stats().Sub(before)
	if d.Heap.HintBitsSet == 0 || d.Checkpoint.FullPageImages != 1 {
		t.Fatalf("first hint after a checkpoint: %d hints, %d full-page images; want some and 1", d.Heap.HintBitsSet, d.Checkpoint.FullPageImages)
	}
	blk := db.idx.get([]byte("k")).headTID().Block
	// Write the hinted page, then crash without a checkpoint: the copy on
	// disk is torn, and only the FPI_FOR_HINT record can rebuild it.
	if err := db.pool.FlushAll(); err != nil {
		t.Fatal(err)
	}
	crash := t.TempDir()
	copyDir(t, dir, crash)
	db.Close()
	tearBlock(t, crash, blk)
	db = openTest(t, crash, Options{Autovacuum: noAutovacuum})
	defer db.Close()
	if v, ok := get(t, db, "k"); !ok || v != "v" {
		t.Fatalf("after tearing the hinted page: k = %q, %v", v, ok)
	}
	mustVerify(t, db)
}

// TestVacuumCrashManyHeadsOnePage crashes at every file-system operation
// (one in -crash.sample if given, one in 6 under -race) of one vacuum that
// moves and drops many index heads of one page, and of the flush and
// checkpoint after it: the heads of five keys move off their rolled-back
// versions to the committed ones below, and fifty deleted keys leave the
// index. The page's changes are logged in one INDEX_HEADS record before
// its pruning record; every crash copy, in both crash modes (and with a
// crash during its recovery), must recover the same keys, with the index
// file of the checkpoint before the vacuum and the records after it, and
// verify.
func TestVacuumCrashManyHeadsOnePage(t *testing.T) {
	m := vfs.NewMemFS()
	m.MkdirAll("/db")
	m.SyncDir("/")
	db, err := Open("/db", Options{FS: m, CheckpointTimeout: -1, SharedBuffers: 16 * heap.PageSize,
		WALSegmentSize: 1 << 20, Autovacuum: noAutovacuum})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	const keys, kept, rolledBack = 60, 10, 5
	want := ladderState{}
	if err := db.Update(ctx, func(tx *Txn) error {
		for i := range keys {
			k, v := fmt.Sprintf("m%02d", i), fmt.Sprintf("v%02d", i)
			if i < kept {
				want[k] = v
			}
			if err := tx.Put([]byte(k), []byte(v)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	tx, err := db.Begin(ctx, TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range rolledBack {
		if err := tx.Put(fmt.Appendf(nil, "m%02d", i), []byte("rolled back")); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := db.Update(ctx, func(tx *Txn) error {
		for i := kept; i < keys; i++ {
			if err := tx.Delete(fmt.Appendf(nil, "m%02d", i)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	sample := *ladderSample
	if sample <= 0 {
		sample = 1
		if raceEnabled {
			sample = 6 // every point without -race
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var points, checked int
	var failure error
	m.SetOpHook(func(p vfs.CrashPoint) {
		points++
		if failure != nil || rng.IntN(sample) != 0 {
			return
		}
		for _, mode := range []vfs.CrashMode{vfs.DropUnsynced, vfs.TearLast} {
			checked++
			c := p.CrashCopy(mode, rand.New(rand.NewPCG(3, uint64(p.Op.Index))))
			if err := checkRecovered(c, []ladderState{want}, 0, 0, rng); err != nil {
				failure = fmt.Errorf("crash after op %v (%v): %v", p.Op, mode, err)
				return
			}
		}
	})
	// The vacuum logs without flushing: the crash points go on through
	// the flush of its records (a torn write may keep the INDEX_HEADS
	// record and lose the pruning record after it) and the checkpoint
	// that writes its page and the index file.
	st, err := db.Vacuum(ctx)
	if err == nil {
		err = db.wal.Flush(db.wal.InsertLSN())
	}
	if err == nil {
		err = db.Checkpoint()
	}
	m.SetOpHook(nil)
	if err != nil {
		t.Fatal(err)
	}
	if failure != nil {
		t.Fatal(failure)
	}
	heads := keys - kept + rolledBack
	if st.KeysRemoved != keys-kept || st.TuplesRemoved != uint64(heads) {
		t.Fatalf("vacuum removed %d keys and %d versions, want %d and %d: %+v", st.KeysRemoved, st.TuplesRemoved, keys-kept, heads, st)
	}
	// The vacuum's head changes (the only ones in the WAL), in records of
	// a page each.
	r, err := wal.NewReader(m, "/db/"+walDir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	records, changes := 0, 0
	for {
		rec, err := r.Next()
		if err != nil {
			break
		}
		switch rec.Type {
		case recIndexHead:
			t.Fatalf("vacuum logged an INDEX_HEAD record: %s", describeRecord(rec))
		case recIndexHeads:
			cs, err := decodeIndexHeads(rec.Data)
			if err != nil {
				t.Fatal(err)
			}
			records++
			changes += len(cs)
		}
	}
	if changes != heads || uint64(records) > st.PagesCompacted {
		t.Fatalf("vacuum logged %d head changes in %d INDEX_HEADS records; want %d changes in a record for each of the %d pages it compacted", changes, records, heads, st.PagesCompacted)
	}
	t.Logf("%d file-system operations, %d crash copies checked, %d head changes in %d records", points, checked, changes, records)
}
