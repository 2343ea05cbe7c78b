package heap

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"mvkv/vfs"
)

// SegmentBlocks is the number of blocks in one segment file: 1 GiB of 8 KiB
// blocks, as PostgreSQL's RELSEG_SIZE.
const SegmentBlocks = 1 << 30 / PageSize

// ErrClosed is returned by Storage methods called after Close.
var ErrClosed = errors.New("heap: storage closed")

// Storage is the heap relation on disk, as PostgreSQL's md.c: block b lives
// in segment file b/SegmentBlocks (named with 8 decimal digits, "00000000",
// "00000001", ...) in dir, at byte offset (b%SegmentBlocks)*PageSize.
//
// Blocks may be written in any order (the buffer pool evicts them so), so a
// segment may have holes; every block that was never written reads as
// zeros, which VerifyPage accepts as a new page. A write past the end fills
// the blocks it skips, so a segment below the last is 1 GiB unless a crash
// lost its last unsynced pages while keeping a later segment's (Layout).
// All methods are safe for concurrent use.
type Storage struct {
	fs  vfs.FS
	dir string

	// nblocks is one past the highest block present in any segment file.
	nblocks atomic.Uint32
	// written is the number of blocks a checkpoint is known to have
	// written: a page of zeros below it was lost, not never written.
	written atomic.Uint32
	// noZeros: a page of zeros inside a file is damage wherever it lies
	// (SetNoZeros).
	noZeros atomic.Bool
	// extendMu serializes writes at or past nblocks (WriteBlock).
	extendMu sync.Mutex

	// syncMu serializes Sync, so that a Sync that returns has covered every
	// write completed before it was called, even with another Sync running.
	syncMu sync.Mutex

	mu sync.RWMutex
	// segs maps a segment number to its open file; guarded by mu.
	segs map[uint32]vfs.File
	// dirty holds the segments written since their last fsync; guarded by mu.
	dirty map[uint32]struct{}
	// known maps a segment number to the number of its blocks known to be
	// in the file: its whole pages at open, raised by every write, lowered
	// by Truncate. A read of a block below it that finds the file shorter
	// means the file was cut while open. Guarded by mu.
	known map[uint32]uint32
	// failed is the first fsync error; once set, Sync returns it forever,
	// because after a failed fsync the kernel may have dropped the dirty
	// pages and a retry can succeed without writing them (PostgreSQL's
	// data_sync_retry=off). Guarded by mu.
	failed error
	closed bool // guarded by mu
}

func segName(seg uint32) string { return fmt.Sprintf("%08d", seg) }

// IsSegmentName reports whether name is a heap segment file's name, eight
// decimal digits; the visibility map names its files the same way.
func IsSegmentName(name string) bool {
	_, ok := parseSegName(name)
	return ok
}

// parseSegName returns the segment number of a file name made of exactly 8
// decimal digits; other names are not segments (and are left alone).
func parseSegName(name string) (uint32, bool) {
	if len(name) != 8 {
		return 0, false
	}
	for i := 0; i < len(name); i++ {
		if name[i] < '0' || name[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(name, 10, 32)
	if err != nil || n > (1<<32-1)/SegmentBlocks {
		return 0, false
	}
	return uint32(n), true
}

// OpenStorage opens (creating if needed) the heap relation in dir and
// computes NBlocks from the sizes of its segment files. A trailing partial
// block (a torn extension) is not counted and reads as zeros. It fails with
// an error wrapping ErrCorrupt if a segment is larger than 1 GiB.
func OpenStorage(fs vfs.FS, dir string) (*Storage, error) {
	if err := fs.MkdirAll(dir); err != nil {
		return nil, fmt.Errorf("heap: %w", err) // the path error names the directory
	}
	names, err := fs.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("heap: list %s: %w", dir, err)
	}
	s := &Storage{fs: fs, dir: dir, segs: make(map[uint32]vfs.File), dirty: make(map[uint32]struct{}), known: make(map[uint32]uint32)}
	var nblocks uint64
	for _, name := range names {
		seg, ok := parseSegName(name)
		if !ok {
			continue
		}
		f, err := fs.Open(path.Join(dir, name))
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("heap: open segment: %w", err)
		}
		s.segs[seg] = f
		size, err := f.Size()
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("heap: size of %s: %w", f.Name(), err)
		}
		if size > SegmentBlocks*PageSize {
			s.Close()
			return nil, segmentTooLongError{f.Name(), size}
		}
		s.known[seg] = uint32(size / PageSize)
		if n := uint64(seg)*SegmentBlocks + uint64(size/PageSize); size >= PageSize && n > nblocks {
			nblocks = n
		}
	}
	s.nblocks.Store(uint32(min(nblocks, 1<<32-1)))
	return s, nil
}

