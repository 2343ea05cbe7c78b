package vfs

import (
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"syscall"
	"testing"
)

// workload writes three files through fsys, each with two writes, a sync and
// a rename into place, and returns the errors it met in order (nil for
// success) so a test can see exactly which step failed.
func workload(fsys FS) []error {
	var errs []error
	note := func(err error) bool { errs = append(errs, err); return err == nil }
	if !note(fsys.MkdirAll("/d/wal")) {
		return errs
	}
	for i := range 3 {
		tmp, final := fmt.Sprintf("/d/wal/%d.tmp", i), fmt.Sprintf("/d/wal/%d", i)
		f, err := fsys.Create(tmp)
		if !note(err) {
			continue
		}
		_, err = f.WriteAt([]byte("header"), 0)
		note(err)
		_, err = f.WriteAt([]byte("body"), 6)
		note(err)
		note(f.Sync())
		f.Close()
		note(fsys.Rename(tmp, final))
	}
	note(fsys.SyncDir("/d/wal"))
	return errs
}

func failures(errs []error) (n int, first error) {
	for _, err := range errs {
		if err != nil {
			if n == 0 {
				first = err
			}
			n++
		}
	}
	return n, first
}

func TestFaultFSCounts(t *testing.T) {
	ffs := NewFaultFS(NewMemFS())
	if n, err := failures(workload(ffs)); n != 0 {
		t.Fatalf("clean run failed: %v", err)
	}
	_, _ = ffs.Stat("/d/wal/0")
	names, _ := ffs.ReadDir("/d/wal")
	want := map[OpKind]int64{OpMkdir: 1, OpCreate: 3, OpWrite: 6, OpSync: 3, OpRename: 3, OpSyncDir: 1, OpStat: 1, OpReadDir: 1, OpDatasync: 0}
	for k, n := range want {
		if got := ffs.Count(k); got != n {
			t.Errorf("Count(%v) = %d, want %d", k, got, n)
		}
	}
	if fmt.Sprint(names) != "[0 1 2]" {
		t.Fatalf("files through FaultFS: %v", names)
	}
}

// TestFaultFSNth fails each write and each sync of the workload in turn, as a
// crash-test harness would, and checks that exactly that one failed.
func TestFaultFSNth(t *testing.T) {
	for _, kind := range []OpKind{OpWrite, OpSync, OpRename, OpCreate} {
		clean := NewFaultFS(NewMemFS())
		workload(clean)
		n := clean.Count(kind)
		if n == 0 {
			t.Fatalf("workload has no %v", kind)
		}
		for i := int64(1); i <= n; i++ {
			m := NewMemFS()
			ffs := NewFaultFS(m)
			flt := ffs.Inject(Rule{Kinds: Ops(kind), Nth: i, Err: syscall.ENOSPC})
			errs := workload(ffs)
			nfail, err := failures(errs)
			if nfail != 1 || flt.Fired() != 1 {
				t.Fatalf("fail %v #%d: %d failures, fired %d: %v", kind, i, nfail, flt.Fired(), errs)
			}
			var pe *fs.PathError
			if !errors.Is(err, syscall.ENOSPC) || !errors.As(err, &pe) || pe.Op != kind.String() {
				t.Fatalf("fail %v #%d: error %#v", kind, i, err)
			}
			// Three files, each with the same ops; a rename names its old name.
			if want := fmt.Sprintf("/d/wal/%d.tmp", (i-1)*3/n); flt.LastPath() != want {
				t.Fatalf("fail %v #%d: LastPath %q", kind, i, flt.LastPath())
			}
			if ffs.Count(kind) != n {
				t.Fatalf("fail %v #%d: counted %d, want %d", kind, i, ffs.Count(kind), n)
			}
			if kind == OpWrite {
				// The failed write never reached the file system.
				file := fmt.Sprintf("/d/wal/%d", (i-1)/2)
				b := mustRead(t, m, file)
				want := "header" // the body write failed
				if i%2 == 1 {
					want = "\x00\x00\x00\x00\x00\x00body" // the header write failed
				}
				if string(b) != want {
					t.Fatalf("fail write #%d: %s holds %q, want %q", i, file, b, want)
				}
			}
		}
	}
}

func TestFaultFSPathRules(t *testing.T) {
	ffs := NewFaultFS(NewMemFS())
	tmp := ffs.Inject(Rule{Kinds: Ops(OpCreate), Base: "*.tmp"})
	errs := workload(ffs)
	if n, err := failures(errs); n != 3 || !errors.Is(err, syscall.EIO) {
		t.Fatalf("failing creates of *.tmp: %d failures (%v): %v", n, err, errs)
	}
	if tmp.Fired() != 3 {
		t.Fatalf("Fired = %d", tmp.Fired())
	}
	if _, err := ffs.Create("/d/wal/plain"); err != nil {
		t.Fatalf("create of a name the pattern does not match: %v", err)
	}

	// Contains, and a rename matched by its new name.
	ffs = NewFaultFS(NewMemFS())
	ffs.Inject(Rule{Kinds: Ops(OpRename), Contains: "wal/1", Base: "1"})
	errs = workload(ffs)
	if n, err := failures(errs); n != 1 || !errors.Is(err, syscall.EIO) {
		t.Fatalf("failing renames to wal/1: %d failures: %v", n, errs)
	}
	if _, err := ffs.Stat("/d/wal/1.tmp"); err != nil {
		t.Fatalf("the failed rename moved the file: %v", err)
	}

	// A rule with no kinds fails everything under its path, reads too.
	ffs = NewFaultFS(NewMemFS())
	workload(ffs)
	ffs.Inject(Rule{Contains: "/wal/2"})
	if _, err := ffs.Open("/d/wal/2"); !errors.Is(err, syscall.EIO) {
		t.Fatalf("open: %v", err)
	}
	if _, err := ffs.Stat("/d/wal/2"); !errors.Is(err, syscall.EIO) {
		t.Fatalf("stat: %v", err)
	}
	if _, err := ffs.Stat("/d/wal/1"); err != nil {
		t.Fatalf("stat of another file: %v", err)
	}
}

