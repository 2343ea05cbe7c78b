package bench

import (
	"fmt"
	"time"

	pvfs "github.com/cockroachdb/pebble/v2/vfs"

	"mvkv/vfs"
)

// DiskModel is a simulated disk for the pgsql-hackers experiments mvkv
// re-runs, whose figures depend on what a sync costs: each sync takes
// FsyncLatency (a fixed latency device), or completes at the first
// rotation boundary after it is issued on a disk turning RotationsPerSec
// times a second (the 2009 thread's 15k rpm drive is 250). Syncs may be outstanding concurrently, as on a
// drive with a command queue. The zero value is the real disk.
//
// On the engine the model is the vfs seam's (vfs.WithDiskModel); on pebble
// it is a file system wrapper that waits on the same vfs.ModelClock, so both
// stores pay the same price per sync. Either way the model replaces the real
// sync (see vfs.WithDiskModel for what a crash means then).
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

// vfsModel is m in the vfs seam's terms.
func (m DiskModel) vfsModel() vfs.DiskModel {
	return vfs.DiskModel{FsyncLatency: m.FsyncLatency, RotationsPerSec: m.RotationsPerSec}
}

// pebbleDiskFS is pebble's vfs with every Sync and SyncData (of files and
// directories) replaced by the disk model's clock, the same clock the
// engine's vfs.WithDiskModel uses, so both stores pay the same price per
// sync and neither makes a real one.
type pebbleDiskFS struct {
	pvfs.FS
	clock *vfs.ModelClock
}

func newPebbleDiskFS(m DiskModel) *pebbleDiskFS {
	return &pebbleDiskFS{FS: pvfs.Default, clock: vfs.NewModelClock(m.vfsModel())}
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
	clock *vfs.ModelClock
}

func (f *pebbleDiskFile) Sync() error     { f.clock.Sync(); return nil }
func (f *pebbleDiskFile) SyncData() error { f.clock.Sync(); return nil }

// SyncTo is pebble's asynchronous write-back hint (sync_file_range on
// Linux) while an sstable is written; it promises nothing, so the model
// leaves it to the real file.
