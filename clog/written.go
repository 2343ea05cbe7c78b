package clog

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
)

// A page that has been written once is never all zeros on disk again: every
// write stamps its header (checksum, page number, version). So once a
// checkpoint has written every page holding an xid below its next xid
// (ExtendTo, then Checkpoint), a page in that range that reads as all zeros,
// or a segment file that is missing or too short to hold it, was lost after
// it was written: the statuses it held are gone, and without this check
// every commit on it would read as "in progress", that is, as aborted.

// ExtendTo makes sure every page from the truncation point up to the one
// holding xid will be written by the next Checkpoint even if no status on it
// was ever set, as PostgreSQL's ExtendCLOG zeroes each new page: a page
// never written reads as zeros, and CheckWritten must be able to tell that
// from a page lost after it was written. It loads each page not yet known to
// be on disk and marks it dirty if its image was never stamped. Errors are
// those of loading a page. Safe for concurrent use.
func (c *CLOG) ExtendTo(xid uint64) error {
	if c.closed.Load() {
		return ErrClosed
	}
	last := xidPage(xid)
	first := xidPage(c.oldest.Load())
	if done := c.extended.Load(); done > first {
		first = done
	}
	for p := first; p <= last; p++ {
		b := c.bankFor(p)
		c.lock(b)
		i, _, err := c.slotForLocked(b, p)
		if err != nil {
			b.mu.Unlock()
			if errors.Is(err, ErrTruncated) {
				continue
			}
			return err
		}
		sl := &b.slots[i]
		if isZero(sl.buf[:headerSize]) {
			sl.dirty = true
		}
		b.mu.Unlock()
	}
	// Pages below last are complete (no later xid can land on them); the
	// last one is looked at again next time, which costs one cached lookup.
	for {
		cur := c.extended.Load()
		if cur >= last || c.extended.CompareAndSwap(cur, last) {
			break
		}
	}
	return nil
}

// maxReported bounds the pages CheckWritten lists by name.
const maxReported = 5

// CheckWritten reads from disk, bypassing the buffers, every page holding an
// xid from the truncation point up to but not including below (the next xid
// recorded by the last completed checkpoint, which wrote all those pages
// after ExtendTo), and returns an error wrapping ErrCorrupt when any is
// lost: it names each segment file that is missing and each page that is
// all zeros, cut short by the end of its file or lies past it, with its offset and the xids
// it holds. It also fails each page that fails its checksum (or page
// number, version, reserved bytes) for which mayBeTorn(page) is false (a
// nil mayBeTorn is false for every page): the caller answers false for a page that cannot have
// been written since that checkpoint made it durable (no transaction with
// an xid on it wrote to the WAL after its redo point), so that a failing
// page cannot be a write torn by a crash and is damage, which nothing can
// repair (see "Crash contract" in the package documentation).
// It only reads. Call it before recovery changes anything.
func (c *CLOG) CheckWritten(below uint64, mayBeTorn func(page uint64) bool) error {
	oldest := c.oldest.Load()
	if below <= oldest || below == 0 {
		return nil
	}
	var bad, damaged []string
	nbad, ndamaged := 0, 0
	buf := make([]byte, PageSize)
	missing := map[uint64]bool{}
	for p := xidPage(oldest); p <= xidPage(below-1); p++ {
		segno, off := pageSegment(p)
		name := path.Join(c.dir, segmentName(segno))
		lo, hi := max(p*XidsPerPage, oldest), min((p+1)*XidsPerPage, below)-1
		if missing[segno] {
			continue
		}
		f, err := c.fs.OpenReadOnly(name)
		if errors.Is(err, fs.ErrNotExist) {
			missing[segno] = true
			nbad++
			segHi := min((segno+1)*PagesPerSegment*XidsPerPage, below) - 1
			if len(bad) < maxReported {
				bad = append(bad, fmt.Sprintf("%s is missing (it holds the status of xids %d to %d)", name, lo, segHi))
			}
			continue
		}
		if err != nil {
			return withPath("open", name, err)
		}
		n, err := f.ReadAt(buf, off)
		size, serr := f.Size()
		f.Close()
		if err != nil && !errors.Is(err, io.EOF) {
			return withPathAt("read", name, off, err)
		}
		// A page cut short reads as if padded with zeros, as readPage
		// does: a torn first write whose prefix holds the whole stamped
		// image is a valid page.
		clear(buf[max(n, 0):])
		var why string
		switch {
		case n > 0 && n < PageSize && !isZero(buf):
			// Written whole by that checkpoint, and a page written again
			// in place can be torn but not cut short.
			why = fmt.Sprintf("ends at byte %d, inside the page at offset %d", off+int64(n), off)
		case !isZero(buf):
			if derr := decodePage(buf, p); derr != nil && (mayBeTorn == nil || !mayBeTorn(p)) {
				ndamaged++
				if len(damaged) < maxReported {
					damaged = append(damaged, fmt.Sprintf("%s at offset %d (page %d): %v: the commit statuses of xids %d to %d cannot be trusted", name, off, p, derr, lo, hi))
				}
			}
			continue
		case n == 0 && serr == nil:
			why = fmt.Sprintf("ends at byte %d, before the page at offset %d", size, off)
		case n == 0:
			why = fmt.Sprintf("ends before the page at offset %d", off)
		case n < PageSize:
			why = fmt.Sprintf("page at offset %d is all zeros up to the end of the file at byte %d", off, off+int64(n))
		default:
			why = fmt.Sprintf("page at offset %d is all zeros", off)
		}
		nbad++
		if len(bad) < maxReported {
			bad = append(bad, fmt.Sprintf("%s %s (page %d, the status of xids %d to %d)", name, why, p, lo, hi))
		}
	}
	var parts []string
	if nbad > 0 {
		parts = append(parts, fmt.Sprintf("%s%s: these pages were written by a checkpoint and lost since (every xid below %d had its page written), so the commits they recorded would read as aborted",
			strings.Join(bad, "; "), more(nbad, len(bad)), below))
	}
	if ndamaged > 0 {
		parts = append(parts, fmt.Sprintf("%s%s: these pages were made durable by the last checkpoint and not written since (no transaction with an xid on them wrote to the WAL after its redo point), so they are damaged, not torn by a crash; they hold statuses of xids below %d, the checkpoint's next xid, decided before its redo point, which redo does not replay",
			strings.Join(damaged, "; "), more(ndamaged, len(damaged)), below))
	}
	if len(parts) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrCorrupt, strings.Join(parts, "; and "))
}

// more says how many of n findings were left out of the shown ones.
func more(n, shown int) string {
	if n > shown {
		return fmt.Sprintf("; %d more", n-shown)
	}
	return ""
}
