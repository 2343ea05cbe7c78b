package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"mvkv/vfs"
)

// walGate holds every WAL flush (an fdatasync of a segment) while shut, so
// a test can stand between a commit record's insertion and its durability
// without relying on timing. A WAL file's fsync passes: it is the segment
// preparer's, of the next segment, which it makes in the background at any
// moment after a segment opens, and a test that took it for a commit's
// flush reached its gate would go on before the commit it waits for was
// even inserted.
type walGate struct {
	vfs.FS
	mu      sync.Mutex
	gate    chan struct{} // guarded by mu; nil when open
	blocked chan struct{} // a token per WAL flush that reached a shut gate
}

func newWALGate(fs vfs.FS) *walGate { return &walGate{FS: fs, blocked: make(chan struct{}, 1024)} }

func (g *walGate) shut() { g.mu.Lock(); g.gate = make(chan struct{}); g.mu.Unlock() }

func (g *walGate) open() {
	g.mu.Lock()
	if g.gate != nil {
		close(g.gate)
		g.gate = nil
	}
	g.mu.Unlock()
}

func (g *walGate) wait() {
	g.mu.Lock()
	ch := g.gate
	g.mu.Unlock()
	if ch != nil {
		g.blocked <- struct{}{}
		<-ch
	}
}

func (g *walGate) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.Contains(f.Name(), "/wal/") {
		return f, err
	}
	return gatedFile{File: f, g: g}, nil
}

func (g *walGate) Create(name string) (vfs.File, error) { return g.wrap(g.FS.Create(name)) }
func (g *walGate) Open(name string) (vfs.File, error)   { return g.wrap(g.FS.Open(name)) }

type gatedFile struct {
	vfs.File
	g *walGate
}

func (f gatedFile) Datasync() error { f.g.wait(); return f.File.Datasync() }

func putAsync(t *testing.T, db *DB, k, v string, after *CommitWait) *CommitWait {
	t.Helper()
	tx, err := db.Begin(context.Background(), TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Put([]byte(k), []byte(v)); err != nil {
		t.Fatal(err)
	}
	w, err := tx.CommitAsync(after)
	if err != nil {
		t.Fatalf("CommitAsync of %s: %v", k, err)
	}
	return w
}

func isDone(w *CommitWait) bool {
	select {
	case <-w.Done():
		return true
	default:
		return false
	}
}

// TestCommitAsyncInvisibleUntilDurable holds the WAL sync with early lock
// release off: a pipeline of commits is appended, but none is visible,
// none is done and their row locks stay held until the sync completes,
// after which all complete.
func TestCommitAsyncInvisibleUntilDurable(t *testing.T) {
	g := newWALGate(vfs.OS{})
	off := false
	db := openTest(t, t.TempDir(), Options{FS: g, CheckpointTimeout: -1, EarlyLockRelease: &off})
	defer db.Close()
	mustPut(t, db, "a", "old")
	g.shut()
	w1 := putAsync(t, db, "a", "new", nil)
	w2 := putAsync(t, db, "b", "new", w1)
	<-g.blocked // a flush of the pipeline is waiting for the disk
	if v, _ := get(t, db, "a"); v != "old" {
		t.Fatalf("a = %q before its commit record is durable; want old", v)
	}
	if _, ok := get(t, db, "b"); ok {
		t.Fatal("b visible before its commit record is durable")
	}
	// Another writer of a must wait for the row lock.
	wrote := make(chan error, 1)
	go func() {
		wrote <- db.Update(context.Background(), func(tx *Txn) error {
			return tx.Update([]byte("a"), func(old []byte, _ bool) ([]byte, error) { return append(old, '+'), nil })
		})
	}()
	if isDone(w1) || isDone(w2) {
		t.Fatal("a commit completed while its WAL sync was held")
	}
	select {
	case err := <-wrote:
		t.Fatalf("a writer of a key locked by an undurable commit finished (%v)", err)
	default:
	}
	g.open()
	ctx := context.Background()
	if err := w1.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w2.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if v, _ := get(t, db, "a"); v != "new+" {
		t.Fatalf("a = %q; want new+", v)
	}
	if v, _ := get(t, db, "b"); v != "new" {
		t.Fatalf("b = %q; want new", v)
	}
}

// TestCommitAsyncSameKey pipelines writes of one key from one goroutine:
// each later write waits for the earlier commit's row lock, so a pipeline
// of increments loses none.
func TestCommitAsyncSameKey(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{CheckpointTimeout: -1})
	defer db.Close()
	ctx := context.Background()
	var last *CommitWait
	var waits []*CommitWait
	const n = 20
	for range n {
		tx, err := db.Begin(ctx, TxnOptions{})
		if err != nil {
			t.Fatal(err)
		}
		err = tx.Update([]byte("ctr"), func(old []byte, found bool) ([]byte, error) {
			v := 0
			if found {
				v, _ = strconv.Atoi(string(old))
			}
			return []byte(strconv.Itoa(v + 1)), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if last, err = tx.CommitAsync(last); err != nil {
			t.Fatal(err)
		}
		waits = append(waits, last)
	}
	for i, w := range waits {
		if err := w.Wait(ctx); err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
	}
	if v, _ := get(t, db, "ctr"); v != strconv.Itoa(n) {
		t.Fatalf("ctr = %s after %d pipelined increments", v, n)
	}
}

// TestCommitAsyncOrder checks that a pipeline's commits become visible in
// order: a reader that sees key i of a pipeline sees every key before it.
func TestCommitAsyncOrder(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{CheckpointTimeout: -1})
	defer db.Close()
	ctx := context.Background()
	const pipelines, depth = 8, 16
	var stop atomic.Bool
	var wg sync.WaitGroup
	errc := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			err := db.View(ctx, func(tx *Txn) error {
				for p := range pipelines {
					seen := true
					for i := range depth {
						_, err := tx.Get(fmt.Appendf(nil, "p%d:%02d", p, i))
						switch {
						case errors.Is(err, ErrNotFound):
							seen = false
						case err != nil:
							return err
						case !seen:
							return fmt.Errorf("pipeline %d: key %d visible before an earlier one", p, i)
						}
					}
				}
				return nil
			})
			if err != nil {
				select {
				case errc <- err:
				default:
				}
				return
			}
		}
	}()
	for p := range pipelines {
		var last *CommitWait
		for i := range depth {
			last = putAsync(t, db, fmt.Sprintf("p%d:%02d", p, i), "v", last)
		}
		if err := last.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
}

