package engine

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"mvkv/internal/heap"
)

// An entry holds its own copy of the key, whatever length, with its atomics
// aligned; changing the caller's bytes afterwards changes nothing.
func TestIndexEntryKeyCopy(t *testing.T) {
	for _, n := range []int{0, 1, 7, 8, 9, 39, 40, MaxKeySize} {
		src := bytes.Repeat([]byte{'k'}, n)
		for i := range src {
			src[i] = byte('a' + i%26)
		}
		want := string(src)
		e := newIndexEntry(src)
		for i := range src {
			src[i] = 'x'
		}
		if got := e.key(); got != want {
			t.Fatalf("len %d: key() = %q, want %q", n, got, want)
		}
		if uintptr(unsafe.Pointer(&e.head))%8 != 0 {
			t.Fatalf("len %d: head is not 8-byte aligned", n)
		}
		if e.headTID().Valid() {
			t.Fatalf("len %d: new entry has head %s", n, e.headTID())
		}
		e.head.Store(heap.TID{Block: 7, Slot: 3}.Pack())
		if got := e.key(); got != want {
			t.Fatalf("len %d: setting the fields changed the key to %q", n, got)
		}
	}
}

// An entry and its key are one allocation (the collector marks one object
// a key and scans none of it): the layout docs/BENCHMARKS.md measured.
func TestIndexEntryIsOneAllocation(t *testing.T) {
	key := strings.Repeat("h", 39)
	var sink *indexEntry
	if n := testing.AllocsPerRun(100, func() { sink = newIndexEntry(key) }); n != 1 {
		t.Fatalf("newIndexEntry made %v allocations, want 1", n)
	}
	_ = sink
}

// Keys handed out by key() keep their entry alive after the index drops it
// and a collection runs, and the index still finds, orders and removes
// entries by them.
func TestIndexEntriesSurviveCollection(t *testing.T) {
	ix := newIndex()
	const n = 2000
	for i := range n {
		ix.getOrCreate(fmt.Appendf(nil, "key-%05d", i))
	}
	held := ix.get([]byte("key-00042")).key()
	ix.removeEntry(ix.get([]byte("key-00042")))
	runtime.GC()
	if held != "key-00042" {
		t.Fatalf("a held key changed to %q after its entry was removed", held)
	}
	if ix.get([]byte("key-00042")) != nil {
		t.Fatal("removed key still found")
	}
	got := ix.collectRange([]byte("key-00040"), []byte("key-00045"))
	var keys []string
	for _, e := range got {
		keys = append(keys, e.key())
	}
	if want := "key-00040 key-00041 key-00043 key-00044"; strings.Join(keys, " ") != want {
		t.Fatalf("range = %v, want %s", keys, want)
	}
	if after := ix.entriesAfter("key-01998", false, 5); len(after) != 1 || after[0].key() != "key-01999" {
		t.Fatalf("entriesAfter(key-01998) = %d entries", len(after))
	}
	if ix.len() != n-1 {
		t.Fatalf("len = %d, want %d", ix.len(), n-1)
	}
}

