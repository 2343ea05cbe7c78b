package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"

	"mvkv/vfs"
)

// readChunk is how many bytes the Reader fetches from a segment per read.
const readChunk = 256 << 10

// Reader reads records in LSN order, crossing segment boundaries, and finds
// the end of the valid log the way PostgreSQL's recovery does: the first
// record whose length, self-LSN or CRC does not check out, or a missing
// next segment, ends the log (io.EOF). A next segment file whose header
// does not check out or does not name it, or of another size than the
// segment size, is ErrCorrupt naming the file and offset (no crash leaves
// one, see the package doc), and so is a next segment of another log (its
// header's log identifier differs). Every length read from disk is bounded
// before use.
//
// A Reader is not safe for concurrent use.
type Reader struct {
	fs  vfs.FS
	dir string

	segSize    int64
	maxPayload int
	seg        LSN      // start LSN of the segment being read
	f          vfs.File // open file of seg; nil once at EOF
	pos        LSN      // where the next record starts

	buf    []byte // bytes of f from file offset bufOff
	bufOff int64

	eof     bool
	err     error // sticky error other than io.EOF
	dropped int64
	past    PastEnd // valid records found after the end (checkDurableAfter)
	// borrow: Data aliases buf (SetBorrowData).
	borrow bool
	// tag is the log's identifier, from the first segment read that has
	// one; a later segment with another is from another log.
	tag uint16
	// stop, when stopSet, is where the read ends (SetStop).
	stop    LSN
	stopSet bool
}

// SetBorrowData makes Next return records whose Data aliases the reader's
// read buffer, valid only until the next call to Next or Close, instead of
// a copy. For a pass that only looks at each record once, as recovery's
// first pass that finds the end of the log: copying every payload of
// hundreds of megabytes of WAL cost recovery more than checking it.
func (r *Reader) SetBorrowData(on bool) { r.borrow = on }

// SetStop makes the read end at stop, for reading a log that a live writer
// is still appending to: stop must be a point the writer had made durable
// before the read began (its FlushedLSN then). Next returns io.EOF once the
// read reaches stop, and the log from the start up to stop must be whole
// and valid: a log that ends before it is ErrCorrupt, naming the file and
// offset. Nothing past stop is looked at, because the checks of where an
// unbounded read ends (a later record or segment whose durable-LSN mark
// lies past the end found) would take the writer's records and prepared
// segments, which appear while the read goes on, for records lost after
// they were durable. The caller keeps segments from being removed during
// the read. DroppedBytes is 0 after such a read. Call before the first
// Next.
func (r *Reader) SetStop(stop LSN) { r.stop, r.stopSet = stop, true }

// NewReader opens the log in dir for reading from start, which must be the
// LSN of a record or the End of a previous read; 0 means the first record of
// the oldest segment present. An empty or missing directory yields a Reader whose first
// Next returns io.EOF and whose End is start.
//
// NewReader returns an error wrapping fs.ErrNotExist when start precedes the
// oldest segment (it was removed), and ErrCorrupt, naming the file, when the
// header of the segment start lies in is invalid.
func NewReader(fsys vfs.FS, dir string, start LSN) (*Reader, error) {
	r := &Reader{fs: fsys, dir: dir, pos: start}
	segs, _, err := listSegments(fsys, dir)
	if err != nil {
		return nil, err
	}
	if len(segs) == 0 {
		r.eof = true
		return r, nil
	}
	// Pick the segment holding start: the last one named at or below it.
	i := len(segs) - 1
	if start != 0 {
		for i >= 0 && segs[i] > start {
			i--
		}
		if i < 0 {
			return nil, r.missingSegment(segs[0], start, "the oldest segment present is "+segmentName(segs[0]))
		}
	} else {
		i = 0
	}
	// A start on a segment boundary is the End of a full previous segment;
	// read from there, so that the next segment is judged as the end of
	// that one (absent or prepared ahead: the end of the log; damaged:
	// corruption, see badHeader), as a read that crossed into it would.
	if start != 0 && segs[i] == start && i > 0 {
		if h, err := r.peekHeader(segs[i-1]); err == nil && h.start+LSN(h.size) == start {
			i--
		}
	}
	if err := r.openSegment(segs[i]); err != nil {
		return nil, err
	}
	if start == 0 || r.pos < r.seg+segHeaderSize {
		r.pos = r.seg + segHeaderSize
	}
	if r.pos > r.seg+LSN(r.segSize) {
		r.closeFile()
		return nil, r.missingSegment(r.seg, start, "the segment before it is "+segmentName(r.seg))
	}
	return r, nil
}

// missingSegment builds NewReader's error for a start whose segment file is
// not in the directory, naming that file when the segment size can be read
// from known, a segment that is present.
func (r *Reader) missingSegment(known, start LSN, why string) error {
	size := r.segSize
	if size == 0 {
		if h, err := r.peekHeader(known); err == nil {
			size = h.size
		}
	}
	if size <= 0 {
		return fmt.Errorf("wal: the segment in %s holding %s is missing (%s): %w", r.dir, start, why, fs.ErrNotExist)
	}
	name, _ := SegmentFile(start, size)
	return fmt.Errorf("wal: %s, which holds %s, is missing (%s): %w",
		path.Join(r.dir, name), start, why, fs.ErrNotExist)
}