// NBlocks returns one past the highest block present on disk, from the file
// sizes at open and the writes since. It does not count blocks only extended
// in the buffer pool.
func (s *Storage) NBlocks() uint32 { return s.nblocks.Load() }

func (s *Storage) segment(seg uint32) (vfs.File, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	return s.segs[seg], nil
}

// ReadBlock reads block into p (PageSize bytes) and verifies it with
// VerifyPage. A block that was never written (beyond the end of its segment,
// in a hole, or in a missing segment) reads as all zeros, except below the
// length a checkpoint wrote (SetWritten): there a page of zeros, a block
// past its file's end or in a missing segment is an error wrapping
// ErrZeroedPage that names the file. So is a block past its file's end
// that the file held when it was opened or that was written since (the
// file was cut short while open), and, after SetNoZeros, a page of zeros
// anywhere inside a file. A page that fails verification gives
// an error wrapping ErrCorrupt that names the file, the byte offset and the
// block.
func (s *Storage) ReadBlock(block uint32, p []byte) error {
	if len(p) != PageSize {
		return fmt.Errorf("heap: read block %d: buffer is %d bytes, want %d", block, len(p), PageSize)
	}
	f, err := s.segment(block / SegmentBlocks)
	if err != nil {
		return err
	}
	off := int64(block%SegmentBlocks) * PageSize
	if f == nil {
		clear(p)
		if block < s.written.Load() {
			return fmt.Errorf("%w: %s (block %d at offset %d) is missing, below the %d blocks a checkpoint wrote",
				ErrZeroedPage, path.Join(s.dir, segName(block/SegmentBlocks)), block, off, s.written.Load())
		}
		return nil
	}
	n, err := f.ReadAt(p, off)
	if n < PageSize && (err == nil || errors.Is(err, io.EOF)) && s.knownHeld(block) {
		// The file held the block, or a write raised the count after
		// this read: known is raised only once a write's data is in the
		// file (an extension fills the blocks it skips), so a second
		// read finds it unless the file was cut.
		n, err = f.ReadAt(p, off)
	}
	if n < PageSize {
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("heap: read %s at offset %d (block %d): %w", f.Name(), off, block, err)
		}
		// Past the end of the file, or a partial last block left by a
		// torn extension: never completely written, so new. Redo rewrites
		// it from a full-page image if it mattered. Below the length a
		// checkpoint wrote, the file was cut short after it; below what
		// the file is known to have held (its whole pages at open and
		// every write since), it was cut short while open, by something
		// other than this database (PostgreSQL's "could not read block
		// ... read only 0 of 8192 bytes"). Read as new, the versions on
		// it would be lost.
		clear(p)
		if block < s.written.Load() {
			size, _ := f.Size()
			return fmt.Errorf("%w: %s at offset %d (block %d) lies past the file's end (%d bytes), below the %d blocks a checkpoint wrote: the file was cut short",
				ErrZeroedPage, f.Name(), off, block, size, s.written.Load())
		}
		// Truncate lowers known before it cuts the file, so a read
		// racing with it is not taken for damage.
		if s.knownHeld(block) {
			s.mu.RLock()
			known := s.known[block/SegmentBlocks]
			s.mu.RUnlock()
			size, _ := f.Size()
			return fmt.Errorf("%w: %s at offset %d (block %d) lies past the file's end (%d bytes), which held %d bytes: the file was cut short while open",
				ErrZeroedPage, f.Name(), off, block, size, int64(known)*PageSize)
		}
		return nil
	}
	if err := VerifyPage(p, block); err != nil {
		return fmt.Errorf("%s at offset %d (block %d): %w", f.Name(), off, block, err)
	}
	if IsNew(p) {
		if block < s.written.Load() {
			return fmt.Errorf("%w: %s at offset %d (block %d), below the %d blocks a checkpoint wrote", ErrZeroedPage, f.Name(), off, block, s.written.Load())
		}
		if s.noZeros.Load() {
			return fmt.Errorf("%w: %s at offset %d (block %d), inside the file, where this database never writes a page of zeros: the file was cut short or overwritten while open",
				ErrZeroedPage, f.Name(), off, block)
		}
	}
	return nil
}

