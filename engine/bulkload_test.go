package engine

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"math/rand/v2"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"mvkv/vfs"
)

// bulkKey and bulkVal are the i-th key and value of a test load; keys
// sort as i does.
func bulkKey(i int) []byte { return fmt.Appendf(nil, "k%08d", i) }

func bulkVal(i, size int) []byte {
	v := fmt.Appendf(nil, "v%d:", i)
	for len(v) < size {
		v = append(v, byte('a'+i%26))
	}
	return v
}

// bulkRows yields keys 0..n-1 with values of 1 to size bytes.
func bulkRows(n, size int) iter.Seq2[[]byte, []byte] {
	return func(yield func(k, v []byte) bool) {
		for i := 0; i < n; i++ {
			if !yield(bulkKey(i), bulkVal(i, 1+i%size)) {
				return
			}
		}
	}
}

func bulkState(n, size int) ladderState {
	st := ladderState{}
	for k, v := range bulkRows(n, size) {
		st[string(k)] = string(v)
	}
	return st
}

func checkState(t *testing.T, db *DB, want ladderState) {
	t.Helper()
	got, err := scanState(db)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got, want) {
		t.Fatalf("state differs: %s", diffState(got, want))
	}
	if _, count := countKeys(t, db); count != len(want) {
		t.Fatalf("index-only Count says %d keys, want %d", count, len(want))
	}
	if rep, err := db.Verify(); err != nil || !rep.OK() {
		t.Fatalf("verify: %v\n%s", err, rep)
	}
}