// peekHeader reads and checks the header of the segment named by start.
func (r *Reader) peekHeader(start LSN) (segHeader, error) {
	f, err := r.fs.OpenReadOnly(path.Join(r.dir, segmentName(start)))
	if err != nil {
		return segHeader{}, err
	}
	defer f.Close()
	return readSegHeader(f, start, 0)
}

// readSegHeader reads the header of f and checks that it names start and,
// when size is non-zero, that it has that segment size. The error wraps
// ErrCorrupt and names the file and offset.
func readSegHeader(f vfs.File, start LSN, size int64) (segHeader, error) {
	var b [segHeaderSize]byte
	if _, err := f.ReadAt(b[:], 0); err != nil {
		if errors.Is(err, io.EOF) {
			return segHeader{}, fmt.Errorf("%w: %s at offset 0: short segment header", ErrCorrupt, f.Name())
		}
		return segHeader{}, withPath("read", f.Name(), err)
	}
	h, err := decodeSegHeader(b[:])
	if err != nil {
		return segHeader{}, fmt.Errorf("%w: %s at offset 0: %v", ErrCorrupt, f.Name(), err)
	}
	if h.start != start {
		return segHeader{}, fmt.Errorf("%w: %s at offset 0: header names segment %s", ErrCorrupt, f.Name(), segmentName(h.start))
	}
	if size != 0 && h.size != size {
		return segHeader{}, fmt.Errorf("%w: %s at offset 0: segment size %d, want %d", ErrCorrupt, f.Name(), h.size, size)
	}
	return h, nil
}

// openSegment opens the segment starting at start as the first one read,
// learning the segment size from its header.
func (r *Reader) openSegment(start LSN) error {
	f, err := r.fs.OpenReadOnly(path.Join(r.dir, segmentName(start)))
	if err != nil {
		return fmt.Errorf("wal: open segment: %w", err)
	}
	h, err := readSegHeader(f, start, 0)
	if err != nil {
		f.Close()
		return err
	}
	r.f, r.seg, r.segSize, r.tag = f, start, h.size, h.tag
	r.maxPayload = MaxPayload(h.size)
	r.buf = r.buf[:0]
	return nil
}

// Next returns the next record. At the end of the valid log it returns
// io.EOF, after which End and DroppedBytes describe where the log ends; other
// errors are I/O errors or ErrCorrupt. Segment-switch records are consumed
// silently. The returned Data is a fresh slice the caller owns, unless
// SetBorrowData is on.
func (r *Reader) Next() (Record, error) {
	for {
		if r.err != nil {
			return Record{}, r.err
		}
		if r.eof {
			return Record{}, io.EOF
		}
		if r.stopSet && r.pos >= r.stop {
			r.eof = true
			r.closeFile()
			return Record{}, io.EOF
		}
		off := int64(r.pos - r.seg)
		room := r.segSize - off
		if room < recHeaderSize {
			// Too little room for a header: an implicit segment switch.
			r.advance()
			continue
		}
		hb, err := r.bytesAt(off, recHeaderSize)
		if err != nil {
			return Record{}, r.fail(err)
		}
		h, ok := decodeRecHeader(hb, r.pos, room, r.maxPayload)
		if !ok {
			r.finish()
			continue
		}
		hdr := [recHeaderSize]byte(hb)
		body, err := r.bytesAt(off+recHeaderSize, h.n)
		if err != nil {
			return Record{}, r.fail(err)
		}
		if len(body) < h.n || !checkRecord(hdr[:], body, h) {
			r.finish()
			continue
		}
		size := recordSize(h.n)
		if h.typ == typeSwitch {
			// The loop's top checks the stop, then moves on to the next
			// segment (no room left).
			r.pos = r.seg + LSN(r.segSize)
			continue
		}
		rec := Record{
			LSN:   r.pos,
			End:   r.pos + LSN(size),
			Type:  h.typ,
			Flags: h.flags,
			XID:   h.xid,
			Data:  body,
		}
		if !r.borrow {
			rec.Data = append([]byte(nil), body...)
		}
		r.pos = rec.End
		return rec, nil
	}
}

// bytesAt returns up to n bytes of the current segment at file offset off,
// fewer only where the file ends. The slice aliases the read buffer.
func (r *Reader) bytesAt(off int64, n int) ([]byte, error) {
	if off >= r.bufOff && off+int64(n) <= r.bufOff+int64(len(r.buf)) {
		return r.buf[off-r.bufOff : off-r.bufOff+int64(n)], nil
	}
	want := max(n, readChunk)
	if rest := r.segSize - off; int64(want) > rest {
		want = int(rest)
	}
	if cap(r.buf) < want {
		r.buf = make([]byte, want)
	}
	r.buf = r.buf[:want]
	got, err := r.f.ReadAt(r.buf, off)
	if err != nil && !errors.Is(err, io.EOF) {
		r.buf = r.buf[:0]
		return nil, withPathAt("read", r.f.Name(), off, err)
	}
	r.buf, r.bufOff = r.buf[:got], off
	if got < n {
		return r.buf, nil
	}
	return r.buf[:n], nil
}

