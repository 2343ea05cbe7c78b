package vfs

import (
	"runtime"
	"sync"
	"sync/atomic"
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
// replaced by the model: the call performs no real sync and returns at the
// model's completion time (see ModelClock). Reads, writes, creations,
// renames and removals still go to fs, so the files hold exactly what they
// would on the real disk.
//
// The model replaces the real sync rather than adding to it because the real
// one would distort the model: its latency on a shared disk varies from
// tens of microseconds to tens of milliseconds, and one that ends after a
// rotation boundary pushes the modelled sync to the next one, so the
// experiment would measure the machine's disk after all.
//
// What a crash means under a model: everything written has reached the
// kernel's page cache, so a process crash (kill -9) loses no acknowledged
// commit, and recovery behaves as on the real disk. An operating-system
// crash or a power loss can lose acknowledged commits, and since the kernel
// writes pages back in any order it can leave a hole below what the log
// recorded as durable, which recovery reports as corruption. A modelled data
// directory is for measurements, not for data one wants to keep.
//
// A model that adds nothing returns fs unchanged. The returned FS is safe
// for concurrent use if fs is. The idea of a latency-injecting FS wrapper
// comes from pebble's vfs/errorfs and the "slow disk" FS of its tests.
func WithDiskModel(fs FS, m DiskModel) FS {
	if !m.Enabled() {
		return fs
	}
	return &modelFS{FS: fs, clock: NewModelClock(m)}
}

// ModelClock is a disk model's clock: it decides when a sync issued now
// completes and waits for that moment. All files of an FS returned by
// WithDiskModel share one clock (one platter); a store with its own file
// system interface (the bench's pebble target) waits on a ModelClock of its
// own so that it pays the same price per sync as the engine.
//
// A sync issued at time t completes at t + FsyncLatency, or, with rotations,
// at the first rotation boundary strictly after t (after t + FsyncLatency
// when both are set). Boundaries are fixed multiples of the period on a
// monotonic clock started by NewModelClock. Any number of syncs may be
// outstanding at once, as on a drive with a command queue; each completes
// independently, and all syncs waiting for the same boundary return
// together.
//
// Waiting is precise to tens of microseconds without burning a core: Go's
// timers round sleeps below about a millisecond up to about a millisecond
// (which would turn 250 rotations/s into about 200 effective ones), so on
// Linux the wait blocks on a timerfd, which the runtime's network poller
// wakes on the kernel's high-resolution timer, and yields in a loop
// checking the clock (runtime.Gosched) only for the last 100 µs. Where
// there is no timerfd it sleeps until a millisecond before and yields from
// there. Only one goroutine watches the clock per completion time.
//
// All methods are safe for concurrent use.
type ModelClock struct {
	m      DiskModel
	period time.Duration
	epoch  time.Time        // rotation 0; carries a monotonic reading
	now    func() time.Time // injected for tests

	newTimer func() (fineTimer, error) // newFineTimer; injected for tests

	syncs atomic.Uint64 // syncs modelled

	mu     sync.Mutex
	waits  map[int64]chan struct{} // guarded by mu: boundaries someone is watching, by rotation number
	timers []fineTimer             // guarded by mu: idle timers for fineSleep
}

// NewModelClock returns the clock of model m, with rotation 0 now.
func NewModelClock(m DiskModel) *ModelClock { return newModelClock(m, time.Now) }

func newModelClock(m DiskModel, now func() time.Time) *ModelClock {
	return &ModelClock{m: m, period: m.Period(), epoch: now(), now: now, newTimer: newFineTimer, waits: make(map[int64]chan struct{})}
}

// Syncs returns how many syncs the clock has modelled.
func (c *ModelClock) Syncs() uint64 { return c.syncs.Load() }

// completion returns when a sync issued at issued (an offset from epoch)
// completes in the model, and the rotation number of that boundary (-1
// when there are no rotations).
func (c *ModelClock) completion(issued time.Duration) (time.Duration, int64) {
	at := issued + c.m.FsyncLatency
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

// Sync returns when a sync issued now completes in the model. It performs
// no I/O and cannot fail.
func (c *ModelClock) Sync() {
	c.syncs.Add(1)
	at, n := c.completion(c.now().Sub(c.epoch))
	if n < 0 {
		c.waitUntil(at)
		return
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
		return
	}
	c.waitUntil(at)
	c.mu.Lock()
	delete(c.waits, n)
	c.mu.Unlock()
	close(ch)
}

const (
	// fineWindow is how long before a completion time a precise wait stops
	// sleeping and starts checking the clock: a timerfd fires up to the
	// kernel's default timer slack (50 µs) late, plus a wake-up.
	fineWindow = 100 * time.Microsecond
	// coarseWindow is the same for time.Sleep, which overshoots by up to
	// about a millisecond.
	coarseWindow = time.Millisecond
)

// waitUntil returns once the clock reads at least at (an offset from epoch).
func (c *ModelClock) waitUntil(at time.Duration) {
	fine := true
	for {
		rem := at - c.now().Sub(c.epoch)
		switch {
		case rem <= 0:
			return
		case fine && rem > fineWindow:
			fine = c.fineSleep(rem - fineWindow)
		case !fine && rem > coarseWindow+coarseWindow/2:
			time.Sleep(rem - coarseWindow)
		default:
			runtime.Gosched()
		}
	}
}

// fineSleep sleeps for about d with sub-millisecond precision, on a timer
// reused from the clock's idle list; it returns false, having slept not at
// all, when the platform (or the process's file limit) gives no such
// timer.
func (c *ModelClock) fineSleep(d time.Duration) bool {
	c.mu.Lock()
	var t fineTimer
	if n := len(c.timers); n > 0 {
		t, c.timers = c.timers[n-1], c.timers[:n-1]
	}
	c.mu.Unlock()
	if t == nil {
		var err error
		if t, err = c.newTimer(); err != nil {
			return false
		}
	}
	if err := t.sleep(d); err != nil {
		t.close()
		return false
	}
	c.mu.Lock()
	if len(c.timers) < maxIdleTimers {
		c.timers = append(c.timers, t)
		t = nil
	}
	c.mu.Unlock()
	if t != nil {
		t.close()
	}
	return true
}

// maxIdleTimers bounds the timers a clock keeps for reuse: one per
// completion time being watched at once, which is one per boundary with
// rotations and one per outstanding sync with a fixed latency.
const maxIdleTimers = 16

// fineTimer is a one-shot timer precise to tens of microseconds whose wait
// parks only the calling goroutine. Not safe for concurrent use; an idle
// one left to the garbage collector closes itself (os.File's cleanup).
type fineTimer interface {
	sleep(d time.Duration) error
	close()
}

type modelFS struct {
	FS
	clock *ModelClock
}

type modelFile struct {
	File
	clock *ModelClock
}

// Sync implements File: the model's sync, without a real one.
func (f modelFile) Sync() error { f.clock.Sync(); return nil }

// Datasync implements File: the model's sync, without a real one.
func (f modelFile) Datasync() error { f.clock.Sync(); return nil }

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

// SyncDir implements FS: the model's sync, without a real one. The
// directory must still exist, as a real directory fsync would require.
func (fs *modelFS) SyncDir(name string) error {
	if _, err := fs.FS.ReadDir(name); err != nil {
		return err
	}
	fs.clock.Sync()
	return nil
}
