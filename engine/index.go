package engine

import (
	"encoding/binary"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/google/btree"

	"mvkv/internal/heap"
	"mvkv/internal/hugepage"
)

// indexEntry maps a key to the TID of its newest tuple version. The head is
// an atomic so that a new version of an existing key replaces it without the
// index's write lock; it changes only under the key's row lock.
//
// An entry and its key bytes are one allocation that holds no pointers
// (newIndexEntry): the key follows the head and length in memory, starting
// in what would be the struct's padding (entryKeyOffset), so that a
// 12-byte key takes 24 bytes in all. The index holds an entry for every key
// ever written (millions of history rows in a bench run), and the garbage
// collector's work on a heap that large is counted in objects and pointers:
// a separate key string made two objects a key and one more pointer to
// follow, and with 5 million keys a collection took 0.61-0.76 s against
// 0.35-0.43 s now (docs/BENCHMARKS.md). An object with no pointers is
// marked but never scanned. Entries are never copied (the key bytes are
// outside the struct); always use the pointer.
type indexEntry struct {
	head atomic.Uint64 // heap.TID.Pack(); heap.InvalidTID before the first version lands
	// keyLen is the length of the key bytes that follow it.
	keyLen uint32
}

// entryHeader is the size of the struct, the least an entry's allocation
// holds (the conversion in entryAt reads that many bytes).
const entryHeader = unsafe.Sizeof(indexEntry{})

// entryKeyOffset is where an entry's key bytes start: right after keyLen.
const entryKeyOffset = unsafe.Offsetof(indexEntry{}.keyLen) + unsafe.Sizeof(indexEntry{}.keyLen)

// entryWords is the number of 8-byte words an entry with a key of n bytes
// takes: the key's end rounded up, and at least entryHeader bytes, so that
// the address of the key bytes lies inside the allocation even for an
// empty key.
func entryWords(n int) int {
	return (max(int(entryHeader), int(entryKeyOffset)+n) + 7) / 8
}

// entryAt makes an entry for key in words (entryWords(len(key)) long), with
// the given head (a packed TID). The entry is read through the first words
// as an array of the struct's size, so the conversion reinterprets memory
// of exactly that size; words are 8-byte aligned as the atomic needs. The
// head is set with a plain store, before the entry is shared: an atomic
// store is a locked instruction on amd64, and the index file's load made
// two per key.
func entryAt[K string | []byte](words []uint64, key K, head uint64) *indexEntry {
	words[0] = head // the head is the struct's first word
	e := (*indexEntry)(unsafe.Pointer((*[entryHeader / 8]uint64)(words)))
	e.keyLen = uint32(len(key))
	copy(unsafe.Slice(e.keyStart(), len(key)), key)
	return e
}

// newIndexEntry returns an entry for key with an invalid head, in an
// allocation of its own made of words, which the collector knows hold no
// pointers.
func newIndexEntry[K string | []byte](key K) *indexEntry {
	return entryAt(make([]uint64, entryWords(len(key))), key, heap.InvalidTID.Pack())
}

// entryArena carves entries out of large pointer-free slabs, for loading
// millions of keys at once (the index file at Open, a bulk load): one
// allocation per slab instead of one per key, entries of neighbouring keys
// side by side, and a few thousand objects for the garbage collector to
// mark instead of one per key. Slabs start at 256 KiB and double up to
// 64 MiB, never much larger than the keys still expected, so that a small
// load takes little and a large one few slabs; slabs of 2 MiB and more ask
// the kernel for transparent huge pages, because first touching fresh
// memory a 4 KiB page at a time cost Open as much as decoding the keys
// (about 70 ns a key at ten million keys). An entry keeps its whole slab
// alive, so the memory of keys removed later is returned only when every
// entry of their slab is gone: the price of loading fast, paid only by
// workloads that delete most of what was loaded. Slabs are never reused
// for other keys: a reader may still hold an entry the index dropped
// (Txn.Get's comment), and must find its own key there.
type entryArena struct {
	slab []uint64
	next int // words of the next slab
}

const (
	// arenaSlabWords is the size of the first slab: 256 KiB.
	arenaSlabWords = 1 << 15
	// arenaMaxSlabWords is the size slabs grow to: 64 MiB.
	arenaMaxSlabWords = 1 << 23
)

