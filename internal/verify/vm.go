package verify

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"mvkv/internal/heap"
	"mvkv/internal/rmgr"
	"mvkv/visibility"
)

// checkVisibilityMap checks the visibility map bits of heap block blk, as
// read from disk (bits), against the heap page as read from disk: a set bit
// needs PD_ALL_VISIBLE and every tuple visible to every snapshot (xmin
// committed or frozen, no xmax that committed or is running); all-frozen
// needs all-visible and every tuple frozen. Problems name the heap block.
//
// The map was read before the heap, and a writer that changed the page
// since (an insert, update or delete on it) cleared its bits in memory
// before the page could reach the file, as it clears PD_ALL_VISIBLE: a
// disagreement is reported only if the map in memory still holds the bit
// it is about, so that a concurrent write is not taken for a wrong bit.
// (Vacuum, which sets bits, does not run during the check.)
func checkVisibilityMap(t Target, problem Problemf, blk uint32, page []byte, bits visibility.Bits, snap *visibility.Snapshot) {
	if bits == 0 {
		return
	}
	// cleared reports whether the map in memory no longer holds bit.
	cleared := func(bit visibility.Bits) bool {
		now, err := t.VisibilityMap().TestStored(blk)
		return err == nil && now&bit == 0
	}
	if bits&visibility.AllVisible == 0 {
		problem("visibility map: heap block %d is all-frozen but not all-visible", blk)
		return
	}
	if heap.IsNew(page) {
		problem("visibility map: heap block %d is all-visible but the page was never written", blk)
		return
	}
	if heap.PageFlags(page)&heap.PDAllVisible == 0 {
		if cleared(visibility.AllVisible) {
			return
		}
		problem("visibility map: heap block %d is all-visible but the page lacks PD_ALL_VISIBLE", blk)
	}
	for s := 0; s < heap.NumSlots(page); s++ {
		raw, err := heap.Tuple(page, uint16(s))
		if err != nil {
			continue // unused, dead, or damage reported by the heap check
		}
		h, _, _, err := heap.DecodeTuple(raw)
		if err != nil {
			continue
		}
		frozen := h.Infomask&heap.Frozen != 0 || h.Xmin == visibility.FrozenXid
		// A status the CLOG could not give (a damaged page) is neither
		// committed nor not: the tuple check reports the page once, with
		// the tuples it affects, and no claim here rests on it.
		if why := notVisibleToAll(t, h, frozen, snap); why != "" && why != statusUnknown {
			if cleared(visibility.AllVisible) {
				return
			}
			problem("visibility map: heap block %d is all-visible but tuple %s %s", blk, heap.TID{Block: blk, Slot: uint16(s)}, why)
			return
		}
		if bits&visibility.AllFrozen != 0 && !frozen {
			if cleared(visibility.AllFrozen) {
				return
			}
			problem("visibility map: heap block %d is all-frozen but tuple %s is not frozen", blk, heap.TID{Block: blk, Slot: uint16(s)})
			return
		}
	}
}

// statusUnknown is what notVisibleToAll returns when the CLOG could not
// give a status it needs.
const statusUnknown = "status unknown"

// notVisibleToAll says why a tuple is not visible to every snapshot, or ""
// if it is, or statusUnknown if a CLOG lookup it needs failed; snap is a
// snapshot taken now, telling which xids are running.
func notVisibleToAll(t Target, h heap.TupleHeader, frozen bool, snap *visibility.Snapshot) string {
	running := snap.XidInProgress
	if !frozen {
		if running(h.Xmin) {
			return fmt.Sprintf("has xmin %d still running", h.Xmin)
		}
		ok, err := t.DidCommit(h.Xmin)
		if err != nil {
			return statusUnknown
		}
		if !ok {
			return fmt.Sprintf("has xmin %d that did not commit", h.Xmin)
		}
	}
	if h.Xmax != 0 {
		if running(h.Xmax) {
			return fmt.Sprintf("has xmax %d still running", h.Xmax)
		}
		ok, err := t.DidCommit(h.Xmax)
		if err != nil {
			return statusUnknown
		}
		if ok {
			return fmt.Sprintf("has xmax %d that committed", h.Xmax)
		}
	}
	return ""
}

