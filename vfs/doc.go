// Package vfs is the seam every file operation of mvkv goes through.
//
// The engine, the WAL, the CLOG and the heap storage manager never call the
// os package for their files; they take an FS. Production uses OS, which maps
// each call onto the operating system with real fsync and fdatasync. Tests
// substitute implementations that simulate power loss or inject errors and
// latency, which is what makes enumerating crash points cheap (the idea comes
// from pebble's vfs package).
//
// The interface is deliberately small: positional reads and writes (no shared
// file offset, so concurrent readers and writers of one file never race on
// it), Sync and Datasync, Truncate, and the directory operations that a
// crash-safe engine needs to make file creation and renames durable
// (SyncDir). Lock takes an advisory exclusive lock (flock) on a file so that
// two processes cannot open the same data directory.
package vfs
