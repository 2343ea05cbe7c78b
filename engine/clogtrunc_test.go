package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"mvkv/clog"
	"mvkv/vfs"
	"mvkv/wal"
)

// clogSegXids is how many xids one CLOG segment file covers.
const clogSegXids = uint64(clog.PagesPerSegment * clog.XidsPerPage)

// oldCLOGSegments prepares a database whose CLOG has segments 0..n-1 on
// disk, as if long-finished transactions whose tuples are all frozen had
// filled them, and whose next xids are in segment n. It returns the first
// of those: the oldest any tuple of the test carries.
func oldCLOGSegments(t *testing.T, db *DB, n uint64) uint64 {
	t.Helper()
	for s := range n {
		if err := db.clog.SetStatus(s*clogSegXids+100, clog.StatusCommitted, 0); err != nil {
			t.Fatal(err)
		}
	}
	db.procs.setNext(n*clogSegXids + 10)
	oldest := db.procs.next()
	// One commit in segment n makes its page the CLOG's latest, which a
	// truncation never removes.
	mustPut(t, db, "first", "x")
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	return oldest
}

// clogSegments lists the CLOG segment numbers on disk under dir.
func clogSegments(t *testing.T, fsys vfs.FS, dir string) []string {
	t.Helper()
	names, err := fsys.ReadDir(filepath.Join(dir, clogDir))
	if err != nil {
		t.Fatal(err)
	}
	var segs []string
	for _, n := range names {
		if len(n) == 12 {
			segs = append(segs, n)
		}
	}
	return segs
}

func memDB(t *testing.T) *vfs.MemFS {
	t.Helper()
	m := vfs.NewMemFS()
	if err := m.MkdirAll("/db"); err != nil {
		t.Fatal(err)
	}
	if err := m.SyncDir("/"); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestTruncateCLOG truncates the CLOG while committers run, then checks
// the live database and crash copies of it: no committed key is lost, the
// segments below the cut are gone, the point survives restart, and lookups
// below it fail with clog.ErrTruncated.
func TestTruncateCLOG(t *testing.T) {
	m := memDB(t)
	db := openTest(t, "/db", Options{FS: m, CheckpointTimeout: -1})
	oldest := oldCLOGSegments(t, db, 4)
	if got := clogSegments(t, m, "/db"); len(got) != 5 {
		t.Fatalf("segments before truncation: %v", got)
	}

	const workers, perWorker = 8, 40
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				k, v := fmt.Sprintf("w%d-%03d", w, i), fmt.Sprintf("v%d", i)
				if err := db.Update(context.Background(), func(tx *Txn) error { return tx.Put([]byte(k), []byte(v)) }); err != nil {
					t.Errorf("put %s: %v", k, err)
					return
				}
			}
		})
	}
	wg.Go(func() {
		if err := db.truncateCLOG(oldest); err != nil {
			t.Errorf("truncateCLOG: %v", err)
		}
		if err := db.Checkpoint(); err != nil {
			t.Errorf("Checkpoint: %v", err)
		}
	})
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	check := func(db *DB, fsys vfs.FS, when string) {
		t.Helper()
		for w := range workers {
			for i := range perWorker {
				k := fmt.Sprintf("w%d-%03d", w, i)
				if v, ok := get(t, db, k); !ok || v != fmt.Sprintf("v%d", i) {
					t.Fatalf("%s: %s = %q, %v", when, k, v, ok)
				}
			}
		}
		if got := clogSegments(t, fsys, "/db"); len(got) == 0 || got[0] != "000000000004" {
			t.Fatalf("%s: CLOG segments %v, want 000000000004 first", when, got)
		}
		if got := db.clog.OldestXid(); got != oldest {
			t.Fatalf("%s: CLOG oldest xid %d, want %d", when, got, oldest)
		}
		if _, err := db.clog.Status(oldest - 1); !errors.Is(err, clog.ErrTruncated) {
			t.Fatalf("%s: status below the truncation point: %v, want ErrTruncated", when, err)
		}
		rep, err := db.Verify()
		if err != nil {
			t.Fatal(err)
		}
		if !rep.OK() {
			t.Fatalf("%s: verify: %v", when, rep.Problems)
		}
	}
	check(db, m, "live")
	if st := db.Stats(); st.CLOG.Truncations != 1 || st.CLOG.SegmentsRemoved != 4 {
		t.Errorf("stats: %d truncations, %d segments removed; want 1, 4", st.CLOG.Truncations, st.CLOG.SegmentsRemoved)
	}
	if want, dump := fmt.Sprintf("CLOG_TRUNCATE, tx: 0, len: 8, desc: oldest xid %d", oldest), walDescriptions(t, m, "/db"); !strings.Contains(dump, want) {
		t.Errorf("waldump has no %q:\n%s", want, dump)
	}

	copies := map[string]*vfs.MemFS{
		"DropUnsynced": m.CrashCopy(vfs.DropUnsynced, nil),
		"TearLast":     m.CrashCopy(vfs.TearLast, rand.New(rand.NewPCG(3, 4))),
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, "/db", Options{FS: m})
	check(db, m, "reopened")
	db.Close()
	for name, c := range copies {
		db := openTest(t, "/db", Options{FS: c})
		check(db, c, "after crash "+name)
		db.Close()
	}
}

