package heap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"sync"
)

// PageSize is the size in bytes of a heap page, and of a block on disk
// (PostgreSQL's BLCKSZ).
const PageSize = 8192

// Page header layout, byte offsets into the page; the package
// documentation draws it.
const (
	offLSN      = 0
	offChecksum = 8
	offFlags    = 12
	offLower    = 14
	offUpper    = 16
	offVersion  = 18
	offPruneXid = 20

	// PageHeaderSize is the size in bytes of the page header that precedes
	// the line pointer array.
	PageHeaderSize = 24
	// ItemIDSize is the size in bytes of one line pointer.
	ItemIDSize = 4
	// PageLayoutVersion is stored in every initialized page.
	PageLayoutVersion = 1

	// tupleAlign is the alignment of tuple storage (PostgreSQL's MAXALIGN).
	// MaxTupleSize spells it out as 8, so that its documentation names
	// no unexported constant.
	tupleAlign = 8

	lpLenMask    = 0x3FFF
	lpStateShift = 14
)

// MaxTupleSize is the largest tuple, in bytes, that fits on an empty page: the
// page minus its header and one line pointer, rounded down to the tuple
// alignment of 8 bytes: 8,160 (PostgreSQL's MaxHeapTupleSize). Larger values
// must be stored out of line (External/Chunk).
const MaxTupleSize = (PageSize - PageHeaderSize - ItemIDSize) / 8 * 8

// Page flags, stored in the header's flags field.
const (
	// PDAllVisible says every tuple on the page is visible to every
	// snapshot, as PostgreSQL's PD_ALL_VISIBLE. It is set only together
	// with the visibility map bit and cleared by any change to the page.
	PDAllVisible uint16 = 0x0001
	// PDHasFreeLines is a hint that some line pointer is LPUnused, so that
	// AddTuple looks for one to reuse before growing the line pointer
	// array, as PostgreSQL's PD_HAS_FREE_LINES. Maintained by this package.
	PDHasFreeLines uint16 = 0x0002
	// PDHasHoles is a hint that SetUnused left the storage of freed tuples
	// in place (bytes HoleBytes counts) and no Prune has packed the page
	// since, so that a writer finding the page full knows whether
	// compacting it could make room without scanning its line pointers,
	// as PostgreSQL's pd_prune_xid tells heap_page_prune_opt whether
	// pruning may be worth trying. Maintained by this package. Pages
	// written before the flag existed may have holes without it; only
	// that fast path misses them, not HoleBytes.
	PDHasHoles uint16 = 0x0004
)

// LineState is the state of a line pointer (PostgreSQL's lp_flags).
type LineState uint8

const (
	// LPUnused: the slot holds nothing and may be reused by AddTuple.
	LPUnused LineState = 0
	// LPNormal: the slot points at tuple storage.
	LPNormal LineState = 1
	// LPDead: the tuple is gone and its storage reclaimed, but the slot
	// number is kept (not reused) because something may still point at it.
	LPDead LineState = 3
)

