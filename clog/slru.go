package clog

import (
	"sync"
	"sync/atomic"
)

// BankSize is the number of slots in one SLRU bank, as PostgreSQL 17's
// SLRU_BANK_SIZE. Options.Buffers is rounded up to a multiple of it, and
// page p lives only in bank p mod (Buffers/BankSize), so a lookup searches
// 16 slots, never the whole pool.
const BankSize = 16

// slotState is where a slot's page stands with respect to reading.
type slotState uint8

const (
	// slotEmpty holds no page.
	slotEmpty slotState = iota
	// slotReading is being filled from disk by the goroutine that claimed
	// it; nobody else touches its buffer, and lookups of its page wait on
	// the bank's ioDone.
	slotReading
	// slotValid holds its page. It may also be writing (see slot.writing).
	slotValid
)

// slot is one SLRU buffer. All fields but buf during a read, wbuf during a
// write, and lastUse are guarded by the owning bank's mu.
type slot struct {
	pageno uint64
	state  slotState
	// writing is set while the page's image in wbuf is being written out.
	// The slot stays readable and settable meanwhile (a change re-dirties
	// it), but it is neither evicted nor written again until writing clears.
	writing bool
	// dirty says buf has status bits not yet handed to a write.
	dirty bool
	// lsn is the page's group LSN: the highest LSN passed to SetStatus for
	// the page since it was loaded. It only grows while the page is cached.
	lsn uint64
	// lastUse is the bank clock at the page's last use, for LRU. It is
	// atomic because hits under the shared lock update it (a benign race in
	// PostgreSQL's SlruRecentlyUsed, a typed atomic here).
	lastUse atomic.Uint64
	// buf is the page image: header and status bits. Status bits are read
	// under mu shared and changed under mu exclusive; the header is only
	// meaningful on disk and is stamped into wbuf when writing.
	buf [PageSize]byte
	// wbuf is the image being written, copied from buf under mu so that its
	// checksum matches its bits even while buf keeps changing. Owned by the
	// goroutine that set writing.
	wbuf [PageSize]byte
}

// bank is a set of BankSize slots with its own LRU clock, and its own lock
// under Locking "bank". Under Locking "global" every bank shares one lock,
// as PostgreSQL's single CLogControlLock before version 17.
type bank struct {
	// mu guards the slot table: index, and each slot's fields as described
	// on slot. Status hits take it shared. Fixed at init; it may be shared
	// with other banks, so code holding it must touch only banks whose mu
	// is the same pointer.
	mu *sync.RWMutex
	// ioDone is signalled (Broadcast) whenever a slot of this bank finishes
	// a read or a write. Its Locker is mu (exclusive).
	ioDone *sync.Cond
	// slots is fixed at init.
	slots []slot
	// index maps a page number to the slot holding it (reading or valid).
	// Guarded by mu.
	index map[uint64]int
	// clock is the LRU clock, advanced on every use.
	clock atomic.Uint64
}

func (b *bank) init(n int, mu *sync.RWMutex) {
	b.mu = mu
	b.ioDone = sync.NewCond(mu)
	b.slots = make([]slot, n)
	b.index = make(map[uint64]int, n)
}

// slotForLocked returns the index of the slot holding pageno in state
// slotValid, loading the page if it is not cached, and whether it was cached
// (a hit). Called with b.mu held exclusively; it may release and retake it
// while waiting for or doing I/O, so the caller must not rely on anything it
// read from b before the call. Two goroutines missing the same page never
// load it twice: the first claims a slot in state slotReading under mu and
// the second finds that slot in the index and waits for it.
func (c *CLOG) slotForLocked(b *bank, pageno uint64) (int, bool, error) {
	return c.slotLocked(b, pageno, false)
}

