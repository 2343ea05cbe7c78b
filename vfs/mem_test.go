package vfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"syscall"
	"testing"
)

// readFile returns the whole file, or nil and the error.
func readFile(fsys FS, name string) ([]byte, error) {
	f, err := fsys.OpenReadOnly(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	n, err := f.Size()
	if err != nil {
		return nil, err
	}
	b := make([]byte, n)
	if _, err := f.ReadAt(b, 0); err != nil && err != io.EOF {
		return nil, err
	}
	return b, nil
}

func mustRead(t *testing.T, fsys FS, name string) []byte {
	t.Helper()
	b, err := readFile(fsys, name)
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	return b
}

func mustExist(t *testing.T, fsys FS, name string, want bool) {
	t.Helper()
	_, err := fsys.Stat(name)
	switch {
	case err == nil && !want:
		t.Fatalf("%s exists, want it gone", name)
	case err != nil && want:
		t.Fatalf("%s: %v, want it present", name, err)
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		t.Fatalf("%s: %v, want fs.ErrNotExist", name, err)
	}
}

// writeFile creates name holding b; with sync it syncs the file.
func writeFile(t *testing.T, fsys FS, name string, b []byte, sync bool) {
	t.Helper()
	f, err := fsys.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(b, 0); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func check(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var modes = []CrashMode{DropUnsynced, KeepRandom, TearLast}

func TestMemFSFileSemantics(t *testing.T) {
	m := NewMemFS()
	check(t, m.MkdirAll("/d/sub"))
	check(t, m.MkdirAll("d/sub")) // relative names are taken from the root
	f, err := m.Create("/d/f")
	check(t, err)
	if f.Name() != "/d/f" {
		t.Fatalf("Name = %q", f.Name())
	}
	if _, err := f.WriteAt([]byte("xyz"), 5); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, m, "/d/f"); !bytes.Equal(got, []byte("\x00\x00\x00\x00\x00xyz")) {
		t.Fatalf("sparse write read back %q", got)
	}
	buf := make([]byte, 4)
	if n, err := f.ReadAt(buf, 6); n != 2 || err != io.EOF || string(buf[:2]) != "yz" {
		t.Fatalf("short ReadAt = %d, %v, %q; want 2, EOF, yz", n, err, buf[:n])
	}
	if n, err := f.ReadAt(buf, 8); n != 0 || err != io.EOF {
		t.Fatalf("ReadAt at EOF = %d, %v", n, err)
	}
	check(t, f.Truncate(6))
	check(t, f.Truncate(8)) // extension reads zeros, not the old bytes
	if got := mustRead(t, m, "/d/f"); !bytes.Equal(got, []byte("\x00\x00\x00\x00\x00x\x00\x00")) {
		t.Fatalf("after truncate and extend: %q", got)
	}
	check(t, f.Close())
	if _, err := f.WriteAt([]byte("a"), 0); !errors.Is(err, fs.ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}
	if err := f.Close(); !errors.Is(err, fs.ErrClosed) {
		t.Fatalf("second close: %v", err)
	}

	ro, err := m.OpenReadOnly("/d/f")
	check(t, err)
	if _, err := ro.WriteAt([]byte("a"), 0); !errors.Is(err, syscall.EBADF) {
		t.Fatalf("write to read-only file: %v", err)
	}
	check(t, ro.Close())

	// Create truncates an existing file.
	writeFile(t, m, "/d/f", []byte("new"), false)
	if got := mustRead(t, m, "/d/f"); string(got) != "new" {
		t.Fatalf("after re-create: %q", got)
	}

	writeFile(t, m, "/d/b", nil, false)
	writeFile(t, m, "/d/a", nil, false)
	names, err := m.ReadDir("/d")
	check(t, err)
	if fmt.Sprint(names) != "[a b f sub]" {
		t.Fatalf("ReadDir = %v", names)
	}

	for _, tc := range []struct {
		what string
		err  error
		want error
	}{
		{"open missing", func() error { _, err := m.Open("/d/nope"); return err }(), fs.ErrNotExist},
		{"create in missing dir", func() error { _, err := m.Create("/nope/f"); return err }(), fs.ErrNotExist},
		{"stat missing", func() error { _, err := m.Stat("/nope"); return err }(), fs.ErrNotExist},
		{"readdir missing", func() error { _, err := m.ReadDir("/nope"); return err }(), fs.ErrNotExist},
		{"remove missing", m.Remove("/d/nope"), fs.ErrNotExist},
		{"rename missing", m.Rename("/d/nope", "/d/x"), fs.ErrNotExist},
		{"remove non-empty dir", m.Remove("/d"), syscall.ENOTEMPTY},
		{"open dir", func() error { _, err := m.Open("/d"); return err }(), syscall.EISDIR},
		{"create over dir", func() error { _, err := m.Create("/d/sub"); return err }(), syscall.EISDIR},
		{"mkdir through file", m.MkdirAll("/d/f/x"), syscall.ENOTDIR},
		{"syncdir on file", m.SyncDir("/d/f"), syscall.ENOTDIR},
		{"rename file over dir", m.Rename("/d/f", "/d/sub"), syscall.EISDIR},
		{"rename dir into itself", m.Rename("/d", "/d/sub/d"), syscall.EINVAL},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.what, tc.err, tc.want)
		}
		var pe *fs.PathError
		var le *os.LinkError
		if tc.err != nil && !errors.As(tc.err, &pe) && !errors.As(tc.err, &le) {
			t.Errorf("%s: %T is neither *fs.PathError nor *os.LinkError", tc.what, tc.err)
		}
	}

	// Rename replaces, and an open file follows its inode.
	g, err := m.Open("/d/a")
	check(t, err)
	check(t, m.Rename("/d/a", "/d/b"))
	_, err = g.WriteAt([]byte("via handle"), 0)
	check(t, err)
	if got := mustRead(t, m, "/d/b"); string(got) != "via handle" {
		t.Fatalf("renamed file reads %q", got)
	}
	mustExist(t, m, "/d/a", false)
	check(t, m.Remove("/d/b"))
	if _, err := g.WriteAt([]byte("!"), 0); err != nil {
		t.Fatalf("write to removed but open file: %v", err)
	}
	check(t, g.Close())
	check(t, m.Remove("/d/sub"))
	mustExist(t, m, "/d/sub", false)
}

