package visibility

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"mvkv/internal/heap"
	"mvkv/vfs"
)

func openMap(t *testing.T, fs vfs.FS, o Options) *Map {
	t.Helper()
	m, err := Open(fs, "/vm", o)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func mustTest(t *testing.T, m *Map, blk uint32) Bits {
	t.Helper()
	b, err := m.Test(blk)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSetClearTestAcrossPages(t *testing.T) {
	fs := vfs.NewMemFS()
	m := openMap(t, fs, Options{})
	blocks := []uint32{0, 1, 3, 4, HeapBlocksPerPage - 1, HeapBlocksPerPage, 3*HeapBlocksPerPage + 7}
	for i, b := range blocks {
		bits := AllVisible
		if i%2 == 0 {
			bits |= AllFrozen
		}
		changed, err := m.Set(b, bits, uint64(100+i))
		if err != nil || !changed {
			t.Fatalf("Set(%d): changed %v, err %v", b, changed, err)
		}
		if changed, _ := m.Set(b, bits, uint64(200+i)); changed {
			t.Fatalf("Set(%d) twice reported a change", b)
		}
	}
	for i, b := range blocks {
		want := AllVisible
		if i%2 == 0 {
			want |= AllFrozen
		}
		if got := mustTest(t, m, b); got != want {
			t.Fatalf("Test(%d) = %b, want %b", b, got, want)
		}
	}
	for _, b := range []uint32{2, 5, HeapBlocksPerPage + 1, 9 * HeapBlocksPerPage} {
		if got := mustTest(t, m, b); got != 0 {
			t.Fatalf("Test(%d) = %b for a block never set", b, got)
		}
	}
	if changed, err := m.Clear(blocks[0], AllFrozen); err != nil || !changed {
		t.Fatalf("Clear frozen: %v %v", changed, err)
	}
	if got := mustTest(t, m, blocks[0]); got != AllVisible {
		t.Fatalf("after clearing all-frozen: %b", got)
	}
	if changed, _ := m.Clear(blocks[1], ValidBits); !changed {
		t.Fatal("Clear of a set bit reported no change")
	}
	if changed, _ := m.Clear(blocks[1], ValidBits); changed {
		t.Fatal("Clear of a clear bit reported a change")
	}
	if changed, _ := m.Clear(50*HeapBlocksPerPage, ValidBits); changed {
		t.Fatal("Clear beyond the map reported a change")
	}
	if err := m.Flush(); err != nil {
		t.Fatal(err)
	}
	m.Close()

	m = openMap(t, fs, Options{})
	defer m.Close()
	if got := mustTest(t, m, blocks[0]); got != AllVisible {
		t.Fatalf("after reopen: Test(%d) = %b", blocks[0], got)
	}
	if got := mustTest(t, m, blocks[1]); got != 0 {
		t.Fatalf("after reopen: Test(%d) = %b", blocks[1], got)
	}
	if got := mustTest(t, m, blocks[len(blocks)-1]); got != AllVisible|AllFrozen {
		t.Fatalf("after reopen: Test(%d) = %b", blocks[len(blocks)-1], got)
	}
}

// TestSetBelowPageLSNIsRedoNoop: redo of a record the page already
// reflects must not set a bit that a later, unlogged clear removed.
func TestSetBelowPageLSNIsRedoNoop(t *testing.T) {
	m := openMap(t, vfs.NewMemFS(), Options{})
	defer m.Close()
	if _, err := m.Set(7, AllVisible, 500); err != nil {
		t.Fatal(err)
	}
	m.Clear(9, AllVisible)
	if changed, _ := m.Set(9, AllVisible, 400); changed {
		t.Fatal("Set with an LSN below the page LSN changed the page")
	}
	if changed, _ := m.Set(9, AllVisible, 500); changed {
		t.Fatal("Set with the page's own LSN changed the page")
	}
	if got := mustTest(t, m, 9); got != 0 {
		t.Fatalf("bit %b", got)
	}
	if changed, _ := m.Set(9, AllVisible, 501); !changed {
		t.Fatal("Set with a newer LSN did not change the page")
	}
}

// TestWALBeforeData: a logged map page is written only after the WAL is
// flushed to its LSN; an unlogged one never asks.
func TestWALBeforeData(t *testing.T) {
	for _, unlogged := range []bool{false, true} {
		var mu sync.Mutex
		var asked uint64
		fs := vfs.NewMemFS()
		m := openMap(t, fs, Options{Unlogged: unlogged, FlushWAL: func(lsn uint64) error {
			mu.Lock()
			asked = max(asked, lsn)
			mu.Unlock()
			return nil
		}})
		lsn := uint64(0x1234)
		if unlogged {
			lsn = 0
		}
		m.Set(3, AllVisible, lsn)
		if err := m.Flush(); err != nil {
			t.Fatal(err)
		}
		if unlogged && asked != 0 {
			t.Fatalf("unlogged map flushed the WAL to %#x", asked)
		}
		if !unlogged && asked != 0x1234 {
			t.Fatalf("WAL flushed to %#x before writing a page with LSN 0x1234", asked)
		}
		m.Close()
	}
}

func TestFlushWALFailureKeepsPageDirty(t *testing.T) {
	fs := vfs.NewMemFS()
	fail := errors.New("no WAL")
	m := openMap(t, fs, Options{FlushWAL: func(uint64) error { return fail }})
	m.Set(1, AllVisible, 10)
	if err := m.Flush(); !errors.Is(err, fail) {
		t.Fatalf("Flush = %v, want the WAL flush failure", err)
	}
	m.Close()
	m = openMap(t, fs, Options{})
	defer m.Close()
	if got := mustTest(t, m, 1); got != 0 {
		t.Fatalf("page reached disk although its WAL could not be flushed: %b", got)
	}
}

func TestCorruptPageNamesFileAndOffset(t *testing.T) {
	fs := vfs.NewMemFS()
	m := openMap(t, fs, Options{})
	m.Set(HeapBlocksPerPage+5, AllVisible, 1)
	if err := m.Flush(); err != nil {
		t.Fatal(err)
	}
	m.Close()
	f, err := fs.Open("/vm/00000000")
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{0xff}, heap.PageSize+100)
	f.Close()
	var reported []error
	m = openMap(t, fs, Options{OnDamage: func(err error) { reported = append(reported, err) }})
	defer m.Close()
	// The damaged page reads as one with no bit set, and says so.
	if got, err := m.Test(HeapBlocksPerPage + 5); err != nil || got != 0 {
		t.Fatalf("Test on a damaged page: %b, %v; want no bit and no error", got, err)
	}
	if len(reported) != 1 || !errors.Is(reported[0], ErrCorrupt) || !strings.Contains(reported[0].Error(), "/vm/00000000") || !strings.Contains(reported[0].Error(), "offset 8192") {
		t.Fatalf("damage reported: %v; want one error naming /vm/00000000 at offset 8192", reported)
	}
	if st := m.Stats(); st.PagesZeroed != 1 {
		t.Fatalf("PagesZeroed %d, want 1", st.PagesZeroed)
	}
	if _, err := m.Test(0); err != nil {
		t.Fatalf("an undamaged (never written) page: %v", err)
	}
	// Clearing is a no-op on it; the page on disk keeps its damage, for
	// verification to see, until a bit is set and the page written.
	if _, err := m.Clear(HeapBlocksPerPage+5, ValidBits); err != nil {
		t.Fatal(err)
	}
	if err := m.Flush(); err != nil {
		t.Fatal(err)
	}
	p := make([]byte, heap.PageSize)
	if err := m.ReadPage(1, p); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("ReadPage of the damaged page: %v", err)
	}
	if _, err := m.Set(HeapBlocksPerPage+7, AllVisible, 2); err != nil {
		t.Fatal(err)
	}
	if err := m.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := m.ReadPage(1, p); err != nil {
		t.Fatalf("ReadPage after the page was written again: %v", err)
	}
	if PageBits(p, HeapBlocksPerPage+7) != AllVisible || PageBits(p, HeapBlocksPerPage+5) != 0 {
		t.Fatalf("rewritten page bits: %b %b", PageBits(p, HeapBlocksPerPage+7), PageBits(p, HeapBlocksPerPage+5))
	}
	if len(reported) != 1 {
		t.Fatalf("damage reported %d times, want once", len(reported))
	}
}

