package engine

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"

	"mvkv/internal/bufpool"
	"mvkv/internal/heap"
	"mvkv/visibility"
	"mvkv/wal"
)

// Heap access: placing tuple versions on pages and reading them back, the
// analog of PostgreSQL's heapam.c.
//
// A change to a page follows PostgreSQL's order: with the page's content
// lock held exclusively, change the page, mark the buffer dirty, insert the
// WAL record, and stamp the page with the record's end LSN. Marking the page
// dirty before the record is inserted is what makes a fuzzy checkpoint safe:
// a record whose LSN lies below the checkpoint's redo point always belongs to
// a page that was already dirty when the redo point was chosen, so the
// checkpoint writes it.

// toastThreshold is the tuple size in bytes above which the value is moved
// out of line into chunk tuples, PostgreSQL's TOAST_TUPLE_THRESHOLD.
const toastThreshold = 2032

// chunkSize is the value bytes carried by one chunk tuple: a chunk fills an
// empty page.
const chunkSize = heap.MaxTupleSize - heap.TupleHeaderSize

// maxChainLength bounds a version-chain walk, so that a corrupt chain is
// reported instead of followed forever.
const maxChainLength = 1 << 24

// nInsertTargets is the number of insert target slots of each kind: new
// keys (and out-of-line chunks) use slots [0, nInsertTargets), new versions
// of existing keys that do not fit on their predecessor's page use
// [nInsertTargets, 2*nInsertTargets).
const nInsertTargets = 8

const noBlock = math.MaxUint32

// insertTargets are the pages new tuples go to, one per slot, so that
// concurrent writers do not all contend for the last page of the heap.
//
// New keys and new versions of existing keys fill different pages. A key
// that was updated once is likely to be updated again, and one that was only
// inserted (a log, pgbench's history) likely never: kept apart, the pages of
// inserted-only keys are left alone after vacuum marks them all-visible, so
// later vacuums skip them and index-only reads stay on the fast path, while
// the pages of updated keys are the ones vacuum keeps compacting. PostgreSQL
// gets the same separation from keeping tables in relations of their own.
type insertTargets struct {
	blk [2 * nInsertTargets]atomic.Uint32
}

func (it *insertTargets) reset() {
	for i := range it.blk {
		it.blk[i].Store(noBlock)
	}
}

// targetBuffer returns the insert target of slot, pinned: the current one,
// else a page the free space map says has need bytes free (half a page for
// the slots of new keys), else a new page at the end of the heap. A page
// that fails its checks when read (ErrCorruption; the pool has logged and
// counted it) is dropped as a target and the next candidate tried, so that
// one damaged page does not fail every write placed on it; the keys on it
// stay unreadable, the others read and write as before.
func (db *DB) targetBuffer(slot, need int) (*bufpool.Buffer, error) {
	for attempt := 0; ; attempt++ {
		buf, blk, err := db.targetCandidate(slot, need)
		if err == nil || !errors.Is(err, ErrCorruption) || blk == noBlock || attempt == maxDamagedTargets {
			return buf, err
		}
		db.targets.blk[slot].CompareAndSwap(blk, noBlock)
	}
}

// maxDamagedTargets bounds the damaged pages one placement skips before it
// reports the error.
const maxDamagedTargets = 8

// targetCandidate is one try of targetBuffer; it also returns the block it
// tried to read (noBlock for a new page).
func (db *DB) targetCandidate(slot, need int) (*bufpool.Buffer, uint32, error) {
	if blk := db.targets.blk[slot].Load(); blk != noBlock {
		buf, err := db.pool.Get(blk)
		return buf, blk, err
	}
	want := need
	if slot < nInsertTargets {
		// New keys take only pages at least half empty: the space vacuum
		// frees among updated keys (a few dead versions a page) stays for
		// their next versions, as PostgreSQL keeps a table's free space
		// for that table, while pages emptied by deletes are reused.
		want = max(need, heap.PageSize/2)
	}
	if blk, ok := db.fsm.take(want); ok {
		buf, err := db.pool.Get(blk)
		if err != nil {
			return nil, blk, err
		}
		db.targets.blk[slot].Store(blk)
		return buf, blk, nil
	}
	buf, err := db.pool.Extend()
	if err != nil {
		return nil, noBlock, err
	}
	db.targets.blk[slot].Store(buf.Block())
	return buf, noBlock, nil
}

