package engine

import (
	"fmt"

	"mvkv/visibility"
)

// Index-only reads, the analog of PostgreSQL's index-only scans
// (nodeIndexonlyscan.c): Exists, ScanKeys and Count answer from the index
// and the visibility map alone when the newest version of a key lies on an
// all-visible heap page, and fall back to walking the version chain in the
// heap otherwise.
//
// Why the index entry says enough: it points at the head of the key's
// chain, the newest version. A delete writes no tuple, it sets xmax on the
// head, and that change clears the page's bit; a new version clears the bit
// of the page it lands on before the index points at it. So if the head's
// page is all-visible, the head was committed before every snapshot and
// nobody has deleted or replaced it: the key exists for every reader,
// without looking at the tuple. The entry needs no more than the head TID.
//
// Why the order matters: the snapshot is taken first, then the head TID is
// read, then the bit is tested (visibility.Reader keeps that rule while
// reusing a bit for consecutive keys on one page). A bit read before the
// head could belong to a page that a new head landed on after the test, a
// version this snapshot must not see. The answers also rely on vacuum
// setting bits only for tuples older than every open snapshot, and on the
// index never naming a tuple vacuum removed.
//
// And the head is read again after the bit: a set bit vouches for the
// page as it is when the bit is read, not for a head read before. Between
// the two, vacuum's second pass may remove that head (its key deleted
// below the horizon, or its inserter aborted) and, in the same step, mark
// the page all-visible, the dead head having been all that kept it from
// being so; the bit then says nothing about the key. Vacuum moves or
// clears the key's head before it sets the bit, both under the heap
// page's lock, and the map page's lock orders that set before any Test
// that sees it, so a head read after such a Test is the new one: if it
// differs from the first, the key's chain is walked instead. (A bit the
// Reader reuses without a lookup was read for an earlier key, before this
// head, and no bit was cleared since: the page was all-visible when the
// head was read, and a head on an all-visible page is visible to all.)
// PostgreSQL's index-only scans need no such check, since vacuum cannot
// remove an index entry from a page a scan holds pinned, and removes
// index entries before the heap tuples they name.

// Exists reports whether key has a version visible to the transaction, as
// Get would find, without reading the value: from the visibility map alone
// when the key's newest version is on an all-visible page. Errors as Get
// (never ErrNotFound).
func (t *Txn) Exists(key []byte) (bool, error) {
	if err := t.usable(); err != nil {
		return false, err
	}
	if err := checkKey(key); err != nil {
		return false, err
	}
	db := t.db
	db.closeMu.RLock()
	defer db.closeMu.RUnlock()
	if db.closed.Load() {
		return false, ErrClosed
	}
	// The snapshot first, then the index, as Get does and for Get's
	// reasons: an entry looked up before the snapshot may be one vacuum
	// drops for a key deleted for everyone, which a writer then inserts
	// again and commits before the snapshot; the snapshot sees that
	// insert, and the dropped entry does not lead to it. And a REPEATABLE
	// READ transaction's first statement takes its snapshot whether or
	// not the key is there, as every later statement must agree with it.
	snap, release := t.snapshot()
	defer release()
	e := db.idx.get(key)
	if e == nil {
		return false, nil
	}
	var c ioCounts
	defer c.add(db)
	return db.keyVisible(e, snap, t.XID(), db.vm.NewReader(), &c)
}

// ScanKeys calls fn for every key in [start, end) visible to the
// transaction, in key order, as Scan would but without values; a nil end
// means no upper bound, fn returning false stops the scan. Keys whose
// newest version is on an all-visible page are answered from the index and
// the visibility map; Stats counts those (Index.AllVisible) and the others
// (Index.HeapFetches). Under READ COMMITTED the scan uses one snapshot.
// The slice passed to fn belongs to fn; fn may write in this transaction.
// Errors as Scan's.
func (t *Txn) ScanKeys(start, end []byte, fn func(key []byte) bool) error {
	if fn == nil {
		return fmt.Errorf("%w given to Txn.ScanKeys", ErrNilFunction)
	}
	// One key per hold of the close lock: fn, called outside it, may write
	// in this transaction.
	return t.visibleKeys(start, end, 1, func(e *indexEntry) bool { return fn([]byte(e.key())) })
}