// readVisibilityMap checks that the map files hold whole pages, reads every
// map page from disk, checks it, and returns the bits of every heap block
// that has any, and the number of map pages it read. Bits set for blocks
// beyond the heap's nblocks are problems. A map file past every page the
// heap needs is a problem of its own (Map.StrayFiles), and its pages are
// not read: at their block numbers they could only fail their checksums,
// and the gap before such a file (up to a billion map pages) holds
// nothing.
func readVisibilityMap(t Target, problem Problemf, nblocks uint32) (map[uint32]visibility.Bits, uint32) {
	vm := t.VisibilityMap()
	out := make(map[uint32]visibility.Bits)
	strays, npages := vm.StrayFiles(nblocks)
	for _, err := range strays {
		problem("visibility map: %v", err)
	}
	for _, err := range vm.CheckFiles() {
		problem("visibility map: %v", err)
	}
	page := make([]byte, heap.PageSize)
	for vb := uint32(0); vb < npages; vb++ {
		if err := vm.ReadPage(vb, page); err != nil {
			problem("%v", err)
			continue
		}
		first := uint64(vb) * visibility.HeapBlocksPerPage
		for i := uint64(0); i < visibility.HeapBlocksPerPage; i++ {
			blk := uint32(first + i)
			if b := visibility.PageBits(page, blk); b != 0 {
				if first+i >= uint64(nblocks) {
					problem("visibility map: bits %#x set for heap block %d beyond the heap's %d blocks", b, first+i, nblocks)
					continue
				}
				out[blk] = b
			}
		}
	}
	return out, npages
}

// lostMapPages finds map pages missing from the map files (a file removed,
// or cut to a whole number of pages) whose bits a heap page still shows
// were set: a page with PD_ALL_VISIBLE and a page LSN, which only vacuum's
// logged record gives it (or, in the unlogged mode, an earlier change),
// had its bits set with it, and the checkpoint Verify takes first writes
// every map page a bit was set on since. No map page fails a check then, and the bits read as clear:
// harmless (a clear bit only sends reads and vacuum to the heap page, and
// vacuum sets it again), but damage all the same, and the heap flags are
// its only trace. A page a bulk load wrote (LSN 0) is not counted: its
// bits are set only when no older snapshot was open, so a clear one is no
// sign of loss. A map page cut in the middle is left to Map.CheckFiles,
// which names it.
type lostMapPages struct {
	nmap    uint32              // map pages in the files, strays left out
	nblocks uint32              // heap blocks
	heaps   map[uint32][]uint32 // heap blocks with PD_ALL_VISIBLE, by map page past nmap
}

// newLostMapPages starts the search in a map of nmap pages (those
// readVisibilityMap read) over a heap of nblocks blocks.
func newLostMapPages(nmap, nblocks uint32) *lostMapPages {
	return &lostMapPages{nmap: nmap, nblocks: nblocks, heaps: map[uint32][]uint32{}}
}

// note looks at heap block blk, read from disk, whose map bits are bits.
func (l *lostMapPages) note(blk uint32, page []byte, bits visibility.Bits) {
	mb := visibility.MapBlock(blk)
	if mb < l.nmap || bits != 0 || heap.IsNew(page) || heap.PageFlags(page)&heap.PDAllVisible == 0 || heap.PageLSN(page) == 0 {
		return
	}
	l.heaps[mb] = append(l.heaps[mb], blk)
}

// report names, for every map page found missing, its file, the file's
// length (or that it is missing) and the page's offset, and the heap
// pages whose bits it held.
func (l *lostMapPages) report(t Target, problem Problemf) {
	for _, mb := range slices.Sorted(maps.Keys(l.heaps)) {
		blks := l.heaps[mb]
		name := filepath.Join(t.Dir(), rmgr.Engine.VMDir, fmt.Sprintf("%08d", mb/heap.SegmentBlocks))
		off := int64(mb%heap.SegmentBlocks) * heap.PageSize
		var file string
		switch size, err := t.FS().Stat(name); {
		case errors.Is(err, fs.ErrNotExist):
			file = name + " is missing, and with it"
		case err != nil:
			problem("visibility map: %v", err)
			continue
		case size > off:
			continue // cut inside the page (CheckFiles), or there after all
		default:
			file = fmt.Sprintf("%s is %d bytes, ending before", name, size)
		}
		shown := make([]string, 0, 6)
		for _, b := range blks[:min(len(blks), 5)] {
			shown = append(shown, fmt.Sprint(b))
		}
		if len(blks) > 5 {
			shown = append(shown, "...")
		}
		first := uint64(mb) * visibility.HeapBlocksPerPage
		last := min(first+visibility.HeapBlocksPerPage, uint64(l.nblocks)) - 1
		problem("visibility map: %s the map page at offset %d for heap blocks %d to %d, where %d heap pages have PD_ALL_VISIBLE, set by vacuum with their map bits (blocks %s): those bits are lost (no data is: reads and vacuum look at those pages' tuples until vacuum sets the bits again)",
			file, off, first, last, len(blks), strings.Join(shown, ", "))
	}
}
