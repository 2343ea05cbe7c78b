package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"mvkv/clog"
	"mvkv/internal/bufpool"
	"mvkv/internal/heap"
	"mvkv/visibility"
	"mvkv/wal"
)

// Vacuum, the analog of PostgreSQL's vacuumlazy.c.
//
// The horizon. Vacuum first computes OldestXmin, as
// GetOldestNonRemovableTransactionId: the smallest of the next xid, every
// running xid and the xmin of every registered snapshot. A transaction that
// committed below it is visible to every snapshot that exists or will be
// taken, and one whose deletion committed below it is deleted for all of
// them. Snapshots are registered (snapshotRegistry) under the same mutex the
// horizon is computed under, so a snapshot being taken cannot be missed.
//
// Pass 1 reads the heap in block order, each page once, through a small
// ring of buffers (a BufferAccessStrategy of type BAS_VACUUM) so that a heap
// larger than the buffer pool does not evict the working set. Pages the
// visibility map calls all-visible are skipped by a lazy run, all-frozen ones
// by an aggressive run. Each page read is pruned as an update or read would
// prune it (pruneheap.go), under its exclusive lock (PostgreSQL's cleanup
// lock) and in the same one-page record, and besides:
//
//   - out-of-line versions that no snapshot sees go too, and their chunks,
//     which live on other pages, are listed for pass 2 (chunks whose
//     inserter aborted are freed where they lie, by this prune as by any,
//     so those of an aborted version may be gone when pass 2 comes);
//   - committed xmins below the freeze cutoff (OldestXmin -
//     vacuum_freeze_min_age) get the Frozen and XminCommitted bits, and
//     aborted xmaxes below it are cleared, so that nothing below the cutoff
//     needs the CLOG any more;
//   - an index head that no snapshot needs (its key deleted below the
//     horizon, or its inserter aborted) is listed for pass 2, since moving
//     or dropping an index entry takes the key's row lock, which is tried
//     only with no page lock held;
//   - the page's free space goes into the free space map, and a page whose
//     every tuple every snapshot sees is marked all-visible (all-frozen if
//     nothing on it needs the CLOG) in the visibility map; a page marked
//     all-visible that is not has its bits cleared, with a warning (a
//     wrong bit, which only an aggressive run reads past).
//
// There is no walk along version chains: a chain's versions are freed page
// by page, each where it lies, which the chain rules (chain.go) allow.
//
// Pass 2 visits, again in block order and through the ring, only the pages
// pass 1 listed work for: index heads whose row lock it gets at once
// (never waiting, so a writer waiting for vacuum cannot deadlock) are
// dropped or moved to the newest committed version and freed; chunks of
// the out-of-line versions pass 1 freed are freed. Those chunks are named
// by nothing once pass 1 has freed their version: its pruning record lists
// them, and they stay in vacuum's debt (chunkdebt.go) until a revisit
// frees them. A run stopped before it is done (its context, a damaged
// page, Close) leaves them there for the next run, or for Close, which
// frees them before its checkpoint (freeChunkDebt); a crash between
// the two passes leaves them in the checkpoint's index file or in the
// records recovery replays, and the next run after Open frees them. So a
// page is read at most twice by a run, and changed at most twice.
//
// Concurrency. Nothing stops transactions or their pruning for the run:
// each page is changed under its own exclusive lock only, as pruning by
// updates and reads changes it, and pass 2 checks under the page lock that
// what pass 1 listed is still there. Runs are serialized with each other
// and with Verify.
//
// RelFrozenXid, the analog of relfrozenxid, is the oldest xid a tuple still
// names after the run; whole CLOG segments below it are truncated. A lazy
// run skips all-visible pages whose tuples may hold older unfrozen xids, so
// it keeps the previous value; an aggressive run (one every
// vacuum_freeze_table_age xids, or VACUUM FREEZE) reads every page not
// all-frozen and advances it.
//
// Rejected: the chain walk earlier versions of mvkv did, key by key from the
// index head down, removing a chain's dead versions and rewriting Prev links
// across pages in one record. It read pages in key order (each page once per
// key on it), needed every page of a chain locked at once, and held off all
// pruning for a whole run; on a heap larger than the pool it evicted the
// working set several times over.
//
// Pseudocode:
//
//	h := oldestXmin(); cutoff := h - freeze_min_age
//	for each block, skipping all-visible (all-frozen) ones:
//	    lock it; prune it, freezing and noting heads and chunks; FSM; VM
//	for each block with listed heads or chunks:
//	    try each head's row lock; move or drop its index entry
//	    lock the page; free those heads and chunks in one record
//	truncate the CLOG below RelFrozenXid; flush the WAL

