package heap

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// TupleHeader is the fixed part of every heap tuple (PostgreSQL's
// HeapTupleHeaderData reduced to what a key-value store needs). It is
// followed on the page by KeyLen bytes of key and ValLen bytes of value.
type TupleHeader struct {
	// Xmin is the id of the inserting transaction, Xmax of the deleting or
	// updating one; 0 means invalid (not deleted).
	Xmin, Xmax uint64
	// Prev is the previous (older) version of the same key; InvalidTID for
	// the first version.
	Prev TID
	// Infomask holds the hint bits and flags below.
	Infomask uint16
	// KeyLen and ValLen are the lengths in bytes of key and value.
	// AppendTuple sets them from its arguments.
	KeyLen uint16
	ValLen uint32
}

// TupleHeaderSize is the encoded size of TupleHeader in bytes (a multiple of
// 8, so a tuple's key starts aligned).
const TupleHeaderSize = 32

// Tuple header layout, byte offsets into the tuple; the package
// documentation draws it.
const (
	tOffXmin      = 0
	tOffXmax      = 8
	tOffPrevBlock = 16
	tOffPrevSlot  = 20
	tOffInfomask  = 22
	tOffKeyLen    = 24
	tOffReserved  = 26
	tOffValLen    = 28
)

// Infomask bits, with PostgreSQL's names where they exist (HEAP_XMIN_COMMITTED
// and so on). The four hint bits cache the CLOG status of xmin and xmax; they
// may be set without WAL, but only once the commit record they rely on is
// durable.
const (
	XminCommitted uint16 = 1 << 0
	XminInvalid   uint16 = 1 << 1
	XmaxCommitted uint16 = 1 << 2
	XmaxInvalid   uint16 = 1 << 3
	// Frozen: xmin is older than every snapshot and committed; the CLOG
	// need not be consulted (HEAP_XMIN_FROZEN).
	Frozen uint16 = 1 << 4
	// External: the value is not stored inline but is a pointer to Chunk
	// tuples holding it (like TOAST); the pointer's layout (lengths and a
	// list of chunk TIDs) belongs to the code that writes it. On a Chunk
	// tuple it marks a chunk that lists other chunks (a directory of a
	// large value) rather than holding value bytes.
	External uint16 = 1 << 5
	// Chunk: this tuple is one chunk of an out-of-line value.
	Chunk uint16 = 1 << 6
	// Updated: xmax is an updater's, not a deleter's, so the transaction
	// xmax made a newer version of the key (with xmin = xmax; its Prev
	// names this tuple, or an aborted version in between). The analog of
	// PostgreSQL's t_ctid pointing at another tuple: it lets a check tell
	// a key whose newest version was lost from a deleted key, which
	// otherwise look the same (a newest version with a committed xmax).
	Updated uint16 = 1 << 7
)

// AppendTuple appends the encoding of a tuple (header, key, value) to dst and
// returns the extended slice. h.KeyLen and h.ValLen are ignored and taken
// from len(key) and len(val). A key longer than 65535 bytes cannot be
// encoded; the result is then longer than MaxTupleSize, which AddTuple
// rejects.
func AppendTuple(dst []byte, h TupleHeader, key, val []byte) []byte {
	var hdr [TupleHeaderSize]byte
	binary.LittleEndian.PutUint64(hdr[tOffXmin:], h.Xmin)
	binary.LittleEndian.PutUint64(hdr[tOffXmax:], h.Xmax)
	binary.LittleEndian.PutUint32(hdr[tOffPrevBlock:], h.Prev.Block)
	binary.LittleEndian.PutUint16(hdr[tOffPrevSlot:], h.Prev.Slot)
	binary.LittleEndian.PutUint16(hdr[tOffInfomask:], h.Infomask)
	binary.LittleEndian.PutUint16(hdr[tOffKeyLen:], uint16(len(key)))
	binary.LittleEndian.PutUint32(hdr[tOffValLen:], uint32(len(val)))
	// One allocation at most, not one for each of the three appends.
	dst = slices.Grow(dst, TupleHeaderSize+len(key)+len(val))
	dst = append(dst, hdr[:]...)
	dst = append(dst, key...)
	return append(dst, val...)
}