// knownHeld reports whether block's segment file is known to have held it
// (at open, or written since).
func (s *Storage) knownHeld(block uint32) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return block%SegmentBlocks < s.known[block/SegmentBlocks]
}

// SetNoZeros tells ReadBlock that from now on every page inside the files
// was written by this Storage or checked: a page of zeros there, at any
// block, is damage (an error wrapping ErrZeroedPage), as below the length
// a checkpoint wrote. Before it, such a page reads as new, since a crash
// can leave one past that length (an extension whose write was lost while
// a later block's reached the disk); recovery calls it once it has
// replaced those with empty pages. WriteBlock never writes zeros, so no
// page of zeros appears inside a file by this Storage's doing. Safe for
// concurrent use.
func (s *Storage) SetNoZeros() { s.noZeros.Store(true) }

// SetWritten records that a checkpoint wrote every block below n (the heap
// length in the control file), so that ReadBlock reports a page of zeros
// below it as corruption (ErrCorrupt) instead of reading it as a new page:
// only damage makes such a page zero again, and read as new it would lose
// every version on it silently. Safe for concurrent use.
func (s *Storage) SetWritten(n uint32) { s.written.Store(n) }

// WriteBlock sets the checksum in p (PageSize bytes; the caller's copy is
// modified) and writes it at block's place, extending or creating the
// segment file as needed. A page of zeros (extended but not yet used) is
// written initialized and empty instead, and a write past the end first
// writes initialized empty pages into the blocks between (blocks the
// buffer pool extended but has not written yet, which it overwrites when
// it does), so the file never holds a page of zeros below its end: zeros
// found there are damage. A new segment file is made durable in its
// directory (fsync of dir) before WriteBlock returns. The data itself is
// durable only after Sync. The caller must have flushed the WAL up to the
// page's LSN first. Safe for concurrent use.
func (s *Storage) WriteBlock(block uint32, p []byte) error {
	if len(p) != PageSize {
		return fmt.Errorf("heap: write block %d: buffer is %d bytes, want %d", block, len(p), PageSize)
	}
	if block < s.nblocks.Load() {
		return s.writeBlock(block, p)
	}
	// Extending. Under extendMu, so that a fill never lands after the
	// real write of the same block: a writer of a block below the end
	// sees the end only once the fills below it are written.
	s.extendMu.Lock()
	defer s.extendMu.Unlock()
	if err := s.fillTo(block); err != nil {
		return err
	}
	return s.writeBlock(block, p)
}

// fillRun is how many empty pages fillTo writes with one call (1 MiB).
const fillRun = 128