// fillReserve is the room in bytes an insert of a new key (old invalid)
// must leave free on its page: 100-fillfactor percent of the page. A new
// version of an existing key may fill the page, and so may an out-of-line
// value chunk (tup a heap.Chunk tuple; nil for a key's version), as
// PostgreSQL's TOAST table keeps no fillfactor: a chunk is never updated
// in place, and with the reserve a chunk of more than a fillfactor's share
// of a page fitted no page but a new one, so at fillfactor 10 every large
// value written extended the heap and the pages vacuum freed of chunks
// were never used again.
func (db *DB) fillReserve(old heap.TID, tup []byte) int {
	if old.Valid() || (len(tup) >= heap.TupleHeaderSize && heap.TupleInfomask(tup)&heap.Chunk != 0) {
		return 0
	}
	return heap.PageSize * (100 - db.opts.FillFactor) / 100
}

// recordFreeSpace notes blk's free space in the free space map unless blk
// is the insert target of a slot for new versions of existing keys: its
// writers are filling it already, and a new key taking it from the map
// would mix the two kinds of pages.
func (db *DB) recordFreeSpace(blk uint32, free int) {
	for i := nInsertTargets; i < len(db.targets.blk); i++ {
		if db.targets.blk[i].Load() == blk {
			return
		}
	}
	db.fsm.record(blk, free)
}