func (r *Reader) fail(err error) error {
	r.err = err
	r.closeFile()
	return err
}

// advance moves to the next segment after the current one is used up. A
// missing next segment ends the log at r.pos; one of another size, with a
// header that does not check out, or of another log, is ErrCorrupt.
func (r *Reader) advance() {
	next := r.seg + LSN(r.segSize)
	f, err := r.fs.OpenReadOnly(path.Join(r.dir, segmentName(next)))
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			r.err = fmt.Errorf("wal: open next segment: %w", err)
			r.closeFile()
			return
		}
		if cerr := r.checkAfterMissing(next); cerr != nil {
			r.err = cerr
			r.closeFile()
			return
		}
		r.finish()
		return
	}
	if n, err := f.Size(); err == nil && n != r.segSize {
		f.Close()
		r.err = r.wrongSize(next, n)
		r.closeFile()
		return
	}
	h, err := readSegHeader(f, next, r.segSize)
	if err != nil {
		f.Close()
		if !errors.Is(err, ErrCorrupt) {
			// Not the header's fault: a read that failed.
			r.err = err
			r.closeFile()
			return
		}
		if cerr := r.checkLaterSegment(next); cerr != nil {
			r.err = cerr
		} else if cerr := r.checkSegmentsBeyond(); cerr != nil {
			// A later file also shows that the log went on into next.
			r.err = cerr
		} else {
			r.err = r.badHeader(next)
		}
		r.closeFile()
		return
	}
	if h.tag != 0 && r.tag != 0 && h.tag != r.tag {
		// Not the end of this log but a segment of another one, with
		// records that pass every check at these LSNs: replaying them
		// would mix two databases.
		f.Close()
		r.err = fmt.Errorf("%w: %s at offset 6: the segment belongs to another write-ahead log (log identifier %#04x; the segments before it have %#04x): a segment copied from another database's WAL, so the log from %s on is not this database's",
			ErrCorrupt, path.Join(r.dir, segmentName(next)), h.tag, r.tag, next)
		r.closeFile()
		return
	}
	if r.tag == 0 {
		r.tag = h.tag
	}
	r.closeFile()
	r.f, r.seg, r.pos = f, next, next+segHeaderSize
	r.buf, r.bufOff = r.buf[:0], 0
}

// checkLaterSegment is called when the segment at bad has an invalid
// header, which is corruption in any case (badHeader). If the segment
// itself holds a valid record (its CRC holds and it names its own
// position), or the segment after it holds a valid first record, the log
// demonstrably went on past the header, and the error says so.
func (r *Reader) checkLaterSegment(bad LSN) error {
	if lsn := r.validRecordIn(bad); lsn != 0 {
		return fmt.Errorf("%w: %s at offset 0: the segment header is damaged, but the segment holds valid records of this log (the first at %s), which would be lost with it",
			ErrCorrupt, path.Join(r.dir, segmentName(bad)), lsn)
	}
	later := bad + LSN(r.segSize)
	if !r.firstRecordValid(later) {
		return nil
	}
	return fmt.Errorf("%w: %s at offset 0: bad segment header followed by valid segment %s",
		ErrCorrupt, path.Join(r.dir, segmentName(bad)), segmentName(later))
}

// wrongSize is the error for the segment file at seg, n bytes, not the
// segment size: segments get their final name only once written whole, so
// no crash leaves one of another size.
func (r *Reader) wrongSize(seg LSN, n int64) error {
	what, so := "cut short of", "is lost"
	if n > r.segSize {
		// Bytes appended: the records may be whole, but the file is
		// not one this log wrote.
		what, so = "longer than", "cannot be trusted"
	}
	return fmt.Errorf("%w: %s is %d bytes, %s the %d-byte segment size (no crash makes a segment of another size), so the log from %s on %s%s",
		ErrCorrupt, path.Join(r.dir, segmentName(seg)), n, what, r.segSize, r.pos, so, r.markNote())
}

// checkNextFile is called where the log ends inside the current segment.
// The segment file after it may be absent, or a segment prepared ahead
// (a valid header over zeros, or records a torn write left, which
// checkDurableAfter judged); one of another size or with a header that
// does not check out is damage no crash makes, as advance finds it
// (wrongSize, badHeader).
func (r *Reader) checkNextFile() error {
	next := r.seg + LSN(r.segSize)
	f, err := r.fs.OpenReadOnly(path.Join(r.dir, segmentName(next)))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("wal: open next segment: %w", err)
	}
	n, err := f.Size()
	if err != nil {
		f.Close()
		return fmt.Errorf("wal: size of %s: %w", f.Name(), err)
	}
	if n != r.segSize {
		f.Close()
		return r.wrongSize(next, n)
	}
	_, herr := readSegHeader(f, next, r.segSize)
	f.Close()
	if herr == nil {
		return nil
	}
	if !errors.Is(herr, ErrCorrupt) {
		return herr // a read that failed
	}
	if err := r.checkLaterSegment(next); err != nil {
		return err
	}
	return r.badHeader(next)
}