// VacuumStats describe one run of DB.Vacuum.
type VacuumStats struct {
	// OldestXmin is the horizon: versions whose deletion committed below
	// it were removed.
	OldestXmin uint64
	// FreezeCutoff is the xid below which committed tuples were frozen.
	FreezeCutoff uint64
	// RelFrozenXid is the oldest xid any tuple may still need looked up in
	// the CLOG after this run, as PostgreSQL's relfrozenxid (mvkv has one
	// heap, so it is datfrozenxid too): every tuple with an older xmin is
	// frozen, and no tuple has an older xmax. Not to be confused with
	// visibility.FrozenXid, the xid a frozen tuple counts as having
	// (PostgreSQL's FrozenTransactionId).
	RelFrozenXid uint64
	// PagesScanned and PagesSkipped count heap pages examined by the first
	// pass and skipped by the visibility map (all-visible pages by a lazy
	// run, all-frozen ones by an aggressive run); PagesRevisited the pages
	// the second pass came back to (for keys' newest versions that had to
	// go with their index entries, and for out-of-line value chunks);
	// PagesPruned the pages whose tuples the run freed or froze;
	// PagesCompacted the pages packed by the second pass; PagesAllVisible
	// the pages marked all-visible.
	PagesScanned, PagesSkipped, PagesRevisited, PagesPruned, PagesCompacted, PagesAllVisible uint64
	// PagesRead counts the pages the run read from disk (not found in the
	// buffer pool), RingSwept the buffer frames it took from the pool's
	// clock sweep for them (each evicting a page): at most the ring's
	// size, 32 frames or an eighth of SharedBuffers if that is less,
	// unless ring frames were in use by others when their turn came.
	PagesRead, RingSwept uint64
	// HeadsBusy counts keys whose newest version the run could have
	// removed (the key was deleted, or its newest version's writer
	// aborted) but left because a writer held the key's row lock; the
	// next run tries again.
	HeadsBusy uint64
	// Aggressive says the run read every page not all-frozen, so that
	// RelFrozenXid could advance (see Options.VacuumFreezeTableAge); a
	// non-aggressive run skips all-visible pages and keeps RelFrozenXid.
	Aggressive bool
	// TuplesRemoved counts versions removed (chunks not included),
	// ChunksRemoved out-of-line value chunks, KeysRemoved index entries
	// dropped because every version of the key was removed, TuplesFrozen
	// versions frozen.
	TuplesRemoved, ChunksRemoved, KeysRemoved, TuplesFrozen uint64
	// ChunksFrozen counts out-of-line value chunks frozen: a chunk
	// whose inserter committed before the freeze cutoff is frozen by the
	// pass over the pages, whatever its version's fate.
	ChunksFrozen uint64
	// RecentlyDead counts versions deleted or superseded by a committed
	// transaction that some snapshot may still see; a later run removes
	// them.
	RecentlyDead uint64
	// PagesTruncated counts the empty pages at the end of the heap the
	// run cut off, giving their space back to the file system
	// (PostgreSQL's lazy_truncate_heap; see Options.VacuumTruncate).
	PagesTruncated uint64
	// Duration is the wall time of the run.
	Duration time.Duration
}

// vacuumState serializes vacuum runs and keeps their cumulative counters.
type vacuumState struct {
	// mu is held for a whole run: one vacuum at a time, and none while
	// Verify reads the files or Backup copies them.
	mu runLock

	runs, pagesScanned, pagesSkipped, tuplesRemoved, pagesCompacted, tuplesFrozen atomic.Uint64
	pagesPruned, pagesRead, ringSwept, pagesTruncated, chunksRemoved              atomic.Uint64

	// relFrozenXid is RelFrozenXid of the last run, as the index file kept it,
	// or what an index rebuild found at open.
	relFrozenXid atomic.Uint64

	// debt are the out-of-line chunks no version names any more that
	// vacuum is still to free (chunkdebt.go): listed by a logged pruning
	// record and not yet freed (between a run's passes, or left by a run
	// that stopped), or found by an index rebuild. The index file keeps
	// it across a restart. Its own lock, not mu, which a run holds
	// throughout: Verify and checkpoints read it.
	debt chunkDebt
}

// runLock is a mutex whose waiter can give up: vacuum's lock is held for
// a whole vacuum run, Verify or Backup, minutes on a large heap, and a
// caller's Vacuum or Backup must not wait that long past its context's
// end. It holds one token in a channel of one; the zero value is not
// usable (init).
type runLock struct{ ch chan struct{} }

func (l *runLock) init() { l.ch = make(chan struct{}, 1) }

// Lock waits for the lock as long as it takes.
func (l *runLock) Lock() { l.ch <- struct{}{} }

// lockCtx takes the lock, or returns ctx's error once ctx ends, or
// ErrClosed once closing is closed, whichever comes first; a free lock is
// taken whatever ctx says, as sync.Mutex would take it.
func (l *runLock) lockCtx(ctx context.Context, closing <-chan struct{}) error {
	select {
	case l.ch <- struct{}{}:
		return nil
	default:
	}
	select {
	case l.ch <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-closing:
		return ErrClosed
	}
}

// tryLock takes the lock if it is free, and reports whether it did.
func (l *runLock) tryLock() bool {
	select {
	case l.ch <- struct{}{}:
		return true
	default:
		return false
	}
}

// Unlock releases the lock; it panics if the lock is not held, as
// sync.Mutex's does (a broken invariant of the engine, not an input).
func (l *runLock) Unlock() {
	select {
	case <-l.ch:
	default:
		panic("engine: unlock of an unlocked runLock")
	}
}

// vacuumRingFrames is the size of vacuum's buffer ring: 256 KiB, as
// PostgreSQL's BAS_VACUUM ring was for years (capped at an eighth of the
// pool by NewRing). Small enough that vacuum never displaces the working
// set, large enough that the WAL flush a dirty ring frame needs before
// reuse is usually done already.
const vacuumRingFrames = 32

// snapshotRegistry counts the open snapshots by xmin, so that vacuum's
// horizon includes them (PostgreSQL keeps MyProc->xmin for the same
// purpose).
type snapshotRegistry struct {
	mu sync.Mutex
	// xmins maps a snapshot xmin to the number of open snapshots with it.
	// Guarded by mu.
	xmins map[uint64]int
}

func (r *snapshotRegistry) init() { r.xmins = make(map[uint64]int) }

// take takes a snapshot from p and registers it; the caller must release
// it. Taking it under r.mu means oldestXmin, which holds r.mu too, either
// sees the snapshot or runs before it was taken (and then the snapshot's
// xmin is at least the horizon it computed).
func (r *snapshotRegistry) take(p *procArray) *visibility.Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := p.snapshot()
	r.xmins[s.Xmin]++
	return s
}

