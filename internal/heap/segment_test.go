package heap

import (
	"errors"
	"path"
	"strings"
	"testing"

	"mvkv/vfs"
)

// segmentFixture opens a storage in a memory file system (sparse: a 1 GiB
// segment costs only the pages written) with blocks 0 to 2 written and a
// second segment holding one page, then cuts segment 0 to size bytes.
func segmentFixture(t *testing.T, size int64) (*Storage, vfs.FS, string) {
	t.Helper()
	fs := vfs.NewMemFS()
	dir := "/db/heap"
	s, err := OpenStorage(fs, dir)
	if err != nil {
		t.Fatal(err)
	}
	for b := uint32(0); b < 3; b++ {
		if err := s.WriteBlock(b, pageWith(t, b, 7)); err != nil {
			t.Fatal(err)
		}
	}
	f, err := fs.Create(path.Join(dir, "00000001"))
	if err != nil {
		t.Fatal(err)
	}
	p := pageWith(t, SegmentBlocks, 7)
	SetChecksum(p, SegmentBlocks)
	if _, err := f.WriteAt(p, 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	g, err := fs.Open(path.Join(dir, "00000000"))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Truncate(size); err != nil {
		t.Fatal(err)
	}
	g.Close()
	// Reopened, so that the storage knows the file made beside it.
	s.Close()
	if s, err = OpenStorage(fs, dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, fs, dir
}

func TestStorageLayoutReportsShortSegment(t *testing.T) {
	s, _, dir := segmentFixture(t, 5*PageSize)
	l, err := s.Layout()
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Segments) != 2 || l.Segments[0].Size != 5*PageSize || l.Segments[1].Size != PageSize || l.Segments[0].Missing {
		t.Fatalf("layout %+v", l)
	}
	short := l.Short()
	if len(short) != 1 || short[0].Num != 0 || short[0].Blocks() != 5 || short[0].Path != path.Join(dir, "00000000") {
		t.Fatalf("short segments %+v", short)
	}
	if last, ok := l.Last(); !ok || last.Num != 1 {
		t.Fatalf("last %+v %v", last, ok)
	}
	errs := s.CheckSegments()
	want := path.Join(dir, "00000000") + " is 40960 bytes but is not the last segment (" + path.Join(dir, "00000001") + " follows it, 8192 bytes); a segment before another must be 1073741824 bytes"
	if len(errs) != 1 || !errors.Is(errs[0], ErrCorrupt) || !strings.Contains(errs[0].Error(), want) {
		t.Fatalf("CheckSegments: %v, want one ErrCorrupt containing %q", errs, want)
	}

	// A full segment 0 checks out, and so does an empty segment file
	// after the last one holding data (Truncate leaves them).
	s2, fs, dir := segmentFixture(t, SegmentBlocks*PageSize)
	f, err := fs.Create(path.Join(dir, "00000002"))
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if l, err := s2.Layout(); err != nil || len(l.Segments) != 3 || len(l.Short()) != 0 {
		t.Fatalf("full segment 0: layout %+v, %v", l, err)
	}
	if errs := s2.CheckSegments(); errs != nil {
		t.Fatalf("full segment 0: %v", errs)
	}

	// A missing segment before one holding data.
	fs3 := vfs.NewMemFS()
	s3, err := OpenStorage(fs3, "/h")
	if err != nil {
		t.Fatal(err)
	}
	defer s3.Close()
	f, err = fs3.Create("/h/00000001")
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt(make([]byte, PageSize), 0)
	f.Close()
	l, err = s3.Layout()
	if err != nil || len(l.Short()) != 1 || !l.Short()[0].Missing || l.Short()[0].Path != "/h/00000000" {
		t.Fatalf("missing segment 0: layout %+v, %v", l, err)
	}
	if errs := s3.CheckSegments(); len(errs) != 1 || !strings.Contains(errs[0].Error(), "/h/00000000 is missing but is not the last segment") {
		t.Fatalf("missing segment 0: %v", errs)
	}
}

func TestStorageFillSegment(t *testing.T) {
	// Segment 0 three blocks short of 1 GiB (sparse below), and half of
	// a fourth page: the partial page is overwritten.
	size := int64(SegmentBlocks-4)*PageSize + PageSize/2
	s, _, _ := segmentFixture(t, size)
	n, err := s.FillSegment(0)
	if err != nil || n != 4 {
		t.Fatalf("FillSegment: %d blocks, %v", n, err)
	}
	if errs := s.CheckSegments(); errs != nil {
		t.Fatalf("after the fill: %v", errs)
	}
	p := make([]byte, PageSize)
	for b := uint32(SegmentBlocks - 4); b < SegmentBlocks; b++ {
		if err := s.ReadBlock(b, p); err != nil || IsNew(p) || NumSlots(p) != 0 {
			t.Fatalf("filled block %d: new %v, %d slots, %v", b, IsNew(p), NumSlots(p), err)
		}
	}
	if err := s.ReadBlock(SegmentBlocks, p); err != nil || NumSlots(p) != 1 {
		t.Fatalf("block of segment 1: %d slots, %v", NumSlots(p), err)
	}
	if s.NBlocks() != SegmentBlocks+1 {
		t.Fatalf("NBlocks %d", s.NBlocks())
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if n, err := s.FillSegment(0); err != nil || n != 0 {
		t.Fatalf("second FillSegment: %d blocks, %v", n, err)
	}
}

// Below the length a checkpoint wrote, a block past its file's end or in
// a missing segment is lost, not new.
func TestStorageReadPastEndBelowWritten(t *testing.T) {
	s, _, dir := segmentFixture(t, 2*PageSize)
	p := make([]byte, PageSize)
	if err := s.ReadBlock(2, p); err != nil || !IsNew(p) {
		t.Fatalf("block past the end, nothing written: new %v, %v", IsNew(p), err)
	}
	s.SetWritten(3)
	err := s.ReadBlock(2, p)
	want := path.Join(dir, "00000000") + " at offset 16384 (block 2) lies past the file's end (16384 bytes), below the 3 blocks a checkpoint wrote"
	if !errors.Is(err, ErrZeroedPage) || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), want) {
		t.Fatalf("block past the end below the written length: %v, want ErrZeroedPage containing %q", err, want)
	}
	if err := s.ReadBlock(1, p); err != nil || NumSlots(p) != 1 {
		t.Fatalf("block 1: %d slots, %v", NumSlots(p), err)
	}
	s.SetWritten(2*SegmentBlocks + 1)
	err = s.ReadBlock(2*SegmentBlocks, p)
	if !errors.Is(err, ErrZeroedPage) || !strings.Contains(err.Error(), path.Join(dir, "00000002")+" (block 262144 at offset 0) is missing") {
		t.Fatalf("block of a missing segment below the written length: %v", err)
	}
}

