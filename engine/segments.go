package engine

import (
	"fmt"
	"slices"
	"strings"

	"mvkv/internal/heap"
)

// Heap segment files, judged at Open (recovery.go) before anything is
// written.
//
// The heap is split into 1 GiB segment files (internal/heap). The storage
// layer fills every block a write skips, so a segment before the last one
// holding data is full, except after a crash: the buffer pool writes pages
// back in any order and the operating system writes files back in any
// order, so a write into a later segment can survive while the last pages
// of an earlier one, written just before it and not yet synced, are lost.
// Those pages were extended after the last checkpoint (which synced every
// page below the length it recorded, HeapBlocks), so redo rebuilds the
// ones that held data and the others were never used. PostgreSQL's md.c
// stops counting a relation at the first short segment (mdnblocks), and
// during recovery extends it to full size when a later block is touched.
// Here:
//
//   - a segment that does not hold every block below HeapBlocks it should
//     (cut short, missing, or short before a later one) is lost data: Open
//     fails, naming the file, its size and what the checkpoint wrote
//     (checkCheckpointedSegments);
//   - a segment short before a later one, holding all of the checkpoint's
//     blocks, is a crash's doing only if something was written since that
//     checkpoint: with nothing in the WAL after its record (a clean
//     shutdown, whose checkpoint counted every block the pool ever
//     extended), nothing could reach the later segment, so it is another
//     copy's file and Open fails naming it; after a crash Open logs a
//     warning naming the files and writes empty pages into the rest of the
//     short segment before redo (shortSegmentsAfterCrash), so that the
//     length the next checkpoint records, which covers them, holds no
//     missing pages. A committed bulk load's pages are durable before its
//     commit record, so one missing from the short segment fails Open.
//   - unless no WAL record since the checkpoint writes a page in the later
//     files: they then hold only pages of zeros (a page with data there
//     that no record rebuilds fails Open as not this database's), so the
//     heap is cut back to the end of the short segment and the later
//     files are emptied, instead of writing up to a gigabyte of empty
//     pages in front of files that hold nothing.

// checkCheckpointedSegments fails with ErrCorruption when a heap segment
// does not hold every block below the length the last checkpoint wrote
// that belongs in it. It returns the layout it read.
func (db *DB) checkCheckpointedSegments(ctrl controlData) (heap.Layout, error) {
	l, err := db.storage.Layout()
	if err != nil {
		return l, err
	}
	last, _ := l.Last()
	for num := uint32(0); uint64(num)*heap.SegmentBlocks < ctrl.HeapBlocks; num++ {
		g := l.Segment(num)
		want := min(uint64(heap.SegmentBlocks), ctrl.HeapBlocks-uint64(g.FirstBlock()))
		if uint64(g.Blocks()) >= want {
			continue
		}
		if num < last.Num {
			next := nextWithData(l, num)
			if g.Missing {
				return l, fmt.Errorf("%w: heap segment %s is missing but is not the last segment (%s follows it, %d bytes); a segment before another must be %d bytes (the last checkpoint wrote %d blocks): the file was lost",
					ErrCorruption, g.Path, next.Path, next.Size, int64(heap.SegmentBlocks*heap.PageSize), ctrl.HeapBlocks)
			}
			return l, fmt.Errorf("%w: heap segment %s is %d bytes but is not the last segment (%s follows it, %d bytes); a segment before another must be %d bytes (the last checkpoint wrote %d blocks): the file was cut short",
				ErrCorruption, g.Path, g.Size, next.Path, next.Size, int64(heap.SegmentBlocks*heap.PageSize), ctrl.HeapBlocks)
		}
		if g.Missing {
			return l, fmt.Errorf("%w: heap segment %s is missing; the last checkpoint wrote %d blocks, %d of them in it: the file was lost",
				ErrCorruption, g.Path, ctrl.HeapBlocks, want)
		}
		return l, fmt.Errorf("%w: heap segment %s is %d bytes; the last checkpoint wrote %d blocks, %d of them in it (%d bytes): the file was cut short",
			ErrCorruption, g.Path, g.Size, ctrl.HeapBlocks, want, int64(want)*heap.PageSize)
	}
	return l, nil
}

// nextWithData returns the first segment after num that holds data.
func nextWithData(l heap.Layout, num uint32) heap.Segment {
	for _, g := range l.Segments[num+1:] {
		if g.Size > 0 {
			return g
		}
	}
	g, _ := l.Last()
	return g
}