// release unregisters a snapshot returned by take.
func (r *snapshotRegistry) release(s *visibility.Snapshot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := r.xmins[s.Xmin]; n > 1 {
		r.xmins[s.Xmin] = n - 1
	} else {
		delete(r.xmins, s.Xmin)
	}
}

// oldestXmin returns the vacuum horizon, as
// GetOldestNonRemovableTransactionId: no running transaction and no open
// snapshot has an xid or xmin below it.
func (db *DB) oldestXmin() uint64 {
	db.snaps.mu.Lock()
	defer db.snaps.mu.Unlock()
	p := db.procs
	p.mu.Lock()
	h := p.nextXid
	for xid := range p.running {
		h = min(h, xid)
	}
	p.mu.Unlock()
	for x := range db.snaps.xmins {
		h = min(h, x)
	}
	return h
}

// Vacuum removes the tuple versions no snapshot can see any more, freezes
// old ones, records the pages' free space and marks all-visible pages in the
// visibility map, reading the heap in block order; at the end it cuts the
// empty pages that end the heap off its files (Options.VacuumTruncate),
// holding writers off for each step of that cut. Runs are serialized, and
// none runs beside Verify or Backup: Vacuum waits for the one in progress
// (autovacuum's included) until it ends, ctx ends or Close begins;
// transactions go on meanwhile, pruning as they go (a key's index head is
// moved only if its row lock is free). Everything it changes is WAL-logged,
// so a crash at any point leaves a consistent database. A nil ctx is
// context.Background().
//
// It returns ErrClosed after Close (or when Close begins while it waits),
// the failure that stopped writes, the context's error (work done so far
// stays done), or ErrCorruption for a page that fails its checks: the
// first such page stops the run, but one met only while freeing the
// out-of-line chunks of versions already removed is passed over, the
// chunks on the other pages freed, and reported at the end.
func (db *DB) Vacuum(ctx context.Context) (VacuumStats, error) {
	return db.vacuum(ctx, false)
}

// errVacuumNotDue is vacuum's answer to autovacuum when the run it found
// due is no longer due once vacuum's lock is held.
var errVacuumNotDue = errors.New("mvkv: autovacuum: no longer due")

// vacuum is Vacuum; with auto set (the autovacuum worker's run) it checks
// again, once it holds vacuum's lock, that the run is still due (the
// dead-tuple count over the threshold, or the frozen horizon too far
// behind), and returns errVacuumNotDue if not, as PostgreSQL's
// table_recheck_autovac: a VACUUM that held the lock while the worker
// waited has paid the count (and, if it was aggressive, advanced the
// frozen horizon), and a second pass over the heap would find nothing to
// do.
func (db *DB) vacuum(ctx context.Context, auto bool) (VacuumStats, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	if db.closed.Load() {
		return VacuumStats{}, ErrClosed
	}
	if err := db.writable(); err != nil {
		return VacuumStats{}, err
	}
	// A run, a Verify or a Backup may hold the lock for minutes: the
	// wait ends with ctx, or with Close, as the run itself would.
	if err := db.vac.mu.lockCtx(ctx, db.closing); err != nil {
		return VacuumStats{}, err
	}
	defer db.vac.mu.Unlock()
	if auto {
		if due, _ := db.autovacuumDue(); !due {
			return VacuumStats{}, errVacuumNotDue
		}
	}
	begin := time.Now()
	v := &vacuumRun{db: db, ctx: ctx, ring: db.pool.NewRing(vacuumRingFrames), work: map[uint32]*pageWork{}}
	// Autovacuum's dead-tuple count before the horizon: what a run that
	// completes pays (autovacuum.go).
	dead := db.av.dead.Load()
	v.st.OldestXmin = db.oldestXmin()
	v.st.FreezeCutoff = v.st.OldestXmin - min(v.st.OldestXmin, uint64(db.freezeMinAge()))
	prevFrozen := db.vac.relFrozenXid.Load()
	v.st.Aggressive = db.opts.VacuumFreezeMinAge == 0 ||
		v.st.OldestXmin-min(v.st.OldestXmin, prevFrozen) >= uint64(db.freezeTableAge())
	err := v.run()
	if err == nil {
		err = v.truncateTail()
	}
	v.st.Duration = time.Since(begin)
	v.st.PagesRead, v.st.RingSwept = v.ring.Reads, v.ring.Swept
	db.vac.runs.Add(1)
	db.vac.tuplesRemoved.Add(v.st.TuplesRemoved)
	db.vac.chunksRemoved.Add(v.st.ChunksRemoved)
	db.vac.tuplesFrozen.Add(v.st.TuplesFrozen)
	db.vac.pagesCompacted.Add(v.st.PagesCompacted)
	db.vac.pagesScanned.Add(v.st.PagesScanned)
	db.vac.pagesSkipped.Add(v.st.PagesSkipped)
	db.vac.pagesPruned.Add(v.st.PagesPruned)
	db.vac.pagesRead.Add(v.st.PagesRead)
	db.vac.ringSwept.Add(v.st.RingSwept)
	db.vac.pagesTruncated.Add(v.st.PagesTruncated)
	if err != nil {
		return v.st, err
	}
	if !v.st.Aggressive {
		// Skipped all-visible pages may hold unfrozen xids older than
		// anything this run read, so the horizon cannot move forward.
		v.st.RelFrozenXid = min(v.st.RelFrozenXid, prevFrozen)
	}
	db.vac.relFrozenXid.Store(v.st.RelFrozenXid)
	// Nothing below RelFrozenXid needs the CLOG any more (every tuple with an
	// older xmin is frozen, every older xmax gone), so whole CLOG segments
	// below it can go, as PostgreSQL's vac_truncate_clog after a vacuum
	// advances datfrozenxid. Only when a segment would actually be
	// removed, so that a vacuum does not log a record for nothing.
	if clogSegment(v.st.RelFrozenXid) > clogSegment(db.clog.OldestXid()) {
		if err := db.truncateCLOG(v.st.RelFrozenXid); err != nil {
			return v.st, err
		}
	}
	// Make the run's records durable before reporting it, as PostgreSQL's
	// VACUUM does by committing: a caller that saw Vacuum return must not
	// find its work undone by a crash.
	if err := db.flushWAL(uint64(db.wal.InsertLSN())); err != nil {
		return v.st, err
	}
	// Any completed run pays autovacuum's count, a manual one too, as
	// PostgreSQL's pgstat_report_vacuum resets n_dead_tup after either;
	// else the next nap after a VACUUM ran another for nothing.
	db.av.noteRemoved(dead)
	db.logger.Debug("vacuum", "oldestXmin", v.st.OldestXmin, "removed", v.st.TuplesRemoved,
		"chunks", v.st.ChunksRemoved, "keys", v.st.KeysRemoved, "frozen", v.st.TuplesFrozen,
		"scanned", v.st.PagesScanned, "skipped", v.st.PagesSkipped, "read", v.st.PagesRead, "took", v.st.Duration)
	return v.st, nil
}

