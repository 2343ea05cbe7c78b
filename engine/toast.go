package engine

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	"mvkv/internal/bufpool"
	"mvkv/internal/heap"
	"mvkv/internal/verify"
	"mvkv/visibility"
)

// Out-of-line values, the TOAST idea (PostgreSQL's toast_save_datum and
// toast_fetch_datum). A value that does not fit inline is cut into data
// chunks, each a chunk tuple (heap.Chunk) of its own on a page, and the
// version's tuple (heap.External) holds a pointer to them. Two pointer
// formats exist:
//
//	direct   (values of up to maxDirectChunks chunks, 1 MiB):
//	    u32 total length | u32 n | n x TID(6)
//	    n = ceil(total/chunkSize): chunks of 8,128 bytes that fill a page
//	indirect (larger values):
//	    u32 total length | u32 1<<31 | nd | nd x TID(6)
//	    n = ceil(total/largeChunkSize): chunks of 7,904 bytes
//	    nd = ceil(n/tidsPerDirectory), 1,317 TIDs a directory
//
// An indirect pointer names directory chunks: chunk tuples flagged
// heap.Chunk|heap.External whose value is the TIDs (6 bytes each) of up to
// tidsPerDirectory data chunks, in value order; directory i lists data
// chunks [i*tidsPerDirectory, (i+1)*tidsPerDirectory). A value of 512 MiB
// needs 67,924 data chunks and 52 directories, a pointer of 320 bytes; at
// 1 GiB, 104 directories and 632 bytes.
// Every count is derived from the total length, which is bounded by
// MaxValueSize, and checked against the pointer's and each directory's
// length before anything is allocated or read.
//
// Values that fit the direct format are still written in it, byte for byte
// as before two-level pointers existed, so a data directory written by this
// code holds no new format unless a value above 1 MiB was stored.
//
// A directory is marked by the External flag on the chunk itself, so that
// whoever frees a chunk knows without the pointer that it must free the
// data chunks the directory lists too: vacuum frees a dead version's
// directories and, on meeting a directory on its page, adds the chunks it
// lists to its work (vacuum.go); a directory that is an orphan after a crash
// is freed the same way, and the rebuild of the index counts the chunks a
// directory lists as used, so that they are freed once, through it.

const (
	// tidSize is the encoded size of a TID in a pointer or a directory.
	tidSize = 6
	// maxDirectChunks is the most data chunks a direct pointer lists: as
	// many as the largest value (1 MiB) had before indirect pointers.
	maxDirectChunks = (1<<20 + chunkSize - 1) / chunkSize
	// largeChunkSize is the value bytes of a data chunk of a value with an
	// indirect pointer: its tuple is as large as the free space map's top
	// category promises a page holds, so that the pages vacuum frees of
	// one large value take the chunks of the next. (A direct value's chunk
	// fills an empty page exactly, more than any category promises: its
	// chunks go to the pages the map keeps as empty, or to new ones. Its
	// size is part of the old format.)
	largeChunkSize = (fsmCategories-1)*fsmCategoryBytes - heap.TupleHeaderSize
	// tidsPerDirectory is the most data chunk TIDs one directory holds; a
	// directory is no larger than a data chunk, for the same reason.
	tidsPerDirectory = largeChunkSize / tidSize
	// indirectFlag marks the count field of an indirect pointer.
	indirectFlag = 1 << 31
	// toastFlushBytes is how many bytes of chunks a write of one value
	// inserts into the WAL between two flushes of it. The WAL keeps
	// inserted records in memory until they are written: without these
	// flushes a 512 MiB value would be held a second time there until its
	// commit (PostgreSQL's XLogInsert likewise writes WAL out when its
	// buffers fill rather than grow them).
	toastFlushBytes = 4 << 20
)

// toastPointer is a decoded external value pointer.
type toastPointer struct {
	total    int        // value length in bytes
	chunks   int        // data chunks
	indirect bool       // tids are directories, not data chunks
	tids     []heap.TID // what the pointer names
}

// errPointer wraps pointer and directory format errors.
var errPointer = errors.New("external value pointer")

