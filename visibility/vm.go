package visibility

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"path"
	"strings"
	"sync/atomic"

	"mvkv/internal/bufpool"
	"mvkv/internal/heap"
	"mvkv/vfs"
	"mvkv/wal"
)

// Bits are the visibility map bits of one heap block, as PostgreSQL's
// VISIBILITYMAP_ALL_VISIBLE and VISIBILITYMAP_ALL_FROZEN. Part of the
// format; do not change the values.
type Bits uint8

const (
	// AllVisible: every tuple on the heap page is visible to every
	// snapshot, present and future.
	AllVisible Bits = 0x01
	// AllFrozen: every tuple on the heap page is also frozen, so nothing
	// on it needs the CLOG. Never set without AllVisible.
	AllFrozen Bits = 0x02
	// ValidBits is every bit the map keeps (VISIBILITYMAP_VALID_BITS).
	ValidBits = AllVisible | AllFrozen
)

// Geometry of a map page; see the package documentation for the diagram.
const (
	// BitsPerHeapBlock is the number of map bits kept per heap block.
	BitsPerHeapBlock = 2
	// MapBytesPerPage is the number of bitmap bytes on a map page: the
	// 8 KiB page minus its 24-byte header (PostgreSQL's MAPSIZE).
	MapBytesPerPage = 8168
	// HeapBlocksPerPage is the number of heap blocks one map page covers
	// (HEAPBLOCKS_PER_PAGE): 32672, about 255 MiB of heap.
	HeapBlocksPerPage = MapBytesPerPage * 8 / BitsPerHeapBlock
)

// DefaultBuffers is the number of map pages cached when Options.Buffers is
// zero. One page covers about 255 MiB of heap, so a few pages go a long way;
// the rest are there so that concurrent callers touching different map pages
// never find every frame pinned.
const DefaultBuffers = 32

var (
	// ErrCorrupt is wrapped by every error that reports bytes that cannot
	// be a valid map page; the message names the file and byte offset.
	ErrCorrupt = errors.New("visibility: corrupt visibility map page")
	// ErrClosed is returned by Map methods after Close.
	ErrClosed = errors.New("visibility: map closed")
	// ErrNoFreeBuffer is returned by Set, Clear, ClearRange and Test
	// (unless Options.NoFreeBufferError replaces it) when the page they
	// need is not cached and every buffer of the map's cache is pinned
	// by other calls in progress, each on a map page of its own, so none
	// can be evicted. Nothing changed; the call may be retried.
	ErrNoFreeBuffer = errors.New("visibility: every map buffer is pinned")
	// ErrStrayFile is matched by the errors of Map.StrayFiles: a file
	// named as a map file that lies past every map page the heap needs.
	ErrStrayFile = errors.New("visibility: map file past the pages the heap needs")
)

// MapBlock returns the map page holding heapBlk's bits.
func MapBlock(heapBlk uint32) uint32 { return heapBlk / HeapBlocksPerPage }

// bitPos returns the byte offset within a map page and the bit shift of
// heapBlk's bits.
func bitPos(heapBlk uint32) (off int, shift uint) {
	i := heapBlk % HeapBlocksPerPage
	return heap.PageHeaderSize + int(i/4), uint(i%4) * BitsPerHeapBlock
}

// PageBits returns heapBlk's bits from map page p (as read by ReadPage or
// verified with VerifyPage). A new (all-zero) page has no bits set. It
// returns 0 if p is not PageSize bytes.
func PageBits(p []byte, heapBlk uint32) Bits {
	if len(p) != heap.PageSize {
		return 0
	}
	off, shift := bitPos(heapBlk)
	return Bits(p[off]>>shift) & ValidBits
}

