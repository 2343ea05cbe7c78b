package clog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"math"
	"path"
	"strconv"
)

// ErrTruncated is wrapped by the error Status returns for an xid below the
// truncation point (the oldest xid passed to Truncate), and by SetStatus's
// outside recovery: the bits are gone, and "in progress" would be a lie.
var ErrTruncated = errors.New("clog: xid below the truncation point")

// The truncation point file. Part of the format; do not change.
const (
	// oldestName is the file in the CLOG directory that records the
	// truncation point (PostgreSQL keeps oldestClogXid in shared memory and
	// derives it from the checkpoint's oldestXid; mvkv's checkpoint record
	// does not carry one, so the CLOG keeps its own).
	oldestName = "oldest_xid"
	// oldestTmpName is where a new truncation point is written before it is
	// renamed over oldestName.
	oldestTmpName = "oldest_xid.tmp"
	// oldestSize is the size in bytes of the truncation point file.
	oldestSize = 16
	// oldestVersion is the format version in byte 12.
	oldestVersion = 1
)

// crc32c is CRC-32C of b, the checksum of CLOG pages.
func crc32c(b []byte) uint32 { return crc32.Checksum(b, crcTable) }

// encodeOldest returns the truncation point file's bytes:
//
//	 0       4                       12    13          16
//	+-------+-----------------------+-----+-----------+
//	| CRC   | oldest xid            | ver | reserved  |
//	+-------+-----------------------+-----+-----------+
//	  uint32  uint64                  = 1   zero
//
// CRC is CRC-32C of bytes 4..15, little-endian like the xid.
func encodeOldest(xid uint64) []byte {
	b := make([]byte, oldestSize)
	binary.LittleEndian.PutUint64(b[4:12], xid)
	b[12] = oldestVersion
	binary.LittleEndian.PutUint32(b[0:4], crc32c(b[4:]))
	return b
}

// decodeOldest checks and decodes the truncation point file's bytes. The
// error names neither file nor ErrCorrupt; the caller adds both.
func decodeOldest(b []byte) (uint64, error) {
	if len(b) != oldestSize {
		return 0, fmt.Errorf("%d bytes, want %d", len(b), oldestSize)
	}
	if stored, sum := binary.LittleEndian.Uint32(b[0:4]), crc32c(b[4:]); stored != sum {
		return 0, fmt.Errorf("checksum mismatch: stored %08x, computed %08x", stored, sum)
	}
	if b[12] != oldestVersion {
		return 0, fmt.Errorf("unknown version %d", b[12])
	}
	if b[13]|b[14]|b[15] != 0 {
		return 0, fmt.Errorf("reserved bytes %02x%02x%02x are not zero", b[13], b[14], b[15])
	}
	return binary.LittleEndian.Uint64(b[4:12]), nil
}

// loadOldest reads the truncation point at Open: 0 when the file is
// missing (never truncated). A left-over temporary file from a crash during
// Truncate is removed; the file it was to replace is intact either way.
func (c *CLOG) loadOldest() error {
	tmp := path.Join(c.dir, oldestTmpName)
	if err := c.fs.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("clog: %w", err) // the path error names the file
	}
	name := path.Join(c.dir, oldestName)
	f, err := c.fs.OpenReadOnly(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return withPath("open", name, err)
	}
	defer f.Close()
	// One byte more than the format, so a longer file is caught.
	b := make([]byte, oldestSize+1)
	n, err := f.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return withPath("read", name, err)
	}
	xid, err := decodeOldest(b[:n])
	if err != nil {
		return fmt.Errorf("%w: %s at offset 0: %v", ErrCorrupt, name, err)
	}
	c.oldest.Store(xid)
	return nil
}

// storeOldest makes xid the durable truncation point: write a temporary
// file, fsync it, rename it over the old one, fsync the directory (DESIGN
// rule 9), as the engine writes its control file.
func (c *CLOG) storeOldest(xid uint64) error {
	tmp, name := path.Join(c.dir, oldestTmpName), path.Join(c.dir, oldestName)
	f, err := c.fs.Create(tmp)
	if err != nil {
		return withPath("create", tmp, err)
	}
	_, err = f.WriteAt(encodeOldest(xid), 0)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return withPath("write", tmp, err)
	}
	if err := c.fs.Rename(tmp, name); err != nil {
		return fmt.Errorf("clog: rename %s to %s: %w", tmp, name, err)
	}
	c.stats.fileSyncs.Add(2)
	if err := c.fs.SyncDir(c.dir); err != nil {
		return fmt.Errorf("clog: sync directory %s after writing %s: %w", c.dir, name, err)
	}
	return nil
}

