package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"iter"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"mvkv/clog"
	"mvkv/internal/heap"
	"mvkv/visibility"
	"mvkv/wal"
)

// Bulk load: PostgreSQL's COPY FREEZE into a new relation at
// wal_level=minimal, for an empty database.
//
// The pages are built outside the buffer pool, filled to the fillfactor
// with frozen tuples (xmin the load's xid, hint bits Frozen and
// XminCommitted) and PD_ALL_VISIBLE set, written straight to the heap files
// past their end in runs of bulkChunkPages pages, and fsynced (every
// bulkSyncEvery bytes in the background while the next pages are built,
// so that the disk and the CPU work at once, then the rest before the
// commit). No tuple is logged. The WAL holds three records instead:
//
//	BULK_LOAD_BEGIN  xid, first block       flushed before any page is written
//	(pages written, fsynced)
//	BULK_LOAD        xid, first, pages, keys  the commit record, flushed
//	BULK_VISIBLE     first, pages, bits     once every snapshot sees the load
//
// then a checkpoint writes the index file. Why this is crash safe:
//
//   - Before BULK_LOAD is durable nothing of the load can be seen after a
//     crash. Its pages lie past every block a durable record names (the
//     load excludes every other writer and every checkpoint, below), and
//     recovery, meeting a BULK_LOAD_BEGIN that neither a BULK_LOAD nor an
//     ABORT of its xid follows, cuts the heap files back to the begin
//     record's first block before it reads any page. Its xid, never
//     committed, is marked aborted like any other.
//   - Once BULK_LOAD is durable, the pages it names are durable too
//     (fsynced before it). Redo raises the heap length over them and marks
//     the xid committed; the tuples are frozen, so no other record is
//     needed. The index file of a checkpoint whose redo point lies before
//     the record does not hold the loaded keys, so Open then rebuilds the
//     index from the heap, saying why (the crash came in the seconds
//     between the load's commit and its checkpoint).
//   - A loaded page's LSN is 0, below every redo point, so the first change
//     to it after the load logs a full-page image, as any page's first
//     change after a checkpoint does: a torn write of it is repaired.
//   - A load that fails in the middle (keys out of order, a value too large,
//     the context ended) truncates the heap files back to the first block,
//     fsyncs them, and then logs an ABORT of its xid, so that recovery
//     never cuts off pages that writers add after it. An I/O failure stops
//     the database taking writes instead (ErrIOFailure) and leaves the
//     unfinished load to recovery.
//
// Concurrency. The load holds the checkpoint lock (no checkpoint can write
// a control file naming half-written pages as the heap's length) and the
// checkpoint interlock exclusively (no other transaction changes a page,
// extends the heap or commits meanwhile), from the emptiness check to its
// commit. Readers go on: the loaded keys enter the index only at the
// commit, while the load's xid is still running, so a snapshot taken
// before the commit does not see them (their xmin is in progress for it),
// as for any transaction. A writer that looked a key up during the load
// left an entry without a version in the index; if that key is one of the
// load's, the load fails with ErrBulkLoadNotEmpty before its commit.
//
// The visibility map bits. PostgreSQL's COPY FREEZE sets them at once and
// documents that the rows are then visible to snapshots older than the
// load. Here the bits are set (BULK_VISIBLE) only if, right after the
// commit, no snapshot or transaction older than the load is open: every
// open snapshot then sees the load, and index-only reads (Exists, Count)
// stay right. Otherwise vacuum sets them later, as it does for any page.
//
// The index. The keys arrive in increasing order; their entries are carved
// from pointer-free slabs and inserted into a B-tree of their own on a
// second goroutine while the pages are built and written (a sorted insert
// into google/btree appends to its rightmost leaf), and into a hash map
// sized once for the key count after the last page, while the last fsync
// runs (a map grown key by key spent most of the load's CPU rehashing).
// At the commit the new structures replace the empty index's, together
// with the few entries writers made meanwhile.
//
// Rejected:
//   - Loading through the buffer pool with one WAL record per page (a
//     full-page image each, PostgreSQL's wal_level=replica COPY): it writes
//     every byte twice, and the pool's clock sweep evicts one page per
//     page loaded.
//   - Loading into a database that holds keys: every loaded key would need
//     its row lock (millions of lock-table entries) or a check against a
//     live index under writers, and a load interleaved with updates of the
//     same keys has no single commit point a crash can respect. The empty
//     database is what pgbench -i, a restore and a first import need.
//   - Not freezing (xmin the load's xid, no hints): the first reader of
//     every page would set hint bits, logging a full-page image of each
//     page after the next checkpoint, and a first vacuum would read every
//     page to freeze it again: the heap written three times.

