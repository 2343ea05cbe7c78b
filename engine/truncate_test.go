package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"mvkv/internal/heap"
	"mvkv/vfs"
	"mvkv/wal"
)

// truncWorkload inserts keep keys, then tail keys with values large enough
// for a few a page (so that they fill the last pages), deletes the tail
// keys, and (after a vacuum, which cuts those pages off) inserts new keys
// that take the same block numbers again and deletes half of them. It
// returns the transactions and the indices before which to vacuum.
func truncWorkload(keep, tail int) (work []ladderTxn, vacuumAt map[int]bool) {
	vacuumAt = map[int]bool{}
	add := func(t ladderTxn) { work = append(work, t) }
	for i := 0; i < keep; i += 4 {
		w := map[string][]byte{}
		for j := i; j < min(i+4, keep); j++ {
			w[fmt.Sprintf("a%03d", j)] = []byte(strings.Repeat("a", 300))
		}
		add(ladderTxn{writes: w, sync: true})
	}
	for i := 0; i < tail; i += 2 {
		add(ladderTxn{writes: map[string][]byte{
			fmt.Sprintf("t%03d", i):   []byte(strings.Repeat(fmt.Sprint(i), 1900)[:1900]),
			fmt.Sprintf("t%03d", i+1): []byte(strings.Repeat(fmt.Sprint(i+1), 1900)[:1900]),
		}, sync: i%4 == 0})
	}
	for i := 0; i < tail; i += 5 {
		w := map[string][]byte{}
		for j := i; j < min(i+5, tail); j++ {
			w[fmt.Sprintf("t%03d", j)] = nil
		}
		add(ladderTxn{writes: w, sync: true})
	}
	vacuumAt[len(work)] = true
	// Updates of kept keys, so that the WAL after the cut touches pages
	// below it too.
	add(ladderTxn{writes: map[string][]byte{"a000": []byte("after the cut"), "a001": nil}, sync: true})
	for i := 0; i < tail; i += 2 {
		add(ladderTxn{writes: map[string][]byte{
			fmt.Sprintf("u%03d", i):   []byte(strings.Repeat("u", 1900)),
			fmt.Sprintf("u%03d", i+1): []byte(strings.Repeat("v", 1900)),
		}, sync: true, rollback: i%10 == 4})
	}
	for i := tail / 2; i < tail; i++ {
		add(ladderTxn{writes: map[string][]byte{fmt.Sprintf("u%03d", i): nil}, sync: true})
	}
	vacuumAt[len(work)] = true
	add(ladderTxn{writes: map[string][]byte{"a002": []byte("last")}, sync: true})
	return work, vacuumAt
}

