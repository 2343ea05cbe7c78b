// Package engine is mvkv's embedded API and its transaction manager: the
// database handle, transactions with snapshot isolation, row locks, heap
// access, checkpoints and crash recovery, built the way PostgreSQL builds
// them.
//
// # Basics
//
//	db, err := engine.Open("/path/to/data", engine.Options{})
//	...
//	defer db.Close()
//	err = db.Update(ctx, func(tx *engine.Txn) error {
//		return tx.Put([]byte("k"), []byte("v"))
//	})
//	...
//	var v []byte
//	err = db.View(ctx, func(tx *engine.Txn) (err error) {
//		v, err = tx.Get([]byte("k")) // ErrNotFound if there is none
//		return err
//	})
//
// Open creates or recovers a data directory: a control file naming the last
// checkpoint, the WAL segments, the heap, visibility map and CLOG files, and
// the key index as of the last checkpoint. A first Open that fails removes
// what it created, leaving a missing directory missing and an empty one
// empty.
// Begin starts a transaction at READ COMMITTED or REPEATABLE READ; Get, Put,
// Delete, Scan, Update and DeleteRange work inside it (GetPrefix,
// ScanPrefix, UpdatePrefix and DeleteRangePrefix read of a large value
// only the chunks holding its first bytes); Exists, ScanKeys and Count are
// key-only reads that answer from the visibility map where a page is
// all-visible; Commit makes it durable and visible.
// DB.Update and DB.View wrap a function in a REPEATABLE READ transaction
// and retry serialization failures and deadlocks, after a short randomized
// pause that grows with each retry.
//
// # How a write works
//
// Every key has a chain of tuple versions in the heap, newest first: each
// tuple carries xmin (the xid that created it), xmax (the xid that deleted
// or replaced it) and the TID of the version before it. The in-memory index
// (google/btree) maps a key to the newest version; each checkpoint writes
// it to the index file, and Open loads that and applies the key changes
// the WAL holds since, so that opening does not read the heap (it is
// rebuilt from the heap when the file is missing, damaged, of another
// checkpoint or database, or names versions of WAL records the log no
// longer reaches). A version whose creator committed before
// every open snapshot is where every reader stops, so the versions below
// it may be freed page by page wherever they lie; a link that leads to a
// freed or reused slot is recognized as such and ends the walk.
//
// A writer takes the key's row lock, and then finds the newest version whose
// creator committed. Under REPEATABLE READ, if that version's creator (or
// deleter) is not in the transaction's snapshot, the write fails with
// ErrSerializationFailure: first updater wins. Otherwise the writer gets an
// xid if it has none yet (64-bit, never wrapping), stamps xmax on that
// version and places the new version on a heap page, logging both in one
// WAL record. A write that places nothing (a delete of a missing key) keeps
// the row lock but gets no xid, so a transaction of such writes commits as a
// read-only one: no commit record, and no wait for a flush unless
// asynchronous commits before it are not yet durable (a synchronous commit
// that is acknowledged leaves every commit before it durable).
//
// A lock held by another transaction is waited for until that transaction
// ends; deadlocks are detected when the wait would close a cycle.
//
// # Commit
//
// With Options.EarlyLockRelease off, PostgreSQL's order:
//
//	insert COMMIT record            (WAL buffer)
//	wait until WAL durable past it  (synchronous_commit=on; group commit)
//	CLOG: xid committed
//	leave the running table         (now visible to new snapshots)
//	release row locks               (now writable by others)
//
// Nothing is visible to other transactions, and Commit does not return,
// before the commit record is durable. A row that every transaction
// updates then gets one commit per WAL flush, however many wait for it.
//
// With early lock release on (the default), a synchronous commit:
//
//	insert COMMIT record            (WAL buffer)
//	CLOG: xid committed, group LSN = the record's end
//	leave the running table         (now visible to new snapshots)
//	release row locks               (now writable by others)
//	wait until WAL durable past it  (Commit returns)
//
// and every transaction, read-only ones included, records the highest
// commit LSN it could have observed: the end of the newest commit released
// this way, read after each snapshot is taken and after each row lock is
// granted. Before Commit returns nil (and DB.View, and CommitWait.Wait) it
// waits until the WAL is durable past that LSN; when the WAL is already
// flushed there this costs two atomic loads. A writer's own commit record
// lies after every commit it observed, so its own flush covers them: the
// transactions of a hot row each find the lock free at once and share
// flushes. This is Aether's early lock release (VLDB 2010) made safe for
// readers by controlled lock violation (Graefe et al., SIGMOD 2013).
//
// In both orders no caller is told of a commit before its record is
// durable, and no transaction that saw or overwrote a synchronous commit
// reports success before that commit is durable, so a crash can lose only
// commits no caller was told of, directly or through what it read. The
// promise covers what a transaction read once its Commit returned nil: a
// value returned by Get inside a transaction that is then rolled back (or
// whose Commit failed) carries none (Txn.WaitObserved gives it one). An
// ErrSerializationFailure tells of a commit too (another transaction
// changed the key): DB.Update returns one it gives up on only once that
// commit is durable, and a caller that reports one from its own Txn calls
// WaitObserved first. If the
// flush fails, the commit, every transaction that waits for it and every
// later one that could see it fail with ErrWALSyncFailed, and reopening
// recovers to the last durable state. The CLOG is set with the record's
// end as its group LSN, as for an asynchronous commit, so neither a hint
// bit nor the CLOG page can reach disk before the record is durable.
//
// Rejected: tracking the exact commits each transaction read (per tuple
// xmin, as controlled lock violation describes it per lock). The single
// global LSN over-approximates (a reader waits for the newest early commit
// of its snapshot, read or not) but costs one load per snapshot, and the
// flush it waits for is already under way.
//
// With synchronous_commit=off, Commit returns before the flush and the WAL
// writer makes it durable shortly after; such a commit is visible at once
// and raises nothing, so readers of it never wait, as in PostgreSQL.
//
// # Vacuum
//
// Old versions are removed page by page, as PostgreSQL's heap_page_prune_opt
// and lazy vacuum do: a writer that finds its page full, or a reader that
// visits a full page on which several versions may have died since it
// was last pruned, frees every version on the page that no snapshot can see,
// whatever its key, and compacts the page, in one WAL record, never
// waiting for a lock to do so. DB.Vacuum (or the autovacuum worker, on by
// default) reads the heap in block order through a small ring of buffers,
// prunes and freezes each page, drops the index entries of deleted keys,
// frees out-of-line values, records free space for inserts and marks
// all-visible pages in the visibility map, and at its end cuts the empty
// pages that end the heap off its files (lazy_truncate_heap; see
// Options.VacuumTruncate). Options.FillFactor keeps room on each page for
// the updates of its keys. Readers set hint bits on tuples
// whose transaction status is final, so later readers skip the CLOG.
//
// # Bulk load
//
// DB.BulkLoad loads sorted keys into an empty database as one transaction,
// the way PostgreSQL's COPY FREEZE loads a new table at wal_level=minimal:
// heap pages built outside the buffer pool with frozen tuples, written
// straight to the heap files and fsynced before one commit record
// (BULK_LOAD) that names their block range, with a begin record before
// them so that recovery can cut off the pages of a load that never
// committed. Every other write, commit and checkpoint waits for it; reads
// go on. The visibility map marks the pages all-visible and all-frozen
// when no older snapshot is open at the commit. A crash leaves all of the
// load or none: recovery cuts the heap back to the first block of a load
// whose commit record is missing.
//
// # Backup
//
// DB.Backup copies a running database into a new directory, as
// PostgreSQL's base backup: a checkpoint, every heap, map and CLOG page
// copied from the buffers under its lock at some moment after it, then the
// WAL from the checkpoint's redo point, flushed past every page copied.
// Opening the copy is crash recovery, which replays that WAL over the
// pages (the first change to each after the checkpoint is a full-page
// image) and brings them all to one point. Checkpoints and vacuum wait
// for the copy; reads and writes go on.
//
// # Lock order
//
// Locks are taken in this order, and only tried (never waited for) against
// it:
//
//	row lock (a key's, held to transaction end; vacuum only tries)
//	vacuum lock (one run at a time; Verify and Backup hold it throughout)
//	bulk load's run lock (held by the load except while its rows runs;
//	    Close takes it to end a load found inside rows)
//	checkpoint lock (one checkpoint at a time; a bulk load, a Backup and
//	    a heap truncation hold it too; a bulk load and a Backup wait for
//	    it until their context ends or Close)
//	checkpoint interlock, shared (writers, from a change to its record,
//	    and commits, from the commit record to the CLOG; pruning, hint
//	    bits, CLOG truncation, vacuum per page);
//	    exclusively by a checkpoint choosing its redo point, a bulk load
//	    and a heap truncation
//	prune lock, shared (pruning and a heap truncation only try it;
//	    Verify holds it exclusively)
//	heap page content locks, in block order
//	visibility map page
//	WAL insertion
//
// One exception: Verify takes the prune lock exclusively before its
// checkpoint, and so waits for the checkpoint lock and takes the
// checkpoint interlock exclusively with it held. This cannot close a
// cycle: the holders of the checkpoint lock that Verify can meet (a
// checkpoint, a bulk load) never take the prune lock, and a heap
// truncation, which only tries it, runs under the vacuum lock Verify
// holds.
//
// Beside them, every operation holds the close lock shared while it uses
// the files, and Close holds it exclusively; it is never held across a
// row-lock wait or the caller's code (Txn.Update's function, BulkLoad's
// rows, StatTuple's class), which may take it again. Two waits happen with
// it held, for what a bulk load holds: DB.Checkpoint, Verify (which reads
// the index file under the checkpoint lock) and a vacuum's truncation step
// wait for the checkpoint lock, and a write that found no bulk load under
// way, then met one that began meanwhile, waits for the checkpoint
// interlock. A load holds both while its rows function, the caller's code,
// runs, and a Backup holds the checkpoint lock for its whole copy. So
// Close ends bulk loads (their run locks) and tells Backups to stop before
// it takes the close lock: else it would wait behind those holders for the
// load or the copy, and new shared holders (rows reading the database)
// behind it. A bulk load's own checkpoint after its commit comes once its
// run lock is released, as a DB.Checkpoint: under the run lock, Close
// would wait for it, and it may wait for the checkpoint lock of another
// load whose rows waits for Close.
//
// The index's and the running table's mutexes, the CLOG's bank locks,
// vacuum's debt of chunks, the free space map, the row lock table's
// shards and its deadlock checker, the list of bulk loads Close stops
// and the snapshot registry are leaves: held briefly, never across a
// wait for any lock above (the snapshot registry's mutex is taken before the
// running table's, never after; a row lock shard's mutex before the
// deadlock checker's, which moves the queued waiters' edges when a key
// changes hands). One exception, as PostgreSQL's
// XidGenLock across ExtendCLOG: handing out the first xid of a CLOG page
// takes that page's bank lock under the running table's mutex, and may
// write out another page (after a WAL flush) to make room, once in 32,704
// xids; so the running table's mutex comes before the bank locks, and
// nothing holding a bank lock takes it. Pruning outside vacuum tries the
// checkpoint interlock, the prune lock and the page lock, and skips the
// page if any of them is taken.
//
// # Out-of-line values
//
// A value too large to share a page (the tuple above 2,032 bytes,
// PostgreSQL's TOAST_TUPLE_THRESHOLD) is cut into data chunks, each a chunk
// tuple of up to a page, written before the version's
// tuple by the same transaction, so that a crash or a rollback in the
// middle leaves chunks no committed version names and never part of a
// value. Every chunk carries its writer's xid, so a chunk whose writer
// aborted (or crashed) is garbage whatever names it, as the aborted
// version is, and the next prune of its page frees it, vacuum's or a
// reader's or writer's: no snapshot reads an aborted version's value, and
// nothing frees or reads a chunk slot without checking that it still holds
// a chunk of the expected xid. So such chunks hold neither space nor
// VacuumStats.RelFrozenXid (and with it the CLOG's truncation) past a
// vacuum run, whether or not the write got as far as placing its version.
// The version's tuple holds a pointer. Up to 130
// chunks of 8,128 bytes (1 MiB) the pointer lists every chunk TID, 6 bytes
// each: the
// format values had when 1 MiB was the limit, still written for them, so
// data directories from before read unchanged and values up to 1 MiB stay
// readable by older code. A larger value's pointer lists directory chunks
// instead, chunk tuples flagged External whose value is the TIDs of up to
// 1,317 data chunks of 7,904 bytes; at 512 MiB that is 52 directories and
// a pointer of 320 bytes (at 1 GiB, 104 and 632), which fits any tuple.
// Those chunks are a little smaller than a page so that the free space
// map, whose top category promises 7,936 free bytes, hands the pages
// vacuum freed of one large value to the next; the 8,128-byte chunks of
// the old format (their size is part of that format) fit only empty
// pages, which the map keeps in a category of their own. A directory
// carries its flag, so whoever
// frees it (vacuum, after the version, or from its debt after a crash)
// knows to free the chunks it lists too, in a second round of vacuum's
// chunk pass, and the index rebuild after a crash counts what a directory
// lists as used. Every count in a pointer or directory is derived from the
// value length (at most MaxValueSize) and checked against the bytes
// present before anything is read or allocated. A read assembles the value
// into one buffer of its length; a write reuses one chunk buffer and
// flushes the WAL every 4 MiB of chunks, so that it never holds a second
// copy of the value in WAL buffers.
//
// Rejected: a pointer listing every chunk (at 512 MiB, 65,000 TIDs, 390
// KB, no longer fit a page); chunk tuples chained to the next chunk (a
// read could not check a chunk count before following disk links, and a
// damaged link would end a value early); a separate chunk index as
// PostgreSQL's toast index (a second access method with its own WAL,
// for a lookup the directory answers in one page read); a new WAL record
// for large values (the chunk inserts are ordinary heap inserts that redo
// already replays and that full-page images cover). Values are stored as
// given: nothing compresses them (PostgreSQL compresses a large value with
// pglz or lz4 before it moves out of line).
//
// # Settings
//
// Every knob of Options but MaxRetries (a bound of DB.Update's and
// DB.View's retry loop, not a setting of the database) is defined once,
// in the table Settings returns,
// after PostgreSQL's guc_tables.c and its pg_settings view: its name
// (PostgreSQL's where PostgreSQL has the knob), type, unit, range, default,
// parser, formatter and help text. Options.EnsureDefaults takes the
// defaults from it and Options.Validate the ranges; DB.SetConfig and
// DB.CurrentSetting read and change an open database through it; mvkv's
// command-line flags and help texts, the server's CONFIG GET and SET and
// the benchmark's sweeps of engine knobs are built on it. A knob added
// to the table thus appears everywhere with one default. Enumerated
// settings have typed constants (WALFlusher, CLOGLocking,
// SynchronousCommit, VisibilityMapMode) whose text is the table's.
//
// Options keep one convention: a field's zero value means its default
// (nil for the *bool switches, on). Where the setting's own 0 is a value
// different from the default, Options hold it as a negative stand-in
// (NoCommitSiblings; negative CheckpointTimeout, AutovacuumVacuumThreshold,
// AutovacuumVacuumScaleFactor and freeze ages), which EnsureDefaults keeps, so that it can run twice.
//
// The table lives here rather than in a package of its own because it
// binds each knob to its Options field, its DB setter and its check, and
// Options' own validation must use it: a package below the engine could
// not name Options, and one above it could not be used by Open. Rejected:
// a table beside the commands (in the mvkv program), which let mvkv serve and
// mvkv bench drift apart, with different defaults for the same flag; a
// generic table keyed by field names and filled in by reflection, which
// trades compile-time checks for nothing a reader can see; and typed
// setting values instead of text, which the command line, CONFIG SET and
// PostgreSQL's SET all speak anyway. The one setting the WAL writer
// shares, commit_delay, keeps its bounds in package wal (MaxCommitDelay),
// which the table reads; the wal package's own Options take the adaptive
// delay as a switch of their own, so that CommitDelayAuto has one
// definition, here.
//
// # Caveats
//
// A Txn must be ended with Commit or Rollback: an abandoned transaction keeps
// its row locks forever (one that an error aborted has released them
// already, and its snapshot with them). A Txn is for one goroutine at a
// time. Keys are 1 byte
// to 1 KiB, values up to 1 GiB; values above about 2 KiB are stored out of
// line in chunk tuples (see "Out-of-line values"). An open REPEATABLE READ
// transaction keeps every
// version its snapshot can see from being vacuumed, so a long-lived one makes
// the heap grow, as in PostgreSQL.
package engine
