package waldump

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mvkv/engine"
	"mvkv/internal/rmgr"
	"mvkv/vfs"
	"mvkv/wal"
)

// filled returns a closed data directory holding n keys and one value
// large enough to span pages.
func filled(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	db, err := engine.Open(dir, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		err := db.Update(context.Background(), func(tx *engine.Txn) error {
			return tx.Put([]byte(fmt.Sprintf("key-%05d", i)), []byte(strings.Repeat("v", 200)))
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Update(context.Background(), func(tx *engine.Txn) error {
		return tx.Put([]byte("big"), []byte(strings.Repeat("x", 100000)))
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

func walPath(dir string) string { return filepath.Join(dir, rmgr.Engine.WALDir) }

func TestDump(t *testing.T) {
	dir := filled(t, 100)
	var out bytes.Buffer
	if err := Dump(nil, dir, 0, 0, &out); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"type: CHECKPOINT,", "type: HEAP_INSERT,", `key "key-00042" (9 bytes) value 200 bytes`, "records; the valid log ends at"} {
		if !strings.Contains(s, want) {
			t.Fatalf("waldump output lacks %q:\n%.2000s", want, s)
		}
	}

	// A start inside a record is reported as such; the record's own LSN
	// is a good start.
	wr, err := wal.NewReader(vfs.OS{}, walPath(dir), 0)
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
	if got := Describe(rec); !strings.HasPrefix(got, "lsn: "+rec.LSN.String()+", type: ") {
		t.Errorf("Describe: %s", got)
	}
	err = Dump(nil, dir, rec.LSN+8, 0, io.Discard)
	want := fmt.Sprintf("%s lies inside the record at %s; the next record starts at ", rec.LSN+8, rec.LSN)
	if !errors.Is(err, ErrNotRecordStart) || errors.Is(err, wal.ErrCorrupt) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Dump from inside a record: %v; want ErrNotRecordStart containing %q", err, want)
	}
	out.Reset()
	if err := Dump(nil, dir, rec.LSN, 0, &out); err != nil {
		t.Fatalf("Dump from a record: %v", err)
	}
	if first, _, _ := strings.Cut(out.String(), "\n"); first != Describe(rec) {
		t.Fatalf("Dump from %s starts with %q, want %q", rec.LSN, first, Describe(rec))
	}
	// --end stops before the record at end.
	out.Reset()
	if err := Dump(nil, dir, 0, rec.LSN, &out); err != nil {
		t.Fatalf("Dump to a record: %v", err)
	}
	if lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n"); len(lines) != 10 || lines[9] != "stopped at "+rec.LSN.String()+" (--end)" {
		t.Fatalf("Dump to the tenth record:\n%s", out.String())
	}
	// An end at or before the first record prints none, and says why.
	out.Reset()
	if err := Dump(nil, dir, 0, 16, &out); err != nil || !strings.HasPrefix(out.String(), "0 records: the first record, at ") {
		t.Fatalf("Dump to an end before the log: %v\n%s", err, out.String())
	}

	// A start at the boundary after the last segment, past the end of
	// the log, is refused with where the log really ends, not reported
	// as the end itself.
	wr, err = wal.NewReader(vfs.OS{}, walPath(dir), 0)
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
		err = Dump(nil, dir, past, 0, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "past the end of the valid log, at "+logEnd.String()) {
			t.Fatalf("Dump from %s, past the end at %s: %v", past, logEnd, err)
		}
	}
	// At the end itself: no records, and where the log ends, also with a
	// torn tail after it.
	atEnd := func(want string) {
		t.Helper()
		out.Reset()
		if err := Dump(nil, dir, logEnd, 0, &out); err != nil {
			t.Fatalf("Dump from the end %s: %v", logEnd, err)
		}
		if !strings.Contains(out.String(), want) {
			t.Fatalf("Dump from the end %s:\n%s", logEnd, out.String())
		}
	}
	atEnd("0 records; the valid log ends at " + logEnd.String() + "\n")
	name, off := wal.SegmentFile(logEnd, int64(size))
	f, err := os.OpenFile(filepath.Join(walPath(dir), name), os.O_WRONLY, 0)
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
	if err := os.Remove(filepath.Join(dir, "control")); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := Dump(nil, dir, 0, 0, &out); err != nil {
		t.Fatalf("Dump without a control file: %v", err)
	}
	if !strings.Contains(out.String(), "has no control file") {
		t.Errorf("waldump output says nothing of the missing control file:\n%s", out.String()[max(0, out.Len()-300):])
	}
}

// The segment holding the last checkpoint removed: the dump reports
// corruption naming that segment, instead of a dump of the other segments
// that exits cleanly.
func TestDumpMissingCheckpointSegment(t *testing.T) {
	dir := filled(t, 200)
	ctrl, found, err := rmgr.Engine.ReadControl(vfs.OS{}, dir)
	if err != nil || !found || ctrl.CheckpointLSN == 0 {
		t.Fatalf("control file: %+v found %v err %v", ctrl, found, err)
	}
	wr, err := wal.NewReader(vfs.OS{}, walPath(dir), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wr.Next(); err != nil {
		t.Fatal(err)
	}
	seg, _ := wal.SegmentFile(ctrl.CheckpointLSN, wr.SegmentSize())
	wr.Close()
	if err := os.Remove(filepath.Join(walPath(dir), seg)); err != nil {
		t.Fatal(err)
	}
	err = Dump(nil, dir, 0, 0, io.Discard)
	if !errors.Is(err, wal.ErrCorrupt) || !strings.Contains(err.Error(), seg) {
		t.Fatalf("Dump: %v; want wal.ErrCorrupt naming %s", err, seg)
	}
}

// The WAL of another database under this one's control file, whose
// checkpoint record lies at the very LSN the control file names (the same
// workload run twice): the dump prints the records, then reports
// corruption naming both system identifiers, where it ended cleanly as if
// the log were this database's.
func TestDumpForeignWAL(t *testing.T) {
	dir, other := filled(t, 50), filled(t, 50)
	ctrl, _, err := rmgr.Engine.ReadControl(vfs.OS{}, dir)
	if err != nil {
		t.Fatal(err)
	}
	octrl, _, err := rmgr.Engine.ReadControl(vfs.OS{}, other)
	if err != nil {
		t.Fatal(err)
	}
	if ctrl.CheckpointLSN != octrl.CheckpointLSN || ctrl.SystemID == octrl.SystemID {
		t.Fatalf("the two databases' checkpoints: %+v and %+v; want one LSN and two system identifiers", ctrl, octrl)
	}
	names, err := os.ReadDir(walPath(other))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range names {
		b, err := os.ReadFile(filepath.Join(walPath(other), e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(walPath(dir), e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	err = Dump(nil, dir, 0, 0, &out)
	if !errors.Is(err, wal.ErrCorrupt) || !strings.Contains(err.Error(), fmt.Sprint(ctrl.SystemID)) || !strings.Contains(err.Error(), fmt.Sprint(octrl.SystemID)) {
		t.Fatalf("Dump of another database's WAL: %v; want wal.ErrCorrupt naming both system identifiers", err)
	}
	if !strings.Contains(out.String(), "records; the valid log ends at") {
		t.Errorf("the records were not printed before the error:\n%s", out.String()[max(0, out.Len()-300):])
	}
	// The database's own WAL still dumps cleanly.
	if err := Dump(nil, other, 0, 0, io.Discard); err != nil {
		t.Fatalf("Dump of the other database itself: %v", err)
	}
}