func TestMemFSLock(t *testing.T) {
	m := NewMemFS()
	check(t, m.MkdirAll("/d"))
	l1, err := m.Lock("/d/LOCK")
	check(t, err)
	if _, err := m.Lock("/d/LOCK"); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Lock: %v, want ErrLocked", err)
	}
	if _, err := m.Lock("d/../d/LOCK"); !errors.Is(err, ErrLocked) {
		t.Fatalf("Lock by another spelling: %v, want ErrLocked", err)
	}
	l2, err := m.Lock("/d/OTHER")
	check(t, err)
	check(t, l1.Close())
	if err := l1.Close(); !errors.Is(err, fs.ErrClosed) {
		t.Fatalf("second Close of a lock: %v", err)
	}
	l3, err := m.Lock("/d/LOCK")
	check(t, err)
	check(t, l3.Close())
	check(t, l2.Close())
	if _, err := m.Lock("/nope/LOCK"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Lock in missing dir: %v", err)
	}
	// A crash copy holds no locks.
	l4, err := m.Lock("/d/LOCK")
	check(t, err)
	defer l4.Close()
	l5, err := m.Clone().Lock("/d/LOCK")
	check(t, err)
	check(t, l5.Close())
}

// setup gives a MemFS with /d durable, holding the durable file /d/base.
func setup(t *testing.T) *MemFS {
	t.Helper()
	m := NewMemFS()
	check(t, m.MkdirAll("/d"))
	check(t, m.SyncDir("/"))
	writeFile(t, m, "/d/base", bytes.Repeat([]byte("a"), 4096), true)
	check(t, m.SyncDir("/d"))
	return m
}

