package engine

import (
	"bytes"
	"fmt"
	"runtime"
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
	got := ix.rangeEntries([]byte("key-00040"), []byte("key-00045"))
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