// fillTo writes empty pages (initialized, checksummed) from the end of the
// relation up to block, exclusive, fillRun pages a write call: a write far
// past the end (the first block of a new segment, say) fills 1 GiB, which a
// call a page took about 131,072 calls and allocations for. The caller
// holds extendMu.
func (s *Storage) fillTo(block uint32) error {
	var buf []byte
	for b := s.nblocks.Load(); b < block; {
		n := min(block-b, fillRun, SegmentBlocks-b%SegmentBlocks)
		if buf == nil {
			buf = make([]byte, min(block-b, fillRun)*PageSize)
		}
		pages := buf[:n*PageSize]
		for i := uint32(0); i < n; i++ {
			p := pages[i*PageSize : (i+1)*PageSize]
			clear(p)
			InitPage(p)
			SetChecksum(p, b+i)
		}
		if err := s.writeRun(b, pages); err != nil {
			return err
		}
		b += n
	}
	return nil
}

func (s *Storage) writeBlock(block uint32, p []byte) error {
	seg := block / SegmentBlocks
	f, err := s.segment(seg)
	if err != nil {
		return err
	}
	if f == nil {
		if f, err = s.createSegment(seg); err != nil {
			return err
		}
	}
	if IsNew(p) {
		InitPage(p)
	}
	SetChecksum(p, block)
	off := int64(block%SegmentBlocks) * PageSize
	if _, err := f.WriteAt(p, off); err != nil {
		return writeError{fmt.Errorf("heap: write %s at offset %d (block %d): %w", f.Name(), off, block, err)}
	}
	s.mu.Lock()
	s.dirty[seg] = struct{}{}
	s.known[seg] = max(s.known[seg], block%SegmentBlocks+1)
	s.mu.Unlock()
	for {
		n := s.nblocks.Load()
		if block < n || s.nblocks.CompareAndSwap(n, block+1) {
			break
		}
	}
	return nil
}

// CheckSizes returns one error matching ErrCorrupt for every segment file
// whose size is not a whole number of pages, naming the file, its size and
// the offset of the page cut short; nil if every size checks out. OpenStorage
// and ReadBlock tolerate such a tail (a torn extension reads as a new page),
// because redo rewrites the page if it mattered; but once a checkpoint has
// written every dirty page, a page still cut short was damaged after it was
// written, and what it held is lost. The sizes are read now, not at open.
// Errors of reading a size are returned as they are.
func (s *Storage) CheckSizes() []error {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return []error{ErrClosed}
	}
	files := make([]vfs.File, 0, len(s.segs))
	for _, f := range s.segs {
		files = append(files, f)
	}
	s.mu.RUnlock()
	var errs []error
	for _, f := range files {
		size, err := f.Size()
		if err != nil {
			errs = append(errs, fmt.Errorf("heap: size of %s: %w", f.Name(), err))
			continue
		}
		if size%PageSize != 0 {
			errs = append(errs, sizeError{file: f.Name(), size: size})
		}
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errs
}

// sizeError is a segment file that ends inside a page. It matches
// ErrCorrupt; its text carries no package prefix, so that the caller's
// context (heap or visibility map) reads first.
type sizeError struct {
	file string
	size int64
}

func (e sizeError) Error() string {
	rest := e.size % PageSize
	return fmt.Sprintf("%s is %d bytes, not a whole number of %d-byte pages: the page at offset %d has only %d bytes",
		e.file, e.size, PageSize, e.size-rest, rest)
}

func (e sizeError) Is(target error) bool { return target == ErrCorrupt }

// segmentTooLongError is a segment file longer than a segment: it matches
// ErrCorrupt, but names the file rather than a page.
type segmentTooLongError struct {
	file string
	size int64
}

func (e segmentTooLongError) Error() string {
	return fmt.Sprintf("heap: segment %s is %d bytes, more than a segment's %d (%d pages): bytes were appended to it",
		e.file, e.size, int64(SegmentBlocks*PageSize), SegmentBlocks)
}

func (e segmentTooLongError) Is(target error) bool { return target == ErrCorrupt }