// bulkChunkPages is how many pages a bulk load writes with one call: 1 MiB.
const bulkChunkPages = 128

// bulkSyncEvery is how many bytes a bulk load writes between the fsyncs it
// starts in the background, so that the disk writes while the next pages
// are built, and the fsync before the commit has only the tail left.
const bulkSyncEvery = 64 << 20

// bulkIndexBatch is how many entries go to the index goroutines at once.
const bulkIndexBatch = 4096

// BulkLoadStats describes a finished bulk load.
type BulkLoadStats struct {
	// Keys is the number of keys loaded, Pages the heap pages written
	// (8 KiB each) from block FirstBlock on.
	Keys       uint64
	Pages      uint32
	FirstBlock uint32
	// XID is the transaction id the loaded tuples carry (frozen).
	XID uint64
	// AllVisible says the visibility map marks the loaded pages
	// all-visible and all-frozen; false when a snapshot older than the
	// load was open at its commit (vacuum sets them later).
	AllVisible bool
	// Write is the time spent building and writing the pages (with the
	// index built alongside), Sync the fsync of the heap files, Commit the
	// commit record and the switch to the new index, Checkpoint the
	// checkpoint that writes the index file; Duration is the whole load.
	Write, Sync, Commit, Checkpoint, Duration time.Duration
}

// BulkLoad loads the keys and values rows yields into an empty database as
// one transaction, the way PostgreSQL's COPY FREEZE loads a new table:
// heap pages are built outside the buffer pool at the fillfactor, with
// tuples frozen at load, written straight to the heap files and fsynced,
// with a few WAL records instead of one per row (see the package's
// documentation, "Bulk load"). It returns once the load is committed and
// durable and a checkpoint has written the index file, so that the next
// Open reads no heap page; a crash at any moment leaves either none of
// the load or all of it.
//
// rows must yield keys in strictly increasing byte order (else
// ErrBulkLoadOrder), each 1 byte to MaxKeySize, with values small enough
// to be stored inline: a key and value of at most about 2000 bytes
// together (else ErrTooLarge; larger values go in with Put). The slices
// may be reused by rows once it regains control.
//
// The database must be empty: no key in the index, not even a deleted or
// uncommitted one (else ErrBulkLoadNotEmpty). Meanwhile every other write
// and commit waits, and checkpoints too, until the load ends: a write's
// or commit's wait ends early with its transaction's context (the commit
// then rolls the transaction back), a Backup's with its context or once
// Close begins (ErrClosed). Close ends the load first, and so every other
// wait: the write or commit then goes on, or gets ErrClosed once Close
// has closed the database. rows must not write to the database (the write
// would wait until its context ends, or Close), nor call Checkpoint or
// Verify (they would wait until Close); it may read it. Reads go on and
// see the loaded keys from the commit on. A Close meanwhile, from any
// goroutine, rows's own or one rows waits for included, ends the load
// with ErrClosed, loading nothing: once the row being added is (at most a
// page write), or, when rows is running then, at once: Close ends the
// load itself, without waiting for rows to return, and closes the
// database; rows's next yield returns
// false, and BulkLoad returns ErrClosed when rows returns. If rows panics, the
// load ends as a failed one and the panic continues. A load that fails
// leaves the database as it was, except an I/O failure, which stops it
// taking writes (ErrIOFailure) until it is reopened; its stats are zero.
// If the checkpoint after the commit fails, the load stands and the stats
// describe it, with the checkpoint's error: ErrClosed among them, when a
// Close came between the commit and that checkpoint, which Close does not
// wait for (nonzero stats tell it from a load Close ended). A nil rows gives
// ErrNilFunction. The context is checked once a page, and while the load
// waits for a running checkpoint, Backup or other bulk load to finish
// before it starts: it then fails with an error wrapping the context's,
// having loaded nothing. Its last wait before it starts, for the
// transactions in the middle of a change or commit to leave the checkpoint
// interlock, is not interruptible (a sync.RWMutex); it lasts at most about
// a WAL flush, or a vacuum truncation step.
func (db *DB) BulkLoad(ctx context.Context, rows iter.Seq2[[]byte, []byte]) (BulkLoadStats, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	if rows == nil {
		return BulkLoadStats{}, fmt.Errorf("%w given to DB.BulkLoad", ErrNilFunction)
	}
	begin := time.Now()
	// Not closeMu for the whole load, as other operations hold it: rows
	// is the caller's code, which may read the database, and a Close
	// waiting for closeMu's write side would stop those reads from
	// taking its read side while the load waits for them. The load
	// registers a bulkRun instead, which Close stops before it tears
	// anything down (see bulkRun), and ends with ErrClosed at the next
	// page once Close has begun.
	db.closeMu.RLock()
	if db.closed.Load() {
		db.closeMu.RUnlock()
		return BulkLoadStats{}, ErrClosed
	}
	r := db.startBulkRun()
	db.closeMu.RUnlock()
	if r == nil {
		return BulkLoadStats{}, ErrClosed // Close has begun
	}
	running := true
	defer func() {
		if running { // it never began, or rows panicked
			db.endBulkRun(r)
		}
	}()
	if err := db.writable(); err != nil {
		return BulkLoadStats{}, err
	}
	st, err := db.bulkLoadLocked(ctx, rows, r)
	// The load is over before its checkpoint, which Close then need not
	// wait for: that checkpoint may wait for the checkpoint lock of
	// another load whose rows calls Close, or waits for it. It runs as
	// DB.Checkpoint does instead, under the close lock.
	db.endBulkRun(r)
	running = false
	if err != nil {
		// Nothing was loaded: no stats that would say otherwise.
		return BulkLoadStats{}, err
	}
	// The index file now, rather than at the next checkpoint: a crash
	// before it would make Open rebuild the index from the heap.
	ck := time.Now()
	if err := db.Checkpoint(); err != nil {
		return st, wrapf(err, "bulk load committed, but the checkpoint after it failed")
	}
	st.Checkpoint = time.Since(ck)
	st.Duration = time.Since(begin)
	db.logger.Info("bulk load complete", "keys", st.Keys, "pages", st.Pages, "firstBlock", st.FirstBlock,
		"allVisible", st.AllVisible, "write", st.Write, "sync", st.Sync, "commit", st.Commit,
		"checkpoint", st.Checkpoint, "took", st.Duration)
	return st, nil
}