// badHeader is the error for the segment file at seg, after the one the
// log ends in, of the segment size and under its final name, whose header
// does not check out, when neither it nor the segment after it holds a
// valid record and no later file of the log is present (those cases have
// checkLaterSegment's and checkSegmentsBeyond's own words, which advance
// and finish ask first). No crash leaves that file: the only
// code that makes a segment, createSegment, writes the header and zeros
// into a temporary file and fsyncs it before renaming it into place, so
// whatever name survives a crash stands for the whole synced file; records
// and OpenWriter's zeroing are written at offset 32 and after, never over
// the header (sectors are written whole, as MemFS's TearLast models it);
// and the Writer never renames an old segment ahead. So the file was
// zeroed or overwritten after it was made, or put there by hand, and what
// it held is unknown: a segment prepared and never written, or one that
// held acknowledged commits. Ending the log here would drop the second
// without a word, and OpenWriter would then overwrite the file.
func (r *Reader) badHeader(seg LSN) error {
	name := path.Join(r.dir, segmentName(seg))
	return fmt.Errorf("%w: %s at offset 0: the segment header %s, in a file of the full segment size under its final name, which no crash leaves (a segment is renamed into place only after its header and zeros are written and fsynced): the file was zeroed, overwritten or replaced after the log made it, and whatever it held from %s on is lost, commits acknowledged in it among them unless it was prepared and never written (the log read so far ends at %s, in %s). To open the database without it, keep a copy of the directory, then remove %s and every segment file after it: the log then ends at %s",
		ErrCorrupt, name, r.headerFault(seg), seg+segHeaderSize, r.pos, path.Base(r.f.Name()), name, r.pos)
}

// headerFault says what is wrong with the header of the segment file at
// seg, for badHeader.
func (r *Reader) headerFault(seg LSN) string {
	f, err := r.fs.OpenReadOnly(path.Join(r.dir, segmentName(seg)))
	if err != nil {
		return fmt.Sprintf("cannot be read (%v)", err)
	}
	defer f.Close()
	var b [segHeaderSize]byte
	if _, err := f.ReadAt(b[:], 0); err != nil {
		return fmt.Sprintf("cannot be read (%v)", err)
	}
	if b == [segHeaderSize]byte{} {
		return "is all zeros"
	}
	h, err := decodeSegHeader(b[:])
	switch {
	case err != nil:
		return fmt.Sprintf("is damaged (%v)", err)
	case h.start != seg:
		return "names segment " + segmentName(h.start)
	case h.size != r.segSize:
		return fmt.Sprintf("gives a segment size of %d bytes, not the log's %d", h.size, r.segSize)
	}
	return "does not check out"
}

// validRecordIn returns the LSN of the first valid record in the segment
// file of seg, whatever its header says, or 0 if it holds none: a record
// whose header names its own position and whose CRC holds (stale bytes
// from elsewhere in the log name another position). It reads the file in
// chunks, each record's body apart.
func (r *Reader) validRecordIn(seg LSN) LSN {
	f, err := r.fs.OpenReadOnly(path.Join(r.dir, segmentName(seg)))
	if err != nil {
		return 0
	}
	defer f.Close()
	buf := make([]byte, readChunk+recHeaderSize)
	for base := int64(segHeaderSize); base < r.segSize; base += readChunk {
		n, err := f.ReadAt(buf, base)
		for i := 0; i+recHeaderSize <= n && i < readChunk; i += alignment {
			off := base + int64(i)
			lsn := seg + LSN(off)
			hb := buf[i : i+recHeaderSize]
			if LSN(binary.LittleEndian.Uint64(hb[8:])) != lsn {
				continue
			}
			h, ok := decodeRecHeader(hb, lsn, r.segSize-off, r.maxPayload)
			if !ok {
				continue
			}
			body := make([]byte, h.n)
			if m, _ := f.ReadAt(body, off+recHeaderSize); m == h.n && checkRecord(hb, body, h) {
				return lsn
			}
		}
		if err != nil {
			return 0
		}
	}
	return 0
}

// checkAfterMissing is called when the segment at missing does not exist.
// Segments are created in order and removed only from the front, below the
// redo point, so a later segment that holds a valid first record means the
// missing one was lost, and with it every commit it held: corruption, not
// the end of the log. (A segment prepared ahead of the log holds no valid
// record, and one reused from an earlier position names another LSN.)
func (r *Reader) checkAfterMissing(missing LSN) error {
	names, err := r.fs.ReadDir(r.dir)
	if err != nil {
		return withPath("list", r.dir, err)
	}
	for _, n := range names {
		start, ok := parseSegmentName(n)
		if !ok || start <= missing {
			continue
		}
		if r.firstRecordValid(start) {
			return fmt.Errorf("%w: %s is missing, but segment %s after it holds valid records",
				ErrCorrupt, path.Join(r.dir, segmentName(missing)), n)
		}
		// Segments are created in order and removed from the front, or
		// (past the end of the log) newest first, so a segment present
		// above a missing one means the missing one was lost. Its
		// durable-LSN mark, if it has one, bounds what was lost.
		h, err := r.peekHeader(start)
		if err != nil || h.size != r.segSize {
			continue
		}
		lost := fmt.Sprintf("the log from %s on is lost", r.pos)
		if h.durable > r.pos {
			lost = fmt.Sprintf("the log from %s to at least %s, which was durable when %s was prepared, is lost", r.pos, h.durable, n)
		}
		return fmt.Errorf("%w: %s is missing, but segment %s after it exists (segments are created in order and never removed from the middle): %s",
			ErrCorrupt, path.Join(r.dir, segmentName(missing)), n, lost)
	}
	return nil
}

