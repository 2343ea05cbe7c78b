package engine

import (
	"encoding/binary"
	"errors"
	"fmt"

	"mvkv/internal/bufpool"
	"mvkv/internal/heap"
	"mvkv/visibility"
	"mvkv/wal"
)

// The visibility map, engine side: where bits are set, cleared, redone and
// checked (docs/DESIGN.md rule 7; the fork itself is visibility.Map).
//
// A set bit says every tuple on the heap page is visible to every
// snapshot. Two things keep that true across a crash, as in PostgreSQL
// since 9.2:
//
//   - Setting (setPageAllVisible, called by vacuum) changes PD_ALL_VISIBLE on
//     the heap page and the map bits under the heap page's exclusive lock
//     and logs one HEAP2_VISIBLE record, whose LSN goes on both pages. The
//     map page cannot reach disk before that record, and the record comes
//     after the commit records of every tuple it vouches for, so a bit on
//     disk is always backed by durable commits; redo sets both again.
//   - Clearing rides on the change: every insert, update and delete on a
//     page with PD_ALL_VISIBLE clears the flag and the map bits before the
//     change is logged, and the heap record carries flagAllVisibleCleared
//     (flagNewAllVisibleCleared for an update's other page). Redo clears
//     the map bits whenever the flag is there, even if the heap page is
//     already up to date, because the map page on disk may be older than
//     the heap page.
//
// The map page LSN moves only on a set. A clear that reaches disk early is
// harmless (a clear bit only costs work); a clear lost in a crash is redone
// from the heap record's flag.
//
// The unlogged mode drops the record and the interlock (the map pool never
// flushes the WAL), as PostgreSQL 8.4 to 9.1 did: a map page can then reach
// disk while the commits its bits rely on, or the heap page's
// PD_ALL_VISIBLE, are lost in the crash, and since changes clear the bit
// only when PD_ALL_VISIBLE is set, nothing clears it afterwards.

// Visibility map modes, the values of Options.VisibilityMap.
const (
	// VisibilityMapCrashSafe WAL-logs every bit it sets (the default).
	VisibilityMapCrashSafe VisibilityMapMode = "crash-safe"
	// VisibilityMapUnlogged sets bits without WAL. UNSAFE; for the
	// experiment only (see Options.VisibilityMap).
	VisibilityMapUnlogged VisibilityMapMode = "unlogged"
)

// errNoFreeMapBuffer is what the visibility map returns when every buffer
// of its own cache is pinned: it matches ErrNoFreeBuffer, whose text
// blames shared_buffers, which does not size that cache.
var errNoFreeMapBuffer error = noFreeMapBuffer{}

type noFreeMapBuffer struct{}

func (noFreeMapBuffer) Error() string {
	return fmt.Sprintf("mvkv: no unpinned visibility map buffer available (all %d are pinned by the statements running at once)", visibility.DefaultBuffers)
}
func (noFreeMapBuffer) Is(target error) bool { return target == ErrNoFreeBuffer }

// visibleRecord is the payload of recHeap2Visible. Part of the format; do
// not change:
//
//	+---------+--------+--------------+
//	| block 4 | bits 1 | cutoffXid 8  |
//	+---------+--------+--------------+
//	0         4        5             13
//
// bits is AllVisible, or AllVisible|AllFrozen. cutoffXid is the horizon the
// caller proved every tuple visible against (PostgreSQL's
// snapshotConflictHorizon); redo does not need it, waldump shows it.
type visibleRecord struct {
	Block     uint32
	Bits      visibility.Bits
	CutoffXid uint64
}

const visibleRecordSize = 13

func encodeVisible(r visibleRecord) []byte {
	b := make([]byte, 0, visibleRecordSize)
	b = binary.LittleEndian.AppendUint32(b, r.Block)
	b = append(b, byte(r.Bits))
	return binary.LittleEndian.AppendUint64(b, r.CutoffXid)
}

