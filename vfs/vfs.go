package vfs

import (
	"errors"
	"io"
)

// ErrLocked is returned by FS.Lock when another process (or another open
// handle in this process) already holds the lock.
var ErrLocked = errors.New("vfs: file is locked by another process")

// File is an open file. ReadAt and WriteAt take absolute offsets in bytes and
// are safe to call concurrently from several goroutines. ReadAt follows
// io.ReaderAt: a short read at end of file returns io.EOF.
type File interface {
	io.ReaderAt
	io.WriterAt
	io.Closer
	// Sync flushes data and metadata to stable storage (fsync).
	Sync() error
	// Datasync flushes data, and metadata only where needed to read the data
	// back (fdatasync). Cheaper than Sync on a preallocated file.
	Datasync() error
	// Truncate changes the file's size in bytes.
	Truncate(size int64) error
	// Size returns the file's current size in bytes.
	Size() (int64, error)
	// Name returns the path the file was opened with.
	Name() string
}

// FS is the file system. Paths are ordinary slash-separated paths. All
// methods are safe for concurrent use.
type FS interface {
	// Create creates or truncates the named file for reading and writing.
	Create(name string) (File, error)
	// Open opens an existing file for reading and writing.
	Open(name string) (File, error)
	// OpenReadOnly opens an existing file for reading only.
	OpenReadOnly(name string) (File, error)
	// Rename atomically replaces newname with oldname. The rename is
	// durable only after SyncDir on the directory.
	Rename(oldname, newname string) error
	// Remove deletes a file or an empty directory.
	Remove(name string) error
	// MkdirAll creates a directory and any missing parents.
	MkdirAll(name string) error
	// ReadDir returns the names of the entries of a directory, sorted.
	ReadDir(name string) ([]string, error)
	// SyncDir makes the directory's entries (creations, renames, removals)
	// durable (fsync on the directory).
	SyncDir(name string) error
	// Stat returns the size in bytes of the named file; errors satisfy
	// errors.Is(err, fs.ErrNotExist) when it is missing.
	Stat(name string) (int64, error)
	// Lock takes an exclusive advisory lock on the named file, creating it
	// if needed, without waiting. It returns ErrLocked when the lock is held
	// elsewhere. Closing the returned io.Closer releases the lock.
	Lock(name string) (io.Closer, error)
}
