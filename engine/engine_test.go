package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"mvkv/internal/bufpool"
	"mvkv/internal/heap"
	"mvkv/vfs"
	"mvkv/visibility"
)

func openTest(t testing.TB, dir string, o Options) *DB {
	t.Helper()
	if o.SharedBuffers == 0 {
		o.SharedBuffers = 4 << 20
	}
	if o.WALSegmentSize == 0 {
		o.WALSegmentSize = 1 << 20
	}
	db, err := Open(dir, o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return db
}

func mustPut(t testing.TB, db *DB, k, v string) {
	t.Helper()
	if err := db.Update(context.Background(), func(tx *Txn) error { return tx.Put([]byte(k), []byte(v)) }); err != nil {
		t.Fatalf("put %s: %v", k, err)
	}
}

func get(t testing.TB, db *DB, k string) (string, bool) {
	t.Helper()
	var out []byte
	err := db.View(context.Background(), func(tx *Txn) error {
		v, err := tx.Get([]byte(k))
		out = v
		return err
	})
	if errors.Is(err, ErrNotFound) {
		return "", false
	}
	if err != nil {
		t.Fatalf("get %s: %v", k, err)
	}
	return string(out), true
}

func TestBasicCRUDAndReopen(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir, Options{})
	ctx := context.Background()
	mustPut(t, db, "a", "1")
	mustPut(t, db, "b", "2")
	mustPut(t, db, "a", "3")
	// One byte over the limit; the pages of the slice are never touched,
	// so it costs address space, not memory.
	if err := db.Update(ctx, func(tx *Txn) error { return tx.Put([]byte("big"), make([]byte, MaxValueSize+1)) }); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized value: %v", err)
	}
	large := bytes.Repeat([]byte("x0123456789"), 100000) // 1.1 MB: a two-level pointer
	if err := db.Update(ctx, func(tx *Txn) error { return tx.Put([]byte("large"), large) }); err != nil {
		t.Fatal(err)
	}
	if err := db.Update(ctx, func(tx *Txn) error { return tx.Delete([]byte("b")) }); err != nil {
		t.Fatal(err)
	}
	if err := db.Update(ctx, func(tx *Txn) error { return tx.Put(nil, []byte("x")) }); !errors.Is(err, ErrEmptyKey) {
		t.Fatalf("empty key: %v", err)
	}
	if err := db.Update(ctx, func(tx *Txn) error { return tx.Put(make([]byte, MaxKeySize+1), nil) }); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("long key: %v", err)
	}
	check := func(db *DB) {
		t.Helper()
		if v, ok := get(t, db, "a"); !ok || v != "3" {
			t.Fatalf("a = %q %v", v, ok)
		}
		if _, ok := get(t, db, "b"); ok {
			t.Fatal("b still visible after delete")
		}
		if v, ok := get(t, db, "large"); !ok || v != string(large) {
			t.Fatalf("large value: found=%v len=%d", ok, len(v))
		}
		var keys []string
		db.View(ctx, func(tx *Txn) error {
			return tx.Scan(nil, nil, func(k, v []byte) bool { keys = append(keys, string(k)); return true })
		})
		if fmt.Sprint(keys) != "[a large]" {
			t.Fatalf("scan: %v", keys)
		}
	}
	check(db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
	db = openTest(t, dir, Options{})
	defer db.Close()
	check(db)
}