// new returns an entry for key with the given head (a packed TID). expect is the number of keys still to come after this one, or 0 if not
// known; it caps the next slab's size.
func (a *entryArena) new(key []byte, head, expect uint64) *indexEntry {
	words := entryWords(len(key))
	if words > arenaSlabWords/8 {
		return entryAt(make([]uint64, words), key, head)
	}
	if len(a.slab) < words {
		n := max(a.next, arenaSlabWords)
		a.next = min(2*n, arenaMaxSlabWords)
		if expect > 0 && (expect+1)*uint64(words) < uint64(n) {
			// The rest at this key's size, and an eighth more for
			// longer keys.
			n = max(int(expect+1)*words*9/8, arenaSlabWords)
		}
		a.slab = make([]uint64, n)
		hugepage.Advise(a.slab)
	}
	w := a.slab[:words:words]
	a.slab = a.slab[words:]
	return entryAt(w, key, head)
}

// keyStart is the address of the key bytes that follow e's length.
func (e *indexEntry) keyStart() *byte {
	return (*byte)(unsafe.Add(unsafe.Pointer(e), entryKeyOffset))
}

// key returns the entry's key. The string points into the entry, so it
// keeps the entry alive for as long as it is held, and the bytes never
// change.
func (e *indexEntry) key() string {
	return unsafe.String(e.keyStart(), int(e.keyLen))
}

func (e *indexEntry) headTID() heap.TID { return heap.UnpackTID(e.head.Load()) }

// index is the in-memory index over keys. Each checkpoint writes it to the
// index file, and Open loads that and applies the key changes the WAL holds
// since (indexfile.go); the heap remains the truth it can be rebuilt from.
//
// It is two structures over the same entries, both guarded by mu:
//
//   - tree, for the ordered walks (SCAN, vacuum, the index file): a
//     google/btree whose items are runs of up to leafMax entries in key
//     order (leafTree), a B+-tree's leaves. Open fills it from the sorted
//     index file a full run at a time: ten million keys are 160,000 tree
//     inserts instead of ten million, and each key costs one 8-byte slot of
//     a run instead of about two in a tree of half-full nodes (sorted
//     inserts into a B-tree leave every node it splits half full).
//   - table, for point lookups, one or two per key read or write
//     (keyTable): a tree descent over 100,000 keys made about 17 key
//     comparisons, each a cache miss, and took about 10% of the server's
//     CPU in a redis-benchmark run of random keys (docs/BENCHMARKS.md).
//     The table is an open-addressing hash of entry pointers and hashes,
//     16 bytes a slot: no second copy or header of the key (a
//     map[string]*indexEntry held a string header and a pointer a key,
//     about 50 bytes with the map's own slack and two pointers for the
//     collector to follow).
//
// Rejected: lookups through the tree only (slower by the descent above);
// a tree of entries directly (ten million inserts at Open, four seconds
// of the 8.4 s an Open of ten million keys took).
type index struct {
	mu    sync.RWMutex
	tree  *leafTree
	table keyTable
}

func newIndex() *index {
	return &index{tree: newLeafTree(), table: keyTable{seed: maphash.MakeSeed()}}
}

// get returns key's entry, or nil. The hash is computed before mu is taken.
func (ix *index) get(key []byte) *indexEntry {
	h := ix.table.hashBytes(key)
	ix.mu.RLock()
	e := ix.table.lookup(h, unsafe.String(unsafe.SliceData(key), len(key)))
	ix.mu.RUnlock()
	return e
}