// firstRecordValid reports whether the segment starting at seg exists, has a
// valid header and a valid first record.
func (r *Reader) firstRecordValid(seg LSN) bool {
	f, err := r.fs.OpenReadOnly(path.Join(r.dir, segmentName(seg)))
	if err != nil {
		return false
	}
	defer f.Close()
	if _, err := readSegHeader(f, seg, r.segSize); err != nil {
		return false
	}
	hb := make([]byte, recHeaderSize)
	if _, err := f.ReadAt(hb, segHeaderSize); err != nil {
		return false
	}
	h, ok := decodeRecHeader(hb, seg+segHeaderSize, r.segSize-segHeaderSize, r.maxPayload)
	if !ok {
		return false
	}
	body := make([]byte, h.n)
	if _, err := f.ReadAt(body, segHeaderSize+recHeaderSize); err != nil && !(errors.Is(err, io.EOF) && h.n == 0) {
		return false
	}
	return checkRecord(hb, body, h)
}

// checkDurableAfter is called where the log seems to end inside the current
// segment, at r.pos. It looks for evidence that the log was durable past
// that point (DESIGN rule 5): a valid record later in the segment whose
// durable-LSN mark lies above r.pos, or a valid first record in the next
// segment. Either makes the bad record corruption, reported with its file
// and offset.
func (r *Reader) checkDurableAfter() error {
	bad, name := r.pos, r.f.Name()
	for off := int64(bad-r.seg) + 8; off+recHeaderSize <= r.segSize; off += 8 {
		hb, err := r.bytesAt(off, recHeaderSize)
		if err != nil || len(hb) < recHeaderSize {
			break
		}
		lsn := r.seg + LSN(off)
		if named := binary.LittleEndian.Uint64(hb[8:]); named == 0 {
			// Most often the zeros of the segment's unused tail, or of
			// a page image. A record names its own position, never 0,
			// in its bytes 8 to 16: of the offsets from off on, only
			// one whose bytes 8 to 16 reach past the run of zeros
			// from off+8 (looked at up to scanChunk bytes ahead) can
			// start one. The run is measured once, not again at each
			// offset inside it.
			if z, err := r.bytesAt(off, int(min(scanChunk, r.segSize-off))); err == nil && len(z) >= 16 {
				run := 8 + firstNonZero(z[8:]) // zeros from off+8 to off+run
				off += int64(run-16) / 8 * 8   // the loop adds 8
			}
			continue
		} else if LSN(named) != lsn {
			continue // cheap filter: a record names its own position
		}
		h, ok := decodeRecHeader(hb, lsn, r.segSize-off, r.maxPayload)
		if !ok {
			continue
		}
		hdr := [recHeaderSize]byte(hb)
		body, err := r.bytesAt(off+recHeaderSize, h.n)
		if err != nil || len(body) < h.n || !checkRecord(hdr[:], body, h) {
			continue
		}
		if h.durable > bad {
			return fmt.Errorf("%w: %s at offset %d%s: the record at %s is damaged, but the valid record at %s says the log was durable up to %s",
				ErrCorrupt, name, int64(bad-r.seg), r.cutShort(), bad, lsn, h.durable)
		}
		if h.typ != typeSwitch {
			r.past.note(lsn, lsn+LSN(recordSize(h.n)), h.typ)
		}
		off += recordSize(h.n) - 8
	}
	if next := r.seg + LSN(r.segSize); r.firstRecordValid(next) {
		if tag := r.segmentTag(next); tag != 0 && r.tag != 0 && tag != r.tag {
			// Not damage: the log read so far ends here, and the next
			// segment is another log's. Which of the two is this
			// database's the control file's checkpoint tells.
			return fmt.Errorf("%w: %s and %s belong to different write-ahead logs (log identifiers %#04x and %#04x): one of them was copied from another database's WAL (the log read so far ends at %s)",
				ErrCorrupt, name, path.Join(r.dir, segmentName(next)), r.tag, tag, bad)
		}
		return fmt.Errorf("%w: %s at offset %d%s: the record at %s is damaged, but the log goes on in segment %s",
			ErrCorrupt, name, int64(bad-r.seg), r.cutShort(), bad, segmentName(next))
	}
	return nil
}

