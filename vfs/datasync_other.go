//go:build !linux

package vfs

import "os"

// datasync is the Go runtime's File.Sync elsewhere: on macOS that is
// fcntl(F_FULLFSYNC), the only call that asks the drive to empty its write
// cache there (plain fsync does not; PostgreSQL's fsync_writethrough), and
// fsync(2) on the BSDs, whose fdatasync is missing or no cheaper.
func datasync(f *os.File) error { return f.Sync() }