// getOrCreate returns the entry for key, creating it with an invalid head.
func (ix *index) getOrCreate(key []byte) *indexEntry {
	if e := ix.get(key); e != nil {
		return e
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.getOrCreateLocked(key)
}

// getOrCreateLocked is getOrCreate with mu held for writing. key is copied
// into the entry only, once.
func (ix *index) getOrCreateLocked(key []byte) *indexEntry {
	h := ix.table.hashBytes(key)
	if e := ix.table.lookup(h, unsafe.String(unsafe.SliceData(key), len(key))); e != nil {
		return e
	}
	e := newIndexEntry(key)
	ix.tree.insert(e)
	ix.table.insert(h, e)
	return e
}

// ascendRange calls fn for the entries with start <= key < end in key
// order (end empty or nil: no upper bound, since no key is empty; start
// nil: from the first key) until fn
// returns false. It copies them out in batches, 64 entries first and up to
// 4096 as the walk goes on, holding mu only while it copies a batch, so a
// caller that stops after a few keys (SCAN with a COUNT) pays for those,
// not for the rest of the range, and writers are not held off for a whole
// walk. An entry added or removed behind the walk's position between
// batches is not seen; one ahead of it may be.
func (ix *index) ascendRange(start, end []byte, fn func(e *indexEntry) bool) {
	from, inclusive := string(start), true
	n := 64
	for {
		batch := ix.rangeBatch(from, inclusive, end, n)
		for _, e := range batch {
			if !fn(e) {
				return
			}
		}
		if len(batch) < n {
			return
		}
		from, inclusive = batch[len(batch)-1].key(), false
		n = min(2*n, 4096)
	}
}

// rangeBatch returns up to n entries with keys from from (after it when
// inclusive is false) and below end (empty or nil: no bound), in key
// order.
func (ix *index) rangeBatch(from string, inclusive bool, end []byte, n int) []*indexEntry {
	out := make([]*indexEntry, 0, n)
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	ix.tree.ascendFrom(from, func(e *indexEntry) bool {
		if len(end) > 0 && e.key() >= string(end) {
			return false
		}
		if !inclusive && e.key() == from {
			return true
		}
		out = append(out, e)
		return len(out) < n
	})
	return out
}

func (ix *index) len() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.tree.Len()
}

// entriesAfter returns up to n entries with keys greater than after (from
// the first key when all is true), in key order, so that vacuum can walk the
// index in batches without holding mu for the whole walk.
func (ix *index) entriesAfter(after string, all bool, n int) []*indexEntry {
	out := make([]*indexEntry, 0, n)
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	ix.tree.ascendFrom(after, func(e *indexEntry) bool {
		if !all && e.key() == after {
			return true
		}
		out = append(out, e)
		return len(out) < n
	})
	return out
}

// removeEntry deletes e from the index if it is still there (vacuum removed
// every version of its key, holding the key's row lock).
func (ix *index) removeEntry(e *indexEntry) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.removeEntryLocked(e)
}

// lookupLocked returns key's entry, or nil; mu must be held.
func (ix *index) lookupLocked(key string) *indexEntry {
	return ix.table.lookup(ix.table.hashString(key), key)
}

// removeEntryLocked is removeEntry with mu held for writing.
func (ix *index) removeEntryLocked(e *indexEntry) {
	if ix.table.remove(ix.table.hashString(e.key()), e) {
		ix.tree.remove(e)
	}
}

// reset empties the index.
func (ix *index) reset() {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.tree = newLeafTree()
	// The seed stays: get hashes keys before it takes mu.
	ix.table.shards = [tableShards]tableShard{}
}

// leafMax is the most entries a leaf holds: 512 bytes of pointers. Larger
// leaves make inserts in the middle of a leaf move more; smaller ones make
// the tree larger.
const leafMax = 64

// leaf is a run of 1 to leafMax entries in key order, ordered in
// leafTree by its lower bound lo. Every key of a leaf is at least its lo
// and below the next leaf's lo, so an insert or removal in a leaf leaves
// the tree's order as it was.
//
// lo is the leaf's first key when the leaf is made, and stays when that
// key is removed (it is still at most the new first key and above every
// key of the leaf before); only the first leaf's is lowered, by an insert
// below every key. lo points into the memory of the entry it was taken
// from, which it keeps alive: one entry a leaf at most.
type leaf struct {
	lo string
	es []*indexEntry
}

// newLeaf returns a leaf holding e alone, with room for capacity entries.
func newLeaf(e *indexEntry, capacity int) *leaf {
	l := &leaf{lo: e.key(), es: make([]*indexEntry, 1, capacity)}
	l.es[0] = e
	return l
}

// leafItem is a leaf as the tree holds it: beside the pointer, the first
// 16 bytes of its lower bound (big-endian, zero-padded), so that the
// binary search in a tree node compares within the node's own array and
// reads a leaf and its key only when two bounds share those 16 bytes. A
// removal's descent makes about 20 comparisons; reading a leaf, its
// slice's array and an entry for each, a removal took 2.5 µs a key in a
// vacuum after a mass delete (BenchmarkIndexRemove).
type leafItem struct {
	p0, p1 uint64
	l      *leaf
}

// itemFor returns the tree's item for l, whose lo is set.
func itemFor(l *leaf) leafItem {
	var b [16]byte
	copy(b[:], l.lo)
	return leafItem{p0: binary.BigEndian.Uint64(b[:8]), p1: binary.BigEndian.Uint64(b[8:]), l: l}
}