func TestTxnDoneAndClosed(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{})
	ctx := context.Background()
	tx, _ := db.Begin(ctx, TxnOptions{})
	tx.Put([]byte("k"), []byte("v"))
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := tx.Put([]byte("k"), []byte("w")); !errors.Is(err, ErrTxnDone) {
		t.Fatalf("put after commit: %v", err)
	}
	if err := tx.Rollback(); !errors.Is(err, ErrTxnDone) {
		t.Fatalf("rollback after commit: %v", err)
	}
	ro, _ := db.Begin(ctx, TxnOptions{ReadOnly: true})
	if err := ro.Put([]byte("k"), nil); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("read-only put: %v", err)
	}
	ro.Rollback()
	// Transactions that wrote nothing, still open at Close: a reader, a
	// REPEATABLE READ one with its snapshot, an empty one, one whose only
	// effect was a row lock (a delete of a missing key). Their Commit and
	// CommitAsync after Close return ErrClosed, as Close says, not nil.
	var open []*Txn
	for _, o := range []TxnOptions{{}, {Isolation: RepeatableRead}, {}, {}, {}} {
		tx, err := db.Begin(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, tx)
	}
	if _, err := open[0].Get([]byte("k")); err != nil {
		t.Fatal(err)
	}
	if _, err := open[1].Get([]byte("k")); err != nil {
		t.Fatal(err)
	}
	if err := open[3].Delete([]byte("missing")); err != nil {
		t.Fatal(err)
	}
	if err := open[4].Delete([]byte("missing too")); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := db.Begin(ctx, TxnOptions{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("begin after close: %v", err)
	}
	for i, tx := range open[:4] {
		if err := tx.Commit(); !errors.Is(err, ErrClosed) {
			t.Errorf("Commit after Close of open transaction %d, which wrote nothing: %v; want ErrClosed", i, err)
		}
	}
	if _, err := open[4].CommitAsync(nil); !errors.Is(err, ErrClosed) {
		t.Errorf("CommitAsync after Close of a transaction that wrote nothing: %v; want ErrClosed", err)
	}
}

func TestDirectoryLocked(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir, Options{})
	defer db.Close()
	if _, err := Open(dir, Options{}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: %v", err)
	}
}

func TestRollbackAndIsolation(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{})
	defer db.Close()
	ctx := context.Background()
	mustPut(t, db, "k", "old")
	w, _ := db.Begin(ctx, TxnOptions{})
	if err := w.Put([]byte("k"), []byte("new")); err != nil {
		t.Fatal(err)
	}
	if v, _ := w.Get([]byte("k")); string(v) != "new" {
		t.Fatalf("own write not visible: %q", v)
	}
	if v, _ := get(t, db, "k"); v != "old" {
		t.Fatalf("uncommitted write visible: %q", v)
	}
	rr, _ := db.Begin(ctx, TxnOptions{Isolation: RepeatableRead})
	if v, _ := rr.Get([]byte("k")); string(v) != "old" {
		t.Fatalf("rr first read %q", v)
	}
	w.Rollback()
	if v, _ := get(t, db, "k"); v != "old" {
		t.Fatalf("rolled back write visible: %q", v)
	}
	mustPut(t, db, "k", "newer")
	if v, _ := rr.Get([]byte("k")); string(v) != "old" {
		t.Fatalf("repeatable read saw a later commit: %q", v)
	}
	rr.Rollback()
	rc, _ := db.Begin(ctx, TxnOptions{})
	if v, _ := rc.Get([]byte("k")); string(v) != "newer" {
		t.Fatalf("read committed: %q", v)
	}
	rc.Rollback()
}

// Two REPEATABLE READ transactions read the same row and both update it:
// the second updater must fail (no lost update).
func TestRepeatableReadLostUpdate(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{})
	defer db.Close()
	ctx := context.Background()
	mustPut(t, db, "n", "0")
	t1, _ := db.Begin(ctx, TxnOptions{Isolation: RepeatableRead})
	t2, _ := db.Begin(ctx, TxnOptions{Isolation: RepeatableRead})
	t1.Get([]byte("n"))
	t2.Get([]byte("n"))
	if err := t1.Put([]byte("n"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- t2.Put([]byte("n"), []byte("2")) }()
	waitUntilWaiting(t, db)
	if err := t1.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, ErrSerializationFailure) {
		t.Fatalf("second updater: %v, want ErrSerializationFailure", err)
	}
	if err := t2.Commit(); err == nil {
		t.Fatal("commit of a failed transaction succeeded")
	}
	if v, _ := get(t, db, "n"); v != "1" {
		t.Fatalf("n = %q", v)
	}
	// A REPEATABLE READ transaction whose snapshot predates a committed
	// change fails even without waiting.
	t3, _ := db.Begin(ctx, TxnOptions{Isolation: RepeatableRead})
	t3.Get([]byte("n"))
	mustPut(t, db, "n", "5")
	if err := t3.Put([]byte("n"), []byte("6")); !errors.Is(err, ErrSerializationFailure) {
		t.Fatalf("stale snapshot write: %v", err)
	}
	t3.Rollback()
}

