package engine

import (
	"errors"
	"math"
	"sync/atomic"
	"time"

	"mvkv/internal/bufpool"
	"mvkv/internal/heap"
)

// Page-level pruning, the analog of PostgreSQL's pruneheap.c
// (heap_page_prune_opt and heap_page_prune).
//
// A page is pruned on its own: every version on it that no snapshot can
// see, whatever its key, is freed in place, the page is compacted, and one
// pruning record says which slots ended up unused and which Prev links were
// cut. Nothing on any other page is read or changed. That is possible
// because of the chain rules in chain.go: a version whose inserter
// committed below the horizon is visible to every snapshot there is or
// will be, so no walk goes below it, and a Prev link that leads to a freed
// (or reused) slot is recognized as such and ends the walk.
//
// Before and after pruning a page of two keys, a and b, at horizon 120
// (xmin,xmax; "->" is Prev; a2's predecessor a1 lives on another page):
//
//	before                                   after
//	slot 0  a3 (118,0)   -> slot 2           slot 0  a3 (118,0)   (Prev cut)
//	slot 1  b1 (90,0)                        slot 1  b1 (90,0)
//	slot 2  a2 (100,118) -> (7,4)            slot 2  unused
//	slot 3  b0 (80,95) deleted, not head     slot 3  unused
//	slot 4  x  (119 aborted)                 slot 4  unused
//	free: 40 bytes                           free: compacted, 40 + three tuples
//
// a3 is visible to every snapshot (118 committed below 120), so nobody
// needs a2 or a1; a1's page is pruned when it is next visited, whatever
// this page holds by then. A version is freed when (HeapTupleSatisfiesVacuum
// calls it DEAD):
//
//   - its inserter aborted (or crashed), unless it is its key's index head:
//     the head is where every walk starts, so it goes only when a newer
//     version replaces it, or by vacuum;
//   - its xmax committed below the horizon, after an update (a newer
//     version, which every snapshot sees, replaced it) or a delete (unless
//     it is its key's index head: the deleted key's index entry is dropped
//     by vacuum, which takes the key's row lock to do it).
//
// Out-of-line versions (External) and their chunks are left to vacuum,
// which frees a version's chunks on their own pages with it; but a chunk
// whose inserter aborted (or crashed) is freed by any prune of its page,
// whatever names it, as a dead version is (see prunePageLocked for why no
// one follows a link into its slot).
//
// When it runs. A writer whose tuple does not fit on the page it locked
// prunes that page first, if at least minPrune xmaxes were set on it since
// it was last pruned and its prune hint (pd_prune_xid: the oldest xid that
// set an xmax on it since then) lies below the horizon. A reader that
// visits such a page when it is full (no room for another tuple the size
// of the one it read) prunes it too, but only if it gets the page's exclusive lock at once: pruning never
// waits for a lock a reader, a writer or vacuum holds, it skips the page.
// Vacuum prunes every page it reads. Each prune costs one WAL record; a page
// that has nothing to free costs a pass over its line pointers, and its
// prune hint is raised past what it holds so the next visitor does not try
// again in vain.

// minPrune is the fewest versions a prune outside vacuum waits for on a
// page: the page's xmaxes set since its last prune (pendingCounts). A prune
// is a pass over every tuple on the page, a compaction and a WAL record,
// whatever it frees; on a full page of keys updated at random, pruning as
// soon as one version is dead (as PostgreSQL does at fillfactor 100) pruned
// once per update and cost a fifth of the throughput at 32 clients. Until
// then a writer puts its new version on another page, as a non-HOT update
// does, and at most minPrune-1 dead versions a page wait, a few percent of
// the table.
const minPrune = 4

// pendingCounts counts, per heap block, the xmaxes set on the page since it
// was last pruned: the versions that may die there. Blocks share a counter
// modulo its size, which can only make a page look more worth pruning. It
// is a hint kept in memory only: after a restart pages start at zero and
// wait for new updates, or for vacuum.
type pendingCounts [1 << 16]atomic.Uint32

func (c *pendingCounts) of(blk uint32) *atomic.Uint32 { return &c[blk%uint32(len(c))] }

// pruneCause says who pruned a page, for the statistics.
type pruneCause int

