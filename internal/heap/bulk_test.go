package heap

import (
	"bytes"
	"path/filepath"
	"testing"

	"mvkv/vfs"
)

// TestWriteBlocksAndTruncate writes a run of pages across a segment
// boundary with one call, checks every page reads back, then cuts the
// relation back into the first segment and checks the sizes, what reads
// back, and that a reopen sees the shorter relation.
func TestWriteBlocksAndTruncate(t *testing.T) {
	// Sparse files: the run sits at the end of a 1 GiB segment.
	m := vfs.OS{}
	dir := filepath.Join(t.TempDir(), "heap")
	s, err := OpenStorage(m, dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WriteBlock(0, pageWith(t, 0, 1)); err != nil {
		t.Fatal(err)
	}
	first, n := uint32(SegmentBlocks-3), uint32(6)
	run := make([]byte, 0, int(n)*PageSize)
	var want [][]byte
	for i := uint32(0); i < n; i++ {
		p := pageWith(t, first+i, 0)
		want = append(want, p)
		run = append(run, p...)
	}
	if err := s.WriteBlocks(first, run); err != nil {
		t.Fatal(err)
	}
	if got := s.NBlocks(); got != first+n {
		t.Fatalf("NBlocks %d, want %d", got, first+n)
	}
	page := make([]byte, PageSize)
	for i := uint32(0); i < n; i++ {
		if err := s.ReadBlock(first+i, page); err != nil {
			t.Fatalf("block %d: %v", first+i, err)
		}
		if !bytes.Equal(page[PageHeaderSize:], want[i][PageHeaderSize:]) {
			t.Fatalf("block %d differs", first+i)
		}
	}
	// The gap between block 0 and first was filled with empty pages.
	if err := s.ReadBlock(1, page); err != nil || IsNew(page) || NumSlots(page) != 0 {
		t.Fatalf("gap block: new %v slots %d err %v", IsNew(page), NumSlots(page), err)
	}
	if err := s.WriteBlocks(1, run[:100]); err == nil {
		t.Fatal("a run that is not whole pages was written")
	}
	cut := first + 1
	if err := s.Truncate(cut); err != nil {
		t.Fatal(err)
	}
	if got := s.NBlocks(); got != cut {
		t.Fatalf("NBlocks %d after truncate, want %d", got, cut)
	}
	if size, _ := m.Stat(filepath.Join(dir, "00000000")); size != int64(cut)*PageSize {
		t.Fatalf("first segment is %d bytes", size)
	}
	if size, _ := m.Stat(filepath.Join(dir, "00000001")); size != 0 {
		t.Fatalf("second segment is %d bytes", size)
	}
	if err := s.ReadBlock(cut, page); err != nil || !IsNew(page) {
		t.Fatalf("block past the cut: new %v err %v", IsNew(page), err)
	}
	if err := s.Truncate(cut + 10); err != nil || s.NBlocks() != cut {
		t.Fatalf("truncate past the end: %v, NBlocks %d", err, s.NBlocks())
	}
	s.Close()
	s, err = OpenStorage(m, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.NBlocks(); got != cut {
		t.Fatalf("reopened with %d blocks, want %d", got, cut)
	}
}

// syncHookFS calls onSync before every file fsync.
type syncHookFS struct {
	vfs.FS
	onSync func()
}

type syncHookFile struct {
	vfs.File
	h *syncHookFS
}

func (f syncHookFile) Sync() error {
	if f.h.onSync != nil {
		f.h.onSync()
	}
	return f.File.Sync()
}

func (h *syncHookFS) Open(name string) (vfs.File, error) {
	f, err := h.FS.Open(name)
	if err != nil {
		return nil, err
	}
	return syncHookFile{f, h}, nil
}

func (h *syncHookFS) Create(name string) (vfs.File, error) {
	f, err := h.FS.Create(name)
	if err != nil {
		return nil, err
	}
	return syncHookFile{f, h}, nil
}

// A block being cut off by Truncate reads as new, not as a page lost below
// the written length, while the cut is in progress (a damage scan reading
// the files beside a vacuum's truncation).
func TestTruncateReadDuringCut(t *testing.T) {
	m := vfs.NewMemFS()
	h := &syncHookFS{FS: m}
	s, err := OpenStorage(h, "/heap")
	if err != nil {
		t.Fatal(err)
	}
	for b := uint32(0); b < 8; b++ {
		if err := s.WriteBlock(b, pageWith(t, b, 1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	s.SetWritten(8)
	var readErr error
	synced := 0
	h.onSync = func() {
		synced++
		page := make([]byte, PageSize)
		readErr = s.ReadBlock(6, page)
	}
	if err := s.Truncate(4); err != nil {
		t.Fatal(err)
	}
	if synced == 0 {
		t.Fatal("Truncate synced no file")
	}
	if readErr != nil {
		t.Fatalf("reading block 6 while the heap was cut to 4 blocks: %v", readErr)
	}
}