// leafItemLess orders items by their leaves' lower bounds: by the 16-byte
// prefixes, then, when those are equal, by the whole bounds (a bound that
// is the other followed by zero bytes has the same padded prefix).
func leafItemLess(a, b leafItem) bool {
	if a.p0 != b.p0 {
		return a.p0 < b.p0
	}
	if a.p1 != b.p1 {
		return a.p1 < b.p1
	}
	return a.l.lo < b.l.lo
}

// compareEntryKey orders an entry against a key, for binary searches.
func compareEntryKey(e *indexEntry, key string) int { return strings.Compare(e.key(), key) }

// leafTree is the ordered index: a google/btree of leaves. Not safe for
// concurrent use; index.mu guards it. Ascend and Len have the signatures of
// google/btree's methods on a tree of entries.
type leafTree struct {
	t *btree.BTreeG[leafItem]
	n int
	// probe, found and setFound serve the searches of insert and remove,
	// which run under the write lock, without an allocation each.
	probe    leaf
	found    *leaf
	setFound func(leafItem) bool
}

func newLeafTree() *leafTree {
	lt := &leafTree{t: btree.NewG(32, leafItemLess)}
	lt.setFound = func(it leafItem) bool {
		lt.found = it.l
		return false
	}
	return lt
}

// Len returns the number of entries.
func (lt *leafTree) Len() int { return lt.n }

// leaves returns the number of leaves.
func (lt *leafTree) leaves() int { return lt.t.Len() }

// add puts l, whose lo is set and whose range no leaf holds, in the tree.
func (lt *leafTree) add(l *leaf) { lt.t.ReplaceOrInsert(itemFor(l)) }

// drop takes l out of the tree.
func (lt *leafTree) drop(l *leaf) { lt.t.Delete(itemFor(l)) }

// Ascend calls fn for every entry in key order until fn returns false.
func (lt *leafTree) Ascend(fn func(*indexEntry) bool) {
	lt.ascendLeaves(func(l *leaf) bool {
		for _, e := range l.es {
			if !fn(e) {
				return false
			}
		}
		return true
	})
}

// ascendLeaves calls fn for every leaf in order until fn returns false.
func (lt *leafTree) ascendLeaves(fn func(*leaf) bool) {
	lt.t.Ascend(func(it leafItem) bool { return fn(it.l) })
}

// first returns the first leaf, or nil.
func (lt *leafTree) first() *leaf {
	it, _ := lt.t.Min()
	return it.l
}

// leafFor returns the leaf whose range holds key: the last leaf whose
// first key is at most key, or the first leaf if key is below every key.
// nil if the tree is empty. Readers may call it concurrently.
func (lt *leafTree) leafFor(key string) *leaf {
	var found *leaf
	lt.t.DescendLessOrEqual(itemFor(&leaf{lo: key}), func(it leafItem) bool {
		found = it.l
		return false
	})
	if found == nil {
		found = lt.first()
	}
	return found
}

// leafForWriter is leafFor for insert and remove, under the write lock.
func (lt *leafTree) leafForWriter(key string) *leaf {
	lt.probe.lo, lt.found = key, nil
	lt.t.DescendLessOrEqual(itemFor(&lt.probe), lt.setFound)
	found := lt.found
	lt.probe.lo, lt.found = "", nil
	if found == nil {
		found = lt.first()
	}
	return found
}

// ascendFrom calls fn for every entry with a key at least from, in key
// order, until fn returns false.
func (lt *leafTree) ascendFrom(from string, fn func(*indexEntry) bool) {
	l := lt.leafFor(from)
	if l == nil {
		return
	}
	i, _ := slices.BinarySearchFunc(l.es, from, compareEntryKey)
	lt.t.AscendGreaterOrEqual(itemFor(l), func(it leafItem) bool {
		x := it.l
		es := x.es
		if x == l {
			es = es[i:]
		}
		for _, e := range es {
			if !fn(e) {
				return false
			}
		}
		return true
	})
}

