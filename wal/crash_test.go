package wal

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"runtime"
	"sync"
	"syscall"
	"testing"

	"mvkv/vfs"
)

// TestSegmentSwitchCrashPoints takes a crash copy after every file
// operation of a Writer that crosses two segment boundaries (the
// background preparation of the next segment, inline creation when it is
// late, the switches, the syncs), in every crash mode, and reads each
// copy: the log must read to its end without ErrCorrupt, with every
// record that was acknowledged before the crash point. So no crash leaves
// what the Reader refuses as damage: in particular a segment file under
// its final name whose header does not check out, or one of another size.
// Then, in the copies that lose every unsynced change, the log is opened
// for appending where it ends, written on and read again, as recovery
// does. Whether a given preparation runs before or after a switch depends
// on scheduling; the checks hold at every point either way.
func TestSegmentSwitchCrashPoints(t *testing.T) {
	m := vfs.NewMemFS()
	if err := m.MkdirAll("/wal"); err != nil {
		t.Fatal(err)
	}
	m.SyncDir("/")

	type point struct {
		op    string
		fs    *vfs.MemFS
		mode  vfs.CrashMode
		acked int // records acknowledged before the crash point
	}
	var (
		mu     sync.Mutex
		acked  []LSN // guarded by mu
		points []point
	)
	modes := []vfs.CrashMode{vfs.DropUnsynced, vfs.TearLast, vfs.KeepRandom}
	seq := uint64(0)
	m.SetOpHook(func(p vfs.CrashPoint) {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		for _, mode := range modes {
			seq++
			points = append(points, point{p.Op.String(), p.CrashCopy(mode, rand.New(rand.NewPCG(seq, 11))), mode, n})
		}
	})
	w, err := OpenWriter(m, "/wal", 0, Options{SegmentSize: MinSegmentSize, WALWriterDelay: 1 << 40, Flusher: FlusherSerial})
	if err != nil {
		t.Fatal(err)
	}
	// 40 KiB records, each flushed: about 25 to a segment, across two
	// switches.
	for i := range 62 {
		data := make([]byte, 40<<10+8*(i%5))
		for j := range data {
			data[j] = byte(i+j)%250 + 1
		}
		start, end, err := w.Insert(MinUserRecordType, uint64(i)+1, data)
		if err == nil {
			err = w.Flush(end)
		}
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		acked = append(acked, start)
		mu.Unlock()
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	m.SetOpHook(nil)
	if w.InsertLSN() < LSN(3*MinSegmentSize) {
		t.Fatalf("the log ends at %s, before its third segment", w.InsertLSN())
	}

	for i, p := range points {
		where := fmt.Sprintf("crash point %d (after %s, %s)", i, p.op, p.mode)
		got, end := readCrashCopy(t, p.fs, where)
		for _, lsn := range acked[:p.acked] {
			if !got[lsn] {
				t.Fatalf("%s: the acknowledged record at %s is lost (%d read, %d acknowledged)", where, lsn, len(got), p.acked)
			}
		}
		if p.mode != vfs.DropUnsynced {
			continue
		}
		// Recovery's way on: append where the log ends, then read again.
		w, err := OpenWriter(p.fs, "/wal", end, Options{SegmentSize: MinSegmentSize, WALWriterDelay: 1 << 40, Flusher: FlusherSerial})
		if err != nil {
			t.Fatalf("%s: OpenWriter at %s: %v", where, end, err)
		}
		start, e, err := w.Insert(MinUserRecordType, 1000, make([]byte, 48<<10))
		if err == nil {
			err = w.Flush(e)
		}
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatalf("%s: writing on at %s: %v", where, end, err)
		}
		if again, _ := readCrashCopy(t, p.fs.CrashCopy(vfs.DropUnsynced, nil), where+", written on"); !again[start] || len(again) != len(got)+1 {
			t.Fatalf("%s, written on: %d records read, want the %d before and the new one at %s", where, len(again), len(got), start)
		}
	}
	t.Logf("%d crash copies read, %d records acknowledged", len(points), len(acked))
}

// readCrashCopy reads the log in fsys's /wal to its end and returns the
// LSNs read and the end; any error but io.EOF fails the test.
func readCrashCopy(t *testing.T, fsys vfs.FS, where string) (map[LSN]bool, LSN) {
	t.Helper()
	r, err := NewReader(fsys, "/wal", 0)
	if err != nil {
		t.Fatalf("%s: NewReader: %v", where, err)
	}
	defer r.Close()
	got := map[LSN]bool{}
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			return got, r.End()
		}
		if err != nil {
			t.Fatalf("%s: reading the log: %v", where, err)
		}
		got[rec.LSN] = true
	}
}