// segmentTag returns the log identifier in the header of the segment at
// seg, or 0 if it cannot be read.
func (r *Reader) segmentTag(seg LSN) uint16 {
	f, err := r.fs.OpenReadOnly(path.Join(r.dir, segmentName(seg)))
	if err != nil {
		return 0
	}
	defer f.Close()
	h, err := readSegHeader(f, seg, r.segSize)
	if err != nil {
		return 0
	}
	return h.tag
}

// cutShort describes the current segment file when it is shorter than the
// segment size, which only damage can make (segments are created whole),
// so that an error naming an offset past the file's end says why.
func (r *Reader) cutShort() string {
	n, err := r.f.Size()
	if err != nil || n >= r.segSize {
		return ""
	}
	return fmt.Sprintf(" (the file is %d bytes, cut short of the %d-byte segment size)", n, r.segSize)
}

// finish ends the log at r.pos, unless the end shows damage (see
// checkDurableAfter, checkEndAtCut, checkDurableMarks), and measures the
// torn or stale tail after it in its segment, which recovery cuts off.
func (r *Reader) finish() {
	if r.stopSet {
		// The log was durable up to r.stop before the read began.
		name, off := "the WAL directory", int64(-1)
		if r.f != nil {
			name, off = r.f.Name(), int64(r.pos-r.seg)
		}
		at := ""
		if off >= 0 {
			at = fmt.Sprintf(" at offset %d", off)
		}
		r.err = fmt.Errorf("%w: %s%s: the valid log ends at %s, but it was durable up to %s when this read began: LSN %s to %s is lost",
			ErrCorrupt, name, at, r.pos, r.stop, r.pos, r.stop)
		r.closeFile()
		return
	}
	if r.f == nil {
		r.eof = true
		return
	}
	if err := r.checkDurableAfter(); err != nil {
		r.err = err
		r.closeFile()
		return
	}
	if err := r.checkEndAtCut(); err != nil {
		r.err = err
		r.closeFile()
		return
	}
	if err := r.checkDurableMarks(); err != nil {
		r.err = err
		r.closeFile()
		return
	}
	if err := r.checkSegmentsBeyond(); err != nil {
		r.err = err
		r.closeFile()
		return
	}
	if err := r.checkNextFile(); err != nil {
		r.err = err
		r.closeFile()
		return
	}
	r.eof = true
	// The torn tail runs from the end of the log to the last non-zero
	// byte of the segment, zeros inside it included: that is what
	// OpenWriter's zeroing cuts.
	start := int64(r.pos - r.seg)
	off, last := start, start
	for off < r.segSize {
		b, err := r.bytesAt(off, int(min(readChunk, r.segSize-off)))
		if err != nil || len(b) == 0 {
			break
		}
		if i := lastNonZero(b); i >= 0 {
			last = off + int64(i) + 1
		}
		off += int64(len(b))
	}
	r.dropped = last - start
	r.closeFile()
}

// checkSegmentsBeyond is called where the log ends in the current segment,
// n: inside it, or at its end with segment n+1 missing or its header
// damaged. The Writer asks for segment n+2 to be prepared only once it has
// switched into n+1 (fileFor), and it switches only after writing and
// fdatasyncing n to its end (writeAndSync); OpenWriter asks for it only
// when the log it continues ends in n+1. So a file of this log at n+2 or
// later, under its final name or the temporary one of a segment being
// prepared, shows that n was durable whole and that the log had gone on
// into n+1: ending it here would drop what n+1 held (acknowledged commits
// among it) without a word, and OpenWriter would then remove the later
// files. It is corruption, naming n+1; but a file under a final name
// whose header is not valid, past an n+1 prepared whole and holding no
// record, is named itself, as badHeader names a damaged header.
//
// What it does not show: a segment at n+1 itself, prepared ahead and
// never written, is the normal state after every switch; and a later
// segment whose header names another log, or another segment size, is no
// evidence of this log (checkDurableMarks names another log's).
func (r *Reader) checkSegmentsBeyond() error {
	names, err := r.fs.ReadDir(r.dir)
	if err != nil {
		return withPath("list", r.dir, err)
	}
	next := r.seg + LSN(r.segSize)
	for _, n := range names {
		base, tmp := strings.CutSuffix(n, tempSuffix)
		start, ok := parseSegmentName(base)
		if !ok || start <= next {
			continue
		}
		// A crash may leave a segment being prepared with any part of
		// its bytes: its name is the evidence, unless a header it
		// holds says it is another log's, or of another segment
		// size. A file under a final name is evidence when it has
		// the segment size and its header, if valid, gives that size
		// too: one whose header is not valid was this log's segment,
		// zeroed or overwritten since (no crash leaves one, see
		// badHeader), or put there, which is damage as well.
		h, err := r.peekFile(n, start)
		if err != nil && !errors.Is(err, ErrCorrupt) && !tmp {
			if errors.Is(err, fs.ErrNotExist) {
				continue // removed since the listing
			}
			return err // a read that failed
		}
		if !tmp {
			if size, serr := r.fs.Stat(path.Join(r.dir, n)); serr != nil || size != r.segSize || (err == nil && h.size != r.segSize) {
				continue
			}
		} else if err == nil && h.size != r.segSize {
			// A preparation writes the log's own segment size in the
			// header (under a checksum) before anything else: one that
			// names another size was not this log's, whatever its
			// length.
			continue
		}
		if err == nil && h.tag != 0 && r.tag != 0 && h.tag != r.tag {
			continue
		}
		if !tmp && err != nil {
			// A file whose header is not valid is evidence only of
			// damage. With the next segment prepared whole and holding
			// no record, as after every switch, it is the
			// damaged header badHeader names, with the way on; not a
			// sign that the segment the log ends in was durable to
			// its end and the log went on into the next one.
			if nh, nerr := r.peekHeader(next); nerr == nil && nh.size == r.segSize {
				if size, serr := r.fs.Stat(path.Join(r.dir, segmentName(next))); serr == nil && size == r.segSize && r.validRecordIn(next) == 0 {
					return r.badHeader(start)
				}
			}
		}
		what := "exists"
		switch {
		case tmp:
			what = "is being prepared (the file of that name with the " + tempSuffix + " suffix exists)"
		case err != nil:
			what = "exists (with a segment header that " + r.headerFault(start) + ")"
		}
		return fmt.Errorf("%w: %s %s, but the valid log ends at %s, in %s at offset %d: the writer asks for a segment only once it has moved into the one before it, and moves on only after the one it leaves is fdatasynced whole, so %s was durable to its end and the log went on into %s, which %s: the log from %s on is lost",
			ErrCorrupt, path.Join(r.dir, segmentName(start)), what, r.pos, r.f.Name(), int64(r.pos-r.seg),
			path.Base(r.f.Name()), segmentName(next), r.nextState(next), r.pos)
	}
	return nil
}