// bulkRun is a bulk load in progress as Close sees it. rows, the caller's
// code, may call Close, directly or on a goroutine it waits for: Close
// cannot wait for the load to end then, as it waits for Close. So the
// load holds mu while it runs its own code and releases it while rows
// runs; Close takes mu, and so finds the load either ended or inside
// rows, where nothing of the load is in flight but its background fsync
// and index goroutine. It then ends the load itself, as a failed one
// ends (abandon: pages cut off, ABORT logged, locks released), and marks
// it killed, so that the load, once rows yields again or returns, stops
// with ErrClosed and touches nothing more.
//
//	load                          Close (before closeMu)
//	mu held: own code             refuse new loads
//	leave (mu released)           for each run: mu.Lock()
//	  rows (caller's code)  ----->  (inside rows) abandon(), killed
//	enter: killed? ErrClosed      mu.Unlock(); tear down
//	mu held: own code ...
//	ended (mu released)
type bulkRun struct {
	mu sync.Mutex
	// held says the load's goroutine holds mu; only that goroutine
	// reads or writes it.
	held bool
	// Guarded by mu:
	ended   bool   // the load returned, or Close ended it
	killed  bool   // Close ended it: abandon ran
	abandon func() // set by the load while rows may run: ends it as a failed load
}

// enter takes r.mu for the load's own code after rows ran, and reports
// false, without it, when Close ended the load meanwhile.
func (r *bulkRun) enter() bool {
	r.mu.Lock()
	if r.killed {
		r.mu.Unlock()
		return false
	}
	r.held = true
	return true
}

// leave releases r.mu before rows, the caller's code, runs.
func (r *bulkRun) leave() {
	r.held = false
	r.mu.Unlock()
}

// startBulkRun registers a new bulk load, its mu held, or returns nil once
// Close has begun; the caller holds closeMu shared and found the database
// open.
func (db *DB) startBulkRun() *bulkRun {
	db.bulkMu.Lock()
	defer db.bulkMu.Unlock()
	if db.closeHasBegun() {
		return nil
	}
	r := &bulkRun{held: true}
	r.mu.Lock()
	db.bulkRuns = append(db.bulkRuns, r)
	return r
}

// endBulkRun marks r ended and unregisters it.
func (db *DB) endBulkRun(r *bulkRun) {
	if r.held || r.enter() {
		r.ended = true
		r.leave()
	}
	db.bulkMu.Lock()
	for i, x := range db.bulkRuns {
		if x == r {
			db.bulkRuns = append(db.bulkRuns[:i], db.bulkRuns[i+1:]...)
			break
		}
	}
	db.bulkMu.Unlock()
}

// closeHasBegun reports whether Close's first step has run (closeBegun is
// closed); stopBulkRuns closes it under bulkMu.
func (db *DB) closeHasBegun() bool {
	select {
	case <-db.closeBegun:
		return true
	default:
		return false
	}
}

