package engine

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"mvkv/vfs"
)

// memTree lists every directory and file under root on fsys, with each
// file's size (-1 for a directory).
func memTree(t *testing.T, fsys vfs.FS, root string) map[string]int64 {
	t.Helper()
	tree := map[string]int64{}
	var walk func(d string)
	walk = func(d string) {
		names, err := fsys.ReadDir(d)
		if err != nil {
			t.Fatalf("list %s: %v", d, err)
		}
		for _, n := range names {
			p := filepath.Join(d, n)
			if _, err := fsys.ReadDir(p); err == nil {
				tree[p] = -1
				walk(p)
				continue
			}
			size, err := fsys.Stat(p)
			if err != nil {
				t.Fatalf("stat %s: %v", p, err)
			}
			tree[p] = size
		}
	}
	walk(root)
	return tree
}

// treeDiff describes how after differs from before, or "" if not at all.
func treeDiff(before, after map[string]int64) string {
	var d []string
	for _, p := range slices.Sorted(maps.Keys(after)) {
		if s, ok := before[p]; !ok {
			d = append(d, "made "+p)
		} else if s != after[p] {
			d = append(d, fmt.Sprintf("%s is %d bytes, was %d", p, after[p], s))
		}
	}
	for _, p := range slices.Sorted(maps.Keys(before)) {
		if _, ok := after[p]; !ok {
			d = append(d, "removed "+p)
		}
	}
	return strings.Join(d, "; ")
}

