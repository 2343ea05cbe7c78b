package wal

import (
	"bytes"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"mvkv/vfs"
)

const testSeg = 1 << 20

func testOpts() Options {
	// Serial: these tests were written against it (some watch the
	// injected clock, which the pipelined flusher reads too); the tests of
	// the pipelined flusher set it themselves.
	return Options{SegmentSize: testSeg, WALWriterDelay: time.Hour, Flusher: FlusherSerial}
}

type written struct {
	lsn, end LSN
	typ      RecordType
	xid      uint64
	data     []byte
}

// readAll reads the whole log and returns its records, End and dropped bytes.
func readAll(t testing.TB, fsys vfs.FS, dir string, start LSN) ([]Record, LSN, int64) {
	t.Helper()
	r, err := NewReader(fsys, dir, start)
	if err != nil {
		t.Fatalf("NewReader: %v", err)
	}
	defer r.Close()
	var recs []Record
	for {
		rec, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("Next after %d records: %v", len(recs), err)
		}
		recs = append(recs, rec)
	}
	return recs, r.End(), r.DroppedBytes()
}

func checkRecords(t testing.TB, got []Record, want []written) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("read %d records, want %d", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.LSN != w.lsn || g.End != w.end || g.Type != w.typ || g.XID != w.xid || !bytes.Equal(g.Data, w.data) {
			t.Fatalf("record %d: got {%s %s type %d xid %d len %d}, want {%s %s type %d xid %d len %d}",
				i, g.LSN, g.End, g.Type, g.XID, len(g.Data), w.lsn, w.end, w.typ, w.xid, len(w.data))
		}
	}
}

func insertRandom(t testing.TB, w *Writer, rng *rand.Rand, n int, maxLen int) []written {
	t.Helper()
	var out []written
	for i := 0; i < n; i++ {
		l := rng.IntN(maxLen + 1)
		if rng.IntN(50) == 0 {
			l = rng.IntN(MaxPayload(testSeg) + 1)
		}
		data := make([]byte, l)
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		typ := RecordType(16 + rng.IntN(240))
		xid := rng.Uint64()
		start, end, err := w.Insert(typ, xid, data)
		if err != nil {
			t.Fatalf("Insert: %v", err)
		}
		out = append(out, written{start, end, typ, xid, data})
	}
	return out
}

func TestRoundTripAcrossSegments(t *testing.T) {
	fsys, dir := vfs.OS{}, t.TempDir()
	w, err := OpenWriter(fsys, dir, 0, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var want []written
	for round := 0; round < 20; round++ {
		want = append(want, insertRandom(t, w, rng, 100, 8000)...)
		if err := w.Flush(want[len(want)-1].end); err != nil {
			t.Fatal(err)
		}
	}
	if w.FlushedLSN() < want[len(want)-1].end {
		t.Fatalf("flushed %s below last end %s", w.FlushedLSN(), want[len(want)-1].end)
	}
	ins := w.InsertLSN()
	st := w.Stats()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if st.SegmentSwitches < 3 {
		t.Fatalf("only %d segment switches; the test wants several segments", st.SegmentSwitches)
	}
	if want[0].lsn != FirstLSN(testSeg) {
		t.Fatalf("first record at %s, want %s", want[0].lsn, FirstLSN(testSeg))
	}
	got, end, dropped := readAll(t, fsys, dir, 0)
	checkRecords(t, got, want)
	if end != ins || dropped != 0 {
		t.Fatalf("End %s dropped %d, want %s and 0", end, dropped, ins)
	}
	// Reading from the middle starts at that record.
	mid := len(want) / 2
	got, _, _ = readAll(t, fsys, dir, want[mid].lsn)
	checkRecords(t, got, want[mid:])
}

// writeUntilSwitches inserts records of 200,000 bytes, each flushed, until
// w has moved on to a new segment n times since it was opened.
func writeUntilSwitches(t testing.TB, w *Writer, n uint64) {
	t.Helper()
	payload := make([]byte, 200_000)
	for w.Stats().SegmentSwitches < n {
		if _, _, err := w.Insert(16, 1, payload); err != nil {
			t.Fatal(err)
		}
		if err := w.FlushAll(); err != nil {
			t.Fatal(err)
		}
	}
}