// parseToastPointer decodes an external value pointer, checking every count
// against the total length and the pointer's own length. It reads nothing
// else and never panics.
func parseToastPointer(ptr []byte) (toastPointer, error) {
	var p toastPointer
	if len(ptr) < 8 {
		return p, fmt.Errorf("%w of %d bytes", errPointer, len(ptr))
	}
	total := binary.LittleEndian.Uint32(ptr)
	field := binary.LittleEndian.Uint32(ptr[4:])
	if total > MaxValueSize {
		return p, fmt.Errorf("%w: length %d above the limit %d", errPointer, total, MaxValueSize)
	}
	p.total = int(total)
	p.indirect = field&indirectFlag != 0
	field &^= indirectFlag
	p.chunks = (p.total + p.chunkBytes() - 1) / p.chunkBytes()
	n := p.chunks
	if p.indirect {
		n = (p.chunks + tidsPerDirectory - 1) / tidsPerDirectory
	} else if p.chunks > maxDirectChunks {
		return p, fmt.Errorf("%w: direct pointer for %d bytes in %d chunks (at most %d)", errPointer, total, p.chunks, maxDirectChunks)
	}
	if uint64(field) != uint64(n) || len(ptr) != 8+tidSize*n {
		return p, fmt.Errorf("%w: length %d in %d chunks: %d names in %d bytes (want %d)", errPointer, total, p.chunks, field, len(ptr), n)
	}
	p.tids = make([]heap.TID, n)
	for i := range p.tids {
		p.tids[i] = readTID(ptr[8+tidSize*i:])
	}
	return p, nil
}

// parseDirectory decodes a directory chunk's value into the data chunk TIDs
// it lists. want is the count the pointer implies, or -1 when the caller
// has no pointer (vacuum freeing a directory).
func parseDirectory(val []byte, want int) ([]heap.TID, error) {
	if len(val) == 0 || len(val)%tidSize != 0 || len(val)/tidSize > tidsPerDirectory {
		return nil, fmt.Errorf("%w: directory of %d bytes", errPointer, len(val))
	}
	n := len(val) / tidSize
	if want >= 0 && n != want {
		return nil, fmt.Errorf("%w: directory lists %d chunks, the pointer implies %d", errPointer, n, want)
	}
	out := make([]heap.TID, n)
	for i := range out {
		out[i] = readTID(val[tidSize*i:])
	}
	return out, nil
}

// chunkBytes is the value bytes of each data chunk but the last.
func (p *toastPointer) chunkBytes() int {
	if p.indirect {
		return largeChunkSize
	}
	return chunkSize
}

// directoryLen is how many data chunks directory i of a pointer lists.
func (p *toastPointer) directoryLen(i int) int {
	return min(tidsPerDirectory, p.chunks-i*tidsPerDirectory)
}

// toastValue writes val out of line as chunk tuples of transaction xid and
// returns the pointer for the version's tuple. One chunk tuple buffer is
// reused for all chunks (the page and the WAL copy it), and the WAL is
// flushed every toastFlushBytes, so the memory a write holds besides val is
// a few pages and at most toastFlushBytes of WAL.
func (db *DB) toastValue(xid uint64, val []byte) ([]byte, error) {
	step := chunkSize
	n := (len(val) + step - 1) / step
	indirect := n > maxDirectChunks
	if indirect {
		step = largeChunkSize
		n = (len(val) + step - 1) / step
	}
	hdr := heap.TupleHeader{Xmin: xid, Prev: heap.InvalidTID, Infomask: heap.Chunk}
	tup := make([]byte, 0, heap.TupleHeaderSize+step)
	place := func(h heap.TupleHeader, payload []byte) (heap.TID, error) {
		tup = heap.AppendTuple(tup[:0], h, nil, payload)
		return db.placeTuple(xid, heap.InvalidTID, tup, nil)
	}
	ptr := binary.LittleEndian.AppendUint32(nil, uint32(len(val)))
	var dir []byte
	if indirect {
		nd := (n + tidsPerDirectory - 1) / tidsPerDirectory
		ptr = binary.LittleEndian.AppendUint32(ptr, indirectFlag|uint32(nd))
		dir = make([]byte, 0, tidsPerDirectory*tidSize)
	} else {
		ptr = binary.LittleEndian.AppendUint32(ptr, uint32(n))
	}
	dirHdr := hdr
	dirHdr.Infomask |= heap.External
	unflushed := 0
	for off := 0; off < len(val); off += step {
		end := min(off+step, len(val))
		tid, err := place(hdr, val[off:end])
		if err != nil {
			return nil, err
		}
		unflushed += end - off
		if !indirect {
			ptr = appendTID(ptr, tid)
			continue
		}
		dir = appendTID(dir, tid)
		if len(dir) == tidsPerDirectory*tidSize || end == len(val) {
			dtid, err := place(dirHdr, dir)
			if err != nil {
				return nil, err
			}
			ptr = appendTID(ptr, dtid)
			dir = dir[:0]
		}
		if unflushed >= toastFlushBytes {
			if err := db.wal.FlushData(db.wal.InsertLSN()); err != nil {
				return nil, db.fail(err)
			}
			unflushed = 0
		}
	}
	return ptr, nil
}

