package engine

import (
	"encoding/binary"
	"fmt"
	"strings"

	"mvkv/internal/heap"
	"mvkv/wal"
)

// The pruning record (recHeap2Prune) and its application, shared by the
// code that prunes (vacuum, and writers and readers pruning a page) and
// redo, so that both produce the same page bytes (docs/DESIGN.md rule 8).
//
// The engine writes one record per page (logPrunePage): chains are kept so
// that a page can be pruned alone, the only Prev links a prune rewrites
// being those of versions on the page itself that every walk stops at
// (set to InvalidTID), so no change on one page needs another page's to
// survive a crash with it. The format still takes several pages, as vacuum
// once wrote it (one record for every page a step changed, when removing a
// version rewrote the Prev link above it on another page), and redo reads
// such records in an old WAL. The record carries after-images only: the
// slots that end up unused, the Prev value each rewritten link ends up
// with, the infomask and xmax each frozen tuple ends up with. Redo applies
// a page's part only if the page LSN is below the record's end, so
// replaying it twice changes nothing.
//
// Payload (little-endian). Part of the format; do not change.
//
//	+-----------+-------------------------------------------------------+
//	| npages 2  | page part × npages                                    |
//	+-----------+-------------------------------------------------------+
//
//	page part:
//	+---------+-----------+---------+-----------+------------------+
//	| block 4 | nunused 2 | nprev 2 | nfreeze 2 | unused: slot 2 … |
//	+---------+-----------+---------+-----------+------------------+
//	| prev: slot 2, prevBlock 4, prevSlot 2 … (8 bytes each)      |
//	| freeze: slot 2, infomask 2, xmax 8 … (12 bytes each)        |
//	+-------------------------------------------------------------+
//
// With flagPruneChunks the page parts are followed by the chunks the
// record's freed versions (or chunk directories) named, which become
// vacuum's to free (chunkdebt.go); no page changes for them:
//
//	+-----------+-------------------------------------------------------+
//	| nchunks 4 | chunk: block 4, slot 2, xmin 8 … (14 bytes each)      |
//	+-----------+-------------------------------------------------------+
//
// On each page the prev and freeze changes are made first, then the unused
// slots are freed and the page compacted with heap.Prune; with
// flagPruneNoRepair the slots are freed in place (heap.SetUnused) and the
// page is left as it is, to be compacted by a later record. A page part
// that changes nothing is valid only without that flag: it compacts the
// page.

// maxPrunePages bounds the pages one pruning record may name.
const maxPrunePages = 64

// maxSlotsPerPage is the most line pointers a page can have.
const maxSlotsPerPage = (heap.PageSize - heap.PageHeaderSize) / heap.ItemIDSize

// prunePage is one page's part of a pruning record.
type prunePage struct {
	block  uint32
	unused []uint16
	prev   []prevFix
	freeze []freezeOp
}

// prevFix sets the Prev link of the tuple at slot.
type prevFix struct {
	slot uint16
	prev heap.TID
}

// freezeOp gives the tuple at slot its frozen infomask and xmax.
type freezeOp struct {
	slot     uint16
	infomask uint16
	xmax     uint64
}

func (p *prunePage) empty() bool {
	return len(p.unused) == 0 && len(p.prev) == 0 && len(p.freeze) == 0
}

// encodePrune encodes a pruning record's payload: pages, then listed if
// any (the record then needs flagPruneChunks).
func encodePrune(pages []*prunePage, listed []chunkID) []byte {
	b := binary.LittleEndian.AppendUint16(nil, uint16(len(pages)))
	for _, p := range pages {
		b = binary.LittleEndian.AppendUint32(b, p.block)
		b = binary.LittleEndian.AppendUint16(b, uint16(len(p.unused)))
		b = binary.LittleEndian.AppendUint16(b, uint16(len(p.prev)))
		b = binary.LittleEndian.AppendUint16(b, uint16(len(p.freeze)))
		for _, s := range p.unused {
			b = binary.LittleEndian.AppendUint16(b, s)
		}
		for _, f := range p.prev {
			b = binary.LittleEndian.AppendUint16(b, f.slot)
			b = appendTID(b, f.prev)
		}
		for _, f := range p.freeze {
			b = binary.LittleEndian.AppendUint16(b, f.slot)
			b = binary.LittleEndian.AppendUint16(b, f.infomask)
			b = binary.LittleEndian.AppendUint64(b, f.xmax)
		}
	}
	if len(listed) > 0 {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(listed)))
		for _, c := range listed {
			b = appendTID(b, c.tid)
			b = binary.LittleEndian.AppendUint64(b, c.xmin)
		}
	}
	return b
}

