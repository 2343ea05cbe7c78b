package engine

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"mvkv/vfs"
)

// TestDiskFullOnWAL: a WAL sync that finds the disk full stops writes with
// ErrWALSyncFailed, whose cause stays matchable (syscall.ENOSPC); Failure
// reports the same state, Close returns it, and a reopen once there is
// room again recovers every acknowledged write.
func TestDiskFullOnWAL(t *testing.T) {
	m := vfs.NewMemFS()
	ffs := vfs.NewFaultFS(m)
	db := openTest(t, "/db", Options{FS: ffs, WALWriterDelay: time.Hour, Autovacuum: noAutovacuum})
	mustPut(t, db, "a", "1")
	if err := db.Failure(); err != nil {
		t.Fatalf("Failure() = %v before any failure", err)
	}
	ffs.Inject(vfs.Rule{Kinds: vfs.Ops(vfs.OpDatasync), Contains: "/wal/", Err: syscall.ENOSPC, Permanent: vfs.SyncOps})
	err := db.Update(context.Background(), func(tx *Txn) error { return tx.Put([]byte("b"), []byte("2")) })
	if !errors.Is(err, ErrWALSyncFailed) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write on a full disk: %v; want ErrWALSyncFailed wrapping ENOSPC", err)
	}
	if err := db.Failure(); !errors.Is(err, ErrWALSyncFailed) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Failure() = %v; want ErrWALSyncFailed wrapping ENOSPC", err)
	}
	if err := db.Close(); !errors.Is(err, ErrWALSyncFailed) {
		t.Fatalf("Close after the failure: %v; want ErrWALSyncFailed", err)
	}
	ffs.Clear()
	db = openTest(t, "/db", Options{FS: ffs, Autovacuum: noAutovacuum})
	defer db.Close()
	if v, ok := get(t, db, "a"); !ok || v != "1" {
		t.Fatalf("a = %q, %v after the reopen", v, ok)
	}
	if err := db.Failure(); err != nil {
		t.Fatalf("Failure() = %v after the reopen", err)
	}
}