// peekFile reads and checks the header of the file name in the log's
// directory, the segment starting at start or one being prepared for it.
func (r *Reader) peekFile(name string, start LSN) (segHeader, error) {
	f, err := r.fs.OpenReadOnly(path.Join(r.dir, name))
	if err != nil {
		return segHeader{}, err
	}
	defer f.Close()
	return readSegHeader(f, start, 0)
}

// nextState says what is wrong with the segment file at seg, the one after
// the segment the log ends in.
func (r *Reader) nextState(seg LSN) string {
	name := path.Join(r.dir, segmentName(seg))
	if _, err := r.fs.Stat(name); errors.Is(err, fs.ErrNotExist) {
		return "is missing (" + name + ")"
	}
	if _, err := r.peekHeader(seg); err != nil {
		return fmt.Sprintf("is damaged (%v)", err)
	}
	return fmt.Sprintf("holds no valid record at its start (%s)", name)
}

// checkEndAtCut is called where the log ends inside the current segment.
// If the file is shorter than the segment size (which only damage makes:
// segments are created whole) and the log ends at the file's end (the next
// record header, or the record it starts, reaches past it), the end of the
// durable log cannot be shown to lie before the cut, so records past it may
// have been lost: corruption, naming the file and the LSN where the loss
// begins. A short file whose log ends before the cut, at a header of
// zeros, lost nothing that was durable: writes go in order, and a durable
// record past the cut would make every byte before it durable too.
func (r *Reader) checkEndAtCut() error {
	size, err := r.f.Size()
	if err != nil || size >= r.segSize {
		return nil
	}
	off := int64(r.pos - r.seg)
	atCut := off+recHeaderSize > size
	if !atCut {
		hb, err := r.bytesAt(off, recHeaderSize)
		if err != nil || len(hb) < recHeaderSize {
			atCut = true
		} else if h, ok := decodeRecHeader(hb, r.pos, r.segSize-off, r.maxPayload); ok && off+recHeaderSize+int64(h.n) > size {
			atCut = true
		}
	}
	if !atCut {
		return nil
	}
	cut := r.seg + LSN(size)
	if r.pos > cut {
		// The read began past the cut (at a checkpoint's redo point):
		// everything from the cut on is gone, the start included.
		return fmt.Errorf("%w: %s is %d bytes, cut short of the %d-byte segment size, and the log ends at the cut (LSN %s): the records from %s on that were there are lost, and with them %s, where this read begins%s",
			ErrCorrupt, r.f.Name(), size, r.segSize, cut, cut, r.pos, r.markNote())
	}
	return fmt.Errorf("%w: %s is %d bytes, cut short of the %d-byte segment size, and the log ends at the cut (LSN %s): the records from %s on that were there are lost%s",
		ErrCorrupt, r.f.Name(), size, r.segSize, cut, r.pos, r.markNote())
}

// markNote says how far later segments' durable-LSN marks show the log was
// durable, when that is past r.pos.
func (r *Reader) markNote() string {
	if m, name, tag := r.laterMark(); m > r.pos && (tag == 0 || r.tag == 0 || tag == r.tag) {
		return fmt.Sprintf(" (at least up to %s, the durable-LSN mark of %s)", m, name)
	}
	return ""
}