// DecodeTuple parses a tuple as stored by AppendTuple. key and val alias b.
// The lengths in the header must account for exactly len(b) bytes; otherwise
// the error wraps ErrCorrupt. It never panics.
func DecodeTuple(b []byte) (h TupleHeader, key, val []byte, err error) {
	if len(b) < TupleHeaderSize {
		return h, nil, nil, fmt.Errorf("%w: tuple of %d bytes is shorter than its %d-byte header", ErrCorrupt, len(b), TupleHeaderSize)
	}
	h.Xmin = binary.LittleEndian.Uint64(b[tOffXmin:])
	h.Xmax = binary.LittleEndian.Uint64(b[tOffXmax:])
	h.Prev.Block = binary.LittleEndian.Uint32(b[tOffPrevBlock:])
	h.Prev.Slot = binary.LittleEndian.Uint16(b[tOffPrevSlot:])
	h.Infomask = binary.LittleEndian.Uint16(b[tOffInfomask:])
	h.KeyLen = binary.LittleEndian.Uint16(b[tOffKeyLen:])
	h.ValLen = binary.LittleEndian.Uint32(b[tOffValLen:])
	if r := binary.LittleEndian.Uint16(b[tOffReserved:]); r != 0 {
		return TupleHeader{}, nil, nil, fmt.Errorf("%w: tuple reserved field is %#x", ErrCorrupt, r)
	}
	if uint64(TupleHeaderSize)+uint64(h.KeyLen)+uint64(h.ValLen) != uint64(len(b)) {
		return TupleHeader{}, nil, nil, fmt.Errorf("%w: tuple of %d bytes with key length %d and value length %d", ErrCorrupt, len(b), h.KeyLen, h.ValLen)
	}
	k := TupleHeaderSize + int(h.KeyLen)
	return h, b[TupleHeaderSize:k:k], b[k:], nil
}

// The in-place accessors below work on a tuple slice returned by Tuple (the
// caller holds the page's exclusive content lock to set, shared to get). On a
// slice shorter than TupleHeaderSize the setters do nothing and the getters
// return zero values; such a slice cannot come from a verified page.

// SetTupleXmax stores xmax in the tuple in place.
func SetTupleXmax(tup []byte, xmax uint64) {
	if len(tup) >= TupleHeaderSize {
		binary.LittleEndian.PutUint64(tup[tOffXmax:], xmax)
	}
}

// TupleXmax returns the tuple's xmax.
func TupleXmax(tup []byte) uint64 {
	if len(tup) < TupleHeaderSize {
		return 0
	}
	return binary.LittleEndian.Uint64(tup[tOffXmax:])
}

// TupleXmin returns the tuple's xmin.
func TupleXmin(tup []byte) uint64 {
	if len(tup) < TupleHeaderSize {
		return 0
	}
	return binary.LittleEndian.Uint64(tup[tOffXmin:])
}

// SetTupleInfomask replaces the tuple's infomask in place.
func SetTupleInfomask(tup []byte, mask uint16) {
	if len(tup) >= TupleHeaderSize {
		binary.LittleEndian.PutUint16(tup[tOffInfomask:], mask)
	}
}

// TupleInfomask returns the tuple's infomask.
func TupleInfomask(tup []byte) uint16 {
	if len(tup) < TupleHeaderSize {
		return 0
	}
	return binary.LittleEndian.Uint16(tup[tOffInfomask:])
}

// SetTuplePrev replaces the tuple's Prev pointer in place (for example to
// cut a version chain at a version that vacuum removed).
func SetTuplePrev(tup []byte, prev TID) {
	if len(tup) >= TupleHeaderSize {
		binary.LittleEndian.PutUint32(tup[tOffPrevBlock:], prev.Block)
		binary.LittleEndian.PutUint16(tup[tOffPrevSlot:], prev.Slot)
	}
}

// TuplePrev returns the tuple's Prev pointer (InvalidTID for a short slice).
func TuplePrev(tup []byte) TID {
	if len(tup) < TupleHeaderSize {
		return InvalidTID
	}
	return TID{
		Block: binary.LittleEndian.Uint32(tup[tOffPrevBlock:]),
		Slot:  binary.LittleEndian.Uint16(tup[tOffPrevSlot:]),
	}
}