// placeTuple writes one heap change and its WAL record:
//   - tup != nil, old invalid: insert (recHeapInsert);
//   - tup != nil, old valid: update: xmax = xid on old, tup placed anew (recHeapUpdate);
//   - tup == nil, old valid: delete: xmax = xid on old (recHeapDelete).
//
// It returns the new tuple's TID (InvalidTID for a delete). With head set,
// the new tuple becomes head's newest version before the page locks and
// ckptInterlock are released.
//
// The first change to a page after a checkpoint's redo point is preceded by
// a full-page image of the page (docs/DESIGN.md rule 4). Whether a page needs one
// is decided against the redo pointer while ckptInterlock is held shared, so
// a checkpoint cannot move the redo pointer between that decision and the
// record's insertion (PostgreSQL re-checks RedoRecPtr inside XLogInsert for
// the same reason).
func (db *DB) placeTuple(xid uint64, old heap.TID, tup []byte, head *indexEntry) (heap.TID, error) {
	db.ckptInterlock.RLock()
	defer db.ckptInterlock.RUnlock()
	if tup == nil {
		buf, err := db.pool.Get(old.Block)
		if err != nil {
			return heap.InvalidTID, err
		}
		defer buf.Release()
		buf.Lock()
		defer buf.Unlock()
		if err := db.logFPIIfNeeded(buf); err != nil {
			return heap.InvalidTID, err
		}
		var flags uint8
		if cleared, err := db.clearAllVisibleLocked(buf); err != nil {
			return heap.InvalidTID, err
		} else if cleared {
			flags |= flagAllVisibleCleared
		}
		if err := db.setXmaxOnPage(buf.Page(), old, xid, false); err != nil {
			return heap.InvalidTID, db.corrupt(old, err)
		}
		buf.MarkDirty()
		_, end, err := db.wal.InsertFlags(recHeapDelete, flags, xid, encodeDelete(old))
		if err != nil {
			return heap.InvalidTID, db.fail(err)
		}
		heap.SetPageLSN(buf.Page(), uint64(end))
		return heap.InvalidTID, nil
	}

	slot := int(xid % nInsertTargets)
	if old.Valid() {
		slot += nInsertTargets
	}
	// A new version goes on its predecessor's page when it fits, as
	// PostgreSQL's heap_update tries the old page first: one page to lock
	// and log, and a key's versions stay together, so the space vacuum
	// frees on a page is taken by the next versions of the same keys.
	samePage := old.Valid()
	for {
		var tgt *bufpool.Buffer
		var err error
		if samePage {
			tgt, err = db.pool.Get(old.Block)
		} else {
			// A new key asks for the room the fillfactor keeps too, as
			// RelationGetBufferForTuple asks for len + saveFreeSpace:
			// the map forgets every page it hands out, and asked for the
			// tuple alone at a low fillfactor it handed out every
			// half-empty page in turn, each refused below.
			tgt, err = db.targetBuffer(slot, len(tup)+db.fillReserve(old, tup))
		}
		if err != nil {
			return heap.InvalidTID, err
		}
		var oldBuf *bufpool.Buffer
		if old.Valid() && old.Block != tgt.Block() {
			if oldBuf, err = db.pool.Get(old.Block); err != nil {
				tgt.Release()
				return heap.InvalidTID, err
			}
		}
		// Lock in block order so that two updates moving tuples between
		// the same two pages cannot deadlock.
		first, second := tgt, oldBuf
		if oldBuf != nil && oldBuf.Block() < tgt.Block() {
			first, second = oldBuf, tgt
		}
		first.Lock()
		if second != nil {
			second.Lock()
		}
		unlock := func() {
			if second != nil {
				second.Unlock()
				second.Release()
			}
			first.Unlock()
			first.Release()
		}

		page := tgt.Page()
		wasNew := heap.IsNew(page)
		if !wasNew && !heap.Fits(page, len(tup)) && heap.MayHaveHoles(page) && heap.FreeSpace(page)+heap.HoleBytes(page) >= len(tup) {
			// Slots freed in place (by the pruning records of an
			// older version of mvkv, flagPruneNoRepair) left holes
			// that no prune has packed since: compact the page now
			// rather than leave the space unused until its next prune,
			// as PostgreSQL's heap_page_prune_opt repairs a page that
			// is nearly full.
			if err := db.repairFragmentation(tgt); err != nil {
				unlock()
				return heap.InvalidTID, err
			}
			db.vac.pagesCompacted.Add(1)
		}
		if !wasNew && !heap.Fits(page, len(tup)) && db.pruneWorthwhile(tgt.Block(), page) && db.pruneMu.TryRLock() {
			// heap_page_prune_opt: free what no snapshot sees on this
			// page, whatever its key, before looking elsewhere.
			_, err := db.prunePageLocked(tgt, pruneByUpdate, nil)
			db.pruneMu.RUnlock()
			if err != nil {
				unlock()
				return heap.InvalidTID, err
			}
		}
		if samePage && (wasNew || !heap.Fits(page, len(tup))) {
			// A new page cannot hold the old version: leave it to
			// setXmaxOnPage below to report, on the usual path.
			unlock()
			samePage = false
			continue
		}
		if wasNew && db.zeroedOutPage(tgt.Block()) {
			// zero_damaged_pages emptied this page, and index entries
			// of the versions lost with it may still lead here until
			// vacuum has dropped them, logged, and initialized the page
			// (repairZeroedPage). A version placed here first would make
			// the page valid on disk while the index file keeps those
			// entries, and after a restart they would lead to slots
			// holding other tuples (ErrCorruption, not "absent").
			skip := tgt.Block()
			unlock()
			db.targets.blk[slot].CompareAndSwap(skip, noBlock)
			continue
		}
		if wasNew {
			// A new page is not all-visible, but a map file older
			// than the heap can hold bits for a block past the heap's
			// end (Open checks only the blocks the heap has), and no
			// change would clear them: the page has no PD_ALL_VISIBLE.
			if _, err := db.vm.Clear(tgt.Block(), visibility.ValidBits); err != nil {
				unlock()
				return heap.InvalidTID, err
			}
			heap.InitPage(page)
		} else if !heap.Fits(page, len(tup)+db.fillReserve(old, tup)) {
			// The block number is read before unlock releases the pin: a
			// released frame may be loaded with another block at once.
			full := tgt.Block()
			unlock()
			db.targets.blk[slot].CompareAndSwap(full, noBlock)
			continue
		}
		// Full-page images go first, while the pages are unchanged.
		if !wasNew {
			err = db.logFPIIfNeeded(tgt)
		}
		if err == nil && oldBuf != nil {
			err = db.logFPIIfNeeded(oldBuf)
		}
		if err != nil {
			unlock()
			return heap.InvalidTID, err
		}
		// The change clears PD_ALL_VISIBLE and the map bits of every page
		// it touches, and the record says so (docs/DESIGN.md rule 7).
		var flags uint8
		if cleared, err := db.clearAllVisibleLocked(tgt); err != nil {
			unlock()
			return heap.InvalidTID, err
		} else if cleared && oldBuf != nil {
			flags |= flagNewAllVisibleCleared
		} else if cleared {
			flags |= flagAllVisibleCleared
		}
		if oldBuf != nil {
			if cleared, err := db.clearAllVisibleLocked(oldBuf); err != nil {
				unlock()
				return heap.InvalidTID, err
			} else if cleared {
				flags |= flagAllVisibleCleared
			}
		}
		s, err := heap.AddTuple(page, tup)
		if err != nil {
			unlock()
			return heap.InvalidTID, err
		}
		newTID := heap.TID{Block: tgt.Block(), Slot: s}
		if heap.TuplePrev(tup) == newTID {
			// The predecessor the writer chose was pruned after it chose
			// it (by the prune above or a concurrent one), and its slot
			// is the one just taken: the version would name itself, and
			// a later update of it by the same transaction would make
			// that an update link no walk could leave. The predecessor
			// went because no snapshot could see it, so the chain ends
			// here. The page and the logged tuple say the same.
			heap.SetTuplePrev(tup, heap.InvalidTID)
			if raw, err := heap.Tuple(page, s); err == nil {
				heap.SetTuplePrev(raw, heap.InvalidTID)
			}
		}
		tgt.MarkDirty()
		scratch := getScratch()
		typ, rec := recHeapInsert, []byte(nil)
		if old.Valid() {
			ob := tgt
			if oldBuf != nil {
				ob = oldBuf
			}
			if err := db.setXmaxOnPage(ob.Page(), old, xid, true); err != nil {
				unlock()
				return heap.InvalidTID, db.corrupt(old, err)
			}
			ob.MarkDirty()
			typ, rec = recHeapUpdate, appendUpdate((*scratch)[:0], old, newTID, tup)
		} else {
			rec = appendInsert((*scratch)[:0], newTID, tup)
		}
		if wasNew {
			flags |= flagInitPage
		}
		_, end, err := db.wal.InsertFlags(typ, flags, xid, rec)
		putScratch(scratch, rec) // the WAL has copied it
		if err != nil {
			unlock()
			return heap.InvalidTID, db.fail(err)
		}
		heap.SetPageLSN(page, uint64(end))
		if oldBuf != nil {
			heap.SetPageLSN(oldBuf.Page(), uint64(end))
		}
		if head != nil {
			// Before the checkpoint interlock is released: a checkpoint
			// whose redo point lies after this record must find the new
			// head when it writes the index file (indexfile.go).
			head.head.Store(newTID.Pack())
		}
		unlock()
		return newTID, nil
	}
}