// slotLocked is slotForLocked; with zero set, a page not cached is not read
// from disk but starts all zeros (every xid in progress), dirty, and a
// cached one is zeroed in place (Extend).
func (c *CLOG) slotLocked(b *bank, pageno uint64, zero bool) (int, bool, error) {
	hit := true
	for {
		if i, ok := b.index[pageno]; ok {
			if b.slots[i].state == slotReading {
				hit = false
				c.stats.ioWaits.Add(1)
				b.ioDone.Wait()
				continue
			}
			if zero {
				sl := &b.slots[i]
				clear(sl.buf[:])
				sl.dirty, sl.lsn = true, 0
				c.resetGroupLSNsLocked(pageno, i)
			}
			return i, hit, nil
		}
		hit = false
		// A lookup that passed its truncation check just before a
		// Truncate raised the point must not bring a doomed page back:
		// Truncate publishes the point before it empties the banks under
		// their locks, so every load after that sees it here.
		if end := (pageno + 1) * XidsPerPage; end <= c.oldest.Load() {
			return 0, false, c.truncatedErr(end - 1)
		}
		v, err := c.victimLocked(b)
		if err != nil {
			return 0, false, err
		}
		if v < 0 {
			continue // mu was released; look again
		}
		sl := &b.slots[v]
		if sl.state == slotValid {
			delete(b.index, sl.pageno)
		}
		sl.pageno, sl.state, sl.dirty, sl.lsn = pageno, slotReading, false, 0
		c.resetGroupLSNsLocked(pageno, v)
		b.index[pageno] = v

		var rebuilt bool
		if zero {
			// Nothing of the file's old contents is read: whatever lies
			// there (nothing, zeros, or bytes that are no page at all)
			// is replaced at the page's next write.
			clear(sl.buf[:])
			rebuilt = true
		} else {
			b.mu.Unlock()
			rebuilt, err = c.readPage(pageno, sl.buf[:])
			b.mu.Lock()
		}

		if err != nil {
			sl.state = slotEmpty
			delete(b.index, pageno)
			b.ioDone.Broadcast()
			return 0, false, err
		}
		sl.state = slotValid
		sl.dirty = rebuilt // a page rebuilt in recovery is rewritten whole
		sl.lastUse.Store(b.clock.Add(1))
		b.ioDone.Broadcast()
		return v, false, nil
	}
}

// victimLocked picks a slot to load a new page into, as PostgreSQL's
// SlruSelectLRUPage: an empty slot if there is one, else the least recently
// used valid slot that is not in I/O and does not hold the latest page. It
// returns that slot's index with b.mu held throughout, so the caller can claim
// it. If the chosen slot is dirty it is written first, which releases b.mu:
// then, and when every candidate is busy with I/O (after waiting for one to
// finish), it returns -1 and the caller must look again.
func (c *CLOG) victimLocked(b *bank) (int, error) {
	best, held := -1, -1
	var bestUse, heldUse uint64
	for i := range b.slots {
		sl := &b.slots[i]
		if sl.state == slotEmpty {
			return i, nil
		}
		if sl.state != slotValid || sl.writing || c.isLatest(sl.pageno) {
			continue
		}
		u := sl.lastUse.Load()
		if sl.dirty && c.heldTorn(sl.pageno) {
			if held < 0 || u < heldUse {
				held, heldUse = i, u
			}
			continue
		}
		if best < 0 || u < bestUse {
			best, bestUse = i, u
		}
	}
	if best < 0 && held >= 0 && !b.anyWriting() {
		// Every other slot is a page accepted as torn and not yet
		// checked, and nothing will free one: written after all, as
		// before the hold (only a bank full of such pages gets here).
		best = held
	}
	if best < 0 {
		c.stats.ioWaits.Add(1)
		b.ioDone.Wait()
		return -1, nil
	}
	if !b.slots[best].dirty {
		return best, nil
	}
	if err := c.writeSlotLocked(b, best); err != nil {
		return -1, err
	}
	return -1, nil
}

// writeSlotLocked writes slot i, which must be valid, dirty and not writing,
// to its segment file. Called with b.mu held exclusively; it releases mu for
// FlushWAL and the write, and holds it again on return. The slot is clean on
// success (unless set again meanwhile) and dirty again on failure.
func (c *CLOG) writeSlotLocked(b *bank, i int) error {
	sl := &b.slots[i]
	if err := c.failure(); err != nil {
		return err
	}
	pageno, lsn := sl.pageno, sl.lsn
	sl.writing, sl.dirty = true, false
	copy(sl.wbuf[:], sl.buf[:])

	b.mu.Unlock()
	err := c.flushAndWrite(pageno, lsn, sl.wbuf[:])
	b.mu.Lock()

	sl.writing = false
	if err != nil {
		sl.dirty = true
	}
	b.ioDone.Broadcast()
	return err
}

// flushAndWrite makes the WAL durable up to lsn, unless it already is, then
// stamps and writes the page image img. WAL before data (DESIGN rule 1).
func (c *CLOG) flushAndWrite(pageno, lsn uint64, img []byte) error {
	if lsn > c.flushed.Load() {
		if err := c.opts.FlushWAL(lsn); err != nil {
			return err
		}
		for {
			cur := c.flushed.Load()
			if cur >= lsn || c.flushed.CompareAndSwap(cur, lsn) {
				break
			}
		}
	}
	encodePage(img, pageno)
	if err := c.writePage(pageno, img); err != nil {
		return c.fail(err)
	}
	return nil
}

// anyWriting reports whether a slot of b is being written. Called with
// b.mu held.
func (b *bank) anyWriting() bool {
	for i := range b.slots {
		if b.slots[i].writing {
			return true
		}
	}
	return false
}