// A map page whose LSN lies past the end of the WAL (a file from a later
// copy of the database) reads as one with no bit set, reported with its
// file and offset; kept, its LSN would fail the WAL flush before every
// write of it.
func TestPageBeyondEndOfWALReadsAsNoBitSet(t *testing.T) {
	fs := vfs.NewMemFS()
	m := openMap(t, fs, Options{})
	m.Set(5, AllVisible, 0x5000)
	if err := m.Flush(); err != nil {
		t.Fatal(err)
	}
	m.Close()
	const end = 0x4000
	var reported []error
	m = openMap(t, fs, Options{
		EndOfWAL: func() uint64 { return end },
		FlushWAL: func(lsn uint64) error {
			if lsn > end {
				return fmt.Errorf("flush to %#x past the end of the WAL %#x", lsn, end)
			}
			return nil
		},
		OnDamage: func(err error) { reported = append(reported, err) },
	})
	if got := mustTest(t, m, 5); got != 0 {
		t.Fatalf("bits of a page past the end of the WAL: %b, want none", got)
	}
	if len(reported) != 1 || !errors.Is(reported[0], ErrCorrupt) || !strings.Contains(reported[0].Error(), "/vm/00000000 at offset 0") ||
		!strings.Contains(reported[0].Error(), "page LSN 0/00005000 is beyond the end of the WAL 0/00004000") {
		t.Fatalf("damage reported: %v; want one error naming /vm/00000000 at offset 0 and both LSNs", reported)
	}
	if st := m.Stats(); st.PagesZeroed != 1 {
		t.Fatalf("PagesZeroed %d, want 1", st.PagesZeroed)
	}
	if _, err := m.Set(7, AllVisible, end); err != nil {
		t.Fatal(err)
	}
	if err := m.Flush(); err != nil {
		t.Fatalf("Flush of the page read again: %v", err)
	}
	m.Close()
	m = openMap(t, fs, Options{EndOfWAL: func() uint64 { return end }, OnDamage: func(err error) { t.Errorf("rewritten page reported: %v", err) }})
	defer m.Close()
	if got5, got7 := mustTest(t, m, 5), mustTest(t, m, 7); got5 != 0 || got7 != AllVisible {
		t.Fatalf("rewritten page bits: %b %b, want 0 %b", got5, got7, AllVisible)
	}
}