// createSegment creates segment seg and fsyncs the directory, so that the
// file (and what is later synced into it) survives a crash.
func (s *Storage) createSegment(seg uint32) (vfs.File, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if f := s.segs[seg]; f != nil {
		return f, nil
	}
	name := path.Join(s.dir, segName(seg))
	f, err := s.fs.Create(name)
	if err != nil {
		return nil, fmt.Errorf("heap: create segment: %w", err)
	}
	if err := s.fs.SyncDir(s.dir); err != nil {
		f.Close()
		return nil, fmt.Errorf("heap: sync directory %s after creating %s: %w", s.dir, name, err)
	}
	s.segs[seg] = f
	return f, nil
}

// Sync fsyncs every segment written since the last successful Sync, so that
// every WriteBlock that returned before Sync was called is durable. Once an
// fsync fails, Sync keeps returning that error: the engine must stop and let
// recovery redo from the last checkpoint (DESIGN rule 6).
func (s *Storage) Sync() error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	s.mu.Lock()
	if s.failed != nil {
		s.mu.Unlock()
		return s.failed
	}
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	files := make([]vfs.File, 0, len(s.dirty))
	for seg := range s.dirty {
		files = append(files, s.segs[seg])
	}
	clear(s.dirty)
	s.mu.Unlock()
	for _, f := range files {
		if err := f.Sync(); err != nil {
			err = fmt.Errorf("heap: fsync %s: %w", f.Name(), err)
			s.mu.Lock()
			s.failed = err
			s.mu.Unlock()
			return err
		}
	}
	return nil
}

// Close closes every segment file without syncing; call Sync first for
// durability. Later calls of any method return ErrClosed.
func (s *Storage) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.closed = true
	var first error
	for _, f := range s.segs {
		if err := f.Close(); err != nil && first == nil {
			first = fmt.Errorf("heap: close %s: %w", f.Name(), err)
		}
	}
	return first
}

// ErrWriteFailed matches the error of WriteBlock, WriteBlocks and the
// calls built on them when the write itself failed (no space left on the
// device, say), as opposed to an fsync, which Sync reports and never
// retries. The caller's copy of the page is intact, so the write can be
// retried: PostgreSQL's checkpointer and background writer report a failed
// write and try again later, and stop only on a failed fsync.
var ErrWriteFailed = errors.New("heap: write failed")

// writeError is a failed write: its text is the wrapped error's, and it
// matches ErrWriteFailed.
type writeError struct{ err error }

func (e writeError) Error() string        { return e.err.Error() }
func (e writeError) Unwrap() error        { return e.err }
func (e writeError) Is(target error) bool { return target == ErrWriteFailed }

// ErrZeroedPage is ReadBlock's error for a page of zeros below the length
// a checkpoint wrote (SetWritten). It matches ErrCorrupt too.
var ErrZeroedPage = fmt.Errorf("%w: page of zeros", ErrCorrupt)

// WriteBlocks writes len(pages)/PageSize consecutive blocks from first, as
// WriteBlock writes each (checksums set in pages, pages of zeros written
// initialized, the blocks between the end of the relation and first filled
// with empty pages), with one write call per segment file it touches. It is
// for bulk loading, whose pages are built outside the buffer pool: the
// caller makes sure no buffer holds those blocks. The data is durable only
// after Sync. Safe for concurrent use.
func (s *Storage) WriteBlocks(first uint32, pages []byte) error {
	if len(pages) == 0 || len(pages)%PageSize != 0 {
		return fmt.Errorf("heap: write blocks from %d: %d bytes, not a positive multiple of %d", first, len(pages), PageSize)
	}
	n := uint64(len(pages) / PageSize)
	if uint64(first)+n > 1<<32-1 {
		return fmt.Errorf("heap: write %d blocks from %d: past the largest block number", n, first)
	}
	for i := uint64(0); i < n; i++ {
		p := pages[i*PageSize : (i+1)*PageSize]
		if IsNew(p) {
			InitPage(p)
		}
		SetChecksum(p, first+uint32(i))
	}
	s.extendMu.Lock()
	defer s.extendMu.Unlock()
	if err := s.fillTo(first); err != nil {
		return err
	}
	return s.writeRun(first, pages)
}

