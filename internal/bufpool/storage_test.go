package bufpool

import (
	"testing"

	"mvkv/internal/heap"
	"mvkv/vfs"
)

var _ Storage = (*heap.Storage)(nil)

// TestWithHeapStorage runs the pool over the real storage manager: pages
// survive eviction through checksummed segment files.
func TestWithHeapStorage(t *testing.T) {
	st, err := heap.OpenStorage(vfs.OS{}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var flushed uint64
	pool := New(st, 4, func(lsn uint64) error { flushed = max(flushed, lsn); return nil }, heap.PageLSN)
	for i := 0; i < 20; i++ {
		b, err := pool.Extend()
		if err != nil {
			t.Fatal(err)
		}
		b.Lock()
		heap.InitPage(b.Page())
		if _, err := heap.AddTuple(b.Page(), heap.AppendTuple(nil, heap.TupleHeader{Xmin: uint64(i + 1), Prev: heap.InvalidTID}, []byte{byte(i)}, nil)); err != nil {
			t.Fatal(err)
		}
		heap.SetPageLSN(b.Page(), uint64(i+1))
		b.MarkDirty()
		b.Unlock()
		b.Release()
	}
	if err := pool.FlushAll(); err != nil {
		t.Fatal(err)
	}
	if st.NBlocks() != 20 || flushed != 20 {
		t.Fatalf("storage has %d blocks, WAL flushed to %d", st.NBlocks(), flushed)
	}
	for blk := uint32(0); blk < 20; blk++ {
		b, err := pool.Get(blk)
		if err != nil {
			t.Fatal(err)
		}
		b.RLock()
		tup, err := heap.Tuple(b.Page(), 0)
		b.RUnlock()
		b.Release()
		if err != nil || heap.TupleXmin(tup) != uint64(blk+1) {
			t.Fatalf("block %d: xmin %d, %v", blk, heap.TupleXmin(tup), err)
		}
	}
}