// stopBulkRuns is Close's first step and its part in the protocol of
// bulkRun: it refuses new loads, wakes a load waiting for the checkpoint
// lock, then waits for each running load to end or to be inside rows, and
// ends the latter. It runs before Close takes closeMu, and so before
// closed is set: a write waiting for a load may hold closeMu shared.
func (db *DB) stopBulkRuns() {
	db.bulkMu.Lock()
	if !db.closeHasBegun() {
		close(db.closeBegun)
	}
	runs := slices.Clone(db.bulkRuns)
	db.bulkMu.Unlock()
	for _, r := range runs {
		r.mu.Lock()
		if !r.ended {
			if r.abandon != nil {
				r.abandon()
			}
			r.ended, r.killed = true, true
		}
		r.mu.Unlock()
	}
}

// bulkLoadLocked is BulkLoad up to its commit, under the checkpoint lock
// and the checkpoint interlock. When Close ends the load inside rows
// (r.killed), it returns ErrClosed having touched nothing after rows.
func (db *DB) bulkLoadLocked(ctx context.Context, rows iter.Seq2[[]byte, []byte], r *bulkRun) (st BulkLoadStats, err error) {
	// A checkpoint, a Backup (for its whole copy) or another bulk load
	// may hold the lock for long: the wait ends with ctx or Close.
	if err := db.ckptMu.lockCtx(ctx, db.closeBegun); err != nil {
		if errors.Is(err, ErrClosed) {
			return st, err
		}
		return st, fmt.Errorf("mvkv: bulk load: %w while waiting for a running checkpoint, Backup or bulk load to end; nothing was loaded", err)
	}
	// What the load holds is released by the load, unless Close ended it
	// inside rows, and released it then (abandon). r.killed is read
	// after enter failed, or with mu held (then false).
	defer func() {
		if !r.killed {
			db.ckptMu.Unlock()
		}
	}()
	if t := db.lastTruncate.Load(); t != 0 && t >= db.lastRedo.Load() {
		// A HEAP_TRUNCATE lies past the redo point of the last
		// checkpoint that completed (lastRedo, not redoPtr, which a
		// checkpoint moves before it may fail): redo would replay
		// it before this load's record and cut the load's pages, which
		// go to the same block numbers and no record rebuilds, off the
		// files. A checkpoint first puts it behind the redo point.
		if err := db.checkpointLocked(); err != nil {
			return st, err
		}
	}
	db.ckptInterlock.Lock()
	// Writers, commits and aborts wait on this instead of the interlock
	// (waitBulkLoad), so that their wait ends with their context or Close.
	running := make(chan struct{})
	db.bulkRunning.Store(&running)
	release := func() {
		db.bulkRunning.Store(nil)
		close(running)
		db.ckptInterlock.Unlock()
	}
	defer func() {
		if !r.killed {
			release()
		}
	}()
	if n := db.idx.len(); n > 0 {
		return st, fmt.Errorf("%w: its index holds %d keys", ErrBulkLoadNotEmpty, n)
	}
	txn := newTxnState()
	xid, err := db.procs.assign(txn)
	if err != nil {
		return st, db.fail(err)
	}
	first := db.pool.NBlocks()
	st.XID, st.FirstBlock = xid, first
	_, end, err := db.wal.Insert(recBulkLoadBegin, xid, encodeBulkLoadBegin(first))
	if err == nil {
		err = db.wal.FlushData(end)
	}
	if err != nil {
		// Written or not, the begin record names no page yet: recovery
		// cuts nothing, and the xid counts as aborted.
		db.finish(txn)
		return st, db.fail(err)
	}

	w := time.Now()
	b := newBulkBuilder(db, xid, first)
	finished := false
	defer func() {
		if finished || (!r.held && !r.enter()) {
			return // done, or Close ended the load (abandon)
		}
		// rows panicked: the load ends as a failed one does, its xid out
		// of the running table (else it would hold back vacuum's horizon
		// until a restart), and the panic goes on to the caller.
		b.waitSync()
		b.finishIndex()
		db.abortBulkLoad(txn, first, b.pages > 0)
	}()
	// While rows runs, Close may end the load in its place (bulkRun):
	// as a failed load ends, then releasing what the load holds.
	r.abandon = func() {
		b.waitSync()
		b.finishIndex()
		db.abortBulkLoad(txn, first, b.pages > 0)
		release()
		db.ckptMu.Unlock()
	}
	loadErr := b.run(ctx, rows, r)
	if r.killed {
		finished = true
		return st, ErrClosed
	}
	r.abandon = nil
	finished = true
	if err := b.waitSync(); loadErr == nil {
		loadErr = err
	}
	if loadErr == nil && b.keys == 0 {
		loadErr = errBulkNothing
	}
	// The last fsync runs while the hash map is built.
	var synced chan error
	if loadErr == nil {
		synced = make(chan error, 1)
		go func() { synced <- db.storage.Sync() }()
	}
	idx, built := b.finishIndex()
	st.Write = time.Since(w)
	st.Keys, st.Pages = built, b.pages
	if loadErr != nil {
		if errors.Is(loadErr, errBulkIO) {
			// The unfinished load is left to recovery, which cuts the
			// heap back to first; until then the xid reads as aborted.
			db.finish(txn)
			return st, db.fail(loadErr)
		}
		if err := db.abortBulkLoad(txn, first, b.pages > 0); err != nil {
			return st, err
		}
		if errors.Is(loadErr, errBulkNothing) {
			return st, nil
		}
		return st, loadErr
	}
	s := time.Now()
	if err := <-synced; err != nil {
		db.finish(txn)
		return st, db.fail(err)
	}
	st.Sync = time.Since(s)
	// The loaded blocks were past the heap's end, where a map older than
	// the heap can hold bits that Open's check did not read (as for a
	// page placeTuple starts): cleared before the commit, so that a
	// snapshot older than the load, for which setBulkVisible leaves the
	// bits alone, is not answered from them. A clear is always safe on
	// disk; the bits are set again below when every snapshot sees the
	// load.
	if _, err := db.vm.ClearRange(first, first+b.pages); err != nil {
		if aerr := db.abortBulkLoad(txn, first, true); aerr != nil {
			return st, aerr
		}
		return st, err
	}

	c := time.Now()
	ix := db.idx
	ix.mu.Lock()
	// Writers that looked a key up during the load made entries without
	// a version; they wait for the interlock to place one.
	var live []*indexEntry
	ix.tree.Ascend(func(e *indexEntry) bool { live = append(live, e); return true })
	for _, e := range live {
		if idx.lookupLocked(e.key()) != nil {
			ix.mu.Unlock()
			if err := db.abortBulkLoad(txn, first, true); err != nil {
				return st, err
			}
			return st, fmt.Errorf("%w: key %q was written during the load", ErrBulkLoadNotEmpty, truncKey([]byte(e.key())))
		}
	}
	_, end, err = db.wal.Insert(recBulkLoad, xid, encodeBulkLoad(first, b.pages, built))
	if err == nil {
		err = db.wal.Flush(end)
	}
	if err != nil {
		// The record may be durable or not: recovery decides. The pool
		// does not know the pages, the index does not name them, and
		// the xid stays running, so invisible.
		ix.mu.Unlock()
		return st, db.fail(err)
	}
	db.pool.EnsureBlocks(first + b.pages)
	if err := db.clog.SetStatus(xid, clog.StatusCommitted, uint64(end)); err != nil {
		ix.mu.Unlock()
		return st, db.fail(err)
	}
	for _, e := range live {
		idx.tree.insert(e)
		idx.table.insert(idx.table.hashString(e.key()), e)
	}
	// The loaded keys become visible with the xid leaving the running
	// table, as any commit's (rule 2); the index names them first.
	ix.tree, ix.table = idx.tree, idx.table
	ix.mu.Unlock()
	db.finish(txn)
	db.stats.commits.Add(1)
	for _, f := range b.free {
		db.fsm.record(f.blk, f.free)
	}
	if db.oldestXmin() > xid {
		vis, err := db.setBulkVisible(first, b.pages)
		if err != nil {
			return st, wrapf(err, "bulk load committed, but marking its pages all-visible failed")
		}
		st.AllVisible = vis
	}
	st.Commit = time.Since(c)
	return st, nil
}

