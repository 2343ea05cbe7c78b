// Package rmgr is how the tools that read a data directory (package waldump
// and the checks behind the engine's Verify) reach what only the engine
// knows about its own files: where they are, what each WAL record type is
// called and how its payload reads, and the control file's format. It plays the part of PostgreSQL's resource
// manager table (rmgrlist.h, with each manager's rm_identify and rm_desc
// routines), which pg_waldump links in so that it can describe records it
// does not itself define.
//
// The engine fills Engine when it is initialized, so a package using Engine
// must import package engine (a blank import will do); the engine cannot be
// imported from here, because it imports this package to register itself.
//
// Rejected: exporting the descriptions from package engine (they are a
// tool's concern, and made the engine's user API carry a WAL dump), and
// moving the record formats out of the engine into a package of their own
// (the engine's redo and its writers share those unexported types and
// constants with every heap operation; moving them would split each
// operation's encoding from its redo).
package rmgr

import (
	"mvkv/vfs"
	"mvkv/wal"
)

// Control is what the control file records about the last checkpoint (as
// PostgreSQL's pg_control).
type Control struct {
	RedoLSN       wal.LSN // where redo starts
	CheckpointLSN wal.LSN // the checkpoint record itself
	NextXid       uint64  // no xid at or above this was handed out before the checkpoint
	HeapBlocks    uint64  // heap size in blocks after the checkpoint wrote every page
	SystemID      uint64  // the database's identifier; 0 in a version 1 file
}

// Table is the engine's part of reading its files.
type Table struct {
	// WALDir, CLOGDir, HeapDir and VMDir are the data directory's
	// subdirectories holding WAL segments, CLOG segments, heap segments
	// and visibility map files.
	WALDir, CLOGDir, HeapDir, VMDir string
	// RootFiles are the names of the files the engine keeps in the data
	// directory itself, beside those subdirectories (the control file,
	// the lock file, the index file, and the temporary names they are
	// written under).
	RootFiles []string
	// OwnFile reports whether name is one the engine gives what it keeps
	// in subdirectory sub of the data directory ("" for the directory
	// itself): a subdirectory or root file there, a WAL, heap or map
	// segment, a CLOG segment or the CLOG's own file. Verify's check for
	// strangers and a failed first Open's cleanup both ask it.
	OwnFile func(sub, name string) bool
	// TypeName is the name of a record type, as pg_waldump prints it
	// ("HEAP_INSERT").
	TypeName func(t wal.RecordType) string
	// Describe renders one WAL record on one line, as pg_waldump does:
	// LSN, type, transaction, payload length and what the payload says. A
	// malformed payload is described as such; Describe never fails.
	Describe func(rec wal.Record) string
	// IsCheckpoint reports whether records of type t are checkpoint
	// records.
	IsCheckpoint func(t wal.RecordType) bool
	// Outcome reports whether records of type t end their transaction,
	// and if so whether they commit it (a commit record) or not (an
	// abort record): the status the CLOG must hold for the record's xid.
	Outcome func(t wal.RecordType) (ends, committed bool)
	// CheckpointRedo decodes a checkpoint record's payload and returns
	// its redo point.
	CheckpointRedo func(rec wal.Record) (redo wal.LSN, err error)
	// CheckpointSystemID decodes a checkpoint record's payload and returns
	// the system identifier of the database that wrote it (0 in a record
	// of the older formats, which carry none).
	CheckpointSystemID func(rec wal.Record) (id uint64, err error)
	// ReadControl reads the control file of data directory dir; found is
	// false (with a nil error) when there is none. A damaged one is an
	// error naming the file.
	ReadControl func(fsys vfs.FS, dir string) (c Control, found bool, err error)
}

// Engine is filled by package engine when it is initialized.
var Engine Table
