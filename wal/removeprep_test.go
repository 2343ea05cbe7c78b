package wal

import (
	"fmt"
	"path"
	"testing"

	"mvkv/vfs"
)

// stepFS wraps a vfs.FS and calls step before each operation of the
// preparation of one segment (the creation, write, sync and close of its
// temporary file, the rename, the directory fsync after it) and once
// after the last, naming the point.
type stepFS struct {
	vfs.FS
	tmp     string // the temporary file of the segment watched
	step    func(point string)
	renamed bool // the rename was seen; the next SyncDir is the preparation's
}

// afterPrep is the last point stepFS names: the preparation is over, its
// lock not yet released.
const afterPrep = "after the directory fsync"

type stepFile struct {
	vfs.File
	fs *stepFS
}

func (fs *stepFS) Create(name string) (vfs.File, error) {
	if name != fs.tmp {
		return fs.FS.Create(name)
	}
	fs.step("before create")
	f, err := fs.FS.Create(name)
	if err != nil {
		return nil, err
	}
	return stepFile{f, fs}, nil
}

func (f stepFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.step(fmt.Sprintf("before the write at %d", off))
	return f.File.WriteAt(p, off)
}

func (f stepFile) Sync() error {
	f.fs.step("before fsync")
	return f.File.Sync()
}

func (f stepFile) Close() error {
	f.fs.step("before close")
	return f.File.Close()
}

func (fs *stepFS) Rename(oldname, newname string) error {
	if oldname == fs.tmp {
		fs.step("before rename")
		fs.renamed = true
	}
	return fs.FS.Rename(oldname, newname)
}

func (fs *stepFS) SyncDir(name string) error {
	if !fs.renamed {
		return fs.FS.SyncDir(name)
	}
	fs.renamed = false
	fs.step("before the directory fsync")
	err := fs.FS.SyncDir(name)
	fs.step(afterPrep)
	return err
}

// TestRemoveSegmentsWaitsForPreparation: a checkpoint's removal of old
// segments, started at every point of the background preparation of the
// next segment, waits for the preparation to end before it removes
// anything, and then removes the segments below the open one and nothing
// else: the prepared segment stands whole and is the one the next switch
// uses.
func TestRemoveSegmentsWaitsForPreparation(t *testing.T) {
	const open = LSN(3 * testSeg) // the segment the log is in when the preparation runs
	next := open + testSeg
	// A first run learns the points; each later run starts the removal at
	// one of them.
	var points []string
	for run := -1; run == -1 || run < len(points); run++ {
		where := "learning the points"
		if run >= 0 {
			where = "removal started " + points[run]
		}
		m := vfs.NewMemFS()
		if err := m.MkdirAll("/wal"); err != nil {
			t.Fatal(err)
		}
		removed := make(chan error, 1)
		waiting := make(chan struct{}, 1)
		prepared := make(chan struct{})
		var w *Writer
		n := 0
		sfs := &stepFS{FS: m, tmp: path.Join("/wal", segmentName(next)) + tempSuffix}
		// step runs in the preparer's goroutine, which holds the
		// preparation lock throughout.
		sfs.step = func(point string) {
			if run == -1 {
				points = append(points, point)
			} else if n == run {
				go func() { removed <- w.RemoveSegmentsBefore(open) }()
				select {
				case <-waiting:
				case err := <-removed:
					removed <- err
					t.Errorf("%s: the removal ended (%v) while the segment was being prepared", where, err)
				}
				for _, s := range []LSN{testSeg, 2 * testSeg} {
					if _, err := m.Stat(path.Join("/wal", segmentName(s))); err != nil {
						t.Errorf("%s: %s is gone while the next segment is being prepared: %v", where, segmentName(s), err)
					}
				}
			}
			n++
			if point == afterPrep {
				close(prepared)
			}
		}
		w, err := OpenWriter(sfs, "/wal", 0, testOpts())
		if err != nil {
			t.Fatal(err)
		}
		w.prepWait = func() {
			select {
			case waiting <- struct{}{}:
			default:
			}
		}
		writeUntilSwitches(t, w, 2)
		if LSN(w.curSegA.Load()) != open {
			t.Fatalf("the log is in %s, want %s", segmentName(LSN(w.curSegA.Load())), segmentName(open))
		}
		<-prepared
		if run >= 0 {
			if err := <-removed; err != nil {
				t.Fatalf("%s: %v", where, err)
			}
		}
		segs, temps, err := listSegments(m, "/wal")
		if err != nil {
			t.Fatal(err)
		}
		want := []LSN{open, next}
		if run == -1 {
			want = []LSN{testSeg, 2 * testSeg, open, next}
		}
		if fmt.Sprint(segs) != fmt.Sprint(want) || len(temps) != 0 {
			t.Fatalf("%s: segments %v and temporary files %v, want segments %v and no temporary file", where, segs, temps, want)
		}
		if !segmentReady(m, "/wal", next, testSeg) {
			t.Fatalf("%s: the prepared segment %s is not whole", where, segmentName(next))
		}
		// The switch uses the prepared segment.
		before := w.Stats()
		writeUntilSwitches(t, w, 3)
		if d := w.Stats().Sub(before); d.SegmentsPrepped != 1 || d.SegmentsInline != 0 {
			t.Fatalf("%s: the switch into %s found %d segments prepared and created %d inline, want the prepared one", where, segmentName(next), d.SegmentsPrepped, d.SegmentsInline)
		}
		end := w.InsertLSN()
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		first := LSN(testSeg)
		if run >= 0 {
			first = open
		}
		recs, rend, _ := readAll(t, m, "/wal", 0)
		if from := FirstLSN(testSeg) + first - testSeg; rend != end || len(recs) == 0 || recs[0].LSN != from {
			t.Fatalf("%s: the log reads %d records to %s, want to %s from %s", where, len(recs), rend, end, from)
		}
	}
	if len(points) < 6 {
		t.Fatalf("%d points in a segment's preparation (%v), want at least 6", len(points), points)
	}
}

// TestConcurrentRemoveSegmentsBefore: two removals that listed the same
// old segments before either removed one both succeed; the second finds
// them gone, which is what it was asked for.
func TestConcurrentRemoveSegmentsBefore(t *testing.T) {
	m := vfs.NewMemFS()
	if err := m.MkdirAll("/wal"); err != nil {
		t.Fatal(err)
	}
	w, err := OpenWriter(m, "/wal", 0, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	writeUntilSwitches(t, w, 2)
	open := LSN(w.curSegA.Load())
	waiting := make(chan struct{}, 2)
	w.prepWait = func() { waiting <- struct{}{} }
	// Held here, so that both list the segments and wait before either
	// removes one.
	w.prepMu.Lock()
	done := make(chan error, 2)
	for range 2 {
		go func() { done <- w.RemoveSegmentsBefore(open) }()
	}
	<-waiting
	<-waiting
	w.prepMu.Unlock()
	for range 2 {
		if err := <-done; err != nil {
			t.Errorf("a removal: %v", err)
		}
	}
	segs, _, err := listSegments(m, "/wal")
	if err != nil {
		t.Fatal(err)
	}
	if len(segs) == 0 || segs[0] != open {
		t.Fatalf("segments %v after the removals, want the open one %s first", segs, segmentName(open))
	}
}