// TestBulkLoad loads keys into an empty database and checks them through
// every read path, after a clean reopen (from the index file), after
// updates, deletes and a vacuum of loaded keys, and after a reopen without
// the index file (a heap rebuild).
func TestBulkLoad(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir, Options{FillFactor: 90})
	const n, size = 20000, 150
	st, err := db.BulkLoad(context.Background(), bulkRows(n, size))
	if err != nil {
		t.Fatal(err)
	}
	if st.Keys != n || st.Pages == 0 || !st.AllVisible || st.XID == 0 {
		t.Fatalf("stats %+v", st)
	}
	want := bulkState(n, size)
	checkState(t, db, want)
	if s := db.Stats(); s.Heap.Blocks != uint64(st.FirstBlock+st.Pages) || s.Index.Keys != n {
		t.Fatalf("heap blocks %d keys %d, want %d and %d", s.Heap.Blocks, s.Index.Keys, st.FirstBlock+st.Pages, n)
	}
	// Index-only reads answer from the visibility map alone.
	before := db.Stats()
	countKeys(t, db)
	if d := db.Stats().Sub(before); d.Index.HeapFetches != 0 || d.Index.AllVisible == 0 {
		t.Fatalf("index-only count: %d from the map, %d heap fetches", d.Index.AllVisible, d.Index.HeapFetches)
	}
	if _, err := db.BulkLoad(context.Background(), bulkRows(10, 10)); !errors.Is(err, ErrBulkLoadNotEmpty) {
		t.Fatalf("second load: %v, want ErrBulkLoadNotEmpty", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db = openTest(t, dir, Options{FillFactor: 90})
	if !db.Recovery().IndexFromFile {
		t.Fatalf("reopen rebuilt the index: %s", db.Recovery().IndexRebuildReason)
	}
	checkState(t, db, want)
	for i := 0; i < n; i += 97 {
		k := string(bulkKey(i))
		if i%2 == 0 {
			mustPut(t, db, k, "new"+k)
			want[k] = "new" + k
		} else {
			if err := db.Update(context.Background(), func(tx *Txn) error { return tx.Delete([]byte(k)) }); err != nil {
				t.Fatal(err)
			}
			delete(want, k)
		}
	}
	mustPut(t, db, "zz-new", "after the load")
	want["zz-new"] = "after the load"
	if _, err := db.Vacuum(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkState(t, db, want)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(dir + "/index"); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir, Options{FillFactor: 90})
	defer db.Close()
	if db.Recovery().IndexFromFile {
		t.Fatal("opened without an index file, but did not rebuild")
	}
	checkState(t, db, want)
}

// TestBulkLoadRefuses checks the load's errors, and that each failed load
// leaves the database as it was: empty, its heap cut back, loadable.
func TestBulkLoadRefuses(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir, Options{})
	ctx := context.Background()
	heapBlocks := func() uint32 { return db.storage.NBlocks() }
	base := heapBlocks()
	outOfOrder := func(yield func(k, v []byte) bool) {
		for i := 0; i < 5000; i++ {
			if !yield(bulkKey(i), bulkVal(i, 300)) {
				return
			}
		}
		yield(bulkKey(10), []byte("late"))
	}
	if st, err := db.BulkLoad(ctx, outOfOrder); !errors.Is(err, ErrBulkLoadOrder) {
		t.Fatalf("out of order: %v", err)
	} else if st != (BulkLoadStats{}) {
		t.Fatalf("a failed load reports %+v; nothing was loaded", st)
	}
	dup := func(yield func(k, v []byte) bool) {
		if yield([]byte("a"), nil) {
			yield([]byte("a"), []byte("again"))
		}
	}
	if _, err := db.BulkLoad(ctx, dup); !errors.Is(err, ErrBulkLoadOrder) {
		t.Fatalf("duplicate key: %v", err)
	}
	big := func(yield func(k, v []byte) bool) { yield([]byte("a"), make([]byte, 4000)) }
	if _, err := db.BulkLoad(ctx, big); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("large value: %v", err)
	}
	if _, err := db.BulkLoad(ctx, nil); !errors.Is(err, ErrNilFunction) {
		t.Fatalf("nil rows: %v", err)
	}
	empty := func(yield func(k, v []byte) bool) { yield(nil, []byte("x")) }
	if _, err := db.BulkLoad(ctx, empty); !errors.Is(err, ErrEmptyKey) {
		t.Fatalf("empty key: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancelled := func(yield func(k, v []byte) bool) {
		for i := 0; i < 5000; i++ {
			if i == 3000 {
				cancel()
			}
			if !yield(bulkKey(i), bulkVal(i, 300)) {
				return
			}
		}
	}
	if _, err := db.BulkLoad(cctx, cancelled); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	if got := heapBlocks(); got != base {
		t.Fatalf("heap has %d blocks after failed loads, had %d", got, base)
	}
	if st, err := db.BulkLoad(ctx, bulkRows(0, 1)); err != nil || st.Keys != 0 {
		t.Fatalf("empty load: %+v %v", st, err)
	}
	checkState(t, db, ladderState{})
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// The aborted loads' begin records are in the WAL: reopening must
	// not cut anything (their ABORTs follow them).
	db = openTest(t, dir, Options{})
	defer db.Close()
	checkState(t, db, ladderState{})
	mustPut(t, db, "x", "1")
	if _, err := db.BulkLoad(ctx, bulkRows(10, 10)); !errors.Is(err, ErrBulkLoadNotEmpty) {
		t.Fatalf("load into a database with a key: %v", err)
	}
	if err := db.Update(ctx, func(tx *Txn) error { return tx.Delete([]byte("x")) }); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Vacuum(ctx); err != nil {
		t.Fatal(err)
	}
	// Every key gone (vacuumed away): empty again.
	if _, err := db.BulkLoad(ctx, bulkRows(3000, 100)); err != nil {
		t.Fatal(err)
	}
	checkState(t, db, bulkState(3000, 100))
}