func TestCrashSyncedSurvivesEveryMode(t *testing.T) {
	m := setup(t)
	f, err := m.Open("/d/base")
	check(t, err)
	_, err = f.WriteAt([]byte("synced"), 100)
	check(t, err)
	check(t, f.Datasync())
	_, err = f.WriteAt(bytes.Repeat([]byte("u"), 2000), 1000) // never synced
	check(t, err)
	want := bytes.Repeat([]byte("a"), 4096)
	copy(want[100:], "synced")
	for _, mode := range modes {
		for seed := range uint64(20) {
			c := m.CrashCopy(mode, rand.New(rand.NewPCG(seed, 0)))
			got := mustRead(t, c, "/d/base")
			if !bytes.Equal(got[:1000], want[:1000]) || !bytes.Equal(got[3000:], want[3000:]) || len(got) != 4096 {
				t.Fatalf("%v seed %d: synced data not intact", mode, seed)
			}
			if mode == DropUnsynced && !bytes.Equal(got, want) {
				t.Fatalf("DropUnsynced kept unsynced bytes")
			}
		}
	}
}

func TestCrashDropUnsynced(t *testing.T) {
	m := setup(t)
	// A synced file whose name was never made durable is lost.
	writeFile(t, m, "/d/new", []byte("data"), true)
	// A removal without SyncDir is undone.
	check(t, m.Remove("/d/base"))
	// A directory whose entry was never synced takes its contents with it.
	check(t, m.MkdirAll("/d/sub"))
	writeFile(t, m, "/d/sub/x", []byte("x"), true)
	check(t, m.SyncDir("/d/sub"))

	c := m.CrashCopy(DropUnsynced, nil)
	mustExist(t, c, "/d/new", false)
	mustExist(t, c, "/d/sub", false)
	if got := mustRead(t, c, "/d/base"); !bytes.Equal(got, bytes.Repeat([]byte("a"), 4096)) {
		t.Fatal("removed but durable file came back changed")
	}

	// Now make the names durable: the unsynced data of a file still goes.
	check(t, m.SyncDir("/d"))
	f, err := m.Open("/d/new")
	check(t, err)
	_, err = f.WriteAt([]byte("DATA and more"), 0)
	check(t, err)
	check(t, f.Close())
	c = m.CrashCopy(DropUnsynced, nil)
	mustExist(t, c, "/d/base", false)
	if got := mustRead(t, c, "/d/new"); string(got) != "data" {
		t.Fatalf("/d/new = %q, want its synced contents", got)
	}
	if got := mustRead(t, c, "/d/sub/x"); string(got) != "x" {
		t.Fatalf("/d/sub/x = %q", got)
	}
	// An unsynced truncation is undone too.
	f, err = m.Open("/d/new")
	check(t, err)
	check(t, f.Truncate(1))
	if got := mustRead(t, m.CrashCopy(DropUnsynced, nil), "/d/new"); string(got) != "data" {
		t.Fatalf("unsynced truncate survived: %q", got)
	}
	check(t, f.Sync())
	if got := mustRead(t, m.CrashCopy(DropUnsynced, nil), "/d/new"); string(got) != "D" {
		t.Fatalf("synced truncate lost: %q", got)
	}
	check(t, f.Close())
}