// detoastPrefix reassembles the first n bytes of an out-of-line value (n <
// 0: all of it) from its pointer, reading the chunks in order up to the
// one that holds byte n, and returns them with the value's length. at and
// xmin are the TID and xmin of the version holding the pointer; every
// chunk of its value shares the xmin (toastValue writes them in the same
// transaction).
func (db *DB) detoastPrefix(ptr []byte, n int, at heap.TID, xmin uint64) ([]byte, int, error) {
	p, err := parseToastPointer(ptr)
	if err != nil {
		return nil, 0, db.corrupt(at, err)
	}
	want := p.total
	if n >= 0 && n < want {
		want = n
	}
	out := make([]byte, 0, want)
	if !p.indirect {
		for _, tid := range p.tids {
			if len(out) >= want {
				break
			}
			if out, err = db.appendChunk(out, tid, false, p.total, xmin); err != nil {
				return nil, 0, err
			}
		}
	} else {
		var dir []byte
		for i, d := range p.tids {
			if len(out) >= want {
				break
			}
			if dir, err = db.appendChunk(dir[:0], d, true, tidsPerDirectory*tidSize, xmin); err != nil {
				return nil, 0, err
			}
			tids, err := parseDirectory(dir, p.directoryLen(i))
			if err != nil {
				return nil, 0, db.corruptChunk(d, "directory", err)
			}
			for _, tid := range tids {
				if len(out) >= want {
					break
				}
				if out, err = db.appendChunk(out, tid, false, p.total, xmin); err != nil {
					return nil, 0, err
				}
			}
		}
	}
	if len(out) < want || (want == p.total && len(out) != p.total) {
		return nil, 0, db.corrupt(at, fmt.Errorf("external value: %d bytes of %d", len(out), p.total))
	}
	return out[:want], p.total, nil
}

// appendChunk appends the value of the chunk tuple at tid to dst, failing
// with ErrCorruption if the slot holds no chunk of the expected kind
// (directory or data), a chunk of another value (its xmin is not xmin), or
// dst would grow past limit bytes.
//
// The xmin check is the chunk's proof of ownership, as PostgreSQL's toast
// chunks carry their value's id: a chunk slot is reused only after vacuum
// freed it with the version naming it, or pruning freed it as an aborted
// write's (whose version nobody reads), except on a page
// zero_damaged_pages emptied, where the slots of lost chunks take new
// tuples while versions elsewhere still name them.
//
// Every error names the chunk's heap file and offset: a page that fails
// its checks (the pool's error says so), a slot that holds no tuple (its
// page was read as empty under zero_damaged_pages, or vacuum has since
// initialized it: the chunk was lost with it), or a tuple that is not
// this value's chunk.
func (db *DB) appendChunk(dst []byte, tid heap.TID, directory bool, limit int, xmin uint64) ([]byte, error) {
	kind := "data chunk"
	if directory {
		kind = "directory"
	}
	buf, err := db.pool.Get(tid.Block)
	if errors.Is(err, bufpool.ErrPastEnd) {
		// Vacuum cut the heap's tail, which held no tuple vacuum kept:
		// the chunk's page was lost and then emptied.
		return nil, db.corruptChunk(tid, kind, errors.New("the block lies past the heap's end: the chunk was lost with its page"))
	}
	if err != nil {
		if errors.Is(err, ErrCorruption) {
			return nil, fmt.Errorf("%w (slot %d, a %s of an out-of-line value)", err, tid.Slot, kind)
		}
		return nil, err
	}
	buf.RLock()
	raw, err := heap.Tuple(buf.Page(), tid.Slot)
	var h heap.TupleHeader
	var v []byte
	if err == nil {
		h, _, v, err = heap.DecodeTuple(raw)
	}
	switch {
	case errors.Is(err, heap.ErrBadSlot):
		err = fmt.Errorf("no tuple there (%v): the chunk was lost", err)
		if db.zeroedOutPage(tid.Block) {
			err = fmt.Errorf("%w with its page, which failed its checks and was read as empty (zero_damaged_pages)", err)
		}
	case err != nil:
	case h.Infomask&heap.Chunk == 0:
		err = errors.New("not a chunk tuple")
	case directory != (h.Infomask&heap.External != 0):
		err = fmt.Errorf("chunk is not a %s", kind)
	case h.Xmin != xmin:
		err = fmt.Errorf("the chunk there belongs to another value (xmin %d, the value's %d): its own was lost", h.Xmin, xmin)
	case len(dst)+len(v) > limit:
		err = errors.New("chunks longer than the value")
	default:
		dst = append(dst, v...)
	}
	buf.RUnlock()
	buf.Release()
	if err != nil {
		return nil, db.corruptChunk(tid, kind, err)
	}
	return dst, nil
}

