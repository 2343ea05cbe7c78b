package engine

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/google/btree"

	"mvkv/internal/heap"
)

// indexEntry maps a key to the TID of its newest tuple version. The head is
// an atomic so that a new version of an existing key replaces it without the
// tree's write lock; it changes only under the key's row lock.
//
// An entry and its key bytes are one allocation that holds no pointers
// (newIndexEntry): the key follows the fields in memory. The index holds an
// entry for every key ever written (millions of history rows in a bench
// run), and the garbage collector's work on a heap that large is counted in
// objects and pointers: a separate key string made two objects a key and
// one more pointer to follow, and with 5 million keys a collection took
// 0.61-0.76 s against 0.35-0.43 s now (docs/BENCHMARKS.md). An object with
// no pointers is marked but never scanned. Entries are never copied
// (the key bytes are outside the struct); always use the pointer.
type indexEntry struct {
	head atomic.Uint64 // heap.TID.Pack(); heap.InvalidTID before the first version lands
	// keyLen is the length of the key bytes that follow the entry.
	keyLen uint32
}

// entryHeader is where an entry's key bytes start.
const entryHeader = unsafe.Sizeof(indexEntry{})

// newIndexEntry returns an entry for key with an invalid head. The entry
// and a copy of the key are allocated together as words, which the
// collector knows hold no pointers, and are 8-byte aligned as the atomics
// need. The entry is read through the first words as an array of its own
// size, so the conversion reinterprets memory of exactly the entry's size.
func newIndexEntry[K string | []byte](key K) *indexEntry {
	// At least one byte past the key, so that the address of the key
	// bytes lies inside the allocation even for an empty key.
	words := make([]uint64, (int(entryHeader)+len(key))/8+1)
	e := (*indexEntry)(unsafe.Pointer((*[entryHeader / 8]uint64)(words)))
	e.keyLen = uint32(len(key))
	copy(unsafe.Slice(e.keyStart(), len(key)), key)
	e.head.Store(heap.InvalidTID.Pack())
	return e
}

// entryArena carves entries out of large pointer-free slabs, for loading
// millions of keys at once (the index file at Open): one allocation per
// slab instead of one per key, entries of neighbouring keys side by side
// (the tree's comparisons during the load read them in order), and a few
// thousand objects for the garbage collector to mark instead of one per
// key. An entry keeps its whole slab alive, so the memory of keys removed
// later is returned only when every entry of their slab is gone: the
// price of loading fast, paid only by workloads that delete most of what
// was loaded.
type entryArena struct {
	slab []uint64
}

// arenaSlabWords is the size of a slab: 256 KiB.
const arenaSlabWords = 1 << 15

// new returns an entry for key with an invalid head, as newIndexEntry.
func (a *entryArena) new(key []byte) *indexEntry {
	words := (int(entryHeader)+len(key))/8 + 1
	if words > arenaSlabWords/8 {
		return newIndexEntry(key)
	}
	if len(a.slab) < words {
		a.slab = make([]uint64, arenaSlabWords)
	}
	w := a.slab[:words:words]
	a.slab = a.slab[words:]
	e := (*indexEntry)(unsafe.Pointer((*[entryHeader / 8]uint64)(w)))
	e.keyLen = uint32(len(key))
	copy(unsafe.Slice(e.keyStart(), len(key)), key)
	e.head.Store(heap.InvalidTID.Pack())
	return e
}

// keyStart is the address of the key bytes that follow e.
func (e *indexEntry) keyStart() *byte {
	return (*byte)(unsafe.Add(unsafe.Pointer(e), entryHeader))
}

// key returns the entry's key. The string points into the entry, so it
// keeps the entry alive for as long as it is held, and the bytes never
// change.
func (e *indexEntry) key() string {
	return unsafe.String(e.keyStart(), int(e.keyLen))
}

func (e *indexEntry) headTID() heap.TID { return heap.UnpackTID(e.head.Load()) }

// index is the in-memory ordered index over keys (google/btree). Each
// checkpoint writes it to the index file, and Open loads that and applies
// the key changes the WAL holds since (indexfile.go); the heap remains the
// truth it can be rebuilt from.
//
// Point lookups, one or two per key read or write, go through a hash map
// holding the same entries: a tree descent over 100,000 keys made about 17
// key comparisons, each chasing two pointers to cold memory, and took about
// 10% of the server's CPU in a redis-benchmark run of random keys
// (docs/BENCHMARKS.md). The tree serves the ordered walks (SCAN, vacuum).
// The map costs about 50 bytes a key; the key strings are shared.
type index struct {
	mu sync.RWMutex
	// tree and byKey are guarded by mu and hold the same entries.
	tree  *btree.BTreeG[*indexEntry]
	byKey map[string]*indexEntry
}

func newIndex() *index {
	return &index{
		tree:  btree.NewG(32, func(a, b *indexEntry) bool { return a.key() < b.key() }),
		byKey: make(map[string]*indexEntry),
	}
}

func (ix *index) get(key []byte) *indexEntry {
	ix.mu.RLock()
	e := ix.byKey[string(key)]
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
// into the entry only, once: a string made of it for the map would be a
// second copy, and garbage at once.
func (ix *index) getOrCreateLocked(key []byte) *indexEntry {
	if e := ix.byKey[string(key)]; e != nil {
		return e
	}
	e := newIndexEntry(key)
	ix.tree.ReplaceOrInsert(e)
	// The map's key is the entry's own copy, not the caller's bytes: one
	// copy of the key bytes, inside the entry.
	ix.byKey[e.key()] = e
	return e
}

// rangeEntries returns the entries with start <= key < end in key order
// (end nil: no upper bound; start nil: from the first key).
func (ix *index) rangeEntries(start, end []byte) []*indexEntry {
	var out []*indexEntry
	visit := func(e *indexEntry) bool { out = append(out, e); return true }
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	lo := newIndexEntry(start)
	if end == nil {
		ix.tree.AscendGreaterOrEqual(lo, visit)
	} else {
		ix.tree.AscendRange(lo, newIndexEntry(end), visit)
	}
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
	visit := func(e *indexEntry) bool {
		if !all && e.key() == after {
			return true
		}
		out = append(out, e)
		return len(out) < n
	}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	ix.tree.AscendGreaterOrEqual(newIndexEntry(after), visit)
	return out
}

// removeEntry deletes e from the tree if it is still there (vacuum removed
// every version of its key, holding the key's row lock).
func (ix *index) removeEntry(e *indexEntry) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.byKey[e.key()] == e {
		ix.tree.Delete(e)
		delete(ix.byKey, e.key())
	}
}

// reset empties the index.
func (ix *index) reset() {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.tree.Clear(false)
	ix.byKey = make(map[string]*indexEntry)
}