// checkIndex checks the index's structure against want, the keys it must
// hold: leaves non-empty, in order and within their bounds, the count,
// and every key found through the hash table as the entry the tree holds.
func checkIndex(t *testing.T, ix *index, want map[string]bool) {
	t.Helper()
	var keys []string
	prev := ""
	n := 0
	ix.tree.ascendLeaves(func(l *leaf) bool {
		if len(l.es) == 0 || len(l.es) > leafMax {
			t.Fatalf("leaf of %d entries", len(l.es))
		}
		if l.lo > l.es[0].key() || (n > 0 && l.lo <= prev) {
			t.Fatalf("leaf bound %q for keys from %q after %q", l.lo, l.es[0].key(), prev)
		}
		for _, e := range l.es {
			if n > 0 && e.key() <= prev {
				t.Fatalf("key %q after %q", e.key(), prev)
			}
			if got := ix.lookupLocked(e.key()); got != e {
				t.Fatalf("hash table finds %p for %q, the tree holds %p", got, e.key(), e)
			}
			prev = e.key()
			keys = append(keys, e.key())
			n++
		}
		return true
	})
	if len(keys) != len(want) || ix.len() != len(want) {
		t.Fatalf("tree holds %d keys, len() = %d, want %d", len(keys), ix.len(), len(want))
	}
	for _, k := range keys {
		if !want[k] {
			t.Fatalf("unexpected key %q", k)
		}
	}
	tableKeys := 0
	for i := range ix.table.shards {
		s := &ix.table.shards[i]
		used := 0
		for _, sl := range s.slots {
			if sl.e != nil {
				used++
			}
		}
		if used != s.n {
			t.Fatalf("shard %d holds %d entries, counts %d", i, used, s.n)
		}
		tableKeys += used
	}
	if tableKeys != len(want) {
		t.Fatalf("hash table holds %d keys, want %d", tableKeys, len(want))
	}
}

// The index against a sorted model under random inserts, removals and
// range reads: leaves split and merge, hash slots shift back on removal,
// and every read answers as the model does.
func TestIndexMatchesModel(t *testing.T) {
	for _, keySpace := range []int{300, 5000} {
		rng := rand.New(rand.NewPCG(uint64(keySpace), 1))
		ix := newIndex()
		want := map[string]bool{}
		sorted := func() []string {
			ks := make([]string, 0, len(want))
			for k := range want {
				ks = append(ks, k)
			}
			slices.Sort(ks)
			return ks
		}
		keyOf := func(i int) string { return fmt.Sprintf("k%06d", i) }
		for op := range 40000 {
			k := keyOf(rng.IntN(keySpace))
			switch r := rng.IntN(10); {
			case r < 5:
				e := ix.getOrCreate([]byte(k))
				if e.key() != k {
					t.Fatalf("getOrCreate(%q) returned %q", k, e.key())
				}
				want[k] = true
			case r < 8:
				if e := ix.get([]byte(k)); e != nil {
					ix.removeEntry(e)
					ix.removeEntry(e) // a second removal does nothing
				}
				delete(want, k)
				if ix.get([]byte(k)) != nil {
					t.Fatalf("removed key %q still found", k)
				}
			case r < 9:
				lo, hi := keyOf(rng.IntN(keySpace)), keyOf(rng.IntN(keySpace))
				var got []string
				for _, e := range ix.collectRange([]byte(lo), []byte(hi)) {
					got = append(got, e.key())
				}
				var exp []string
				for _, s := range sorted() {
					if s >= lo && s < hi {
						exp = append(exp, s)
					}
				}
				if !slices.Equal(got, exp) {
					t.Fatalf("op %d: range [%s, %s) = %v, want %v", op, lo, hi, got, exp)
				}
			default:
				n := 1 + rng.IntN(100)
				var got []string
				for _, e := range ix.entriesAfter(k, false, n) {
					got = append(got, e.key())
				}
				var exp []string
				for _, s := range sorted() {
					if s > k && len(exp) < n {
						exp = append(exp, s)
					}
				}
				if !slices.Equal(got, exp) {
					t.Fatalf("op %d: entriesAfter(%s, %d) = %v, want %v", op, k, n, got, exp)
				}
			}
			if (ix.get([]byte(k)) != nil) != want[k] {
				t.Fatalf("op %d: get(%q) disagrees with the model", op, k)
			}
			if op%5000 == 0 {
				ix.mu.RLock()
				checkIndex(t, ix, want)
				ix.mu.RUnlock()
			}
		}
		ix.mu.RLock()
		checkIndex(t, ix, want)
		ix.mu.RUnlock()
		// Removing everything leaves nothing behind.
		for k := range want {
			ix.removeEntry(ix.get([]byte(k)))
		}
		clear(want)
		ix.mu.RLock()
		checkIndex(t, ix, want)
		if ix.tree.leaves() != 0 {
			t.Fatalf("%d leaves left in an empty index", ix.tree.leaves())
		}
		ix.mu.RUnlock()
	}
}