// corruptChunk is the ErrCorruption of a chunk (kind: "data chunk" or
// "directory") of an out-of-line value at tid, naming its heap file and
// offset.
func (db *DB) corruptChunk(tid heap.TID, kind string, err error) error {
	return fmt.Errorf("%w: %s, slot %d, a %s of an out-of-line value: %v", ErrCorruption, db.heapBlockName(tid.Block), tid.Slot, kind, err)
}

// isDirectory reports whether a tuple's infomask marks a directory chunk.
func isDirectory(infomask uint16) bool {
	return infomask&heap.Chunk != 0 && infomask&heap.External != 0
}

// describePointer describes an external value pointer for the WAL dump.
func describePointer(ptr []byte) string {
	p, err := parseToastPointer(ptr)
	switch {
	case err != nil:
		return "malformed: " + err.Error()
	case p.indirect:
		return fmt.Sprintf("%d bytes in %d chunks via %d directories", p.total, p.chunks, len(p.tids))
	}
	return fmt.Sprintf("%d bytes in %d chunks", p.total, p.chunks)
}

// toastCheck is Verify's check of out-of-line values: every pointer and
// directory decodes, and names chunks of the right kind, as many as the
// value's length implies; and every chunk is named (Orphans).
type toastCheck struct {
	pointers map[heap.TID]notedPointer
	dirs     map[heap.TID][]heap.TID
	// chunks are every chunk tuple Note saw; malformed counts the
	// pointers and directories that did not decode (what they name is
	// unknown).
	chunks    map[heap.TID]notedChunk
	malformed int
	// begun is a snapshot taken before Verify's checkpoint: a chunk of a
	// transaction it calls in progress may have been written, by a
	// writer that had yet to place the version naming it, or whose
	// version the checkpoint did not write.
	begun *visibility.Snapshot
	// queued are the chunks vacuum's next run frees (its orphan list).
	queued []chunkID
	db     *DB
}

// notedPointer is a pointer toastCheck noted, with the xmin of the
// version holding it, which every chunk of its value must carry
// (appendChunk), and the version's infomask (its hint bits).
type notedPointer struct {
	toastPointer
	xmin     uint64
	infomask uint16
}

// notedChunk is a chunk tuple toastCheck noted.
type notedChunk struct {
	xmin     uint64
	infomask uint16
	size     int // the tuple's bytes, header included
}

// Note records a tuple Verify read: a pointer (a version flagged External)
// or a chunk tuple, and for a directory the chunks it lists; a malformed
// pointer or directory is reported at once.
func (c *toastCheck) Note(problem verify.Problemf, tid heap.TID, h heap.TupleHeader, val []byte) {
	if h.Infomask&heap.Chunk != 0 {
		if c.chunks == nil {
			c.chunks = make(map[heap.TID]notedChunk)
		}
		c.chunks[tid] = notedChunk{h.Xmin, h.Infomask, heap.TupleHeaderSize + int(h.KeyLen) + len(val)}
	}
	switch {
	case isDirectory(h.Infomask):
		tids, err := parseDirectory(val, -1)
		if err != nil {
			problem("heap tuple %s: %v", tid, err)
			c.malformed++
			return
		}
		if c.dirs == nil {
			c.dirs = make(map[heap.TID][]heap.TID)
		}
		c.dirs[tid] = tids
	case h.Infomask&heap.External != 0 && h.Infomask&heap.Chunk == 0:
		p, err := parseToastPointer(val)
		if err != nil {
			problem("heap tuple %s: %v", tid, err)
			c.malformed++
			return
		}
		if c.pointers == nil {
			c.pointers = make(map[heap.TID]notedPointer)
		}
		c.pointers[tid] = notedPointer{p, h.Xmin, h.Infomask}
	}
}