// An I/O error reading a map page is still an error: only damage is read
// as "no bit set".
func TestMapReadIOErrorIsReturned(t *testing.T) {
	mem := vfs.NewMemFS()
	m := openMap(t, mem, Options{})
	if _, err := m.Set(5, AllVisible, 1); err != nil {
		t.Fatal(err)
	}
	if err := m.Flush(); err != nil {
		t.Fatal(err)
	}
	m.Close()
	ffs := vfs.NewFaultFS(mem)
	m = openMap(t, ffs, Options{OnDamage: func(err error) { t.Errorf("I/O error reported as damage: %v", err) }})
	defer m.Close()
	ffs.Inject(vfs.Rule{Kinds: vfs.Ops(vfs.OpRead)})
	if _, err := m.Test(5); err == nil {
		t.Fatal("Test with failing reads: no error")
	}
}

func TestVerifyPageRejectsHeaderDamage(t *testing.T) {
	good := make([]byte, heap.PageSize)
	heap.InitPage(good)
	good[heap.PageHeaderSize+3] = 0x31 // blocks 12..15: 01, 00, 11, 00
	heap.SetChecksum(good, 4)
	if err := VerifyPage(good, 4); err != nil {
		t.Fatalf("good page: %v", err)
	}
	if err := VerifyPage(good, 5); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("page checked as another block: %v", err)
	}
	for name, damage := range map[string]func(p []byte){
		"flags": func(p []byte) { heap.SetPageFlags(p, heap.PDAllVisible) },
		"lower": func(p []byte) { p[14] = 28 },
		"upper": func(p []byte) { p[16], p[17] = 0, 0x10 },
	} {
		p := append([]byte(nil), good...)
		damage(p)
		heap.SetChecksum(p, 4)
		if err := VerifyPage(p, 4); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if PageBits(good, 12) != AllVisible || PageBits(good, 13) != 0 || PageBits(good, 14) != AllVisible|AllFrozen || PageBits(good, 15) != 0 {
		t.Fatalf("bits of 0x31: %b %b %b %b", PageBits(good, 12), PageBits(good, 13), PageBits(good, 14), PageBits(good, 15))
	}
}