// clogSegment is the number of the CLOG segment file holding xid's status.
func clogSegment(xid uint64) uint64 {
	return xid / (clog.XidsPerPage * clog.PagesPerSegment)
}

// vacuumRun is the state of one Vacuum call. Used by one goroutine.
type vacuumRun struct {
	db   *DB
	ctx  context.Context
	ring *bufpool.Ring
	st   VacuumStats
	// work is what pass 1 left for pass 2, by block.
	work map[uint32]*pageWork
}

// chunkRef is a chunk to free: its slot on the page, and the xmin it must
// have, its value's (appendChunk's proof of ownership): a slot that holds
// a chunk of another xmin took a new tuple after its own chunk was lost
// with a page zero_damaged_pages emptied, and is left alone.
type chunkRef struct {
	slot uint16
	xmin uint64
}

// chunkID is a chunk tuple by its slot and the xmin every chunk of its
// value carries (appendChunk's proof of ownership): a slot freed and taken
// by another value's chunk no longer matches. Vacuum's debt (chunks no
// version names, for the next revisit to free), the chunks a pruning
// record lists, and what Verify and the index rebuild match pointers
// against are all chunkIDs.
type chunkID struct {
	tid  heap.TID
	xmin uint64
}

// listChunks hands cs, chunks in vacuum's debt, to pass 2, on the pages
// that hold them.
func (v *vacuumRun) listChunks(cs []chunkID) {
	for _, c := range cs {
		w := v.pageWork(c.tid.Block)
		w.chunks = append(w.chunks, chunkRef{c.tid.Slot, c.xmin})
	}
}

// pageWork is pass 2's work on one page.
type pageWork struct {
	heads  []headWork
	chunks []chunkRef
	// visibleAfter: pass 1 found every other version on the page visible
	// to all (frozenAfter: and frozen), as of the page LSN lsnAfter; pass
	// 2 sets the map bits once the heads are gone if no record changed
	// the page meanwhile (PostgreSQL's lazy_vacuum_heap_page, which
	// checks the page again instead).
	visibleAfter, frozenAfter bool
	newestXmin                uint64
	lsnAfter                  uint64
}

// headWork is an index head pass 1 found that no snapshot needs.
type headWork struct {
	slot uint16
	// e is the key's index entry pass 1 found naming this version, nil
	// for a version pinned to become a head; key is its key.
	e         *indexEntry
	key       string
	xmin      uint64 // the version's xmin: pass 2 frees the slot only if it still holds this version
	aborted   bool   // its inserter aborted; else its key was deleted below the horizon
	oldestXid uint64 // the oldest xid it names, for RelFrozenXid if it stays
}

func (v *vacuumRun) pageWork(blk uint32) *pageWork {
	w := v.work[blk]
	if w == nil {
		w = &pageWork{}
		v.work[blk] = w
	}
	return w
}

// whileOpen runs fn with closeMu held shared, so Close waits for it but
// not for the whole vacuum.
func (db *DB) whileOpen(fn func() error) error {
	db.closeMu.RLock()
	defer db.closeMu.RUnlock()
	if db.closed.Load() {
		return ErrClosed
	}
	if err := db.writable(); err != nil {
		return err
	}
	return fn()
}

// run is the two passes. Whatever stops it (a damaged page, the context,
// a failed write), the chunks its first pass listed and it did not free
// stay in vacuum's debt for the next run, or Close (chunkdebt.go): a chunk
// enters the debt only once the record that freed the version (or
// directory) naming it is logged, so every chunk there is garbage whether
// or not this run gets to it, and the run that frees it logs that after
// the record that freed its version, so recovery never replays the one
// without the other.
func (v *vacuumRun) run() error {
	db := v.db
	oldest := v.st.OldestXmin
	nblocks := db.pool.NBlocks()
	for blk := uint32(0); blk < nblocks; blk++ {
		if err := v.ctx.Err(); err != nil {
			return err
		}
		repaired := db.zeroedOutPage(blk)
		if repaired {
			if err := db.whileOpen(func() error { return v.repairZeroedPage(blk) }); err != nil {
				return err
			}
		}
		av, af := db.pageAllVisible(blk)
		if av && (af || !v.st.Aggressive) {
			v.st.PagesSkipped++
			continue
		}
		err := db.whileOpen(func() error {
			x, err := v.scanPage(blk, av)
			oldest = min(oldest, x)
			return err
		})
		if err != nil {
			return err
		}
		v.st.PagesScanned++
		if !repaired && db.zeroedOutPage(blk) {
			// Pass 1's read was the page's first since Open, and
			// zero_damaged_pages emptied it: repaired in this run too.
			if err := db.whileOpen(func() error { return v.repairZeroedPage(blk) }); err != nil {
				return err
			}
		}
	}
	v.st.RelFrozenXid = oldest
	// Index heads first: the chunks of an out-of-line head are known to
	// be free only once the head is gone.
	return v.revisitRounds(true, db.whileOpen)
}

