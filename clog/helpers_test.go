package clog

import (
	"path/filepath"
	"sync"
	"testing"

	"mvkv/vfs"
)

// fakeWAL records FlushWAL calls: the highest LSN flushed, the number of
// calls, and an error to return while err is set.
type fakeWAL struct {
	mu      sync.Mutex
	flushed uint64 // guarded by mu
	calls   int    // guarded by mu
	err     error  // guarded by mu
}

func (w *fakeWAL) flush(lsn uint64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls++
	if w.err != nil {
		return w.err
	}
	if lsn > w.flushed {
		w.flushed = lsn
	}
	return nil
}

func (w *fakeWAL) state() (flushed uint64, calls int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.flushed, w.calls
}

func (w *fakeWAL) setErr(err error) {
	w.mu.Lock()
	w.err = err
	w.mu.Unlock()
}

// hookFS wraps an FS so tests can watch or fail page reads and writes of
// segment files. The hooks are set before the FS is used and not changed
// while goroutines use it.
type hookFS struct {
	vfs.FS
	onWrite func(name string, p []byte, off int64) error
	onRead  func(name string, off int64) error
	onSync  func(name string) error
}

type hookFile struct {
	vfs.File
	fs *hookFS
}

func (h *hookFS) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return hookFile{f, h}, nil
}

func (h *hookFS) Create(name string) (vfs.File, error) { return h.wrap(h.FS.Create(name)) }
func (h *hookFS) Open(name string) (vfs.File, error)   { return h.wrap(h.FS.Open(name)) }

func (f hookFile) WriteAt(p []byte, off int64) (int, error) {
	if f.fs.onWrite != nil {
		if err := f.fs.onWrite(f.Name(), p, off); err != nil {
			return 0, err
		}
	}
	return f.File.WriteAt(p, off)
}

func (f hookFile) ReadAt(p []byte, off int64) (int, error) {
	if f.fs.onRead != nil {
		if err := f.fs.onRead(f.Name(), off); err != nil {
			return 0, err
		}
	}
	return f.File.ReadAt(p, off)
}

func (f hookFile) Sync() error {
	if f.fs.onSync != nil {
		if err := f.fs.onSync(f.Name()); err != nil {
			return err
		}
	}
	return f.File.Sync()
}

// testDir returns DATA/clog under a fresh temporary directory; the clog
// directory itself does not exist yet.
func testDir(t testing.TB) string { return filepath.Join(t.TempDir(), "clog") }

func mustOpen(t testing.TB, fsys vfs.FS, dir string, opts Options) *CLOG {
	t.Helper()
	if opts.FlushWAL == nil {
		opts.FlushWAL = func(uint64) error { return nil }
	}
	c, err := Open(fsys, dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return c
}

// checkPool verifies the slot table of every bank: each index entry points
// at a slot holding that page, no page is in two slots, and no slot is left
// in I/O once all callers have returned.
func checkPool(t *testing.T, c *CLOG) {
	t.Helper()
	for bi := range c.banks {
		b := &c.banks[bi]
		b.mu.Lock()
		seen := make(map[uint64]int)
		for i := range b.slots {
			sl := &b.slots[i]
			if sl.writing || sl.state == slotReading {
				t.Errorf("bank %d slot %d still in I/O (state %d, writing %v)", bi, i, sl.state, sl.writing)
			}
			if sl.state == slotEmpty {
				continue
			}
			if j, dup := seen[sl.pageno]; dup {
				t.Errorf("page %d in slots %d and %d", sl.pageno, j, i)
			}
			seen[sl.pageno] = i
			if want := int(sl.pageno % uint64(len(c.banks))); want != bi {
				t.Errorf("page %d in bank %d, want bank %d", sl.pageno, bi, want)
			}
			if k, ok := b.index[sl.pageno]; !ok || k != i {
				t.Errorf("index[%d] = %d, %v; slot %d holds it", sl.pageno, k, ok, i)
			}
		}
		if len(seen) != len(b.index) {
			t.Errorf("index has %d entries, slots hold %d pages", len(b.index), len(seen))
		}
		b.mu.Unlock()
	}
}

// statusFor is the status the tests give xid: never in progress, so a lost
// update shows.
func statusFor(xid uint64) Status { return Status(xid%3) + 1 }

// lsnFor is the LSN the tests give xid's commit record: scattered, so pages
// collect group LSNs out of order.
func lsnFor(xid uint64) uint64 { return (xid*2654435761)%1_000_000_007 + 1 }
