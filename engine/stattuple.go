package engine

import (
	"context"
	"errors"
	"fmt"

	"mvkv/internal/bufpool"
	"mvkv/internal/heap"
)

// HeapUsage is what one class of keys occupies in the heap, as
// PostgreSQL's pgstattuple reports it for a table: an answer to "how big is
// this table" when all keys share one heap.
type HeapUsage struct {
	// Pages counts heap pages holding at least one tuple of the class. A
	// page shared by several classes counts for each of them.
	Pages uint64
	// Tuples counts tuple versions, committed or not, dead or alive (as
	// pgstattuple's tuple_count plus dead_tuple_count).
	Tuples uint64
	// TupleBytes is their size in bytes, line pointers included.
	TupleBytes uint64
}

// StatTuple reads every heap page and sums the tuples by class(key); the
// out-of-line chunks of a value count under class(nil). It returns the sums
// by class and the number of pages read.
//
// It reads the pages as it reaches them, taking each one's lock shared, so
// it runs beside writers and vacuum and sees each page as it was at one
// instant, not the heap at one instant; pages added meanwhile may be
// counted. It reads through the buffer pool, so it evicts what was cached
// there. class is called with a key that is valid only during the call,
// with no lock of the database held, so it may read the database.
// It returns ErrClosed after Close, ErrCorruption naming the block for an
// undecodable tuple, and ctx's error when ctx ends.
func (db *DB) StatTuple(ctx context.Context, class func(key []byte) string) (map[string]HeapUsage, uint64, error) {
	if class == nil {
		return nil, 0, fmt.Errorf("%w given to DB.StatTuple", ErrNilFunction)
	}
	out := make(map[string]HeapUsage)
	seen := make(map[string]bool)
	var pg statPageTuples
	var pages uint64
	for blk := uint32(0); ; blk++ {
		if err := ctx.Err(); err != nil {
			return out, pages, err
		}
		more, err := db.statPage(blk, &pg)
		if err != nil || !more {
			return out, pages, err
		}
		pages++
		// class is the caller's code: it runs with no lock of the
		// database held, so that it may read the database itself and
		// Close never waits behind it.
		clear(seen)
		for _, t := range pg.tuples {
			var key []byte
			if !t.chunk {
				key = pg.keys[t.start:t.end]
			}
			c := class(key)
			u := out[c]
			u.Tuples++
			u.TupleBytes += t.size
			if !seen[c] {
				seen[c] = true
				u.Pages++
			}
			out[c] = u
		}
	}
}

// statPageTuples is one page's tuples as StatTuple classifies them: each
// one's key (a copy, in keys) and size.
type statPageTuples struct {
	keys   []byte
	tuples []statTupleEntry
}

type statTupleEntry struct {
	start, end int    // the key in keys
	chunk      bool   // an out-of-line chunk of a value, classed as nil
	size       uint64 // bytes, its line pointer included
}

// statPage copies block blk's tuples into pg; more is false past the end
// of the heap. closeMu and the page's lock are held only while it copies,
// so that Close waits for one page only.
func (db *DB) statPage(blk uint32, pg *statPageTuples) (more bool, err error) {
	pg.keys, pg.tuples = pg.keys[:0], pg.tuples[:0]
	db.closeMu.RLock()
	defer db.closeMu.RUnlock()
	if db.closed.Load() {
		return false, ErrClosed
	}
	if blk >= db.pool.NBlocks() {
		return false, nil
	}
	buf, err := db.pool.Get(blk)
	if errors.Is(err, bufpool.ErrPastEnd) {
		return false, nil // a vacuum cut the heap back meanwhile
	}
	if err != nil {
		return false, err
	}
	defer buf.Release()
	buf.RLock()
	defer buf.RUnlock()
	page := buf.Page()
	for s := 0; s < heap.NumSlots(page); s++ {
		if heap.SlotState(page, uint16(s)) != heap.LPNormal {
			continue
		}
		raw, err := heap.Tuple(page, uint16(s))
		if err != nil {
			return false, fmt.Errorf("%w: heap block %d: %v", ErrCorruption, blk, err)
		}
		h, key, _, err := heap.DecodeTuple(raw)
		if err != nil {
			return false, fmt.Errorf("%w: heap block %d slot %d: %v", ErrCorruption, blk, s, err)
		}
		t := statTupleEntry{chunk: h.Infomask&heap.Chunk != 0, size: uint64(len(raw)) + heap.ItemIDSize}
		if !t.chunk {
			t.start = len(pg.keys)
			pg.keys = append(pg.keys, key...)
			t.end = len(pg.keys)
		}
		pg.tuples = append(pg.tuples, t)
	}
	return true, nil
}
