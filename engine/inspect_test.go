package engine

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mvkv/internal/heap"
	"mvkv/vfs"
	"mvkv/wal"
)

func TestVerifyAndDumpWAL(t *testing.T) {
	dir := t.TempDir()
	loadTPCB(t, dir)
	db := openTest(t, dir, Options{})
	r := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 100; i++ {
		if _, _, err := tpcbTxn(context.Background(), db, r, 0, i, 1); err != nil {
			t.Fatal(err)
		}
	}
	mustPut(t, db, "big", strings.Repeat("x", 100000))
	rep, err := db.Verify()
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Tuples == 0 {
		t.Fatalf("verify of a healthy database:\n%s", rep)
	}
	// A wrong index entry is found.
	e := db.idx.get([]byte("a:0001"))
	good := e.head.Load()
	e.head.Store(heap.TID{Block: 0, Slot: 0}.Pack())
	rep, _ = db.Verify()
	if rep.OK() || !strings.Contains(rep.String(), "a:0001") {
		t.Fatalf("verify missed a wrong index entry:\n%s", rep)
	}
	e.head.Store(good)
	db.Close()

	var out bytes.Buffer
	if err := DumpWAL(nil, dir, 0, 0, &out); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"type: CHECKPOINT,", "records; the valid log ends at"} {
		if !strings.Contains(s, want) {
			t.Fatalf("waldump output lacks %q:\n%.2000s", want, s)
		}
	}

	// A start inside a record is reported as such; the record's own LSN
	// is a good start.
	wr, err := wal.NewReader(vfs.OS{}, filepath.Join(dir, walDir), 0)
	if err != nil {
		t.Fatal(err)
	}
	var rec wal.Record
	for range 10 {
		if rec, err = wr.Next(); err != nil {
			t.Fatal(err)
		}
	}
	wr.Close()
	err = DumpWAL(nil, dir, uint64(rec.LSN)+8, 0, io.Discard)
	if !errors.Is(err, wal.ErrCorrupt) || !strings.Contains(err.Error(), "no valid record starts at") {
		t.Fatalf("DumpWAL from inside a record: %v", err)
	}
	if err := DumpWAL(nil, dir, uint64(rec.LSN), 0, io.Discard); err != nil {
		t.Fatalf("DumpWAL from a record: %v", err)
	}

	// A start at the boundary after the last segment, past the end of
	// the log, is refused with where the log really ends, not reported
	// as the end itself.
	wr, err = wal.NewReader(vfs.OS{}, filepath.Join(dir, walDir), 0)
	if err != nil {
		t.Fatal(err)
	}
	for err == nil {
		_, err = wr.Next()
	}
	logEnd, size := wr.End(), wal.LSN(wr.SegmentSize())
	wr.Close()
	if logEnd%size == 0 {
		t.Fatalf("the log ends on a segment boundary (%s); the test needs it inside one", logEnd)
	}
	next := logEnd - logEnd%size + size
	for _, past := range []wal.LSN{logEnd + 8, next, next + 1, next + 0x20, next + size + 0x20} {
		err = DumpWAL(nil, dir, uint64(past), 0, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "past the end of the valid log, at "+logEnd.String()) {
			t.Fatalf("DumpWAL from %s, past the end at %s: %v", past, logEnd, err)
		}
	}
	// At the end itself: no records, and where the log ends, also with a
	// torn tail after it.
	atEnd := func(want string) {
		t.Helper()
		out.Reset()
		if err := DumpWAL(nil, dir, uint64(logEnd), 0, &out); err != nil {
			t.Fatalf("DumpWAL from the end %s: %v", logEnd, err)
		}
		if !strings.Contains(out.String(), want) {
			t.Fatalf("DumpWAL from the end %s:\n%s", logEnd, out.String())
		}
	}
	atEnd("0 records; the valid log ends at " + logEnd.String() + "\n")
	name, off := wal.SegmentFile(logEnd, int64(size))
	f, err := os.OpenFile(filepath.Join(dir, walDir, name), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte{0xA5}, 100), off); err != nil {
		t.Fatal(err)
	}
	f.Close()
	atEnd("0 records; the valid log ends at " + logEnd.String() + " followed by a torn tail of 100 bytes")

	// Without a control file the dump still runs, and says what it could
	// not check.
	if err := os.Remove(filepath.Join(dir, controlName)); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := DumpWAL(nil, dir, 0, 0, &out); err != nil {
		t.Fatalf("DumpWAL without a control file: %v", err)
	}
	if !strings.Contains(out.String(), "has no control file") {
		t.Errorf("waldump output says nothing of the missing control file:\n%s", out.String()[max(0, out.Len()-300):])
	}
}