// TestStorageFillFailsPartway: a write past the end whose fill of the gap
// below fails partway leaves the end at the last fill written whole, with
// every block below it an initialized empty page; written again, it fills
// the rest and lands, and no block below it reads as zeros.
func TestStorageFillFailsPartway(t *testing.T) {
	ffs := vfs.NewFaultFS(vfs.NewMemFS())
	s, err := OpenStorage(ffs, "/db/heap")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const target = 3*fillRun + 5
	fault := ffs.Inject(vfs.Rule{Kinds: vfs.Ops(vfs.OpWrite), Nth: 2})
	if err := s.WriteBlock(target, pageWith(t, target, 7)); err == nil {
		t.Fatal("the write whose fill failed succeeded")
	}
	if fault.Fired() != 1 {
		t.Fatalf("the fault fired %d times", fault.Fired())
	}
	ffs.Clear()
	if n := s.NBlocks(); n != fillRun {
		t.Fatalf("after the failed fill the relation is %d blocks, want the %d of the fill written", n, fillRun)
	}
	p := make([]byte, PageSize)
	for b := range uint32(fillRun) {
		if err := s.ReadBlock(b, p); err != nil || IsNew(p) || NumSlots(p) != 0 {
			t.Fatalf("block %d after the failed fill: new %v, %d slots, %v", b, IsNew(p), NumSlots(p), err)
		}
	}
	if err := s.WriteBlock(target, pageWith(t, target, 7)); err != nil {
		t.Fatal(err)
	}
	if n := s.NBlocks(); n != target+1 {
		t.Fatalf("NBlocks %d, want %d", n, target+1)
	}
	for b := range uint32(target) {
		if err := s.ReadBlock(b, p); err != nil || IsNew(p) || NumSlots(p) != 0 {
			t.Fatalf("filled block %d: new %v, %d slots, %v", b, IsNew(p), NumSlots(p), err)
		}
	}
	if err := s.ReadBlock(target, p); err != nil || NumSlots(p) != 1 {
		t.Fatalf("block %d: %d slots, %v", target, NumSlots(p), err)
	}
	s.SetWritten(target + 1)
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if errs := s.CheckSizes(); errs != nil {
		t.Fatal(errs)
	}
}