// countBatch is how many keys Count checks per hold of the close lock.
const countBatch = 1024

// Count returns the number of keys in [start, end) visible to the
// transaction (an empty or nil end: no upper bound), as a ScanKeys that
// counts. Errors as ScanKeys', with 0.
func (t *Txn) Count(start, end []byte) (int, error) {
	n := 0
	if err := t.visibleKeys(start, end, countBatch, func(*indexEntry) bool { n++; return true }); err != nil {
		return 0, err
	}
	return n, nil
}

// visibleKeys calls fn for the index entry of every key in [start, end)
// visible to the transaction, in key order, until fn returns false. It
// takes one snapshot for the whole range and checks up to batch keys per
// hold of the close lock; fn runs outside that lock, after the keys of its
// batch were checked.
func (t *Txn) visibleKeys(start, end []byte, batch int, fn func(e *indexEntry) bool) error {
	if err := t.usable(); err != nil {
		return err
	}
	t.nest++ // fn may write in t
	defer t.leave()
	db := t.db
	snap, release := t.snapshot()
	defer release()
	r := db.vm.NewReader()
	var c ioCounts
	defer c.add(db)
	visible := make([]*indexEntry, 0, batch)
	part := make([]*indexEntry, 0, batch)
	// check runs the checks of part under the close lock, then fn on the
	// visible ones; false: stop (fn said so, or err is set).
	var err error
	check := func() bool {
		visible = visible[:0]
		// fn may have written in this transaction since the last batch,
		// its first write giving it the xid its own versions carry.
		me := t.XID()
		db.closeMu.RLock()
		if db.closed.Load() {
			db.closeMu.RUnlock()
			err = ErrClosed
			return false
		}
		for _, e := range part {
			ok, kerr := db.keyVisible(e, snap, me, r, &c)
			if kerr != nil {
				db.closeMu.RUnlock()
				err = kerr
				return false
			}
			if ok {
				visible = append(visible, e)
			}
		}
		db.closeMu.RUnlock()
		part = part[:0]
		for _, e := range visible {
			more := fn(e)
			if err = t.abortedInCallback(); err != nil || !more {
				return false
			}
		}
		return true
	}
	stopped := false
	db.idx.ascendRange(start, end, func(e *indexEntry) bool {
		part = append(part, e)
		if len(part) < batch {
			return true
		}
		stopped = !check()
		return !stopped
	})
	if !stopped && len(part) > 0 {
		check()
	}
	return err
}

// ioCounts are one call's fast and slow lookups, added to DB.stats once at
// the end so that concurrent scans do not share a counter per key.
type ioCounts struct{ visible, fetches uint64 }

func (c *ioCounts) add(db *DB) {
	if c.visible > 0 {
		db.stats.indexOnlyVisible.Add(c.visible)
	}
	if c.fetches > 0 {
		db.stats.indexOnlyHeapFetches.Add(c.fetches)
	}
}

// keyVisible reports whether e's key has a version visible to snap (and to
// transaction me's own writes). The caller holds closeMu shared and took
// snap before this call.
func (db *DB) keyVisible(e *indexEntry, snap *visibility.Snapshot, me uint64, r *visibility.Reader, c *ioCounts) (bool, error) {
	head := e.headTID()
	if !head.Valid() {
		return false, nil
	}
	if db.testHeadRead != nil {
		db.testHeadRead()
	}
	bits, err := r.Test(head.Block)
	if err != nil {
		return false, err
	}
	if bits&visibility.AllVisible != 0 && e.headTID() == head {
		c.visible++
		return true, nil
	}
	c.fetches++
	_, found, err := db.visibleVersion(e, snap, me, false) // tuple headers only
	return found, err
}