// writeRun writes pages, initialized and checksummed, as the blocks from
// first on, with one write call per segment file it touches, and moves the
// end of the relation past them.
func (s *Storage) writeRun(first uint32, pages []byte) error {
	n := uint64(len(pages) / PageSize)
	for done := uint64(0); done < n; {
		blk := first + uint32(done)
		seg := blk / SegmentBlocks
		run := min(n-done, uint64(SegmentBlocks-blk%SegmentBlocks))
		f, err := s.segment(seg)
		if err == nil && f == nil {
			f, err = s.createSegment(seg)
		}
		if err != nil {
			return err
		}
		off := int64(blk%SegmentBlocks) * PageSize
		if _, err := f.WriteAt(pages[done*PageSize:(done+run)*PageSize], off); err != nil {
			return writeError{fmt.Errorf("heap: write %s at offset %d (blocks %d to %d): %w", f.Name(), off, blk, blk+uint32(run)-1, err)}
		}
		s.mu.Lock()
		s.dirty[seg] = struct{}{}
		s.known[seg] = max(s.known[seg], blk%SegmentBlocks+uint32(run))
		s.mu.Unlock()
		end := blk + uint32(run)
		for {
			cur := s.nblocks.Load()
			if end <= cur || s.nblocks.CompareAndSwap(cur, end) {
				break
			}
		}
		done += run
	}
	return nil
}

// Truncate cuts the relation back to n blocks, durably: each segment file
// holding blocks at or past n is shortened (segments wholly past n are
// left empty, not removed) and fsynced before Truncate returns. It is for
// removing the pages of a bulk load that never committed; the caller makes
// sure no buffer holds a block at or past n. A relation of n blocks or
// fewer is left as it is. Safe for concurrent use, but a write past n
// racing with it may be lost.
func (s *Storage) Truncate(n uint32) error {
	s.extendMu.Lock()
	defer s.extendMu.Unlock()
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return ErrClosed
	}
	type segFile struct {
		seg uint32
		f   vfs.File
	}
	var files []segFile
	for seg, f := range s.segs {
		files = append(files, segFile{seg, f})
	}
	s.mu.RUnlock()
	// Below the written length a block past a file's end is damage:
	// lowered first, so that a concurrent read of a block being cut off
	// (the background damage scan) finds it new, not lost.
	for {
		cur := s.written.Load()
		if cur <= n || s.written.CompareAndSwap(cur, n) {
			break
		}
	}
	// The last segment first, so that a crash in the middle leaves the
	// files a prefix of the heap, not a short segment before a longer one.
	slices.SortFunc(files, func(a, b segFile) int { return cmp.Compare(b.seg, a.seg) })
	for _, sf := range files {
		start := uint64(sf.seg) * SegmentBlocks
		if start+SegmentBlocks <= uint64(n) {
			continue
		}
		want := int64(0)
		if uint64(n) > start {
			want = int64(uint64(n)-start) * PageSize
		}
		size, err := sf.f.Size()
		if err != nil {
			return fmt.Errorf("heap: size of %s: %w", sf.f.Name(), err)
		}
		if size <= want {
			continue
		}
		s.mu.Lock()
		s.known[sf.seg] = min(s.known[sf.seg], uint32(want/PageSize))
		s.mu.Unlock()
		if err := sf.f.Truncate(want); err != nil {
			return fmt.Errorf("heap: truncate %s to %d bytes: %w", sf.f.Name(), want, err)
		}
		if err := sf.f.Sync(); err != nil {
			return fmt.Errorf("heap: fsync %s: %w", sf.f.Name(), err)
		}
	}
	for {
		cur := s.nblocks.Load()
		if cur <= n || s.nblocks.CompareAndSwap(cur, n) {
			break
		}
	}
	return nil
}