// revisitRounds is pass 2: a round over the pages with index heads to
// drop, if heads is set, then the chunk rounds over vacuum's whole debt
// (this run's first pass listed its chunks there), repeated while freeing
// directories (toast.go) adds the chunks they list. Each page is revisited
// inside guard (whileOpen, or a plain call for Close).
//
// A chunk round goes on past a page it finds damaged (ErrCorruption, the
// database still taking writes) and returns that error at its end: the
// page's entries stay in the debt for a later run (the damage repaired,
// or read as an empty page under zero_damaged_pages), and the chunks on
// other pages are freed meanwhile. The debt outlives a restart, and its
// pages may be all-frozen ones the first pass skips, so a run stopped
// there would stop at the same page every time, and the debt's chunks on
// every later page would never be freed.
func (v *vacuumRun) revisitRounds(heads bool, guard func(func() error) error) error {
	rounds := []bool{false, false}
	if heads {
		rounds = []bool{true, false, false}
	}
	var damaged error // the first damaged page a chunk round went past
	for i, heads := range rounds {
		if !heads && (i == 0 || rounds[i-1]) {
			// The debt holds the chunks of the heads just freed too.
			for _, w := range v.work {
				w.chunks = nil
			}
			v.listChunks(v.db.vac.debt.list())
		}
		blocks := make([]uint32, 0, len(v.work))
		for blk, w := range v.work {
			if (heads && len(w.heads) > 0) || (!heads && len(w.chunks) > 0) {
				blocks = append(blocks, blk)
			}
		}
		slices.Sort(blocks)
		for _, blk := range blocks {
			if err := v.ctx.Err(); err != nil {
				return err
			}
			err := guard(func() error { return v.revisit(blk, v.work[blk], heads) })
			if err != nil && !heads && errors.Is(err, ErrCorruption) && v.db.writable() == nil {
				if damaged == nil {
					damaged = err
				}
				continue
			}
			if err != nil {
				return err
			}
			v.st.PagesRevisited++
		}
	}
	return damaged
}

// freeChunkDebt frees the chunks in vacuum's debt, for Close: those a
// run stopped after its first pass (its context, Close, a damaged page) had
// listed, whose versions that pass already removed. The index file would
// carry them to the next Open, but the next run there may be far off, and
// the space is free now. Close calls it with closed set, the background
// workers stopped and vac.mu held (no run in progress, no transaction
// writing), before its checkpoint. Chunks it cannot free stay in the debt.
func (db *DB) freeChunkDebt() error {
	// Close has set closed, which whileOpen refuses; nothing else can
	// tear the files down meanwhile.
	_, err := db.payChunkDebt(context.Background(), func(fn func() error) error {
		if err := db.writable(); err != nil {
			return err
		}
		return fn()
	})
	return err
}

// payChunkDebt is pass 2's chunk rounds alone, over vacuum's debt, each
// page inside guard; it returns how many chunks it freed. Autovacuum calls
// it when the debt is all there is to do (a run stopped by its context, or
// an Open after a crash between a run's passes), Close before its
// checkpoint. The caller holds vac.mu.
func (db *DB) payChunkDebt(ctx context.Context, guard func(func() error) error) (uint64, error) {
	if db.vac.debt.len() == 0 {
		return 0, nil
	}
	v := &vacuumRun{db: db, ctx: ctx, ring: db.pool.NewRing(vacuumRingFrames), work: map[uint32]*pageWork{}}
	err := v.revisitRounds(false, guard)
	db.vac.chunksRemoved.Add(v.st.ChunksRemoved)
	return v.st.ChunksRemoved, err
}

// lockPage pins heap block blk through the run's ring of buffers, then
// takes the checkpoint interlock shared and the page's content lock
// exclusively (placeTuple's order), and returns the buffer with the
// function that undoes the three.
func (v *vacuumRun) lockPage(blk uint32) (*bufpool.Buffer, func(), error) {
	buf, err := v.ring.Get(blk)
	if err != nil {
		return nil, nil, err
	}
	v.db.ckptInterlock.RLock()
	buf.Lock()
	return buf, func() {
		buf.Unlock()
		v.db.ckptInterlock.RUnlock()
		buf.Release()
	}, nil
}

