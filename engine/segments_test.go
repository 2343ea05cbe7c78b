package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mvkv/internal/heap"
	"mvkv/vfs"
)

// twoSegmentHeap makes the closed database in dir look as if its heap
// spanned two segments, without writing 1 GiB: segment 0 is grown to
// 1 GiB (sparse: the blocks past its data read as zeros), segment 1 gets
// one empty page, and the control file says the last checkpoint wrote
// both (HeapBlocks = SegmentBlocks+1).
func twoSegmentHeap(t *testing.T, dir string) {
	t.Helper()
	heapPath := filepath.Join(dir, heapDir)
	if err := os.Truncate(filepath.Join(heapPath, "00000000"), heap.SegmentBlocks*heap.PageSize); err != nil {
		t.Fatal(err)
	}
	writeSegmentPage(t, heapPath)
	ctrl, found, err := readControl(vfs.OS{}, dir)
	if err != nil || !found {
		t.Fatalf("control file: found %v, %v", found, err)
	}
	ctrl.HeapBlocks = heap.SegmentBlocks + 1
	if err := writeControl(vfs.OS{}, dir, ctrl); err != nil {
		t.Fatal(err)
	}
}

// writeSegmentPage writes an initialized empty page at block
// SegmentBlocks, the first of segment 1, with its checksum.
func writeSegmentPage(t *testing.T, heapPath string) {
	t.Helper()
	p := make([]byte, heap.PageSize)
	heap.InitPage(p)
	heap.SetChecksum(p, heap.SegmentBlocks)
	if err := os.WriteFile(filepath.Join(heapPath, "00000001"), p, 0o644); err != nil {
		t.Fatal(err)
	}
}

// A segment before another that is shorter than 1 GiB, missing blocks the
// last checkpoint wrote, fails Open naming the file, its size and what
// was expected, instead of reading the missing blocks as new pages.
func TestCutNonLastSegmentIsCorruption(t *testing.T) {
	dir := filledAndClosed(t, 500)
	twoSegmentHeap(t, dir)
	// The layout itself opens.
	db := openTest(t, dir, Options{})
	if v, ok := get(t, db, "key-00007"); !ok || v != strings.Repeat("v", 200) {
		t.Fatalf("key-00007 = %q, %v", v, ok)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	seg0 := filepath.Join(dir, heapDir, "00000000")
	const cut = 500 << 20
	if err := os.Truncate(seg0, cut); err != nil {
		t.Fatal(err)
	}
	_, err := Open(dir, Options{})
	want := fmt.Sprintf("heap segment %s is %d bytes but is not the last segment (%s follows it, 8192 bytes); a segment before another must be 1073741824 bytes (the last checkpoint wrote %d blocks): the file was cut short",
		seg0, cut, filepath.Join(dir, heapDir, "00000001"), heap.SegmentBlocks+1)
	if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Open: %v\nwant ErrCorruption containing %q", err, want)
	}

	if err := os.Remove(seg0); err != nil {
		t.Fatal(err)
	}
	_, err = Open(dir, Options{})
	want = fmt.Sprintf("heap segment %s is missing but is not the last segment", seg0)
	if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "the file was lost") {
		t.Fatalf("Open without segment 0: %v\nwant ErrCorruption containing %q", err, want)
	}
}

// The last segment cut below what the last checkpoint wrote in it is
// named with its size.
func TestCutLastSegmentNamesFile(t *testing.T) {
	dir := filledAndClosed(t, 500)
	ctrl, _, err := readControl(vfs.OS{}, dir)
	if err != nil || ctrl.HeapBlocks < 2 {
		t.Fatalf("control file: %+v, %v", ctrl, err)
	}
	seg0 := filepath.Join(dir, heapDir, "00000000")
	if err := os.Truncate(seg0, heap.PageSize); err != nil {
		t.Fatal(err)
	}
	_, err = Open(dir, Options{})
	want := fmt.Sprintf("heap segment %s is 8192 bytes; the last checkpoint wrote %d blocks, %d of them in it (%d bytes): the file was cut short",
		seg0, ctrl.HeapBlocks, ctrl.HeapBlocks, ctrl.HeapBlocks*heap.PageSize)
	if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Open: %v\nwant ErrCorruption containing %q", err, want)
	}
}

