package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mvkv/clog"
	"mvkv/internal/heap"
	"mvkv/vfs"
	"mvkv/wal"
)

// checkpointSegment returns the directory's control data and the path and
// offset of the WAL segment holding its last checkpoint record.
func checkpointSegment(t *testing.T, dir string) (controlData, string, int64) {
	t.Helper()
	ctrl, found, err := readControl(vfs.OS{}, dir)
	if err != nil || !found || ctrl.CheckpointLSN == 0 {
		t.Fatalf("control file: %+v found %v err %v", ctrl, found, err)
	}
	fi, err := os.Stat(walSegments(t, dir)[0])
	if err != nil {
		t.Fatal(err)
	}
	name, off := wal.SegmentFile(ctrl.CheckpointLSN, fi.Size())
	return ctrl, filepath.Join(dir, walDir, name), off
}

// The segment holding the last checkpoint removed: Open reports corruption
// naming that segment, instead of a file-not-found error (package waldump
// tests the dump of such a log).
func TestMissingCheckpointSegmentIsCorruption(t *testing.T) {
	dir := filledAndClosed(t, 200)
	_, seg, _ := checkpointSegment(t, dir)
	if err := os.Remove(seg); err != nil {
		t.Fatal(err)
	}
	want := filepath.Base(seg)
	_, err := Open(dir, Options{})
	if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Open: %v; want ErrCorruption naming %s", err, want)
	}
}

// A segment cut short below the checkpoint record (only damage does that:
// segments are created whole) fails Open with an error that says the file
// is cut short, rather than naming an offset past the file's end as where
// the valid log ends.
func TestShortSegmentIsNamedAsCutShort(t *testing.T) {
	dir := filledAndClosed(t, 200)
	_, seg, off := checkpointSegment(t, dir)
	cut := off / 2
	if err := os.Truncate(seg, cut); err != nil {
		t.Fatal(err)
	}
	_, err := Open(dir, Options{})
	want := fmt.Sprintf("is %d bytes, cut short", cut)
	if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Open: %v; want ErrCorruption saying %q", err, want)
	}
}

