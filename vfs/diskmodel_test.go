package vfs

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const ms = time.Millisecond

func TestDiskModelCompletion(t *testing.T) {
	rot := newModelClock(DiskModel{RotationsPerSec: 250}, time.Now) // 4 ms period
	both := newModelClock(DiskModel{RotationsPerSec: 250, FsyncLatency: 5 * ms}, time.Now)
	lat := newModelClock(DiskModel{FsyncLatency: 2 * ms}, time.Now)
	for _, tc := range []struct {
		name         string
		c            *ModelClock
		issued       time.Duration
		want         time.Duration
		wantBoundary int64
	}{
		{"at epoch", rot, 0, 4 * ms, 1},
		{"mid rotation", rot, 1 * ms, 4 * ms, 1},
		{"just before a boundary", rot, 4*ms - 1, 4 * ms, 1},
		{"on a boundary waits a whole rotation", rot, 4 * ms, 8 * ms, 2},
		{"latency then rotation", both, 1 * ms, 8 * ms, 2},
		{"latency ending on a boundary", both, 3 * ms, 8 * ms, 2},
		{"fixed latency", lat, 3 * ms, 5 * ms, -1},
	} {
		got, n := tc.c.completion(tc.issued)
		if got != tc.want || n != tc.wantBoundary {
			t.Errorf("%s: completion(%v) = %v, %d; want %v, %d", tc.name, tc.issued, got, n, tc.want, tc.wantBoundary)
		}
	}
}

// nopFile is a File whose operations do nothing, so only the model's delay
// is measured; it counts the real syncs that reach it.
type nopFile struct{ syncs *atomic.Int64 }

func (nopFile) ReadAt(p []byte, off int64) (int, error)  { return 0, nil }
func (nopFile) WriteAt(p []byte, off int64) (int, error) { return len(p), nil }
func (nopFile) Close() error                             { return nil }
func (f nopFile) Sync() error                            { f.count(); return nil }
func (f nopFile) Datasync() error                        { f.count(); return nil }
func (nopFile) Truncate(int64) error                     { return nil }
func (nopFile) Size() (int64, error)                     { return 0, nil }
func (nopFile) Name() string                             { return "nop" }

func (f nopFile) count() {
	if f.syncs != nil {
		f.syncs.Add(1)
	}
}

// rotationsPerSync runs syncs back to back on g goroutines and returns, for
// each sync, how many rotation boundaries passed between its issue and its
// return (1 is exact; 0 would be a sync returning early).
func rotationsPerSync(m DiskModel, g, n int) []int64 {
	c := newModelClock(m, time.Now)
	f := modelFile{File: nopFile{}, clock: c}
	rot := func() int64 { return int64(time.Since(c.epoch) / c.period) }
	out := make([]int64, g*n)
	var wg sync.WaitGroup
	for i := range g {
		wg.Go(func() {
			for j := range n {
				before := rot()
				if err := f.Datasync(); err != nil {
					panic(err)
				}
				out[i*n+j] = rot() - before
			}
		})
	}
	wg.Wait()
	return out
}

// TestDiskModelRotationCounts checks the model by counting rotations, not
// by timing: no sync may return before the next boundary after its issue,
// and most return within the rotation that boundary starts (the fraction is
// logged; only a grossly late model fails).
func TestDiskModelRotationCounts(t *testing.T) {
	for _, g := range []int{1, 4} {
		counts := rotationsPerSync(DiskModel{RotationsPerSec: 500}, g, 50)
		exact := 0
		for i, c := range counts {
			if c < 1 {
				t.Fatalf("%d goroutines: sync %d returned %d rotations after its issue, before the boundary", g, i, c)
			}
			if c == 1 {
				exact++
			}
		}
		t.Logf("%d goroutines: %d of %d syncs completed at the first boundary after their issue", g, exact, len(counts))
		if exact < len(counts)/4 {
			t.Errorf("%d goroutines: only %d of %d syncs completed at the first boundary", g, exact, len(counts))
		}
	}
}