// TestVacuumTruncatesEmptyTail: vacuum cuts the empty pages at the end of
// the heap off the file, the keys before them stay, new keys take the
// block numbers again, and the database reopens (cleanly and after a
// crash) to the same state and verifies.
func TestVacuumTruncatesEmptyTail(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("crash=%v", crash), func(t *testing.T) {
			m := vfs.NewMemFS()
			m.MkdirAll("/db")
			m.SyncDir("/")
			opts := Options{FS: m, CheckpointTimeout: -1, Autovacuum: noAutovacuum, SharedBuffers: 64 * heap.PageSize}
			db, err := Open("/db", opts)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			put := func(k, v string) { t.Helper(); mustPut(t, db, k, v) }
			for i := range 200 {
				put(fmt.Sprintf("a%03d", i), strings.Repeat("a", 300))
			}
			keepBlocks := db.pool.NBlocks()
			for i := range 200 {
				put(fmt.Sprintf("t%03d", i), strings.Repeat("t", 1900))
			}
			if err := db.Checkpoint(); err != nil {
				t.Fatal(err)
			}
			before := db.pool.NBlocks()
			for i := range 200 {
				mustDelete(t, db, fmt.Sprintf("t%03d", i))
			}
			st, err := db.Vacuum(ctx)
			if err != nil {
				t.Fatal(err)
			}
			after := db.pool.NBlocks()
			if st.PagesTruncated == 0 || after != before-uint32(st.PagesTruncated) || after > keepBlocks+1 {
				t.Fatalf("vacuum truncated %d pages: %d blocks before, %d after, the kept keys fill %d", st.PagesTruncated, before, after, keepBlocks)
			}
			if size := heapFileSize(t, m); size != int64(after)*heap.PageSize {
				t.Fatalf("heap file is %d bytes after the cut to %d blocks", size, after)
			}
			if got := db.Stats().Vacuum.PagesTruncated; got != st.PagesTruncated {
				t.Fatalf("Stats says %d pages truncated, the run %d", got, st.PagesTruncated)
			}
			// New keys take the block numbers again, starting with no
			// visibility map bit.
			for i := range 100 {
				put(fmt.Sprintf("u%03d", i), strings.Repeat("u", 1900))
			}
			if db.pool.NBlocks() <= after {
				t.Fatalf("the heap did not grow again: %d blocks", db.pool.NBlocks())
			}
			for b := after; b < db.pool.NBlocks(); b++ {
				if allVisible(db, b) {
					t.Fatalf("block %d, added again after the cut, is all-visible in the map", b)
				}
			}
			want, err := scanState(db)
			if err != nil {
				t.Fatal(err)
			}
			if len(want) != 300 {
				t.Fatalf("%d keys, want 300", len(want))
			}
			var c *vfs.MemFS
			if crash {
				if err := db.flushWAL(uint64(db.wal.InsertLSN())); err != nil {
					t.Fatal(err)
				}
				c = m.CrashCopy(vfs.DropUnsynced, nil)
			} else {
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
				c = m
			}
			if crash {
				// The heap file cut below the truncation's length: the
				// error says where the length it expects comes from.
				bad := c.Clone()
				f, err := bad.Open("/db/heap/00000000")
				if err != nil {
					t.Fatal(err)
				}
				if err := f.Truncate(int64(after-1) * heap.PageSize); err != nil {
					t.Fatal(err)
				}
				f.Close()
				_, err = Open("/db", Options{FS: bad, CheckpointTimeout: -1, Autovacuum: noAutovacuum})
				if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), "a heap truncation logged after that checkpoint left") {
					t.Fatalf("open with the heap cut below the truncation's length: %v", err)
				}
			}
			db2 := reopenMatches(t, c, want, "")
			if crash && db2.Recovery().IndexRebuildReason != "" {
				t.Fatalf("the index was rebuilt from the heap: %s", db2.Recovery().IndexRebuildReason)
			}
			if !crash {
				db.Close()
			}
		})
	}
}

func heapFileSize(t *testing.T, m *vfs.MemFS) int64 {
	t.Helper()
	b, err := readMemFile(m, "/db/heap/00000000")
	if err != nil {
		t.Fatal(err)
	}
	return int64(len(b))
}

// TestVacuumTruncateOff: with vacuum_truncate off the empty tail stays.
func TestVacuumTruncateOff(t *testing.T) {
	off := false
	db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum, VacuumTruncate: &off})
	ctx := context.Background()
	for i := range 100 {
		mustPut(t, db, fmt.Sprint(i), strings.Repeat("x", 1900))
	}
	for i := range 100 {
		mustDelete(t, db, fmt.Sprint(i))
	}
	n := db.pool.NBlocks()
	st, err := db.Vacuum(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.PagesTruncated != 0 || db.pool.NBlocks() != n {
		t.Fatalf("vacuum_truncate off: %d pages truncated, %d blocks of %d left", st.PagesTruncated, db.pool.NBlocks(), n)
	}
	if v, err := db.CurrentSetting("vacuum_truncate"); err != nil || v != "off" {
		t.Fatalf("CurrentSetting(vacuum_truncate) = %q, %v", v, err)
	}
}