func increment(old []byte, found bool) ([]byte, error) {
	var n int
	if found {
		fmt.Sscan(string(old), &n)
	}
	return []byte(fmt.Sprint(n + 1)), nil
}

// Concurrent increments of one key lose nothing: under READ COMMITTED
// because Update re-applies to the newest version, under REPEATABLE READ
// because the losers fail and DB.Update retries them.
func TestConcurrentIncrementsSingleKey(t *testing.T) {
	for _, iso := range []IsolationLevel{ReadCommitted, RepeatableRead} {
		t.Run(iso.String(), func(t *testing.T) {
			db := openTest(t, t.TempDir(), Options{MaxRetries: 1000})
			defer db.Close()
			ctx := context.Background()
			const workers, each = 8, 25
			var wg sync.WaitGroup
			var failures sync.Map
			for w := 0; w < workers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < each; i++ {
						err := db.run(ctx, TxnOptions{Isolation: iso}, func(tx *Txn) error {
							return tx.Update([]byte("ctr"), increment)
						})
						if err != nil {
							failures.Store(err.Error(), true)
						}
					}
				}()
			}
			wg.Wait()
			failures.Range(func(k, _ any) bool { t.Errorf("increment failed: %v", k); return true })
			if v, _ := get(t, db, "ctr"); v != fmt.Sprint(workers*each) {
				t.Fatalf("ctr = %s, want %d", v, workers*each)
			}
		})
	}
}

func TestDeadlockDetected(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{})
	defer db.Close()
	ctx := context.Background()
	t1, _ := db.Begin(ctx, TxnOptions{})
	t2, _ := db.Begin(ctx, TxnOptions{})
	if err := t1.Put([]byte("a"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := t2.Put([]byte("b"), []byte("2")); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- t1.Put([]byte("b"), []byte("1")) }()
	waitUntilWaiting(t, db)
	err2 := t2.Put([]byte("a"), []byte("2"))
	if !errors.Is(err2, ErrDeadlock) {
		t.Fatalf("closing the cycle: %v, want ErrDeadlock", err2)
	}
	t2.Rollback()
	if err := <-errc; err != nil {
		t.Fatalf("survivor: %v", err)
	}
	if err := t1.Commit(); err != nil {
		t.Fatal(err)
	}
	if v, _ := get(t, db, "b"); v != "1" {
		t.Fatalf("b = %q", v)
	}
}