// TestCrashLeavesSwitchBeforeMissingSegment pins why a newest segment
// missing, with no later file of the log, reads as the end of the log and
// not as damage: a crash leaves that state. When the next segment was not
// prepared ahead (here its background preparation fails once), the
// flusher writes and fdatasyncs the old segment up to its switch record
// and only then creates the next one; a power loss before the new name is
// durable leaves the log ending at the switch with the next segment
// absent, exactly as if it had been removed. Nothing acknowledged is lost
// there: no record in the new segment was flushed.
func TestCrashLeavesSwitchBeforeMissingSegment(t *testing.T) {
	m := vfs.NewMemFS()
	if err := m.MkdirAll("/wal"); err != nil {
		t.Fatal(err)
	}
	m.SyncDir("/")
	ffs := vfs.NewFaultFS(m)
	second := LSN(2 * MinSegmentSize)
	tmp := "/wal/" + segmentName(second) + tempSuffix
	// The preparation of the second segment, asked for at OpenWriter,
	// fails; the switch then creates it inline.
	flt := ffs.Inject(vfs.Rule{Kinds: vfs.Ops(vfs.OpCreate), Base: segmentName(second) + tempSuffix, Nth: 1})
	var (
		mu      sync.Mutex
		acked   []LSN      // guarded by mu
		crashed *vfs.MemFS // guarded by mu
	)
	m.SetOpHook(func(p vfs.CrashPoint) {
		if p.Op.Kind == vfs.OpCreate && p.Op.Path == tmp {
			mu.Lock()
			if crashed == nil {
				crashed = p.CrashCopy(vfs.DropUnsynced, nil)
			}
			mu.Unlock()
		}
	})
	defer m.SetOpHook(nil)
	w, err := OpenWriter(ffs, "/wal", 0, Options{SegmentSize: MinSegmentSize, WALWriterDelay: 1 << 40, Flusher: FlusherSerial})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// Wait for the failed attempt (a condition, not a duration), so that
	// the inline creation is the second one.
	for flt.Fired() == 0 {
		runtime.Gosched()
	}
	for i := 0; w.InsertLSN() < second+LSN(64<<10); i++ {
		_, end, err := w.Insert(MinUserRecordType, uint64(i)+1, make([]byte, 40<<10))
		if err == nil {
			err = w.Flush(end)
		}
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		acked = append(acked, end)
		mu.Unlock()
	}
	mu.Lock()
	defer mu.Unlock()
	if crashed == nil {
		t.Fatal("the second segment was never created inline")
	}
	if _, err := crashed.Stat("/wal/" + segmentName(second)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the crash copy holds %s (%v); want it missing", segmentName(second), err)
	}
	got, end := readCrashCopy(t, crashed, "crash before the second segment's creation")
	if end != second {
		t.Fatalf("the log in the crash copy ends at %s, want %s, after the switch record", end, second)
	}
	n := 0
	for _, e := range acked {
		if e <= second {
			n++
		}
	}
	if len(got) != n {
		t.Fatalf("%d records read from the crash copy, want the %d in the first segment", len(got), n)
	}
}

// TestNextHeaderReadErrorIsReturned: a read of the next segment's header
// that fails is an I/O error for the caller, not a damaged header and not
// the end of the log (which OpenWriter would then cut the log at).
func TestNextHeaderReadErrorIsReturned(t *testing.T) {
	m := vfs.NewMemFS()
	if err := m.MkdirAll("/wal"); err != nil {
		t.Fatal(err)
	}
	m.SyncDir("/")
	w, err := OpenWriter(m, "/wal", 0, Options{SegmentSize: MinSegmentSize, WALWriterDelay: 1 << 40, Flusher: FlusherSerial})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; w.InsertLSN() < LSN(2*MinSegmentSize+64<<10); i++ {
		if _, _, err := w.Insert(MinUserRecordType, uint64(i)+1, make([]byte, 40<<10)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	ffs := vfs.NewFaultFS(m)
	ffs.Inject(vfs.Rule{Kinds: vfs.Ops(vfs.OpRead), Base: segmentName(2 * MinSegmentSize), Nth: 1})
	n, err := countRecords(t, ffs, "/wal", nil)
	if err == nil || errors.Is(err, ErrCorrupt) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("after %d records: %v; want the injected EIO", n, err)
	}
}