// laterMark returns the highest durable-LSN mark in the headers of the
// segments after the current one, the file holding it, and that
// segment's log identifier.
func (r *Reader) laterMark() (LSN, string, uint16) {
	names, err := r.fs.ReadDir(r.dir)
	if err != nil {
		return 0, "", 0
	}
	var best LSN
	var bestName string
	var bestTag uint16
	for _, n := range names {
		start, ok := parseSegmentName(n)
		if !ok || start <= r.seg {
			continue
		}
		if h, err := r.peekHeader(start); err == nil && h.size == r.segSize && h.durable > best {
			best, bestName, bestTag = h.durable, n, h.tag
		}
	}
	return best, bestName, bestTag
}

// checkDurableMarks fails when a later segment's durable-LSN mark says the
// log was durable past where the valid log ends: the records between were
// lost after they were made durable.
func (r *Reader) checkDurableMarks() error {
	m, name, tag := r.laterMark()
	if m <= r.pos {
		return nil
	}
	if tag != 0 && r.tag != 0 && tag != r.tag {
		// Not a loss of this log: the mark is another log's.
		return fmt.Errorf("%w: %s belongs to a different write-ahead log than %s (log identifiers %#04x and %#04x): it was copied from another database's WAL; remove it (the log read so far ends at %s)",
			ErrCorrupt, path.Join(r.dir, name), r.f.Name(), tag, r.tag, r.pos)
	}
	return fmt.Errorf("%w: the valid log ends at %s in %s, but segment %s was prepared when the log was durable up to %s: LSN %s to %s is lost",
		ErrCorrupt, r.pos, r.f.Name(), name, m, r.pos, m)
}

func (r *Reader) closeFile() {
	if r.f != nil {
		r.f.Close()
		r.f = nil
	}
}

// End returns, after Next has returned io.EOF, the LSN where the next record
// would go: the end of the valid log, to pass to OpenWriter. It may equal a
// segment boundary (the previous segment is full). Before EOF it returns the
// position of the next record to be read.
func (r *Reader) End() LSN { return r.pos }

// DroppedBytes returns, after io.EOF, the length in bytes of the torn tail
// the log was cut at: from End to the last non-zero byte of the segment End
// lies in, zeros inside it included (what OpenWriter zeroes). Zero means the
// log ended cleanly.
func (r *Reader) DroppedBytes() int64 { return r.dropped }

// PastEnd describes the valid records found after the end of the log, in
// the segment it ends in, which are cut off with the torn tail. Each names
// its own position and passes its CRC, so it is a record of this log, not
// stale bytes; none carries a durable-LSN mark past the end (that would
// make the end corruption). Between End and First lie bytes that fail the
// record checks. A crash's torn write (later sectors of the last write on
// disk, earlier ones not) leaves this, and so does durable log zeroed or
// damaged after it was written, from which these records are all that is
// left: the Reader cannot tell the two apart (nor can PostgreSQL, which
// reports "invalid record length at" the end and goes on), but in the
// second case they held commits that were acknowledged.
type PastEnd struct {
	Records int // valid records after End (segment switches not counted)
	// First is the LSN of the first of them and Last the end of the last
	// (both 0 when Records is 0): from End to First the log fails the
	// checks.
	First, Last LSN
	// Types counts the records of each type (nil when Records is 0).
	Types map[RecordType]int
}

func (p *PastEnd) note(lsn, end LSN, typ RecordType) {
	if p.Records == 0 {
		p.First, p.Types = lsn, make(map[RecordType]int)
	}
	p.Records++
	p.Last = end
	p.Types[typ]++
}

// PastEnd returns, after io.EOF, the valid records found after End in its
// segment (see PastEnd); the zero PastEnd when there are none, or after a
// read that SetStop ended.
func (r *Reader) PastEnd() PastEnd { return r.past }

// SegmentSize returns the segment size in bytes learned from the segment
// headers, or 0 if the directory held no segment.
func (r *Reader) SegmentSize() int64 { return r.segSize }

// Close releases the open segment file. Further calls to Next return
// ErrClosed.
func (r *Reader) Close() error {
	r.closeFile()
	if r.err == nil {
		r.err = ErrClosed
	}
	return nil
}

// firstNonZero returns the index of the first byte of b that is not zero,
// or len(b) if all are, comparing 4 KiB pieces against zeroBlock first.
func firstNonZero(b []byte) int {
	const piece = 4 << 10
	for start := 0; start < len(b); start += piece {
		end := min(len(b), start+piece)
		if !bytes.Equal(b[start:end], zeroBlock[:end-start]) {
			for i := start; i < end; i++ {
				if b[i] != 0 {
					return i
				}
			}
		}
	}
	return len(b)
}

// lastNonZero returns the index of the last byte of b that is not zero, or
// -1 if all are. It compares 4 KiB pieces against zeroBlock first, so that
// a tail of zeros costs a memory comparison, not a loop a byte.
func lastNonZero(b []byte) int {
	const piece = 4 << 10
	for end := len(b); end > 0; {
		start := max(0, end-piece)
		if !bytes.Equal(b[start:end], zeroBlock[:end-start]) {
			for i := end - 1; i >= start; i-- {
				if b[i] != 0 {
					return i
				}
			}
		}
		end = start
	}
	return -1
}