var (
	// errBulkIO wraps a write failure of the load's pages.
	errBulkIO = errors.New("writing bulk-loaded pages")
	// errBulkNothing: rows yielded nothing.
	errBulkNothing = errors.New("nothing to load")
)

// abortBulkLoad ends a load that failed before its commit record: the heap
// is cut back to first (if pages were written), durably, then an ABORT of
// the load's xid is logged, so that recovery does not cut the heap again
// once other writers have extended it. Called under the interlock.
func (db *DB) abortBulkLoad(txn *txnState, first uint32, wrote bool) error {
	xid := txn.xid.Load()
	if wrote {
		if err := db.storage.Truncate(first); err != nil {
			// Recovery cuts the pages off instead.
			db.finish(txn)
			return db.fail(err)
		}
	}
	_, end, err := db.wal.Insert(recAbort, xid, timestampPayload(new([8]byte)))
	if err == nil {
		err = db.clog.SetStatus(xid, clog.StatusAborted, uint64(end))
	}
	db.finish(txn)
	db.stats.aborts.Add(1)
	if err != nil {
		return db.fail(err)
	}
	return nil
}

// setBulkVisible sets the visibility map bits of a committed load's pages
// (all-visible and all-frozen): one BULK_VISIBLE record, whose end LSN the
// map pages take, as HEAP2_VISIBLE does for one page. The pages carry
// PD_ALL_VISIBLE already. Called under the interlock held exclusively, so
// no writer has changed a page since the load.
func (db *DB) setBulkVisible(first, pages uint32) (bool, error) {
	if pages == 0 {
		return false, nil
	}
	bits := visibility.AllVisible | visibility.AllFrozen
	var lsn uint64
	if !db.vm.Unlogged() {
		_, end, err := db.wal.Insert(recBulkVisible, 0, encodeBulkVisible(first, pages, bits))
		if err != nil {
			return false, db.fail(err)
		}
		lsn = uint64(end)
	}
	if err := db.setBulkVMBits(first, pages, bits, lsn); err != nil {
		return false, err
	}
	return true, nil
}