// A segment file after a short segment 0, past everything the last
// checkpoint wrote, on a database shut down cleanly: nothing was extended
// since that checkpoint, so the file is not this database's and Open
// fails naming it (before, one of zeros made segment 0 count as 1 GiB
// and its pages part of the heap).
func TestStraySegmentAfterCleanShutdownIsCorruption(t *testing.T) {
	dir := filledAndClosed(t, 500)
	for _, content := range []string{"zeros", "empty page"} {
		d := t.TempDir()
		copyDir(t, dir, d)
		heapPath := filepath.Join(d, heapDir)
		if content == "zeros" {
			if err := os.WriteFile(filepath.Join(heapPath, "00000001"), make([]byte, 2*heap.PageSize), 0o644); err != nil {
				t.Fatal(err)
			}
		} else {
			writeSegmentPage(t, heapPath)
		}
		_, err := Open(d, Options{})
		seg1 := filepath.Join(heapPath, "00000001")
		if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), seg1) {
			t.Fatalf("%s: Open: %v, want ErrCorruption naming %s", content, err, seg1)
		}
		if content == "zeros" {
			want := fmt.Sprintf("heap segment %s is ", filepath.Join(heapPath, "00000000"))
			if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "a clean shutdown") || !strings.Contains(err.Error(), "not this database's") {
				t.Fatalf("zeros: Open: %v, want the short segment named and the later one called foreign", err)
			}
		}
		// An empty file there (Truncate leaves them) is no segment.
		if err := os.Truncate(seg1, 0); err != nil {
			t.Fatal(err)
		}
		db := openTest(t, d, Options{})
		if _, ok := get(t, db, "key-00042"); !ok {
			t.Fatal("key-00042 missing")
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// After a crash with writes since the last checkpoint, a segment short
// before a later one can be the crash's doing (the later write reached the
// disk, the earlier segment's last pages did not). When no WAL record since
// the checkpoint writes a page in the later files, they hold only zeros
// (any other page there fails Open as not this database's): Open goes on,
// logs a warning naming the files, and empties them, cutting the heap back
// to the end of the short segment, rather than writing up to a gigabyte of
// empty pages to fill the gap before them.
// crashAfterCheckpoint returns a copy of a running database's directory,
// as a crash would leave it, with 100 keys written before its last
// checkpoint and 100 after.
func crashAfterCheckpoint(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	db := openTest(t, dir, Options{CheckpointTimeout: -1})
	for i := 0; i < 100; i++ {
		mustPut(t, db, fmt.Sprintf("key-%05d", i), strings.Repeat("v", 200))
	}
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	for i := 100; i < 200; i++ {
		mustPut(t, db, fmt.Sprintf("key-%05d", i), strings.Repeat("w", 200))
	}
	crash := t.TempDir()
	copyDir(t, dir, crash)
	db.Close()
	return crash
}

// TestShortSegmentAfterCrashIsFilled: a short segment before a later one
// holding only zeros. The second copy's segment 0 is 1 GiB long, and Open
// and the vacuum read all of it: under the race detector that takes a
// minute and a half and checks no concurrency the first copy does not, so
// it runs without -race only (.ci/run runs this test again without it).
func TestShortSegmentAfterCrashIsFilled(t *testing.T) {
	crash := crashAfterCheckpoint(t)

	// Segment 0 as the crash left it, and segment 1 with a page of
	// zeros; then, on another copy, segment 0 two blocks short of 1 GiB
	// (sparse: the blocks between its data and there read as zeros).
	heapPath := filepath.Join(crash, heapDir)
	seg1 := filepath.Join(heapPath, "00000001")
	if err := os.WriteFile(seg1, make([]byte, heap.PageSize), 0o644); err != nil {
		t.Fatal(err)
	}
	sparse := t.TempDir()
	copyDir(t, crash, sparse)
	if err := os.Truncate(filepath.Join(sparse, heapDir, "00000000"), (heap.SegmentBlocks-2)*heap.PageSize); err != nil {
		t.Fatal(err)
	}
	dirs := []string{crash, sparse}
	if raceEnabled {
		t.Log("the copy with a 1 GiB segment 0 runs without -race only")
		dirs = dirs[:1]
	}
	for _, d := range dirs {
		fi, err := os.Stat(filepath.Join(d, heapDir, "00000000"))
		if err != nil {
			t.Fatal(err)
		}
		var logged syncBuffer
		db, err := Open(d, Options{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
		if err != nil {
			t.Fatalf("Open after the crash: %v", err)
		}
		ri := db.Recovery()
		if len(ri.FilledSegments) != 0 || ri.EmptiedSegmentsFrom != uint32(fi.Size()/heap.PageSize) {
			db.Close()
			t.Fatalf("recovery filled %v and cut the heap back to %d blocks; want no fill and a cut to %d", ri.FilledSegments, ri.EmptiedSegmentsFrom, fi.Size()/heap.PageSize)
		}
		if fi2, err := os.Stat(filepath.Join(d, heapDir, "00000001")); err != nil || fi2.Size() != 0 {
			t.Errorf("segment 1 after Open: %v, %v; want it empty", fi2, err)
		}
		log := logged.String()
		if !strings.Contains(log, "the later ones hold nothing but pages of zeros") || !strings.Contains(log, filepath.Join(d, heapDir, "00000000")) ||
			!strings.Contains(log, filepath.Join(d, heapDir, "00000001")) {
			t.Errorf("log does not name the short segment and the later one:\n%s", log)
		}
		for _, k := range []string{"key-00003", "key-00150"} {
			if _, ok := get(t, db, k); !ok {
				t.Fatalf("%s missing", k)
			}
		}
		// The heap length the end-of-recovery checkpoint recorded covers
		// no page of zeros: a reopen and a vacuum of every page pass.
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		if db, err = Open(d, Options{}); err != nil {
			t.Fatalf("reopen: %v", err)
		}
		if _, err := db.Vacuum(context.Background()); err != nil {
			t.Fatalf("vacuum after the reopen: %v", err)
		}
		if _, ok := get(t, db, "key-00150"); !ok {
			t.Fatalf("key-00150 missing after the reopen")
		}
		db.Close()
	}
}

// A committed bulk load's pages are durable before its commit record, so
// after a crash one missing from a segment short before a later one was
// lost: Open fails naming the file.
func TestShortSegmentMissingBulkLoadPagesIsCorruption(t *testing.T) {
	dir := t.TempDir()
	ffs := vfs.NewFaultFS(vfs.OS{})
	db := openTest(t, dir, Options{FS: ffs, CheckpointTimeout: -1})
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	// The checkpoint after the load cannot replace the control file: the
	// load is committed in the WAL, past the last checkpoint.
	ffs.Inject(vfs.Rule{Kinds: vfs.Ops(vfs.OpRename), Base: controlName})
	st, err := db.BulkLoad(context.Background(), bulkRows(3000, 200))
	if err == nil || st.Pages < 4 {
		t.Fatalf("bulk load: %+v, %v; want a committed load of 4 pages or more whose checkpoint failed", st, err)
	}
	db.Close()
	heapPath := filepath.Join(dir, heapDir)
	seg0 := filepath.Join(heapPath, "00000000")
	keep := int64(st.FirstBlock+2) * heap.PageSize
	if err := os.Truncate(seg0, keep); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(heapPath, "00000001"), make([]byte, heap.PageSize), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Open(dir, Options{})
	want := fmt.Sprintf("heap segment %s is %d bytes but is not the last segment", seg0, keep)
	if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "the bulk load committed after the last checkpoint") {
		t.Fatalf("Open: %v\nwant ErrCorruption containing %q and naming the bulk load", err, want)
	}
}

// Verify names a segment cut short before a later one while the database
// is open (Open refuses one, so here the damage comes after it).
func TestVerifyReportsShortSegment(t *testing.T) {
	dir := filledAndClosed(t, 500)
	db := openTest(t, dir, Options{})
	defer db.Close()
	heapPath := filepath.Join(dir, heapDir)
	seg0 := filepath.Join(heapPath, "00000000")
	if err := os.Truncate(seg0, 3*heap.PageSize); err != nil {
		t.Fatal(err)
	}
	writeSegmentPage(t, heapPath)
	rep, err := db.Verify()
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("heap: segment %s is %d bytes but is not the last segment (%s follows it, 8192 bytes); a segment before another must be 1073741824 bytes",
		seg0, 3*heap.PageSize, filepath.Join(heapPath, "00000001"))
	found := false
	for _, p := range rep.Problems {
		found = found || p == want
	}
	if !found {
		t.Fatalf("problems %q\ndo not include %q", rep.Problems, want)
	}
	// The blocks past the cut, below the checkpoint's length, are named
	// as lost where they are read.
	if !strings.Contains(rep.String(), seg0+" at offset 24576 (block 3) lies past the file's end (24576 bytes), below the") {
		t.Fatalf("report does not name block 3 as past the file's end:\n%s", rep.String())
	}
}

// Pages of zeros past the last checkpoint's heap length after a crash
// (extended and never written, or a hole left when a later page reached
// the disk first) are written as empty pages before the end-of-recovery
// checkpoint counts them, so that the next Open, a vacuum and verify do
// not take them for pages a checkpoint wrote and a disk lost.
func TestZeroPagesPastCheckpointAfterCrash(t *testing.T) {
	crash := crashAfterCheckpoint(t)

	seg0 := filepath.Join(crash, heapDir, "00000000")
	fi, err := os.Stat(seg0)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(seg0, fi.Size()+3*heap.PageSize); err != nil {
		t.Fatal(err)
	}
	db, err := Open(crash, Options{})
	if err != nil {
		t.Fatalf("Open after the crash: %v", err)
	}
	if got := db.Recovery().EmptiedBlocks; got != 3 {
		t.Errorf("recovery wrote %d empty pages, want 3", got)
	}
	if err := db.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	db, err = Open(crash, Options{})
	if err != nil {
		t.Fatalf("second Open: %v", err)
	}
	defer db.Close()
	if _, err := db.Vacuum(context.Background()); err != nil {
		t.Fatalf("vacuum: %v", err)
	}
	for _, k := range []string{"key-00003", "key-00150"} {
		if _, ok := get(t, db, k); !ok {
			t.Fatalf("%s missing", k)
		}
	}
}

// A crash can come after recovery wrote empty pages in place of pages of
// zeros past the checkpoint's heap length and before the next checkpoint
// counted them; the next Open finds them past that length, written by no
// WAL record, and takes them for what they are, pages holding nothing,
// not for another database's. A stray file of zeros far past the heap is
// read for its own size only, and emptied.
func TestEmptyPagesPastCheckpointAfterSecondCrash(t *testing.T) {
	crash := crashAfterCheckpoint(t)
	seg0 := filepath.Join(crash, heapDir, "00000000")
	f, err := os.OpenFile(seg0, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	first := uint32(fi.Size() / heap.PageSize)
	page := make([]byte, heap.PageSize)
	for i := uint32(0); i < 3; i++ {
		heap.InitPage(page)
		heap.SetChecksum(page, first+i)
		if _, err := f.WriteAt(page, int64(first+i)*heap.PageSize); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	stray := filepath.Join(crash, heapDir, "00000100")
	if err := os.WriteFile(stray, make([]byte, heap.PageSize), 0o644); err != nil {
		t.Fatal(err)
	}
	db, err := Open(crash, Options{})
	if err != nil {
		t.Fatalf("Open after a second crash, empty pages past the checkpoint's length: %v", err)
	}
	defer db.Close()
	if fi, err := os.Stat(stray); err != nil || fi.Size() != 0 {
		t.Errorf("stray segment after Open: %v, %v; want it emptied", fi, err)
	}
	for _, k := range []string{"key-00003", "key-00150"} {
		if _, ok := get(t, db, k); !ok {
			t.Fatalf("%s missing", k)
		}
	}
	if _, err := db.Vacuum(context.Background()); err != nil {
		t.Fatalf("vacuum: %v", err)
	}
}
