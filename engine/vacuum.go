package engine

import (
	"cmp"
	"context"
	"encoding/binary"
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
)

// Vacuum, the analog of PostgreSQL's vacuumlazy.c and pruneheap.c.
//
// The horizon. Vacuum first computes OldestXmin, as
// GetOldestNonRemovableTransactionId: the smallest of the next xid, every
// running xid and the xmin of every registered snapshot. A transaction that
// committed below it is visible to every snapshot that exists or will be
// taken, and one whose deletion committed below it is deleted for all of
// them. Snapshots are registered (snapshotRegistry) under the same mutex the
// horizon is computed under, so a snapshot being taken cannot be missed.
//
// What goes. Versions of a key form a chain from the index's head to older
// versions (docs/DESIGN.md, "Decisions taken in the code"). Vacuum walks
// each chain and removes, as HeapTupleSatisfiesVacuum would call them DEAD:
//
//   - every version older than the newest version whose xmin committed
//     below the horizon: every snapshot stops at that version or earlier;
//   - that version itself if its xmax also committed below the horizon:
//     the key is deleted for every snapshot;
//   - versions whose inserter aborted (or crashed);
//
// and keeps the rest. When nothing is kept the whole key goes, with its
// index entry. Versions newer than a kept one are never removed by the first
// rule, so the chain from the head still reaches every version any snapshot
// can see; the Prev links of kept versions are rewritten to skip removed
// ones. The head (an aborted version, or the last version of a deleted key)
// is removed only while vacuum holds the key's row lock (tried, never waited
// for), so no writer is between reading the head and linking a new version
// to it; the index entry then moves to the newest kept version, or goes.
//
// Crash safety. A removal and the Prev rewrite around it may touch two
// pages, so one pruning record (prune.go) covers every page a step changes,
// taken under all their exclusive locks (in block order, as placeTuple
// locks), with full-page images first (rule 4). Out-of-line chunks of a
// removed version go in later records: between the two a crash leaves
// chunks no version points to, which the index rebuild at open finds and
// hands to the next vacuum (orphans).
//
// Readers. Removed slots become unused at once and may be reused by the
// next insert. A reader that read a TID just before (from the index head, or
// a newer version's Prev) may find the slot empty or holding another key's
// tuple; readVersion checks the key and the walk starts again from the head
// (errVanished). Every version the reader's snapshot can see is still
// reachable from there, so the restart returns the same answer the reader
// would have got, and a tuple of the same key found in a reused slot is a
// newer version whose chain leads to all of them too. PostgreSQL instead
// keeps dead line pointers until index entries are gone; an in-memory index
// with one entry per key makes the key check cheaper than a second pass.
//
// Freezing. The newest all-visible version of a key whose xmin is older
// than the freeze cutoff (OldestXmin - vacuum_freeze_min_age) gets the
// Frozen and XminCommitted bits, and an aborted xmax below the cutoff is
// cleared, in the same pruning record, so nothing below the cutoff needs the
// CLOG any more. VacuumStats.FrozenXid is then the oldest xid a tuple still
// names (the analog of relfrozenxid), which CLOG truncation may use.
//
// Pruning records free slots in place (flagPruneNoRepair): each key's chain
// lies on its own pages, so a batch of a few dozen keys names a few dozen
// pages, and one page of updated keys is named by many batches of a run.
// Compacting it in each of them cost one page compaction per removed
// version; instead the pass over the pages below compacts each page with
// holes once, in a pruning record of its own, as PostgreSQL's vacuum calls
// PageRepairFragmentation once a page.
//
// Then a pass over the pages records their free space in the free space
// map (fsm.go) and marks all-visible every page whose every tuple is
// visible to every snapshot and ends its chain (no Prev), through the
// visibility map. Pages already all-visible are skipped, as PostgreSQL's
// lazy vacuum skips them, except by an aggressive run (one every
// vacuum_freeze_table_age xids, or VACUUM FREEZE), which reads every page
// not all-frozen so that it can freeze and advance FrozenXid.
//
// Pseudocode:
//
//	h := oldestXmin(); cutoff := h - freeze_min_age
//	for each index entry, in key order:
//	    walk the chain, classify each version against h
//	    plan removals, Prev rewrites and freezing; try the row lock if the
//	      whole key goes; add the plan to the batch, writing the batch as
//	      one pruning record when its pages would exceed the budget
//	write the chunks of removed versions (and orphans) free
//	for each page not all-frozen: compact it if it has holes; record
//	  free space; set all-visible

// VacuumStats describe one run of DB.Vacuum.
type VacuumStats struct {
	// OldestXmin is the horizon: versions whose deletion committed below
	// it were removed.
	OldestXmin uint64
	// FreezeCutoff is the xid below which committed tuples were frozen.
	FreezeCutoff uint64
	// FrozenXid is the oldest xid any tuple may still need looked up in
	// the CLOG after this run, as PostgreSQL's relfrozenxid: every tuple
	// with an older xmin is frozen, and no tuple has an older xmax.
	FrozenXid uint64
	// PagesScanned and PagesSkipped count heap pages examined and skipped
	// by the visibility map (all-visible pages by a lazy run, all-frozen
	// ones by an aggressive run); PagesCompacted the pages whose tuples
	// were packed to turn freed storage into free space (once a page, at
	// the end of the run, for the versions the chain pass removed);
	// PagesAllVisible the pages marked all-visible.
	PagesScanned, PagesSkipped, PagesCompacted, PagesAllVisible uint64
	// ChainsRead counts the keys whose version chains the first pass
	// read; ChainsSkipped those it did not need to read, because no one
	// wrote the key since a run found its one version visible to everyone,
	// or because its newest version lies on an all-visible page.
	ChainsRead, ChainsSkipped uint64
	// Aggressive says the run read every page not all-frozen, so that
	// FrozenXid could advance (see Options.VacuumFreezeTableAge); a
	// non-aggressive run skips all-visible pages and keeps FrozenXid.
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
	// Duration is the wall time of the run.
	Duration time.Duration
}

