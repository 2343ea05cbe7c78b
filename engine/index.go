package engine

import (
	"sync"
	"sync/atomic"

	"github.com/google/btree"

	"mvkv/internal/heap"
)

// indexEntry maps a key to the TID of its newest tuple version. The head is
// an atomic so that a new version of an existing key replaces it without the
// tree's write lock; it changes only under the key's row lock.
type indexEntry struct {
	key  string
	head atomic.Uint64 // heap.TID.Pack(); heap.InvalidTID before the first version lands
	// vac says whether vacuum may skip the key: vacDirty, vacExamining or
	// vacClean (see markWritten and vacuumRun.chain).
	vac atomic.Uint32
}

// The states of indexEntry.vac. A key is clean when vacuum found its chain
// to be a single version that every snapshot sees, with no xmax: nothing on
// it can become removable until the key is written again.
//
// Writers mark the key dirty after their heap change; vacuum marks it
// examining before it reads the chain and makes it clean (compare-and-swap
// from examining) only if the chain it read was clean. A write whose heap
// change vacuum's read missed marks the key dirty after vacuum marked it
// examining, so the swap fails; a write whose mark came before was visible
// to the read. Either way no write is skipped. Entries start dirty, also
// when the index is rebuilt at open.
const (
	vacDirty uint32 = iota
	vacExamining
	vacClean
)

// markWritten records that the key's chain changed (a version added, an
// xmax set, or an attempt that may have placed chunks). The caller has made
// its heap change already.
func (e *indexEntry) markWritten() { e.vac.Store(vacDirty) }

func (e *indexEntry) headTID() heap.TID { return heap.UnpackTID(e.head.Load()) }

// index is the in-memory ordered index over keys (google/btree), rebuilt from
// the heap when the database opens. It is not WAL-logged: the heap, with
// each version's link to its predecessor, is the durable truth.
type index struct {
	mu sync.RWMutex
	// tree is guarded by mu.
	tree *btree.BTreeG[*indexEntry]
}

func newIndex() *index {
	return &index{tree: btree.NewG(32, func(a, b *indexEntry) bool { return a.key < b.key })}
}

func (ix *index) get(key []byte) *indexEntry {
	probe := indexEntry{key: string(key)}
	ix.mu.RLock()
	e, _ := ix.tree.Get(&probe)
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
	return ix.getOrCreateLocked(string(key))
}

func (ix *index) getOrCreateLocked(key string) *indexEntry {
	probe := &indexEntry{key: key}
	if e, ok := ix.tree.Get(probe); ok {
		return e
	}
	probe.head.Store(heap.InvalidTID.Pack())
	ix.tree.ReplaceOrInsert(probe)
	return probe
}

// rangeEntries returns the entries with start <= key < end in key order
// (end nil: no upper bound; start nil: from the first key).
func (ix *index) rangeEntries(start, end []byte) []*indexEntry {
	var out []*indexEntry
	visit := func(e *indexEntry) bool { out = append(out, e); return true }
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	lo := &indexEntry{key: string(start)}
	if end == nil {
		ix.tree.AscendGreaterOrEqual(lo, visit)
	} else {
		ix.tree.AscendRange(lo, &indexEntry{key: string(end)}, visit)
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
		if !all && e.key == after {
			return true
		}
		out = append(out, e)
		return len(out) < n
	}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	ix.tree.AscendGreaterOrEqual(&indexEntry{key: after}, visit)
	return out
}

// removeEntry deletes e from the tree if it is still there (vacuum removed
// every version of its key, holding the key's row lock).
func (ix *index) removeEntry(e *indexEntry) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if cur, ok := ix.tree.Get(e); ok && cur == e {
		ix.tree.Delete(e)
	}
}
