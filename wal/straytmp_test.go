package wal

import (
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"path"
	"strings"
	"sync"
	"testing"

	"mvkv/vfs"
)

// logBuf is a log destination that the Writer's goroutines and the test
// may use at once.
type logBuf struct {
	mu sync.Mutex
	b  strings.Builder // guarded by mu
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// putFile writes b as the whole file name in fsys.
func putFile(t *testing.T, fsys vfs.FS, name string, b []byte) {
	t.Helper()
	f, err := fsys.Create(name)
	if err == nil {
		_, err = f.WriteAt(b, 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		t.Fatal(err)
	}
}

// tmpOfSize returns the bytes of a temporary segment file for start of
// length n, whose header (when n holds it) gives segment size size.
func tmpOfSize(start LSN, size int64, tag uint16, n int) []byte {
	b := make([]byte, max(n, segHeaderSize))
	encodeSegHeader(b, segHeader{size: size, start: start, tag: tag})
	return b[:n]
}

// closedLog makes a log in /wal of m with records in its first segment and
// the second prepared, closes it, and returns its end and identifier.
func closedLog(t *testing.T, m *vfs.MemFS) (LSN, uint16) {
	t.Helper()
	if err := m.MkdirAll("/wal"); err != nil {
		t.Fatal(err)
	}
	w, err := OpenWriter(m, "/wal", 0, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, _, err := w.Insert(16, 1, make([]byte, 1000)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.FlushAll(); err != nil {
		t.Fatal(err)
	}
	end, tag := w.InsertLSN(), w.tag
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return end, tag
}

// TestOpenRemovesStrayTemporariesAndSaysSo: temporary segment files a
// crash left during a preparation, cut short or written with another
// segment size, are no part of the log: the log reads to its end past
// them, OpenWriter removes each with a log line naming it and its size,
// and the segment the log then switches into has the segment size.
func TestOpenRemovesStrayTemporariesAndSaysSo(t *testing.T) {
	second := LSN(2 * testSeg)
	for _, c := range []struct {
		what  string
		size  int64 // in the header
		n     int   // bytes in the file
		bytes string
	}{
		{"cut short", testSeg, 20, "bytes=20 "},
		{"of another segment size", 2 * testSeg, 2*testSeg + 4096, "bytes=2101248 "},
	} {
		t.Run(c.what, func(t *testing.T) {
			m := vfs.NewMemFS()
			end, tag := closedLog(t, m)
			// The prepared second segment gone, as if the crash came
			// during its preparation, which left the temporary file.
			if err := m.Remove("/wal/" + segmentName(second)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Fatal(err)
			}
			tmp := "/wal/" + segmentName(second) + tempSuffix
			putFile(t, m, tmp, tmpOfSize(second, c.size, tag, c.n))

			recs, rend, _ := readAll(t, m, "/wal", 0)
			if rend != end || len(recs) != 3 {
				t.Fatalf("the log reads %d records to %s, want 3 to %s", len(recs), rend, end)
			}
			var logs logBuf
			opts := testOpts()
			opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			w, err := OpenWriter(m, "/wal", end, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			line := ""
			for l := range strings.Lines(logs.String()) {
				if strings.Contains(l, tmp) {
					line = l
				}
			}
			if !strings.Contains(line, "removed a leftover temporary segment file") || !strings.Contains(line, c.bytes) {
				t.Errorf("no log line names the removal of %s (%s): %q", tmp, c.bytes, logs.String())
			}
			writeUntilSwitches(t, w, 1)
			if n, err := m.Stat("/wal/" + segmentName(second)); err != nil || n != testSeg {
				t.Errorf("%s: %d bytes (%v), want the segment size %d", segmentName(second), n, err, testSeg)
			}
			if _, err := m.Stat(tmp); err == nil {
				t.Errorf("%s is there after the switch into its segment", tmp)
			}
		})
	}
}

// TestLaterTemporaryOfAnotherSizeIsNoEvidence: a temporary file past the
// segment after the one the log ends in shows that the log went on, since
// this log's preparation of it began only once the log had moved on; but
// one whose header gives another segment size was not made by this log,
// and the log ends where it ends. One whose header is cut short is still
// evidence: its name is all a crash may leave.
func TestLaterTemporaryOfAnotherSizeIsNoEvidence(t *testing.T) {
	m := vfs.NewMemFS()
	end, tag := closedLog(t, m)
	later := LSN(4 * testSeg)
	tmp := "/wal/" + segmentName(later) + tempSuffix
	putFile(t, m, tmp, tmpOfSize(later, 2*testSeg, tag, 8192))
	if _, rend, _ := readAll(t, m, "/wal", 0); rend != end {
		t.Fatalf("the log reads to %s, want %s", rend, end)
	}

	putFile(t, m, tmp, tmpOfSize(later, testSeg, tag, 20))
	r, err := NewReader(m, "/wal", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for err == nil {
		_, err = r.Next()
	}
	if errors.Is(err, io.EOF) || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "is being prepared") {
		t.Fatalf("with %s cut short: %v; want ErrCorrupt saying the segment is being prepared", tmp, err)
	}
}

// noTruncFS is a vfs.FS whose Create keeps what a file of that name held,
// as a file system seam that forgot O_TRUNC would.
type noTruncFS struct{ *vfs.MemFS }

func (fs noTruncFS) Create(name string) (vfs.File, error) {
	if _, err := fs.MemFS.Stat(name); err == nil {
		return fs.MemFS.Open(name)
	}
	return fs.MemFS.Create(name)
}

// TestPreparationNeverRenamesAFileOfAnotherSize: a segment's temporary
// file that is not the segment size once written (a leftover longer file
// the file system's Create did not truncate) fails the preparation, is
// removed, and never gets the segment's name.
func TestPreparationNeverRenamesAFileOfAnotherSize(t *testing.T) {
	m := vfs.NewMemFS()
	if err := m.MkdirAll("/wal"); err != nil {
		t.Fatal(err)
	}
	start := LSN(testSeg)
	tmp := "/wal/" + segmentName(start) + tempSuffix
	putFile(t, m, tmp, tmpOfSize(start, 2*testSeg, 7, 2*testSeg))
	err := createSegment(noTruncFS{m}, "/wal", start, testSeg, 0, 7, nil)
	if err == nil || !strings.Contains(err.Error(), "not the 1048576-byte segment size") {
		t.Fatalf("createSegment over a longer leftover file: %v; want an error naming its size", err)
	}
	for _, name := range []string{tmp, "/wal/" + segmentName(start)} {
		if _, err := m.Stat(name); err == nil {
			t.Errorf("%s exists after the failed preparation", path.Base(name))
		}
	}
}

// TestOpenWriterRefusesALongerSegment: the segment the log ends in, found
// longer than the segment size, is not one the log goes on in: OpenWriter
// fails with ErrCorrupt naming it and its size, and changes nothing. One
// found shorter is filled to the segment size.
func TestOpenWriterRefusesALongerSegment(t *testing.T) {
	m := vfs.NewMemFS()
	end, _ := closedLog(t, m)
	name := "/wal/" + segmentName(testSeg)
	f, err := m.Open(name)
	if err == nil {
		_, err = f.WriteAt([]byte("appended"), testSeg+100)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	_, err = OpenWriter(m, "/wal", end, testOpts())
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), name+" is 1048684 bytes, longer than the 1048576-byte segment size") {
		t.Fatalf("OpenWriter on a segment with bytes appended: %v; want ErrCorrupt naming it and its size", err)
	}
	if n, err := m.Stat(name); err != nil || n != testSeg+108 {
		t.Fatalf("%s is %d bytes (%v) after the refusal, want it unchanged", name, n, err)
	}

	f, err = m.Open(name)
	if err == nil {
		err = f.Truncate(testSeg / 2)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	w, err := OpenWriter(m, "/wal", end, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if n, err := m.Stat(name); err != nil || n != testSeg {
		t.Fatalf("%s cut short is %d bytes (%v) after OpenWriter, want the segment size", name, n, err)
	}
}