// scanPage is pass 1 on one page: it prunes and freezes the page, lists
// work for pass 2, records its free space and sets its visibility map bits.
// It returns the oldest xid a tuple on it still names (OldestXmin if none).
// mapSaid is whether the visibility map had the page all-visible when the
// run looked before locking it (only vacuum sets bits, and runs are
// serialized, so a page the map did not have then it does not have now).
func (v *vacuumRun) scanPage(blk uint32, mapSaid bool) (uint64, error) {
	db := v.db
	buf, unlock, err := v.lockPage(blk)
	if err != nil {
		return v.st.OldestXmin, err
	}
	defer unlock()
	if heap.IsNew(buf.Page()) {
		return v.st.OldestXmin, nil
	}
	res, err := db.prunePageLocked(buf, pruneByVacuum, v)
	if err != nil {
		return v.st.OldestXmin, err
	}
	if res.allVisible && res.heads > 0 {
		w := v.pageWork(blk)
		w.visibleAfter, w.frozenAfter, w.newestXmin = true, res.allFrozen, res.newestXmin
		w.lsnAfter = heap.PageLSN(buf.Page())
	}
	if res.allVisible && res.heads == 0 {
		// Set the bits unless they are set already; an all-visible page
		// whose tuples this run froze becomes all-frozen.
		av, af := db.pageAllVisible(blk)
		if heap.PageFlags(buf.Page())&heap.PDAllVisible == 0 || !av || (res.allFrozen && !af) {
			if err := db.setPageAllVisible(buf, res.allFrozen, res.newestXmin); err != nil {
				return v.st.OldestXmin, err
			}
			v.st.PagesAllVisible++
		}
	} else {
		av := false
		if mapSaid {
			// Read again under the page lock: a writer may have
			// cleared it since.
			av, _ = db.pageAllVisible(blk)
		}
		if av || heap.PageFlags(buf.Page())&heap.PDAllVisible != 0 {
			// The map or the page says all-visible, and the page holds a
			// version some snapshot may not see: a wrong bit (every change
			// clears the bits under this page lock, and the horizon only
			// moves forward), which would have index-only reads answer
			// from it and lazy runs skip the page. Cleared with a warning,
			// as PostgreSQL's lazy_scan_prune does, and as there without a
			// record of its own (a crash before the page is written back
			// leaves it for the next aggressive run); the page's flag as a
			// hint is, after a full-page image if it is the first change
			// since the redo point, so that a torn write cannot fail the
			// page's checksum.
			if err := db.logFPIForHint(buf); err != nil {
				return v.st.OldestXmin, err
			}
			if _, err := db.vm.Clear(blk, visibility.ValidBits); err != nil {
				return v.st.OldestXmin, err
			}
			clearPDAllVisible(buf.Page())
			buf.MarkDirty()
			db.logger.Warn("vacuum: a page marked all-visible holds versions not visible to all; its bits were cleared",
				"block", blk, "visibility map", av)
		}
	}
	return res.oldestXid, nil
}

