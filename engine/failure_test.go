package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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

// TestOpenRefusesForeignDirectory: Open does not make a new data directory
// among another program's files, as initdb refuses a directory that is not
// empty; a directory holding only what an interrupted first Open made is
// taken.
func TestOpenRefusesForeignDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "MANIFEST-000001"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, Options{}); err == nil || !errors.Is(err, ErrNotDataDirectory) || !strings.Contains(err.Error(), "MANIFEST-000001") {
		t.Fatalf("Open of a directory of another program's files: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("the refused Open left %d entries; want the one file", len(ents))
	}
	// The same directory named through a missing one and "..": it is
	// still the directory of another program's files.
	if _, err := Open(dir+"/new/..", Options{}); err == nil || !errors.Is(err, ErrNotDataDirectory) {
		t.Fatalf("Open of the directory as new/..: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("the refused Open of new/.. left %d entries; want the one file", len(ents))
	}
	// A path that is a file, not a directory, is refused before anything
	// is created (an unreadable directory is too).
	file := filepath.Join(dir, "MANIFEST-000001")
	if _, err := Open(file, Options{}); !errors.Is(err, ErrNotDataDirectory) || !strings.Contains(err.Error(), file+" is not a directory") {
		t.Fatalf("Open of a regular file as the data directory: %v; want ErrNotDataDirectory saying it is not a directory", err)
	}
	// Another program's wal/ (a write-ahead log of its own) does not make
	// its directory a data directory.
	prom := t.TempDir()
	if err := os.Mkdir(filepath.Join(prom, walDir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(prom, walDir, "00000000"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(prom, Options{}); err == nil || !errors.Is(err, ErrNotDataDirectory) {
		t.Fatalf("Open of a directory with another program's wal/: %v", err)
	}
	// Files with the engine's names but none of its WAL: a control file
	// that is not ours, an index file alone, a heap file alone. Each is
	// refused with nothing created or overwritten.
	for _, c := range []struct{ name, file string }{
		{"a control file that is not ours", controlName},
		{"an index file alone", indexFileName},
		{"a heap file alone", filepath.Join(heapDir, "00000000")},
	} {
		d := t.TempDir()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(d, c.file)), 0o700); err != nil {
			t.Fatal(err)
		}
		precious := bytes.Repeat([]byte("precious"), 7)
		if err := os.WriteFile(filepath.Join(d, c.file), precious, 0o600); err != nil {
			t.Fatal(err)
		}
		before, _ := os.ReadDir(d)
		if _, err := Open(d, Options{}); err == nil || !errors.Is(err, ErrNotDataDirectory) {
			t.Errorf("Open of a directory holding %s: %v; want ErrNotDataDirectory", c.name, err)
		}
		if after, _ := os.ReadDir(d); len(after) != len(before) {
			t.Errorf("the refused Open of a directory holding %s left %d entries; want %d", c.name, len(after), len(before))
		}
		if b, err := os.ReadFile(filepath.Join(d, c.file)); err != nil || !bytes.Equal(b, precious) {
			t.Errorf("the refused Open of a directory holding %s changed it: %q, %v", c.name, b, err)
		}
	}
	begun := t.TempDir()
	for _, d := range []string{heapDir, walDir} {
		if err := os.Mkdir(filepath.Join(begun, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	db := openTest(t, begun, Options{})
	db.Close()
}

// TestCheckpointSyncFailureCause: a failed fsync of the control file fails
// the checkpoint with ErrIOFailure and stops writes; one of the index file,
// only a copy of what the heap and WAL hold, fails it with ErrWriteFailed
// and writes go on, the next checkpoint writing the file again. Either way
// the operating system's error stays matchable behind the sentinel.
func TestCheckpointSyncFailureCause(t *testing.T) {
	for _, tc := range []struct {
		name  string
		op    vfs.OpKind
		want  error
		stops bool
	}{{"control.tmp", vfs.OpSync, ErrIOFailure, true}, {"index.tmp", vfs.OpSync, ErrWriteFailed, false}, {"index.tmp", vfs.OpWrite, ErrWriteFailed, false}} {
		t.Run(fmt.Sprint(tc.name, "-", tc.op), func(t *testing.T) {
			m := vfs.NewMemFS()
			ffs := vfs.NewFaultFS(m)
			db := openTest(t, "/db", Options{FS: ffs, Autovacuum: noAutovacuum, CheckpointTimeout: -1})
			defer db.Close()
			mustPut(t, db, "a", "1")
			ffs.Inject(vfs.Rule{Kinds: vfs.Ops(tc.op), Contains: tc.name, Err: syscall.EIO})
			err := db.Checkpoint()
			if !errors.Is(err, tc.want) || !errors.Is(err, syscall.EIO) {
				t.Fatalf("checkpoint with %s's %v failing: %v; want %v wrapping EIO", tc.name, tc.op, err, tc.want)
			}
			if n := strings.Count(err.Error(), "I/O failure"); tc.stops && n != 1 {
				t.Fatalf("%q says %q %d times", err, "I/O failure", n)
			}
			ffs.Clear()
			err = db.Update(context.Background(), func(tx *Txn) error { return tx.Put([]byte("b"), []byte("2")) })
			if tc.stops != (err != nil) {
				t.Fatalf("a write after the failed checkpoint: %v (want it to fail: %v)", err, tc.stops)
			}
			if !tc.stops {
				if err := db.Checkpoint(); err != nil {
					t.Fatalf("the next checkpoint: %v", err)
				}
				if db.Failure() != nil {
					t.Fatalf("Failure after an index file fsync failed: %v", db.Failure())
				}
			}
		})
	}
}

// TestTruncateSyncFailureCause: a failed fsync of a heap file that
// vacuum's truncation cuts stops writes with ErrIOFailure, the operating
// system's error matchable behind it and 'I/O failure' said once, as for
// the other data files.
func TestTruncateSyncFailureCause(t *testing.T) {
	m := vfs.NewMemFS()
	ffs := vfs.NewFaultFS(m)
	db := openTest(t, "/db", Options{FS: ffs, Autovacuum: noAutovacuum, CheckpointTimeout: -1})
	defer db.Close()
	for i := range 50 {
		mustPut(t, db, fmt.Sprintf("a%03d", i), strings.Repeat("a", 300))
	}
	for i := range 200 {
		mustPut(t, db, fmt.Sprintf("t%03d", i), strings.Repeat("t", 1900))
	}
	for i := range 200 {
		mustDelete(t, db, fmt.Sprintf("t%03d", i))
	}
	// The heap files are clean, so the only heap fsync vacuum makes is
	// the cut's own.
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	f := ffs.Inject(vfs.Rule{Kinds: vfs.Ops(vfs.OpSync), Contains: "/heap/", Err: syscall.EIO})
	_, err := db.Vacuum(context.Background())
	if f.Fired() == 0 {
		t.Fatalf("no heap fsync failed (vacuum: %v)", err)
	}
	if !errors.Is(err, ErrIOFailure) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("vacuum with the cut's fsync failing: %v; want ErrIOFailure wrapping EIO", err)
	}
	if n := strings.Count(err.Error(), ErrIOFailure.Error()); n != 1 {
		t.Fatalf("%q says %q %d times", err, ErrIOFailure, n)
	}
	if err := db.Failure(); !errors.Is(err, ErrIOFailure) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("Failure() = %v; want ErrIOFailure wrapping EIO", err)
	}
}
