package bench

import (
	"time"

	"mvkv/internal/vfs"
)

// engineDiskFS returns the engine's file system under model m, or nil (the
// engine's default, the real disk) for the zero model.
func engineDiskFS(m DiskModel) vfs.FS {
	if m.IsZero() {
		return nil
	}
	return &engineModelFS{FS: vfs.OS{}, clock: &diskClock{m: m, epoch: time.Now()}}
}

type engineModelFS struct {
	vfs.FS
	clock *diskClock
}

func (fs *engineModelFS) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return &engineModelFile{File: f, clock: fs.clock}, nil
}

func (fs *engineModelFS) Create(name string) (vfs.File, error) { return fs.wrap(fs.FS.Create(name)) }
func (fs *engineModelFS) Open(name string) (vfs.File, error)   { return fs.wrap(fs.FS.Open(name)) }
func (fs *engineModelFS) SyncDir(string) error                 { fs.clock.wait(); return nil }

type engineModelFile struct {
	vfs.File
	clock *diskClock
}

func (f *engineModelFile) Sync() error     { f.clock.wait(); return nil }
func (f *engineModelFile) Datasync() error { f.clock.wait(); return nil }