// An index loaded from a file (full leaves) takes inserts between, before
// and after its keys and removals, and answers as one built key by key.
func TestLoadedIndexTakesChanges(t *testing.T) {
	const n = 10_000
	file := syntheticIndexFile(n)
	ix := newIndex()
	if _, err := decodeIndexFile(bytes.NewReader(file), int64(len(file)), "index", ix, 1<<30, 0, nil, nil); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for i := range n {
		want[fmt.Sprintf("a:%010d", i)] = true
	}
	ix.mu.RLock()
	checkIndex(t, ix, want)
	full := 0
	ix.tree.ascendLeaves(func(l *leaf) bool {
		if len(l.es) == leafMax {
			full++
		}
		return true
	})
	ix.mu.RUnlock()
	if full != n/leafMax {
		t.Fatalf("%d full leaves after a load of %d keys, want %d", full, n, n/leafMax)
	}
	if e := ix.get([]byte("a:0000000042")); e == nil || e.headTID() != (heap.TID{Block: 0, Slot: 42}) {
		t.Fatalf("loaded key a:0000000042 = %v", e)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 5000 {
		i := rng.IntN(n + 100)
		var k string
		switch rng.IntN(3) {
		case 0:
			k = fmt.Sprintf("a:%010d", i)
		case 1:
			k = fmt.Sprintf("a:%010dx", i) // between two loaded keys
		default:
			k = fmt.Sprintf("0:%d", i) // before every loaded key
		}
		if rng.IntN(3) == 0 {
			if e := ix.get([]byte(k)); e != nil {
				ix.removeEntry(e)
			}
			delete(want, k)
		} else {
			ix.getOrCreate([]byte(k))
			want[k] = true
		}
	}
	ix.mu.RLock()
	checkIndex(t, ix, want)
	ix.mu.RUnlock()
}

// Keys added in increasing order fill their leaves instead of leaving
// each split half full.
func TestIndexAppendFillsLeaves(t *testing.T) {
	ix := newIndex()
	const n = 100 * leafMax
	for i := range n {
		ix.getOrCreate(fmt.Appendf(nil, "h%08d", i))
	}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if leaves := ix.tree.leaves(); leaves != n/leafMax {
		t.Fatalf("%d keys in increasing order made %d leaves, want %d", n, leaves, n/leafMax)
	}
}

// collectRange is every entry ascendRange visits.
func (ix *index) collectRange(start, end []byte) []*indexEntry {
	var out []*indexEntry
	ix.ascendRange(start, end, func(e *indexEntry) bool { out = append(out, e); return true })
	return out
}

// TestAscendRangeBatches: a walk across many batches visits every key in
// the range once, in order, and one that stops early stops there.
func TestAscendRangeBatches(t *testing.T) {
	ix := newIndex()
	const n = 10000
	for i := range n {
		ix.getOrCreate(fmt.Appendf(nil, "k%05d", i))
	}
	for _, c := range []struct {
		start, end string
		first, num int
	}{{"", "", 0, n}, {"k00063", "k09000", 63, 9000 - 63}, {"k00064", "", 64, n - 64}, {"k099999", "", 0, 0}} {
		var end []byte
		if c.end != "" {
			end = []byte(c.end)
		}
		got := ix.collectRange([]byte(c.start), end)
		if len(got) != c.num {
			t.Fatalf("[%q, %q): %d entries, want %d", c.start, c.end, len(got), c.num)
		}
		for i, e := range got {
			if want := fmt.Sprintf("k%05d", c.first+i); e.key() != want {
				t.Fatalf("[%q, %q): entry %d is %s, want %s", c.start, c.end, i, e.key(), want)
			}
		}
	}
	seen := 0
	ix.ascendRange(nil, nil, func(*indexEntry) bool { seen++; return seen < 100 })
	if seen != 100 {
		t.Fatalf("a walk stopped at 100 visited %d", seen)
	}
}