// vacuumState serializes vacuum runs and keeps their cumulative counters.
type vacuumState struct {
	// mu is held for a whole run: one vacuum at a time, so that nothing but
	// the running vacuum frees slots while it plans.
	mu sync.Mutex

	runs, pagesScanned, pagesSkipped, tuplesRemoved, pagesCompacted, tuplesFrozen atomic.Uint64
	chainsRead, chainsSkipped                                                     atomic.Uint64

	// frozenXid is FrozenXid of the last run, or what the index rebuild
	// found at open.
	frozenXid atomic.Uint64

	// orphans are chunks that the index rebuild found no version pointing
	// to (a crash between a pruning record and the one freeing its
	// chunks, or a write that failed between placing the chunks and the
	// tuple). Guarded by mu.
	orphans []heap.TID
}

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
// old ones, compacts pages, records their free space and marks all-visible
// pages in the visibility map (see the comment at the top of vacuum.go).
// Runs are serialized; transactions go on meanwhile (a key's head is
// removed only if its row lock is free). Everything it changes is
// WAL-logged, so a crash at any point leaves a consistent database.
//
// It returns ErrClosed after Close, the failure that stopped writes, the
// context's error (work done so far stays done), or ErrCorruption for a
// chain or page that fails its checks.
func (db *DB) Vacuum(ctx context.Context) (VacuumStats, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	if db.closed.Load() {
		return VacuumStats{}, ErrClosed
	}
	if err := db.writable(); err != nil {
		return VacuumStats{}, err
	}
	db.vac.mu.Lock()
	defer db.vac.mu.Unlock()
	begin := time.Now()
	v := &vacuumRun{db: db, ctx: ctx, budget: db.pruneBudget()}
	v.st.OldestXmin = db.oldestXmin()
	v.st.FreezeCutoff = v.st.OldestXmin - min(v.st.OldestXmin, uint64(db.opts.VacuumFreezeMinAge))
	prevFrozen := db.vac.frozenXid.Load()
	v.st.Aggressive = db.opts.VacuumFreezeMinAge == 0 ||
		v.st.OldestXmin-min(v.st.OldestXmin, prevFrozen) >= uint64(db.opts.VacuumFreezeTableAge)
	v.batch.reset()
	err := v.run()
	v.st.Duration = time.Since(begin)
	db.vac.runs.Add(1)
	db.vac.tuplesRemoved.Add(v.st.TuplesRemoved)
	db.vac.tuplesFrozen.Add(v.st.TuplesFrozen)
	db.vac.pagesCompacted.Add(v.st.PagesCompacted)
	db.vac.pagesScanned.Add(v.st.PagesScanned)
	db.vac.pagesSkipped.Add(v.st.PagesSkipped)
	db.vac.chainsRead.Add(v.st.ChainsRead)
	db.vac.chainsSkipped.Add(v.st.ChainsSkipped)
	if err != nil {
		v.batch.releaseLocks(db)
		return v.st, err
	}
	if !v.st.Aggressive {
		// Skipped all-visible pages may hold unfrozen xids older than
		// anything this run read, so the horizon cannot move forward.
		v.st.FrozenXid = min(v.st.FrozenXid, prevFrozen)
	}
	db.vac.frozenXid.Store(v.st.FrozenXid)
	// Nothing below FrozenXid needs the CLOG any more (every tuple with an
	// older xmin is frozen, every older xmax gone), so whole CLOG segments
	// below it can go, as PostgreSQL's vac_truncate_clog after a vacuum
	// advances datfrozenxid. Only when a segment would actually be
	// removed, so that a vacuum does not log a record for nothing.
	if clogSegment(v.st.FrozenXid) > clogSegment(db.clog.OldestXid()) {
		if err := db.truncateCLOG(v.st.FrozenXid); err != nil {
			return v.st, err
		}
	}
	// Make the run's records durable before reporting it, as PostgreSQL's
	// VACUUM does by committing: a caller that saw Vacuum return must not
	// find its work undone by a crash.
	if err := db.flushWAL(uint64(db.wal.InsertLSN())); err != nil {
		return v.st, err
	}
	db.logger.Debug("vacuum", "oldestXmin", v.st.OldestXmin, "removed", v.st.TuplesRemoved,
		"chunks", v.st.ChunksRemoved, "keys", v.st.KeysRemoved, "frozen", v.st.TuplesFrozen,
		"scanned", v.st.PagesScanned, "skipped", v.st.PagesSkipped, "took", v.st.Duration)
	return v.st, nil
}

// clogSegment is the number of the CLOG segment file holding xid's status.
func clogSegment(xid uint64) uint64 {
	return xid / (clog.XidsPerPage * clog.PagesPerSegment)
}

// pruneBudget is the most pages one pruning record locks and names: a
// quarter of the buffer pool, so that vacuum's pins never starve the
// transactions running beside it.
func (db *DB) pruneBudget() int {
	frames := int(db.opts.SharedBuffers / heap.PageSize)
	return max(2, min(maxPrunePages, frames/4))
}

// vacuumRun is the state of one Vacuum call. Used by one goroutine.
type vacuumRun struct {
	db     *DB
	ctx    context.Context
	budget int
	st     VacuumStats
	batch  pruneBatch
	chunks []heap.TID // chunks of removed versions, freed after the batch naming their version

	// Scratch space reused from key to key: a run reads hundreds of
	// thousands of chains, and a fresh chain, plan and page list for each
	// were a third of all the bytes a bloat run allocated, which the
	// garbage collector then had to chase (docs/BENCHMARKS.md).
	chainBuf  []chainVersion
	removeBuf []bool
	planBuf   chainPlan
	blocksBuf []uint32
}

