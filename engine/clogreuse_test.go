package engine

import (
	"context"
	"errors"
	"testing"

	"mvkv/vfs"
)

// TestCLOGStatusPastNextXidAfterCrash: a transaction writes, the WAL's
// fsync fails, and the transaction rolls back with no abort record; its
// status reaches the CLOG page, and the page reaches the disk (an
// eviction), though its WAL records never became durable. A crash then loses those records, so recovery's next xid is
// that xid again, and the next transaction takes it. The CLOG page on disk
// still says "aborted" for it: unless recovery clears the statuses past
// the next xid (PostgreSQL's TrimCLOG), a prune or vacuum takes the new
// transaction's running write for an aborted one, and its commit is lost.
func TestCLOGStatusPastNextXidAfterCrash(t *testing.T) {
	ctx := context.Background()
	m := memDB(t)
	ffs := vfs.NewFaultFS(m)
	off := false // a failed commit's status then never reaches the page
	db := openTest(t, "/db", Options{FS: ffs, CheckpointTimeout: -1, Autovacuum: noAutovacuum, EarlyLockRelease: &off})
	mustPut(t, db, "base", "v")
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	tx, err := db.Begin(ctx, TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Put([]byte("gone"), []byte("rolled back")); err != nil {
		t.Fatal(err)
	}
	lost := tx.XID()
	// The WAL's fsync fails: the database stops taking writes, and the
	// rollback that follows can log no abort record.
	ffs.Inject(vfs.Rule{Kinds: vfs.Ops(vfs.OpSync, vfs.OpDatasync), Contains: "/" + walDir + "/"})
	if err := db.Update(ctx, func(w *Txn) error { return w.Put([]byte("other"), []byte("v")) }); err == nil {
		t.Fatal("a commit with the WAL's fsync failing succeeded")
	}
	tx.Rollback()
	// The CLOG page is written out, as an eviction would write it.
	if err := db.clog.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	cp := m.CrashCopy(vfs.DropUnsynced, nil)
	db.Close()

	db = openTest(t, "/db", Options{FS: cp, CheckpointTimeout: -1, Autovacuum: noAutovacuum})
	defer db.Close()
	tx, err = db.Begin(ctx, TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Put([]byte("kept"), []byte("committed")); err != nil {
		t.Fatal(err)
	}
	if tx.XID() != lost {
		t.Fatalf("the new transaction took xid %d, not the lost %d: the crash was to lose it", tx.XID(), lost)
	}
	// Vacuum and a reader's prune, while the write is running.
	if _, err := db.Vacuum(ctx); err != nil {
		t.Fatal(err)
	}
	if err := db.View(ctx, func(r *Txn) error { _, err := r.Get([]byte("kept")); return err }); err != nil && !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	err = db.View(ctx, func(r *Txn) error {
		v, err := r.Get([]byte("kept"))
		if err != nil {
			return err
		}
		if string(v) != "committed" {
			t.Errorf("kept = %q; want %q", v, "committed")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the committed write of xid %d: %v", lost, err)
	}
}
