package heap

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"mvkv/vfs"
)

func pageWith(t *testing.T, block uint32, lsn uint64) []byte {
	t.Helper()
	p := newPage()
	if _, err := AddTuple(p, mkTuple(int(block%1000), 64)); err != nil {
		t.Fatal(err)
	}
	SetPageLSN(p, lsn)
	return p
}

func TestStorageAcrossSegments(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "heap")
	fs := vfs.OS{}
	s, err := OpenStorage(fs, dir)
	if err != nil {
		t.Fatal(err)
	}
	if s.NBlocks() != 0 {
		t.Fatalf("empty relation has %d blocks", s.NBlocks())
	}
	blocks := []uint32{0, 3, SegmentBlocks - 1, SegmentBlocks, SegmentBlocks + 5}
	want := map[uint32][]byte{}
	for i, b := range blocks {
		p := pageWith(t, b, uint64(100+i))
		want[b] = bytes.Clone(p)
		if err := s.WriteBlock(b, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if s.NBlocks() != SegmentBlocks+6 {
		t.Fatalf("NBlocks = %d", s.NBlocks())
	}
	check := func(s *Storage) {
		t.Helper()
		p := make([]byte, PageSize)
		for _, b := range blocks {
			if err := s.ReadBlock(b, p); err != nil {
				t.Fatalf("block %d: %v", b, err)
			}
			// The stored copy carries its checksum; compare the rest.
			SetChecksum(want[b], b)
			if !bytes.Equal(p, want[b]) {
				t.Fatalf("block %d differs", b)
			}
		}
		// Holes, a short segment and blocks past the end read as zeros.
		for _, b := range []uint32{1, 4, SegmentBlocks + 1, SegmentBlocks + 6, 5 * SegmentBlocks} {
			p[0] = 1
			if err := s.ReadBlock(b, p); err != nil || !IsNew(p) {
				t.Fatalf("block %d: new %v, %v", b, IsNew(p), err)
			}
		}
	}
	check(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	names, _ := fs.ReadDir(dir)
	if strings.Join(names, ",") != "00000000,00000001" {
		t.Fatalf("files %v", names)
	}
	s, err = OpenStorage(fs, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.NBlocks() != SegmentBlocks+6 {
		t.Fatalf("NBlocks after reopen = %d", s.NBlocks())
	}
	check(s)
}

func TestStorageCorruptBlockNamesFileAndOffset(t *testing.T) {
	dir := t.TempDir()
	fs := vfs.OS{}
	s, err := OpenStorage(fs, dir)
	if err != nil {
		t.Fatal(err)
	}
	block := uint32(SegmentBlocks + 2)
	if err := s.WriteBlock(block, pageWith(t, block, 5)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	name := filepath.Join(dir, "00000001")
	f, err := fs.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xFF}, 2*PageSize+PageSize-1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	s, err = OpenStorage(fs, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.ReadBlock(block, make([]byte, PageSize))
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("ReadBlock = %v", err)
	}
	for _, want := range []string{name, "offset 16384", "block 131074"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	// The same page copied to another block fails too (block in checksum).
	good := pageWith(t, 0, 1)
	if err := s.WriteBlock(7, good); err != nil {
		t.Fatal(err)
	}
	p := make([]byte, PageSize)
	if err := s.ReadBlock(7, p); err != nil {
		t.Fatal(err)
	}
	if err := VerifyPage(p, 8); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("page verified at the wrong block: %v", err)
	}
}

func TestStorageClosed(t *testing.T) {
	s, err := OpenStorage(vfs.OS{}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := s.ReadBlock(0, make([]byte, PageSize)); !errors.Is(err, ErrClosed) {
		t.Errorf("ReadBlock after Close: %v", err)
	}
	if err := s.WriteBlock(0, newPage()); !errors.Is(err, ErrClosed) {
		t.Errorf("WriteBlock after Close: %v", err)
	}
}

// failSyncFS fails every file Sync once armed.
type failSyncFS struct {
	vfs.FS
	fail *bool
}

type failSyncFile struct {
	vfs.File
	fail *bool
}

func (f failSyncFS) Create(name string) (vfs.File, error) {
	file, err := f.FS.Create(name)
	return failSyncFile{file, f.fail}, err
}

func (f failSyncFS) Open(name string) (vfs.File, error) {
	file, err := f.FS.Open(name)
	return failSyncFile{file, f.fail}, err
}

func (f failSyncFile) Sync() error {
	if *f.fail {
		return errors.New("EIO")
	}
	return f.File.Sync()
}

func TestStorageSyncFailureIsSticky(t *testing.T) {
	fail := false
	s, err := OpenStorage(failSyncFS{vfs.OS{}, &fail}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.WriteBlock(0, newPage()); err != nil {
		t.Fatal(err)
	}
	fail = true
	if err := s.Sync(); err == nil {
		t.Fatal("Sync hid an fsync error")
	}
	fail = false
	if err := s.Sync(); err == nil {
		t.Fatal("Sync succeeded after an earlier fsync failure")
	}
}
