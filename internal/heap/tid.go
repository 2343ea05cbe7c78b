package heap

import (
	"math"
	"strconv"
)

// TID identifies a tuple: the heap block it lives in and the index of its line
// pointer (slot) on that page, as PostgreSQL's ItemPointerData. A TID stays
// valid for as long as the tuple does: compacting a page moves tuple bytes but
// never renumbers slots.
type TID struct {
	Block uint32
	Slot  uint16
}

// InvalidTID is the TID that points nowhere; it terminates a version chain.
var InvalidTID = TID{Block: math.MaxUint32, Slot: math.MaxUint16}

// Valid reports whether t is not InvalidTID.
func (t TID) Valid() bool { return t != InvalidTID }

// Pack returns t as one 48-bit value (Block<<16 | Slot) in a uint64, so that a
// TID can be kept in an atomic.Uint64. InvalidTID packs to 0xFFFF_FFFF_FFFF.
func (t TID) Pack() uint64 { return uint64(t.Block)<<16 | uint64(t.Slot) }

// UnpackTID is the inverse of TID.Pack. Bits above the low 48 are ignored.
func UnpackTID(v uint64) TID {
	return TID{Block: uint32(v >> 16), Slot: uint16(v)}
}

// String formats t as PostgreSQL prints a ctid: "(block,slot)". InvalidTID,
// which ends every version chain, prints as "(none)" rather than as its
// all-ones block and slot.
func (t TID) String() string {
	if !t.Valid() {
		return "(none)"
	}
	b := make([]byte, 0, 20)
	b = append(b, '(')
	b = strconv.AppendUint(b, uint64(t.Block), 10)
	b = append(b, ',')
	b = strconv.AppendUint(b, uint64(t.Slot), 10)
	b = append(b, ')')
	return string(b)
}
