package wal

import (
	"errors"
	"io"
	"testing"

	"mvkv/vfs"
)

// TestBackupCopiesUpToItsEnd: Backup copies the segments from the start's
// to the end's, the end's up to the end only (zeros after it), and nothing
// of a segment the end does not reach into, even when the end is where a
// segment ends and the next segment does not exist yet. A Reader of the
// copy reads every record before the end and none after it.
func TestBackupCopiesUpToItsEnd(t *testing.T) {
	m := vfs.NewMemFS()
	w, err := OpenWriter(m, "/wal", 0, Options{SegmentSize: MinSegmentSize, WALWriterDelay: 1 << 40, Flusher: FlusherSerial})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var ends []LSN
	for i := range 60 {
		_, end, err := w.Insert(MinUserRecordType, uint64(i)+1, make([]byte, 40<<10))
		if err == nil {
			err = w.Flush(end)
		}
		if err != nil {
			t.Fatal(err)
		}
		ends = append(ends, end)
	}
	first := FirstLSN(MinSegmentSize)
	to := ends[40]
	if to < 2*LSN(MinSegmentSize) {
		t.Fatalf("record 40 ends at %v, in the first segment: the test wants two", to)
	}
	copied, err := w.Backup(m, "/copy", first, to)
	if err != nil {
		t.Fatal(err)
	}
	names, err := m.ReadDir("/copy")
	if err != nil {
		t.Fatal(err)
	}
	want := int((to-1)/LSN(MinSegmentSize)) - int(first/LSN(MinSegmentSize)) + 1
	if len(names) != want || copied != want {
		t.Fatalf("the copy holds %v (Backup says %d), want %d segments", names, copied, want)
	}
	r, err := NewReader(m, "/copy", first)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("record %d of the copy: %v", n, err)
		}
		if rec.Type == MinUserRecordType {
			n++
		}
	}
	if n != 41 {
		t.Fatalf("the copy reads %d records, want the 41 ending at or before %v", n, to)
	}

	// An end exactly where a segment ends: the next segment is not read.
	boundary := 2 * LSN(MinSegmentSize)
	if err := m.Rename("/wal/"+segmentName(boundary), "/wal/moved"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Backup(m, "/copy2", first, boundary); err != nil {
		t.Fatalf("a backup ending at a segment's end: %v", err)
	}
}