// shortSegmentsAfterCrash judges the segments shorter than 1 GiB before a
// later one that checkCheckpointedSegments let pass (each holds all of the
// checkpoint's blocks, so the later ones lie wholly past them). quiet says
// that the WAL holds nothing after the last checkpoint's record from its
// redo point on. It fails with ErrCorruption when the layout cannot be a
// crash's, and otherwise returns the segments to fill before redo, or,
// when the later files hold nothing, the length to cut the heap back to,
// having logged a warning that names them.
func (db *DB) shortSegmentsAfterCrash(ctrl controlData, l heap.Layout, scan *walScan, quiet bool) (fill []heap.Segment, cut uint32, err error) {
	short := l.Short()
	if len(short) == 0 {
		return nil, 0, nil
	}
	first := short[0]
	var later []string
	for _, g := range l.Segments[first.Num+1:] {
		if g.Size > 0 {
			later = append(later, fmt.Sprintf("%s (%d bytes)", g.Path, g.Size))
		}
	}
	what := func(g heap.Segment) string {
		if g.Missing {
			return fmt.Sprintf("heap segment %s is missing", g.Path)
		}
		return fmt.Sprintf("heap segment %s is %d bytes", g.Path, g.Size)
	}
	if quiet {
		// The clean shutdown's checkpoint counted every block the pool
		// had extended, and nothing was logged since: no page of this
		// database lies past that length, let alone in a later segment.
		return nil, 0, fmt.Errorf("%w: %s but is not the last segment: %s follow(s) it, past the %d blocks the last checkpoint wrote, and the WAL holds nothing after that checkpoint's record (a clean shutdown), so nothing since extended the heap: the later file(s) are not this database's (a segment file from another copy?); with the database closed, move them away",
			ErrCorruption, what(first), strings.Join(later, ", "), ctrl.HeapBlocks)
	}
	// A committed bulk load's pages were synced before its commit record:
	// one missing from a short segment was lost, not left unwritten.
	for _, g := range short {
		from, to := g.FirstBlock()+g.Blocks(), g.FirstBlock()+heap.SegmentBlocks
		for _, r := range scan.bulk {
			if r[0] < to && r[1] > from {
				return nil, 0, fmt.Errorf("%w: %s but is not the last segment (%s follow(s) it); the bulk load committed after the last checkpoint wrote blocks %d to %d, durably before its commit, and blocks %d to %d of them are missing from it: the file was cut short",
					ErrCorruption, what(g), strings.Join(later, ", "), r[0], r[1]-1, max(r[0], from), min(r[1], to)-1)
			}
		}
	}
	// Does the WAL since the checkpoint write a page past the short
	// segment? Pages the pool extended there and used have their first
	// change logged whole; without one, the later files hold nothing of
	// this database's that redo knows of.
	laterStart := first.FirstBlock() + heap.SegmentBlocks
	logged := slices.ContainsFunc(scan.bulk, func(r [2]uint32) bool { return r[1] > laterStart })
	for blk := range scan.rebuilt {
		if blk >= laterStart {
			logged = true
			break
		}
	}
	var names []string
	for _, g := range short {
		names = append(names, what(g))
	}
	if !logged {
		// No record since the checkpoint writes a page out there, and
		// checkStrayHeapPages found every page past the checkpoint's
		// length that no record rebuilds all zeros or empty: the later
		// files hold nothing. Filling the gap before them would write up to
		// a gigabyte of empty pages for a file of zeros (a stray one,
		// or pages a crash left unwritten); cutting the heap back to
		// the end of the short segment loses nothing instead.
		cut := first.FirstBlock() + first.Blocks()
		db.logger.Warn("heap segment shorter than 1 GiB before later ones after a crash, and the later ones hold nothing but pages of zeros (or a partial page, read as never written) that no WAL record since the last checkpoint writes: emptying them",
			"short", strings.Join(names, "; "), "later", strings.Join(later, ", "), "checkpointBlocks", ctrl.HeapBlocks, "heapBlocks", cut)
		return nil, cut, nil
	}
	db.logger.Warn("heap segment shorter than 1 GiB before a later one after a crash: filling it with empty pages",
		"short", strings.Join(names, "; "), "later", strings.Join(later, ", "), "checkpointBlocks", ctrl.HeapBlocks,
		"note", "blocks extended after the last checkpoint and not all written before the crash; redo rewrites the ones that held data, the rest are written empty")
	return short, 0, nil
}

// cutEmptyLaterSegments cuts the heap back to cut blocks, emptying the
// later segment files that shortSegmentsAfterCrash found holding only
// zeros, and returns the pages of zeros below cut.
func (db *DB) cutEmptyLaterSegments(cut uint32, zero []uint32) ([]uint32, error) {
	if err := db.truncateHeap(cut); err != nil {
		return nil, err
	}
	db.recovery.EmptiedSegmentsFrom = cut
	return slices.DeleteFunc(zero, func(blk uint32) bool { return blk >= cut }), nil
}

// truncateHeap cuts the heap files and the buffer pool's count of blocks
// back to n, for recovery before redo (no buffer holds a block yet).
func (db *DB) truncateHeap(n uint32) error {
	if err := db.storage.Truncate(n); err != nil {
		return fmt.Errorf("%w: %w", ErrIOFailure, err)
	}
	return db.pool.Truncate(n)
}

// fillShortSegments writes empty pages into the rest of every segment
// shortSegmentsAfterCrash returned; the end-of-recovery checkpoint, which
// a crash always requests, syncs them before it records a heap length
// that covers them.
func (db *DB) fillShortSegments(short []heap.Segment) error {
	for _, g := range short {
		n, err := db.storage.FillSegment(g.Num)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrIOFailure, err)
		}
		db.recovery.FilledSegments = append(db.recovery.FilledSegments, g.Path)
		db.recovery.FilledBlocks += uint64(n)
	}
	return nil
}