// TestCrashRename is the control-file pattern: write temp, fsync, rename,
// fsync directory.
func TestCrashRename(t *testing.T) {
	m := setup(t)
	writeFile(t, m, "/d/tmp", []byte("new"), true)
	check(t, m.SyncDir("/d"))
	check(t, m.Rename("/d/tmp", "/d/base"))

	c := m.CrashCopy(DropUnsynced, nil)
	mustExist(t, c, "/d/tmp", true)
	if got := mustRead(t, c, "/d/base"); len(got) != 4096 {
		t.Fatal("rename without SyncDir survived DropUnsynced")
	}
	outcomes := map[string]int{}
	for seed := range uint64(64) {
		c := m.CrashCopy(KeepRandom, rand.New(rand.NewPCG(seed, 1)))
		base := mustRead(t, c, "/d/base")
		_, err := c.Stat("/d/tmp")
		switch {
		case string(base) == "new" && errors.Is(err, fs.ErrNotExist):
			outcomes["renamed"]++
		case len(base) == 4096 && err == nil:
			outcomes["undone"]++
		default:
			t.Fatalf("seed %d: half a rename: base %d bytes, tmp: %v", seed, len(base), err)
		}
	}
	if outcomes["renamed"] == 0 || outcomes["undone"] == 0 {
		t.Fatalf("KeepRandom over 64 seeds gave only %v", outcomes)
	}

	check(t, m.SyncDir("/d"))
	for _, mode := range modes {
		c := m.CrashCopy(mode, nil)
		mustExist(t, c, "/d/tmp", false)
		if got := mustRead(t, c, "/d/base"); string(got) != "new" {
			t.Fatalf("%v: synced rename lost", mode)
		}
	}
}

// TestCrashRenameAcrossDirs checks that KeepRandom keeps or undoes both
// halves of a rename between directories together.
func TestCrashRenameAcrossDirs(t *testing.T) {
	m := setup(t)
	check(t, m.MkdirAll("/d/a"))
	check(t, m.MkdirAll("/d/b"))
	check(t, m.SyncDir("/d"))
	writeFile(t, m, "/d/a/x", []byte("x"), true)
	check(t, m.SyncDir("/d/a"))
	check(t, m.Rename("/d/a/x", "/d/b/x"))
	seen := map[bool]bool{}
	for seed := range uint64(64) {
		c := m.CrashCopy(KeepRandom, rand.New(rand.NewPCG(seed, 2)))
		_, errA := c.Stat("/d/a/x")
		_, errB := c.Stat("/d/b/x")
		if (errA == nil) == (errB == nil) {
			t.Fatalf("seed %d: a/x %v, b/x %v: want exactly one", seed, errA, errB)
		}
		seen[errB == nil] = true
	}
	if len(seen) != 2 {
		t.Fatal("KeepRandom never varied the cross-directory rename")
	}
}

func TestCrashTearLast(t *testing.T) {
	m := setup(t)
	f, err := m.Open("/d/base")
	check(t, err)
	_, err = f.WriteAt(bytes.Repeat([]byte("b"), 1024), 0) // unsynced, not last: dropped
	check(t, err)
	_, err = f.WriteAt(bytes.Repeat([]byte("c"), 3000), 100) // the last: torn
	check(t, err)
	cuts := map[int]bool{}
	for seed := range uint64(50) {
		got := mustRead(t, m.CrashCopy(TearLast, rand.New(rand.NewPCG(seed, 3))), "/d/base")
		if len(got) != 4096 {
			t.Fatalf("size %d", len(got))
		}
		cut := 100 + bytes.IndexFunc(got[100:], func(r rune) bool { return r != 'c' })
		if cut%SectorSize != 0 || cut <= 100 || cut >= 3100 {
			t.Fatalf("seed %d: torn write ends at %d, want a sector boundary strictly inside [100, 3100)", seed, cut)
		}
		want := bytes.Repeat([]byte("a"), 4096)
		copy(want[100:cut], bytes.Repeat([]byte("c"), cut-100))
		if !bytes.Equal(got, want) {
			t.Fatalf("seed %d: bytes outside the torn prefix changed", seed)
		}
		cuts[cut] = true
	}
	if len(cuts) < 2 {
		t.Fatalf("every seed tore at the same place: %v", cuts)
	}

	// A last write inside one sector is lost whole; growth is torn too.
	_, err = f.WriteAt([]byte("dd"), 600)
	check(t, err)
	if got := mustRead(t, m.CrashCopy(TearLast, nil), "/d/base"); !bytes.Equal(got, bytes.Repeat([]byte("a"), 4096)) {
		t.Fatal("a one-sector last write was kept")
	}
	_, err = f.WriteAt(bytes.Repeat([]byte("e"), 2048), 4096)
	check(t, err)
	for seed := range uint64(10) {
		got := mustRead(t, m.CrashCopy(TearLast, rand.New(rand.NewPCG(seed, 4))), "/d/base")
		if len(got) <= 4096 || len(got) >= 6144 || len(got)%SectorSize != 0 {
			t.Fatalf("torn append left size %d", len(got))
		}
	}
	check(t, f.Close())
}