// TestTruncateCrashLadder: the crash ladder over a workload whose vacuums
// cut the heap's empty tail, three pages a step, and whose later inserts
// take the same blocks again: a crash at any file operation, before,
// during and after a cut,
// recovers to a commit prefix that verifies, also with an index file from
// before the cut and after a crash during recovery.
func TestTruncateCrashLadder(t *testing.T) {
	seed := testSeed(t, *ladderSeed)
	sample := *ladderSample
	if sample <= 0 {
		sample = 2
		if raceEnabled {
			sample = 20
		}
	}
	// Steps of three pages, so that a cut takes several records.
	defer func(n uint32) { truncateStep = n }(truncateStep)
	truncateStep = 3
	work, vacuumAt := truncWorkload(60, 40)
	states, commitOf := ladderStates(ladderState{}, work)
	m := vfs.NewMemFS()
	m.MkdirAll("/db")
	m.SyncDir("/")
	db, err := Open("/db", Options{FS: m, CheckpointTimeout: -1, WALWriterDelay: 5 * time.Millisecond,
		SharedBuffers: 16 * heap.PageSize, WALSegmentSize: 1 << 20, Autovacuum: noAutovacuum})
	if err != nil {
		t.Fatal(err)
	}
	if ladderStaleIndex, err = readMemFile(m, "/db/index"); err != nil {
		t.Fatal(err)
	}
	var prog ladderProgress
	var points, checked int
	var failure error
	m.SetOpHook(ladderCrashHook(seed, sample, states, rand.New(rand.NewPCG(seed, 11)), &prog, &points, &checked, &failure))
	ctx := context.Background()
	var truncated uint64
	for i, w := range work {
		if i == len(work)/4 {
			// A checkpoint before the first cut: its length is longer
			// than what the files hold after it.
			if err := db.Checkpoint(); err != nil {
				failure = err
				break
			}
		}
		if vacuumAt[i] {
			st, err := db.Vacuum(ctx)
			if err != nil {
				failure = fmt.Errorf("vacuum before txn %d: %v", i, err)
				break
			}
			truncated += st.PagesTruncated
		}
		committed, err := runLadderTxn(ctx, db, i, w, func() { prog.begun(commitOf[i]) })
		if err != nil {
			failure = err
			break
		}
		if committed && w.sync {
			prog.acked(commitOf[i])
		}
		if failure != nil {
			break
		}
	}
	db.Close()
	m.SetOpHook(nil)
	if failure != nil {
		t.Fatalf("seed %d (-crash.seed=%d reproduces): %v", seed, seed, failure)
	}
	if truncated == 0 {
		t.Fatalf("no vacuum truncated the heap; the ladder tested nothing of it")
	}
	t.Logf("seed %d: %d operations, %d crash copies checked, %d pages truncated", seed, points, checked, truncated)
}

// TestTruncateUnderReaders: readers at both isolation levels and writers
// go on while vacuum cuts the heap's tail again and again; every read sees
// what its snapshot allows (each key's value names its own key), nothing
// fails, and the database verifies.
func TestTruncateUnderReaders(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum, SharedBuffers: 128 * heap.PageSize})
	ctx := context.Background()
	for i := range 100 {
		mustPut(t, db, fmt.Sprintf("a%03d", i), fmt.Sprintf("a%03d", i))
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var reads atomic.Int64
	errc := make(chan error, 8)
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				k := fmt.Sprintf("t%03d", rng.IntN(200))
				if rng.IntN(3) == 0 {
					k = fmt.Sprintf("a%03d", rng.IntN(100))
				}
				iso := ReadCommitted
				if r == 1 {
					iso = RepeatableRead
				}
				tx, err := db.Begin(ctx, TxnOptions{Isolation: iso, ReadOnly: true})
				if err != nil {
					errc <- err
					return
				}
				v, err := tx.Get([]byte(k))
				// A second read in the same transaction: at REPEATABLE
				// READ it must see the same.
				v2, err2 := tx.Get([]byte(k))
				tx.Rollback()
				if iso == RepeatableRead && (!errors.Is(err2, err) || string(v2) != string(v)) {
					errc <- fmt.Errorf("repeatable read of %s changed: %.20q %v then %.20q %v", k, v, err, v2, err2)
					return
				}
				if errors.Is(err, ErrNotFound) {
					if k[0] == 'a' {
						errc <- fmt.Errorf("kept key %s not found", k)
						return
					}
					continue
				}
				if err != nil {
					errc <- fmt.Errorf("get %s: %w", k, err)
					return
				}
				if !strings.HasPrefix(string(v), k) {
					errc <- fmt.Errorf("get %s returned %.20q", k, v)
					return
				}
				reads.Add(1)
			}
		}()
	}
	// A vacuum cuts nothing when a reader's snapshot predates the last
	// deletes (their versions lie on the tail): about half the rounds
	// under -race. Eight rounds, and more until one has cut (all eight
	// cut nothing in about 0.2% of runs).
	var truncated uint64
	for round := 0; round < 8 || truncated == 0 && round < 100; round++ {
		for i := range 200 {
			k := fmt.Sprintf("t%03d", i)
			mustPut(t, db, k, k+strings.Repeat(".", 1900))
		}
		for i := range 200 {
			mustDelete(t, db, fmt.Sprintf("t%03d", i))
		}
		st, err := db.Vacuum(ctx)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		truncated += st.PagesTruncated
	}
	close(stop)
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	if truncated == 0 {
		t.Fatal("no vacuum truncated the heap")
	}
	if rep, err := db.Verify(); err != nil || !rep.OK() {
		t.Fatalf("verify: %v %v", err, rep.Problems)
	}
	t.Logf("%d pages truncated, %d reads", truncated, reads.Load())
}

