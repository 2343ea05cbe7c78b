package engine

import (
	"cmp"
	"slices"
	"sync"

	"github.com/google/btree"

	"mvkv/internal/heap"
)

// The free space map, the analog of PostgreSQL's freespace.c: which heap
// pages have room for new tuples, so that inserts and new versions reuse the
// space vacuum frees instead of extending the heap.
//
// Like PostgreSQL's FSM it is only a hint, so it is not WAL-logged: it lives
// in memory, is saved in the index file at each checkpoint and restored at
// Open (with the free space of every page redo changed), or rebuilt from
// the heap when the index is, and is updated by vacuum for every page it
// scans. A stale entry costs one wasted attempt:
// the insert path checks heap.FreeSpace under the page's exclusive lock and
// moves on if the tuple does not fit, exactly as for a full insert target.
// An entry missing after a crash only delays reuse until the next vacuum.
//
// Space is kept in categories of fsmCategoryBytes, as PostgreSQL keeps one
// byte per page (BLCKSZ/256 per step), and one more category for pages
// that are empty. The top step promises 7,936 bytes, less than an empty
// page holds; a tuple larger than that (a chunk of an out-of-line value of
// up to 1 MiB fills an empty page exactly) could take no page from the map,
// and the pages vacuum emptied of one such value's chunks were never used
// again: every overwrite of a value of 8 KiB to 1 MiB grew the heap by its
// size. PostgreSQL's map has the same top step, and its TOAST chunks
// (about 2 KiB) always fit it. A page handed out by take is removed from
// the map: it becomes an insert target, and vacuum records it again once
// it has scanned it.
//
// Of the pages with room, take hands out the lowest block first (empty
// pages last, lowest first among them), as PostgreSQL's search leans to
// the start of the table: new tuples fill the front of the heap, so that
// its tail can empty and vacuum cut it off. Each category keeps its blocks
// in an ordered tree for that. Rejected: a map a category, which handed
// out its blocks in no particular order, so that the keys written after a
// mass delete and its vacuum spread over the whole heap and kept its tail
// from emptying again; and best fit (the smallest category that fits,
// which the map did), which packs pages more tightly but sends a tuple to
// the tail whenever the tail has the closest fit.

const (
	// fsmCategoryBytes is the granularity of the map in bytes.
	fsmCategoryBytes = 256
	// fsmCategories is the number of categories; category c means at
	// least c*fsmCategoryBytes free.
	fsmCategories = heap.PageSize / fsmCategoryBytes
	// fsmEmpty is the category of an empty page: heap.MaxTupleSize free,
	// room for any tuple.
	fsmEmpty = fsmCategories
	// fsmMinFree is the least free space in bytes worth recording: a page
	// with less is left out, as it would take only the smallest tuples.
	fsmMinFree = 2 * fsmCategoryBytes
)

// freeSpaceMap maps heap blocks to their free space category. Safe for
// concurrent use.
type freeSpaceMap struct {
	mu sync.Mutex
	// cat is the category of every recorded block. Guarded by mu.
	cat map[uint32]uint8
	// byCat holds the recorded blocks of each category in block order.
	// Guarded by mu.
	byCat [fsmEmpty + 1]*btree.BTreeG[uint32]
}

// fsmTreeDegree is the degree of the per-category trees: nodes of up to 63
// blocks, a few cache lines each.
const fsmTreeDegree = 32

func (f *freeSpaceMap) init() {
	f.cat = make(map[uint32]uint8)
	for i := range f.byCat {
		f.byCat[i] = btree.NewOrderedG[uint32](fsmTreeDegree)
	}
}

// record notes that blk has free bytes of room (heap.FreeSpace).
func (f *freeSpaceMap) record(blk uint32, free int) {
	c := -1
	switch {
	case free >= heap.MaxTupleSize:
		c = fsmEmpty
	case free >= fsmMinFree:
		c = min(free/fsmCategoryBytes, fsmCategories-1)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if old, ok := f.cat[blk]; ok {
		if int(old) == c {
			return
		}
		f.byCat[old].Delete(blk)
		delete(f.cat, blk)
	}
	if c >= 0 {
		f.cat[blk] = uint8(c)
		f.byCat[c].ReplaceOrInsert(blk)
	}
}

// take returns the lowest recorded block with at least need bytes free
// that is not empty, else the lowest empty one, and forgets it (the caller
// makes it an insert target); false if there is none. Empty pages are
// handed out last, to the tuples only they can hold first.
func (f *freeSpaceMap) take(need int) (uint32, bool) {
	c := min((need+fsmCategoryBytes-1)/fsmCategoryBytes, fsmEmpty)
	f.mu.Lock()
	defer f.mu.Unlock()
	best, from := uint32(0), -1
	for k := c; k < fsmEmpty; k++ {
		if blk, ok := f.byCat[k].Min(); ok && (from < 0 || blk < best) {
			best, from = blk, k
		}
	}
	if from < 0 {
		blk, ok := f.byCat[fsmEmpty].Min()
		if !ok {
			return 0, false
		}
		best, from = blk, fsmEmpty
	}
	f.byCat[from].Delete(best)
	delete(f.cat, best)
	return best, true
}

// forgetFrom forgets every recorded block at or past n (a heap cut back
// to n blocks).
func (f *freeSpaceMap) forgetFrom(n uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for blk, c := range f.cat {
		if blk >= n {
			f.byCat[c].Delete(blk)
			delete(f.cat, blk)
		}
	}
}

// fsmBlock is one recorded block and its category, as the index file keeps
// the map.
type fsmBlock struct {
	blk uint32
	cat uint8
}

// snapshot returns every recorded block with its category, in block order.
func (f *freeSpaceMap) snapshot() []fsmBlock {
	f.mu.Lock()
	out := make([]fsmBlock, 0, len(f.cat))
	for blk, c := range f.cat {
		out = append(out, fsmBlock{blk, c})
	}
	f.mu.Unlock()
	slices.SortFunc(out, func(a, b fsmBlock) int { return cmp.Compare(a.blk, b.blk) })
	return out
}

// restore records the blocks of a snapshot.
func (f *freeSpaceMap) restore(blocks []fsmBlock) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, b := range blocks {
		if old, ok := f.cat[b.blk]; ok {
			f.byCat[old].Delete(b.blk)
		}
		f.cat[b.blk] = b.cat
		f.byCat[b.cat].ReplaceOrInsert(b.blk)
	}
}