func TestCrashKeepRandom(t *testing.T) {
	m := setup(t)
	f, err := m.Open("/d/base")
	check(t, err)
	for i := range 4 {
		_, err := f.WriteAt(bytes.Repeat([]byte{byte('0' + i)}, 512), int64(i)*1024)
		check(t, err)
	}
	kept := make([]map[bool]bool, 4)
	for i := range kept {
		kept[i] = map[bool]bool{}
	}
	for seed := range uint64(64) {
		got := mustRead(t, m.CrashCopy(KeepRandom, rand.New(rand.NewPCG(seed, 5))), "/d/base")
		for i := range 4 {
			region := got[i*1024 : i*1024+512]
			switch {
			case bytes.Equal(region, bytes.Repeat([]byte{byte('0' + i)}, 512)):
				kept[i][true] = true
			case bytes.Equal(region, bytes.Repeat([]byte("a"), 512)):
				kept[i][false] = true
			default:
				t.Fatalf("seed %d: write %d half kept", seed, i)
			}
		}
		again := mustRead(t, m.CrashCopy(KeepRandom, rand.New(rand.NewPCG(seed, 5))), "/d/base")
		if !bytes.Equal(got, again) {
			t.Fatalf("seed %d: two copies with one seed differ", seed)
		}
	}
	for i, k := range kept {
		if len(k) != 2 {
			t.Fatalf("write %d: only outcome %v over 64 seeds", i, k)
		}
	}
	check(t, f.Close())
}

func TestCrashCopyIndependent(t *testing.T) {
	m := setup(t)
	c := m.CrashCopy(DropUnsynced, nil)
	cl := m.Clone()
	f, err := m.Open("/d/base")
	check(t, err)
	_, err = f.WriteAt([]byte("changed"), 0)
	check(t, err)
	check(t, f.Sync())
	writeFile(t, m, "/d/other", []byte("x"), true)
	check(t, m.SyncDir("/d"))
	for _, fsys := range []*MemFS{c, cl} {
		if got := mustRead(t, fsys, "/d/base"); !bytes.Equal(got, bytes.Repeat([]byte("a"), 4096)) {
			t.Fatal("a write to the original showed in the copy")
		}
		mustExist(t, fsys, "/d/other", false)
	}
	g, err := c.Open("/d/base")
	check(t, err)
	_, err = g.WriteAt([]byte("copy"), 0)
	check(t, err)
	if got := mustRead(t, m, "/d/base"); string(got[:7]) != "changed" {
		t.Fatal("a write to the copy showed in the original")
	}
	if c.OpCount() != 1 || len(c.Log()) != 1 {
		t.Fatalf("crash copy's log: %d ops, %v", c.OpCount(), c.Log())
	}
}

// script runs a fixed workload; the op log must list exactly these ops.
func script(t *testing.T, m *MemFS) {
	check(t, m.MkdirAll("/d"))                 // 1 mkdir
	check(t, m.SyncDir("/"))                   // 2 syncdir
	f, err := m.Create("/d/f")                 // 3 create
	check(t, err)                              //
	_, err = f.WriteAt([]byte("hello"), 0)     // 4 write
	check(t, err)                              //
	check(t, f.Sync())                         // 5 sync
	check(t, m.SyncDir("/d"))                  // 6 syncdir
	_, err = f.WriteAt([]byte("world"), 5)     // 7 write
	check(t, err)                              //
	check(t, f.Truncate(8))                    // 8 truncate
	check(t, f.Datasync())                     // 9 datasync
	check(t, m.Rename("/d/f", "/d/g"))         // 10 rename
	check(t, m.Remove("/d/g"))                 // 11 remove
	check(t, f.Close())                        //
	_, err = m.Stat("/d")                      // not logged
	check(t, err)                              //
	if _, err := m.Open("/nope"); err == nil { // a failed op is not logged
		t.Fatal("open of missing file succeeded")
	}
}

