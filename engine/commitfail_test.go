package engine

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"mvkv/clog"
	"mvkv/vfs"
)

// TestCommitRecordAppendFailureAborts: a commit whose record the WAL
// refuses (a write of the WAL failed in the background, before the
// database learned of it) ends as an abort does: its xid reads as aborted,
// it leaves the running table and its row locks are released, so a
// transaction waiting for one goes on at once; after a reopen nothing it
// wrote is visible and its xid does not read as committed. Run for Commit and
// CommitAsync, which share the append.
func TestCommitRecordAppendFailureAborts(t *testing.T) {
	for _, async := range []bool{false, true} {
		name := "Commit"
		if async {
			name = "CommitAsync"
		}
		t.Run(name, func(t *testing.T) { testCommitAppendFailure(t, async) })
	}
}

func testCommitAppendFailure(t *testing.T, async bool) {
	m := vfs.NewMemFS()
	ffs := vfs.NewFaultFS(m)
	opts := Options{FS: ffs, WALWriterDelay: time.Hour, Autovacuum: noAutovacuum}
	db := openTest(t, "/db", opts)
	mustPut(t, db, "k", "0")
	ctx := context.Background()
	tx, err := db.Begin(ctx, TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Put([]byte("k"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	xid := tx.XID()
	// Another transaction waits for tx's row lock on k.
	other, err := db.Begin(ctx, TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The WAL's own flush fails (as the background WAL writer's would):
	// the WAL refuses every later insert, and the database does not know
	// yet, so tx's Commit gets as far as appending its record.
	ffs.Inject(vfs.Rule{Kinds: vfs.Ops(vfs.OpWrite), Contains: "/wal/", Err: syscall.EIO, Permanent: vfs.MutatingOps})
	if err := db.wal.Flush(db.wal.InsertLSN()); err == nil {
		t.Fatal("the WAL flush did not fail")
	}
	if err := db.Failure(); err != nil {
		t.Fatalf("Failure() = %v before the commit; the test needs the database not to know yet", err)
	}
	aborts := db.Stats().Txn.Aborts
	if async {
		_, err = tx.CommitAsync(nil)
	} else {
		err = tx.Commit()
	}
	if !errors.Is(err, ErrWALSyncFailed) {
		t.Fatalf("commit = %v; want ErrWALSyncFailed", err)
	}
	if st, err := db.clog.Status(xid); err != nil || st != clog.StatusAborted {
		t.Fatalf("xid %d reads as %v (%v); want aborted", xid, st, err)
	}
	if db.procs.isRunning(xid) {
		t.Fatalf("xid %d is still in the running table", xid)
	}
	if !db.locks.ifUnlocked([]byte("k"), func() {}) {
		t.Fatal("k's row lock is still held")
	}
	if got := db.Stats().Txn.Aborts - aborts; got != 1 {
		t.Fatalf("aborts counted: %d; want 1", got)
	}
	// The waiting transaction is refused by the failure, not by the lock.
	if err := other.Put([]byte("k"), []byte("2")); !errors.Is(err, ErrWALSyncFailed) {
		t.Fatalf("a later write: %v; want ErrWALSyncFailed", err)
	}
	if v, ok := get(t, db, "k"); !ok || v != "0" {
		t.Fatalf("k = %q, %v after the failed commit; want 0", v, ok)
	}
	db.Close()
	ffs.Clear()
	db = openTest(t, "/db", opts)
	defer db.Close()
	if v, ok := get(t, db, "k"); !ok || v != "0" {
		t.Fatalf("k = %q, %v after the reopen; want 0", v, ok)
	}
	// The WAL lost every record of the transaction, so recovery may not
	// know its xid at all (and may hand it out again): it reads as
	// anything but committed.
	if st, err := db.clog.Status(xid); err != nil || st == clog.StatusCommitted {
		t.Fatalf("after the reopen xid %d reads as %v (%v); want not committed", xid, st, err)
	}
}