// decodePrune parses a pruning record payload with the record's flags into
// its page parts and the chunks it lists. Every count is bounded by what
// fits on a page or in the payload and every length checked against the
// payload, so it never panics and allocates at most in proportion to
// len(data).
func decodePrune(data []byte, flags uint8) (pages []*prunePage, listed []chunkID, err error) {
	pages, data, err = decodePrunePages(data, flags)
	if err != nil {
		return nil, nil, err
	}
	if flags&flagPruneChunks != 0 {
		if len(data) < 4 {
			return nil, nil, fmt.Errorf("%w: pruning record with listed chunks ends before their count", errBadRecord)
		}
		n := binary.LittleEndian.Uint32(data)
		data = data[4:]
		if n == 0 || uint64(n)*chunkIDSize != uint64(len(data)) {
			return nil, nil, fmt.Errorf("%w: pruning record lists %d chunks in %d bytes", errBadRecord, n, len(data))
		}
		listed = make([]chunkID, 0, n)
		for ; len(data) > 0; data = data[chunkIDSize:] {
			c := chunkID{readTID(data), binary.LittleEndian.Uint64(data[6:])}
			if c.tid.Block == noBlock || int(c.tid.Slot) >= maxSlotsPerPage {
				return nil, nil, fmt.Errorf("%w: pruning record lists a chunk at %s", errBadRecord, c.tid)
			}
			listed = append(listed, c)
		}
	}
	if len(data) != 0 {
		return nil, nil, fmt.Errorf("%w: %d bytes after the last page of a pruning record", errBadRecord, len(data))
	}
	return pages, listed, nil
}

// decodePrunePages parses the page parts of a pruning record payload and
// returns what follows them.
func decodePrunePages(data []byte, flags uint8) ([]*prunePage, []byte, error) {
	if len(data) < 2 {
		return nil, nil, errBadRecord
	}
	n := int(binary.LittleEndian.Uint16(data))
	data = data[2:]
	if n == 0 || n > maxPrunePages {
		return nil, nil, fmt.Errorf("%w: pruning record names %d pages", errBadRecord, n)
	}
	pages := make([]*prunePage, 0, n)
	seen := make(map[uint32]bool, n)
	for i := 0; i < n; i++ {
		if len(data) < 10 {
			return nil, nil, errBadRecord
		}
		p := &prunePage{block: binary.LittleEndian.Uint32(data)}
		nu, np, nf := int(binary.LittleEndian.Uint16(data[4:])), int(binary.LittleEndian.Uint16(data[6:])), int(binary.LittleEndian.Uint16(data[8:]))
		data = data[10:]
		if p.block == noBlock || seen[p.block] {
			return nil, nil, fmt.Errorf("%w: pruning record names block %d twice or an invalid block", errBadRecord, p.block)
		}
		seen[p.block] = true
		if nu > maxSlotsPerPage || np > maxSlotsPerPage || nf > maxSlotsPerPage || len(data) < 2*nu+8*np+12*nf {
			return nil, nil, fmt.Errorf("%w: pruning record part for block %d is short", errBadRecord, p.block)
		}
		for j := 0; j < nu; j++ {
			p.unused = append(p.unused, binary.LittleEndian.Uint16(data))
			data = data[2:]
		}
		for j := 0; j < np; j++ {
			p.prev = append(p.prev, prevFix{slot: binary.LittleEndian.Uint16(data), prev: readTID(data[2:])})
			data = data[8:]
		}
		for j := 0; j < nf; j++ {
			p.freeze = append(p.freeze, freezeOp{slot: binary.LittleEndian.Uint16(data), infomask: binary.LittleEndian.Uint16(data[2:]), xmax: binary.LittleEndian.Uint64(data[4:])})
			data = data[12:]
		}
		if p.empty() && flags&flagPruneNoRepair != 0 {
			return nil, nil, fmt.Errorf("%w: pruning record part for block %d changes nothing", errBadRecord, p.block)
		}
		pages = append(pages, p)
	}
	return pages, data, nil
}

