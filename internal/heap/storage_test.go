package heap

import (
	"bytes"
	"errors"
	"fmt"
	"os"
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
		// Blocks skipped below the end were filled with empty pages;
		// blocks past the end, and a missing segment, read as zeros.
		for _, b := range []uint32{1, 4, SegmentBlocks + 1} {
			if err := s.ReadBlock(b, p); err != nil || IsNew(p) || NumSlots(p) != 0 {
				t.Fatalf("skipped block %d: new %v, %d slots, %v", b, IsNew(p), NumSlots(p), err)
			}
		}
		for _, b := range []uint32{SegmentBlocks + 6, 5 * SegmentBlocks} {
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

// A page of zeros (extended, never used) is written initialized and empty,
// so that zeros on disk below a length once written always mean damage.
func TestStorageNeverWritesZeros(t *testing.T) {
	s, err := OpenStorage(vfs.NewMemFS(), "/heap")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WriteBlock(2, make([]byte, PageSize)); err != nil {
		t.Fatal(err)
	}
	p := make([]byte, PageSize)
	if err := s.ReadBlock(2, p); err != nil {
		t.Fatal(err)
	}
	if IsNew(p) || NumSlots(p) != 0 {
		t.Fatalf("block written from zeros reads back new=%v with %d slots; want an initialized empty page", IsNew(p), NumSlots(p))
	}
	// The blocks below it, not yet written, are filled with empty pages,
	// not left a hole of zeros; a later write of one replaces it.
	for b := uint32(0); b < 2; b++ {
		if err := s.ReadBlock(b, p); err != nil || IsNew(p) {
			t.Fatalf("block %d below the first write: %v new=%v", b, err, IsNew(p))
		}
	}
	want := pageWith(t, 1, 7)
	if err := s.WriteBlock(1, append([]byte(nil), want...)); err != nil {
		t.Fatal(err)
	}
	if err := s.ReadBlock(1, p); err != nil || NumSlots(p) != 1 || PageLSN(p) != 7 {
		t.Fatalf("block 1 after its real write: %v, %d slots, LSN %d", err, NumSlots(p), PageLSN(p))
	}
}

// A file shortened while the storage has it open (by hand, or by another
// program) reports the blocks it lost, even above the length a checkpoint
// wrote, instead of reading them as new pages; blocks never written still
// read as new.
func TestStorageFileCutShortWhileOpen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "heap")
	s, err := OpenStorage(vfs.OS{}, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for b := uint32(0); b < 4; b++ {
		if err := s.WriteBlock(b, pageWith(t, b, 10)); err != nil {
			t.Fatal(err)
		}
	}
	p := make([]byte, PageSize)
	if err := s.ReadBlock(7, p); err != nil || !IsNew(p) {
		t.Fatalf("block 7, never written: %v, new %v; want a new page", err, IsNew(p))
	}
	name := filepath.Join(dir, "00000000")
	if err := os.Truncate(name, 2*PageSize); err != nil {
		t.Fatal(err)
	}
	err = s.ReadBlock(3, p)
	want := fmt.Sprintf("%s at offset %d (block 3) lies past the file's end (%d bytes), which held %d bytes: the file was cut short while open", name, 3*PageSize, 2*PageSize, 4*PageSize)
	if !errors.Is(err, ErrZeroedPage) || !strings.Contains(err.Error(), want) {
		t.Fatalf("read of a block cut off: %v; want ErrZeroedPage containing %q", err, want)
	}
	if err := s.ReadBlock(1, p); err != nil {
		t.Fatalf("block 1, still in the file: %v", err)
	}
	// Reopened, the storage takes the file as it is: the blocks past its
	// end were never written as far as it knows (recovery's business).
	s.Close()
	s2, err := OpenStorage(vfs.OS{}, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if err := s2.ReadBlock(3, p); err != nil || !IsNew(p) {
		t.Fatalf("block 3 after reopening: %v, new %v; want a new page", err, IsNew(p))
	}
}

// Before SetNoZeros a page of zeros inside a file past the checkpoint's
// length reads as new (a crash can leave one); after it, it is damage.
func TestStorageZerosAfterSetNoZeros(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "heap")
	s, err := OpenStorage(vfs.OS{}, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for b := uint32(0); b < 3; b++ {
		if err := s.WriteBlock(b, pageWith(t, b, 10)); err != nil {
			t.Fatal(err)
		}
	}
	name := filepath.Join(dir, "00000000")
	f, err := os.OpenFile(name, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, PageSize), PageSize); err != nil {
		t.Fatal(err)
	}
	f.Close()
	p := make([]byte, PageSize)
	if err := s.ReadBlock(1, p); err != nil || !IsNew(p) {
		t.Fatalf("page of zeros before SetNoZeros: %v, new %v; want a new page", err, IsNew(p))
	}
	s.SetNoZeros()
	err = s.ReadBlock(1, p)
	want := fmt.Sprintf("%s at offset %d (block 1), inside the file, where this database never writes a page of zeros", name, PageSize)
	if !errors.Is(err, ErrZeroedPage) || !strings.Contains(err.Error(), want) {
		t.Fatalf("page of zeros after SetNoZeros: %v; want ErrZeroedPage containing %q", err, want)
	}
	if err := s.ReadBlock(2, p); err != nil || IsNew(p) {
		t.Fatalf("block 2: %v", err)
	}
	if err := s.ReadBlock(9, p); err != nil || !IsNew(p) {
		t.Fatalf("block 9, past the end and never written: %v; want a new page", err)
	}
}