// insert adds e, whose key the tree does not hold.
func (lt *leafTree) insert(e *indexEntry) {
	k := e.key()
	lt.n++
	l := lt.leafForWriter(k)
	if l == nil {
		lt.add(newLeaf(e, 8))
		return
	}
	if k < l.lo {
		// Below every key: l is the first leaf, and its bound is
		// lowered, with its item's prefix.
		lt.drop(l)
		l.lo = k
		lt.add(l)
	}
	// A key above the leaf's last key, the common case of new keys in
	// increasing order, goes at its end without a search.
	i := len(l.es)
	if k < l.es[i-1].key() {
		i, _ = slices.BinarySearchFunc(l.es, k, compareEntryKey)
	}
	if i == leafMax {
		// Past the end of a full leaf: a new leaf, and the full one stays
		// full, so that keys added in increasing order fill their leaves
		// (PostgreSQL's B-tree splits its rightmost page likewise).
		lt.add(newLeaf(e, leafMax))
		return
	}
	if len(l.es) == leafMax {
		// Split in halves. The right half's first key is above every key
		// of the left and below the next leaf's.
		half := leafMax / 2
		r := &leaf{es: make([]*indexEntry, leafMax-half, leafMax)}
		copy(r.es, l.es[half:])
		r.lo = r.es[0].key()
		clear(l.es[half:])
		l.es = l.es[:half]
		lt.add(r)
		if i > half {
			l, i = r, i-half
		}
	}
	l.es = slices.Insert(l.es, i, e)
}

// remove deletes e, which the tree holds. A leaf left with fewer than a
// quarter of leafMax entries is merged with a neighbour when the two fit
// in three quarters, so that memory follows the number of keys after mass
// deletes.
func (lt *leafTree) remove(e *indexEntry) {
	l := lt.leafForWriter(e.key())
	if l == nil {
		return
	}
	// A search for the pointer, not the key: the leaf's pointers lie side
	// by side, where a binary search by key reads six entries elsewhere
	// in memory.
	i := slices.Index(l.es, e)
	if i < 0 {
		return
	}
	lt.n--
	if len(l.es) == 1 {
		lt.drop(l)
		return
	}
	l.es = slices.Delete(l.es, i, i+1)
	if len(l.es) >= leafMax/4 {
		return
	}
	var next, prev *leaf
	lt.t.AscendGreaterOrEqual(itemFor(l), func(it leafItem) bool {
		if it.l == l {
			return true
		}
		next = it.l
		return false
	})
	if next != nil && len(l.es)+len(next.es) <= leafMax*3/4 {
		lt.drop(next)
		l.es = append(l.es, next.es...)
		return
	}
	lt.t.DescendLessOrEqual(itemFor(l), func(it leafItem) bool {
		if it.l == l {
			return true
		}
		prev = it.l
		return false
	})
	if prev != nil && len(prev.es)+len(l.es) <= leafMax*3/4 {
		lt.drop(l)
		prev.es = append(prev.es, l.es...)
	}
}

// keyTable is the index's hash table from key to entry: open addressing
// with linear probing over slots of an entry pointer and the key's 64-bit
// hash (maphash, seeded per index), so that probes and growth compare and
// move hashes without reading entries, and a removal shifts the slots
// after it back (no tombstones). It is split in tableShards shards by the
// hash's top bits, each grown on its own, so that growing never moves more
// than 1/256 of the keys at once while the index's write lock is held.
// Not safe for concurrent use; index.mu guards it.
type keyTable struct {
	seed   maphash.Seed
	shards [tableShards]tableShard
	// sink keeps insertAll's early loads from being optimized away.
	sink uintptr
}

const (
	tableShardBits = 8
	tableShards    = 1 << tableShardBits
)

type tableShard struct {
	slots []tableSlot // a power of two long, or empty
	n     int
}

type tableSlot struct {
	e *indexEntry // nil: empty
	h uint64
}

func (t *keyTable) hashBytes(key []byte) uint64  { return maphash.Bytes(t.seed, key) }
func (t *keyTable) hashString(key string) uint64 { return maphash.String(t.seed, key) }

func (t *keyTable) shard(h uint64) *tableShard { return &t.shards[h>>(64-tableShardBits)] }

// random returns an entry chosen with rnd (a source of numbers in [0, n)):
// a random shard, weighted by its entries, then the first entry at or after
// a random slot of it, as Redis's dictGetRandomKey picks a random bucket;
// nil when the table is empty. Entries after a run of empty slots are a
// little likelier than others (at most three quarters of the slots are
// used). The caller holds the index's mu.
func (t *keyTable) random(rnd func(n int) int) *indexEntry {
	total := 0
	for i := range t.shards {
		total += t.shards[i].n
	}
	if total == 0 {
		return nil
	}
	pick := rnd(total)
	for i := range t.shards {
		s := &t.shards[i]
		if pick >= s.n {
			pick -= s.n
			continue
		}
		mask := len(s.slots) - 1
		for j := rnd(len(s.slots)); ; j = (j + 1) & mask {
			if e := s.slots[j].e; e != nil {
				return e
			}
		}
	}
	return nil
}