const (
	pruneByUpdate pruneCause = iota
	pruneByRead
	pruneByVacuum
)

// hintBelow reports whether a page's 32-bit prune hint x names an xid
// below the horizon h, comparing modulo 2^32 as PostgreSQL's
// TransactionIdPrecedes does: a hint set more than 2^31 xids ago reads as
// not yet due, which costs only a prune left to vacuum.
func hintBelow(x uint32, h uint64) bool {
	return x != 0 && int32(x-uint32(h)) < 0
}

// pruneDue reports whether page blk may be worth pruning: enough versions
// may have died on it since its last prune, and its prune hint says the
// oldest of them may be removable, against a horizon at most a millisecond
// old (recentHorizon).
func (db *DB) pruneDue(blk uint32, page []byte) bool {
	if db.pending.of(blk).Load() < minPrune {
		return false
	}
	x := heap.PruneXid(page)
	return hintBelow(x, db.horizon.Load()) || (x != 0 && hintBelow(x, db.recentHorizon()))
}

// recentHorizon returns the cached horizon, recomputed first unless a
// reader did so in the last millisecond: the cached value moves only when
// someone computes it, and a workload of readers alone would otherwise
// never see it pass what they could prune. Once a millisecond bounds the
// cost of the running table's and the snapshot registry's locks, which
// the computation takes, as PostgreSQL's GlobalVisState recomputes its
// bounds only when an xid falls between them.
func (db *DB) recentHorizon() uint64 {
	now, last := time.Now().UnixNano(), db.horizonAt.Load()
	if now-last < int64(time.Millisecond) || !db.horizonAt.CompareAndSwap(last, now) {
		return db.horizon.Load()
	}
	return db.computeHorizon()
}

// pruneForRead is heap_page_prune_opt for a reader that has just read a
// tuple of size bytes from buf's page under its share lock (released): if
// the page has no room for another tuple that size and its prune hint says
// something on it may be removable, prune it, provided its exclusive lock,
// the checkpoint interlock and Verify's pruning lock are all free at once.
//
// PostgreSQL prunes when less than a tenth of the page is free. That
// threshold made readers here prune pages with one dead version each,
// right after each update (a pgbench -N transaction reads the row it
// updated): one WAL record per transaction, and a fifth of the throughput
// at 32 clients. Waiting until the page is full, as a writer does, lets
// one prune free every version that died since the last one. The caller holds closeMu shared and a pin on buf, and no
// page lock. Errors are not returned: a failed prune leaves the page as it
// was, and a WAL failure has already stopped writes.
func (db *DB) pruneForRead(buf *bufpool.Buffer, size int) {
	if db.writable() != nil {
		return
	}
	if !db.ckptInterlock.TryRLock() {
		return
	}
	defer db.ckptInterlock.RUnlock()
	if !db.pruneMu.TryRLock() {
		return
	}
	defer db.pruneMu.RUnlock()
	if !buf.TryLock() {
		return
	}
	defer buf.Unlock()
	page := buf.Page()
	if heap.IsNew(page) || !db.pruneDue(buf.Block(), page) || heap.Fits(page, size) {
		return
	}
	_, _ = db.prunePageLocked(buf, pruneByRead, nil)
}

// pruneWorthwhile tells a writer whose tuple does not fit on page blk
// (locked exclusively) whether pruning it first is worth a try: enough
// versions may have died on it (minPrune), and its prune hint lies below
// the horizon, computed afresh if the cached one is not enough. The caller
// holds ckptInterlock shared.
func (db *DB) pruneWorthwhile(blk uint32, page []byte) bool {
	if db.pending.of(blk).Load() < minPrune {
		return false
	}
	x := heap.PruneXid(page)
	return hintBelow(x, db.horizon.Load()) || (x != 0 && hintBelow(x, db.computeHorizon()))
}

// pruneResult is what a prune found on its page; the visibility fields
// are filled in for vacuum only.
type pruneResult struct {
	removed int // versions freed (chunks not counted)
	// allVisible: every tuple left is visible to every snapshot;
	// allFrozen: and none needs the CLOG.
	allVisible, allFrozen bool
	// heads is how many dead index heads vacuum listed for its second
	// pass; the visibility fields describe the page as it will be once
	// they are gone.
	heads      int
	newestXmin uint64 // the newest xmin left, for the visibility map record
	oldestXid  uint64 // the oldest xid a tuple left names, for RelFrozenXid
}