// OldestXid returns the truncation point: the highest oldestXid passed to
// Truncate over the CLOG's life (0 if never truncated). Status of any xid
// below it fails with ErrTruncated. Safe for concurrent use.
func (c *CLOG) OldestXid() uint64 { return c.oldest.Load() }

// truncatedErr returns an ErrTruncated error if xid is below the truncation
// point, else nil.
func (c *CLOG) truncatedErr(xid uint64) error {
	if oldest := c.oldest.Load(); xid < oldest {
		return fmt.Errorf("%w: xid %d is below the oldest xid %d", ErrTruncated, xid, oldest)
	}
	return nil
}

// Truncate removes every segment file entirely older than the segment that
// holds oldestXid, as PostgreSQL's TruncateCLOG over SimpleLruTruncate, and
// from then on fails Status for every xid below oldestXid with ErrTruncated.
//
// Precondition: no caller will ever again look up or set the status of an
// xid below oldestXid: every tuple whose xmin or xmax is below it has been
// frozen or hinted (vacuum's frozen horizon), and every such transaction
// has ended. The caller must also have made durable a WAL record of the
// truncation before calling, so that a crash cannot leave the files gone
// but the truncation unlogged; redo calls Truncate again, which is
// harmless.
//
// Steps: the truncation point is written to the oldest_xid file (temporary
// file, fsync, rename, directory fsync) and published, so no new load of a
// page below it starts; the buffers of the doomed segments are emptied
// without writing them, after waiting out reads and writes in progress;
// their open files are closed; the files are removed in ascending order and
// the directory is fsynced. The segment holding oldestXid is never removed,
// nor the one holding the latest page SetStatus has touched, nor anything
// newer. A crash at any step leaves either the old state or a state with
// fewer files, never a needed page gone. Truncate is idempotent: a call
// with an oldestXid at or below the current point changes nothing but
// still removes any segment file below the point left by an interrupted
// call. Calls are serialized; they may run concurrently with other methods
// (but not with Close). Errors: ErrClosed, the sticky I/O failure, or an
// I/O error naming the file.
func (c *CLOG) Truncate(oldestXid uint64) error {
	if c.closed.Load() {
		return ErrClosed
	}
	c.truncMu.Lock()
	defer c.truncMu.Unlock()
	if err := c.failure(); err != nil {
		return err
	}
	if oldestXid > c.oldest.Load() {
		if err := c.storeOldest(oldestXid); err != nil {
			return c.fail(err)
		}
		c.oldest.Store(oldestXid)
		c.stats.truncations.Add(1)
	}
	cutoff, _ := pageSegment(xidPage(c.oldest.Load()))
	if latest := c.latestPage.Load(); latest > 0 {
		if seg, _ := pageSegment(latest - 1); seg < cutoff {
			cutoff = seg
		}
	}
	if cutoff == 0 {
		return nil
	}
	for bi := range c.banks {
		c.dropPages(&c.banks[bi], cutoff*PagesPerSegment)
	}
	return c.removeSegments(cutoff)
}

// dropPages empties every slot of b holding a page below page end, without
// writing it, after waiting for its read or write in progress to finish.
func (c *CLOG) dropPages(b *bank, end uint64) { c.dropPagesIn(b, 0, end) }

// dropPagesIn is dropPages for the pages from lo up to end.
func (c *CLOG) dropPagesIn(b *bank, lo, end uint64) {
	c.lock(b)
	defer b.mu.Unlock()
scan:
	for i := range b.slots {
		sl := &b.slots[i]
		if sl.state == slotEmpty || sl.pageno < lo || sl.pageno >= end {
			continue
		}
		if sl.state == slotReading || sl.writing {
			c.stats.ioWaits.Add(1)
			b.ioDone.Wait()
			goto scan // mu was released: the slot table may have changed
		}
		delete(b.index, sl.pageno)
		sl.state, sl.dirty, sl.lsn = slotEmpty, false, 0
	}
}

// removeSegments closes and removes every segment file numbered below
// cutoff, then fsyncs the directory if it removed any.
func (c *CLOG) removeSegments(cutoff uint64) error {
	_, err := c.removeSegmentsIf(func(segno uint64) bool { return segno < cutoff })
	return err
}