func decodeVisible(data []byte) (visibleRecord, error) {
	if len(data) != visibleRecordSize {
		return visibleRecord{}, fmt.Errorf("%w: HEAP2_VISIBLE payload of %d bytes, want %d", errBadRecord, len(data), visibleRecordSize)
	}
	r := visibleRecord{
		Block:     binary.LittleEndian.Uint32(data),
		Bits:      visibility.Bits(data[4]),
		CutoffXid: binary.LittleEndian.Uint64(data[5:]),
	}
	if r.Block == noBlock {
		return r, fmt.Errorf("%w: HEAP2_VISIBLE for block %d", errBadRecord, r.Block)
	}
	if r.Bits != visibility.AllVisible && r.Bits != visibility.AllVisible|visibility.AllFrozen {
		return r, fmt.Errorf("%w: HEAP2_VISIBLE with bits %#x", errBadRecord, r.Bits)
	}
	return r, nil
}

// setPageAllVisible marks heap page buf all-visible (and all-frozen if
// allFrozen): PD_ALL_VISIBLE on the page and the bits in the visibility
// map, as PostgreSQL's visibilitymap_set called from vacuum.
//
// Preconditions: the caller holds db.ckptInterlock shared (taken before the
// content lock, as placeTuple does, so that a checkpoint cannot choose its
// redo point between the full-page-image decision and the record), holds
// buf's content lock exclusively, and has checked that every tuple on the
// page is visible to every snapshot, running or future (xmin committed and
// below cutoffXid, the oldest xmin of every running transaction and open
// snapshot; no xmax, or an aborted one) and, for allFrozen, frozen.
//
// In crash-safe mode it logs a full-page image of the heap page if this is
// its first change since the checkpoint's redo point (heap pages carry
// checksums, so a torn write must be repairable, as PostgreSQL does with
// data checksums), then one HEAP2_VISIBLE record whose end LSN becomes the
// LSN of the heap page and of the map page. In unlogged mode it writes no
// WAL at all. It does nothing if the page and the map already say so.
// Errors: ErrIOFailure and friends from the WAL (writes stop), or an error
// reading the map page.
func (db *DB) setPageAllVisible(buf *bufpool.Buffer, allFrozen bool, cutoffXid uint64) error {
	page, blk := buf.Page(), buf.Block()
	if heap.IsNew(page) {
		return fmt.Errorf("mvkv: setPageAllVisible on uninitialized block %d", blk)
	}
	bits := visibility.AllVisible
	if allFrozen {
		bits |= visibility.AllFrozen
	}
	// The stored bits: under this lock they agree with PD_ALL_VISIBLE,
	// distrusted or not (see checkMapBits).
	have, err := db.vm.TestStored(blk)
	if err != nil {
		return err
	}
	flags := heap.PageFlags(page)
	if flags&heap.PDAllVisible != 0 && have&bits == bits {
		return nil
	}
	if db.vm.Unlogged() {
		// Only the header's flags change, and the header lies in the
		// page's first sector with its checksum, so a torn write of this
		// change alone leaves the old page or the new one whole.
		heap.SetPageFlags(page, flags|heap.PDAllVisible)
		buf.MarkDirty()
		_, err := db.vm.Set(blk, bits, 0)
		return err
	}
	if err := db.logFPIIfNeeded(buf); err != nil {
		return err
	}
	heap.SetPageFlags(page, flags|heap.PDAllVisible)
	buf.MarkDirty()
	_, end, err := db.wal.Insert(recHeap2Visible, 0, encodeVisible(visibleRecord{Block: blk, Bits: bits, CutoffXid: cutoffXid}))
	if err != nil {
		return db.fail(err)
	}
	heap.SetPageLSN(page, uint64(end))
	// If this fails the heap page says all-visible and the map does not,
	// which is allowed (only a set map bit makes a promise); redo of the
	// record sets the bit after a crash.
	_, err = db.vm.Set(blk, bits, uint64(end))
	return err
}