// A CLOG segment zeroed or removed after a clean shutdown would read as
// "every xid in progress", which would make committed tuples invisible.
// Open finds it (every page below the checkpoint's next xid was written),
// names the CLOG file, and changes nothing on disk.
func TestOpenFindsLostCLOG(t *testing.T) {
	for _, damage := range []string{"zeroed", "removed"} {
		t.Run(damage, func(t *testing.T) {
			dir := t.TempDir()
			db := openTest(t, dir, Options{Autovacuum: noAutovacuum})
			for i := range 300 {
				mustPut(t, db, fmt.Sprintf("key-%05d", i), "v")
			}
			rep, err := db.Verify()
			if err != nil || !rep.OK() {
				t.Fatalf("healthy database: %v\n%s", err, rep)
			}
			db.Close()

			name, _ := clog.XidFile(db.procs.next() - 1)
			p := filepath.Join(dir, clogDir, name)
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if damage == "zeroed" {
				err = os.WriteFile(p, make([]byte, fi.Size()), 0o644)
			} else {
				err = os.Remove(p)
			}
			if err != nil {
				t.Fatal(err)
			}
			before := dirDigest(t, dir)
			_, err = Open(dir, Options{Autovacuum: noAutovacuum})
			if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), p) {
				t.Fatalf("Open after the CLOG segment was %s: %v; want ErrCorruption naming %s", damage, err, p)
			}
			t.Logf("%s: %v", damage, err)
			if after := dirDigest(t, dir); !maps.Equal(before, after) {
				t.Fatalf("Open changed the directory:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
}

// Verify while vacuum runs: vacuum rewrites chains across pages and the
// pool writes them back one page at a time, so Verify holds vacuum off and
// finds a healthy database healthy whatever the timing.
func TestVerifyDuringVacuum(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum, SharedBuffers: 16 * heap.PageSize})
	defer db.Close()
	for round := range 6 {
		for i := range 300 {
			mustPut(t, db, fmt.Sprintf("key-%03d", i), strings.Repeat("v", 100+round*40+i%7))
		}
		done := make(chan error, 1)
		go func() {
			_, err := db.Vacuum(context.Background())
			done <- err
		}()
		rep, err := db.Verify()
		if err != nil {
			t.Fatal(err)
		}
		if !rep.OK() {
			t.Fatalf("round %d, verify during vacuum:\n%s", round, rep)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// WAL zeroed from a point at or below the last checkpoint record to the
// end of what was written (no later segment file left) reads as a log
// that simply ends there; the control file's checkpoint LSN, at or past
// that end, is what shows the loss: Open fails with ErrCorruption naming
// the segment file and the offset where the valid WAL read from the redo
// point ends (the checkpoint record itself, for the checkpoint of a clean
// shutdown, whose redo point it is), and changes nothing on disk.
func TestWALZeroedBelowCheckpointFailsOpen(t *testing.T) {
	for _, c := range []struct {
		name string
		back int64 // bytes below the checkpoint record where the zeros begin
	}{
		{"from the checkpoint record", 0},
		{"from below it", 4096},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filledAndClosed(t, 200)
			_, seg, off := checkpointSegment(t, dir)
			segs := walSegments(t, dir)
			for _, s := range segs {
				if s > seg {
					if err := os.Remove(s); err != nil {
						t.Fatal(err)
					}
				}
			}
			fi, err := os.Stat(seg)
			if err != nil {
				t.Fatal(err)
			}
			from := off - c.back
			if from < 32 {
				t.Fatalf("the checkpoint record lies at offset %d of %s, too near its start", off, seg)
			}
			f, err := os.OpenFile(seg, os.O_WRONLY, 0)
			if err == nil {
				_, err = f.WriteAt(make([]byte, fi.Size()-from), from)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			before := dirDigest(t, dir)
			_, err = Open(dir, Options{})
			where := fmt.Sprintf("%s at offset %d", filepath.Base(seg), off)
			const want = "the last checkpoint record"
			if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), where) || !strings.Contains(err.Error(), want) {
				t.Fatalf("Open: %v; want ErrCorruption naming %s and saying %q", err, where, want)
			}
			if after := dirDigest(t, dir); !maps.Equal(after, before) {
				t.Fatalf("Open changed the directory:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
}

// WAL zeroed from just past the last checkpoint record to the end of what
// was written reads as a log that ends there, with nothing cut off to warn
// of. A heap page past the checkpoint's heap length that an eviction wrote
// since carries a page LSN past that end, which only lost WAL explains (a
// page is written only once the WAL up to its LSN is durable): Open fails
// with ErrCorruption naming the page, its LSN and where the valid WAL
// ends, not calling the page another database's.
func TestWALZeroedPastCheckpointFoundByPageLSN(t *testing.T) {
	m := vfs.NewMemFS()
	opts := Options{FS: m, SharedBuffers: 16 * 8192, CheckpointTimeout: -1, Autovacuum: noAutovacuum, WALSegmentSize: 1 << 20}
	db := openTest(t, "/db", opts)
	mustPut(t, db, "first", "v")
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	// Far more pages than the pool holds: evictions write them.
	for i := range 3000 {
		mustPut(t, db, fmt.Sprintf("k%05d", i), strings.Repeat("v", 200))
	}
	killed := m.Clone()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	ctrl, _, err := readControl(killed, "/db")
	if err != nil {
		t.Fatal(err)
	}
	r, err := wal.NewReader(killed, "/db/wal", ctrl.CheckpointLSN)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := r.Next()
	r.Close()
	if err != nil {
		t.Fatal(err)
	}
	end := rec.End // of the checkpoint record
	name, off := wal.SegmentFile(end, 1<<20)
	names, err := killed.ReadDir("/db/wal")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if n > name {
			if err := killed.Remove("/db/wal/" + n); err != nil {
				t.Fatal(err)
			}
		}
	}
	f, err := killed.Open("/db/wal/" + name)
	if err == nil {
		_, err = f.WriteAt(make([]byte, 1<<20-off), off)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	opts.FS = killed
	_, err = Open("/db", opts)
	want := fmt.Sprintf("past the end of the valid WAL (%s, /db/wal/%s at offset %d)", end, name, off)
	if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), "/db/heap/00000000 at offset") || !strings.Contains(err.Error(), want) ||
		!strings.Contains(err.Error(), "was lost after it was written") {
		t.Fatalf("Open: %v; want ErrCorruption naming a heap page and saying it lies %s", err, want)
	}
}