// Segment is one segment of the relation as found on disk.
type Segment struct {
	Num  uint32 // segment number: the file holds blocks from Num*SegmentBlocks
	Path string // the file's path (where it belongs, when Missing)
	Size int64  // the file's size in bytes when the layout was read; 0 when Missing
	// Missing: no file of this number (though a later one exists, or
	// the caller asked for one past the last).
	Missing bool
}

// FirstBlock is the first block the segment holds.
func (g Segment) FirstBlock() uint32 { return g.Num * SegmentBlocks }

// Blocks is the number of whole blocks in the file.
func (g Segment) Blocks() uint32 { return uint32(g.Size / PageSize) }

// Full reports whether the segment holds all SegmentBlocks blocks.
func (g Segment) Full() bool { return g.Size >= SegmentBlocks*PageSize }

// Layout is the relation's segment files as found on disk. WriteBlock and
// WriteBlocks fill every block they skip, so a segment below the last one
// holding data is full (1 GiB) unless something went wrong: a crash kept a
// write into a later segment but lost the earlier segment's last ones (the
// operating system writes files back in any order), the file was cut
// short, or another copy's segment file was put after it. The caller
// judges which (the engine at Open, against the length the last checkpoint
// wrote and the WAL since; verification after a checkpoint).
type Layout struct {
	Dir string // the directory of the segment files
	// Segments holds every segment from 0 to the highest-numbered file,
	// by number, a missing one included with Missing set. Files after
	// the last one holding data (more than 0 bytes) are empty: Truncate
	// leaves them so.
	Segments []Segment
}

// Last returns the last segment holding data; ok is false when none does.
func (l Layout) Last() (g Segment, ok bool) {
	for i := len(l.Segments) - 1; i >= 0; i-- {
		if l.Segments[i].Size > 0 {
			return l.Segments[i], true
		}
	}
	return Segment{}, false
}

// Short returns, in order, the segments before the last one holding data
// that are not full (missing ones included): what PostgreSQL's mdnblocks
// would stop at.
func (l Layout) Short() []Segment {
	last, ok := l.Last()
	if !ok {
		return nil
	}
	var short []Segment
	for _, g := range l.Segments[:last.Num] {
		if !g.Full() {
			short = append(short, g)
		}
	}
	return short
}

// Segment returns segment num: from the layout, or Missing (with the path
// it would have) when it lies past the highest-numbered file.
func (l Layout) Segment(num uint32) Segment {
	if int(num) < len(l.Segments) {
		return l.Segments[num]
	}
	return Segment{Num: num, Path: l.path(num), Missing: true}
}

func (l Layout) path(num uint32) string { return path.Join(l.Dir, segName(num)) }

// Layout lists the segment files in the directory and reads their sizes
// now (not at open), so that it sees the files as they are.
func (s *Storage) Layout() (Layout, error) {
	s.mu.RLock()
	closed := s.closed
	s.mu.RUnlock()
	if closed {
		return Layout{}, ErrClosed
	}
	names, err := s.fs.ReadDir(s.dir)
	if err != nil {
		return Layout{}, fmt.Errorf("heap: list %s: %w", s.dir, err)
	}
	sizes := map[uint32]int64{}
	for _, name := range names {
		seg, ok := parseSegName(name)
		if !ok {
			continue
		}
		size, err := s.fs.Stat(path.Join(s.dir, name))
		if err != nil {
			return Layout{}, fmt.Errorf("heap: size of %s: %w", path.Join(s.dir, name), err)
		}
		sizes[seg] = size
	}
	l := Layout{Dir: s.dir}
	if len(sizes) == 0 {
		return l, nil
	}
	for seg := uint32(0); seg <= slices.Max(slices.Collect(maps.Keys(sizes))); seg++ {
		size, ok := sizes[seg]
		l.Segments = append(l.Segments, Segment{Num: seg, Path: l.path(seg), Size: size, Missing: !ok})
	}
	return l, nil
}

