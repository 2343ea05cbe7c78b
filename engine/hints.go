package engine

import (
	"errors"

	"mvkv/clog"
	"mvkv/internal/bufpool"
	"mvkv/internal/heap"
	"mvkv/wal"
)

// Hint bits, as PostgreSQL's SetHintBits in heapam_visibility.c.
//
// A reader that needs the CLOG status of a tuple's xmin or xmax first looks
// at the tuple's infomask: XminCommitted/XminInvalid and
// XmaxCommitted/XmaxInvalid cache a final status, and Frozen says xmin is
// committed and older than every snapshot. Only when no hint answers does it
// ask the CLOG, and then it sets the hint so that later readers do not.
//
// Three rules make this safe:
//
//   - A committed hint is set only once the commit record is durable. With
//     synchronous_commit off the CLOG says committed before the WAL holds
//     the commit, and a hinted heap page may reach disk (its page LSN says
//     nothing about that commit): after a crash the hint would resurrect a
//     lost transaction. clog.StatusLSN returns the group LSN of the xid and
//     the hint waits until the WAL is flushed past it (XLogNeedsFlush).
//     Aborted hints need no such wait: a lost abort record means the same.
//   - Hints are set under the page's exclusive content lock, never the
//     shared one the walk read under: the buffer pool copies pages for
//     writing under the shared lock, and Go's race detector rightly objects
//     to bytes changing under a reader. The reader releases its shared lock,
//     takes the exclusive one, checks the tuple still has the xmin (and
//     xmax) it hinted about, and sets the bits. A hint is best effort: if
//     anything changed, it is dropped.
//   - A hint-only change is not WAL-logged, so the first one after a
//     checkpoint's redo point logs a full-page image (recFPIForHint, as
//     PostgreSQL's MarkBufferDirtyHint with checksums on): otherwise a page
//     torn while being written with nothing but a new hint would fail its
//     checksum and have no image in the WAL to be rebuilt from (rule 4).

// xminCommitted reports whether v's xmin committed, from its hints or the
// CLOG, noting in v.hint what the CLOG taught. Only for a finished xmin.
func (db *DB) xminCommitted(v *version) (bool, error) {
	if v.hdr.Infomask&heap.Frozen != 0 {
		db.stats.hintHits.Add(1)
		return true, nil
	}
	return db.hintedCommitted(v, v.hdr.Xmin, heap.XminCommitted, heap.XminInvalid)
}

// xmaxCommitted is xminCommitted for v's xmax.
func (db *DB) xmaxCommitted(v *version) (bool, error) {
	return db.hintedCommitted(v, v.hdr.Xmax, heap.XmaxCommitted, heap.XmaxInvalid)
}

func (db *DB) hintedCommitted(v *version, xid uint64, committed, invalid uint16) (bool, error) {
	switch {
	case v.hdr.Infomask&committed != 0:
		db.stats.hintHits.Add(1)
		return true, nil
	case v.hdr.Infomask&invalid != 0:
		db.stats.hintHits.Add(1)
		return false, nil
	}
	st, lsn, err := db.clog.StatusLSN(xid)
	if errors.Is(err, clog.ErrTruncated) {
		return db.statusAfterTruncation(v, xid, committed, invalid, err)
	}
	if err != nil {
		return false, err
	}
	switch st {
	case clog.StatusCommitted:
		if lsn == 0 || wal.LSN(lsn) <= db.wal.FlushedLSN() {
			v.hint |= committed
		}
		return true, nil
	case clog.StatusAborted:
		v.hint |= invalid
	}
	return false, nil
}

// statusAfterTruncation answers for an xid of v's that the CLOG no longer
// holds. The walk copied v's header before a vacuum froze the tuple (or
// cleared its aborted xmax, or removed it) and truncated the CLOG below
// the xid: PostgreSQL checks visibility under the buffer lock and cannot
// meet this, mvkv's walk reads the header and lets the lock go first. The
// tuple is read again: vacuum truncates only once every xid below the
// point is frozen, cleared or gone from the heap, so the page now answers.
// If the slot no longer holds the version, the walk starts again from the
// key's head (errVanished); if it holds it still without an answer, the
// CLOG's error (truncErr) stands.
func (db *DB) statusAfterTruncation(v *version, xid uint64, committed, invalid uint16, truncErr error) (bool, error) {
	buf, err := db.pool.Get(v.tid.Block)
	if errors.Is(err, bufpool.ErrPastEnd) {
		return false, errVanished // vacuum cut its page off the heap
	}
	if err != nil {
		return false, err
	}
	defer buf.Release()
	buf.RLock()
	defer buf.RUnlock()
	raw, err := heap.Tuple(buf.Page(), v.tid.Slot)
	if err != nil || !holdsVersion(raw, v) {
		return false, errVanished
	}
	mask := heap.TupleInfomask(raw)
	if committed == heap.XminCommitted {
		switch {
		case mask&(heap.Frozen|committed) != 0:
			return true, nil
		case mask&invalid != 0:
			return false, nil
		}
		return false, truncErr
	}
	switch xmax := heap.TupleXmax(raw); {
	case xmax == 0:
		return false, nil // an aborted xmax that freezing cleared
	case xmax != xid:
		return false, errVanished
	case mask&committed != 0:
		return true, nil
	case mask&invalid != 0:
		return false, nil
	}
	return false, truncErr
}

// holdsVersion reports whether raw, a tuple read from v's slot, is still
// v: the same xmin (xids are never reused) and not a chunk.
func holdsVersion(raw []byte, v *version) bool {
	return heap.TupleXmin(raw) == v.hdr.Xmin && heap.TupleInfomask(raw)&heap.Chunk == 0
}

// setHintBits sets the hints a walk learned on v's tuple, if it still holds
// the same xmin (and, for xmax hints, the same xmax). The caller holds
// closeMu shared and no page lock. Failures are ignored: a hint is only a
// cache.
func (db *DB) setHintBits(v *version) {
	bits := v.hint
	v.hint = 0
	if bits == 0 || db.writable() != nil {
		return
	}
	// The interlock before the pin: a heap truncation holds the interlock
	// while it waits for the pins on the pages it cuts off.
	db.ckptInterlock.RLock()
	defer db.ckptInterlock.RUnlock()
	buf, err := db.pool.Get(v.tid.Block)
	if err != nil {
		return
	}
	defer buf.Release()
	buf.Lock()
	defer buf.Unlock()
	raw, err := heap.Tuple(buf.Page(), v.tid.Slot)
	if err != nil || !holdsVersion(raw, v) {
		return
	}
	if heap.TupleXmax(raw) != v.hdr.Xmax {
		bits &^= heap.XmaxCommitted | heap.XmaxInvalid
	}
	mask := heap.TupleInfomask(raw)
	if mask|bits == mask {
		return
	}
	if err := db.logFPIForHint(buf); err != nil {
		return
	}
	heap.SetTupleInfomask(raw, mask|bits)
	buf.MarkDirty()
	db.stats.hintBitsSet.Add(1)
}

// logFPIForHint logs a full-page image of buf's page before its first
// hint-only change after the redo pointer (XLogSaveBufferForHint). The
// caller holds buf's content lock exclusively and ckptInterlock shared.
func (db *DB) logFPIForHint(buf *bufpool.Buffer) error {
	return db.logPageImage(buf, recFPIForHint)
}