// open runs fn with closeMu held shared, so Close waits for it but not for
// the whole vacuum.
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

func (v *vacuumRun) run() error {
	db := v.db
	if v.st.Aggressive {
		// Freezing needs every key, clean ones too: walk the whole index.
		// The dirty list stays as it is; the next lazy run finds most of
		// its entries clean.
		const step = 256
		after, all := "", true
		for {
			entries := db.idx.entriesAfter(after, all, step)
			if len(entries) == 0 {
				break
			}
			for _, e := range entries {
				if err := v.ctx.Err(); err != nil {
					return err
				}
				if err := db.whileOpen(func() error { _, err := v.chain(e); return err }); err != nil {
					return err
				}
			}
			after, all = entries[len(entries)-1].key(), false
		}
	} else if err := v.runDirty(); err != nil {
		return err
	}
	if err := db.whileOpen(v.flush); err != nil {
		return err
	}
	v.chunks = append(v.chunks, db.vac.orphans...)
	db.vac.orphans = nil
	if err := v.freeChunks(); err != nil {
		return err
	}
	return v.scanPages()
}

// runDirty is a lazy run's first pass: the keys on the dirty list, in the
// order of their heads' blocks, so that the chains of keys whose versions
// share pages are read together (key order scattered them over the heap).
// Keys not on the list are clean and count as skipped.
func (v *vacuumRun) runDirty() error {
	db := v.db
	list := db.idx.takeDirty()
	v.st.ChainsSkipped += uint64(max(0, db.idx.len()-len(list)))
	// Sort by a snapshot of the heads: a head may move while we sort.
	type headed struct {
		head uint64
		e    *indexEntry
	}
	hs := make([]headed, len(list))
	for i, e := range list {
		hs[i] = headed{e.head.Load(), e}
	}
	slices.SortFunc(hs, func(a, b headed) int { return cmp.Compare(a.head, b.head) })
	for i := range hs {
		list[i] = hs[i].e
	}
	for n, e := range list {
		if err := v.ctx.Err(); err != nil {
			db.idx.returnDirty(list[n:])
			return err
		}
		// From here a write lists e again.
		e.listed.Store(false)
		var relist bool
		err := db.whileOpen(func() error {
			var err error
			relist, err = v.chain(e)
			return err
		})
		if relist || err != nil {
			db.idx.noteDirty(e)
		}
		if err != nil {
			db.idx.returnDirty(list[n+1:])
			return err
		}
	}
	return nil
}

// chainVersion is one version as vacuum sees it.
type chainVersion struct {
	v      version
	chunks []heap.TID // for an External version, its chunks
	// xmin and xmax states: committed, aborted (neither: in progress, or
	// no xmax).
	xminCommitted, xminAborted bool
	xmaxCommitted, xmaxAborted bool
}

// readChain reads the versions of e's key from its head, oldest last.
//
// The slice is v's scratch space, valid until the next call.
func (v *vacuumRun) readChain(e *indexEntry) ([]chainVersion, error) {
	out := v.chainBuf[:0]
	defer func() { v.chainBuf = out[:0] }()
	head := e.headTID()
	for tid := head; tid.Valid(); {
		if len(out) > maxChainLength {
			return nil, fmt.Errorf("%w: version chain from %s does not end", ErrCorruption, head)
		}
		cv, err := v.readVersion(tid, e.key())
		if err != nil {
			if errors.Is(err, errVanished) {
				// Only vacuum frees slots, and it runs alone: a chain
				// that leads nowhere is broken.
				return nil, fmt.Errorf("%w: version chain of key %q: %s holds no version of it", ErrCorruption, truncKey([]byte(e.key())), tid)
			}
			return nil, err
		}
		out = append(out, cv)
		tid = cv.v.hdr.Prev
	}
	return out, nil
}

func (v *vacuumRun) readVersion(tid heap.TID, key string) (chainVersion, error) {
	db := v.db
	cv := chainVersion{}
	var ext bool
	vv, err := db.readVersion(tid, key, false)
	if err != nil {
		return cv, err
	}
	if ext = vv.hdr.Infomask&heap.External != 0; ext {
		if vv, err = db.readVersion(tid, key, true); err != nil {
			return cv, err
		}
		if cv.chunks, err = chunkTIDs(vv.val); err != nil {
			return cv, db.corrupt(tid, err)
		}
		vv.val, vv.have = nil, false
	}
	cv.v = vv
	if cv.xminCommitted, cv.xminAborted, err = db.xidState(&cv.v, false); err != nil {
		return cv, err
	}
	if vv.hdr.Xmax != 0 {
		if cv.xmaxCommitted, cv.xmaxAborted, err = db.xidState(&cv.v, true); err != nil {
			return cv, err
		}
	}
	db.setHintBits(&cv.v)
	return cv, nil
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
// without this rule vacuum would keep its versions forever and FrozenXid,
// hence CLOG truncation, could never pass it. No hint is set for such an
// xid: the CLOG still says in progress, and a hint contradicting the CLOG
// is what Verify reports as a lost CLOG page.
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
		st, err := db.clog.Status(xid)
		if err != nil {
			return false, false, err
		}
		switch st {
		case clog.StatusCommitted:
			committed, err = db.hintedCommitted(v, xid, cbit, ibit)
			return committed, false, err
		case clog.StatusAborted:
			v.hint |= ibit
			return false, true, nil
		}
		if look == 1 {
			return false, true, nil
		}
		if db.procs.isRunning(xid) {
			return false, false, nil
		}
		// Not running: it ended since the first look (its status is
		// final now, rule 2) or it crashed. Look again to tell which.
	}
}