var (
	// ErrNoSpace is returned by AddTuple and PutTupleAt when the tuple does
	// not fit on the page.
	ErrNoSpace = errors.New("heap: not enough free space on page")
	// ErrBadSlot is returned for a slot that is out of range or does not
	// hold a tuple (or, for PutTupleAt, is not free).
	ErrBadSlot = errors.New("heap: bad slot")
	// ErrCorrupt is wrapped by every error that reports bytes that cannot
	// be a valid page or tuple.
	ErrCorrupt = errors.New("heap: corrupt page")
	// ErrUninitialized is returned when a tuple is added to a page that was
	// never initialized with InitPage.
	ErrUninitialized = errors.New("heap: page not initialized")
	// ErrBadTuple is returned by AddTuple and PutTupleAt for an empty tuple.
	ErrBadTuple = errors.New("heap: empty tuple")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func u16(p []byte, off int) uint16      { return binary.LittleEndian.Uint16(p[off:]) }
func put16(p []byte, off int, v uint16) { binary.LittleEndian.PutUint16(p[off:], v) }

func alignUp(n int) int { return (n + tupleAlign - 1) &^ (tupleAlign - 1) }

// InitPage formats p (PageSize bytes) as an empty heap page: LSN 0, no flags,
// no line pointers. It does nothing if len(p) != PageSize.
func InitPage(p []byte) {
	if len(p) != PageSize {
		return
	}
	clear(p)
	put16(p, offLower, PageHeaderSize)
	put16(p, offUpper, PageSize)
	put16(p, offVersion, PageLayoutVersion)
}

// IsNew reports whether p is all zeros: a block that was never initialized
// (a hole in a file, or a block past its end). Like PostgreSQL's PageIsNew,
// such a page is valid and must be passed to InitPage before use.
func IsNew(p []byte) bool {
	if len(p) >= PageHeaderSize && u16(p, offUpper) != 0 {
		return false
	}
	for len(p) >= 8 {
		if binary.LittleEndian.Uint64(p) != 0 {
			return false
		}
		p = p[8:]
	}
	for _, b := range p {
		if b != 0 {
			return false
		}
	}
	return true
}

// PageLSN returns the LSN of the last WAL record that changed p (0 if len(p)
// is too short to hold a header).
func PageLSN(p []byte) uint64 {
	if len(p) < PageHeaderSize {
		return 0
	}
	return binary.LittleEndian.Uint64(p[offLSN:])
}

// SetPageLSN stores lsn as the page LSN of p. The caller holds the page's
// exclusive content lock and has just WAL-logged the change.
func SetPageLSN(p []byte, lsn uint64) {
	if len(p) < PageHeaderSize {
		return
	}
	binary.LittleEndian.PutUint64(p[offLSN:], lsn)
}

// PruneXid returns the page's prune hint (PostgreSQL's pd_prune_xid): the
// low 32 bits of the oldest xid that set an xmax on the page since it was
// last pruned, or 0 when nothing on the page is known to be waiting to become
// prunable. 32 bits, as in PostgreSQL: the caller widens it against the next
// xid (an xid more than 2^31 older than the next one reads as long past).
// 0 for a page too short to hold a header.
func PruneXid(p []byte) uint32 {
	if len(p) < PageHeaderSize {
		return 0
	}
	return binary.LittleEndian.Uint32(p[offPruneXid:])
}

// SetPruneXid replaces the page's prune hint. The caller holds the page's
// exclusive content lock. The hint is not WAL-logged on its own: redo of an
// update or delete sets it as the forward path does, and a lost or stale
// hint costs only a pruning attempt made too early or too late.
func SetPruneXid(p []byte, x uint32) {
	if len(p) < PageHeaderSize {
		return
	}
	binary.LittleEndian.PutUint32(p[offPruneXid:], x)
}

// NotePrunable lowers the page's prune hint to xid (its low 32 bits, never
// 0), as PostgreSQL's PageSetPrunable: an xmax was just set on the page.
// Xids compare modulo 2^32, as PostgreSQL's TransactionIdPrecedes: the
// page's xids lie within 2^31 of each other.
func NotePrunable(p []byte, xid uint64) {
	x := uint32(xid)
	if x == 0 {
		x = 1
	}
	if cur := PruneXid(p); cur == 0 || int32(x-cur) < 0 {
		SetPruneXid(p, x)
	}
}

// PageFlags returns the page flags (PDAllVisible, PDHasFreeLines,
// PDHasHoles).
func PageFlags(p []byte) uint16 {
	if len(p) < PageHeaderSize {
		return 0
	}
	return u16(p, offFlags)
}

// SetPageFlags replaces the page flags. Callers that change one flag should
// preserve the others (PageFlags(p)|PDAllVisible), since PDHasFreeLines and
// PDHasHoles are kept by this package.
func SetPageFlags(p []byte, f uint16) {
	if len(p) < PageHeaderSize {
		return
	}
	put16(p, offFlags, f)
}

// header returns lower and upper after checking that they describe a
// well-formed page, so that code working on a page in memory never indexes
// out of range even if the page was scribbled on.
func header(p []byte) (lower, upper int, err error) {
	if len(p) != PageSize {
		return 0, 0, fmt.Errorf("%w: page is %d bytes, want %d", ErrCorrupt, len(p), PageSize)
	}
	lower, upper = int(u16(p, offLower)), int(u16(p, offUpper))
	if upper == 0 && lower == 0 {
		return 0, 0, ErrUninitialized
	}
	if v := u16(p, offVersion); v != PageLayoutVersion {
		return 0, 0, fmt.Errorf("%w: layout version %d, want %d", ErrCorrupt, v, PageLayoutVersion)
	}
	if lower < PageHeaderSize || (lower-PageHeaderSize)%ItemIDSize != 0 || lower > upper || upper > PageSize || upper%tupleAlign != 0 {
		return 0, 0, fmt.Errorf("%w: bad header: lower %d, upper %d", ErrCorrupt, lower, upper)
	}
	return lower, upper, nil
}

// NumSlots returns the number of line pointers on p (used or not); slots are
// numbered 0..NumSlots-1. It returns 0 for a new or malformed page.
func NumSlots(p []byte) int {
	lower, _, err := header(p)
	if err != nil {
		return 0
	}
	return (lower - PageHeaderSize) / ItemIDSize
}

func lpOff(slot int) int { return PageHeaderSize + slot*ItemIDSize }

func getLP(p []byte, slot int) (off, length int, st LineState) {
	o := lpOff(slot)
	v := u16(p, o+2)
	return int(u16(p, o)), int(v & lpLenMask), LineState(v >> lpStateShift)
}

func setLP(p []byte, slot, off, length int, st LineState) {
	o := lpOff(slot)
	put16(p, o, uint16(off))
	put16(p, o+2, uint16(length)|uint16(st)<<lpStateShift)
}

// SlotState returns the state of a line pointer, LPUnused for a slot at or
// beyond NumSlots.
func SlotState(p []byte, slot uint16) LineState {
	if int(slot) >= NumSlots(p) {
		return LPUnused
	}
	_, _, st := getLP(p, int(slot))
	return st
}

// HoldsNothing reports whether p holds no tuple and no slot anything may
// point at: never initialized, or every line pointer LPUnused (an LPDead
// slot counts as held). Vacuum cuts such pages off the end of the heap, as
// PostgreSQL's count_nondeletable_pages looks for pages without a used
// line pointer.
func HoldsNothing(p []byte) bool {
	if IsNew(p) {
		return true
	}
	for s := range NumSlots(p) {
		if _, _, st := getLP(p, s); st != LPUnused {
			return false
		}
	}
	return true
}

// FreeSpace returns the length in bytes of the largest tuple AddTuple would
// accept on p right now, with the line pointer it needs already accounted
// for (PostgreSQL's PageGetHeapFreeSpace); 0 if no tuple fits or the page is
// new or malformed.
func FreeSpace(p []byte) int {
	lower, upper, err := header(p)
	if err != nil {
		return 0
	}
	n := upper - lower
	if _, ok := findFreeSlot(p, lower); !ok {
		n -= ItemIDSize
	}
	return tupleRoom(n)
}

// tupleRoom is the longest tuple a gap of n bytes holds, tuples starting
// tupleAlign-aligned; 0 for no gap.
func tupleRoom(n int) int {
	if n <= 0 {
		return 0
	}
	return n &^ (tupleAlign - 1)
}

// Fits reports whether AddTuple would accept a tuple of n bytes on p right
// now: FreeSpace(p) >= n. It looks for a free line pointer only when the
// answer depends on one, that is when the tuple fits in a reused slot but
// not beside a new line pointer. A writer asks this of every page it tries,
// several times a write, and on a page whose slots vacuum freed
// (PDHasFreeLines) FreeSpace's scan of the line pointers was one of the
// larger costs of an update in the engine's CPU profiles.
func Fits(p []byte, n int) bool {
	if n <= 0 {
		return true // FreeSpace is never negative
	}
	lower, upper, err := header(p)
	if err != nil {
		return false
	}
	if n <= tupleRoom(upper-lower-ItemIDSize) {
		return true
	}
	if n > tupleRoom(upper-lower) {
		return false
	}
	_, ok := findFreeSlot(p, lower)
	return ok
}

// findFreeSlot returns the lowest LPUnused slot, if the page hints it has one.
func findFreeSlot(p []byte, lower int) (int, bool) {
	if u16(p, offFlags)&PDHasFreeLines == 0 {
		return 0, false
	}
	return scanFreeSlot(p, lower)
}

func scanFreeSlot(p []byte, lower int) (int, bool) {
	n := (lower - PageHeaderSize) / ItemIDSize
	for i := 0; i < n; i++ {
		if _, _, st := getLP(p, i); st == LPUnused {
			return i, true
		}
	}
	return 0, false
}

// AddTuple copies tup onto p and returns its slot: the lowest unused line
// pointer if the page has one, else a new one at the end of the array
// (PostgreSQL's PageAddItem). The choice depends only on the page contents,
// so redo can repeat it with PutTupleAt. It returns ErrNoSpace if tup does not
// fit (p is unchanged), ErrBadTuple for an empty tup, ErrUninitialized for a
// new page and an error wrapping ErrCorrupt for a malformed header. The
// caller holds the page's exclusive content lock.
func AddTuple(p []byte, tup []byte) (slot uint16, err error) {
	lower, _, err := header(p)
	if err != nil {
		return 0, err
	}
	s, ok := findFreeSlot(p, lower)
	if !ok {
		s = (lower - PageHeaderSize) / ItemIDSize
	}
	if err := placeTuple(p, s, tup); err != nil {
		return 0, err
	}
	return uint16(s), nil
}

// PutTupleAt places tup at exactly the given slot, which must be NumSlots(p)
// (a new line pointer) or an LPUnused slot; otherwise it returns ErrBadSlot.
// Redo uses it to replay an insert: applied to the page AddTuple saw, with
// the slot AddTuple returned, it produces the identical page. Other errors
// are those of AddTuple.
func PutTupleAt(p []byte, slot uint16, tup []byte) error {
	lower, _, err := header(p)
	if err != nil {
		return err
	}
	n := (lower - PageHeaderSize) / ItemIDSize
	if int(slot) > n {
		return fmt.Errorf("%w: slot %d beyond %d line pointers", ErrBadSlot, slot, n)
	}
	if int(slot) < n {
		if _, _, st := getLP(p, int(slot)); st != LPUnused {
			return fmt.Errorf("%w: slot %d is in use", ErrBadSlot, slot)
		}
	}
	return placeTuple(p, int(slot), tup)
}

// placeTuple stores tup at slot s, which is free or the next new slot. It
// changes nothing unless it succeeds.
func placeTuple(p []byte, s int, tup []byte) error {
	lower, upper := int(u16(p, offLower)), int(u16(p, offUpper))
	if len(tup) == 0 {
		return ErrBadTuple
	}
	if len(tup) > MaxTupleSize {
		return fmt.Errorf("%w: tuple of %d bytes exceeds %d", ErrNoSpace, len(tup), MaxTupleSize)
	}
	n := (lower - PageHeaderSize) / ItemIDSize
	newLP := s == n
	if newLP && n >= 1<<16-1 {
		return ErrNoSpace
	}
	need := alignUp(len(tup))
	avail := upper - lower
	if newLP {
		avail -= ItemIDSize
	}
	if need > avail {
		return fmt.Errorf("%w: need %d bytes, %d free", ErrNoSpace, need, max(avail, 0))
	}
	upper -= need
	copy(p[upper:], tup)
	clear(p[upper+len(tup) : upper+need])
	setLP(p, s, upper, len(tup), LPNormal)
	put16(p, offUpper, uint16(upper))
	if newLP {
		put16(p, offLower, uint16(lower+ItemIDSize))
		// The hint stays set only while some unused slot remains: exactly
		// what AddTuple would find, so AddTuple and PutTupleAt agree.
		if f := u16(p, offFlags); f&PDHasFreeLines != 0 {
			if _, ok := scanFreeSlot(p, lower); !ok {
				put16(p, offFlags, f&^PDHasFreeLines)
			}
		}
	}
	return nil
}

// Tuple returns the tuple stored at slot: a slice aliasing p (capacity
// limited to the tuple), valid while the caller holds the page's content lock
// and pin. It returns ErrBadSlot for a slot out of range, unused or dead,
// and an error wrapping ErrCorrupt if the header or line pointer points
// outside the page.
func Tuple(p []byte, slot uint16) ([]byte, error) {
	lower, upper, err := header(p)
	if err != nil {
		if errors.Is(err, ErrUninitialized) {
			return nil, fmt.Errorf("%w: slot %d on a new page", ErrBadSlot, slot)
		}
		return nil, err
	}
	n := (lower - PageHeaderSize) / ItemIDSize
	if int(slot) >= n {
		return nil, fmt.Errorf("%w: slot %d beyond %d line pointers", ErrBadSlot, slot, n)
	}
	off, length, st := getLP(p, int(slot))
	if st != LPNormal {
		return nil, fmt.Errorf("%w: slot %d is not in use", ErrBadSlot, slot)
	}
	if err := checkLP(int(slot), off, length, upper); err != nil {
		return nil, err
	}
	return p[off : off+length : off+length], nil
}

func checkLP(slot, off, length, upper int) error {
	if length == 0 || off < upper || off%tupleAlign != 0 || off+length > PageSize {
		return fmt.Errorf("%w: line pointer %d (offset %d, length %d) outside tuple space [%d,%d)", ErrCorrupt, slot, off, length, upper, PageSize)
	}
	return nil
}

// scratchPages holds page-sized buffers for Prune's copy of the tuple
// space.
var scratchPages = sync.Pool{New: func() any { return new([PageSize]byte) }}

// Prune removes tuples from p, as PostgreSQL's heap_page_prune_execute
// followed by PageRepairFragmentation: each slot in dead becomes LPDead and
// each slot in unused becomes LPUnused (both give up their storage), trailing
// unused line pointers are cut off, and the remaining tuples are packed
// against the end of the page, keeping their slot numbers. Free space is
// zeroed. The result depends only on p and the arguments, so redo repeats it
// exactly. Every listed slot must be LPNormal or LPDead, else ErrBadSlot and p
// is unchanged. With both lists empty it only compacts.
func Prune(p []byte, dead, unused []uint16) error {
	lower, err := markLinePointers(p, dead, unused, true)
	if err != nil {
		return err
	}
	n := (lower - PageHeaderSize) / ItemIDSize
	// The remaining tuples are laid out again in slot order, slot 0
	// against the end of the page, from a copy of the tuple space, as
	// PostgreSQL's compactify_tuples does for pages whose line pointers are
	// not presorted: a pass and two copies of at most a page, where
	// moving tuples in place needed a sort by offset first (a prune per
	// update on a full page made that sort a tenth of a bench's CPU). The
	// page comes out presorted (offsets falling with slot numbers), which
	// is the fast path of the next check of its line pointers.
	old := u16(p, offUpper)
	scratch := scratchPages.Get().(*[PageSize]byte)
	defer scratchPages.Put(scratch)
	copy(scratch[old:], p[old:])
	upper := PageSize
	for i := 0; i < n; i++ {
		off, length, st := getLP(p, i)
		if st != LPNormal {
			continue
		}
		upper -= alignUp(length)
		copy(p[upper:upper+length], scratch[off:off+length])
		clear(p[upper+length : upper+alignUp(length)])
		setLP(p, i, upper, length, LPNormal)
	}
	clear(p[lower:upper])
	put16(p, offUpper, uint16(upper))
	put16(p, offFlags, u16(p, offFlags)&^PDHasHoles)
	return nil
}

// SetUnused is Prune without the compaction: each slot in unused becomes
// LPUnused and trailing unused line pointers are cut off, but no tuple
// moves, so the storage of the freed tuples stays where it was (a hole
// that HoleBytes counts) until a Prune of the page packs the rest: for a
// caller that frees slots on a page several times and compacts it once at
// the end (the engine's vacuum did, and its redo still replays such
// records). It returns ErrBadSlot for a slot that is out of range or unused and
// an error wrapping ErrCorrupt for a malformed header; p is unchanged on
// error. Unlike Prune it does not prove the line pointers free of overlaps
// (it moves no tuple, so an overlap cannot spread): the page was verified
// when it was read, and the Prune that compacts it checks again.
func SetUnused(p []byte, unused []uint16) error {
	lower, _, err := header(p)
	if err != nil {
		return err
	}
	// Only a slot that still has storage leaves a hole behind; an LPDead
	// one gave its storage up already.
	holes := false
	n := (lower - PageHeaderSize) / ItemIDSize
	for _, s := range unused {
		if int(s) < n {
			if _, length, st := getLP(p, int(s)); st == LPNormal && length > 0 {
				holes = true
			}
		}
	}
	if _, err := markLinePointers(p, nil, unused, false); err != nil {
		return err
	}
	if holes {
		put16(p, offFlags, u16(p, offFlags)|PDHasHoles)
	}
	return nil
}

// markLinePointers checks the listed slots and, with compacting, every
// line pointer, marks the slots, truncates trailing unused line pointers
// and sets the free-lines hint. It returns the new lower bound; upper is
// unchanged.
//
// Only compaction needs the whole array checked: it moves every tuple by
// its line pointer, so overlapping ones would smear tuples over each other.
// Marking slots unused moves nothing, and SetUnused runs once per pruning
// batch that names the page, several times a vacuum run; the check there
// was 7% of a busy server's CPU (docs/BENCHMARKS.md). The Prune that
// compacts the page at the end of the run checks it then.
func markLinePointers(p []byte, dead, unused []uint16, compacting bool) (int, error) {
	lower, upper, err := header(p)
	if err != nil {
		return 0, err
	}
	n := (lower - PageHeaderSize) / ItemIDSize
	for _, list := range [][]uint16{dead, unused} {
		for _, s := range list {
			if int(s) >= n {
				return 0, fmt.Errorf("%w: slot %d beyond %d line pointers", ErrBadSlot, s, n)
			}
			if _, _, st := getLP(p, int(s)); st != LPNormal && st != LPDead {
				return 0, fmt.Errorf("%w: slot %d is unused", ErrBadSlot, s)
			}
		}
	}
	if compacting {
		if err := checkLinePointers(p, lower, upper); err != nil {
			return 0, err
		}
	}
	for _, s := range dead {
		setLP(p, int(s), 0, 0, LPDead)
	}
	for _, s := range unused {
		setLP(p, int(s), 0, 0, LPUnused)
	}
	for n > 0 {
		if _, _, st := getLP(p, n-1); st != LPUnused {
			break
		}
		n--
	}
	newLower := PageHeaderSize + n*ItemIDSize
	hasFree := false
	for i := 0; i < n; i++ {
		if _, _, st := getLP(p, i); st == LPUnused {
			hasFree = true
			break
		}
	}
	// The line pointers cut off leave zeroes behind, as free space is.
	clear(p[newLower:lower])
	put16(p, offLower, uint16(newLower))
	f := u16(p, offFlags) &^ PDHasFreeLines
	if hasFree {
		f |= PDHasFreeLines
	}
	put16(p, offFlags, f)
	return newLower, nil
}

// FreeRange returns the page's free space as [lower, upper): the bytes
// between the line pointer array and the tuples, which are zero. A full-page
// image leaves them out, as PostgreSQL's XLogRecordAssemble leaves out the
// "hole" of a page of standard layout. A new or malformed page has none
// (0, 0).
func FreeRange(p []byte) (lower, upper int) {
	lower, upper, err := header(p)
	if err != nil {
		return 0, 0
	}
	return lower, upper
}

// MayHaveHoles reports whether p carries the PDHasHoles hint: false means
// HoleBytes is 0, unless the page was written before the hint existed.
func MayHaveHoles(p []byte) bool {
	return PageFlags(p)&PDHasHoles != 0
}

// HoleBytes returns how many bytes of p's tuple space, between upper and
// the end of the page, hold no tuple: the storage SetUnused left behind,
// which a Prune of the page would turn into free space. A page whose line
// pointers do not fit its tuple space counts as having none.
func HoleBytes(p []byte) int {
	lower, upper, err := header(p)
	if err != nil {
		return 0
	}
	used := 0
	for i := 0; i < (lower-PageHeaderSize)/ItemIDSize; i++ {
		if _, length, st := getLP(p, i); st == LPNormal {
			used += alignUp(length)
		}
	}
	return max(0, PageSize-upper-used)
}

// pageChecksum is CRC-32C over the page with the checksum field taken as
// zero, followed by the block number (4 bytes little-endian), so a page
// written to the wrong block fails verification (PostgreSQL mixes the block
// number into pg_checksum_page for the same reason).
//
// The four zero bytes and the block number are summed a byte at a time
// from the table rather than through crc32.Update: a four-byte array handed
// to it escapes to the heap (its assembly takes the slice), which cost two
// allocations on every page read and write.
func pageChecksum(p []byte, block uint32) uint32 {
	c := crc32.Update(0, castagnoli, p[:offChecksum])
	c = crc32Uint32(c, 0)
	c = crc32.Update(c, castagnoli, p[offChecksum+4:])
	return crc32Uint32(c, block)
}

// crc32Uint32 is crc32.Update(c, castagnoli, v as 4 little-endian bytes),
// by the plain table algorithm (castagnoli is the 256-entry table of the
// reflected polynomial, as crc32.MakeTable documents).
func crc32Uint32(c, v uint32) uint32 {
	c = ^c
	for range 4 {
		c = castagnoli[byte(c)^byte(v)] ^ (c >> 8)
		v >>= 8
	}
	return ^c
}

// SetChecksum stores the checksum of p (PageSize bytes) as written to block.
// Called on a private copy just before the write (the checksum is not kept
// up to date in the buffer pool).
func SetChecksum(p []byte, block uint32) {
	if len(p) != PageSize {
		return
	}
	binary.LittleEndian.PutUint32(p[offChecksum:], pageChecksum(p, block))
}

// VerifyPage checks a page read from block: an all-zero page is valid (never
// written); otherwise the checksum must match and the header and every line
// pointer must lie inside the page (PostgreSQL's PageIsVerified, plus line
// pointer bounds so that Tuple can trust them). Errors wrap ErrCorrupt. It
// never panics, whatever p holds.
func VerifyPage(p []byte, block uint32) error {
	if len(p) != PageSize {
		return fmt.Errorf("%w: page is %d bytes, want %d", ErrCorrupt, len(p), PageSize)
	}
	if IsNew(p) {
		return nil
	}
	if got, want := binary.LittleEndian.Uint32(p[offChecksum:]), pageChecksum(p, block); got != want {
		return fmt.Errorf("%w: checksum mismatch for block %d: stored %#08x, computed %#08x", ErrCorrupt, block, got, want)
	}
	lower, upper, err := header(p)
	if err != nil {
		if errors.Is(err, ErrUninitialized) {
			return fmt.Errorf("%w: zero lower and upper on a non-zero page", ErrCorrupt)
		}
		return err
	}
	return checkLinePointers(p, lower, upper)
}

// checkLinePointers checks that every line pointer is in a known state and
// that the tuples of the LPNormal ones lie in [upper, PageSize) without
// overlapping, so that Tuple, in-place updates and Prune's moves stay within
// their own tuple. lower and upper come from header.
func checkLinePointers(p []byte, lower, upper int) error {
	n := (lower - PageHeaderSize) / ItemIDSize
	// Tuples placed by AddTuple have decreasing offsets in slot order, so
	// usually a linear pass proves they do not overlap; otherwise sort.
	descending := true
	prevOff := PageSize
	for i := 0; i < n; i++ {
		off, length, st := getLP(p, i)
		switch st {
		case LPNormal:
			if err := checkLP(i, off, length, upper); err != nil {
				return err
			}
			if off+length > prevOff {
				descending = false
			}
			prevOff = off
		case LPUnused, LPDead:
			if off != 0 || length != 0 {
				return fmt.Errorf("%w: line pointer %d is free but has offset %d, length %d", ErrCorrupt, i, off, length)
			}
		default:
			return fmt.Errorf("%w: line pointer %d has state %d", ErrCorrupt, i, st)
		}
	}
	if descending {
		return nil
	}
	// Otherwise mark the 8-byte units each tuple's storage covers in a
	// bitmap of the page, a few word operations per tuple instead of a
	// sort: tuples start at multiples of tupleAlign (checkLP), so two
	// overlap exactly when their units do. Every page the buffer pool
	// reads and every page vacuum prunes comes through here, and pages
	// whose slots were reused are common.
	var used [PageSize / tupleAlign / 64]uint64
	for i := 0; i < n; i++ {
		off, length, st := getLP(p, i)
		if st != LPNormal {
			continue
		}
		for a, b := off/tupleAlign, (off+length+tupleAlign-1)/tupleAlign; a < b; {
			w, lo := a/64, a%64
			k := min(64-lo, b-a)
			mask := (^uint64(0) >> (64 - k)) << lo
			if used[w]&mask != 0 {
				return overlapError(p, n, i)
			}
			used[w] |= mask
			a += k
		}
	}
	return nil
}

// overlapError names a tuple that slot i's overlaps; only called once
// checkLinePointers has found that one does.
func overlapError(p []byte, n, i int) error {
	off, length, _ := getLP(p, i)
	for j := 0; j < n; j++ {
		o, l, st := getLP(p, j)
		if j != i && st == LPNormal && o < off+length && off < o+l {
			return fmt.Errorf("%w: tuples at offsets %d and %d overlap", ErrCorrupt, min(o, off), max(o, off))
		}
	}
	return fmt.Errorf("%w: tuple at offset %d overlaps another", ErrCorrupt, off)
}