// maxOrphansNamed is how many orphan chunks Verify names one by one.
const maxOrphansNamed = 20

// Orphans reports the chunk tuples that nothing names, as notes: space
// leaked, not data lost. A chunk is named by its value's version (a
// version's pointer naming its slot, with the version's xmin, which every
// chunk of the value carries: appendChunk's proof of ownership), by a
// directory so named (vacuum frees a directory's data chunks with it), or
// by vacuum's debt (chunkdebt.go: chunks whose version a run removed
// before its second pass freed them, or that an Open that rebuilt the
// index from the heap found, which the next run, or Close, frees).
// Versions count whatever their state,
// dead ones included: vacuum frees a version's chunks after the version, in
// the same run.
//
// Not reported, whoever names them: chunks of a transaction in progress
// when Verify began (toastValue places a value's chunks before the version
// that names them), and those of an aborted one, which any prune of their
// page frees (prunePageLocked) and vacuum's next run does for sure: not
// leaked. Nothing is reported when any tuple could not be read
// (unread) or a pointer or directory did not decode: what they name is
// unknown, and a chunk they name would be called an orphan.
//
// Who leaves orphans: a directory lost with its page (zero_damaged_pages)
// after the delete of its value (vacuum frees the directory's slot, but
// cannot know the data chunks it listed). An Open that rebuilds the index
// from the heap finds them all for vacuum. A crash between vacuum's two
// passes leaves none: the chunks stay in the debt through recovery.
func (c *toastCheck) Orphans(note verify.Problemf, unread int) (int, int64) {
	if len(c.chunks) == 0 {
		return 0, 0
	}
	if unread > 0 || c.malformed > 0 {
		var why []string
		if unread > 0 {
			why = append(why, fmt.Sprintf("%d heap pages or tuples could not be read", unread))
		}
		if c.malformed > 0 {
			why = append(why, fmt.Sprintf("%d value pointers or directories did not decode", c.malformed))
		}
		note("out-of-line value chunks were not checked for ones nothing names: %s (any may name chunks)", strings.Join(why, ", and "))
		return 0, 0
	}
	named := make(map[chunkID]bool, len(c.chunks))
	// name marks tid named by a value of xmin, and the data chunks it
	// lists if it is that value's directory.
	name := func(tid heap.TID, xmin uint64) {
		named[chunkID{tid, xmin}] = true
		if ch, ok := c.chunks[tid]; ok && ch.xmin == xmin && isDirectory(ch.infomask) {
			for _, d := range c.dirs[tid] {
				named[chunkID{d, xmin}] = true
			}
		}
	}
	for _, p := range c.pointers {
		for _, tid := range p.tids {
			name(tid, p.xmin)
		}
	}
	for _, q := range c.queued {
		name(q.tid, q.xmin)
	}
	var orphans []heap.TID
	var bytes int64
	state := make(map[heap.TID]string)
	for tid, ch := range c.chunks {
		if named[chunkID{tid, ch.xmin}] || (c.begun != nil && c.begun.XidInProgress(ch.xmin)) {
			continue
		}
		st, aborted := c.db.xminStateOf(ch.xmin, ch.infomask)
		if aborted {
			continue // garbage vacuum frees, not leaked
		}
		orphans = append(orphans, tid)
		bytes += int64(ch.size)
		state[tid] = st
	}
	if len(orphans) == 0 {
		return 0, 0
	}
	slices.SortFunc(orphans, func(a, b heap.TID) int { return cmp.Compare(a.Pack(), b.Pack()) })
	note("%d out-of-line value chunks (%d bytes) that no version names: space leaked, not damage (no value a version names is affected); vacuum frees them after an Open that rebuilds the key index from the heap (close the database, remove its index file, open it, vacuum)", len(orphans), bytes)
	for i, tid := range orphans {
		if i == maxOrphansNamed {
			note("%d more chunks that no version names", len(orphans)-maxOrphansNamed)
			break
		}
		ch := c.chunks[tid]
		kind := "data chunk"
		if isDirectory(ch.infomask) {
			kind = fmt.Sprintf("directory (listing %d data chunks)", len(c.dirs[tid]))
		}
		note("orphan %s: %s, slot %d, %d bytes, xmin %d (%s)", kind, c.db.heapBlockName(tid.Block), tid.Slot, ch.size, ch.xmin, state[tid])
	}
	return len(orphans), bytes
}

