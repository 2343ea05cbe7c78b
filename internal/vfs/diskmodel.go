package vfs

import (
	"runtime"
	"sync"
	"time"
)

// DiskModel describes a simulated disk put under an FS by WithDiskModel, so
// that group-commit experiments made on one machine (a 15k rpm disk, a slow
// SSD) can be re-run, in shape, on any other. The zero value adds nothing.
type DiskModel struct {
	// FsyncLatency is how long every Sync, Datasync and SyncDir takes,
	// counted from the moment it is issued (0 = no fixed latency).
	FsyncLatency time.Duration
	// RotationsPerSec models a rotating disk that writes its cache to the
	// platter once per rotation: a sync completes at the first rotation
	// boundary strictly after it is issued (after FsyncLatency, when both
	// are set). 250 is a 15k rpm disk, 120 a 7200 rpm one. 0 means none.
	RotationsPerSec float64
}

// Enabled reports whether the model adds any latency.
func (m DiskModel) Enabled() bool { return m.FsyncLatency > 0 || m.RotationsPerSec > 0 }

// Period returns the duration of one rotation, or 0 without rotations.
func (m DiskModel) Period() time.Duration {
	if m.RotationsPerSec <= 0 {
		return 0
	}
	return time.Duration(float64(time.Second) / m.RotationsPerSec)
}

// WithDiskModel returns fs with every file's Sync and Datasync, and SyncDir,
// slowed down to follow m, on top of the real sync: the call first performs
// the real sync, then returns at the model's completion time, which is the
// later of the issue time plus m.FsyncLatency and the end of the real sync,
// rounded up to the next rotation boundary when m.RotationsPerSec is set.
// Rotation boundaries are fixed multiples of the period on a monotonic clock
// started by WithDiskModel, so all files of the returned FS share one
// platter. Several syncs may be outstanding at once, as on a drive with a
// command queue; each completes independently at its own boundary, and all
// syncs waiting for the same boundary return together.
//
// Go's timers round sleeps below about a millisecond up to about a
// millisecond and overshoot longer ones by a few hundred microseconds, which
// would turn 250 rotations/s into about 200 effective ones. So the wait
// sleeps until about a millisecond before the completion time and then
// yields in a loop checking the clock (runtime.Gosched), at the cost of up
// to a millisecond of one core per distinct completion time.
//
// An error from the real sync is returned at once, without the model's
// delay. The returned FS is safe for concurrent use if fs is. A model that
// adds nothing returns fs unchanged. The idea of a latency-injecting FS
// wrapper comes from pebble's vfs/errorfs and the "slow disk" FS of its
// tests.
func WithDiskModel(fs FS, m DiskModel) FS {
	if !m.Enabled() {
		return fs
	}
	return &modelFS{FS: fs, clock: newModelClock(m, time.Now)}
}

// modelClock computes completion times and waits for them.
type modelClock struct {
	m      DiskModel
	period time.Duration
	epoch  time.Time        // rotation 0; carries a monotonic reading
	now    func() time.Time // injected for tests

	mu    sync.Mutex
	waits map[int64]chan struct{} // guarded by mu: boundaries someone is spinning for, by rotation number
}

func newModelClock(m DiskModel, now func() time.Time) *modelClock {
	return &modelClock{m: m, period: m.Period(), epoch: now(), now: now, waits: make(map[int64]chan struct{})}
}

// completion returns when a sync issued at issued (an offset from epoch)
// whose real part ended at realEnd completes in the model, and the rotation
// number of that boundary (-1 when there are no rotations).
func (c *modelClock) completion(issued, realEnd time.Duration) (time.Duration, int64) {
	at := max(issued+c.m.FsyncLatency, realEnd)
	if c.period <= 0 {
		return at, -1
	}
	// The first boundary strictly after the issue, and not before at.
	n := int64(issued/c.period) + 1
	if b := int64(at / c.period); b >= n {
		n = b
		if time.Duration(n)*c.period < at {
			n++
		}
	}
	return time.Duration(n) * c.period, n
}

// sync runs real, then waits for the model's completion time.
func (c *modelClock) sync(real func() error) error {
	issued := c.now().Sub(c.epoch)
	if err := real(); err != nil {
		return err
	}
	at, n := c.completion(issued, c.now().Sub(c.epoch))
	if n < 0 {
		c.waitUntil(at)
		return nil
	}
	// Every sync waiting for boundary n returns when it passes; only the
	// first one watches the clock.
	c.mu.Lock()
	ch, ok := c.waits[n]
	if !ok {
		ch = make(chan struct{})
		c.waits[n] = ch
	}
	c.mu.Unlock()
	if ok {
		<-ch
		return nil
	}
	c.waitUntil(at)
	c.mu.Lock()
	delete(c.waits, n)
	c.mu.Unlock()
	close(ch)
	return nil
}

// spinWindow is how long before a completion time the wait stops sleeping
// and starts checking the clock: Go's sleeps overshoot by up to about this.
const spinWindow = time.Millisecond

// waitUntil returns once the clock reads at least at (an offset from epoch).
func (c *modelClock) waitUntil(at time.Duration) {
	for {
		rem := at - c.now().Sub(c.epoch)
		if rem <= 0 {
			return
		}
		if rem > spinWindow+spinWindow/2 {
			time.Sleep(rem - spinWindow)
			continue
		}
		runtime.Gosched()
	}
}

type modelFS struct {
	FS
	clock *modelClock
}

type modelFile struct {
	File
	clock *modelClock
}

func (f modelFile) Sync() error     { return f.clock.sync(f.File.Sync) }
func (f modelFile) Datasync() error { return f.clock.sync(f.File.Datasync) }

func (fs *modelFS) wrap(f File, err error) (File, error) {
	if err != nil {
		return nil, err
	}
	return modelFile{File: f, clock: fs.clock}, nil
}

// Create implements FS.
func (fs *modelFS) Create(name string) (File, error) { return fs.wrap(fs.FS.Create(name)) }

// Open implements FS.
func (fs *modelFS) Open(name string) (File, error) { return fs.wrap(fs.FS.Open(name)) }

// OpenReadOnly implements FS.
func (fs *modelFS) OpenReadOnly(name string) (File, error) {
	return fs.wrap(fs.FS.OpenReadOnly(name))
}

// SyncDir implements FS.
func (fs *modelFS) SyncDir(name string) error {
	return fs.clock.sync(func() error { return fs.FS.SyncDir(name) })
}