// TestBulkLoadSnapshots checks that a snapshot taken before the load does
// not see it, through Get, Exists and Count, and that the visibility map
// is then left to vacuum.
func TestBulkLoadSnapshots(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{})
	defer db.Close()
	ctx := context.Background()
	old, err := db.Begin(ctx, TxnOptions{Isolation: RepeatableRead, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Get([]byte("nothing")); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	st, err := db.BulkLoad(ctx, bulkRows(2000, 50))
	if err != nil {
		t.Fatal(err)
	}
	if st.AllVisible {
		t.Fatal("the visibility map was set while an older snapshot was open")
	}
	if _, err := old.Get(bulkKey(5)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("old snapshot reads a loaded key: %v", err)
	}
	if ok, err := old.Exists(bulkKey(5)); err != nil || ok {
		t.Fatalf("old snapshot: Exists %v %v", ok, err)
	}
	if n, err := old.Count(nil, nil); err != nil || n != 0 {
		t.Fatalf("old snapshot counts %d keys (%v)", n, err)
	}
	old.Rollback()
	checkState(t, db, bulkState(2000, 50))
	if _, err := db.Vacuum(ctx); err != nil {
		t.Fatal(err)
	}
	before := db.Stats()
	countKeys(t, db)
	if d := db.Stats().Sub(before); d.Index.HeapFetches != 0 {
		t.Fatalf("after vacuum, %d index-only heap fetches", d.Index.HeapFetches)
	}
}

// TestBulkLoadCrashLadder simulates a power loss at file-system operations
// of a failed load, a bulk load, and transactions and vacuums on the
// loaded keys after it. Every crash copy must recover to no load at all,
// or to the whole load and a prefix of the commits after it (every
// acknowledged one), verify, and do so again with its index file
// missing, damaged or from before the load, and after a crash in the
// middle of its own recovery (checkRecovered).
func TestBulkLoadCrashLadder(t *testing.T) {
	seed := testSeed(t, *ladderSeed)
	sample := *ladderSample
	if sample <= 0 {
		// The load makes only about 50 file-system operations: one in 12
		// (the other ladders' rate under -race) left every one unchecked
		// in about 2% of runs.
		sample = 3
		if raceEnabled {
			sample = 4
		}
	}
	const n, size = 1000, 400 // about 30 pages (TestBulkLoad writes several runs)
	r := rand.New(rand.NewPCG(seed, 3))
	var work []ladderTxn
	for i := 0; i < 12; i++ {
		w := ladderTxn{writes: map[string][]byte{}, sync: r.IntN(4) != 0, rollback: r.IntN(8) == 0}
		for j := 0; j < 1+r.IntN(3); j++ {
			k := string(bulkKey(r.IntN(n)))
			if r.IntN(5) == 0 {
				w.writes[k] = nil
			} else {
				w.writes[k] = fmt.Appendf(nil, "txn%d", i)
			}
		}
		work = append(work, w)
	}
	// The empty database, the load, then each commit.
	afterLoad, _ := ladderStates(bulkState(n, size), work)
	states := append([]ladderState{{}}, afterLoad...)

	m := vfs.NewMemFS()
	m.MkdirAll("/db")
	m.SyncDir("/")
	opts := Options{FS: m, CheckpointTimeout: -1, WALWriterDelay: 5 * time.Millisecond, Autovacuum: new(bool)}
	opts.SharedBuffers, opts.WALSegmentSize = 2<<20, 1<<20
	db, err := Open("/db", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if ladderStaleIndex, err = readMemFile(m, "/db/index"); err != nil {
		t.Fatal(err)
	}
	var prog ladderProgress
	var points, checked int
	var failure error
	m.SetOpHook(ladderCrashHook(seed, sample, states, rand.New(rand.NewPCG(seed, 7)), &prog, &points, &checked, &failure))
	defer m.SetOpHook(nil)
	ctx := context.Background()

	// A load that fails half-way: its pages are written, then cut off.
	bad := func(yield func(k, v []byte) bool) {
		for k, v := range bulkRows(n, size) {
			if !yield(k, v) {
				return
			}
		}
		yield([]byte("a"), nil)
	}
	if _, err := db.BulkLoad(ctx, bad); !errors.Is(err, ErrBulkLoadOrder) {
		t.Fatalf("failed load: %v", err)
	}
	prog.begun(1)
	if _, err := db.BulkLoad(ctx, bulkRows(n, size)); err != nil {
		t.Fatal(err)
	}
	prog.acked(1)
	state := 1
	for i, w := range work {
		if i == 6 {
			if _, err := db.Vacuum(ctx); err != nil {
				t.Fatal(err)
			}
		}
		next := state
		if !w.rollback {
			next = state + 1
		}
		committed, err := runLadderTxn(ctx, db, i, w, func() { prog.begun(next) })
		if err != nil {
			t.Fatal(err)
		}
		if committed {
			state = next
			if w.sync {
				prog.acked(state)
			}
		}
		if failure != nil {
			break
		}
	}
	// The hook runs under the MemFS's lock, on whichever goroutine writes
	// (the WAL writer flushes asynchronous commits on its own): removing
	// it takes that lock, after which its counts can be read.
	m.SetOpHook(nil)
	if failure != nil {
		t.Fatalf("seed %d (-crash.seed reproduces it): %v", seed, failure)
	}
	if checked == 0 {
		t.Fatalf("seed %d: no crash copy checked", seed)
	}
	t.Logf("seed %d: %d file-system operations, %d crash copies checked", seed, points, checked)
}

// bulkChildKeys is how many keys TestKillDuringBulkLoad's child loads:
// about 800 pages, or 320 under the race detector, where loading them and
// checking each round's result took most of a minute.
var bulkChildKeys = func() int {
	if raceEnabled {
		return 20000
	}
	return 50000
}()

func init() {
	// The child process of TestKillDuringBulkLoad: load, say so, close.
	dir := os.Getenv("MVKV_BULK_CHILD")
	if dir == "" {
		return
	}
	db, err := Open(dir, Options{SharedBuffers: 4 << 20})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("ready")
	if _, err := db.BulkLoad(context.Background(), bulkRows(bulkChildKeys, 100)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("loaded")
	if err := db.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// TestKillDuringBulkLoad kills a process with SIGKILL at a random moment
// of a bulk load and reopens its directory: it must hold no key or every
// loaded key (all of them once the child said the load returned), verify,
// and take a load (if empty) or writes afterwards.
func TestKillDuringBulkLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	seed := testSeed(t, 0)
	r := rand.New(rand.NewPCG(seed, 2))
	var none, all int
	// Round 0 is not killed: it measures how long the child's load takes,
	// and later rounds kill it at a uniform moment of 1.2 times that.
	var loadTime time.Duration
	for round := 0; round < 6; round++ {
		dir := t.TempDir()
		cmd, l, lines, stderr := startChild(t, "MVKV_BULK_CHILD="+dir)
		if l != "ready" {
			t.Fatalf("child said %q; stderr: %s", l, stderr.String())
		}
		readyAt := time.Now()
		if round > 0 {
			time.Sleep(time.Duration(r.Int64N(int64(loadTime)*6/5 + 1)))
			cmd.Process.Signal(syscall.SIGKILL)
		}
		loaded := false
		for l := range lines {
			if l == "loaded" && !loaded {
				loaded = true
				if round == 0 {
					loadTime = time.Since(readyAt)
				}
			}
		}
		cmd.Wait()
		if s := stderr.String(); s != "" {
			t.Fatalf("child stderr: %s", s)
		}
		db := openTest(t, dir, Options{})
		scan, _ := countKeys(t, db)
		switch {
		case scan == bulkChildKeys:
			all++
			for i := 0; i < bulkChildKeys; i += 997 {
				if v, ok := get(t, db, string(bulkKey(i))); !ok || v != string(bulkVal(i, 1+i%100)) {
					t.Fatalf("round %d: key %d = %q, %v", round, i, v, ok)
				}
			}
		case scan == 0 && !loaded && round > 0:
			none++
			if _, err := db.BulkLoad(context.Background(), bulkRows(1000, 10)); err != nil {
				t.Fatalf("round %d: load after the crash: %v", round, err)
			}
		default:
			t.Fatalf("round %d (seed %d): %d keys after the kill, want 0 or %d (child said loaded: %v)", round, seed, scan, bulkChildKeys, loaded)
		}
		if rep, err := db.Verify(); err != nil || !rep.OK() {
			t.Fatalf("round %d: verify: %v\n%s", round, err, rep)
		}
		mustPut(t, db, "after", "x")
		t.Logf("round %d: %d keys; recovery: %d records, index from file %v (%s)", round, scan,
			db.Recovery().Records, db.Recovery().IndexFromFile, db.Recovery().IndexRebuildReason)
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("seed %d: a load takes %v; %d kills left no load, %d the whole load", seed, loadTime, none, all-1)
}

// BenchmarkBulkLoad loads 200,000 keys of 96-byte values (pgbench's
// accounts) into a fresh directory per iteration, checkpoint included,
// and reports the time per key.
func BenchmarkBulkLoad(b *testing.B) {
	const n = 200000
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		db, err := Open(b.TempDir(), Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if _, err := db.BulkLoad(context.Background(), bulkRows(n, 96)); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		db.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/key")
}

// TestRecoveryReportsBulkLoadCut: a process killed while a bulk load
// writes its pages leaves them in the heap files; the next Open removes
// them and says so in RecoveryInfo (mvkv verify prints it).
func TestRecoveryReportsBulkLoadCut(t *testing.T) {
	m := vfs.NewMemFS()
	if err := m.MkdirAll("/db"); err != nil {
		t.Fatal(err)
	}
	opts := Options{FS: m, CheckpointTimeout: -1, SharedBuffers: 2 << 20}
	db, err := Open("/db", opts)
	if err != nil {
		t.Fatal(err)
	}
	var killed *vfs.MemFS
	heapWrites := 0
	m.SetOpHook(func(p vfs.CrashPoint) {
		if p.Op.Kind == vfs.OpWrite && strings.Contains(p.Op.Path, "/"+heapDir+"/") {
			if heapWrites++; heapWrites == 1 {
				killed = p.Clone() // kill -9: what was written stays
			}
		}
	})
	if _, err := db.BulkLoad(context.Background(), bulkRows(20000, 100)); err != nil {
		t.Fatal(err)
	}
	m.SetOpHook(nil)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if killed == nil {
		t.Fatalf("the load made no heap write")
	}
	o := opts
	o.FS = killed
	db, err = Open("/db", o)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ri := db.Recovery()
	if ri.BulkLoadCutBlocks == 0 || db.pool.NBlocks() != ri.BulkLoadCutFrom {
		t.Fatalf("recovery %+v, heap %d blocks: want the load's pages cut and reported", ri, db.pool.NBlocks())
	}
	if scan, _ := countKeys(t, db); scan != 0 {
		t.Fatalf("%d keys after the cut, want none", scan)
	}
}

// TestBulkLoadRowsPanics: a rows sequence that panics ends the load as a
// failed one (nothing loaded, its xid out of the running table, so
// vacuum's horizon moves on), and the panic reaches the caller. A nil
// sequence is refused.
func TestBulkLoadRowsPanics(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum})
	defer db.Close()
	ctx := context.Background()
	if _, err := db.BulkLoad(ctx, nil); err == nil {
		t.Fatal("BulkLoad with nil rows: no error")
	}
	boom := func(yield func(k, v []byte) bool) {
		for i := 0; i < 5000; i++ {
			if !yield(bulkKey(i), bulkVal(i, 300)) {
				return
			}
		}
		panic("boom in rows")
	}
	func() {
		defer func() {
			if r := recover(); r != "boom in rows" {
				t.Fatalf("recovered %v; want the panic of rows", r)
			}
		}()
		db.BulkLoad(ctx, boom)
	}()
	checkState(t, db, ladderState{})
	mustPut(t, db, "a", "1")
	mustPut(t, db, "a", "2")
	if st := mustVacuum(t, db); st.TuplesRemoved != 1 {
		t.Fatalf("vacuum after a load whose rows panicked removed %d versions (horizon %d); want 1", st.TuplesRemoved, st.OldestXmin)
	}
	if _, err := db.BulkLoad(ctx, bulkRows(10, 10)); !errors.Is(err, ErrBulkLoadNotEmpty) {
		t.Fatalf("a second load: %v; want ErrBulkLoadNotEmpty (the key a)", err)
	}
}

// TestCloseDuringCallbacks: the caller's code that the engine runs (a
// bulk load's rows, Txn.Update's function, StatTuple's class) may read
// or write the database, and a Close meanwhile neither hangs nor leaves
// them hanging: they end, with ErrClosed where the database went away
// under them.
func TestCloseDuringCallbacks(t *testing.T) {
	ctx := context.Background()
	closeWhile := func(t *testing.T, db *DB, started <-chan struct{}, run func() error) {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- run() }()
		<-started
		closed := make(chan error, 1)
		go func() { closed <- db.Close() }()
		for _, c := range []chan error{done, closed} {
			select {
			case <-c:
			case <-time.After(30 * time.Second):
				t.Fatal("hung: Close and a callback that reads the database wait for each other")
			}
		}
	}
	t.Run("BulkLoad", func(t *testing.T) {
		db := openTest(t, t.TempDir(), Options{})
		started := make(chan struct{})
		rows := func(yield func(k, v []byte) bool) {
			for i := 0; ; i++ {
				if i == 100 {
					close(started)
				}
				// Reads go on during a load.
				if err := db.View(ctx, func(tx *Txn) error { _, err := tx.Get([]byte("cfg")); return err }); errors.Is(err, ErrClosed) {
					return
				}
				if !yield(bulkKey(i), bulkVal(i, 100)) {
					return
				}
			}
		}
		closeWhile(t, db, started, func() error { _, err := db.BulkLoad(ctx, rows); return err })
	})
	t.Run("TxnUpdate", func(t *testing.T) {
		db := openTest(t, t.TempDir(), Options{})
		t1, err := db.Begin(ctx, TxnOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := t1.Put([]byte("b"), []byte("1")); err != nil {
			t.Fatal(err)
		}
		started := make(chan struct{})
		closeWhile(t, db, started, func() error {
			t2, err := db.Begin(ctx, TxnOptions{})
			if err != nil {
				return err
			}
			defer t2.Rollback()
			return t2.Update([]byte("a"), func(old []byte, ok bool) ([]byte, error) {
				close(started)
				// Waits for t1's row lock, which Close's wake ends.
				return []byte("x"), t2.Put([]byte("b"), []byte("2"))
			})
		})
		if err := t1.Commit(); !errors.Is(err, ErrClosed) {
			t.Fatalf("commit after Close: %v; want ErrClosed", err)
		}
	})
	t.Run("StatTuple", func(t *testing.T) {
		db := openTest(t, t.TempDir(), Options{})
		for i := range 2000 {
			mustPut(t, db, fmt.Sprintf("k%05d", i), strings.Repeat("v", 100))
		}
		started := make(chan struct{})
		var once bool
		closeWhile(t, db, started, func() error {
			_, _, err := db.StatTuple(ctx, func(key []byte) string {
				if !once {
					once = true
					close(started)
				}
				db.View(ctx, func(tx *Txn) error { _, err := tx.Get(key); return err })
				return "k"
			})
			return err
		})
	})
}

// TestWriteDuringBulkLoad: a write that waits for a bulk load ends with
// its context, and a Close during a load whose rows writes (which the
// documentation forbids: the write waits for the load) ends both.
func TestWriteDuringBulkLoad(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, t.TempDir(), Options{})
	// started is closed once the write with a deadline has ended: Close
	// must not come before, or it could end that write first (a loaded
	// machine can wake it well after its 50 ms).
	started := make(chan struct{})
	var writeErr error
	rows := func(yield func(k, v []byte) bool) {
		for i := 0; ; i++ {
			if i == 100 {
				wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
				err := db.Update(wctx, func(tx *Txn) error { return tx.Put([]byte("zz"), []byte("1")) })
				cancel()
				if !errors.Is(err, context.DeadlineExceeded) {
					writeErr = fmt.Errorf("a write with a deadline during a load: %v; want DeadlineExceeded", err)
				}
				close(started)
				// Without a deadline: only Close ends it.
				err = db.Update(ctx, func(tx *Txn) error { return tx.Put([]byte("zz"), []byte("1")) })
				if !errors.Is(err, ErrClosed) && writeErr == nil {
					writeErr = fmt.Errorf("a write during a load ended by Close: %v; want ErrClosed", err)
				}
			}
			if !yield(bulkKey(i), bulkVal(i, 100)) {
				return
			}
		}
	}
	done := make(chan error, 1)
	go func() { _, err := db.BulkLoad(ctx, rows); done <- err }()
	<-started
	time.Sleep(100 * time.Millisecond) // the write without a deadline is waiting
	closed := make(chan error, 1)
	go func() { closed <- db.Close() }()
	for _, c := range []chan error{done, closed} {
		select {
		case err := <-c:
			if err != nil && !errors.Is(err, ErrClosed) {
				t.Errorf("load or Close: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("hung: Close, a load and a write in its rows wait for each other")
		}
	}
	if writeErr != nil {
		t.Fatal(writeErr)
	}
}
