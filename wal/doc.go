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
//	| magic   | version | log id  | segsize     | start LSN   | mark    | CRC     |
//	| 4 bytes | 2 bytes | 2 bytes | 8 bytes     | 8 bytes     | 4 bytes | 4 bytes |
//	+---------+---------+---------+-------------+-------------+---------+---------+
//	 0         4         6         8             16            24        28      32
//
// magic is 0x4c41574d ("MWAL" on disk), version is 1, segsize the segment size
// in bytes (a power of two in [1 MiB, 1 GiB]), start LSN the LSN of byte 0 of
// the file (it must equal the file name), mark the segment's durable-LSN
// mark as its distance below start LSN in 8-byte units plus one (0: none;
// the log was durable below the mark when the segment was prepared), CRC the
// CRC-32C (Castagnoli) of bytes 0..27. log id identifies the log: drawn at
// random, never 0, when a new log's first segment is made, and written in
// every segment of that log (0 in segments of builds that wrote zeros
// there, which match any). Two databases that ran the same work have
// records at the same LSNs that pass every check, so without it a segment
// copied from one into the other's directory would be replayed as its own;
// PostgreSQL's long page header carries the system identifier for the same
// reason. 16 bits fit the header as it was (the two bytes were zero and
// unchecked, so older readers ignore them); a stray segment's identifier
// matches by chance once in 65,535.
//
// Record, at any 8-byte-aligned offset at or after 32:
//
//	+---------+---------+-------------+-------------+------+-------+---------+------------+---------+
//	| CRC     | length  | LSN         | XID         | type | flags | durable | payload    | padding |
//	| 4 bytes | 4 bytes | 8 bytes     | 8 bytes     | 1    | 1     | 6 bytes | length     | to 8    |
//	+---------+---------+-------------+-------------+------+-------+---------+------------+---------+
//	 0         4         8             16            24     25      26        32
//
// length is the payload length in bytes; LSN is the record's own LSN; type is
// 1..255 (1 is a segment switch with an empty payload, 2..15 are reserved to
// this package, 16..255 belong to the caller); durable (the six bytes at 26,
// a 48-bit integer) is the durable-LSN mark: the flushed LSN when the record
// was inserted, never above the record's own LSN.
// CRC is the CRC-32C of the payload followed by header bytes 4..31 (payload
// first, as PostgreSQL sums XLogRecord, so the payload's share can be computed
// before the insertion lock is taken). The padding is zero and unchecked. A
// record occupies 32+length bytes rounded up to a multiple of 8 and never
// spans segments; the next record starts right after it. When a record does
// not fit in the rest of a segment, the writer puts a switch record there if a
// record header fits, and the record goes after the next segment's header; a
// remainder smaller than a header is an implicit switch.
//
// # End of the log
//
// The Reader stops at the first record whose length is out of bounds (above
// MaxPayload or past the segment end), whose LSN field is not its position,
// whose durable-LSN mark lies above its own LSN, whose type is invalid, or
// whose CRC fails; or at a missing
// next segment. That is the end of the log (io.EOF), not an error: with every
// record naming its own LSN, bytes left in a preallocated segment,
// or a half-written tail, cannot pass as records. A next segment file whose
// header does not check out or does not name it is not an end but damage
// (see "The newest segment after a crash" below). DroppedBytes says how long
// the tail cut off after End is, up to its last non-zero byte.
//
// Except when the damage lies below what was already known to be durable:
// then it is corruption, and Next returns ErrCorrupt naming the file and
// offset, so that recovery fails instead of silently dropping commits. The
// Reader looks past a bad record for valid records (each must name its own
// position and pass its CRC, so stale bytes cannot pass): if one of them
// carries a durable-LSN mark above the bad record, or the next segment's
// first record is valid (the writer moves to a segment only after syncing
// the one before), the bad record lay in the durable log. A bad segment
// header followed by a segment whose first record is valid is corruption for
// the same reason, and so is a bad header over a segment that holds a valid
// record of its own anywhere (segments are created whole and renamed into
// place, so no crash leaves a bad header over records). Damage in the unsynced tail (a torn write whose later
// sectors reached the disk before earlier ones) carries no such mark and
// remains the end of the log.
//
// A next segment whose header checks out but whose log id differs from the
// one of the segments before it is not the end of the log either: it is a
// segment of another log, and Next returns ErrCorrupt naming it.
//
// Segments are created whole (written to their full size and synced under a
// temporary name, then renamed), removed only from the front, and, past the
// end of the log at OpenWriter, newest first with each removal synced. So a
// segment file shorter than the segment size, with the log ending where the
// file does, and a segment missing below one that is present, are damage no
// crash makes: the Reader returns ErrCorrupt naming the file and the LSN
// from which the log is lost. Each segment's header also carries a
// durable-LSN mark, the flushed LSN when it was prepared; a valid log that
// ends below the mark of a segment present after it has lost the LSN range
// between, which is named too. A short file whose log ends at a header of
// zeros before the cut lost nothing durable (writes go in order) and reads
// as the end of the log.
//
// The Writer asks for segment n+2 to be prepared only once it has moved
// into n+1, and moves into n+1 only after n is fdatasynced whole. So where
// the log ends in n (inside it, or at its end with n+1 missing or its
// header bad), a file of this log at n+2 or later, under its final name or
// the temporary name of a segment being prepared, shows that the log went
// on into n+1: ErrCorrupt, naming n+1. A segment at n+1 prepared and never
// written, or being prepared, proves nothing (the state after every
// switch), nor does a later file whose header names another log or
// segment size. The Writer never renames an old segment ahead, so a file
// with older content under a later name is not a state it leaves either.
// Damage that reaches the end of what was written (the newest segment
// removed with no later file left, zeros to the end of a segment whose
// header holds) reads as the end of the log. Reader.PastEnd counts the
// valid records found after the bytes that end the log, which are cut off
// with the tail.
//
// # The newest segment after a crash
//
// Let n be the last segment whose log the Reader reads to its end (a
// switch record, or a remainder too small for a record header) or to a
// bad record, and n+1 the segment after it. The files that make segments
// and what touches them after a crash, kill -9 or power loss (MemFS's
// DropUnsynced, TearLast and KeepRandom copies, which lose or keep
// unsynced writes and directory entries, renames included):
//
//   - Segment files are made one way only, ahead by the Writer's
//     background preparation or inline at a switch: the header and zeros
//     to the segment size are written into n+1.tmp, which is fsynced,
//     renamed to its final name, and the directory fsynced. Whatever name
//     survives stands for that synced file: n+1.tmp with any part of its
//     bytes, or n+1 whole with a valid header.
//   - The flusher writes records at offset 32 and after, and OpenWriter's
//     zeroing of the tail starts at the end of the log, never below 32; a
//     write does not change bytes it does not cover (a sector is written
//     whole or not at all, as TearLast models it and as PostgreSQL assumes
//     of pg_control's 512 bytes). Segments are removed only from the
//     front, and past the end at OpenWriter newest first, each removal
//     synced. No segment is renamed to a later name.
//   - The flusher fdatasyncs n up to its end, switch record included,
//     before it opens n+1; when the preparer has not made n+1 by then it
//     creates it inline, after that sync.
//
// So the newest segment can be found, after a crash, in these states:
//
//	state of n+1 (no later file)       how a crash leaves it                recovery
//	-------------------------------    ---------------------------------    ------------------------------
//	absent, n read to its end          crash after n's last sync, before    end of the log at n's end
//	                                   n+1, made inline because its
//	                                   preparation was late, had a
//	                                   durable name
//	n+1.tmp, any part of its bytes     crash while preparing it             end of the log; OpenWriter
//	                                                                        removes the .tmp file and
//	                                                                        logs it
//	full size, valid header, zeros     prepared ahead, never written        end of the log; the segment
//	                                   (the state after every switch)       is kept as it is
//	valid header, records, then a      crash while the flusher wrote it     end at the first bad record;
//	torn or zero tail                                                       OpenWriter zeroes the tail
//
// and never in these, which the Reader reports as ErrCorrupt naming the
// file and offset:
//
//	full size, header not valid (all   zeroed, overwritten or replaced      ErrCorrupt at offset 0, with
//	zeros, bad CRC, another segment    after the log made it; what it held  the way on: remove the file
//	or size)                           is unknown, acknowledged commits     and every later segment file
//	                                   among it unless only prepared        (the log then ends at n)
//	shorter or longer than the         cut or appended to                   ErrCorrupt naming its size
//	segment size
//	n+1 absent or damaged, a later     n+1 lost after the log moved on      ErrCorrupt naming n+1
//	file of the log present (a .tmp    into it
//	one, its header cut short or
//	giving the segment size, or one
//	of the segment size, its header
//	valid or not)
//
// The first state is why the newest segment removed, with no later file,
// reads as the end of the log: it is what a crash leaves after a switch
// whose next segment was late, and nothing on disk tells the two apart.
// Recovery in the engine still refuses it when the control file's
// checkpoint record lay in the lost segment (the log ends before the
// checkpoint it names, as PostgreSQL's "could not locate a valid
// checkpoint record"). Rejected for now: making the flusher create n+1
// before it writes n's switch record, and mark the switch record so, would
// make a missing n+1 after a marked switch damage; but a segment ending in
// a remainder too small for a record carries no switch record to mark, and
// a log refused that way has no way on short of a tool that makes an empty
// segment, which the project does not have.
//
// A temporary file is never part of the log, whatever its size (cut
// short by a crash, or written with another segment size): OpenWriter
// removes every one it finds, with an info line naming it and its size,
// and each preparation writes its temporary file anew and renames it only
// once it has the segment size, so no file under a segment's name has
// another size unless something other than the Writer made it so. The
// segment the log ends in, found longer than the segment size, is refused
// by OpenWriter (ErrCorrupt naming it and its size) rather than appended
// to; the Reader reads the records in it without judging its size, so
// waldump and the engine's consistency check do not report it. One found
// shorter, whose log ends at zeros before the cut, is zero-filled to the
// segment size.
//
// These end checks hold for a log at rest. A log that a live writer goes on
// appending to moves under its reader: a chunk read before the writer got
// there holds zeros, then a later record or a newly prepared segment
// carries a mark past them, which would read as records lost after they
// were durable. A reader of a live log (the engine's consistency check) is
// given the writer's flushed LSN taken before it began (Reader.SetStop):
// it reads to there, requires the log up to there whole, and looks at
// nothing past it.
//
// # Crash contract
//
// When Flush(upTo) returns nil, every record ending at or below upTo is on
// stable storage, and so is every record before it in the log: the flusher
// writes in LSN order and fdatasyncs each segment before writing the next
// (the old segment is synced before a commit in the new one is
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
// # Locks
//
// The Writer's locks and roles, in the order they are taken:
//
//   - The flusher role (serial, none) or the writer role (pipelined),
//     held through a round's writes and syncs, and so through a switch
//     into the next segment.
//   - The segment lock, held by whatever creates, renames or removes a
//     segment file while the Writer runs: the background preparation
//     through the whole creation of the next segment (its temporary file,
//     the fsync, the rename and the directory fsync), a switch (in the
//     role above) while it finds the next segment ready or creates it
//     inline and opens it, and RemoveSegmentsBefore through each removal
//     and its directory fsync. Each decides under it, from the segment
//     the flusher has open, which file it may touch: the preparation only
//     a segment after the open one, a removal only one before it. The
//     open segment only moves forward, by a switch, which takes the lock
//     first; so a checkpoint's removal never meets a segment being
//     prepared or renamed into place, whatever the timing, and no
//     prepared segment is removed. No other lock of the Writer is taken
//     while the segment lock is held.
//   - The insertion lock (Insert) and the lock of the flushers' shared
//     state are never held together, nor while waiting for the segment
//     lock. Under the second only the statistics' own lock is taken;
//     under the first only Options.OnSegmentSwitch runs, which must not
//     call the Writer.
//
// # Group commit
//
// Insert copies a framed record into memory under one mutex and does no I/O.
// Flush(upTo) returns once a sync that covered upTo has completed; three
// policies decide how concurrent Flush calls share write+sync rounds.
//
// serial follows PostgreSQL's XLogFlush: whoever finds its LSN unflushed
// tries to become the single flusher; the others wait for the round in
// progress and re-check, so a waiter is only released by a sync that covered
// its own record (the strictest waiter decides). The flusher
// optionally waits commit_delay for more committers (only when at least
// commit_siblings other transactions are active), then writes everything
// inserted so far, not just its own record. One sync at a time means a
// commit arriving during a sync waits for it and then for its own: on a
// rotating disk that is two rotations per commit, so the rate tops out at
// about clients/2 x rotations per second (the 2009 pgsql-hackers thread
// "concurrent commit rate tops out").
//
// pipelined lets the next round start while earlier syncs are outstanding:
// whoever finds its LSN neither durable nor handed to a sync takes the
// writer role (one writer at a time, so writes stay in LSN order), writes
// everything inserted so far, appends a sync request for that end to an
// in-flight queue, gives up the role and fdatasyncs. Syncs retire from the
// queue head in LSN order, and only a retired sync moves the flushed LSN,
// so it never skips a round whose sync has not completed (after a failed
// fdatasync a later success proves nothing). At most PipelineDepth syncs are
// outstanding, and only one when overlapping does not pay. That depends on
// more than the device: an overlapped fdatasync may be neither serialized
// nor parallel (slower than a solo one, yet returning apart from the sync
// ahead of it), and where syncs are fast and cores few, the extra rounds
// can cost the committers more CPU than they save in waiting; no test of
// sync latencies tells these apart reliably. So the flusher runs both ways
// in turn, short trials of the other way between windows of the chosen
// one, and keeps the way that makes more commits durable per busy second.
// Measured: on a model of a disk turning 250 times a second, the pipelined
// flusher so reaches 95 to 100% of the optimum, clients x 250 commits per
// second, at 1 to 48 clients; on a two-core virtual machine's disk,
// overlapped fdatasyncs took 1.25 times a solo one and returned 0.6 of a
// solo sync after the one ahead of them, and latency rules chose wrongly.
// A round crossing into a new segment first
// drains the queue, then syncs the old segment before writing the new one.
// A committer whose record a sync already covers waits on that sync's own
// channel: on a rotating disk every sync issued within one rotation
// completes at the same boundary, and waking every waiter at each of those
// retirements would cost n² wake-ups just when the next round should be
// starting.
//
// none gives every Flush its own round, for comparison.
//
// # commit_delay=auto
//
// A fixed commit_delay is a bet: on a slow disk with many committers, a
// leader that waits gathers a whole group into a sync that takes as long
// anyway (3x at 128 clients in the 2005 pgsql-hackers thread
// "commit_delay = 10 is 3x"); with one committer, or on a platform whose
// shortest sleep is 10 ms, the wait is pure loss (the 2001 thread
// "commit_delay = 0 is never worse"). Options.AdaptiveCommitDelay decides per round, from three things
// the Writer can see:
//
//   - Who could still join. The leader never waits when it is the only
//     active transaction (ActiveTransactions() <= 1), so a lone committer
//     pays nothing: the 2001 case. Otherwise it waits until every other
//     active transaction has a commit Flush in progress whose record no
//     round has taken yet (nobody else can join), which is the moment the
//     round covers everyone.
//   - Whether they are still coming. Transactions that are active but not
//     committing (blocked on a row lock, reading) would hold the leader to
//     its budget every round, so the wait also ends when the insert
//     position has not moved for a quarter of the budget.
//   - What waiting costs. The budget is half the moving average of recent
//     sync latencies: waiting half a sync to nearly double a group is a
//     good trade on a slow disk, and on a fast one the budget is a few
//     microseconds. On a rotating disk a sync issued anywhere inside the
//     rotation completes at the same boundary, so the wait costs nothing.
//
// Delays below a millisecond cannot be a time.Sleep (Go's timers round
// them up to about a millisecond), so every commit delay shorter than that,
// fixed or automatic, is waited by checking the clock between yields
// (runtime.Gosched), which also lets it end the moment the group is
// complete.
//
// Rejected: a dedicated flusher goroutine fed by a channel (pebble's
// LogWriter) adds a goroutine handoff to every commit's latency; the
// committer-led scheme lets a lone committer write and sync directly.
// Writing only up to the leader's own LSN would leave records that arrived
// during its delay for another round, wasting the delay.
package wal