// TestReaderNeverStaleSet: a Reader must not hand out a remembered set bit
// after a Clear.
func TestReaderNeverStaleSet(t *testing.T) {
	m := openMap(t, vfs.NewMemFS(), Options{})
	defer m.Close()
	m.Set(10, AllVisible, 1)
	r := m.NewReader()
	if b, _ := r.Test(10); b != AllVisible {
		t.Fatalf("first Test: %b", b)
	}
	m.Clear(10, AllVisible)
	if b, _ := r.Test(10); b != 0 {
		t.Fatalf("Reader kept a set bit across a Clear: %b", b)
	}
	m.Set(10, AllVisible, 2)
	if b, _ := r.Test(10); b != AllVisible {
		t.Fatalf("Reader missed a Set after a fresh lookup: %b", b)
	}
	before := m.pool.Stats().Hits
	for i := 0; i < 10; i++ {
		r.Test(10)
	}
	if m.pool.Stats().Hits != before {
		t.Fatal("Reader looked the same block up again with no clear in between")
	}
}

// TestConcurrentSetClear has four goroutines set, clear and test bits of
// eight map pages through a pool of four frames. Each holds at most one pin
// at a time, so a frame is always free for the one asking (the pool fails
// rather than waits when every frame is pinned), and pages are evicted and
// read back all along.
func TestConcurrentSetClear(t *testing.T) {
	m := openMap(t, vfs.NewMemFS(), Options{Buffers: 4})
	defer m.Close()
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				blk := uint32((2*g+i%2)*HeapBlocksPerPage + i%40)
				if _, err := m.Set(blk, AllVisible, uint64(i+1)); err != nil {
					t.Error(err)
					return
				}
				if i%3 == 0 {
					if _, err := m.Clear(blk, ValidBits); err != nil {
						t.Error(err)
						return
					}
				}
				if _, err := m.Test(blk); err != nil {
					t.Error(err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	if err := m.Flush(); err != nil {
		t.Fatal(err)
	}
}

// FuzzVerifyPage feeds arbitrary bytes to the map page decoder: it must
// not panic, and a page it accepts must give bits within ValidBits for
// every heap block it covers.
func FuzzVerifyPage(f *testing.F) {
	p := make([]byte, heap.PageSize)
	heap.InitPage(p)
	p[heap.PageHeaderSize] = 0x1b
	heap.SetChecksum(p, 0)
	f.Add(p, uint32(0))
	f.Add(make([]byte, heap.PageSize), uint32(1))
	f.Add([]byte{1, 2, 3}, uint32(0))
	f.Fuzz(func(t *testing.T, p []byte, blk uint32) {
		if len(p) == heap.PageSize && blk%7 == 0 {
			// Mostly random pages fail the checksum; stamp some so the
			// header checks are reached too.
			heap.SetChecksum(p, blk)
		}
		if err := VerifyPage(p, blk); err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		for h := uint32(0); h < HeapBlocksPerPage; h += 97 {
			if b := PageBits(p, h); b&^ValidBits != 0 {
				t.Fatalf("bits %b", b)
			}
		}
	})
}

// The map's page geometry is written out as a number, so that its
// documentation names no internal package; it must stay the heap page
// minus its header.
func TestMapBytesPerPage(t *testing.T) {
	if MapBytesPerPage != heap.PageSize-heap.PageHeaderSize {
		t.Fatalf("MapBytesPerPage %d, want %d", MapBytesPerPage, heap.PageSize-heap.PageHeaderSize)
	}
}

// ClearRange clears every bit from the first block of the range on, across
// map pages, and nothing before it.
func TestClearRange(t *testing.T) {
	m := openMap(t, vfs.NewMemFS(), Options{})
	blocks := []uint32{0, 9, 10, 11, HeapBlocksPerPage - 1, HeapBlocksPerPage, 2*HeapBlocksPerPage + 3}
	for i, b := range blocks {
		if _, err := m.Set(b, AllVisible|AllFrozen, uint64(100+i)); err != nil {
			t.Fatal(err)
		}
	}
	if any, err := m.ClearRange(10, 2*HeapBlocksPerPage+4); err != nil || !any {
		t.Fatalf("ClearRange: %v, %v", any, err)
	}
	for _, b := range blocks {
		want := Bits(0)
		if b < 10 {
			want = AllVisible | AllFrozen
		}
		if got := mustTest(t, m, b); got != want {
			t.Fatalf("Test(%d) = %b after ClearRange(10, ...), want %b", b, got, want)
		}
	}
	if any, err := m.ClearRange(10, 3*HeapBlocksPerPage); err != nil || any {
		t.Fatalf("ClearRange again: %v, %v; want nothing to clear", any, err)
	}
}

// TestDistrust: distrusted blocks read as no bits through Test and a
// Reader, while TestStored, Set and Clear see the stored bits; Trust
// moves only forward.
func TestDistrust(t *testing.T) {
	m := openMap(t, vfs.NewMemFS(), Options{})
	for i, b := range []uint32{0, 5, 9} {
		if _, err := m.Set(b, AllVisible|AllFrozen, uint64(10+i)); err != nil {
			t.Fatal(err)
		}
	}
	m.Distrust(0)
	r := m.NewReader()
	for _, b := range []uint32{0, 5, 9} {
		if got := mustTest(t, m, b); got != 0 {
			t.Fatalf("distrusted block %d: Test says %v", b, got)
		}
		if got, err := r.Test(b); err != nil || got != 0 {
			t.Fatalf("distrusted block %d: Reader says %v (%v)", b, got, err)
		}
		if got, err := m.TestStored(b); err != nil || got != AllVisible|AllFrozen {
			t.Fatalf("block %d: TestStored says %v (%v)", b, got, err)
		}
	}
	m.Trust(6)
	m.Trust(3) // backwards: no effect
	if mustTest(t, m, 0) == 0 || mustTest(t, m, 5) == 0 || mustTest(t, m, 9) != 0 {
		t.Fatalf("after Trust(6): blocks 0, 5, 9 read %v %v %v", mustTest(t, m, 0), mustTest(t, m, 5), mustTest(t, m, 9))
	}
	if got, err := r.Test(5); err != nil || got == 0 {
		t.Fatalf("trusted block 5: Reader says %v (%v)", got, err)
	}
	if _, err := m.Clear(9, ValidBits); err != nil {
		t.Fatal(err)
	}
	m.Trust(math.MaxUint32)
	if mustTest(t, m, 9) != 0 || mustTest(t, m, 0) != AllVisible|AllFrozen {
		t.Fatalf("after Trust(all): blocks 0, 9 read %v %v", mustTest(t, m, 0), mustTest(t, m, 9))
	}
}

// StrayFiles names every map file past the pages a heap of the given
// length needs, never the first file (a heap cut back to nothing leaves
// it), and counts the pages up to the end of the others.
func TestStrayFiles(t *testing.T) {
	fs := vfs.NewMemFS()
	m := openMap(t, fs, Options{})
	defer m.Close()
	if _, err := m.Set(3*HeapBlocksPerPage+7, AllVisible, 100); err != nil {
		t.Fatal(err)
	}
	if err := m.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"/vm/00000001", "/vm/00000003"} {
		f, err := fs.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(make([]byte, heap.PageSize), 0); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	for _, c := range []struct {
		heapBlocks uint32
		strays     []string
		pages      uint32
	}{
		{0, []string{"/vm/00000001", "/vm/00000003"}, 4},
		{3*HeapBlocksPerPage + 8, []string{"/vm/00000001", "/vm/00000003"}, 4},
		{heap.SegmentBlocks*HeapBlocksPerPage + 1, []string{"/vm/00000003"}, heap.SegmentBlocks + 1},
	} {
		strays, pages := m.StrayFiles(c.heapBlocks)
		var got []string
		for _, err := range strays {
			if !errors.Is(err, ErrStrayFile) {
				t.Fatalf("StrayFiles(%d): %v, want errors matching ErrStrayFile", c.heapBlocks, err)
			}
			got = append(got, strings.Fields(err.Error())[0])
		}
		if strings.Join(got, " ") != strings.Join(c.strays, " ") || pages != c.pages {
			t.Fatalf("StrayFiles(%d) = %v, %d pages; want %v, %d pages", c.heapBlocks, strays, pages, c.strays, c.pages)
		}
	}
}

// With every buffer pinned, a call that needs another map page fails with
// ErrNoFreeBuffer, or with Options.NoFreeBufferError when set, and not
// with the buffer pool's own error, which callers cannot name.
func TestNoFreeBuffer(t *testing.T) {
	mine := errors.New("mine")
	for _, c := range []struct {
		set, want error
	}{{nil, ErrNoFreeBuffer}, {mine, mine}} {
		m := openMap(t, vfs.NewMemFS(), Options{Buffers: 1, NoFreeBufferError: c.set})
		buf, err := m.pool.Get(0)
		if err != nil {
			t.Fatal(err)
		}
		_, err = m.Test(HeapBlocksPerPage)
		buf.Release()
		if err != c.want {
			t.Fatalf("Test with every buffer pinned: %v, want %v", err, c.want)
		}
		if _, err := m.Test(HeapBlocksPerPage); err != nil {
			t.Fatalf("Test once the pin is released: %v", err)
		}
		m.Close()
	}
}