func TestFaultFSPermanent(t *testing.T) {
	m := NewMemFS()
	ffs := NewFaultFS(m)
	ffs.Inject(Rule{Kinds: SyncOps, Nth: 2, Permanent: MutatingOps})
	errs := workload(ffs)
	// Steps: mkdir, then per file create, write, write, sync, rename. The
	// second sync fails, and every mutation after it (the third file stops
	// at its create).
	var got []bool
	for _, err := range errs {
		got = append(got, err == nil)
	}
	want := "[true true true true true true true true true false false false false]"
	if fmt.Sprint(got) != want {
		t.Fatalf("outcomes\n got %v\nwant %s", got, want)
	}
	if !ffs.Failing() {
		t.Fatal("Failing() = false after a permanent fault")
	}
	// Reads keep working, on any file.
	f, err := ffs.Open("/d/wal/0")
	if err != nil {
		t.Fatalf("open after permanent write failure: %v", err)
	}
	b := make([]byte, 10)
	if _, err := f.ReadAt(b, 0); err != nil || string(b) != "headerbody" {
		t.Fatalf("read %q, %v", b, err)
	}
	if _, err := f.WriteAt([]byte("x"), 0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("write after permanent fault: %v", err)
	}
	f.Close()
	// The failed sync made nothing durable: a crash loses the file's data.
	if got, _ := readFile(m.CrashCopy(DropUnsynced, nil), "/d/wal/1.tmp"); len(got) != 0 {
		t.Fatalf("data of the failed sync survived a crash: %q", got)
	}
	ffs.Clear()
	if ffs.Failing() {
		t.Fatal("Failing() after Clear")
	}
	if err := ffs.SyncDir("/d/wal"); err != nil {
		t.Fatalf("SyncDir after Clear: %v", err)
	}
}

func TestFaultFSConcurrent(t *testing.T) {
	ffs := NewFaultFS(NewMemFS())
	if err := ffs.MkdirAll("/d"); err != nil {
		t.Fatal(err)
	}
	flt := ffs.Inject(Rule{Kinds: Ops(OpWrite), Nth: 100})
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := ffs.Create(fmt.Sprintf("/d/%d", w))
			if err != nil {
				t.Error(err)
				return
			}
			defer f.Close()
			for i := range 50 {
				if _, err := f.WriteAt([]byte{1}, int64(i)); err != nil {
					mu.Lock()
					failed++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if failed != 1 || flt.Fired() != 1 || ffs.Count(OpWrite) != 200 {
		t.Fatalf("failed %d, fired %d, counted %d; want 1, 1, 200", failed, flt.Fired(), ffs.Count(OpWrite))
	}
}

// TestFaultFSGrowing: a Growing rule (a full disk) fails only the writes and
// truncations that make a file longer; writes over bytes the file has, and
// truncations that shorten it, go through, and Clear lifts it.
func TestFaultFSGrowing(t *testing.T) {
	ffs := NewFaultFS(NewMemFS())
	if err := ffs.MkdirAll("/d"); err != nil {
		t.Fatal(err)
	}
	f, err := ffs.Create("/d/f")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, 100), 0); err != nil {
		t.Fatal(err)
	}
	flt := ffs.Inject(Rule{Kinds: Ops(OpWrite, OpTruncate), Growing: true, Err: syscall.ENOSPC})
	if _, err := f.WriteAt([]byte("over"), 96); err != nil {
		t.Errorf("overwrite of the last 4 bytes on a full disk: %v", err)
	}
	if _, err := f.WriteAt([]byte("past"), 97); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("write ending a byte past the end on a full disk: %v; want ENOSPC", err)
	}
	if err := f.Truncate(200); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("truncate to a larger size on a full disk: %v; want ENOSPC", err)
	}
	if err := f.Truncate(50); err != nil {
		t.Errorf("truncate to a smaller size on a full disk: %v", err)
	}
	if err := f.Sync(); err != nil {
		t.Errorf("sync on a full disk: %v", err)
	}
	if size, _ := f.Size(); size != 50 {
		t.Errorf("size %d after the failed growths, want 50", size)
	}
	if flt.Fired() != 2 {
		t.Errorf("the rule fired %d times, want 2", flt.Fired())
	}
	ffs.Clear()
	if _, err := f.WriteAt([]byte("past"), 50); err != nil {
		t.Errorf("write past the end once space is back: %v", err)
	}
}