func TestDiskModelFS(t *testing.T) {
	if fs := WithDiskModel(OS{}, DiskModel{}); fs != (OS{}) {
		t.Fatalf("an empty model wrapped the FS: %T", fs)
	}
	dir := t.TempDir()
	fs := WithDiskModel(OS{}, DiskModel{FsyncLatency: 100 * time.Microsecond})
	f, err := fs.Create(dir + "/a")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := f.(modelFile); !ok {
		t.Fatalf("Create returned %T, not a modelled file", f)
	}
	if _, err := f.WriteAt([]byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Datasync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := fs.SyncDir(dir); err != nil {
		t.Fatal(err)
	}
	for _, open := range []func(string) (File, error){fs.Open, fs.OpenReadOnly} {
		g, err := open(dir + "/a")
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := g.(modelFile); !ok {
			t.Fatalf("open returned %T, not a modelled file", g)
		}
		g.Close()
	}
	if _, err := fs.Open(dir + "/missing"); err == nil {
		t.Fatal("opening a missing file succeeded")
	}

	if err := fs.SyncDir(dir + "/missing"); err == nil {
		t.Fatal("SyncDir of a missing directory succeeded")
	}

	// The model replaces the real sync.
	var real atomic.Int64
	c := newModelClock(DiskModel{FsyncLatency: 10 * time.Microsecond}, time.Now)
	mf := modelFile{File: nopFile{syncs: &real}, clock: c}
	if err := mf.Datasync(); err != nil {
		t.Fatal(err)
	}
	if err := mf.Sync(); err != nil {
		t.Fatal(err)
	}
	if n := real.Load(); n != 0 {
		t.Errorf("%d real syncs reached the file under a model, want 0", n)
	}
	if n := c.Syncs(); n != 2 {
		t.Errorf("the clock counted %d syncs, want 2", n)
	}
}

// TestModelClockNeverEarly: whatever way the clock waits (a fine timer, a
// coarse sleep, yielding), no sync returns before its completion time.
func TestModelClockNeverEarly(t *testing.T) {
	noTimer := func() (fineTimer, error) { return nil, errors.New("no timer") }
	for _, tc := range []struct {
		m      DiskModel
		coarse bool
	}{
		{DiskModel{FsyncLatency: 300 * time.Microsecond}, false},
		{DiskModel{FsyncLatency: 2 * ms}, false},
		{DiskModel{RotationsPerSec: 1000}, false},
		{DiskModel{FsyncLatency: 2 * ms}, true},
		{DiskModel{RotationsPerSec: 1000}, true},
	} {
		m := tc.m
		c := NewModelClock(m)
		if tc.coarse {
			c.newTimer = noTimer
		}
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for range 10 {
					issued := time.Since(c.epoch)
					want, _ := c.completion(issued)
					c.Sync()
					if got := time.Since(c.epoch); got < want {
						t.Errorf("%+v: sync issued at %v returned at %v, before its completion at %v", m, issued, got, want)
					}
				}
			})
		}
		wg.Wait()
	}
}

// TestFineTimer: the timer sleeps at least as long as asked, and can be
// reused.
func TestFineTimer(t *testing.T) {
	ft, err := newFineTimer()
	if err != nil {
		t.Skipf("no fine timer here: %v", err)
	}
	defer ft.close()
	for _, d := range []time.Duration{0, 50 * time.Microsecond, 300 * time.Microsecond, 2 * ms} {
		t0 := time.Now()
		if err := ft.sleep(d); err != nil {
			t.Fatalf("sleep(%v): %v", d, err)
		}
		if el := time.Since(t0); el < d {
			t.Errorf("sleep(%v) returned after %v", d, el)
		}
	}
}

// BenchmarkDiskModelRotation reports how many back-to-back syncs per second
// one goroutine gets from a 250 rotations/s model (250 is exact).
func BenchmarkDiskModelRotation(b *testing.B) {
	c := newModelClock(DiskModel{RotationsPerSec: 250}, time.Now)
	f := modelFile{File: nopFile{}, clock: c}
	t0 := time.Now()
	for b.Loop() {
		if err := f.Datasync(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "syncs/s")
}
