package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"mvkv/internal/bufpool"
	"mvkv/internal/heap"
	"mvkv/wal"
)

// Heap tail truncation: vacuum gives the empty pages at the end of the heap
// back to the file system, as PostgreSQL's lazy_truncate_heap.
//
// After its passes, a vacuum looks backwards from the last block for pages
// that hold nothing (never initialized, or every line pointer unused). If
// at least truncateMinimum of them, or a truncateFraction of the heap, end
// it (REL_TRUNCATE_MINIMUM and REL_TRUNCATE_FRACTION), it takes the
// checkpoint lock and the checkpoint interlock exclusively, so that no
// checkpoint runs and no writer places a version or extends the heap (as
// PostgreSQL's AccessExclusiveLock on the relation), checks up to 2,048 of
// those pages again from the end, and then, for the empty run it found:
//
//  1. drops their buffers, dirty or not (DropRelationBuffers); a reader
//     still holding one of their numbers (a link to a version vacuum
//     removed) finds the block gone and takes the version as vanished;
//  2. logs HEAP_TRUNCATE (new length, old length) and flushes it, so that
//     the file is never shorter than the WAL says (XLOG_SMGR_TRUNCATE,
//     flushed before smgrtruncate);
//  3. forgets the blocks in the free space map and the insert targets,
//     clears their visibility map bits (a block added again at the same
//     number must not start all-visible), and cuts the heap files back,
//     durably.
//
// It then lets writers in and takes the next 2,048 pages the same way, so
// that writers wait for one step at most (PostgreSQL checks instead whether
// anyone waits for its lock every 20 ms, and stops there).
//
// A failure after the buffers are dropped stops writes: the pool has
// forgotten pages that the files may still hold. Readers go on throughout;
// a Verify in progress holds the prune lock, and the truncation is then
// skipped.
//
// Redo repeats the cut. Records before a HEAP_TRUNCATE that touch a block
// it cuts off change nothing on the page (the block may already be gone
// from the file): recovery notes the truncation records before redo, also
// takes the smallest length they name as the heap length the files must
// hold (a checkpoint's length may be longer), and does not judge pages
// past it as strays.
//
// Rejected: truncating without excluding writers, rechecking only the last
// page (a writer may place a version on any empty page the free space map
// hands out, so every page of the run must be seen empty with writers
// held off); and moving live versions down to empty the tail (VACUUM FULL's
// job, which rewrites every link into them).

const (
	// truncateMinimum and truncateFraction decide whether an empty tail
	// is worth cutting: at least this many pages, or at least this
	// fraction (1/n) of the heap (PostgreSQL's REL_TRUNCATE_MINIMUM and
	// REL_TRUNCATE_FRACTION).
	truncateMinimum  = 1000
	truncateFraction = 16
	// truncateDropWait bounds how long the cut waits for pins on the
	// pages it drops (a reader reading one); it is skipped after that.
	truncateDropWait = time.Second
)

// truncateStep bounds the pages one step of the cut reads again with
// writers held off (16 MiB); a longer tail is cut in several steps, each
// logged, flushed and fsynced on its own. A variable for tests.
var truncateStep uint32 = 2048

// recHeapTruncate cuts the heap back to newBlocks blocks, as PostgreSQL's
// XLOG_SMGR_TRUNCATE. Payload: new length 4, old length 4 (the blocks
// whose visibility map bits redo clears). Part of the format.
const recHeapTruncate wal.RecordType = 32

func encodeHeapTruncate(newBlocks, oldBlocks uint32) []byte {
	b := binary.LittleEndian.AppendUint32(make([]byte, 0, 8), newBlocks)
	return binary.LittleEndian.AppendUint32(b, oldBlocks)
}

