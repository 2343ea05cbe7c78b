package engine

import (
	"cmp"
	"slices"
	"sync"
)

// chunkIDSize is the bytes a chunkID takes in a pruning record's list and
// in the index file's debt: block 4, slot 2, xmin 8.
const chunkIDSize = 14

// Vacuum's debt of out-of-line chunks, and how it survives a crash.
//
// A value too large for its page lives in chunk tuples on other pages
// (toast.go). Vacuum frees an out-of-line version in its first pass, where
// it lies, and the version's chunks in its second, page by page in block
// order (vacuum.go): between the two, and after a run stopped between
// them, those chunks are named by nothing on the heap. Vacuum's debt is
// the set of such chunks, each with the xmin it must still carry to be
// freed (chunkID): a slot freed since and taken by another value's chunk no
// longer matches, and is left alone.
//
// What enters it. A pruning record that frees out-of-line versions (or
// chunk directories) lists their chunks (flagPruneChunks), and the chunks
// enter the debt when the record is logged, under the page's lock and the
// checkpoint interlock held shared (logPrunePage). An index rebuild at
// Open replaces it with the chunks it found no version naming. What
// leaves it: a chunk its revisit freed, or found gone (freed by a prune as
// an aborted write's chunk, lost with a page zero_damaged_pages emptied),
// after that revisit's record is logged. A chunk on a page that fails its
// checks stays, without holding up the others: the revisit goes on past
// the page and the run reports the damage (revisitRounds); the entry goes
// once the page is repaired, or read as empty under zero_damaged_pages.
//
// How it is kept. By chunk and xmin, not by slot alone: a version whose
// writer aborted may name slots that pruning freed as its chunks and that
// another value's chunks took since, so two entries can name one slot with
// two xmins, and the one that still matches must not be lost.
//
// How it survives. The checkpoint writes the debt into the index file; it
// reads it after releasing the interlock it chose the redo point under, so
// every record before the redo point that listed chunks had already added
// them; it flushes the WAL before making the file durable, so that every
// record that listed a chunk the file holds (some after the checkpoint's
// record) survives with it. Open loads the file's debt and adds the chunks
// of every replayed record that lists some, so the debt after recovery
// holds every chunk a record listed and no record after it freed, as well
// as some that were freed (listed before the redo point, freed after it, or
// freed after being read): those no longer match and are dropped by the
// next run that looks. Without this, a crash between the passes (or after a
// stopped run) left the chunks named by nothing until an Open rebuilt the
// index from every heap page.
//
// Why a stale entry is safe. A chunk carries the xmin of the one
// transaction that wrote its value; it enters the debt only once that
// value's version is dead to every snapshot or its writer aborted, so the
// writer has ended and will place no chunk again: the slot cannot hold a
// chunk of that xmin again once this one is freed.
//
// Rejected: keeping the debt in memory only (a crash between the passes
// leaked the chunks until an Open without the index file), freeing
// chunks before their version (the version may lie earlier in block
// order, so every run would need a third visit), and logging the frees
// out of the debt one by one in records of their own (the revisit's
// pruning record already says which slots it freed; a stale entry is
// dropped for the price of one page read).
type chunkDebt struct {
	mu sync.Mutex
	m  map[chunkID]struct{} // guarded by mu
	// peak is the most chunks m has held since it was made: a Go map
	// never gives back the room it grew to, and one run's debt (every
	// chunk of the large values a run's first pass freed: 63 MiB for a
	// million chunks) would stay allocated after the debt was paid, for
	// as long as the database is open. Guarded by mu.
	peak int
}

// chunkDebtShrink is the peak above which the debt's map, once it holds
// under a quarter of that, is copied into one of its size: each copy
// follows at least three times as many drops, so it costs a drop O(1).
const chunkDebtShrink = 4096

// add puts cs in the debt. The caller has logged the record that lists
// them and still holds ckptInterlock shared (the index file's rule,
// above).
func (d *chunkDebt) add(cs []chunkID) {
	if len(cs) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil {
		d.m = make(map[chunkID]struct{}, len(cs))
	}
	for _, c := range cs {
		d.m[c] = struct{}{}
	}
	d.peak = max(d.peak, len(d.m))
}

// drop takes c out of the debt. The map is made anew, with what is left,
// when it holds under a quarter of a peak past chunkDebtShrink.
func (d *chunkDebt) drop(c chunkID) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.m, c)
	if d.peak > chunkDebtShrink && len(d.m) < d.peak/4 {
		m := make(map[chunkID]struct{}, len(d.m))
		for c := range d.m {
			m[c] = struct{}{}
		}
		d.m, d.peak = m, len(m)
	}
}

// list returns the debt in block and slot order.
func (d *chunkDebt) list() []chunkID {
	d.mu.Lock()
	cs := make([]chunkID, 0, len(d.m))
	for c := range d.m {
		cs = append(cs, c)
	}
	d.mu.Unlock()
	slices.SortFunc(cs, func(a, b chunkID) int {
		return cmp.Or(cmp.Compare(a.tid.Pack(), b.tid.Pack()), cmp.Compare(a.xmin, b.xmin))
	})
	return cs
}

// len returns how many chunks the debt holds.
func (d *chunkDebt) len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.m)
}

// reset makes the debt cs, at Open.
func (d *chunkDebt) reset(cs []chunkID) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.m = make(map[chunkID]struct{}, len(cs))
	for _, c := range cs {
		d.m[c] = struct{}{}
	}
	d.peak = len(d.m)
}

// noteListedChunks notes in listed the chunks cs a replayed pruning
// record lists.
func noteListedChunks(cs []chunkID, listed map[chunkID]struct{}) {
	for _, c := range cs {
		listed[c] = struct{}{}
	}
}
