package bench

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	pvfs "github.com/cockroachdb/pebble/v2/vfs"
)

// DiskModel is a simulated disk for the seed experiments, whose figures
// depend on what a sync costs: each sync takes FsyncLatency (a fixed
// latency device), or completes at the first rotation boundary after it is
// issued on a disk turning RotationsPerSec times a second (the 2009 thread's
// 15k rpm drive is 250). Syncs may be outstanding concurrently, as on a
// drive with a command queue. The zero value is the real disk.
//
// On the engine the model is the vfs seam's (vfs.WithDiskModel); on pebble
// it is pebbleDiskFS below, which follows the same rules so both stores pay
// the same price per sync.
type DiskModel struct {
	FsyncLatency    time.Duration
	RotationsPerSec float64
}

// IsZero reports whether m is the real disk.
func (m DiskModel) IsZero() bool { return m.FsyncLatency <= 0 && m.RotationsPerSec <= 0 }

// String describes m for table headers: "real disk", "fsync 4ms",
// "250 rotations/s".
func (m DiskModel) String() string {
	switch {
	case m.IsZero():
		return "real disk"
	case m.RotationsPerSec > 0 && m.FsyncLatency > 0:
		return fmt.Sprintf("fsync %v, then %g rotations/s", m.FsyncLatency, m.RotationsPerSec)
	case m.RotationsPerSec > 0:
		return fmt.Sprintf("%g rotations/s", m.RotationsPerSec)
	}
	return fmt.Sprintf("fsync %v", m.FsyncLatency)
}

// SyncRate is the most syncs per second one session can see: the rotation
// rate, or 1 / FsyncLatency; 0 for the real disk. A commit needs one sync,
// so clients x SyncRate is the optimum the sweep table's calc column shows.
func (m DiskModel) SyncRate() float64 {
	switch {
	case m.RotationsPerSec > 0:
		return m.RotationsPerSec
	case m.FsyncLatency > 0:
		return float64(time.Second) / float64(m.FsyncLatency)
	}
	return 0
}

// diskClock is the model's clock for pebble, following the rules of the
// engine's vfs.WithDiskModel so both stores see the same disk: the real
// sync runs first, then the call returns at the later of its end and the
// issue time plus FsyncLatency, rounded up to a rotation boundary (fixed
// multiples of the period since epoch) that is strictly after the issue.
type diskClock struct {
	m     DiskModel
	epoch time.Time     // rotation 0; carries a monotonic reading
	syncs atomic.Uint64 // syncs made, for tests
}

// sync runs real, then waits for the model's completion time. An error from
// the real sync is returned at once.
func (c *diskClock) sync(real func() error) error {
	c.syncs.Add(1)
	issued := time.Since(c.epoch)
	if err := real(); err != nil {
		return err
	}
	at := c.completion(issued, time.Since(c.epoch))
	// Go's sleeps overshoot by up to about a millisecond, which would turn
	// 250 rotations/s into about 200: sleep until a millisecond before and
	// then watch the clock, as the engine's model does.
	for {
		rem := at - time.Since(c.epoch)
		if rem <= 0 {
			return nil
		}
		if rem > 3*time.Millisecond/2 {
			time.Sleep(rem - time.Millisecond)
			continue
		}
		runtime.Gosched()
	}
}

// completion returns when, as an offset from epoch, a sync issued at issued
// whose real part ended at realEnd completes in the model.
func (c *diskClock) completion(issued, realEnd time.Duration) time.Duration {
	at := max(issued+c.m.FsyncLatency, realEnd)
	r := c.m.RotationsPerSec
	if r <= 0 {
		return at
	}
	period := time.Duration(float64(time.Second) / r)
	if period <= 0 {
		return at
	}
	n := issued/period + 1 // the first boundary strictly after the issue
	if b := at / period; b >= n {
		n = b
		if n*period < at {
			n++
		}
	}
	return n * period
}

// pebbleDiskFS is pebble's vfs with every Sync and SyncData (of files and
// directories) slowed down to the disk model by diskClock, on top of the
// real sync, as the engine's vfs.WithDiskModel does.
type pebbleDiskFS struct {
	pvfs.FS
	clock *diskClock
}

func newPebbleDiskFS(m DiskModel) *pebbleDiskFS {
	return &pebbleDiskFS{FS: pvfs.Default, clock: &diskClock{m: m, epoch: time.Now()}}
}

func (fs *pebbleDiskFS) wrap(f pvfs.File, err error) (pvfs.File, error) {
	if err != nil {
		return nil, err
	}
	return &pebbleDiskFile{File: f, clock: fs.clock}, nil
}

func (fs *pebbleDiskFS) Create(name string, c pvfs.DiskWriteCategory) (pvfs.File, error) {
	return fs.wrap(fs.FS.Create(name, c))
}

func (fs *pebbleDiskFS) Open(name string, opts ...pvfs.OpenOption) (pvfs.File, error) {
	return fs.wrap(fs.FS.Open(name, opts...))
}

func (fs *pebbleDiskFS) OpenReadWrite(name string, c pvfs.DiskWriteCategory, opts ...pvfs.OpenOption) (pvfs.File, error) {
	return fs.wrap(fs.FS.OpenReadWrite(name, c, opts...))
}

func (fs *pebbleDiskFS) OpenDir(name string) (pvfs.File, error) {
	return fs.wrap(fs.FS.OpenDir(name))
}

func (fs *pebbleDiskFS) ReuseForWrite(oldname, newname string, c pvfs.DiskWriteCategory) (pvfs.File, error) {
	return fs.wrap(fs.FS.ReuseForWrite(oldname, newname, c))
}

type pebbleDiskFile struct {
	pvfs.File
	clock *diskClock
}

func (f *pebbleDiskFile) Sync() error     { return f.clock.sync(f.File.Sync) }
func (f *pebbleDiskFile) SyncData() error { return f.clock.sync(f.File.SyncData) }

// SyncTo is pebble's asynchronous write-back hint (sync_file_range on
// Linux) while an sstable is written; it promises nothing, so the model
// leaves it to the real file.