func decodeHeapTruncate(data []byte) (newBlocks, oldBlocks uint32, err error) {
	if len(data) != 8 {
		return 0, 0, fmt.Errorf("%w: HEAP_TRUNCATE payload of %d bytes, want 8", errBadRecord, len(data))
	}
	newBlocks, oldBlocks = binary.LittleEndian.Uint32(data), binary.LittleEndian.Uint32(data[4:])
	if newBlocks > oldBlocks || oldBlocks == noBlock {
		return 0, 0, fmt.Errorf("%w: HEAP_TRUNCATE from %d to %d blocks", errBadRecord, oldBlocks, newBlocks)
	}
	return newBlocks, oldBlocks, nil
}

func describeHeapTruncate(data []byte) string {
	n, old, err := decodeHeapTruncate(data)
	if err != nil {
		return "malformed: " + err.Error()
	}
	return fmt.Sprintf("heap cut from %d to %d blocks", old, n)
}

// emptyTail returns the first block of the run of empty pages that ends
// the heap's first nblocks blocks, reading backwards through the
// vacuum's ring down to no lower than floor. A page that cannot be read
// (damaged, say) ends the run: it is not known to be empty, and the
// truncation is not worth failing the vacuum for.
func (v *vacuumRun) emptyTail(nblocks, floor uint32) (uint32, error) {
	blk := nblocks
	for blk > floor {
		if err := v.ctx.Err(); err != nil {
			return blk, err
		}
		buf, err := v.ring.Get(blk - 1)
		if err != nil {
			break
		}
		buf.RLock()
		empty := heap.HoldsNothing(buf.Page())
		buf.RUnlock()
		buf.Release()
		if !empty {
			break
		}
		blk--
	}
	return blk, nil
}