// setBulkVMBits sets bits for heap blocks [first, first+pages), moving
// each map page's LSN to lsn. visibility.Map.Set takes a page whose LSN
// is already at lsn to reflect the record, so only the last block of the
// range on each map page is set with lsn; the others are set without
// moving the LSN. A bit that reached disk early would be harmless anyway:
// it vouches for a load whose commit record is durable. Redo uses this
// too: it sets the bits whatever the map page's LSN, which is safe
// because every later clear of a bit is redone whatever the LSN as well.
func (db *DB) setBulkVMBits(first, pages uint32, bits visibility.Bits, lsn uint64) error {
	for blk := first; blk < first+pages; blk++ {
		at := uint64(0)
		if blk == first+pages-1 || visibility.MapBlock(blk+1) != visibility.MapBlock(blk) {
			at = lsn
		}
		if _, err := db.vm.Set(blk, bits, at); err != nil {
			return err
		}
	}
	return nil
}

// bulkFree is a loaded page's free space, for the free space map.
type bulkFree struct {
	blk  uint32
	free int
}

// bulkBuilder builds a load's pages and index entries.
type bulkBuilder struct {
	db      *DB
	xid     uint64
	first   uint32
	reserve int // the fillfactor's room, kept free on every page
	chunk   []byte
	inChunk int    // pages of chunk in use, the last one being filled
	pages   uint32 // pages written or being built
	free    []bulkFree

	// syncing is non-nil while a background fsync runs; it receives its
	// result. unsynced counts the bytes written since the last one began.
	syncing  chan error
	unsynced int

	idx     *index
	arena   entryArena
	batch   []*indexEntry
	batches [][]*indexEntry // every batch, for the hash map
	toTree  chan []*indexEntry
	done    chan struct{}
	started bool
	keys    uint64
}

func newBulkBuilder(db *DB, xid uint64, first uint32) *bulkBuilder {
	return &bulkBuilder{
		db: db, xid: xid, first: first,
		reserve: db.fillReserve(heap.InvalidTID, nil),
		chunk:   make([]byte, bulkChunkPages*heap.PageSize),
		idx:     newIndex(),
	}
}

// startIndex starts the goroutine that fills the new index's tree from
// batches of entries in key order, while the pages are built.
func (b *bulkBuilder) startIndex() {
	b.started = true
	b.toTree = make(chan []*indexEntry, 64)
	b.done = make(chan struct{})
	tree := b.idx.tree
	go func() {
		for es := range b.toTree {
			for _, e := range es {
				tree.insert(e)
			}
		}
		close(b.done)
	}()
}

// sendBatch hands the current batch to the tree goroutine.
func (b *bulkBuilder) sendBatch() {
	b.toTree <- b.batch
	b.batches = append(b.batches, b.batch)
	b.batch = make([]*indexEntry, 0, bulkIndexBatch)
}

// finishIndex builds the hash table, sized once for the keys loaded (a map
// grown key by key spent most of a load's CPU rehashing), while the tree
// goroutine finishes, and returns the new index and its key count.
func (b *bulkBuilder) finishIndex() (*index, uint64) {
	if !b.started {
		return b.idx, 0
	}
	if len(b.batch) > 0 {
		b.sendBatch()
	}
	close(b.toTree)
	table := &b.idx.table
	table.reserve(int(b.keys))
	for _, es := range b.batches {
		for _, e := range es {
			table.insert(table.hashString(e.key()), e)
		}
	}
	b.batches = nil
	<-b.done
	b.started = false
	return b.idx, b.keys
}