func TestOpLogAndCrashPoints(t *testing.T) {
	m := NewMemFS()
	m.SetCrashAfter(6)
	var points []string
	m.SetOpHook(func(p CrashPoint) {
		c := p.CrashCopy(DropUnsynced, nil)
		b, err := readFile(c, "/d/f")
		points = append(points, fmt.Sprintf("%d:%q:%v", p.Op.Index, b, err != nil))
	})
	script(t, m)
	var kinds []string
	for i, op := range m.Log() {
		if op.Index != int64(i+1) {
			t.Fatalf("op %d has Index %d", i, op.Index)
		}
		kinds = append(kinds, op.Kind.String())
	}
	want := "[mkdir syncdir create write sync syncdir write truncate datasync rename remove]"
	if fmt.Sprint(kinds) != want {
		t.Fatalf("log kinds\n got %v\nwant %s", kinds, want)
	}
	if m.OpCount() != 11 {
		t.Fatalf("OpCount = %d", m.OpCount())
	}
	if w := m.Log()[3]; w.Path != "/d/f" || w.Offset != 0 || w.Length != 5 || w.String() != `#4 write /d/f @0+5` {
		t.Fatalf("write op = %+v (%s)", w, w)
	}
	// /d/f survives a crash only from op 6 (its name synced) until op 11's
	// rename; the rename is never made durable, so it stays /d/f.
	wantPoints := []string{
		`1:"":true`, `2:"":true`, `3:"":true`, `4:"":true`, `5:"":true`,
		`6:"hello":false`, `7:"hello":false`, `8:"hello":false`, `9:"hellowor":false`,
		`10:"hellowor":false`, `11:"hellowor":false`,
	}
	if fmt.Sprint(points) != fmt.Sprint(wantPoints) {
		t.Fatalf("crash points\n got %v\nwant %v", points, wantPoints)
	}

	frozen := m.CrashState()
	if frozen == nil || frozen.OpCount() != 6 {
		t.Fatalf("CrashState = %v", frozen)
	}
	// The frozen state still holds op 6's pending nothing; write to it
	// and check the modes differ as they should.
	f, err := frozen.Open("/d/f")
	check(t, err)
	_, err = f.WriteAt([]byte("HELLO"), 0)
	check(t, err)
	if got := mustRead(t, frozen.CrashCopy(DropUnsynced, nil), "/d/f"); string(got) != "hello" {
		t.Fatalf("frozen state: %q", got)
	}
	if m.CrashState() != frozen {
		t.Fatal("CrashState changed")
	}

	// SetCrashAfter at the current count freezes at once.
	m.SetCrashAfter(m.OpCount())
	if s := m.CrashState(); s == nil || s.OpCount() != 11 {
		t.Fatal("SetCrashAfter(OpCount()) did not freeze")
	}
	m.SetCrashAfter(100)
	if m.CrashState() != nil {
		t.Fatal("CrashState before the op")
	}
}

