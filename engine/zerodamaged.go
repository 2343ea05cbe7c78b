package engine

import (
	"maps"
	"slices"

	"mvkv/internal/heap"
	"mvkv/visibility"
)

// zero_damaged_pages, as PostgreSQL's: with Options.ZeroDamagedPages on, a
// heap page that fails its checks when the buffer pool reads it is taken
// as a new, empty page (poolStorage.ReadBlock), with a warning, instead of
// failing the read. What that leaves behind is handled here:
//
//   - the page's visibility map bits are cleared at once (an empty page
//     vouches for nothing);
//   - an index entry whose head lay on the page leads nowhere: a walk of
//     its chain finds the head's slot empty, which normally means vacuum
//     moved the head and the walk starts again; for a page zeroed out it
//     means the key has no version left (walkChain), so it reads as
//     absent and can be written again;
//   - vacuum initializes the page, as PostgreSQL's lazy vacuum does with
//     "page N is uninitialized --- fixing", and logs it whole, so that the
//     next checkpoint writes a valid page over the damage; before that it
//     drops the index entries that lead into it (with the WAL record
//     vacuum uses for a removed head), so that no entry is left pointing
//     at an empty slot once the process that zeroed the page is gone.
//
// The set of pages zeroed out lives only in memory: after a restart, a
// page vacuum has not repaired is damaged again on disk and read again
// under the setting. Redo never zeroes a page (afterRedo): a record that
// needs the page would otherwise apply to an empty one.

// SetZeroDamagedPages turns zero_damaged_pages on or off for the heap
// page reads that start afterwards (see Options.ZeroDamagedPages). Safe to
// call concurrently. Pages it emptied stay empty in the buffer pool until
// evicted, when it is turned off.
func (db *DB) SetZeroDamagedPages(on bool) { db.zeroDamaged.Store(on) }

// ZeroDamagedPages reports whether zero_damaged_pages is on.
func (db *DB) ZeroDamagedPages() bool { return db.zeroDamaged.Load() }

// noteZeroedOut records that zero_damaged_pages took heap block block,
// which failed its checks with err, as an empty page: the block's map bits
// are cleared (an empty page vouches for nothing) and the page is logged
// the first time, as PostgreSQL's "invalid page in block N; zeroing out
// page". Called from the buffer pool's read of the block, before anyone
// can lock it; the lock order (heap page, then map page) holds. If the
// bits cannot be cleared (the map page cannot be read, or every map buffer
// is pinned), it returns that error and the page is not zeroed: the read
// fails as damage, as with the setting off, rather than leave bits that
// would have index-only reads count the page's lost keys.
func (db *DB) noteZeroedOut(block uint32, err error) error {
	if _, cerr := db.vm.Clear(block, visibility.ValidBits); cerr != nil {
		return cerr
	}
	d := &db.damage
	d.mu.Lock()
	if d.zeroedOut == nil {
		d.zeroedOut = map[uint32]bool{}
	}
	first := !d.zeroedOut[block]
	d.zeroedOut[block] = true
	d.mu.Unlock()
	if first && db.logger != nil {
		db.logger.Warn("invalid heap page: zeroing out page (zero_damaged_pages is on)", "block", block, "page", db.heapBlockName(block), "err", err,
			"note", "the versions on this page are lost; keys whose newest version was there read as absent; the page on disk stays as it is until a change to it is written")
	}
	return nil
}

// zeroedOutPage reports whether zero_damaged_pages took heap block block
// as an empty page.
func (db *DB) zeroedOutPage(block uint32) bool {
	d := &db.damage
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.zeroedOut[block]
}

// zeroedOutNames names the first zeroed-out pages. The caller holds d.mu.
func (d *damageLog) zeroedOutNames(db *DB) string {
	blocks := slices.Sorted(maps.Keys(d.zeroedOut))
	var names []string
	for _, b := range blocks[:min(len(blocks), maxZeroListed)] {
		names = append(names, db.heapBlockName(b))
	}
	return listMore(names, len(blocks))
}

// repairZeroedPage is vacuum's work on heap block blk when
// zero_damaged_pages emptied it: it drops the index entries whose head
// lies on the block and does not hold a version of their key (each under
// the key's row lock, taken without waiting: a busy key is left for the
// next run, and counted in HeadsBusy), then, if the page is still empty
// and no entry was left, initializes it and logs it whole. Until then no
// writer places a version there (placeTuple). The caller calls it through
// whileOpen, before the page's pass 1, or after it when that pass's read
// was the one that emptied the page.
func (v *vacuumRun) repairZeroedPage(blk uint32) error {
	db := v.db
	// The entries first, with no page lock held: the walk reads the
	// whole index, too long to hold a page lock across (the index's
	// mutex is a leaf, which the removals below take under the page
	// lock, as vacuum's second pass does).
	var entries []*indexEntry
	db.idx.mu.RLock()
	db.idx.tree.Ascend(func(e *indexEntry) bool {
		if t := e.headTID(); t.Valid() && t.Block == blk {
			entries = append(entries, e)
		}
		return true
	})
	db.idx.mu.RUnlock()
	owner := newTxnState()
	defer func() {
		db.locks.releaseAll(owner)
	}()
	var held []*indexEntry
	for _, e := range entries {
		if !db.locks.tryAcquire(e.key(), owner) {
			v.st.HeadsBusy++
			continue
		}
		held = append(held, e)
	}
	buf, unlock, err := v.lockPage(blk)
	if err != nil {
		return err
	}
	defer unlock()
	page := buf.Page()
	var dropped []*indexEntry
	for _, e := range held {
		// Under the row lock the head cannot move; a writer that held
		// the lock before may have moved it, or placed the key's new
		// version in this very slot of the page initialized again.
		t := e.headTID()
		if !t.Valid() || t.Block != blk {
			continue
		}
		if !heap.IsNew(page) {
			if raw, err := heap.Tuple(page, t.Slot); err == nil {
				if h, k, _, err := heap.DecodeTuple(raw); err == nil && h.Infomask&heap.Chunk == 0 && string(k) == e.key() {
					continue
				}
			}
		}
		dropped = append(dropped, e)
	}
	// The drops are logged before the page is, in records of the
	// page's changes (recIndexHeads): one, unless the index named more
	// slots of the page than a record holds.
	changes := make([]headChange, len(dropped))
	for i, e := range dropped {
		changes[i] = headChange{key: []byte(e.key()), head: heap.InvalidTID}
	}
	if err := db.logHeadChanges(changes); err != nil {
		return err
	}
	for _, e := range dropped {
		e.head.Store(heap.InvalidTID.Pack())
		db.idx.removeEntry(e)
		v.st.KeysRemoved++
	}
	initialized := false
	// With an entry left (its row lock was busy), the page stays empty
	// and unwritten, so that the next run, or after a restart the next
	// read of the still damaged page, finds it again: initialized and
	// written, it would be a valid page that the entry leads into.
	if heap.IsNew(page) && len(held) == len(entries) {
		heap.InitPage(page)
		if err := db.logPageImage(buf, recFPI); err != nil {
			return err
		}
		db.recordFreeSpace(blk, heap.FreeSpace(page))
		initialized = true
	}
	if initialized || len(dropped) > 0 {
		db.logger.Warn("vacuum: repaired a heap page that zero_damaged_pages had emptied", "block", blk,
			"page", db.heapBlockName(blk), "initialized", initialized, "indexEntriesDropped", len(dropped))
	}
	return nil
}