// chainPlan is what vacuum does to one chain.
//
// Each version appears at most once in prev and once in freeze.
type chainPlan struct {
	e        *indexEntry
	head     heap.TID
	moveHead bool     // the head goes; vacuum holds the key's row lock
	newHead  heap.TID // the entry's head afterwards, if moveHead
	remove   []heap.TID
	prev     []plannedPrev
	freeze   []plannedFreeze
	chunks   []heap.TID
}

// plannedPrev gives a kept version its new Prev.
type plannedPrev struct {
	tid, prev heap.TID
}

type plannedFreeze struct {
	tid       heap.TID
	xmax      uint64 // the xmax seen when planning
	clearXmax bool   // xmax is an aborted xid below the cutoff
	// counted says the op freezes a version not frozen before, for
	// VacuumStats.TuplesFrozen; false for a frozen version whose dead
	// xmax is only being cleared.
	counted bool
}

// reset empties p for a new chain, keeping its slices' storage.
func (p *chainPlan) reset(e *indexEntry, head heap.TID) {
	*p = chainPlan{e: e, head: head, newHead: heap.InvalidTID,
		remove: p.remove[:0], prev: p.prev[:0], freeze: p.freeze[:0], chunks: p.chunks[:0]}
}

// blocks appends the distinct blocks p touches to out, in block order.
// Sorting, rather than a look-up per version, keeps it linear-logarithmic
// in the chain's length: one transaction that wrote a key 100,000 times
// leaves a chain that long.
func (p *chainPlan) blocks(out []uint32) []uint32 {
	start := len(out)
	for _, t := range p.remove {
		out = append(out, t.Block)
	}
	for _, f := range p.prev {
		out = append(out, f.tid.Block)
	}
	for _, f := range p.freeze {
		out = append(out, f.tid.Block)
	}
	slices.Sort(out[start:])
	return append(out[:start], slices.Compact(out[start:])...)
}

// chain plans and batches the work on one key. It reports whether the key
// should be examined again by the next lazy run: it is not clean, and not
// on an all-visible page (which vouches that nothing on its chain can
// become removable until a write, which lists it again).
func (v *vacuumRun) chain(e *indexEntry) (relist bool, err error) {
	db := v.db
	head := e.headTID()
	if !head.Valid() {
		// A writer is placing the key's first version, or has just
		// failed to and drops the entry itself before it releases the
		// row lock (Txn.writeLocked): nothing here for vacuum. The
		// writer lists the key when it is done.
		return false, nil
	}
	if !v.st.Aggressive && e.vac.Load() == vacClean {
		// Nothing was written to the key since a run found its one
		// version visible to everyone: nothing to prune. Only an
		// aggressive run freezes it.
		v.st.ChainsSkipped++
		return false, nil
	}
	if av, af := db.pageAllVisible(head.Block); av && (af || !v.st.Aggressive) {
		// An all-visible page holds only versions that end their chains:
		// nothing to prune. Only an aggressive run freezes them, and an
		// all-frozen page needs nothing at all.
		v.st.ChainsSkipped++
		return false, nil
	}
	v.st.ChainsRead++
	for {
		e.vac.Store(vacExamining)
		c, err := v.readChain(e)
		if err != nil {
			e.vac.Store(vacDirty)
			return true, err
		}
		p, partial := v.plan(e, c)
		if p == nil {
			if v.chainClean(c) {
				e.vac.CompareAndSwap(vacExamining, vacClean)
			} else {
				e.vac.CompareAndSwap(vacExamining, vacDirty)
			}
			return e.vac.Load() != vacClean, nil
		}
		e.vac.CompareAndSwap(vacExamining, vacDirty)
		if err := v.add(p); err != nil {
			return true, err
		}
		if !partial {
			// What this run removes leaves at least the newest version,
			// which the next run must see settle.
			return true, nil
		}
		// Only the bottom of a long chain fitted the budget: write it
		// and plan the rest again.
		if err := v.flush(); err != nil {
			return true, err
		}
	}
}

// chainClean reports whether chain c (newest first), which vacuum has
// nothing to do on, is a single version every snapshot sees and that no one
// deleted: one no run can remove anything from until the key is written.
func (v *vacuumRun) chainClean(c []chainVersion) bool {
	if len(c) != 1 {
		return false
	}
	cv := &c[0]
	return cv.xminCommitted && cv.v.hdr.Xmax == 0 && !cv.v.hdr.Prev.Valid() &&
		(cv.v.hdr.Infomask&heap.Frozen != 0 || cv.v.hdr.Xmin < v.st.OldestXmin)
}