// prunePageLocked prunes buf's page: it frees every version on it that no
// snapshot can see, cuts the Prev links of versions every snapshot sees,
// compacts the page and records its free space, in one pruning record
// (none when there is nothing to free). Chunks whose inserter aborted go
// too. With vac set it is vacuum's first
// pass on the page (vacuum.go): it also frees out-of-line versions (their
// chunks go on vac's list), freezes, lists index heads to drop, logs a
// record for freezing or compaction alone, and says whether the page is
// all-visible.
//
// The caller holds buf's exclusive lock, ckptInterlock shared and closeMu
// shared. It reads the CLOG and the index, never another heap page, and
// takes no lock it could wait for but theirs, which are never held while
// waiting for a page.
func (db *DB) prunePageLocked(buf *bufpool.Buffer, cause pruneCause, vac *vacuumRun) (pruneResult, error) {
	page := buf.Page()
	blk := buf.Block()
	res := pruneResult{allVisible: true, allFrozen: true}
	var h, cutoff uint64
	exact := false
	if vac != nil {
		h, cutoff, exact = vac.st.OldestXmin, vac.st.FreezeCutoff, true
	} else {
		h = db.horizon.Load()
	}
	res.oldestXid = h
	below := func(x uint64) bool {
		if x < h {
			return true
		}
		if !exact {
			h, exact = db.computeHorizon(), true
		}
		return x < h
	}
	var unusedBuf [64]uint16
	var prevBuf [32]prevFix
	pp := prunePage{block: blk, unused: unusedBuf[:0], prev: prevBuf[:0]}
	newHint := uint64(0) // the oldest xmax still waiting, 0 for none
	waiting := uint32(0)
	wait := func(x uint64) {
		waiting++
		if newHint == 0 || x < newHint {
			newHint = x
		}
	}
	frozen := 0
	hinted := false // a full-page image for hints is logged if needed
	// The chunks of the out-of-line versions freed here, listed by the
	// record that frees the versions and put in vacuum's debt only once
	// it is logged: a run that stops before that (a damaged tuple further
	// down the page, a failed WAL insert) leaves the versions in place,
	// and their chunks must not reach the debt, whose next run would free
	// them under a version that still names them.
	var chunks []chunkID
	abortedChunks := 0 // chunks of aborted writes freed, among pp.unused
	n := heap.NumSlots(page)
	for s := 0; s < n; s++ {
		if heap.SlotState(page, uint16(s)) != heap.LPNormal {
			continue
		}
		raw, err := heap.Tuple(page, uint16(s))
		if errors.Is(err, heap.ErrBadSlot) {
			continue
		}
		tid := heap.TID{Block: blk, Slot: uint16(s)}
		if err != nil {
			return res, db.corrupt(tid, err)
		}
		hdr, key, val, err := heap.DecodeTuple(raw)
		if err != nil {
			return res, db.corrupt(tid, err)
		}
		isChunk := hdr.Infomask&heap.Chunk != 0
		v := version{tid: tid, hdr: hdr}
		xc, xa, err := db.xidState(&v, false)
		if isChunk && vac == nil && (err != nil || !xa) {
			// Chunks go with their version, by vacuum, but for those
			// of an aborted write (below); one whose status cannot be
			// read is left to vacuum, which reports it.
			continue
		}
		if err != nil {
			return res, err
		}
		var mc, ma bool
		if hdr.Xmax != 0 && xc {
			if mc, ma, err = db.xidState(&v, true); err != nil {
				return res, err
			}
		}
		if v.hint != 0 && hdr.Infomask&heap.Chunk == 0 && heap.TupleInfomask(raw)|v.hint != heap.TupleInfomask(raw) {
			// Hint bits, as HeapTupleSatisfiesVacuum sets them: what
			// the CLOG said need not be asked again.
			if !hinted {
				if err := db.logFPIForHint(buf); err != nil {
					return res, err
				}
				hinted = true
			}
			heap.SetTupleInfomask(raw, heap.TupleInfomask(raw)|v.hint)
			buf.MarkDirty()
			db.stats.hintBitsSet.Add(1)
		}
		isFrozen := hdr.Infomask&heap.Frozen != 0
		if isChunk && xa {
			// A chunk whose inserter aborted (or crashed) is garbage
			// whether or not a version names it, as PostgreSQL's toast
			// tuples of an aborted transaction are dead tuples: freed
			// here, by any prune, it holds neither its space nor
			// RelFrozenXid (and so the CLOG's truncation) past the next
			// vacuum run. Left to vacuum's chunk pass, one that no
			// version names (a write that failed or crashed before
			// placing its version) stayed until an index rebuild.
			//
			// Why nobody follows a TID into the slot once another tuple
			// takes it. Every chunk of a value carries the xmin of the
			// version naming it (toastValue writes them in one
			// transaction), so only versions of this aborted xid name
			// it, and nobody reads such a version's value: readers
			// read visible versions, writers the newest committed one
			// or their own (latest), and a transaction reads nothing
			// once it aborted. Vacuum frees the chunks of a version it
			// removes, and those of its debt, only while the
			// slot holds a chunk of the listed xmin (revisit), and no
			// tuple of an aborted xid is written again. xidState calls
			// an xid aborted only from the CLOG, or when it was handed
			// out and is no longer running: a writer's chunks are never
			// freed here. A directory's data chunks carry its xmin and
			// are freed where they lie. Verify does not check an
			// aborted version's pointer (toastCheck.Report), and the
			// index rebuild counts a chunk named only by a pointer or
			// directory of its xmin, so a version left naming freed
			// slots (an index head, or out of line, both left to
			// vacuum; or a crash came first) is no damage, and vacuum
			// removes it later, finding its chunks gone.
			pp.unused = append(pp.unused, uint16(s))
			abortedChunks++
			continue
		}
		if isChunk {
			// Chunks go with their version (vacuum's second pass);
			// vacuum freezes them, whatever becomes of the version, so
			// that RelFrozenXid can pass them.
			res.newestXmin = max(res.newestXmin, hdr.Xmin)
			if !xc || (!isFrozen && hdr.Xmin >= h) {
				res.allVisible = false
			}
			switch {
			case xc && !isFrozen && hdr.Xmin < cutoff:
				pp.freeze = append(pp.freeze, freezeOp{slot: uint16(s), infomask: heap.TupleInfomask(raw) | heap.Frozen | heap.XminCommitted, xmax: hdr.Xmax})
				vac.st.ChunksFrozen++
			case !isFrozen:
				res.allFrozen = false
				res.oldestXid = min(res.oldestXid, hdr.Xmin)
			}
			continue
		}
		ext := hdr.Infomask&heap.External != 0
		dead, pendingHead := false, false
		var headEntry *indexEntry
		switch {
		case xa:
			headEntry, pendingHead = db.isIndexHead(key, tid)
			dead = !pendingHead
		case !xc:
			// Inserter still running: nothing to do yet.
		case hdr.Xmax != 0:
			switch {
			case mc && below(hdr.Xmax):
				if hdr.Infomask&heap.Updated == 0 {
					headEntry, pendingHead = db.isIndexHead(key, tid)
				}
				dead = !pendingHead
			case mc, !ma:
				wait(hdr.Xmax)
				if mc && vac != nil {
					vac.st.RecentlyDead++
				}
			}
		}
		if dead && ext && vac == nil {
			// Its chunks are on other pages: left to vacuum.
			dead = false
		}
		if dead {
			pp.unused = append(pp.unused, uint16(s))
			if ext {
				ctids, err := chunkTIDs(val)
				if err != nil {
					return res, db.corrupt(tid, err)
				}
				for _, c := range ctids {
					chunks = append(chunks, chunkID{c, hdr.Xmin})
				}
			}
			continue
		}
		if pendingHead && vac != nil {
			// Freed by the second pass unless a writer holds the key,
			// which then counts its xids against RelFrozenXid.
			ox := uint64(math.MaxUint64)
			if !isFrozen {
				ox = hdr.Xmin
			}
			if hdr.Xmax != 0 {
				ox = min(ox, hdr.Xmax)
			}
			w := vac.pageWork(blk)
			hw := headWork{slot: uint16(s), e: headEntry, xmin: hdr.Xmin, aborted: xa, oldestXid: ox}
			if headEntry != nil {
				hw.key = headEntry.key() // the entry's bytes, not a copy
			} else {
				hw.key = string(key)
			}
			w.heads = append(w.heads, hw)
			res.heads++
			continue
		}
		// A version whose inserter committed below the horizon is where
		// every walk stops: what its Prev names is not needed, and is
		// freed by the prune of its own page.
		if xc && hdr.Prev.Valid() && (isFrozen || hdr.Xmin < h) {
			pp.prev = append(pp.prev, prevFix{slot: uint16(s), prev: heap.InvalidTID})
		}
		if vac == nil {
			continue
		}
		// Freezing, and what the visibility map may say of the page.
		mask, xmax := heap.TupleInfomask(raw), hdr.Xmax
		if xc && !isFrozen && hdr.Xmin < cutoff {
			mask |= heap.Frozen | heap.XminCommitted
			isFrozen = true
			frozen++
		}
		if xmax != 0 && ma && xmax < cutoff {
			// A rolled-back update or delete: until the xmax is
			// cleared, RelFrozenXid cannot pass it.
			mask &^= heap.XmaxCommitted | heap.XmaxInvalid | heap.Updated
			xmax = 0
		}
		if mask != heap.TupleInfomask(raw) || xmax != hdr.Xmax {
			pp.freeze = append(pp.freeze, freezeOp{slot: uint16(s), infomask: mask, xmax: xmax})
		}
		res.newestXmin = max(res.newestXmin, hdr.Xmin)
		if !xc || (!isFrozen && hdr.Xmin >= h) || (xmax != 0 && !ma) {
			res.allVisible = false
		}
		if !isFrozen || xmax != 0 {
			res.allFrozen = false
		}
		if !isFrozen {
			res.oldestXid = min(res.oldestXid, hdr.Xmin)
		}
		if xmax != 0 {
			res.oldestXid = min(res.oldestXid, xmax)
		}
	}
	// The hint is raised past what was examined, so that the next visitor
	// does not try again before something here can become removable.
	setHint := func() {
		heap.SetPruneXid(page, 0)
		if newHint != 0 {
			heap.NotePrunable(page, newHint)
		}
		db.pending.of(blk).Store(waiting)
	}
	compact := vac != nil && heap.HoleBytes(page) > 0
	if len(pp.unused) == 0 && (vac == nil || (len(pp.freeze) == 0 && len(pp.prev) == 0 && !compact)) {
		// Nothing to free: cutting links alone is not worth a record.
		setHint()
		if vac != nil {
			db.recordFreeSpace(blk, heap.FreeSpace(page))
		}
		return res, nil
	}
	// chunks is empty without vac: dead out-of-line versions are left to it.
	if err := db.logPrunePage(buf, &pp, 0, "pruning", chunks); err != nil {
		return res, err
	}
	setHint()
	res.removed = len(pp.unused) - abortedChunks
	switch cause {
	case pruneByUpdate:
		db.stats.prunesByUpdate.Add(1)
		db.stats.prunedByUpdate.Add(uint64(res.removed))
		db.stats.chunksByUpdate.Add(uint64(abortedChunks))
	case pruneByRead:
		db.stats.prunesByRead.Add(1)
		db.stats.prunedByRead.Add(uint64(res.removed))
		db.stats.chunksByRead.Add(uint64(abortedChunks))
	case pruneByVacuum:
		vac.st.PagesPruned++
		vac.st.TuplesRemoved += uint64(res.removed)
		vac.st.ChunksRemoved += uint64(abortedChunks)
		vac.st.TuplesFrozen += uint64(frozen)
	}
	if cause != pruneByVacuum {
		db.av.noteRemoved(int64(res.removed))
	}
	db.recordFreeSpace(blk, heap.FreeSpace(page))
	return res, nil
}

// isIndexHead reports whether tid is the newest version the index names
// for key, or one vacuum is about to make so (headPins). e is key's entry
// when tid is its head, else nil.
func (db *DB) isIndexHead(key []byte, tid heap.TID) (e *indexEntry, head bool) {
	if e = db.idx.get(key); e != nil && e.headTID() == tid {
		return e, true
	}
	return nil, db.pins.has(tid)
}