// xminStateOf names what became of the writer of a tuple with xmin and
// infomask, and says whether it aborted (or crashed: in progress and not
// running), as pruning decides it (xidState): a chunk of such a writer is
// no orphan, and a version of one names chunks pruning may have freed. An
// orphan's writer committed (its value lost its version or directory
// since).
func (db *DB) xminStateOf(xmin uint64, infomask uint16) (string, bool) {
	v := version{hdr: heap.TupleHeader{Xmin: xmin, Infomask: infomask}}
	committed, aborted, err := db.xidState(&v, false)
	switch {
	case err != nil:
		return "status unknown: " + err.Error(), false
	case aborted:
		return "aborted", true
	case committed && infomask&heap.Frozen != 0:
		return "committed, frozen", false
	case committed:
		return "committed", false
	}
	return "in progress", false
}

// Report checks what Note recorded against the heap: kind(tid) says
// whether the slot holds a chunk tuple and whether it is a directory;
// skip(tid) is true for a slot on a page that could not be read. It
// returns the pointer tuples with a chunk or directory in such a slot.
//
// The pointer of a version whose inserter aborted (or crashed) is not
// checked: pruning frees such a version's chunks on their own pages,
// before vacuum removes the version (prunePageLocked), so it may name
// slots that are empty or hold another value's chunks, and nobody reads
// its value. Nor is the pointer of a version whose inserter was running
// when Verify began or began since, the chunks Orphans skips: Verify reads
// the files page by page while such a writer places chunks and then its
// version, and the pool writes pages out in any order, so the version may
// be read from disk and its chunks' pages before they reached them; its
// value is judged by a Verify that begins after the writer ended.
func (c *toastCheck) Report(report verify.Problemf, kind func(heap.TID) (chunk, dir bool, xmin uint64), skip func(heap.TID) bool) map[heap.TID]bool {
	lost := map[heap.TID]bool{}
	const maxReported = 20
	bad := 0
	problem := func(format string, a ...any) {
		if bad++; bad <= maxReported {
			report(format, a...)
		}
	}
	for tid, p := range c.pointers {
		if c.begun != nil && c.begun.XidInProgress(p.xmin) {
			continue
		}
		if _, aborted := c.db.xminStateOf(p.xmin, p.infomask); aborted {
			continue
		}
		for i, t := range p.tids {
			if skip(t) {
				lost[tid] = true
				continue
			}
			chunk, dir, xmin := kind(t)
			if !chunk || dir != p.indirect {
				problem("heap tuple %s: its external value names %s, which is not a %s", tid, t, map[bool]string{true: "directory", false: "data chunk"}[p.indirect])
				lost[tid] = true
				continue
			}
			if xmin != p.xmin {
				problem("heap tuple %s: its external value names %s, a chunk of another value (xmin %d, the value's %d): its own was lost", tid, t, xmin, p.xmin)
				lost[tid] = true
				continue
			}
			if !p.indirect {
				continue
			}
			listed := c.dirs[t]
			if len(listed) != p.directoryLen(i) {
				problem("heap tuple %s: directory %s lists %d chunks, the value's length implies %d", tid, t, len(listed), p.directoryLen(i))
			}
			for _, d := range listed {
				if skip(d) {
					lost[tid] = true
					continue
				}
				switch chunk, dir, xmin := kind(d); {
				case !chunk || dir:
					problem("heap tuple %s: directory %s names %s, which is not a data chunk", tid, t, d)
					lost[tid] = true
				case xmin != p.xmin:
					problem("heap tuple %s: directory %s names %s, a chunk of another value (xmin %d, the value's %d): its own was lost", tid, t, d, xmin, p.xmin)
					lost[tid] = true
				}
			}
		}
	}
	if bad > maxReported {
		report("%d more problems with external values", bad-maxReported)
	}
	return lost
}
