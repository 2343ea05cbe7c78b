package wal

import (
	"errors"
	"io"
	"io/fs"
	"path"
	"sort"

	"mvkv/vfs"
)

// roFS is a read-only in-memory vfs.FS holding whole files, for fuzzing the
// reader without touching the disk.
type roFS map[string][]byte

var errReadOnly = errors.New("roFS: read-only")

type roFile struct {
	name string
	b    []byte
}

func (f roFile) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("roFS: negative offset")
	}
	if off >= int64(len(f.b)) {
		return 0, io.EOF
	}
	n := copy(p, f.b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}
func (f roFile) WriteAt([]byte, int64) (int, error) { return 0, errReadOnly }
func (f roFile) Close() error                       { return nil }
func (f roFile) Sync() error                        { return nil }
func (f roFile) Datasync() error                    { return nil }
func (f roFile) Truncate(int64) error               { return errReadOnly }
func (f roFile) Size() (int64, error)               { return int64(len(f.b)), nil }
func (f roFile) Name() string                       { return f.name }

func (m roFS) OpenReadOnly(name string) (vfs.File, error) {
	b, ok := m[name]
	if !ok {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return roFile{name, b}, nil
}
func (m roFS) Open(name string) (vfs.File, error) { return m.OpenReadOnly(name) }
func (m roFS) Create(string) (vfs.File, error)    { return nil, errReadOnly }
func (m roFS) Rename(string, string) error        { return errReadOnly }
func (m roFS) Remove(string) error                { return errReadOnly }
func (m roFS) MkdirAll(string) error              { return nil }
func (m roFS) SyncDir(string) error               { return nil }
func (m roFS) Lock(string) (io.Closer, error)     { return nil, errReadOnly }
func (m roFS) ReadDir(dir string) ([]string, error) {
	var names []string
	for n := range m {
		if path.Dir(n) == dir {
			names = append(names, path.Base(n))
		}
	}
	sort.Strings(names)
	return names, nil
}
func (m roFS) Stat(name string) (int64, error) {
	b, ok := m[name]
	if !ok {
		return 0, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrNotExist}
	}
	return int64(len(b)), nil
}