// TestDeadlockNamesEveryWaitOfTheCycle closes a cycle of three
// transactions: the victim's error names each wait of the cycle, not only
// its own, so that the transaction tying the holder back to the victim is
// named too.
func TestDeadlockNamesEveryWaitOfTheCycle(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{})
	defer db.Close()
	ctx := context.Background()
	var txns [3]*Txn
	for i, k := range []string{"a", "b", "c"} {
		txns[i], _ = db.Begin(ctx, TxnOptions{})
		if err := txns[i].Put([]byte(k), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	// t0 waits for t1 on b, t1 for t2 on c; t2 closes the cycle on a.
	errc := make(chan error, 2)
	go func() { errc <- txns[0].Put([]byte("b"), []byte("0")) }()
	if !untilWaiting(db, 1) {
		t.Fatal("t0 did not start waiting for b")
	}
	go func() { errc <- txns[1].Put([]byte("c"), []byte("1")) }()
	if !untilWaiting(db, 2) {
		t.Fatal("t1 did not start waiting for c")
	}
	xids := [3]uint64{txns[0].XID(), txns[1].XID(), txns[2].XID()} // the victim's goes with its abort
	x := func(i int) uint64 { return xids[i] }
	err := txns[2].Put([]byte("a"), []byte("2"))
	if !errors.Is(err, ErrDeadlock) {
		t.Fatalf("closing the cycle: %v, want ErrDeadlock", err)
	}
	want := fmt.Sprintf("transaction %d waits on key \"a\" for transaction %d, which waits on key \"b\" for transaction %d, which waits on key \"c\" for transaction %d", x(2), x(0), x(1), x(2))
	if !strings.Contains(err.Error(), want) {
		t.Errorf("deadlock error %q does not say %q", err, want)
	}
	// The victim aborted at once: t1 gets c, then t0 gets b once t1 ends.
	if err := receive(t, errc, "t1's Put"); err != nil {
		t.Fatalf("t1: %v", err)
	}
	if err := txns[1].Commit(); err != nil {
		t.Fatal(err)
	}
	if err := receive(t, errc, "t0's Put"); err != nil {
		t.Fatalf("t0: %v", err)
	}
	if err := txns[0].Commit(); err != nil {
		t.Fatal(err)
	}
}

func TestLockTimeout(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{LockTimeout: 30 * time.Millisecond})
	defer db.Close()
	ctx := context.Background()
	t1, _ := db.Begin(ctx, TxnOptions{})
	t1.Put([]byte("a"), []byte("1"))
	t2, _ := db.Begin(ctx, TxnOptions{})
	if err := t2.Put([]byte("a"), []byte("2")); !errors.Is(err, ErrLockTimeout) {
		t.Fatalf("got %v, want ErrLockTimeout", err)
	}
	t2.Rollback()
	t1.Commit()
}

func TestSynchronousCommitOffSurvivesClose(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir, Options{SynchronousCommit: SyncCommitOff})
	for i := 0; i < 100; i++ {
		mustPut(t, db, fmt.Sprintf("k%03d", i), fmt.Sprint(i))
	}
	db.Close()
	db = openTest(t, dir, Options{})
	defer db.Close()
	for i := 0; i < 100; i++ {
		if v, ok := get(t, db, fmt.Sprintf("k%03d", i)); !ok || v != fmt.Sprint(i) {
			t.Fatalf("k%03d = %q %v", i, v, ok)
		}
	}
}

var vfsOS = vfsOSType{}

// waitUntilWaiting returns once some transaction is blocked on a row lock.
func waitUntilWaiting(t *testing.T, db *DB) {
	t.Helper()
	waitUntilWaitingN(t, db, 1)
}

// waitUntilWaitingN waits until n transactions wait for a row lock, and
// fails the test if they do not within a minute.
func waitUntilWaitingN(t *testing.T, db *DB, n int64) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if db.locks.waiting.Load() >= n {
			return
		}
	}
	t.Fatalf("%d transactions waiting for a row lock after a minute, want %d", db.locks.waiting.Load(), n)
}

// BenchmarkUpdate measures one transaction that updates one of 10,000 keys
// with synchronous_commit off, so that the figure is the engine's CPU and
// allocations per write rather than the disk's sync latency.
func BenchmarkUpdate(b *testing.B) {
	off := false
	db := openTest(b, b.TempDir(), Options{SynchronousCommit: SyncCommitOff, Autovacuum: &off})
	defer db.Close()
	const keys = 10000
	val := bytes.Repeat([]byte("v"), 100)
	for i := range keys {
		mustPut(b, db, fmt.Sprint("key", i), string(val))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		putOne(b, db, []byte(fmt.Sprint("key", (i*7919)%keys)), val)
	}
}