// TestFailedOpenRemovesWhatItMade: an Open that makes a new data directory
// and then fails (here at every file operation in turn, EIO injected)
// leaves the file system as it found it: a missing directory (and a
// missing parent) missing, an empty one empty, and what a first Open cut
// short left behind there (the lock file, empty subdirectories) as it
// was; and the directory then opens.
func TestFailedOpenRemovesWhatItMade(t *testing.T) {
	opts := Options{WALSegmentSize: 1 << 20, SharedBuffers: 16 * 8192, Autovacuum: noAutovacuum, CheckpointTimeout: -1}
	// Every kind of operation for the empty directory; for the others,
	// the kinds that make or change something (each Open takes about
	// 50 ms under the race detector).
	made := vfs.Ops(vfs.OpCreate, vfs.OpWrite, vfs.OpSync, vfs.OpDatasync, vfs.OpRename, vfs.OpMkdir, vfs.OpSyncDir, vfs.OpLock)
	cases := []struct {
		name, dir string
		kinds     vfs.OpSet
		setup     func(t *testing.T, m *vfs.MemFS)
	}{
		{"missing directory and parent", "/x/db", made, func(*testing.T, *vfs.MemFS) {}},
		{"empty directory", "/db", vfs.AllOps, func(t *testing.T, m *vfs.MemFS) {
			if err := m.MkdirAll("/db"); err != nil {
				t.Fatal(err)
			}
		}},
		{"what a first Open cut short left", "/db", made, func(t *testing.T, m *vfs.MemFS) {
			for _, d := range []string{"/db/wal", "/db/vm"} {
				if err := m.MkdirAll(d); err != nil {
					t.Fatal(err)
				}
			}
			fh, err := m.Create("/db/LOCK")
			if err != nil {
				t.Fatal(err)
			}
			fh.Close()
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			newFS := func() (*vfs.MemFS, *vfs.FaultFS) {
				m := vfs.NewMemFS()
				c.setup(t, m)
				return m, vfs.NewFaultFS(m)
			}
			// A clean Open counts the operations to fail (a few made in
			// the background as it returns fail nothing it waits for).
			_, ffs := newFS()
			o := opts
			o.FS = ffs
			db, err := Open(c.dir, o)
			if err != nil {
				t.Fatal(err)
			}
			var counts [vfs.OpLock + 1]int64
			for k := vfs.OpCreate; k <= vfs.OpLock; k++ {
				counts[k] = ffs.Count(k)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			failed := 0
			for k := vfs.OpCreate; k <= vfs.OpLock; k++ {
				if !c.kinds.Has(k) {
					continue
				}
				for n := int64(1); n <= counts[k]; n++ {
					m, ffs := newFS()
					before := memTree(t, m, "/")
					ffs.Inject(vfs.Rule{Kinds: vfs.Ops(k), Nth: n})
					o.FS = ffs
					db, err := Open(c.dir, o)
					if err == nil {
						db.Close()
						continue
					}
					failed++
					if !errors.Is(err, syscall.EIO) && !errors.Is(err, ErrIOFailure) && !errors.Is(err, ErrNotDataDirectory) {
						t.Errorf("%s #%d failed: Open: %v; want the injected EIO", k, n, err)
					}
					// As before, and so it opens, as the clean run showed.
					if d := treeDiff(before, memTree(t, m, "/")); d != "" {
						t.Errorf("%s #%d failed (Open: %v): %s", k, n, err, d)
					}
				}
			}
			if failed < 15 {
				t.Fatalf("only %d injected faults failed Open; the test shows little", failed)
			}
		})
	}
}

// TestFailedOpenKeepsDataDirectory: an Open of an existing data directory
// that fails removes none of its files.
func TestFailedOpenKeepsDataDirectory(t *testing.T) {
	m, ffs := faultMemDir(t)
	opts := Options{FS: ffs, WALSegmentSize: 1 << 20, Autovacuum: noAutovacuum}
	db := openTest(t, "/db", opts)
	mustPut(t, db, "k", "v")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	before := memTree(t, m, "/")
	ffs.Inject(vfs.Rule{Kinds: vfs.Ops(vfs.OpOpen), Contains: "/heap/"})
	if db, err := Open("/db", opts); err == nil {
		db.Close()
		t.Fatal("Open succeeded with the heap unreadable")
	}
	after := memTree(t, m, "/")
	for p := range before {
		if _, ok := after[p]; !ok {
			t.Errorf("a failed Open of a data directory removed %s", p)
		}
	}
}

// A file another program writes in the new directory while a first Open
// runs is not the Open's to remove when it fails: it stays, with the
// directories holding it, and the error names it; the engine's own files
// go.
func TestFailedOpenLeavesStrangers(t *testing.T) {
	m := vfs.NewMemFS()
	u, err := noteNewDir(m, "/a/db")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"/a/db/wal", "/a/db/heap", "/a/db/clog", "/a/db/vm"} {
		if err := m.MkdirAll(d); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"/a/db/control", "/a/db/wal/0000000000000000", "/a/db/heap/00000000", "/a/db/notes.txt", "/a/db/heap/x"} {
		fh, err := m.Create(f)
		if err == nil {
			_, err = fh.WriteAt([]byte("x"), 0)
			fh.Close()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	why := errors.New("open failed")
	err = u.undo(nil, why)
	if !errors.Is(err, why) || !strings.Contains(err.Error(), "/a/db/notes.txt") || !strings.Contains(err.Error(), "/a/db/heap/x") {
		t.Fatalf("undo: %v", err)
	}
	got := memTree(t, m, "/a")
	want := map[string]int64{"/a/db": -1, "/a/db/heap": -1, "/a/db/notes.txt": 1, "/a/db/heap/x": 1}
	if !maps.Equal(got, want) {
		t.Fatalf("left %v, want %v", got, want)
	}
}

// TestNewDirParentsDurable: a first Open that makes the data directory and
// missing parents of it makes every one of their entries durable before it
// returns, so that a power loss after an acknowledged commit finds the
// commit, where it used to find no directory at all (only the data
// directory and its parent were synced, not the root that held the parent
// Open made).
func TestNewDirParentsDurable(t *testing.T) {
	for _, dir := range []string{"/db", "/a/db", "/a/b/c/db", "rel/db"} {
		fsys := vfs.NewMemFS()
		opts := Options{FS: fsys, WALSegmentSize: 1 << 20, SharedBuffers: 16 * 8192, Autovacuum: noAutovacuum, CheckpointTimeout: -1}
		db, err := Open(dir, opts)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		if err := db.Update(t.Context(), func(tx *Txn) error { return tx.Put([]byte("k"), []byte("v")) }); err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		opts.FS = fsys.CrashCopy(vfs.DropUnsynced, nil)
		if err := db.Close(); err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		if _, err := opts.FS.Stat(filepath.Join(dir, "control")); err != nil {
			t.Fatalf("%s: after a power loss: %v", dir, err)
		}
		cdb, err := Open(dir, opts)
		if err != nil {
			t.Fatalf("%s: reopen after a power loss: %v", dir, err)
		}
		err = cdb.View(t.Context(), func(tx *Txn) error {
			v, err := tx.Get([]byte("k"))
			if err == nil && string(v) != "v" {
				err = fmt.Errorf("k = %q", v)
			}
			return err
		})
		if err != nil {
			t.Errorf("%s: the acknowledged commit after a power loss: %v", dir, err)
		}
		if err := cdb.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
