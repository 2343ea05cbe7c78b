// Package wal is mvkv's write-ahead log: the record and segment formats, the
// Writer with its group-commit flusher, and the Reader used by recovery and
// waldump. It follows PostgreSQL's xlog.c in its shape (LSNs are byte
// positions, records carry their own LSN, XLogFlush's leader/waiter scheme,
// commit_delay and commit_siblings, a background WAL writer) and pebble's
// record package and etcd's wal in its Go form.
//
// # Files
//
// The log is a sequence of fixed-size segment files in one directory, each
// named by the LSN of its first byte as 16 upper-case hex digits
// (0000000001000000 is the segment starting at LSN 16 MiB). An LSN is the
// segment's start LSN plus a byte offset in its file, so LSN 0 (which lies in
// a header) is never a record's LSN. An empty log starts in segment 1, at
// FirstLSN(segmentSize), as PostgreSQL's does. Segment files are always full
// size: they are created zero-filled under a temporary name (".tmp" suffix),
// fsynced, renamed into place, and the directory is fsynced, so a segment file
// under its final name is complete and its header is valid.
//
// # Formats
//
// All integers are little-endian. Part of the format; do not change.
//
// Segment header, at offset 0 of every segment file:
//
//	+---------+---------+---------+-------------+-------------+---------+---------+
//	| magic   | version | zero    | segsize     | start LSN   | zero    | CRC     |
//	| 4 bytes | 2 bytes | 2 bytes | 8 bytes     | 8 bytes     | 4 bytes | 4 bytes |
//	+---------+---------+---------+-------------+-------------+---------+---------+
//	 0         4         6         8             16            24        28      32
//
// magic is 0x4c41574d ("MWAL" on disk), version is 1, segsize the segment size
// in bytes (a power of two in [1 MiB, 1 GiB]), start LSN the LSN of byte 0 of
// the file (it must equal the file name), CRC the CRC-32C (Castagnoli) of
// bytes 0..27.
//
// Record, at any 8-byte-aligned offset at or after 32:
//
//	+---------+---------+-------------+-------------+------+-------+---------+------------+---------+
//	| CRC     | length  | LSN         | XID         | type | flags | zero    | payload    | padding |
//	| 4 bytes | 4 bytes | 8 bytes     | 8 bytes     | 1    | 1     | 6 bytes | length     | to 8    |
//	+---------+---------+-------------+-------------+------+-------+---------+------------+---------+
//	 0         4         8             16            24     25      26        32
//
// length is the payload length in bytes; LSN is the record's own LSN; type is
// 1..255 (1 is a segment switch with an empty payload, 2..15 are reserved to
// this package, 16..255 belong to the caller); the zero bytes must be zero.
// CRC is the CRC-32C of the payload followed by header bytes 4..31 (payload
// first, as PostgreSQL sums XLogRecord, so the payload's share can be computed
// before the insertion lock is taken). The padding is zero and unchecked. A
// record occupies 32+length bytes rounded up to a multiple of 8 and never
// spans segments; the next record starts right after it. When a record does
// not fit in the rest of a segment, the writer puts a switch record there if a
// record header fits, and the record goes after the next segment's header; a
// remainder smaller than a header is an implicit switch.
//
// # End of the log (DESIGN rule 5)
//
// The Reader stops at the first record whose length is out of bounds (above
// MaxPayload or past the segment end), whose LSN field is not its position,
// whose reserved bytes or type are wrong, or whose CRC fails; at a missing
// next segment; or at a next segment whose header does not check out or does
// not name it. That is the end of the log (io.EOF), not an error: with every
// record naming its own LSN, bytes left in a preallocated or reused segment,
// or a half-written tail, cannot pass as records. DroppedBytes says how many
// non-zero bytes were cut off after End. As an exception, a bad segment header
// followed by a segment whose first record is valid is reported as
// ErrCorrupt, since the log demonstrably continued past it.
//
// # Crash contract
//
// When Flush(upTo) returns nil, every record ending at or below upTo is on
// stable storage, and so is every record before it in the log: the flusher
// writes in LSN order and fdatasyncs each segment before writing the next
// (rule 9: the old segment is synced before a commit in the new one is
// acknowledged). Records inserted but not flushed may or may not survive a
// crash, and may survive partially; recovery cuts the log at the first
// damaged one, and OpenWriter then durably invalidates everything past that
// end (later segments removed, the rest of the segment zeroed, both fsynced)
// before appending, so a torn or stale record can never resurface behind new
// ones once the log grows past it.
//
// A failed write or fdatasync is not retried (after a failed fsync the kernel
// may have dropped the dirty pages, so a later successful fsync would prove
// nothing): the Writer stops, and every later Insert and Flush, and every
// waiter, gets an error wrapping ErrSyncFailed. Recovery after reopening
// decides what survived.
//
// # Group commit
//
// Insert copies a framed record into memory under one mutex and does no I/O.
// Flush follows PostgreSQL's XLogFlush: whoever finds its LSN unflushed tries
// to become the single flusher; the others wait for the round in progress
// and re-check, so a waiter is only released by a sync that covered its own
// record. The flusher optionally waits commit_delay for more committers
// (only when at least commit_siblings other transactions are active), then
// writes everything inserted so far, not just its own record. Go's timers
// round sleeps below a millisecond up to about a millisecond, so delays
// shorter than that are waited by checking the clock between yields, and the
// wait ends early once every other active transaction is already waiting.
// See Writer for the pseudocode.
//
// Rejected: a dedicated flusher goroutine fed by a channel (pebble's
// LogWriter) adds a goroutine handoff to every commit's latency; the
// committer-led scheme lets a lone committer write and sync directly.
// Writing only up to the leader's own LSN would leave records that arrived
// during its delay for another round, wasting the delay.
package wal