// The transaction of DB.Update and DB.View is theirs to end: Commit,
// CommitAsync and Rollback inside fn return ErrTxnManaged and do nothing,
// and what fn returns decides. A nil fn is an error, not a panic.
func TestManagedTxnRefusesCommitAndRollback(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{})
	defer db.Close()
	ctx := context.Background()
	err := db.Update(ctx, func(tx *Txn) error {
		if err := tx.Put([]byte("k"), []byte("v")); err != nil {
			return err
		}
		if err := tx.Commit(); !errors.Is(err, ErrTxnManaged) {
			t.Errorf("Commit inside Update: %v, want ErrTxnManaged", err)
		}
		if _, err := tx.CommitAsync(nil); !errors.Is(err, ErrTxnManaged) {
			t.Errorf("CommitAsync inside Update: %v, want ErrTxnManaged", err)
		}
		if err := tx.Rollback(); !errors.Is(err, ErrTxnManaged) {
			t.Errorf("Rollback inside Update: %v, want ErrTxnManaged", err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	if v, ok := get(t, db, "k"); !ok || v != "v" {
		t.Fatalf("k = %q, %v after Update", v, ok)
	}
	boom := errors.New("boom")
	err = db.Update(ctx, func(tx *Txn) error {
		tx.Put([]byte("k"), []byte("w"))
		tx.Rollback()
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Update returning an error: %v", err)
	}
	if v, _ := get(t, db, "k"); v != "v" {
		t.Fatalf("k = %q after a rolled-back Update", v)
	}
	err = db.View(ctx, func(tx *Txn) error {
		if err := tx.Commit(); !errors.Is(err, ErrTxnManaged) {
			t.Errorf("Commit inside View: %v, want ErrTxnManaged", err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("View: %v", err)
	}
	if err := db.Update(ctx, nil); err == nil {
		t.Fatal("Update(nil) returned nil")
	}
	if err := db.View(ctx, nil); err == nil {
		t.Fatal("View(nil) returned nil")
	}
}

// vmReadGate holds every read of a visibility map file past its first
// page while shut, telling blocked of each: a map page being read stays
// pinned in the map's cache until the read returns.
type vmReadGate struct {
	vfs.FS
	mu      sync.Mutex
	gate    chan struct{} // nil while open
	blocked chan struct{}
}

func (g *vmReadGate) shut() {
	g.mu.Lock()
	g.gate = make(chan struct{})
	g.mu.Unlock()
}

func (g *vmReadGate) open() {
	g.mu.Lock()
	if g.gate != nil {
		close(g.gate)
		g.gate = nil
	}
	g.mu.Unlock()
}

func (g *vmReadGate) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.Contains(f.Name(), "/"+vmDir+"/") {
		return f, err
	}
	return vmGatedFile{File: f, g: g}, nil
}

func (g *vmReadGate) Create(name string) (vfs.File, error) { return g.wrap(g.FS.Create(name)) }
func (g *vmReadGate) Open(name string) (vfs.File, error)   { return g.wrap(g.FS.Open(name)) }

type vmGatedFile struct {
	vfs.File
	g *vmReadGate
}

func (f vmGatedFile) ReadAt(p []byte, off int64) (int, error) {
	f.g.mu.Lock()
	ch := f.g.gate
	f.g.mu.Unlock()
	if ch != nil && off >= heap.PageSize {
		f.g.blocked <- struct{}{}
		<-ch
	}
	return f.File.ReadAt(p, off)
}

// The visibility map caches its pages in a pool of its own. With every
// buffer of it pinned (here by reads of other map pages held at the
// disk), a statement that must clear a bit fails with ErrNoFreeBuffer,
// as with the heap's pool full, not with an error of the pool's package;
// the database goes on once the pins are released.
func TestNoFreeMapBuffer(t *testing.T) {
	g := &vmReadGate{FS: vfs.OS{}, blocked: make(chan struct{})}
	dir := t.TempDir()
	o := Options{FS: g, Autovacuum: noAutovacuum, CheckpointTimeout: -1}
	db := openTest(t, dir, o)
	putKeys(t, db, "a", 200, 100)
	mustVacuum(t, db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir, o) // nothing of the map cached
	defer db.Close()
	// Open's background check of the heap reads the map too: a pin of
	// its would leave the last of the reads below without a buffer.
	db.waitOpenScan()
	g.shut()
	// One at a time, so that each finds a free buffer: map pages 1 to
	// 32, past the map file's one page, each pinned while its read waits.
	var wg sync.WaitGroup
	for k := range uint32(visibility.DefaultBuffers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := db.vm.Test((k + 1) * visibility.HeapBlocksPerPage); err != nil {
				t.Errorf("map page %d: %v", k+1, err)
			}
		}()
		<-g.blocked
	}
	err := db.Update(context.Background(), func(tx *Txn) error { return tx.Put([]byte("a000001"), []byte("new")) })
	g.open()
	wg.Wait()
	if !errors.Is(err, ErrNoFreeBuffer) {
		t.Fatalf("a write to an all-visible page with every map buffer pinned: %v, want ErrNoFreeBuffer", err)
	}
	if f := db.Failure(); f != nil {
		t.Fatalf("the database stopped taking writes: %v", f)
	}
	mustPut(t, db, "a000001", "new")
	mustVerify(t, db)
}

// With every buffer of the pool pinned, a statement that needs another
// page fails with ErrNoFreeBuffer, a sentinel of this package, and the
// database goes on once the pins are released.
func TestNoFreeBuffer(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum, SharedBuffers: 16 * heap.PageSize})
	defer db.Close()
	val := strings.Repeat("v", 2000)
	for i := range 200 { // about 50 pages, more than the pool holds
		mustPut(t, db, fmt.Sprint("k", i), val)
	}
	var pinned []*bufpool.Buffer
	for b := uint32(0); ; b++ {
		buf, err := db.pool.Get(b)
		if err != nil {
			if !errors.Is(err, ErrNoFreeBuffer) {
				t.Fatalf("pinning block %d: %v", b, err)
			}
			break
		}
		pinned = append(pinned, buf)
	}
	ctx := context.Background()
	getErr := db.View(ctx, func(tx *Txn) error { _, err := tx.Get([]byte("k0")); return err })
	putErr := db.Update(ctx, func(tx *Txn) error { return tx.Put([]byte("new"), []byte(val)) })
	for _, buf := range pinned {
		buf.Release()
	}
	if !errors.Is(getErr, ErrNoFreeBuffer) && !errors.Is(putErr, ErrNoFreeBuffer) {
		t.Fatalf("with every buffer pinned: Get %v, Put %v; want ErrNoFreeBuffer from one", getErr, putErr)
	}
	for _, err := range []error{getErr, putErr} {
		if err != nil && !errors.Is(err, ErrNoFreeBuffer) {
			t.Fatalf("with every buffer pinned: %v, want ErrNoFreeBuffer", err)
		}
	}
	mustPut(t, db, "new", val)
	if v, ok := get(t, db, "k0"); !ok || v != val {
		t.Fatal("after the pins are released, k0 is lost")
	}
	mustVerify(t, db)
}

// TestDeadlockReportOfALongCycle checks that the report of a cycle longer
// than maxCycleEdges lists that many waits and counts the rest.
func TestDeadlockReportOfALongCycle(t *testing.T) {
	const n = maxCycleEdges + 3
	sts := make([]*txnState, n)
	for i := range sts {
		sts[i] = newTxnState()
		sts[i].xid.Store(uint64(100 + i))
	}
	for i, st := range sts {
		st.waitingFor, st.waitingKey = sts[(i+1)%n], []byte(fmt.Sprint("k", i))
	}
	got := describeCycle(sts[0])
	want := fmt.Sprintf("transaction 100 waits on key \"k0\" for transaction 101, which waits on key \"k1\" for transaction 102, which waits on key \"k2\" for transaction 103, which waits on key \"k3\" for transaction 104, which waits on key \"k4\" for transaction 105, which waits on key \"k5\" for transaction 106, which waits on key \"k6\" for transaction 107, which waits on key \"k7\" for transaction 108, and %d more waits back to the first", n-maxCycleEdges)
	if got != want {
		t.Errorf("describeCycle:\n got %s\nwant %s", got, want)
	}
}

// TestLockShardMapRenewedAfterManyLocks: once the row locks of a
// transaction that held many keys are released, each lock shard's map
// that grew past lockShardShrink is made anew (a Go map keeps the room it
// grew to, and later locks missed the cache on it), and a shard that never
// grew keeps its map. The locks still work after.
func TestLockShardMapRenewedAfterManyLocks(t *testing.T) {
	lm := newLockManager()
	small := lm.shard([]byte("small"))
	smallMap := reflect.ValueOf(small.holders).Pointer()
	one := newTxnState()
	if !lm.tryAcquire("small", one) {
		t.Fatal("a free key's lock was refused")
	}
	lm.releaseAll(one)
	if reflect.ValueOf(small.holders).Pointer() != smallMap {
		t.Fatal("the map of a shard that held one key was made anew")
	}
	before := make([]uintptr, len(lm.shards))
	for i := range lm.shards {
		before[i] = reflect.ValueOf(lm.shards[i].holders).Pointer()
	}
	many := newTxnState()
	n := 4 * lockShardShrink * len(lm.shards)
	for i := range n {
		if err := lm.acquire(context.Background(), fmt.Appendf(nil, "key:%08d", i), many, 0, nil, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	grown := make([]bool, len(lm.shards))
	for i := range lm.shards {
		grown[i] = lm.shards[i].peak > lockShardShrink
	}
	if !slices.Contains(grown, true) {
		t.Fatalf("no shard held more than %d of %d keys", lockShardShrink, n)
	}
	lm.releaseAll(many)
	for i := range lm.shards {
		sh := &lm.shards[i]
		if len(sh.holders) != 0 {
			t.Fatalf("shard %d holds %d keys after the release", i, len(sh.holders))
		}
		if grown[i] && (sh.peak != 0 || reflect.ValueOf(sh.holders).Pointer() == before[i]) {
			t.Fatalf("shard %d: the map that held more than %d keys was kept (peak %d)", i, lockShardShrink, sh.peak)
		}
	}
	other := newTxnState()
	if !lm.tryAcquire("key:00000001", other) || lm.tryAcquire("key:00000001", newTxnState()) {
		t.Fatal("a renewed shard lost track of its holder")
	}
	lm.releaseAll(other)
}

// TestPrefixEnd: the end PrefixEnd gives bounds a scan to exactly the keys
// that begin with the prefix, 0xff bytes and all.
func TestPrefixEnd(t *testing.T) {
	for _, tc := range []struct{ prefix, want []byte }{
		{[]byte("a:"), []byte("a;")},
		{[]byte("a\xff"), []byte("b")},
		{[]byte("a\xfe\xff\xff"), []byte("a\xff")},
		{[]byte("\xff\xff"), nil},
		{nil, nil},
	} {
		if got := PrefixEnd(tc.prefix); !bytes.Equal(got, tc.want) || (tc.want == nil) != (got == nil) {
			t.Errorf("PrefixEnd(%q) = %q, want %q", tc.prefix, got, tc.want)
		}
	}
	p := []byte("a\xff")
	PrefixEnd(p)[0] = 'z'
	if string(p) != "a\xff" {
		t.Errorf("PrefixEnd changed its argument: %q", p)
	}

	db := openTest(t, t.TempDir(), Options{})
	defer db.Close()
	keys := []string{"a", "a\xff", "a\xff\x00", "a\xff\xff", "a\xff\xff\xff", "b", "\xff", "\xff\xff", "\xff\xff\x01"}
	for _, k := range keys {
		mustPut(t, db, k, "v")
	}
	for _, prefix := range []string{"a", "a\xff", "a\xff\xff", "\xff", "\xff\xff"} {
		var got []string
		if err := db.View(context.Background(), func(tx *Txn) error {
			return tx.Scan([]byte(prefix), PrefixEnd([]byte(prefix)), func(k, _ []byte) bool {
				got = append(got, string(k))
				return true
			})
		}); err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, k := range keys {
			if strings.HasPrefix(k, prefix) {
				want = append(want, k)
			}
		}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("scan of prefix %q: %q, want %q", prefix, got, want)
		}
	}
}