// lookup returns the entry for key, whose hash is h, or nil.
func (t *keyTable) lookup(h uint64, key string) *indexEntry {
	s := t.shard(h)
	if len(s.slots) == 0 {
		return nil
	}
	mask := uint64(len(s.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		sl := &s.slots[i]
		if sl.e == nil {
			return nil
		}
		if sl.h == h && sl.e.key() == key {
			return sl.e
		}
	}
}

// insert adds e, whose key has hash h and is not in the table.
func (t *keyTable) insert(h uint64, e *indexEntry) {
	s := t.shard(h)
	if (s.n+1)*4 > len(s.slots)*3 {
		s.resize(max(2*len(s.slots), 8))
	}
	s.place(h, e)
	s.n++
}

// insertAll adds es, whose keys are not in the table, as insert does. The
// keys' home slots are read a group at a time before any is written: the
// reads do not depend on each other, so the processor has a group of cache
// misses in flight at once, where inserting one key after another waits
// for each miss in turn (at ten million keys, a random slot of a 256 MiB
// table is a miss almost every time).
func (t *keyTable) insertAll(es []*indexEntry) {
	const group = 16
	var hs [group]uint64
	var seen uintptr
	for len(es) > 0 {
		g := es[:min(group, len(es))]
		es = es[len(g):]
		for k, e := range g {
			h := t.hashString(e.key())
			hs[k] = h
			if s := t.shard(h); len(s.slots) > 0 {
				// Only the load matters; the sum keeps it.
				seen += uintptr(unsafe.Pointer(s.slots[h&uint64(len(s.slots)-1)].e))
			}
		}
		for k, e := range g {
			t.insert(hs[k], e)
		}
	}
	t.sink = seen
}

// reserve sizes the table for n keys at once, so that loading them does
// not grow it again and again (each growth rehashes a shard and leaves
// the old slots as garbage).
func (t *keyTable) reserve(n int) {
	// A little over the mean per shard, for the shards that get more.
	per := n/tableShards + n/tableShards/8 + 1
	size := 8
	for size*3 < per*4 {
		size *= 2
	}
	if size*tableShards*int(unsafe.Sizeof(tableSlot{})) >= 64<<20 {
		all := make([]tableSlot, size*tableShards)
		hugepage.Advise(all)
		for i := range t.shards {
			s := &t.shards[i]
			if len(s.slots) >= size {
				continue
			}
			old := s.slots
			s.slots = all[i*size : (i+1)*size : (i+1)*size]
			for _, sl := range old {
				if sl.e != nil {
					s.place(sl.h, sl.e)
				}
			}
		}
		return
	}
	for i := range t.shards {
		if s := &t.shards[i]; len(s.slots) < size {
			s.resize(size)
		}
	}
}

func (s *tableShard) place(h uint64, e *indexEntry) {
	mask := uint64(len(s.slots) - 1)
	i := h & mask
	for s.slots[i].e != nil {
		i = (i + 1) & mask
	}
	s.slots[i] = tableSlot{e: e, h: h}
}

func (s *tableShard) resize(size int) {
	old := s.slots
	s.slots = make([]tableSlot, size)
	for _, sl := range old {
		if sl.e != nil {
			s.place(sl.h, sl.e)
		}
	}
}

// remove deletes e, whose key has hash h, and reports whether it was
// there. Linear probing's deletion: each later slot of the same probe run
// whose home slot is not between the hole and itself moves back into the
// hole, which moves on to where it was.
func (t *keyTable) remove(h uint64, e *indexEntry) bool {
	s := t.shard(h)
	if len(s.slots) == 0 {
		return false
	}
	mask := uint64(len(s.slots) - 1)
	i := h & mask
	for s.slots[i].e != e {
		if s.slots[i].e == nil {
			return false
		}
		i = (i + 1) & mask
	}
	for j := (i + 1) & mask; s.slots[j].e != nil; j = (j + 1) & mask {
		// The slot at j may move to the hole at i if its home slot is
		// not after i on the way to j (cyclically).
		if home := s.slots[j].h & mask; (j-home)&mask >= (j-i)&mask {
			s.slots[i] = s.slots[j]
			i = j
		}
	}
	s.slots[i] = tableSlot{}
	s.n--
	return true
}