// TestTruncateAfterCheckpointCrash: pages emptied and marked all-visible
// before a checkpoint, filled, emptied, marked again and cut off after it:
// redo meets the records of pages the files no longer hold (the cut was
// durable before the crash), and must reach the same state.
func TestTruncateAfterCheckpointCrash(t *testing.T) {
	m := vfs.NewMemFS()
	m.MkdirAll("/db")
	m.SyncDir("/")
	off, on := false, true
	db, err := Open("/db", Options{FS: m, CheckpointTimeout: -1, Autovacuum: noAutovacuum, VacuumTruncate: &off})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 40 {
		mustPut(t, db, fmt.Sprintf("a%03d", i), "a")
	}
	for i := range 100 {
		mustPut(t, db, fmt.Sprintf("t%03d", i), strings.Repeat("t", 1900))
	}
	for i := range 100 {
		mustDelete(t, db, fmt.Sprintf("t%03d", i))
	}
	// The first run empties the pages without cutting them.
	if _, err := db.Vacuum(ctx); err != nil {
		t.Fatal(err)
	}
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	// The emptied pages, all-visible now, take the same keys again, which
	// are deleted again: the second run frees them, sets the pages' bits
	// (HEAP2_VISIBLE records after the checkpoint) and then cuts them.
	for i := range 100 {
		mustPut(t, db, fmt.Sprintf("t%03d", i), strings.Repeat("t", 1900))
	}
	for i := range 100 {
		mustDelete(t, db, fmt.Sprintf("t%03d", i))
	}
	db.opts.VacuumTruncate = &on
	st, err := db.Vacuum(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.PagesTruncated == 0 {
		t.Fatal("nothing truncated")
	}
	visibleRecords := 0
	for _, line := range walRecordLines(t, db) {
		if strings.Contains(line, "HEAP2_VISIBLE") {
			visibleRecords++
		}
	}
	want, err := scanState(db)
	if err != nil {
		t.Fatal(err)
	}
	c := m.CrashCopy(vfs.DropUnsynced, nil)
	db.Close()
	reopenMatches(t, c, want, fmt.Sprintf(" after a crash (%d HEAP2_VISIBLE records since the checkpoint)", visibleRecords))
	if visibleRecords == 0 {
		t.Fatal("the second vacuum logged no HEAP2_VISIBLE: the test tests nothing")
	}
}

// walRecordLines describes every WAL record from the last checkpoint's
// redo point on.
func walRecordLines(t *testing.T, db *DB) []string {
	t.Helper()
	if err := db.flushWAL(uint64(db.wal.InsertLSN())); err != nil {
		t.Fatal(err)
	}
	r, err := wal.NewReader(db.fs, filepath.Join(db.dir, walDir), wal.LSN(db.redoPtr.Load()))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out []string
	for {
		rec, err := r.Next()
		if err != nil {
			break
		}
		out = append(out, describeRecord(rec))
	}
	return out
}

// reopenMatches opens the database in /db on fs, checks that it holds
// want and verifies, and returns it (closed at the test's end). what
// qualifies the open in a failure.
func reopenMatches(t *testing.T, fs vfs.FS, want ladderState, what string) *DB {
	t.Helper()
	db, err := Open("/db", Options{FS: fs, CheckpointTimeout: -1, Autovacuum: noAutovacuum})
	if err != nil {
		t.Fatalf("reopen%s: %v", what, err)
	}
	t.Cleanup(func() { db.Close() })
	got, err := scanState(db)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got, want) {
		t.Fatalf("reopened%s: %s", what, diffState(got, want))
	}
	if rep, err := db.Verify(); err != nil || !rep.OK() {
		t.Fatalf("verify%s: %v %v", what, err, rep.Problems)
	}
	return db
}