// removeSegmentsIf closes and removes every segment file whose number doom
// accepts, then fsyncs the directory if it removed any; it returns the
// paths removed.
func (c *CLOG) removeSegmentsIf(doom func(segno uint64) bool) ([]string, error) {
	names, err := c.fs.ReadDir(c.dir)
	if err != nil {
		return nil, withPath("list", c.dir, err)
	}
	var removed []string
	for _, n := range names { // sorted, and fixed-width hex sorts numerically
		segno, ok := parseSegmentName(n)
		if !ok || !doom(segno) {
			continue
		}
		c.files.forget(segno)
		name := path.Join(c.dir, n)
		if err := c.fs.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return removed, c.fail(fmt.Errorf("clog: %w", err)) // the path error names the file
		}
		removed = append(removed, name)
	}
	if len(removed) == 0 {
		return nil, nil
	}
	c.stats.segmentsRemoved.Add(uint64(len(removed)))
	c.stats.fileSyncs.Add(1)
	if err := c.fs.SyncDir(c.dir); err != nil {
		return removed, c.fail(fmt.Errorf("clog: sync directory %s after removing segments: %w", c.dir, err))
	}
	return removed, nil
}

// RemoveSegmentsPast removes every segment file numbered above the one
// holding lastXid, and their pages in the buffers without writing them,
// then fsyncs the directory if it removed any; it returns the paths of the
// files removed. It is for the end of recovery, with lastXid the last xid
// handed out before the crash as far as anything durable says (the next
// xid less one): a checkpoint makes the pages up to the next xid durable
// before its own record and the control file that raise that xid, so a
// crash in between leaves a segment of xids whose records never became
// durable. No durable record or page names those xids, their status bits
// mean nothing (a page is started anew when xids reach it), and a file
// past the next xid's segment is otherwise one that another database put
// there, which mvkv verify reports. Must not run while xids are handed out or
// statuses set. Errors: ErrClosed, the sticky I/O failure, or an I/O error
// naming the file (after which the CLOG stops taking updates).
func (c *CLOG) RemoveSegmentsPast(lastXid uint64) ([]string, error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	c.truncMu.Lock()
	defer c.truncMu.Unlock()
	if err := c.failure(); err != nil {
		return nil, err
	}
	last := SegmentOf(lastXid)
	for bi := range c.banks {
		c.dropPagesIn(&c.banks[bi], (last+1)*PagesPerSegment, math.MaxUint64)
	}
	return c.removeSegmentsIf(func(segno uint64) bool { return segno > last })
}

// ClearPast sets the status of every xid from xid to the end of its page
// back to StatusInProgress (PostgreSQL's TrimCLOG). It is for the end of
// recovery, with xid the next xid: a status can reach a page on disk
// without a durable record of its xid (a rollback whose abort record could
// not be logged once the WAL had failed, then a page write), and when a
// crash loses the xid's records it is handed out again, to a transaction
// that must not read as already aborted or committed. The later pages need
// nothing: Extend starts each anew when xids reach it, and
// RemoveSegmentsPast removes later segments. Must not run while xids are
// handed out or statuses set. Errors: ErrClosed, ErrTruncated, ErrCorrupt
// (reading the page), or an I/O or FlushWAL error (evicting a dirty page).
func (c *CLOG) ClearPast(xid uint64) error {
	if xid%XidsPerPage == 0 {
		return nil // Extend starts the page anew
	}
	if c.closed.Load() {
		return ErrClosed
	}
	if err := c.truncatedErr(xid); err != nil {
		return err
	}
	pageno := xidPage(xid)
	b := c.bankFor(pageno)
	c.lock(b)
	defer b.mu.Unlock()
	i, _, err := c.slotForLocked(b, pageno)
	if err != nil {
		return err
	}
	sl := &b.slots[i]
	for x := xid; x < (pageno+1)*XidsPerPage; x++ {
		if setStatus(sl.buf[:], x, StatusInProgress) {
			sl.dirty = true
		}
	}
	return nil
}

// forget drops segment segno's file from the open set, so no later call
// uses the handle of a file about to be removed. An unused handle is closed
// now; one in use (a Checkpoint's fsync holds a reference outside the lock)
// is closed by the last release. Nothing written to it matters any more.
func (s *segFiles) forget(segno uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sf, ok := s.open[segno]
	if !ok {
		return
	}
	delete(s.open, segno)
	if sf.refs > 0 {
		sf.forgotten = true
		return
	}
	sf.f.Close()
}

// parseSegmentName returns the segment number of a segment file name
// (exactly segmentNameLen upper-case hex digits), or false for any other
// name.
func parseSegmentName(n string) (uint64, bool) {
	if len(n) != segmentNameLen {
		return 0, false
	}
	for i := range len(n) {
		if ch := n[i]; (ch < '0' || ch > '9') && (ch < 'A' || ch > 'F') {
			return 0, false
		}
	}
	segno, err := strconv.ParseUint(n, 16, 64)
	return segno, err == nil
}