// pageAllVisible reports heap block blk's visibility map bits, for vacuum
// to skip pages that need no work (PostgreSQL's VM_ALL_VISIBLE and
// VM_ALL_FROZEN). A map page that cannot be read counts as no bits set, so
// the caller does the full work. Safe for concurrent use; the answer may
// be stale by the time it is used unless the caller holds the heap page's
// content lock (any change clears the bits under it).
func (db *DB) pageAllVisible(blk uint32) (allVisible, allFrozen bool) {
	b, err := db.vm.Test(blk)
	if err != nil {
		return false, false
	}
	return b&visibility.AllVisible != 0, b&visibility.AllFrozen != 0
}

// clearAllVisibleLocked clears the visibility map bits and PD_ALL_VISIBLE of
// heap page buf if the page has PD_ALL_VISIBLE, and reports whether it did,
// so the change's record can carry flagAllVisibleCleared. The caller holds
// buf's content lock exclusively and logs the change next. The map is
// cleared first: if that fails nothing has changed yet. As in PostgreSQL,
// a page without PD_ALL_VISIBLE is taken to have no map bits set, which is
// what keeps the map untouched on most changes, and what makes a bit that
// reached disk without its PD_ALL_VISIBLE (only possible unlogged) stick.
func (db *DB) clearAllVisibleLocked(buf *bufpool.Buffer) (bool, error) {
	page := buf.Page()
	flags := heap.PageFlags(page)
	if flags&heap.PDAllVisible == 0 {
		return false, nil
	}
	if _, err := db.vm.Clear(buf.Block(), visibility.ValidBits); err != nil {
		return false, err
	}
	heap.SetPageFlags(page, flags&^heap.PDAllVisible)
	buf.MarkDirty()
	return true, nil
}

func clearPDAllVisible(page []byte) {
	heap.SetPageFlags(page, heap.PageFlags(page)&^heap.PDAllVisible)
}

// redoVisible replays HEAP2_VISIBLE: PD_ALL_VISIBLE if the heap page is
// older than the record, and the map bits if the map page is older than
// it. The two are decided apart, since either page may have reached disk
// without the other; a later change's record clears the bits again.
func (db *DB) redoVisible(rec wal.Record) error {
	r, err := decodeVisible(rec.Data)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrCorruption, err)
	}
	err = db.redoBlock(r.Block, rec.End, func(page []byte) error {
		if heap.IsNew(page) {
			return errors.New("HEAP2_VISIBLE for a page that was never initialized")
		}
		heap.SetPageFlags(page, heap.PageFlags(page)|heap.PDAllVisible)
		return nil
	})
	if err != nil {
		return err
	}
	_, err = db.vm.Set(r.Block, r.Bits, uint64(rec.End))
	return err
}

// redoClearVM clears the map bits a heap record's flags name, whatever the
// heap page's LSN.
func (db *DB) redoClearVM(rec wal.Record, hr heapRecord) error {
	var blks []uint32
	if rec.Flags&flagAllVisibleCleared != 0 {
		if hr.Old.Valid() {
			blks = append(blks, hr.Old.Block)
		} else {
			blks = append(blks, hr.New.Block)
		}
	}
	if rec.Flags&flagNewAllVisibleCleared != 0 && hr.New.Valid() {
		blks = append(blks, hr.New.Block)
	}
	for _, b := range blks {
		if _, err := db.vm.Clear(b, visibility.ValidBits); err != nil {
			return err
		}
	}
	return nil
}

// describeVisible renders a HEAP2_VISIBLE payload for describeRecord.
func describeVisible(data []byte) string {
	r, err := decodeVisible(data)
	if err != nil {
		return "malformed: " + err.Error()
	}
	d := fmt.Sprintf("block %d all-visible", r.Block)
	if r.Bits&visibility.AllFrozen != 0 {
		d += " all-frozen"
	}
	return d + fmt.Sprintf(" cutoff xid %d", r.CutoffXid)
}

// describeVMFlags renders a heap record's visibility map flags.
func describeVMFlags(flags uint8) string {
	var d string
	if flags&flagAllVisibleCleared != 0 {
		d += " ALL_VISIBLE_CLEARED"
	}
	if flags&flagNewAllVisibleCleared != 0 {
		d += " NEW_ALL_VISIBLE_CLEARED"
	}
	return d
}