// page returns the page being filled.
func (b *bulkBuilder) page() []byte {
	i := b.inChunk - 1
	return b.chunk[i*heap.PageSize : (i+1)*heap.PageSize]
}

// closePage finishes the page being filled: PD_ALL_VISIBLE (its tuples
// are frozen), and its free space noted for the map.
func (b *bulkBuilder) closePage() {
	p := b.page()
	heap.SetPageFlags(p, heap.PageFlags(p)|heap.PDAllVisible)
	if free := heap.FreeSpace(p); free >= fsmMinFree {
		b.free = append(b.free, bulkFree{blk: b.first + b.pages - 1, free: free})
	}
}

// newPage starts a new page, writing the chunk out first when it is full.
func (b *bulkBuilder) newPage() error {
	if b.inChunk > 0 {
		b.closePage()
	}
	if b.inChunk == bulkChunkPages {
		if err := b.writeChunk(); err != nil {
			return err
		}
	}
	if uint64(b.first)+uint64(b.pages)+1 >= noBlock {
		return fmt.Errorf("mvkv: bulk load: the heap would pass %d blocks", uint32(noBlock))
	}
	b.inChunk++
	b.pages++
	heap.InitPage(b.page())
	return nil
}

// writeChunk writes the chunk's pages to the heap files.
func (b *bulkBuilder) writeChunk() error {
	if b.inChunk == 0 {
		return nil
	}
	start := b.first + b.pages - uint32(b.inChunk)
	if err := b.db.storage.WriteBlocks(start, b.chunk[:b.inChunk*heap.PageSize]); err != nil {
		return fmt.Errorf("%w: %w", errBulkIO, err)
	}
	b.unsynced += b.inChunk * heap.PageSize
	b.inChunk = 0
	if b.unsynced >= bulkSyncEvery {
		if b.syncing != nil {
			select {
			case err := <-b.syncing:
				b.syncing = nil
				if err != nil {
					return fmt.Errorf("%w: %w", errBulkIO, err)
				}
			default:
				return nil // the last one is still running
			}
		}
		b.unsynced = 0
		b.syncing = make(chan error, 1)
		go func(done chan<- error) { done <- b.db.storage.Sync() }(b.syncing)
	}
	return nil
}

// waitSync waits for the background fsync, if one runs.
func (b *bulkBuilder) waitSync() error {
	if b.syncing == nil {
		return nil
	}
	err := <-b.syncing
	b.syncing = nil
	if err != nil {
		return fmt.Errorf("%w: %w", errBulkIO, err)
	}
	return nil
}

// run builds and writes the pages of rows, and the index entries. It
// releases r.mu while rows runs (bulkRun), and returns with it held, or
// with r.killed set and nothing touched after Close ended the load.
func (b *bulkBuilder) run(ctx context.Context, rows iter.Seq2[[]byte, []byte], r *bulkRun) (err error) {
	var tup, prev []byte
	hdr := heap.TupleHeader{Xmin: b.xid, Prev: heap.InvalidTID, Infomask: heap.Frozen | heap.XminCommitted}
	r.leave()
	for key, val := range rows {
		if !r.enter() {
			err = ErrClosed
			break
		}
		err = b.add(ctx, hdr, key, val, &tup, &prev)
		r.leave()
		if err != nil {
			break
		}
	}
	if !r.enter() {
		return ErrClosed
	}
	if err != nil {
		return err
	}
	if b.inChunk > 0 {
		b.closePage()
		return b.writeChunk()
	}
	return nil
}

// add adds one row to the load: its tuple on the page being filled (a new
// page when it does not fit, after checking ctx; Close ends the load
// through its bulkRun), its entry to
// the index. tup and prev are run's buffers: the tuple, and the last key.
func (b *bulkBuilder) add(ctx context.Context, hdr heap.TupleHeader, key, val []byte, tup, prev *[]byte) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if b.keys > 0 && bytes.Compare(key, *prev) <= 0 {
		return fmt.Errorf("%w: key %q after %q", ErrBulkLoadOrder, truncKey(key), truncKey(*prev))
	}
	if n := heap.TupleHeaderSize + len(key) + len(val); n > toastThreshold {
		return fmt.Errorf("%w: key %q with a value of %d bytes: a tuple of %d bytes, a bulk load stores tuples of at most %d inline (use Put for larger values)",
			ErrTooLarge, truncKey(key), len(val), n, toastThreshold)
	}
	*tup = heap.AppendTuple((*tup)[:0], hdr, key, val)
	if b.inChunk == 0 || !heap.Fits(b.page(), len(*tup)+b.reserve) {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := b.newPage(); err != nil {
			return err
		}
	}
	slot, aerr := heap.AddTuple(b.page(), *tup)
	if aerr != nil {
		return wrapf(aerr, "bulk load: key %q", truncKey(key))
	}
	if !b.started {
		b.startIndex()
	}
	e := b.arena.new(key, heap.TID{Block: b.first + b.pages - 1, Slot: slot}.Pack(), 0)
	b.batch = append(b.batch, e)
	if len(b.batch) == bulkIndexBatch {
		b.sendBatch()
	}
	b.keys++
	*prev = append((*prev)[:0], key...)
	return nil
}