// logFPIIfNeeded logs a full-page image of buf's page if no change to it
// was logged since the current redo pointer. The caller holds buf's content
// lock exclusively and ckptInterlock shared.
func (db *DB) logFPIIfNeeded(buf *bufpool.Buffer) error {
	return db.logPageImage(buf, recFPI)
}

// logPageImage logs buf's page as a record of type typ (recFPI or
// recFPIForHint) unless a record since the redo pointer already covers it.
// Same locking as logFPIIfNeeded.
func (db *DB) logPageImage(buf *bufpool.Buffer, typ wal.RecordType) error {
	page := buf.Page()
	if heap.PageLSN(page) > db.redoPtr.Load() || heap.IsNew(page) {
		return nil
	}
	data, flags := encodeFPI(buf.Block(), page)
	_, end, err := db.wal.InsertFlags(typ, flags, 0, data)
	if err != nil {
		return db.fail(err)
	}
	buf.MarkDirty()
	heap.SetPageLSN(page, uint64(end))
	db.stats.fpis.Add(1)
	return nil
}

// setXmaxOnPage sets xid as the xmax of the tuple at tid on page, for an
// update (updated: the same transaction makes a newer version of the key,
// heap.Updated) or a delete, in the forward path and in redo alike.
func (db *DB) setXmaxOnPage(page []byte, tid heap.TID, xid uint64, updated bool) error {
	raw, err := heap.Tuple(page, tid.Slot)
	if err != nil {
		return err
	}
	if _, _, _, err := heap.DecodeTuple(raw); err != nil {
		return err
	}
	heap.SetTupleXmax(raw, xid)
	// A hint about the xmax being replaced (an aborted updater's) must not
	// be read as one about the new xmax, nor its Updated flag.
	mask := heap.TupleInfomask(raw) &^ (heap.XmaxCommitted | heap.XmaxInvalid | heap.Updated)
	if updated {
		mask |= heap.Updated
	}
	heap.SetTupleInfomask(raw, mask)
	// The old version may become removable once xid commits below the
	// horizon: the page's prune hint says so to the next visitor.
	heap.NotePrunable(page, xid)
	db.pending.of(tid.Block).Add(1)
	return nil
}

// corrupt is the ErrCorruption of the heap tuple at tid, naming its heap
// file and offset.
func (db *DB) corrupt(tid heap.TID, err error) error {
	return fmt.Errorf("%w: %s, slot %d: %v", ErrCorruption, db.heapBlockName(tid.Block), tid.Slot, err)
}