// revisit is pass 2 on one page: with heads set, it drops or moves the
// index heads pass 1 listed on it whose row locks are free, and frees them,
// listing their chunks if they were out of line; else it frees the listed
// chunks. One pruning record either way.
func (v *vacuumRun) revisit(blk uint32, w *pageWork, heads bool) error {
	db := v.db
	var owner *txnState // holds the row locks of the heads, if any
	defer func() {
		if owner != nil {
			db.locks.releaseAll(owner)
		}
	}()
	// Row locks and new heads first, with no page lock held: finding the
	// newest committed version below an aborted head reads other pages.
	type move struct {
		e       *indexEntry
		slot    uint16
		xmin    uint64
		newHead heap.TID
	}
	var moves []move
	var todo []headWork
	var chunks []chunkRef
	if heads {
		todo = w.heads
		w.heads = nil
		owner = newTxnState()
	} else {
		chunks = w.chunks
		w.chunks = nil
	}
	// The chunks taken off w stay in vacuum's debt until this page's
	// record frees them (a later run, or Close, tries again if this one
	// fails); the chunks the record's freeing lists elsewhere (an
	// out-of-line head's, a directory's) are staged, and listed only
	// with it.
	var staged []chunkID
	var pinned []heap.TID
	defer func() {
		for _, tid := range pinned {
			db.pins.remove(tid)
		}
	}()
	for _, h := range todo {
		tid := heap.TID{Block: blk, Slot: h.slot}
		// The entry pass 1 found is still the key's if it still names
		// this version: an entry leaves the index only here or, with no
		// head, when a write placed nothing, and a removed one's head
		// never changes again.
		e := h.e
		if e == nil {
			e = db.idx.get([]byte(h.key))
		}
		if e == nil || e.headTID() != tid {
			// A writer moved it on. It stays on the page, below the
			// writer's version, until pruning frees it, and its xids
			// with it.
			v.st.RelFrozenXid = min(v.st.RelFrozenXid, h.oldestXid)
			continue
		}
		if !db.locks.tryAcquire(h.key, owner) || e.headTID() != tid {
			// Left for the next run, and so are its xids.
			v.st.HeadsBusy++
			v.st.RelFrozenXid = min(v.st.RelFrozenXid, h.oldestXid)
			continue
		}
		// The head is at the same slot, but is it the same version?
		// Between the passes a writer may have moved the head on,
		// pruning freed the old one (no longer a head), and a newer
		// version of the key taken its slot and become the head: that
		// one is live and must stay. xids are never reused, so the
		// xmin tells the two apart; it is compared under the page lock
		// below (and latest, for an aborted head, finds such a version
		// as the key's newest committed one).
		newHead := heap.InvalidTID
		if h.aborted {
			cur, found, _, err := db.latest(e, 0, false)
			if err != nil {
				return err
			}
			if found && cur.tid == tid {
				// The aborted version is gone, and its slot holds the
				// key's newest committed version now (pruned, then
				// reused, between the passes): that one stays.
				v.st.RelFrozenXid = min(v.st.RelFrozenXid, h.oldestXid)
				continue
			}
			if found {
				// The version below is not a head yet, and pruning
				// may free it (its key deleted below the horizon)
				// before it becomes one: pinned, it is kept as a head
				// is, and read again to find it still there.
				db.pins.add(cur.tid)
				pinned = append(pinned, cur.tid)
				again, err := db.readVersion(cur.tid, h.key, false)
				if errors.Is(err, errVanished) || (err == nil && again.hdr.Xmin != cur.hdr.Xmin) {
					v.st.HeadsBusy++
					v.st.RelFrozenXid = min(v.st.RelFrozenXid, h.oldestXid)
					continue
				}
				if err != nil {
					return err
				}
				newHead = cur.tid
			}
		}
		moves = append(moves, move{e: e, slot: h.slot, xmin: h.xmin, newHead: newHead})
	}
	if len(moves) == 0 && len(chunks) == 0 {
		return nil
	}
	buf, unlock, err := v.lockPage(blk)
	if !heads && errors.Is(err, bufpool.ErrPastEnd) {
		// A run cut the page off the heap's tail, which it does only to
		// pages holding no tuple: these chunks were lost with it (it was
		// read as empty under zero_damaged_pages), and nothing is left
		// to free.
		for _, c := range chunks {
			db.vac.debt.drop(chunkID{heap.TID{Block: blk, Slot: c.slot}, c.xmin})
		}
		return nil
	}
	if err != nil {
		return err
	}
	defer unlock()
	page := buf.Page()
	lsnBefore := heap.PageLSN(page)
	pp := &prunePage{block: blk}
	// Each slot is checked again under the page lock: a head must still
	// be the version pass 1 saw, by key and xmin (the row lock keeps
	// writers off, and pruning never frees an index head), a chunk still
	// a chunk of the listed xmin (pruning frees the chunks of aborted
	// writes, and a slot it freed may hold another value's chunk since).
	var done []move
	for _, m := range moves {
		raw, err := heap.Tuple(page, m.slot)
		if err != nil {
			continue
		}
		hdr, key, val, err := heap.DecodeTuple(raw)
		if err != nil || string(key) != m.e.key() || hdr.Xmin != m.xmin {
			continue
		}
		if hdr.Infomask&heap.External != 0 {
			ctids, err := chunkTIDs(val)
			if err != nil {
				return db.corrupt(heap.TID{Block: blk, Slot: m.slot}, err)
			}
			for _, c := range ctids {
				staged = append(staged, chunkID{c, hdr.Xmin})
			}
		}
		pp.unused = append(pp.unused, m.slot)
		done = append(done, m)
	}
	var gone []chunkID // listed, and freed by this record or found gone
	for _, c := range chunks {
		s := c.slot
		id := chunkID{heap.TID{Block: blk, Slot: s}, c.xmin}
		gone = append(gone, id)
		raw, err := heap.Tuple(page, s)
		if err == nil && heap.TupleInfomask(raw)&heap.Chunk != 0 && heap.TupleXmin(raw) == c.xmin && !slices.Contains(pp.unused, s) {
			if isDirectory(heap.TupleInfomask(raw)) {
				// A directory of a large value's chunks: they go
				// with it, in a later round of the chunk pass (run).
				_, _, dv, err := heap.DecodeTuple(raw)
				var ctids []heap.TID
				if err == nil {
					ctids, err = parseDirectory(dv, -1)
				}
				if err != nil {
					// Not kept in the debt: it would fail every
					// later run the same way, and only leaks what
					// it lists.
					db.vac.debt.drop(id)
					return db.corrupt(id.tid, err)
				}
				for _, dc := range ctids {
					staged = append(staged, chunkID{dc, c.xmin})
				}
			}
			pp.unused = append(pp.unused, s)
		}
	}
	if len(pp.unused) == 0 {
		// Nothing listed is here any more.
		for _, c := range gone {
			db.vac.debt.drop(c)
		}
		return nil
	}
	slices.Sort(pp.unused)
	// The index changes first: the index file and the WAL after it must
	// hold every change to a key's head (indexfile.go). Logged before the
	// page's record, a crash between the two leaves the index naming the
	// version below (committed) or no version (the key was deleted below
	// the horizon): either is right with the old head still on the page.
	// One record carries the page's changes (a slot each at most, far
	// below maxHeadChanges): a record a key was a fifth of the WAL a
	// vacuum after a mass delete wrote.
	changes := make([]headChange, len(done))
	for i, m := range done {
		changes[i] = headChange{key: []byte(m.e.key()), head: m.newHead}
	}
	if err := db.logHeadChanges(changes); err != nil {
		return err
	}
	if err := db.logPrunePage(buf, pp, 0, "vacuum of", staged); err != nil {
		return err
	}
	for _, c := range gone {
		db.vac.debt.drop(c)
	}
	v.st.ChunksRemoved += uint64(len(pp.unused) - len(done))
	v.listChunks(staged)
	// Still under the page lock: a reader that finds a removed head's
	// slot empty restarts and must find the new head.
	for _, m := range done {
		m.e.head.Store(m.newHead.Pack())
	}
	for _, m := range done {
		if !m.newHead.Valid() {
			db.idx.removeEntry(m.e)
			v.st.KeysRemoved++
		}
	}
	v.st.TuplesRemoved += uint64(len(done))
	v.st.PagesCompacted++
	db.recordFreeSpace(blk, heap.FreeSpace(page))
	// Every head gone and the page as pass 1 left it but for them (its
	// LSN then was lsnAfter, and only this prune's record came since: a
	// version placed or marked by a writer would have logged one first):
	// all-visible now, as pass 1 would have found it. The horizon only
	// moves forward, so what was visible to all still is.
	if heads && w.visibleAfter && len(done) == len(todo) && lsnBefore == w.lsnAfter {
		if err := db.setPageAllVisible(buf, w.frozenAfter, w.newestXmin); err != nil {
			return err
		}
		v.st.PagesAllVisible++
	}
	return nil
}