// truncateTail cuts off the empty pages at the end of the heap if there
// are enough of them (see above), and counts them in the run's stats.
func (v *vacuumRun) truncateTail() error {
	db := v.db
	if db.opts.VacuumTruncate != nil && !*db.opts.VacuumTruncate {
		return nil
	}
	nblocks := db.pool.NBlocks()
	first, err := v.emptyTail(nblocks, 0)
	if err != nil {
		return err
	}
	possible := nblocks - first
	if possible == 0 || (possible < truncateMinimum && possible < nblocks/truncateFraction) {
		return nil
	}
	// The cut fsyncs the files it shortens: sync what evictions wrote
	// to them first, without the locks, so that writers do not wait for
	// that (the first step after a load waited 110 ms for it).
	err = db.whileOpen(func() error {
		if err := db.storage.Sync(); err != nil {
			return db.fail(err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	// Cut in steps from the end, letting writers in between, so that a
	// long empty tail does not hold them off for as long as it takes to
	// read it all again.
	var held time.Duration
	for {
		more, h, err := v.cutStep(first)
		held = max(held, h)
		if err != nil {
			return err
		}
		if !more {
			break
		}
	}
	if v.st.PagesTruncated > 0 {
		db.logger.Info("vacuum truncated the heap", "pages", v.st.PagesTruncated, "blocks", db.pool.NBlocks(),
			"longestHold", held)
	}
	return nil
}

// cutStep is one step of truncateTail, with writers and checkpoints held
// off: it reads again at most truncateStep pages back from the heap's
// current end, no lower than first, and cuts off the empty ones at the
// end. more says the whole step was empty and pages below it may be too;
// held is how long writers were held off.
func (v *vacuumRun) cutStep(first uint32) (more bool, held time.Duration, err error) {
	db := v.db
	err = db.whileOpen(func() error {
		db.ckptMu.Lock()
		defer db.ckptMu.Unlock()
		db.ckptInterlock.Lock()
		begin := time.Now()
		defer func() {
			held = time.Since(begin)
			db.ckptInterlock.Unlock()
		}()
		if !db.pruneMu.TryRLock() {
			return nil // Verify is reading every page
		}
		defer db.pruneMu.RUnlock()
		// Writers may have extended the heap or placed versions on the
		// run since it was read: read it again, from the new end.
		old := db.pool.NBlocks()
		if old <= first {
			return nil
		}
		floor := max(first, old-min(old, truncateStep))
		c, err := v.emptyTail(old, floor)
		if err != nil || c == old {
			return err
		}
		if err := db.pool.DropFrom(c, truncateDropWait); err != nil {
			if errors.Is(err, bufpool.ErrBlockPinned) {
				db.logger.Debug("vacuum: heap truncation skipped: a page to cut stayed pinned", "from", c, "blocks", old)
				return nil
			}
			return db.fail(err)
		}
		// The pool has forgotten the pages: from here a failure stops
		// writes, and a restart's redo finishes the cut or finds the
		// pages as the WAL left them.
		lsn, end, err := db.wal.Insert(recHeapTruncate, 0, encodeHeapTruncate(c, old))
		if err == nil {
			db.lastTruncate.Store(uint64(lsn))
			err = db.flushWAL(uint64(end))
		}
		if err != nil {
			return db.fail(err)
		}
		if err := db.cutHeapTail(c, old); err != nil {
			return db.fail(err)
		}
		v.st.PagesTruncated += uint64(old - c)
		more = c == floor && floor > first
		return nil
	})
	return more, held, err
}

// cutHeapTail is what a truncation and its redo do once the buffers past
// cut are gone and the record is durable: the free space map, the insert
// targets and the visibility map forget blocks cut to old-1, and the heap
// files are cut back, durably.
func (db *DB) cutHeapTail(cut, old uint32) error {
	db.fsm.forgetFrom(cut)
	for i := range db.targets.blk {
		if b := db.targets.blk[i].Load(); b != noBlock && b >= cut {
			db.targets.blk[i].CompareAndSwap(b, noBlock)
		}
	}
	if _, err := db.vm.ClearRange(cut, old); err != nil {
		return err
	}
	if err := db.storage.Truncate(cut); err != nil {
		return fmt.Errorf("%w: %w", ErrIOFailure, err)
	}
	return nil
}

// redoHeapTruncate replays HEAP_TRUNCATE: the pages redo may have loaded
// past the new length are dropped (records before this one changed none of
// them; see doomedByTruncate) and the cut is repeated.
func (db *DB) redoHeapTruncate(rec wal.Record) error {
	n, old, err := decodeHeapTruncate(rec.Data)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrCorruption, err)
	}
	db.lastTruncate.Store(uint64(rec.LSN))
	have := db.pool.NBlocks()
	db.redoPeakBlocks = max(db.redoPeakBlocks, have, old)
	if err := db.pool.DropFrom(n, 0); err != nil {
		return err
	}
	for blk := range db.redoTouched {
		if blk >= n {
			delete(db.redoTouched, blk)
		}
	}
	return db.cutHeapTail(n, max(old, have))
}

// heapTruncation is a HEAP_TRUNCATE record found before redo.
type heapTruncation struct {
	lsn    wal.LSN
	blocks uint32
}

// shortestTruncation returns the shortest length a HEAP_TRUNCATE found
// before redo leaves the heap at (noBlock: none): what lies past it is cut
// again by redo, whatever the checkpoint recorded.
func (db *DB) shortestTruncation() uint32 {
	n := uint32(noBlock)
	for _, t := range db.redoTruncations {
		n = min(n, t.blocks)
	}
	return n
}

// doomedByTruncate reports whether a record ending at end that changes
// heap block blk is followed in the WAL by a HEAP_TRUNCATE that cuts blk
// off: redo leaves the page alone, since the block may already be gone
// from the file (PostgreSQL forgets the invalid pages such records touch
// when it replays the truncation). Every page's first change after a redo
// point logs a full-page image, so without this redo would rebuild such a
// page only to drop it; a committed bulk load's pages, which no record
// rebuilds, are the case where the missing block would be an error.
func (db *DB) doomedByTruncate(blk uint32, end wal.LSN) bool {
	for _, t := range db.redoTruncations {
		if t.lsn >= end && blk >= t.blocks {
			return true
		}
	}
	return false
}