// CheckSegments returns one error matching ErrCorrupt for every segment
// before the last one holding data that is not 1 GiB (Layout.Short),
// naming the file, its size and the segment after it that holds data; nil
// when the layout checks out. After a checkpoint no such segment is left
// by a crash (the engine fills one at Open), so one found is damage.
func (s *Storage) CheckSegments() []error {
	l, err := s.Layout()
	if err != nil {
		return []error{err}
	}
	var errs []error
	for _, g := range l.Short() {
		next := g
		for _, h := range l.Segments[g.Num+1:] {
			if h.Size > 0 {
				next = h
				break
			}
		}
		errs = append(errs, ShortSegmentError{Segment: g, Next: next})
	}
	return errs
}

// ShortSegmentError is a segment before another that is not 1 GiB. It
// matches ErrCorrupt; its text carries no package prefix, so that the
// caller's context (heap or visibility map) reads first.
type ShortSegmentError struct {
	Segment Segment // the short one
	Next    Segment // the next segment holding data
}

// Error names both segments, their sizes, and the size a segment before
// another must have.
func (e ShortSegmentError) Error() string {
	if e.Segment.Missing {
		return fmt.Sprintf("segment %s is missing but is not the last segment (%s follows it, %d bytes); a segment before another must be %d bytes",
			e.Segment.Path, e.Next.Path, e.Next.Size, int64(SegmentBlocks*PageSize))
	}
	return fmt.Sprintf("segment %s is %d bytes but is not the last segment (%s follows it, %d bytes); a segment before another must be %d bytes",
		e.Segment.Path, e.Segment.Size, e.Next.Path, e.Next.Size, int64(SegmentBlocks*PageSize))
}

// Is reports whether target is ErrCorrupt, which the error matches.
func (e ShortSegmentError) Is(target error) bool { return target == ErrCorrupt }

// FillSegment writes an initialized empty page at every block of segment
// num from its last whole page to its end (a partial last page is
// overwritten), creating the file if it is missing, so that the segment is
// 1 GiB, as WriteBlock would have left it. It returns the number of blocks
// written. It is for recovery: a crash can leave a segment short before a
// later one (Layout), and its missing blocks were extended after the last
// checkpoint and, unless redo rewrites them, never used. The caller makes
// sure no buffer holds one of those blocks. Durable after Sync.
func (s *Storage) FillSegment(num uint32) (uint32, error) {
	if num > (1<<32-1)/SegmentBlocks-1 {
		return 0, fmt.Errorf("heap: fill segment %d: past the largest block number", num)
	}
	f, err := s.segment(num)
	if err != nil {
		return 0, err
	}
	var have int64
	if f != nil {
		if have, err = f.Size(); err != nil {
			return 0, fmt.Errorf("heap: size of %s: %w", f.Name(), err)
		}
	}
	first := num*SegmentBlocks + uint32(min(have/PageSize, SegmentBlocks))
	end := (num + 1) * SegmentBlocks
	return s.WriteEmptyPages(first, end-first)
}

// WriteEmptyPages writes an initialized empty page, with its block's
// checksum, at the n blocks from first, as WriteBlocks writes pages of
// zeros, 64 blocks to a write. It returns how many it wrote, n unless an
// error came first. For recovery, which replaces pages that were never
// written; the caller makes sure no buffer holds one of those blocks.
// Durable after Sync.
func (s *Storage) WriteEmptyPages(first, n uint32) (uint32, error) {
	const chunk = 64 // blocks per write
	pages := make([]byte, min(chunk, n)*PageSize)
	for done := uint32(0); done < n; {
		k := min(chunk, n-done)
		// WriteBlocks initializes a page of zeros and stamps the
		// checksum of its block, so the buffer is reused as it is.
		if err := s.WriteBlocks(first+done, pages[:k*PageSize]); err != nil {
			return done, err
		}
		done += k
	}
	return n, nil
}
