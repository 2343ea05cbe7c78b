// Package vfs is the file-system seam every file operation of mvkv goes
// through, and a kit for crash-testing applications built on the engine.
//
// The engine, the WAL, the CLOG and the heap storage manager never call the
// os package for their files; they take an FS (engine.Options.FS). OS maps
// each call onto the operating system with real fsync and fdatasync and is
// what a nil Options.FS means. The other implementations are for tests:
//
//   - MemFS keeps files in memory and knows, for every write and every
//     directory entry, whether it has been made durable. CrashCopy (or a
//     CrashPoint given to the hook set with SetOpHook, after every mutating
//     operation) returns the file system a machine would find after losing
//     power at that moment: DropUnsynced loses everything not yet synced,
//     TearLast also keeps the last unsynced write of each file torn at a
//     512-byte sector boundary, KeepRandom keeps each unsynced write,
//     truncation and directory change or not at random. Names created or
//     renamed but not yet made durable with SyncDir are lost like data.
//   - FaultFS wraps any FS and fails chosen operations (the Nth write, sync,
//     rename, create or remove, or those on matching paths) with EIO, ENOSPC
//     or another errno, once or permanently (a disk gone read-only or dead),
//     or only the writes that make a file longer (a full disk).
//   - WithDiskModel wraps an FS so that syncs take the time a modelled disk
//     would (a fixed latency, or the wait for a rotating platter), for
//     benchmarks that should not depend on the machine's own disk.
//
// # Crash-testing an application
//
// Open the engine with Options.FS set to a MemFS, set an op hook that takes
// a crash copy after every operation, reopens the engine on the copy (as a
// restarted process would) and checks the application's own invariants
// there, then run the application's workload. The hook runs while the
// workload is paused right after the operation, so anything the workload has
// acknowledged by then was acknowledged before the crash point and must be
// found in the copy. Hook calls are serialized (the MemFS is locked), so the
// hook's own counters need no lock; the workload's acknowledgements, made on
// other goroutines, do. The hook runs only after a file-system operation: a
// commit that never reaches the file system before it is acknowledged (an
// asynchronous one, or one the application acknowledged early) is exposed
// only by a later operation, so take one last crash copy with
// MemFS.CrashCopy once the workload stops. The package's example
// "Example (CrashTest)"
// (Example_crashTest) does this for bank transfers; `mvkv crashtest --mode
// power` does the same for a randomized workload of its own.
//
// # What MemFS does not model
//
// A crash copy follows what POSIX promises; where Linux after a power loss
// may leave something else, a test that passes on MemFS has not seen it:
//
//   - Syncing a new file does not make its name durable in MemFS; on ext4
//     it usually does (fsync commits the journal transaction holding the
//     directory entry). MemFS is the stricter, as POSIX only promises the
//     name after a sync of its directory.
//   - A torn write keeps a prefix (TearLast); a real disk may keep any
//     subset of the sectors of a large write, since the kernel writes
//     pages back in any order. KeepRandom keeps or loses whole writes.
//   - A truncation (or Create of an existing file) is one change: a crash
//     copy has the file's old length and bytes or its new ones. On ext4 the
//     zeroed tail of a last block cut in the middle may reach the disk
//     without the new length, leaving zeros inside the old length.
//   - There are no hard links, permissions, timestamps or free-space
//     limit (FaultFS with Rule.Growing and ENOSPC models a full disk), a
//     file holds at most MaxMemFileSize bytes, and Lock excludes only
//     within one MemFS.
//
// # Design
//
// The interface is deliberately small: positional reads and writes (no shared
// file offset, so concurrent readers and writers of one file never race on
// it), Sync and Datasync, Truncate, and the directory operations that a
// crash-safe engine needs to make file creation and renames durable
// (SyncDir). Lock takes an advisory exclusive lock (flock) on a file so that
// two processes cannot open the same data directory. OS builds on Linux,
// macOS and the BSDs (not Windows: no flock, and a directory cannot be
// synced there); Datasync is fdatasync(2) on Linux and the runtime's
// File.Sync elsewhere, which on macOS is fcntl(F_FULLFSYNC), since plain
// fsync there leaves the data in the drive's cache. The idea, and the
// crash-clone approach of MemFS, come from pebble's vfs package. Rejected:
// intercepting the os package with a build tag (tests could not run crash
// copies side by side in one process) and simulating crashes with a FUSE
// file system (slow, and it needs privileges).
//
// MemFS keeps file contents in 4 KiB chunks shared copy-on-write between a
// file's current and durable states, its clones and its crash copies: a
// crash copy costs a pointer per chunk, and a write copies only the chunks
// it touches, so a test can take a crash copy after every operation of a
// workload over megabytes of files. A write of zeros (a preallocated WAL
// segment) is kept as a length. Rejected: copying every file at every crash
// copy (it dominated a crash test's time) and an undo log per crash copy
// (cheap to take, but each copy would have to replay it before it could be
// read).
package vfs