// VerifyPage checks a map page read from map block vmBlock: an all-zero
// page is valid (never written); otherwise it must pass the heap page
// check (checksum over the page and the block number) and have the map page's
// fixed header: no line pointers, no free-space hole (lower 24, upper
// 8192) and no page flags. It never panics, whatever p holds. Errors wrap
// ErrCorrupt.
func VerifyPage(p []byte, vmBlock uint32) error {
	if err := heap.VerifyPage(p, vmBlock); err != nil {
		return fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if heap.IsNew(p) {
		return nil
	}
	// InitPage gives lower 24 and upper 8192, and a map page never moves
	// them: any other value is damage.
	if lower, upper := binary.LittleEndian.Uint16(p[14:]), binary.LittleEndian.Uint16(p[16:]); lower != heap.PageHeaderSize || upper != heap.PageSize {
		return fmt.Errorf("%w: map page header has lower %d, upper %d, want %d, %d", ErrCorrupt, lower, upper, heap.PageHeaderSize, heap.PageSize)
	}
	if f := heap.PageFlags(p); f != 0 {
		return fmt.Errorf("%w: page flags %#x on a map page", ErrCorrupt, f)
	}
	return nil
}

// Options configure Open.
type Options struct {
	// Buffers is the number of 8 KiB map pages cached (default
	// DefaultBuffers).
	Buffers int
	// FlushWAL makes the WAL durable up to an LSN. It is called before a
	// map page is written, with the page's LSN (WAL before data: no page
	// reaches its file before the WAL describing its last change is
	// durable). Nil means there is no WAL to flush.
	FlushWAL func(lsn uint64) error
	// Unlogged turns the WAL-before-data interlock off: pages are written
	// without flushing the WAL to their LSN, as PostgreSQL did before 9.2,
	// when setting a bit was not WAL-logged. UNSAFE: after a crash a bit
	// can claim a page all-visible when it is not. Kept only for the
	// experiment that measures what crash safety costs.
	Unlogged bool
	// NoFreeBufferError, if not nil, is returned in place of
	// ErrNoFreeBuffer, so that a caller with a sentinel of its own for
	// a full buffer pool gets the same one from the map.
	NoFreeBufferError error
	// OnDamage, if set, is called (from the goroutine that read it) with
	// an error matching ErrCorrupt that names the file and offset each
	// time a map page that fails its checks is read into the cache and
	// taken as a page with no bit set (see Map). It must not call the Map.
	OnDamage func(err error)
	// EndOfWAL, if set, returns the end of the WAL (where the next record
	// goes), or 0 while there is none. A map page read with an LSN past
	// it was not written by this database (WAL before data), but by a
	// later copy of it (a file copied while a server wrote, or put back
	// from a later backup): it is taken as damage, a page with no bit
	// set. Kept, its LSN would stop every write of it, and so every
	// checkpoint, at the WAL flush before the write.
	EndOfWAL func() uint64
}

// Map is the visibility map fork of the heap, PostgreSQL's visibilitymap.c:
// two bits per heap block in checksummed 8 KiB pages in DATA/vm, cached in
// a buffer pool of their own. All methods are safe for concurrent use; the
// bits of one map page are changed under that page's exclusive content
// lock and read under its shared one.
//
// A map page that fails its checksum or header check when it is read into
// the cache is taken as a page with no bit set, as PostgreSQL reads map
// pages with RBM_ZERO_ON_ERROR: a clear bit only sends a reader or vacuum
// to the heap page, so clearing is always safe, where an error would stop
// every change to the 255 MiB of heap the page covers. The damage is
// reported through Options.OnDamage and counted (MapStats.PagesZeroed),
// as is a page whose LSN lies past the end of the WAL (Options.EndOfWAL);
// the page on disk stays as it is (and ReadPage still reports a page that
// fails its checks) until a bit is next set on the page and the page is
// written whole. An I/O error
// is still returned. Redo after a crash sets again every bit logged since
// the redo point, and vacuum the others.
//
// A Map knows nothing of the heap or the WAL records: the caller sets a bit
// only together with PD_ALL_VISIBLE on the heap page and with the LSN of the
// WAL record that logs both, and clears it, with PD_ALL_VISIBLE, as part of
// every change to the page (see the package documentation for why that
// order is crash-safe).
type Map struct {
	dir      string
	storage  *vmStorage
	pool     *bufpool.Pool
	unlogged bool

	closed atomic.Bool
	zeroed atomic.Uint64 // damaged pages read as no bit set
	// clears counts bit changes made by Clear; Reader uses it to know that
	// no bit went from set to unset since it cached one.
	clears atomic.Uint64
	sets   atomic.Uint64
	// trustedBelow is the heap block from which Test reports no bits
	// (Distrust); math.MaxUint32 while every bit is trusted.
	trustedBelow atomic.Uint32
}

// Open opens (creating if needed) the map fork in dir. A map page missing
// on disk reads as all zeros: no heap block all-visible. Errors: those of
// creating or listing dir, or ErrCorrupt-wrapping ones for a bad segment
// file.
func Open(fsys vfs.FS, dir string, o Options) (*Map, error) {
	st, err := heap.OpenStorage(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("visibility: open map fork: %w", err)
	}
	if o.Buffers <= 0 {
		o.Buffers = DefaultBuffers
	}
	flush := o.FlushWAL
	if flush == nil {
		flush = func(uint64) error { return nil }
	}
	pageLSN := heap.PageLSN
	if o.Unlogged {
		pageLSN = func([]byte) uint64 { return 0 }
	}
	m := &Map{dir: dir, storage: &vmStorage{Storage: st, dir: dir}, unlogged: o.Unlogged}
	m.trustedBelow.Store(math.MaxUint32)
	endOfWAL := o.EndOfWAL
	if o.Unlogged {
		endOfWAL = nil
	}
	m.pool = bufpool.New(zeroOnError{m, o.OnDamage, endOfWAL}, o.Buffers, flush, pageLSN)
	// The pool's own error names a package the map's callers cannot
	// see.
	noFree := ErrNoFreeBuffer
	if o.NoFreeBufferError != nil {
		noFree = o.NoFreeBufferError
	}
	m.pool.SetNoFreeBufferError(noFree)
	return m, nil
}

// Unlogged reports whether the map was opened with Options.Unlogged.
func (m *Map) Unlogged() bool { return m.unlogged }

func (m *Map) get(heapBlk uint32) (*bufpool.Buffer, error) {
	if m.closed.Load() {
		return nil, ErrClosed
	}
	return m.pool.Get(MapBlock(heapBlk))
}

// Set sets bits (a subset of ValidBits) for heapBlk and reports whether
// any bit changed, as visibilitymap_set. lsn is the end LSN of the WAL
// record that logs the change; it becomes the map page's LSN, so the page
// cannot reach disk before that record (WAL before data). If the page's LSN is
// already at or past lsn, the page reflects the record (redo of a change
// the page had when it was written) and nothing changes. lsn 0 (the
// unlogged mode) sets the bits without touching the LSN.
//
// The caller holds the heap page's exclusive content lock, so that the bit
// and PD_ALL_VISIBLE change together for every reader of the heap page.
// Errors: ErrClosed after Close; ErrNoFreeBuffer (or
// Options.NoFreeBufferError) when every cached map page is pinned; the
// failure of reading the map page, or of writing out the page its cache
// evicts for it. A map page that fails its checks is no error: it reads
// as a page with no bit set, reported to Options.OnDamage.
func (m *Map) Set(heapBlk uint32, bits Bits, lsn uint64) (bool, error) {
	bits &= ValidBits
	buf, err := m.get(heapBlk)
	if err != nil {
		return false, err
	}
	defer buf.Release()
	buf.Lock()
	defer buf.Unlock()
	page := buf.Page()
	if heap.IsNew(page) {
		heap.InitPage(page)
		buf.MarkDirty()
	}
	if lsn != 0 && heap.PageLSN(page) >= lsn {
		return false, nil
	}
	off, shift := bitPos(heapBlk)
	old := page[off]
	page[off] |= byte(bits) << shift
	if page[off] == old {
		return false, nil
	}
	if lsn != 0 {
		heap.SetPageLSN(page, lsn)
	}
	buf.MarkDirty()
	m.sets.Add(1)
	return true, nil
}

// Clear clears bits for heapBlk and reports whether any was set, as
// visibilitymap_clear. It is not WAL-logged on its own and does not move
// the page LSN: the heap record of the change that clears it carries a
// flag, and redo clears the bit again whatever the page LSN says. A
// cleared bit that reaches disk early is always safe (it only makes a
// reader do the per-tuple work). Errors as Set's.
func (m *Map) Clear(heapBlk uint32, bits Bits) (bool, error) {
	bits &= ValidBits
	buf, err := m.get(heapBlk)
	if err != nil {
		return false, err
	}
	defer buf.Release()
	buf.Lock()
	defer buf.Unlock()
	page := buf.Page()
	if heap.IsNew(page) {
		return false, nil
	}
	off, shift := bitPos(heapBlk)
	old := page[off]
	page[off] &^= byte(bits) << shift
	if page[off] == old {
		return false, nil
	}
	buf.MarkDirty()
	// Counted while the page lock is held, so a Reader that sees the old
	// count took its bits before this clear (see Reader).
	m.clears.Add(1)
	return true, nil
}

// ClearRange clears both bits of heap blocks [from, to), for a heap whose
// tail is cut off at from blocks (PostgreSQL's
// visibilitymap_prepare_truncate), so that a block added again at the
// same number starts with no bit set. It reports whether any bit was set.
// Like Clear, it sets no LSN: a cleared bit is always safe on disk. It
// locks one map page at a time (each covers HeapBlocksPerPage heap blocks),
// so it is safe beside other callers. Errors: ErrClosed, or the failure to
// read a map page (the pages before it stay cleared).
func (m *Map) ClearRange(from, to uint32) (bool, error) {
	return m.clearRange(from, uint64(to), nil)
}

// ClearFrom clears both bits of every heap block at or past from that a
// map page in the map's files covers, and returns the blocks that had a
// bit set, in order. Open uses it for a heap shorter than the map: a bit
// past the heap's end is wrong (a truncation clears the bits of the blocks
// it cuts, see ClearRange), as only a map file restored from an older copy
// of the directory leaves one, and it would mark a block all-visible from
// the moment the heap grows back into it, since a change clears the bits
// only of a page marked all-visible. A file StrayFiles names for a heap of
// from blocks is not the map's and is not read (a stray file far past the
// map would otherwise cost a read of every page before it). Errors as
// ClearRange's, or StrayFiles' failure to list the files.
func (m *Map) ClearFrom(from uint32) ([]uint32, error) {
	strays, pages := m.StrayFiles(from)
	for _, err := range strays {
		if !errors.Is(err, ErrStrayFile) {
			return nil, err
		}
	}
	var blocks []uint32
	_, err := m.clearRange(from, uint64(pages)*HeapBlocksPerPage, func(blk uint32) {
		blocks = append(blocks, blk)
	})
	return blocks, err
}

// clearRange is ClearRange up to to (exclusive, at most 2^32), calling
// each, if not nil, with every block whose bits it clears.
func (m *Map) clearRange(from uint32, to uint64, each func(uint32)) (bool, error) {
	to = min(to, math.MaxUint32+1)
	cleared := false
	for blk := uint64(from); blk < to; {
		end := min(to, (blk/HeapBlocksPerPage+1)*HeapBlocksPerPage)
		buf, err := m.get(uint32(blk))
		if err != nil {
			return cleared, err
		}
		buf.Lock()
		page := buf.Page()
		changed := false
		if !heap.IsNew(page) {
			for b := blk; b < end; b++ {
				off, shift := bitPos(uint32(b))
				if page[off]&(byte(ValidBits)<<shift) != 0 {
					page[off] &^= byte(ValidBits) << shift
					changed = true
					if each != nil {
						each(uint32(b))
					}
				}
			}
		}
		if changed {
			buf.MarkDirty()
			m.clears.Add(1)
			cleared = true
		}
		buf.Unlock()
		buf.Release()
		blk = end
	}
	return cleared, nil
}

// Test returns heapBlk's bits, as visibilitymap_get_status, or none while
// heapBlk's bits are distrusted (see Distrust). The answer can be stale as
// soon as it is returned; a caller that relies on a set bit must read what
// it protects (the heap TID it is about to trust) before calling Test,
// and, as the bit may have been set by the same step that removed that
// tuple (a vacuum pass marking a page all-visible once its dead tuples are
// gone), check after Test that what it read still names the tuple.
// Errors as Set's (a distrusted block's bits are read all the same, so
// that the same errors show).
func (m *Map) Test(heapBlk uint32) (Bits, error) {
	// The limit before the bits: a check that clears a wrong bit does so
	// before it moves the limit past the block, so bits read after a
	// limit that covers the block are the checked ones.
	trusted := heapBlk < m.trustedBelow.Load()
	b, err := m.TestStored(heapBlk)
	if err != nil || !trusted {
		return 0, err
	}
	return b, nil
}

// Distrust makes Test (and Reader.Test) report no bits for heap blocks at
// or above from until Trust moves past them; the bits themselves stay as
// they are, and TestStored, Set and Clear see them. A clear bit only sends
// a reader or vacuum to the heap page, so this is always safe. It is for
// the time after opening in which the stored bits are checked against the
// heap pages: a map file restored from an older copy has valid checksums
// and wrong bits, and nothing else tells it apart. Safe for concurrent
// use; call it before any reader relies on a bit.
func (m *Map) Distrust(from uint32) { m.trustedBelow.Store(from) }

// Trust ends Distrust for the heap blocks below upTo (math.MaxUint32: every
// block). The caller has checked those blocks' stored bits and cleared any
// that were wrong. The limit only moves forward.
func (m *Map) Trust(upTo uint32) {
	for {
		cur := m.trustedBelow.Load()
		if upTo <= cur || m.trustedBelow.CompareAndSwap(cur, upTo) {
			return
		}
	}
}

// TestStored returns heapBlk's bits as the map holds them, distrusted or
// not. The checker of Distrust's bits uses it, and so can a caller holding
// the heap page's content lock, under which a bit and PD_ALL_VISIBLE agree
// unless the map is wrong. Errors as Test's.
func (m *Map) TestStored(heapBlk uint32) (Bits, error) {
	buf, err := m.get(heapBlk)
	if err != nil {
		return 0, err
	}
	buf.RLock()
	b := PageBits(buf.Page(), heapBlk)
	buf.RUnlock()
	buf.Release()
	return b, nil
}

// Flush writes every dirty map page (flushing the WAL to each page's LSN
// first, unless unlogged) and fsyncs the fork. A checkpoint calls it after
// writing the heap pages. Errors: the first write or fsync failure; after a
// failed fsync every later Flush fails too (a failed fsync is not
// retried: the kernel may have dropped the dirty pages, so a later
// success would prove nothing).
func (m *Map) Flush() error {
	if m.closed.Load() {
		return ErrClosed
	}
	return m.pool.FlushAll()
}

// Close closes the fork's files without writing anything: call Flush first
// for durability. Later calls of any method return ErrClosed.
func (m *Map) Close() error {
	if m.closed.Swap(true) {
		return ErrClosed
	}
	return m.storage.Close()
}

// NBlocks returns the number of map pages on disk.
func (m *Map) NBlocks() uint32 { return m.storage.NBlocks() }

// ReadPage reads map page vmBlock from disk (not from the cache) into p
// (PageSize bytes) and verifies it; a page never written reads as zeros.
// Verification uses it to check what a crash would leave. Errors:
// ErrClosed after Close; an error matching ErrCorrupt, naming the file
// and offset, for a page that fails its checks (not zeroed here, unlike a
// read through the cache); the read's I/O error.
func (m *Map) ReadPage(vmBlock uint32, p []byte) error {
	if m.closed.Load() {
		return ErrClosed
	}
	return m.storage.ReadBlock(vmBlock, p)
}

// CheckFiles checks that every map fork file holds whole pages, as
// the heap's storage manager does, and returns an error matching
// ErrCorrupt for each one cut short, naming the file, its size
// and the offset of the partial page; nil if all check out. A map page cut
// short reads as a page never written, so the bits it held are lost
// without any page failing its checksum: only the file size shows it.
// Verification calls it after a checkpoint.
func (m *Map) CheckFiles() []error {
	if m.closed.Load() {
		return []error{ErrClosed}
	}
	var errs []error
	for _, err := range m.storage.CheckSizes() {
		if errors.Is(err, heap.ErrCorrupt) {
			err = corruptFile{err}
		}
		errs = append(errs, err)
	}
	return errs
}

// StrayFiles returns an error matching ErrStrayFile for every map file
// that lies wholly past the map pages a heap of the given length (in
// blocks) needs, naming the file, the first map page it would hold and
// what the heap needs; and pages, the number of whole map pages up to the
// end of the last other file, which is as far as a check of the map
// should read. The files and their sizes are read now, not at open.
//
// Such a file was put there: the map grows one page at a time as the heap
// grows, and each file holds 131,072 pages (covering 32 TiB of heap), so
// nothing this map writes starts a file the heap does not reach. Nothing
// reads it either (the map is asked only about heap blocks that exist),
// so it is not damage to the map, and its pages are not checked: read as
// map pages at their new block numbers, they could only fail their
// checksums. The first file is never one, since a heap cut back to
// nothing (vacuum's truncation leaves map pages in place, cleared)
// leaves it; only a heap cut back from over 32 TiB could leave a later
// file that this reports. Errors: ErrClosed, or the failure to list the
// map directory or read a file's size.
func (m *Map) StrayFiles(heapBlocks uint32) (strays []error, pages uint32) {
	if m.closed.Load() {
		return []error{ErrClosed}, 0
	}
	l, err := m.storage.Layout()
	if err != nil {
		return []error{err}, 0
	}
	need := uint32((uint64(heapBlocks) + HeapBlocksPerPage - 1) / HeapBlocksPerPage)
	for _, g := range l.Segments {
		switch {
		case g.Missing:
		case g.Num == 0 || g.FirstBlock() < need:
			pages = max(pages, g.FirstBlock()+g.Blocks())
		default:
			strays = append(strays, strayFile{file: g.Path, first: g.FirstBlock(), need: need, heapBlocks: heapBlocks})
		}
	}
	return strays, pages
}

// strayFile is a map file past the pages the heap needs (StrayFiles). It
// matches ErrStrayFile; its text carries no package prefix, so that the
// caller's context reads first.
type strayFile struct {
	file        string
	first, need uint32
	heapBlocks  uint32
}

func (e strayFile) Error() string {
	return fmt.Sprintf("%s is not a file of this map: it would hold map pages from %d on, past the %d the heap's %d blocks need (nothing reads it; remove it, or find what wrote it)",
		e.file, e.first, e.need, e.heapBlocks)
}

func (e strayFile) Is(target error) bool { return target == ErrStrayFile }

// mapPageError is a map page that fails the storage manager's page checks:
// it matches ErrCorrupt and what it wraps (heap.ErrCorrupt).
type mapPageError struct{ err error }

func (e mapPageError) Error() string {
	return ErrCorrupt.Error() + ": " + strings.Replace(e.err.Error(), heap.ErrCorrupt.Error()+": ", "", 1)
}
func (e mapPageError) Unwrap() []error { return []error{ErrCorrupt, e.err} }

// corruptFile is a map file that fails a check of the file as a whole; it
// matches ErrCorrupt and what it wraps, and reads as the wrapped error.
type corruptFile struct{ err error }

func (c corruptFile) Error() string   { return c.err.Error() }
func (c corruptFile) Unwrap() []error { return []error{ErrCorrupt, c.err} }

// MapStats counts map activity since Open. It is a value; Sub gives the
// activity between two snapshots.
type MapStats struct {
	// BitsSet and BitsCleared count Set and Clear calls that changed a bit.
	BitsSet, BitsCleared uint64
	// PageReads and PageWrites count map pages read from and written to
	// disk.
	PageReads, PageWrites uint64
	// PagesZeroed counts map pages that failed their checks when read
	// into the cache and were taken as pages with no bit set.
	PagesZeroed uint64
}

// Sub returns s minus o, counter by counter.
func (s MapStats) Sub(o MapStats) MapStats {
	return MapStats{
		BitsSet: s.BitsSet - o.BitsSet, BitsCleared: s.BitsCleared - o.BitsCleared,
		PageReads: s.PageReads - o.PageReads, PageWrites: s.PageWrites - o.PageWrites,
		PagesZeroed: s.PagesZeroed - o.PagesZeroed,
	}
}

// Stats returns the counters. Safe to call concurrently.
func (m *Map) Stats() MapStats {
	p := m.pool.Stats()
	return MapStats{BitsSet: m.sets.Load(), BitsCleared: m.clears.Load(), PageReads: p.Reads, PageWrites: p.Writes, PagesZeroed: m.zeroed.Load()}
}

// Reader answers Test for a sequence of heap blocks, remembering the last
// answer for as long as it cannot have gone stale: an index-only scan asks
// about the same heap block for every key stored on it, and one map lookup
// per heap block instead of per key is much of what makes it fast.
//
// A remembered set bit is reused only while the map's clear count is
// unchanged. The count is bumped under the page lock by every Clear that
// unsets a bit, so if it is unchanged now, no bit was unset since the
// remembered lookup, and the bit is still set now: exactly what a fresh
// Test made now would say. Only set bits are remembered: a block without
// one is looked up every time, since the caller is about to do the slow,
// per-tuple work anyway. A Reader is for one
// goroutine; the zero value is not usable, get one from Map.NewReader.
type Reader struct {
	m      *Map
	blk    uint32
	bits   Bits
	clears uint64
	valid  bool
}

// NewReader returns a Reader over m.
func (m *Map) NewReader() *Reader { return &Reader{m: m} }

// Test returns heapBlk's bits as Map.Test would if called now. The same
// rule applies: read what the bit protects before calling Test. Errors as
// Map.Test's.
func (r *Reader) Test(heapBlk uint32) (Bits, error) {
	c := r.m.clears.Load()
	if r.valid && r.blk == heapBlk && r.clears == c {
		return r.bits, nil
	}
	b, err := r.m.Test(heapBlk)
	if err != nil {
		r.valid = false
		return 0, err
	}
	r.blk, r.bits, r.clears, r.valid = heapBlk, b, c, b != 0
	return b, nil
}

// vmStorage is heap.Storage with the map page's own checks added on read.
type vmStorage struct {
	*heap.Storage
	dir string
}

// ReadBlock reads and checks a map page; a page that fails gives an error
// wrapping ErrCorrupt (and, for checksum and header damage found by the
// heap storage manager, heap.ErrCorrupt) that names the file and offset.
func (s *vmStorage) ReadBlock(block uint32, p []byte) error {
	if err := s.Storage.ReadBlock(block, p); err != nil {
		if errors.Is(err, heap.ErrCorrupt) {
			// The heap storage manager's words, minus its claim that
			// the page is a heap page.
			return mapPageError{err}
		}
		return err
	}
	if err := VerifyPage(p, block); err != nil {
		file := path.Join(s.dir, fmt.Sprintf("%08d", block/heap.SegmentBlocks))
		off := int64(block%heap.SegmentBlocks) * heap.PageSize
		return fmt.Errorf("%s at offset %d (visibility map block %d): %w", file, off, block, err)
	}
	return nil
}

// zeroOnError is the map's storage as its cache sees it: a page that fails
// its checks, or whose LSN lies past the end of the WAL, reads as a new
// page (no bit set), is counted and reported; other read errors pass
// through. See Map.
type zeroOnError struct {
	m        *Map
	onDamage func(error)
	endOfWAL func() uint64
}

func (z zeroOnError) ReadBlock(block uint32, p []byte) error {
	err := z.m.storage.ReadBlock(block, p)
	if err == nil && z.endOfWAL != nil {
		if end, lsn := z.endOfWAL(), heap.PageLSN(p); end != 0 && lsn > end {
			file := path.Join(z.m.storage.dir, fmt.Sprintf("%08d", block/heap.SegmentBlocks))
			off := int64(block%heap.SegmentBlocks) * heap.PageSize
			err = fmt.Errorf("%s at offset %d (visibility map block %d): %w: page LSN %s is beyond the end of the WAL %s: this database did not write it (a file from another copy?)",
				file, off, block, ErrCorrupt, wal.LSN(lsn), wal.LSN(end))
		}
	}
	if err == nil || !errors.Is(err, ErrCorrupt) {
		return err
	}
	clear(p)
	z.m.zeroed.Add(1)
	if z.onDamage != nil {
		z.onDamage(err)
	}
	return nil
}

func (z zeroOnError) WriteBlock(block uint32, p []byte) error {
	return z.m.storage.WriteBlock(block, p)
}
func (z zeroOnError) NBlocks() uint32 { return z.m.storage.NBlocks() }
func (z zeroOnError) Sync() error     { return z.m.storage.Sync() }

// Backup writes a copy of the map, as it stands now, into the directory dst
// on fsys (created if missing; the caller gives a new one): every map page,
// cached pages as they stand in the cache, each copied under its shared
// content lock so that none is torn by a change or a write in progress,
// with fresh checksums; the files are fsynced. A page may hold bits whose
// WAL records are not durable yet: the caller flushes the WAL past
// everything inserted before Backup returned and copies that WAL with the
// map, so that the copy recovers as after a crash. A page that fails its
// checks is copied as a page with no bit set, as the cache reads it.
// Errors: ErrClosed, and I/O errors naming the file. Safe for concurrent
// use with every other method.
func (m *Map) Backup(fsys vfs.FS, dst string) error {
	if m.closed.Load() {
		return ErrClosed
	}
	st, err := heap.OpenStorage(fsys, dst)
	if err != nil {
		return fmt.Errorf("visibility: backup: %w", err)
	}
	// The pool's count of blocks is the file's at open: pages added
	// since come through Get, which does not raise it. The file's
	// count covers those once written, and the caller's checkpoint
	// wrote every page the map has.
	n := max(m.pool.NBlocks(), m.storage.NBlocks())
	err = m.pool.CopyBlocks(n, backupRingFrames, st.WriteBlock)
	if err == nil {
		err = st.Sync()
	}
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("visibility: backup: %w", err)
	}
	return nil
}

// backupRingFrames is the ring Backup reads map pages through: each map
// page covers 255 MiB of heap, so a few frames serve any copy.
const backupRingFrames = 4