func TestMemFSConcurrent(t *testing.T) {
	m := setup(t)
	const workers, writes = 4, 200
	var wg sync.WaitGroup
	shared, err := m.Open("/d/base")
	check(t, err)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("/d/w%d", w)
			f, err := m.Create(name)
			if err != nil {
				t.Error(err)
				return
			}
			defer f.Close()
			for i := range writes {
				b := []byte{byte(w), byte(i)}
				if _, err := f.WriteAt(b, int64(2*i)); err != nil {
					t.Error(err)
					return
				}
				if _, err := shared.WriteAt(b, int64(2*w)); err != nil {
					t.Error(err)
					return
				}
				if i%16 == 0 {
					if err := f.Sync(); err != nil {
						t.Error(err)
					}
					if err := m.SyncDir("/d"); err != nil {
						t.Error(err)
					}
				}
				rb := make([]byte, 2)
				if _, err := f.ReadAt(rb, int64(2*i)); err != nil || !bytes.Equal(rb, b) {
					t.Errorf("worker %d read %v, %v", w, rb, err)
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range 50 {
			c := m.CrashCopy(modes[i%3], rand.New(rand.NewPCG(uint64(i), 0)))
			if _, err := c.ReadDir("/d"); err != nil {
				t.Error(err)
			}
			if _, err := m.ReadDir("/d"); err != nil {
				t.Error(err)
			}
		}
	}()
	wg.Wait()
	check(t, shared.Close())
	for w := range workers {
		got := mustRead(t, m, fmt.Sprintf("/d/w%d", w))
		for i := range writes {
			if got[2*i] != byte(w) || got[2*i+1] != byte(i) {
				t.Fatalf("worker %d write %d lost", w, i)
			}
		}
	}
	if n := m.OpCount(); n < workers*writes*2 {
		t.Fatalf("OpCount = %d, want at least %d", n, workers*writes*2)
	}
}

// A write or truncation at an offset past MaxMemFileSize, or one whose end
// overflows an int64, fails with EFBIG and changes nothing, where it used to
// panic (index out of range, growslice) or allocate a pointer per 4 KiB of
// the offset.
func TestMemFSHugeOffsets(t *testing.T) {
	m := NewMemFS()
	f, err := m.Create("/f")
	check(t, err)
	_, err = f.WriteAt([]byte("abc"), 0)
	check(t, err)
	ops := m.OpCount()
	for _, off := range []int64{math.MaxInt64 - 1, math.MaxInt64 - 2, 1 << 62, 1 << 40, MaxMemFileSize - 2} {
		if n, err := f.WriteAt([]byte("xyz"), off); n != 0 || !errors.Is(err, syscall.EFBIG) {
			t.Errorf("WriteAt(3 bytes, %d) = %d, %v; want 0, EFBIG", off, n, err)
		}
	}
	for _, size := range []int64{math.MaxInt64, 1 << 62, MaxMemFileSize + 1} {
		if err := f.Truncate(size); !errors.Is(err, syscall.EFBIG) {
			t.Errorf("Truncate(%d) = %v; want EFBIG", size, err)
		}
	}
	if n, err := f.WriteAt(nil, math.MaxInt64); n != 0 || err != nil {
		t.Errorf("zero-length WriteAt at MaxInt64 = %d, %v; want 0, nil", n, err)
	}
	if got := m.OpCount(); got != ops {
		t.Errorf("refused operations were counted: OpCount %d, want %d", got, ops)
	}
	if got := mustRead(t, m, "/f"); string(got) != "abc" {
		t.Fatalf("file reads %q after refused operations, want abc", got)
	}
	// Up to the limit itself is allowed, and the hole reads as zeros.
	if _, err := f.WriteAt([]byte("z"), MaxMemFileSize-1); err != nil {
		t.Fatalf("write ending at MaxMemFileSize: %v", err)
	}
	buf := make([]byte, 2)
	if n, err := f.ReadAt(buf, MaxMemFileSize-2); n != 2 || err != nil || string(buf) != "\x00z" {
		t.Fatalf("ReadAt at the limit = %d, %v, %q", n, err, buf[:n])
	}
	if n, err := f.ReadAt(buf, math.MaxInt64); n != 0 || err != io.EOF {
		t.Fatalf("ReadAt at MaxInt64 = %d, %v; want 0, EOF", n, err)
	}
	check(t, f.Truncate(0))
	check(t, f.Close())
}