// TestTruncateCLOGCrashPoints takes a crash copy after every file operation
// of truncateCLOG (WAL record and flush, the oldest_xid file, each removal,
// the directory fsyncs) and recovers each: every committed key is there,
// and the truncation either never happened or is complete, with its point,
// from the first copy where its WAL record is durable on.
func TestTruncateCLOGCrashPoints(t *testing.T) {
	m := memDB(t)
	db := openTest(t, "/db", Options{FS: m, CheckpointTimeout: -1})
	oldest := oldCLOGSegments(t, db, 3)
	for i := range 20 {
		mustPut(t, db, fmt.Sprintf("k%02d", i), fmt.Sprintf("v%d", i))
	}
	var (
		copies []*vfs.MemFS
		ops    []vfs.Op
	)
	m.SetOpHook(func(p vfs.CrashPoint) {
		copies = append(copies, p.CrashCopy(vfs.DropUnsynced, nil))
		ops = append(ops, p.Op)
	})
	if err := db.truncateCLOG(oldest); err != nil {
		t.Fatal(err)
	}
	m.SetOpHook(nil)
	db.Close()
	if len(copies) < 5 {
		t.Fatalf("only %d crash points", len(copies))
	}
	// The record is durable once the WAL's first sync after it completes.
	logged := false
	done := false
	for i, c := range copies {
		logged = logged || ((ops[i].Kind == vfs.OpSync || ops[i].Kind == vfs.OpDatasync) && strings.Contains(ops[i].Path, "/"+walDir+"/") && !strings.HasSuffix(ops[i].Path, ".tmp"))
		db := openTest(t, "/db", Options{FS: c})
		for k := range 20 {
			key := fmt.Sprintf("k%02d", k)
			if v, ok := get(t, db, key); !ok || v != fmt.Sprintf("v%d", k) {
				t.Fatalf("copy %d: %s = %q, %v", i, key, v, ok)
			}
		}
		segs := clogSegments(t, c, "/db")
		switch got := db.clog.OldestXid(); {
		case got == oldest:
			done = true
			if len(segs) == 0 || segs[0] != "000000000003" {
				t.Fatalf("copy %d: truncated to %d but segments %v remain", i, got, segs)
			}
		case done || logged:
			t.Fatalf("copy %d (after %v): oldest xid %d, but the truncation's record is durable", i, ops[i], got)
		case got != 0:
			t.Fatalf("copy %d: oldest xid %d, want 0 or %d", i, got, oldest)
		}
		if err := db.Close(); err != nil {
			t.Fatalf("copy %d: Close: %v", i, err)
		}
	}
	if !done {
		t.Fatal("no crash copy, not even the last, has the truncation")
	}
}

func TestCLOGTruncateRecord(t *testing.T) {
	b := encodeCLOGTruncate(123456789)
	if x, err := decodeCLOGTruncate(b); err != nil || x != 123456789 {
		t.Fatalf("round trip: %d, %v", x, err)
	}
	for _, bad := range [][]byte{nil, b[:7], append(b, 0)} {
		if _, err := decodeCLOGTruncate(bad); !errors.Is(err, errBadRecord) {
			t.Errorf("%d-byte payload: %v, want errBadRecord", len(bad), err)
		}
	}
	desc := describeRecord(wal.Record{Type: recCLOGTruncate, Data: b[:3]})
	if !strings.Contains(desc, "CLOG_TRUNCATE") || !strings.Contains(desc, "malformed") {
		t.Errorf("describeRecord of a short payload: %s", desc)
	}
}

func FuzzDecodeCLOGTruncate(f *testing.F) {
	f.Add(encodeCLOGTruncate(7))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		x, err := decodeCLOGTruncate(b)
		if err == nil && !bytes.Equal(encodeCLOGTruncate(x), b) {
			t.Fatalf("accepted %x, which does not re-encode the same", b)
		}
	})
}

// TestCLOGBuffersDefault checks the default transaction_buffers follows
// shared_buffers as PostgreSQL 17's transaction_buffers.
func TestCLOGBuffersDefault(t *testing.T) {
	for _, c := range []struct {
		shared int64
		want   int
	}{{0, 32}, {4 << 20, 16}, {1 << 30, 256}, {64 << 30, 1024}} {
		// EnsureDefaults, not Open's check: 64 GB may exceed this
		// machine's memory.
		o := Options{SharedBuffers: c.shared}
		o.EnsureDefaults()
		if o.CLOGBuffers != c.want {
			t.Errorf("SharedBuffers %d: CLOGBuffers %d, want %d", c.shared, o.CLOGBuffers, c.want)
		}
	}
	if o, _ := (Options{CLOGBuffers: 100}).withDefaults(); o.CLOGBuffers != 100 {
		t.Errorf("an explicit CLOGBuffers was changed to %d", o.CLOGBuffers)
	}
}