// applyPrune makes p's changes to page, as a pruning record with flags
// says. The caller holds the page's exclusive content lock. An error means
// the page does not hold the tuples the record names (corruption, when
// replaying).
func applyPrune(page []byte, p *prunePage, flags uint8) error {
	for _, f := range p.prev {
		raw, err := heap.Tuple(page, f.slot)
		if err != nil {
			return err
		}
		heap.SetTuplePrev(raw, f.prev)
	}
	for _, f := range p.freeze {
		raw, err := heap.Tuple(page, f.slot)
		if err != nil {
			return err
		}
		heap.SetTupleXmax(raw, f.xmax)
		heap.SetTupleInfomask(raw, f.infomask)
	}
	if flags&flagPruneNoRepair != 0 {
		if len(p.unused) == 0 {
			return nil
		}
		return heap.SetUnused(page, p.unused)
	}
	if len(p.unused) == 0 && len(p.prev) == 0 && len(p.freeze) > 0 {
		return nil // freezing alone moves nothing
	}
	return heap.Prune(page, nil, p.unused)
}

// describePrune renders a pruning record for describeRecord:
// "blk 3: unused 1,4 prev 2->(0,1) frozen 5; blk 7: ...", then
// "(compacted)" unless flagPruneNoRepair says the pages were not, then
// "; lists 3 chunks for vacuum: (9,1) (9,2) (10,0)" with flagPruneChunks
// (the first few named).
func describePrune(data []byte, flags uint8) string {
	pages, listed, err := decodePrune(data, flags)
	if err != nil {
		return "malformed: " + err.Error()
	}
	var b strings.Builder
	for i, p := range pages {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "blk %d:", p.block)
		if len(p.unused) > 0 {
			b.WriteString(" unused ")
			for j, s := range p.unused {
				if j > 0 {
					b.WriteByte(',')
				}
				fmt.Fprint(&b, s)
			}
		}
		for _, f := range p.prev {
			fmt.Fprintf(&b, " prev %d->%s", f.slot, f.prev)
		}
		for _, f := range p.freeze {
			fmt.Fprintf(&b, " frozen %d", f.slot)
			if f.xmax == 0 {
				b.WriteString("(xmax cleared)")
			}
		}
	}
	if flags&flagPruneNoRepair == 0 {
		b.WriteString(" (compacted)")
	}
	if len(listed) > 0 {
		noun := "chunks"
		if len(listed) == 1 {
			noun = "chunk"
		}
		fmt.Fprintf(&b, "; lists %d %s for vacuum:", len(listed), noun)
		const named = 8
		for i, c := range listed {
			if i == named {
				b.WriteString(" …")
				break
			}
			fmt.Fprintf(&b, " %s", c.tid)
		}
	}
	return b.String()
}

// redoPrune replays a pruning record page by page. The chunks it lists
// change no page: Open adds them to vacuum's debt (noteListedChunks).
func (db *DB) redoPrune(rec wal.Record) error {
	pages, _, err := decodePrune(rec.Data, rec.Flags)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrCorruption, err)
	}
	for _, p := range pages {
		if err := db.redoBlock(p.block, rec.End, func(page []byte) error { return applyPrune(page, p, rec.Flags) }); err != nil {
			return err
		}
	}
	return nil
}