// computeHorizon computes the vacuum horizon for pruning, under
// the running table's and the snapshots' locks, and returns the highest
// one computed so far. The horizon never moves back (a new snapshot's xmin
// is at least the oldest running xid when it is taken), so db.horizon, an
// earlier answer, is still safe to use without the locks for an xid below
// it, as PostgreSQL's GlobalVisState keeps a cached bound and rechecks the
// ProcArray only for xids past it.
func (db *DB) computeHorizon() uint64 {
	h := db.oldestXmin()
	for old := db.horizon.Load(); h > old && !db.horizon.CompareAndSwap(old, h); old = db.horizon.Load() {
	}
	return db.horizon.Load()
}

// buildTuple appends a new version to dst, moving a large value out of
// line into chunk tuples first (the TOAST idea, toast.go): the main tuple's
// value is then a pointer to the chunks.
func (db *DB) buildTuple(dst []byte, xid uint64, prev heap.TID, key, val []byte) ([]byte, error) {
	h := heap.TupleHeader{Xmin: xid, Prev: prev}
	if heap.TupleHeaderSize+len(key)+len(val) <= toastThreshold {
		return heap.AppendTuple(dst, h, key, val), nil
	}
	ptr, err := db.toastValue(xid, val)
	if err != nil {
		return nil, err
	}
	h.Infomask |= heap.External
	return heap.AppendTuple(dst, h, key, ptr), nil
}

// version is what a chain walk learns about one tuple version.
type version struct {
	tid  heap.TID
	hdr  heap.TupleHeader
	val  []byte // copied out of the page; still external if hdr.Infomask&External
	have bool   // val was copied
	// hint holds the hint bits (heap.XminCommitted, ...) that the walk
	// learned from the CLOG and may set on the tuple (hints.go).
	hint uint16
}

// errVanished reports that a TID taken from the index or from a newer
// version's Prev no longer holds a version of the key: vacuum removed it
// after the TID was read, and its slot may already hold another tuple. The
// walk starts again from the key's current head, which reaches every version
// any snapshot can still see (vacuum.go).
var errVanished = errors.New("tuple version vanished")

// readVersion copies the header (and value when wantVal) of the version of
// key at tid out of its page under the page's share lock. It returns
// errVanished if the slot is free or holds a chunk or another key's tuple.
func (db *DB) readVersion(tid heap.TID, key string, wantVal bool) (version, error) {
	v := version{tid: tid}
	buf, err := db.pool.Get(tid.Block)
	if errors.Is(err, bufpool.ErrPastEnd) {
		return v, errVanished // vacuum cut its page off the heap
	}
	if err != nil {
		return v, err
	}
	buf.RLock()
	raw, err := heap.Tuple(buf.Page(), tid.Slot)
	var k, val []byte
	if err == nil {
		v.hdr, k, val, err = heap.DecodeTuple(raw)
	}
	vanished := errors.Is(err, heap.ErrBadSlot) || (err == nil && (v.hdr.Infomask&heap.Chunk != 0 || string(k) != key))
	if err == nil && !vanished && wantVal {
		v.val, v.have = append([]byte(nil), val...), true
	}
	page := buf.Page()
	prune := db.pruneDue(tid.Block, page) && !heap.Fits(page, len(raw))
	buf.RUnlock()
	if prune {
		db.pruneForRead(buf, len(raw))
	}
	buf.Release()
	if vanished {
		return v, errVanished
	}
	if err != nil {
		return v, db.corrupt(tid, err)
	}
	return v, nil
}

// valuePrefix returns at most the first n bytes of the version's value
// (n < 0: all of it), reading only the chunks of an out-of-line value that
// hold them, and the value's whole length. The caller makes sure vacuum
// cannot remove the version meanwhile (it is visible to a registered
// snapshot, or the caller holds the key's row lock and it is the newest
// committed version).
func (db *DB) valuePrefix(v version, key string, n int) ([]byte, int, error) {
	if !v.have {
		vv, err := db.readVersion(v.tid, key, true)
		if err != nil {
			return nil, 0, err
		}
		v = vv
	}
	if v.hdr.Infomask&heap.External != 0 {
		return db.detoastPrefix(v.val, n, v.tid, v.hdr.Xmin)
	}
	if n >= 0 && n < len(v.val) {
		return v.val[:n], len(v.val), nil
	}
	return v.val, len(v.val), nil
}

// didCommit answers from the CLOG whether a finished xid committed. An xid
// still marked in progress that is not running crashed: it counts as
// aborted, as in PostgreSQL.
func (db *DB) didCommit(xid uint64) (bool, error) {
	st, err := db.clog.Status(xid)
	if err != nil {
		return false, err
	}
	return st == statusCommitted, nil
}