// xidState returns the final state of v's xmin (or xmax), from hints or the
// CLOG; both false means in progress. Like xminCommitted it notes in v.hint
// what the CLOG taught.
//
// An xid the CLOG calls in progress that is not in the running table
// crashed: it counts as aborted, as in PostgreSQL's
// HeapTupleSatisfiesVacuum (TransactionIdIsInProgress, then
// TransactionIdDidCommit, else aborted). Recovery marks aborted only the
// unfinished xids it meets in the WAL it replays; one whose records all lay
// before the redo point stays "in progress" in the CLOG for good, and
// without this rule vacuum would keep its versions forever and RelFrozenXid,
// hence CLOG truncation, could never pass it. No hint is set for such an
// xid: the CLOG still says in progress, and a hint contradicting the CLOG
// is what Verify reports as a lost CLOG page. An xid at or above the next
// one is not counted aborted (unfinished): only an xid that was handed out
// can have crashed, and an aborted xid's tuples are freed by pruning and
// vacuum.
func (db *DB) xidState(v *version, xmax bool) (committed, aborted bool, err error) {
	xid, cbit, ibit := v.hdr.Xmin, heap.XminCommitted, heap.XminInvalid
	if xmax {
		xid, cbit, ibit = v.hdr.Xmax, heap.XmaxCommitted, heap.XmaxInvalid
	} else if v.hdr.Infomask&heap.Frozen != 0 {
		return true, false, nil
	}
	switch {
	case v.hdr.Infomask&cbit != 0:
		return true, false, nil
	case v.hdr.Infomask&ibit != 0:
		return false, true, nil
	}
	for look := 0; ; look++ {
		// One lookup gives the status and the group LSN a committed
		// hint must wait for (hintedCommitted's rule).
		st, lsn, err := db.clog.StatusLSN(xid)
		if err != nil {
			return false, false, err
		}
		switch st {
		case clog.StatusCommitted:
			if lsn == 0 || wal.LSN(lsn) <= db.wal.FlushedLSN() {
				v.hint |= cbit
			}
			return true, false, nil
		case clog.StatusAborted:
			v.hint |= ibit
			return false, true, nil
		}
		if look == 1 {
			return false, true, nil
		}
		if db.procs.unfinished(xid) {
			return false, false, nil
		}
		// Not running: it ended since the first look (its status is
		// final now, rule 2) or it crashed. Look again to tell which.
	}
}

// tryAcquire takes key's row lock for me if nobody holds it.
func (lm *lockManager) tryAcquire(key string, me *txnState) bool {
	sh := lm.shard([]byte(key))
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if h := sh.holders[key]; h != nil {
		return h == me
	}
	lm.hold(sh, key, me)
	me.locks = append(me.locks, key)
	return true
}

// chunkTIDs parses an external value pointer (toast.go) into the TIDs it
// names, with the checks detoastPrefix makes: data chunks, or for a value too
// large for a direct pointer its directory chunks, whose data chunks are
// freed when they are (revisit).
func chunkTIDs(ptr []byte) ([]heap.TID, error) {
	p, err := parseToastPointer(ptr)
	return p.tids, err
}

// repairFragmentation compacts buf's page, as PostgreSQL's
// PageRepairFragmentation, with a pruning record whose one page part is
// empty (a full-page image first if the page needs one). placeTuple calls
// it when a tuple fits a page only with its holes, which records that
// freed slots in place (flagPruneNoRepair, no longer written) left; vacuum
// compacts such a page in its own pruning record of it instead. The
// caller holds the page's exclusive lock and ckptInterlock shared.
func (db *DB) repairFragmentation(buf *bufpool.Buffer) error {
	return db.logPrunePage(buf, &prunePage{block: buf.Block()}, 0, "compaction of", nil)
}

// logPrunePage applies p, a pruning record's part for buf's page, and logs
// it as a record of its own with flags (a full-page image first if the page
// needs one): the one-page pruning done under a lock the caller already
// holds, by vacuum's page pass (revisit), by prunePageLocked for a writer
// or reader that prunes a page, and by repairFragmentation. listed are
// the chunks of the
// out-of-line versions (or directories) p frees: the record lists them
// (flagPruneChunks) and they enter vacuum's debt once it is logged
// (chunkdebt.go). what names the change in the corruption error. The
// caller holds the page's exclusive lock and ckptInterlock shared.
func (db *DB) logPrunePage(buf *bufpool.Buffer, p *prunePage, flags uint8, what string, listed []chunkID) error {
	if err := db.logFPIIfNeeded(buf); err != nil {
		return err
	}
	if err := applyPrune(buf.Page(), p, flags); err != nil {
		return db.fail(fmt.Errorf("%w: %s heap block %d: %v", ErrCorruption, what, buf.Block(), err))
	}
	buf.MarkDirty()
	if len(listed) > 0 {
		flags |= flagPruneChunks
	}
	_, end, err := db.wal.InsertFlags(recHeap2Prune, flags, 0, encodePrune([]*prunePage{p}, listed))
	if err != nil {
		return db.fail(err)
	}
	heap.SetPageLSN(buf.Page(), uint64(end))
	db.vac.debt.add(listed)
	return nil
}

// headPins are the versions vacuum's second pass has chosen as the new
// index heads of keys whose head aborted, between finding each (reading
// its page with no lock held after) and installing it. Pruning keeps a
// pinned version as it keeps an index head: without the pin, a version
// deleted by a transaction that passes the horizon meanwhile could be
// freed, and the index would name a free slot. Safe for concurrent use;
// costs pruning one atomic load while nothing is pinned.
type headPins struct {
	n   atomic.Int32
	mu  sync.Mutex
	set map[uint64]int
}

func (p *headPins) add(tid heap.TID) {
	p.mu.Lock()
	if p.set == nil {
		p.set = make(map[uint64]int)
	}
	p.set[tid.Pack()]++
	p.mu.Unlock()
	p.n.Add(1)
}

func (p *headPins) remove(tid heap.TID) {
	p.mu.Lock()
	k := tid.Pack()
	if p.set[k]--; p.set[k] <= 0 {
		delete(p.set, k)
	}
	p.mu.Unlock()
	p.n.Add(-1)
}

func (p *headPins) has(tid heap.TID) bool {
	if p.n.Load() == 0 {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.set[tid.Pack()] > 0
}
