package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"syscall"
	"testing"

	"mvkv/vfs"
)

// An error that aborted a transaction reads with the engine's prefix
// once, both from a later call of the aborted transaction and from its
// Commit, and still matches the error that aborted it.
func TestAbortErrorPrefixedOnce(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{})
	defer db.Close()
	ctx := context.Background()
	mustPut(t, db, "n", "0")
	tx, err := db.Begin(ctx, TxnOptions{Isolation: RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Get([]byte("n")); err != nil {
		t.Fatal(err)
	}
	mustPut(t, db, "n", "1")
	if err := tx.Put([]byte("n"), []byte("2")); !errors.Is(err, ErrSerializationFailure) {
		t.Fatalf("write after a concurrent update: %v; want ErrSerializationFailure", err)
	}
	_, err = tx.Get([]byte("n"))
	if want := "mvkv: current transaction is aborted: could not serialize access due to concurrent update"; err == nil || !strings.HasPrefix(err.Error(), want) || strings.Count(err.Error(), "mvkv: ") != 1 {
		t.Errorf("Get in the aborted transaction: %v; want it to begin %q, with no other \"mvkv: \"", err, want)
	}
	if !errors.Is(err, ErrSerializationFailure) || !IsRetryable(err) {
		t.Errorf("Get in the aborted transaction: %v does not match ErrSerializationFailure or is not retryable", err)
	}
	err = tx.Commit()
	if want := "mvkv: transaction rolled back: could not serialize access due to concurrent update"; err == nil || !strings.HasPrefix(err.Error(), want) || strings.Count(err.Error(), "mvkv: ") != 1 {
		t.Errorf("Commit of the aborted transaction: %v; want it to begin %q, with no other \"mvkv: \"", err, want)
	}
	if !errors.Is(err, ErrSerializationFailure) || !IsRetryable(err) {
		t.Errorf("Commit of the aborted transaction: %v does not match ErrSerializationFailure or is not retryable", err)
	}
}

func TestWrapf(t *testing.T) {
	pe := &fs.PathError{Op: "open", Path: "x", Err: fs.ErrNotExist}
	for _, c := range []struct {
		err  error
		want string
	}{
		{ErrDeadlock, "mvkv: transaction rolled back: deadlock detected"},
		{wrapf(ErrDeadlock, "current transaction is aborted"), "mvkv: transaction rolled back: current transaction is aborted: deadlock detected"},
		{pe, "mvkv: transaction rolled back: open x: file does not exist"},
		{errors.New("heap: mvkv: x"), "mvkv: transaction rolled back: heap: mvkv: x"},
	} {
		err := wrapf(c.err, "transaction rolled back")
		if err.Error() != c.want {
			t.Errorf("wrapf(%q) = %q; want %q", c.err, err, c.want)
		}
		if !errors.Is(err, c.err) {
			t.Errorf("wrapf(%q) does not match what it wraps", c.err)
		}
	}
	var got *fs.PathError
	if err := wrapf(wrapf(pe, "read x"), "lock y"); !errors.As(err, &got) || got != pe || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("errors.As through two wraps: %v", err)
	}
}

// TestControlAndIndexFileErrorsPrefixed: a failed file operation on the
// control file, read at Open and written by a checkpoint, or on the index
// file a checkpoint writes, gives an error that begins with the engine's
// prefix, says it once, names the file once, and still matches the operating
// system's error.
func TestControlAndIndexFileErrorsPrefixed(t *testing.T) {
	type fault struct {
		base string
		kind vfs.OpKind
		nth  int64
	}
	check := func(t *testing.T, what string, err error, f fault) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s with %s's %v failing: no error", what, f.base, f.kind)
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, errPrefix) || strings.Count(msg, errPrefix) != 1 || !strings.Contains(msg, f.base) || !errors.Is(err, syscall.EIO) {
			t.Errorf("%s with %s's %v failing: %q; want it to begin with %q once, name %s, and match EIO", what, f.base, f.kind, msg, errPrefix, f.base)
		}
		if f.base != "db" && strings.Count(msg, "/db/"+f.base) != 1 {
			t.Errorf("%s with %s's %v failing: %q; want it to name /db/%s once", what, f.base, f.kind, msg, f.base)
		}
	}
	for _, f := range []fault{
		{"control", vfs.OpStat, 0}, {"control", vfs.OpOpen, 0}, {"control", vfs.OpRead, 0},
		{controlTmpName, vfs.OpRemove, 0}, {indexFileTmpName, vfs.OpRemove, 0},
	} {
		t.Run(fmt.Sprint("open-", f.base, "-", f.kind), func(t *testing.T) {
			m := vfs.NewMemFS()
			db := openTest(t, "/db", Options{FS: m, Autovacuum: noAutovacuum})
			mustPut(t, db, "a", "1")
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			ffs := vfs.NewFaultFS(m)
			ffs.Inject(vfs.Rule{Kinds: vfs.Ops(f.kind), Base: f.base, Nth: f.nth})
			db, err := Open("/db", Options{FS: ffs, Autovacuum: noAutovacuum})
			if err == nil {
				db.Close()
			}
			check(t, "Open", err, f)
		})
	}
	for _, f := range []fault{
		{controlTmpName, vfs.OpCreate, 0}, {controlTmpName, vfs.OpWrite, 0}, {controlTmpName, vfs.OpSync, 0},
		{controlTmpName, vfs.OpRename, 0}, {"db", vfs.OpSyncDir, 2},
		{indexFileTmpName, vfs.OpCreate, 0}, {indexFileTmpName, vfs.OpWrite, 0}, {indexFileTmpName, vfs.OpSync, 0},
		{indexFileTmpName, vfs.OpRename, 0}, {"db", vfs.OpSyncDir, 1},
	} {
		t.Run(fmt.Sprint("checkpoint-", f.base, "-", f.kind, "-", f.nth), func(t *testing.T) {
			ffs := vfs.NewFaultFS(vfs.NewMemFS())
			db := openTest(t, "/db", Options{FS: ffs, Autovacuum: noAutovacuum, CheckpointTimeout: -1})
			defer db.Close()
			mustPut(t, db, "a", "1")
			ffs.Inject(vfs.Rule{Kinds: vfs.Ops(f.kind), Base: f.base, Nth: f.nth})
			check(t, "Checkpoint", db.Checkpoint(), f)
		})
	}
}