// plan decides what to do with chain c of entry e (newest first). It
// returns nil when there is nothing to do, and partial when the plan covers
// only the bottom of the chain because the whole would exceed the page
// budget. The plan is v's scratch space, valid until the next call.
func (v *vacuumRun) plan(e *indexEntry, c []chainVersion) (p *chainPlan, partial bool) {
	h, cutoff := v.st.OldestXmin, v.st.FreezeCutoff
	n := len(c)
	if n == 0 {
		return nil, false
	}
	remove := slices.Grow(v.removeBuf[:0], n)[:n]
	clear(remove)
	v.removeBuf = remove
	k := -1
	for i := range c {
		if c[i].xminCommitted && c[i].v.hdr.Xmin < h {
			k = i
			break
		}
	}
	upper := n
	if k >= 0 {
		upper = k
		for i := k + 1; i < n; i++ {
			remove[i] = true
		}
		if c[k].xmaxCommitted && c[k].v.hdr.Xmax < h {
			remove[k] = true
		} else if c[k].xmaxCommitted {
			v.st.RecentlyDead++
		}
	}
	for i := 0; i < upper; i++ {
		if c[i].xminAborted {
			remove[i] = true
		} else if c[i].xminCommitted && c[i].xmaxCommitted {
			v.st.RecentlyDead++
		}
	}
	// Removing the head moves the index entry, which only a holder of the
	// key's row lock may do.
	moveHead := remove[0] && v.lockKey(e, c[0].v.tid)
	if !moveHead {
		remove[0] = false
	}
	p = &v.planBuf
	p.reset(e, c[0].v.tid)
	p.moveHead = moveHead
	next := heap.InvalidTID // the kept version below the one being looked at
	for i := n - 1; i >= 0; i-- {
		if remove[i] {
			p.remove = append(p.remove, c[i].v.tid)
			p.chunks = append(p.chunks, c[i].chunks...)
			continue
		}
		if c[i].v.hdr.Prev != next {
			p.prev = append(p.prev, plannedPrev{tid: c[i].v.tid, prev: next})
		}
		next = c[i].v.tid
	}
	p.newHead = next // the newest kept version
	if k >= 0 && !remove[k] {
		hdr := c[k].v.hdr
		frozen := hdr.Infomask&heap.Frozen != 0
		// An aborted (or crashed) xmax below the cutoff goes too, also
		// from a version frozen by an earlier run: a rolled-back update
		// or delete of a frozen key leaves one, and until it is cleared
		// FrozenXid cannot pass it.
		clearXmax := c[k].xmaxAborted && hdr.Xmax < cutoff
		if (!frozen && hdr.Xmin < cutoff) || (frozen && clearXmax) {
			p.freeze = append(p.freeze, plannedFreeze{tid: c[k].v.tid, xmax: hdr.Xmax, clearXmax: clearXmax, counted: !frozen})
		}
	}
	if len(p.remove) == 0 && len(p.prev) == 0 && len(p.freeze) == 0 {
		if moveHead {
			v.batch.unlockKey(v.db, e)
		}
		return nil, false
	}
	v.blocksBuf = p.blocks(v.blocksBuf[:0])
	if len(v.blocksBuf) <= v.budget {
		return p, false
	}
	if moveHead {
		// The row lock was taken for a plan that does not fit; the
		// partial plan below keeps the head.
		v.batch.unlockKey(v.db, e)
	}
	// Too many pages at once: remove the longest run of versions at the
	// bottom of the chain that fits, cutting the chain above it. Removing
	// c[j-1..n-1] touches their blocks and the block of c[j-2], whose Prev
	// is cut; the set grows by one version a step, so the search is linear.
	j := n
	blocks := map[uint32]bool{c[n-1].v.tid.Block: true}
	for j-1 >= 1 && remove[j-1] {
		b := c[j-2].v.tid.Block
		if !blocks[b] && len(blocks)+1 > v.budget {
			break
		}
		blocks[b] = true
		j--
	}
	if j == n {
		return nil, false // even one version does not fit: leave the chain
	}
	p.reset(e, c[0].v.tid)
	p.prev = append(p.prev, plannedPrev{tid: c[j-1].v.tid, prev: heap.InvalidTID})
	for i := j; i < n; i++ {
		p.remove = append(p.remove, c[i].v.tid)
		p.chunks = append(p.chunks, c[i].chunks...)
	}
	return p, true
}

// lockKey tries to take e's row lock for the batch, without waiting, and
// checks that head is still the head (a writer may have added a version
// since the chain was read). It reports whether the whole key may go.
func (v *vacuumRun) lockKey(e *indexEntry, head heap.TID) bool {
	b := &v.batch
	if !v.db.locks.tryAcquire(e.key(), b.owner) {
		return false
	}
	if e.headTID() != head {
		v.batch.unlockKey(v.db, e)
		return false
	}
	return true
}

// tryAcquire takes key's row lock for me if nobody holds it.
func (lm *lockManager) tryAcquire(key string, me *txnState) bool {
	sh := lm.shard([]byte(key))
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if h := sh.holders[key]; h != nil {
		return h == me
	}
	sh.holders[key] = me
	me.locks = append(me.locks, key)
	return true
}

// pruneBatch collects chain plans until their pages fill the budget; flush
// writes them as one pruning record.
type pruneBatch struct {
	pages  map[uint32]*prunePage
	freeze map[heap.TID]plannedFreeze
	// heads are the entries whose head the batch removes, with the new
	// head (InvalidTID: the whole key goes). Their row locks are held by
	// owner.
	heads map[*indexEntry]heap.TID
	// owner holds the row locks of those keys. It never waits, so
	// writers waiting for it cannot be part of a deadlock.
	owner                  *txnState
	removed, chunksRemoved int
}

func (b *pruneBatch) reset() {
	b.pages = map[uint32]*prunePage{}
	b.freeze = map[heap.TID]plannedFreeze{}
	b.heads = map[*indexEntry]heap.TID{}
	b.owner = newTxnState()
	b.removed, b.chunksRemoved = 0, 0
}

func (b *pruneBatch) page(blk uint32) *prunePage {
	p := b.pages[blk]
	if p == nil {
		p = &prunePage{block: blk}
		b.pages[blk] = p
	}
	return p
}

// unlockKey gives back one key's row lock taken by lockKey.
func (b *pruneBatch) unlockKey(db *DB, e *indexEntry) {
	sh := db.locks.shard([]byte(e.key()))
	sh.mu.Lock()
	if sh.holders[e.key()] == b.owner {
		delete(sh.holders, e.key())
	}
	sh.mu.Unlock()
	b.owner.locks = slices.DeleteFunc(b.owner.locks, func(k string) bool { return k == e.key() })
}

