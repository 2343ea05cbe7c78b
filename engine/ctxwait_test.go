package engine

import (
	"context"
	"errors"
	"io/fs"
	"iter"
	"sync"
	"testing"

	"mvkv/clog"
	"mvkv/vfs"
)

// noRows is a bulk load's rows that must not be called.
func noRows(t *testing.T) iter.Seq2[[]byte, []byte] {
	return func(func(k, v []byte) bool) { t.Error("rows was called") }
}

// TestBulkLoadWaitEndsWithContext: a bulk load waiting for the checkpoint
// lock (held for long by a running Backup's copy, here by the test) gives
// up when its context ends, or when Close begins, having loaded nothing; a
// load afterwards succeeds.
func TestBulkLoadWaitEndsWithContext(t *testing.T) {
	t.Run("cancel", func(t *testing.T) {
		db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum})
		defer db.Close()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		db.ckptMu.Lock()
		_, err := db.BulkLoad(ctx, noRows(t))
		db.ckptMu.Unlock()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("BulkLoad = %v; want an error wrapping context.Canceled", err)
		}
		st, err := db.BulkLoad(context.Background(), bulkRows(100, 10))
		if err != nil || st.Keys != 100 {
			t.Fatalf("BulkLoad after = %+v, %v", st, err)
		}
		checkState(t, db, bulkState(100, 10))
	})
	t.Run("close", func(t *testing.T) {
		db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum})
		db.ckptMu.Lock()
		loaded := make(chan error, 1)
		go func() {
			_, err := db.BulkLoad(context.Background(), noRows(t))
			loaded <- err
		}()
		closed := make(chan error, 1)
		go func() { closed <- db.Close() }()
		if err := <-loaded; !errors.Is(err, ErrClosed) {
			t.Fatalf("BulkLoad = %v; want ErrClosed", err)
		}
		db.ckptMu.Unlock() // Close's checkpoint takes it
		if err := <-closed; err != nil {
			t.Fatalf("Close: %v", err)
		}
	})
}

// TestBackupWaitForBulkLoadEndsWithContext: a Backup called while a bulk
// load runs (holding the checkpoint lock until its commit) gives up when
// its context ends, leaving no copy; the load goes on and commits.
func TestBackupWaitForBulkLoadEndsWithContext(t *testing.T) {
	m := vfs.NewMemFS()
	db := openTest(t, "/db", Options{FS: m, Autovacuum: noAutovacuum})
	defer db.Close()
	inRows, release := make(chan struct{}), make(chan struct{})
	rows := func(yield func(k, v []byte) bool) {
		close(inRows)
		<-release
		for k, v := range bulkRows(100, 10) {
			if !yield(k, v) {
				return
			}
		}
	}
	loaded := make(chan error, 1)
	go func() {
		_, err := db.BulkLoad(context.Background(), rows)
		loaded <- err
	}()
	<-inRows
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := db.Backup(ctx, "/bk")
	close(release)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Backup = %v; want an error wrapping context.Canceled", err)
	}
	for _, d := range []string{"/bk", "/bk.partial"} {
		if _, err := m.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s after the Backup gave up: %v", d, err)
		}
	}
	if err := <-loaded; err != nil {
		t.Fatalf("BulkLoad: %v", err)
	}
	checkState(t, db, bulkState(100, 10))
}

// TestCommitWaitForBulkLoadEndsWithContext: a Commit waiting for a bulk
// load to end (here one the test stands for) gives up when the
// transaction's context ends: no commit record, the transaction rolled
// back (xid aborted, row locks released), the error wrapping the
// context's.
func TestCommitWaitForBulkLoadEndsWithContext(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum})
	defer db.Close()
	mustPut(t, db, "k", "0")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tx, err := db.Begin(ctx, TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Put([]byte("k"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	xid := tx.XID()
	running := make(chan struct{})
	db.bulkRunning.Store(&running)
	var once sync.Once
	db.testBulkWait = func() {
		if ctx.Err() == nil {
			cancel() // the commit waits: its context ends
			return
		}
		// The rollback waits too, as it would for a load failing on
		// the versions this transaction placed: the load ends.
		once.Do(func() {
			db.bulkRunning.Store(nil)
			close(running)
		})
	}
	err = tx.Commit()
	db.testBulkWait = nil
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Commit = %v; want an error wrapping context.Canceled", err)
	}
	if st, err := db.clog.Status(xid); err != nil || st != clog.StatusAborted {
		t.Fatalf("xid %d reads as %v (%v); want aborted", xid, st, err)
	}
	if !db.locks.ifUnlocked([]byte("k"), func() {}) {
		t.Fatal("k's row lock is still held")
	}
	if v, ok := get(t, db, "k"); !ok || v != "0" {
		t.Fatalf("k = %q, %v; want 0", v, ok)
	}
}