// TestCommitAsyncErrors: a transaction already ended, a read-only one, and
// a WAL sync failure, which every commit of the pipeline reports. With
// early lock release off the failed commits were never visible; with it on
// they were, and a reader that saw them fails its commit.
func TestCommitAsyncErrors(t *testing.T) {
	for _, elr := range []bool{false, true} {
		t.Run(fmt.Sprintf("early_lock_release=%v", elr), func(t *testing.T) { testCommitAsyncErrors(t, elr) })
	}
}

func testCommitAsyncErrors(t *testing.T, elr bool) {
	m := vfs.NewMemFS()
	ffs := vfs.NewFaultFS(m)
	// No background WAL writer: the injected failure must hit the commit.
	db := openTest(t, "/db", Options{FS: ffs, CheckpointTimeout: -1, WALWriterDelay: time.Hour, EarlyLockRelease: &elr})
	defer db.Close()
	ctx := context.Background()

	tx, _ := db.Begin(ctx, TxnOptions{})
	w, err := tx.CommitAsync(nil)
	if err != nil || !isDone(w) || w.Wait(ctx) != nil || w.LSN() != 0 {
		t.Fatalf("read-only CommitAsync: %v, done %v", err, isDone(w))
	}
	if _, err := tx.CommitAsync(nil); !errors.Is(err, ErrTxnDone) {
		t.Fatalf("second CommitAsync: %v; want ErrTxnDone", err)
	}
	//lint:ignore SA1012 a nil ctx is documented to wait without a deadline
	if err := w.Wait(nil); err != nil {
		t.Fatalf("Wait(nil): %v", err)
	}
	// after from another database: refused, the transaction still open.
	other := openTest(t, t.TempDir(), Options{})
	defer other.Close()
	otx, _ := other.Begin(ctx, TxnOptions{})
	if err := otx.Put([]byte("o"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	wo, err := otx.CommitAsync(nil)
	if err != nil {
		t.Fatal(err)
	}
	tx, _ = db.Begin(ctx, TxnOptions{})
	if err := tx.Put([]byte("p"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.CommitAsync(wo); err == nil {
		t.Fatal("CommitAsync after another database's commit: no error")
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("commit after the refused CommitAsync: %v", err)
	}
	if err := wo.Wait(ctx); err != nil {
		t.Fatal(err)
	}

	// Both transactions write before either commits, so that the
	// failure reaches them through their commits.
	var txs []*Txn
	for _, k := range []string{"x", "y"} {
		tx, err := db.Begin(ctx, TxnOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Put([]byte(k), []byte("1")); err != nil {
			t.Fatal(err)
		}
		txs = append(txs, tx)
	}
	// Datasync only: the commit path's sync. The segment preparer's
	// File.Sync runs in the background and, delayed under load, would
	// otherwise take the failure meant for the commit.
	ffs.Inject(vfs.Rule{Kinds: vfs.Ops(vfs.OpDatasync), Contains: "/wal/", Nth: 1})
	w1, err := txs[0].CommitAsync(nil)
	if err != nil {
		t.Fatal(err)
	}
	// y's commit record may be appended after the failure, or its
	// append may meet it.
	w2, err := txs[1].CommitAsync(w1)
	if err != nil {
		if !errors.Is(err, ErrWALSyncFailed) {
			t.Fatalf("CommitAsync after a failed WAL sync: %v; want ErrWALSyncFailed", err)
		}
		w2 = w1
	}
	for i, w := range []*CommitWait{w1, w2} {
		if err := w.Wait(ctx); !errors.Is(err, ErrWALSyncFailed) {
			t.Fatalf("commit %d after a failed WAL sync: %v; want ErrWALSyncFailed", i+1, err)
		}
	}
	rtx, _ := db.Begin(ctx, TxnOptions{ReadOnly: true})
	defer rtx.Rollback()
	v, err := rtx.Get([]byte("x"))
	if !elr {
		if err == nil {
			t.Fatalf("x = %q visible although its commit failed", v)
		}
		return
	}
	if err != nil {
		t.Fatalf("x not visible after its early-released commit: %v", err)
	}
	if err := rtx.Commit(); !errors.Is(err, ErrWALSyncFailed) {
		t.Fatalf("a reader of a commit whose WAL sync failed committed with %v; want ErrWALSyncFailed", err)
	}
}

// TestCommitAsyncCrash takes a crash copy after every file-system
// operation of a workload of pipelines and checks that every commit whose
// Wait had returned nil is in the copy.
func TestCommitAsyncCrash(t *testing.T) {
	m := vfs.NewMemFS()
	if err := m.MkdirAll("/db"); err != nil {
		t.Fatal(err)
	}
	if err := m.SyncDir("/"); err != nil {
		t.Fatal(err)
	}
	db := openTest(t, "/db", Options{FS: m, CheckpointTimeout: -1})
	var ackMu sync.Mutex
	var acked []string // guarded by ackMu
	points := 0
	m.SetOpHook(func(p vfs.CrashPoint) {
		ackMu.Lock()
		keys := append([]string(nil), acked...)
		ackMu.Unlock()
		points++
		if p.Op.Index%2 == 0 && len(keys) > 0 {
			return // every other point, to keep the run short
		}
		c := p.CrashCopy(vfs.DropUnsynced, nil)
		cdb, err := Open("/db", Options{FS: c, SharedBuffers: 4 << 20, WALSegmentSize: 1 << 20, CheckpointTimeout: -1})
		if err != nil {
			t.Errorf("crash after %v: Open: %v", p.Op, err)
			return
		}
		for _, k := range keys {
			if _, ok := get(t, cdb, k); !ok {
				t.Errorf("crash after %v: acknowledged %s lost", p.Op, k)
			}
		}
		cdb.Close()
	})
	ctx := context.Background()
	for p := range 4 {
		var last *CommitWait
		var waits []*CommitWait
		var keys []string
		for i := range 6 {
			k := fmt.Sprintf("p%d:%d", p, i)
			last = putAsync(t, db, k, "v", last)
			waits = append(waits, last)
			keys = append(keys, k)
		}
		for i, w := range waits {
			if err := w.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			ackMu.Lock()
			acked = append(acked, keys[i])
			ackMu.Unlock()
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	m.SetOpHook(nil)
	t.Logf("%d crash points, %d commits acknowledged", points, len(acked))
}

// TestCloseWaitsForCommitAsync closes the database right after a pipeline
// is appended: Close waits for the commits, which then survive a reopen.
func TestCloseWaitsForCommitAsync(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir, Options{CheckpointTimeout: -1})
	var last *CommitWait
	for i := range 10 {
		last = putAsync(t, db, fmt.Sprintf("k%d", i), "v", last)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := last.Wait(context.Background()); err != nil {
		t.Fatalf("commit before Close: %v", err)
	}
	db = openTest(t, dir, Options{})
	defer db.Close()
	for i := range 10 {
		if _, ok := get(t, db, fmt.Sprintf("k%d", i)); !ok {
			t.Fatalf("k%d lost across Close", i)
		}
	}
}

// A nil *CommitWait, which CommitAsync takes as its after, is a commit
// that has completed with nothing to wait for; its methods do not panic.
func TestNilCommitWait(t *testing.T) {
	var w *CommitWait
	if err := w.Wait(context.Background()); err != nil {
		t.Errorf("Wait = %v, want nil", err)
	}
	if !w.Visible() {
		t.Error("Visible = false, want true")
	}
	select {
	case <-w.Done():
	default:
		t.Error("Done is not closed")
	}
	if w.LSN() != 0 {
		t.Errorf("LSN = %d, want 0", w.LSN())
	}
}