// releaseLocks ends the batch's hold on row locks, waking waiters.
func (b *pruneBatch) releaseLocks(db *DB) {
	if b.owner == nil {
		return
	}
	db.locks.releaseAll(b.owner)
	close(b.owner.done)
	b.owner = nil
}

// add puts p into the batch, flushing the batch first if p's pages would
// not fit beside it.
func (v *vacuumRun) add(p *chainPlan) error {
	b := &v.batch
	blocks := p.blocks(v.blocksBuf[:0])
	v.blocksBuf = blocks
	n := len(b.pages)
	for _, blk := range blocks {
		if b.pages[blk] == nil {
			n++
		}
	}
	if n > v.budget && len(b.pages) > 0 {
		// The row lock of a moved head travels with its plan into the
		// next batch.
		var moved bool
		if p.moveHead {
			b.unlockKey(v.db, p.e)
			moved = true
		}
		if err := v.flush(); err != nil {
			return err
		}
		if moved && !v.lockKey(p.e, p.head) {
			return nil // a writer came in between: try again next run
		}
	}
	for _, t := range p.remove {
		pp := b.page(t.Block)
		pp.unused = append(pp.unused, t.Slot)
	}
	for _, f := range p.prev {
		pp := b.page(f.tid.Block)
		pp.prev = append(pp.prev, prevFix{slot: f.tid.Slot, prev: f.prev})
	}
	for _, f := range p.freeze {
		pp := b.page(f.tid.Block)
		pp.freeze = append(pp.freeze, freezeOp{slot: f.tid.Slot})
		b.freeze[f.tid] = f
	}
	if p.moveHead {
		b.heads[p.e] = p.newHead
	}
	b.removed += len(p.remove)
	v.chunks = append(v.chunks, p.chunks...)
	return nil
}

// flush writes the batch as one pruning record and starts a new batch.
func (v *vacuumRun) flush() error {
	b := &v.batch
	defer func() {
		b.releaseLocks(v.db)
		b.reset()
	}()
	if len(b.pages) == 0 {
		return nil
	}
	blocks := make([]uint32, 0, len(b.pages))
	for blk, p := range b.pages {
		slices.Sort(p.unused)
		slices.SortFunc(p.prev, func(a, c prevFix) int { return int(a.slot) - int(c.slot) })
		slices.SortFunc(p.freeze, func(a, c freezeOp) int { return int(a.slot) - int(c.slot) })
		blocks = append(blocks, blk)
	}
	slices.Sort(blocks)
	db := v.db
	// The slots are freed in place: a page of updated keys is named by
	// many batches of one run (each key's chain spans its own two pages),
	// and scanPage compacts it once at the end.
	err := db.logPrune(blocks, b.pages, flagPruneNoRepair, func(blk uint32, page []byte, p *prunePage) {
		// Freezing is planned from a read under the shared lock; a
		// writer may have set a new xmax since. Keep it, then.
		for i := range p.freeze {
			f := &p.freeze[i]
			raw, err := heap.Tuple(page, f.slot)
			if err != nil {
				continue // applyPrune reports it
			}
			plan := b.freeze[heap.TID{Block: blk, Slot: f.slot}]
			f.xmax = heap.TupleXmax(raw)
			mask := heap.TupleInfomask(raw) | heap.Frozen | heap.XminCommitted
			if plan.clearXmax && f.xmax == plan.xmax {
				f.xmax = 0
				mask &^= heap.XmaxCommitted | heap.XmaxInvalid | heap.Updated
			}
			f.infomask = mask
		}
	}, func() {
		// Still under the page locks: a reader that finds a removed
		// head's slot empty restarts and must find the new head.
		for e, h := range b.heads {
			e.head.Store(h.Pack())
		}
	})
	if err != nil {
		return err
	}
	for e, h := range b.heads {
		if !h.Valid() {
			db.idx.removeEntry(e)
			v.st.KeysRemoved++
		}
	}
	v.st.TuplesRemoved += uint64(b.removed)
	v.st.ChunksRemoved += uint64(b.chunksRemoved)
	for _, f := range b.freeze {
		if f.counted {
			v.st.TuplesFrozen++
		}
	}
	return nil
}

// logPrune locks the blocks (ascending) exclusively, logs full-page images
// where needed, lets prepare fill in after-images that depend on the page,
// applies the changes, inserts the pruning record with flags, stamps the
// pages and records their free space. locked runs after the changes, with
// the locks still held.
func (db *DB) logPrune(blocks []uint32, pages map[uint32]*prunePage, flags uint8, prepare func(blk uint32, page []byte, p *prunePage), locked func()) error {
	db.ckptInterlock.RLock()
	defer db.ckptInterlock.RUnlock()
	bufs := make([]*bufpool.Buffer, 0, len(blocks))
	defer func() {
		for _, b := range bufs {
			b.Unlock()
			b.Release()
		}
	}()
	for _, blk := range blocks {
		b, err := db.pool.Get(blk)
		if err != nil {
			return err
		}
		b.Lock()
		bufs = append(bufs, b)
	}
	for _, b := range bufs {
		if err := db.logFPIIfNeeded(b); err != nil {
			return err
		}
	}
	list := make([]*prunePage, len(bufs))
	for i, b := range bufs {
		p := pages[b.Block()]
		if prepare != nil {
			prepare(b.Block(), b.Page(), p)
		}
		if err := applyPrune(b.Page(), p, flags); err != nil {
			// Pages before this one are changed without a record: stop
			// taking writes, recovery will redo from the checkpoint.
			return db.fail(fmt.Errorf("%w: vacuum of heap block %d: %v", ErrCorruption, b.Block(), err))
		}
		b.MarkDirty()
		list[i] = p
	}
	_, end, err := db.wal.InsertFlags(recHeap2Prune, flags, 0, encodePrune(list))
	if err != nil {
		return db.fail(err)
	}
	for _, b := range bufs {
		heap.SetPageLSN(b.Page(), uint64(end))
		// Holes count: the insert that needs them compacts the page.
		db.recordFreeSpace(b.Block(), heap.FreeSpace(b.Page())+heap.HoleBytes(b.Page()))
	}
	if locked != nil {
		locked()
	}
	return nil
}