// bulkScan follows the bulk loads in the WAL during recovery's first pass:
// the first block of each load whose begin record is not followed by its
// commit (BULK_LOAD) or an ABORT of its xid.
type bulkScan struct {
	open map[uint64]uint32 // xid -> first block
}

func (s *bulkScan) note(rec wal.Record) {
	switch rec.Type {
	case recBulkLoadBegin:
		if r, err := decodeBulkLoad(rec.Type, rec.Data); err == nil {
			if s.open == nil {
				s.open = make(map[uint64]uint32)
			}
			s.open[rec.XID] = r.first
		}
	case recBulkLoad, recAbort:
		delete(s.open, rec.XID)
	}
}

// cutUnfinishedBulkLoads removes, before redo, the pages of a bulk load
// the crash interrupted: the heap files are cut back to the first block
// its begin record names, durably, and the buffer pool forgets them.
// Nothing else wrote past that block: the load excluded other writers and
// checkpoints until its end.
func (db *DB) cutUnfinishedBulkLoads(s *bulkScan, ctrl controlData) error {
	if len(s.open) == 0 {
		return nil
	}
	first := uint32(noBlock)
	for _, f := range s.open {
		first = min(first, f)
	}
	if uint64(first) < ctrl.HeapBlocks {
		return fmt.Errorf("%w: an unfinished bulk load names block %d as its first, below the %d blocks of the last checkpoint", ErrCorruption, first, ctrl.HeapBlocks)
	}
	have := db.storage.NBlocks()
	if have <= first {
		return nil
	}
	if err := db.truncateHeap(first); err != nil {
		return err
	}
	db.recovery.BulkLoadCutFrom, db.recovery.BulkLoadCutBlocks = first, have-first
	db.logger.Warn("removed the pages of a bulk load that did not commit",
		"heap", filepath.Join(db.dir, heapDir), "fromBlock", first, "blocks", have-first)
	return nil
}

// redoBulkLoad replays BULK_LOAD_BEGIN (nothing to do: an unfinished load
// was cut off before redo), BULK_LOAD (the heap length over the load's
// pages, which were durable before the record; the xid committed) and
// BULK_VISIBLE (the map bits).
func (db *DB) redoBulkLoad(rec wal.Record) error {
	r, err := decodeBulkLoad(rec.Type, rec.Data)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrCorruption, err)
	}
	switch rec.Type {
	case recBulkLoad:
		if n := db.storage.NBlocks(); n < r.first+r.pages && !db.doomedByTruncate(n, rec.End) {
			return fmt.Errorf("%w: %s has %d blocks; the bulk load committed at %s wrote blocks %d to %d",
				ErrCorruption, filepath.Join(db.dir, heapDir), n, rec.LSN, r.first, r.first+r.pages-1)
		}
		db.pool.EnsureBlocks(r.first + r.pages)
		return db.clog.SetStatus(rec.XID, clog.StatusCommitted, uint64(rec.End))
	case recBulkVisible:
		return db.setBulkVMBits(r.first, r.pages, r.bits, uint64(rec.End))
	}
	return nil
}

// describeBulkLoad renders the payload of a bulk load record.
func describeBulkLoad(rec wal.Record) string {
	r, err := decodeBulkLoad(rec.Type, rec.Data)
	if err != nil {
		return "malformed: " + err.Error()
	}
	switch rec.Type {
	case recBulkLoadBegin:
		return fmt.Sprintf("pages from block %d", r.first)
	case recBulkLoad:
		return fmt.Sprintf("blocks %d to %d (%d pages), %d keys", r.first, r.first+r.pages-1, r.pages, r.keys)
	}
	d := fmt.Sprintf("blocks %d to %d all-visible", r.first, r.first+r.pages-1)
	if r.bits&visibility.AllFrozen != 0 {
		d += " all-frozen"
	}
	return d
}