// freeChunks frees the chunks of the versions removed by this run (and the
// orphans found at open), a budget of pages at a time. Nothing points to
// them any more, so no Prev link changes and no lock but the pages' is
// needed.
func (v *vacuumRun) freeChunks() error {
	db := v.db
	byBlock := map[uint32][]uint16{}
	for _, t := range v.chunks {
		byBlock[t.Block] = append(byBlock[t.Block], t.Slot)
	}
	v.chunks = nil
	blocks := make([]uint32, 0, len(byBlock))
	for blk := range byBlock {
		blocks = append(blocks, blk)
	}
	slices.Sort(blocks)
	for len(blocks) > 0 {
		if err := v.ctx.Err(); err != nil {
			return err
		}
		n := min(len(blocks), v.budget)
		part := blocks[:n]
		blocks = blocks[n:]
		pages := map[uint32]*prunePage{}
		var keep []uint32
		err := db.whileOpen(func() error {
			// Only slots that still hold chunks: an orphan list is a
			// snapshot of the heap at open.
			for _, blk := range part {
				slots := byBlock[blk]
				slices.Sort(slots)
				slots = slices.Compact(slots)
				ok, err := db.chunkSlots(blk, slots)
				if err != nil {
					return err
				}
				if len(ok) > 0 {
					pages[blk] = &prunePage{block: blk, unused: ok}
					keep = append(keep, blk)
					v.st.ChunksRemoved += uint64(len(ok))
				}
			}
			if len(keep) == 0 {
				return nil
			}
			return db.logPrune(keep, pages, 0, nil, nil)
		})
		if err != nil {
			return err
		}
		v.st.PagesCompacted += uint64(len(keep))
	}
	return nil
}

// chunkSlots returns those of slots on blk that hold chunk tuples.
func (db *DB) chunkSlots(blk uint32, slots []uint16) ([]uint16, error) {
	buf, err := db.pool.Get(blk)
	if err != nil {
		return nil, err
	}
	defer buf.Release()
	buf.RLock()
	defer buf.RUnlock()
	var out []uint16
	for _, s := range slots {
		raw, err := heap.Tuple(buf.Page(), s)
		if err == nil && heap.TupleInfomask(raw)&heap.Chunk != 0 {
			out = append(out, s)
		}
	}
	return out, nil
}

// chunkTIDs parses an external value pointer (buildTuple) into its chunk
// TIDs, with the checks detoast makes.
func chunkTIDs(ptr []byte) ([]heap.TID, error) {
	if len(ptr) < 8 {
		return nil, fmt.Errorf("external value pointer of %d bytes", len(ptr))
	}
	total := binary.LittleEndian.Uint32(ptr)
	n := binary.LittleEndian.Uint32(ptr[4:])
	if total > MaxValueSize || uint64(n) != (uint64(total)+chunkSize-1)/chunkSize || len(ptr) != 8+6*int(n) {
		return nil, fmt.Errorf("external value pointer: length %d in %d chunks, %d bytes", total, n, len(ptr))
	}
	out := make([]heap.TID, n)
	for i := range out {
		out[i] = readTID(ptr[8+6*i:])
	}
	return out, nil
}

// scanPages is vacuum's pass over the heap pages: free space into the map,
// all-visible pages into the visibility map, and the oldest xid still
// named by a tuple.
func (v *vacuumRun) scanPages() error {
	db := v.db
	oldest := v.st.OldestXmin
	nblocks := db.pool.NBlocks()
	for blk := uint32(0); blk < nblocks; blk++ {
		if err := v.ctx.Err(); err != nil {
			return err
		}
		if av, af := db.pageAllVisible(blk); av && (af || !v.st.Aggressive) {
			v.st.PagesSkipped++
			continue
		}
		err := db.whileOpen(func() error {
			x, err := v.scanPage(blk)
			oldest = min(oldest, x)
			return err
		})
		if err != nil {
			return err
		}
		v.st.PagesScanned++
	}
	v.st.FrozenXid = oldest
	return nil
}

// scanPage examines one page under its exclusive lock and returns the
// oldest xid a tuple on it still names (OldestXmin if none). It holds
// ckptInterlock shared around the page lock, as placeTuple does, so that
// setPageAllVisible can decide on a full-page image and log its record.
func (v *vacuumRun) scanPage(blk uint32) (uint64, error) {
	db := v.db
	h := v.st.OldestXmin
	buf, err := db.pool.Get(blk)
	if err != nil {
		return h, err
	}
	defer buf.Release()
	db.ckptInterlock.RLock()
	defer db.ckptInterlock.RUnlock()
	buf.Lock()
	defer buf.Unlock()
	page := buf.Page()
	if heap.IsNew(page) {
		return h, nil
	}
	oldest := h
	allVisible, allFrozen := true, true
	var newestXmin uint64
	var freezeChunks []uint16
	for s := 0; s < heap.NumSlots(page); s++ {
		if heap.SlotState(page, uint16(s)) != heap.LPNormal {
			// Freed slots are common on pruned pages; skip them
			// before Tuple builds an error for each.
			continue
		}
		raw, err := heap.Tuple(page, uint16(s))
		if errors.Is(err, heap.ErrBadSlot) {
			continue
		}
		if err != nil {
			return h, db.corrupt(heap.TID{Block: blk, Slot: uint16(s)}, err)
		}
		hdr, _, _, err := heap.DecodeTuple(raw)
		if err != nil {
			return h, db.corrupt(heap.TID{Block: blk, Slot: uint16(s)}, err)
		}
		vv := version{hdr: hdr}
		committed, _, err := db.xidState(&vv, false)
		if err != nil {
			return h, err
		}
		newestXmin = max(newestXmin, hdr.Xmin)
		if !committed || hdr.Xmin >= h {
			allVisible = false
		}
		chunk := hdr.Infomask&heap.Chunk != 0
		if chunk && committed && hdr.Xmin < v.st.FreezeCutoff && hdr.Infomask&heap.Frozen == 0 {
			// A chunk is read only through its version and never
			// hinted, so its xmin is looked up in the CLOG by vacuum
			// and Verify until it is frozen. Freezing says no more than
			// that its inserter committed long ago, true whatever
			// becomes of the version; without it FrozenXid, and CLOG
			// truncation, would stop for good at the oldest live large
			// value.
			freezeChunks = append(freezeChunks, uint16(s))
		} else if hdr.Infomask&heap.Frozen == 0 {
			// Until then the CLOG must keep the status that vacuum
			// and Verify look up.
			allFrozen = false
			oldest = min(oldest, hdr.Xmin)
		}
		if chunk {
			continue // no xmax and no chain of their own
		}
		if hdr.Xmax != 0 {
			allFrozen = false
			oldest = min(oldest, hdr.Xmax)
			if _, aborted, err := db.xidState(&vv, true); err != nil {
				return h, err
			} else if !aborted {
				allVisible = false
			}
		}
		if hdr.Prev.Valid() {
			allVisible = false
		}
	}
	if len(freezeChunks) > 0 {
		if err := db.freezeChunks(buf, freezeChunks); err != nil {
			return h, err
		}
		v.st.ChunksFrozen += uint64(len(freezeChunks))
	}
	if heap.HoleBytes(page) > 0 {
		if err := v.compactPage(buf); err != nil {
			return h, err
		}
	}
	db.recordFreeSpace(blk, heap.FreeSpace(page))
	if allVisible {
		// Set the bits unless they are set already; an all-visible page
		// whose tuples this run froze becomes all-frozen.
		av, af := db.pageAllVisible(blk)
		if heap.PageFlags(page)&heap.PDAllVisible == 0 || !av || (allFrozen && !af) {
			if err := db.setPageAllVisible(buf, allFrozen, newestXmin); err != nil {
				return h, err
			}
			v.st.PagesAllVisible++
		}
	}
	return oldest, nil
}

// compactPage packs the tuples of buf's page, turning the holes left by
// this run's (or an interrupted run's) pruning records into free space.
// The caller holds the page's exclusive lock and ckptInterlock shared.
func (v *vacuumRun) compactPage(buf *bufpool.Buffer) error {
	if err := v.db.repairFragmentation(buf); err != nil {
		return err
	}
	v.st.PagesCompacted++
	return nil
}

// freezeChunks freezes the chunk tuples in slots of buf's page with a
// pruning record of one page part (a full-page image first if the page
// needs one). The caller holds the page's exclusive lock and
// ckptInterlock shared.
func (db *DB) freezeChunks(buf *bufpool.Buffer, slots []uint16) error {
	page := buf.Page()
	pp := &prunePage{block: buf.Block()}
	for _, s := range slots {
		raw, err := heap.Tuple(page, s)
		if err != nil {
			return db.corrupt(heap.TID{Block: buf.Block(), Slot: s}, err)
		}
		pp.freeze = append(pp.freeze, freezeOp{slot: s, infomask: heap.TupleInfomask(raw) | heap.Frozen | heap.XminCommitted})
	}
	return db.logPrunePage(buf, pp, flagPruneNoRepair, "freezing chunks of")
}

// repairFragmentation compacts buf's page, as PostgreSQL's
// PageRepairFragmentation, with a pruning record whose one page part is
// empty (a full-page image first if the page needs one). Vacuum calls it
// once for each page it left holes in; placeTuple calls it when a tuple
// fits a page only with its holes. The caller holds the page's exclusive
// lock and ckptInterlock shared.
func (db *DB) repairFragmentation(buf *bufpool.Buffer) error {
	return db.logPrunePage(buf, &prunePage{block: buf.Block()}, 0, "compaction of")
}

// logPrunePage applies p, a pruning record's part for buf's page, and logs
// it as a record of its own with flags (a full-page image first if the page
// needs one): the one-page pruning done under a lock the caller already
// holds, by vacuum's page pass, placeTuple and pruneChainOnPage (logPrune
// locks the pages of a batch itself). what names the change in the
// corruption error. The caller holds the page's exclusive lock and
// ckptInterlock shared.
func (db *DB) logPrunePage(buf *bufpool.Buffer, p *prunePage, flags uint8, what string) error {
	if err := db.logFPIIfNeeded(buf); err != nil {
		return err
	}
	if err := applyPrune(buf.Page(), p, flags); err != nil {
		return db.fail(fmt.Errorf("%w: %s heap block %d: %v", ErrCorruption, what, buf.Block(), err))
	}
	buf.MarkDirty()
	_, end, err := db.wal.InsertFlags(recHeap2Prune, flags, 0, encodePrune([]*prunePage{p}))
	if err != nil {
		return db.fail(err)
	}
	heap.SetPageLSN(buf.Page(), uint64(end))
	return nil
}
