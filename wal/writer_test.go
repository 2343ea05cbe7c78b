package wal

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"mvkv/vfs"
)

// faultFS wraps vfs.OS; once failSync is set, Datasync and Sync of files
// fail, and syncs counts the Datasync calls that succeeded.
type faultFS struct {
	vfs.OS
	failSync atomic.Bool
	syncs    atomic.Int64

	mu     sync.Mutex
	logOps bool     // guarded by mu
	ops    []string // guarded by mu: "write NAME", "datasync NAME"
}

type faultFile struct {
	vfs.File
	fs *faultFS
}

// record appends an operation to the FS's log when logging is on.
func (fs *faultFS) record(op, name string) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.logOps {
		fs.ops = append(fs.ops, op+" "+path.Base(name))
	}
}

func (f faultFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.record("write", f.Name())
	return f.File.WriteAt(p, off)
}

var errInjected = errors.New("injected I/O error")

func (f faultFile) Datasync() error {
	if f.fs.failSync.Load() {
		return errInjected
	}
	f.fs.syncs.Add(1)
	f.fs.record("datasync", f.Name())
	return f.File.Datasync()
}

func (f faultFile) Sync() error {
	if f.fs.failSync.Load() {
		return errInjected
	}
	return f.File.Sync()
}

func (fs *faultFS) Create(name string) (vfs.File, error) {
	f, err := fs.OS.Create(name)
	if err != nil {
		return nil, err
	}
	return faultFile{f, fs}, nil
}

func (fs *faultFS) Open(name string) (vfs.File, error) {
	f, err := fs.OS.Open(name)
	if err != nil {
		return nil, err
	}
	return faultFile{f, fs}, nil
}

func TestConcurrentInsertFlush(t *testing.T) {
	for _, policy := range []FlusherPolicy{FlusherSerial, FlusherPipelined} {
		t.Run(string(policy), func(t *testing.T) {
			fsys, dir := vfs.OS{}, t.TempDir()
			opts := testOpts()
			opts.Flusher = policy
			w, err := OpenWriter(fsys, dir, 0, opts)
			if err != nil {
				t.Fatal(err)
			}
			const workers, commits = 64, 25
			var mu sync.Mutex
			var all []written
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			for g := 0; g < workers; g++ {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(g), 7))
					for i := 0; i < commits; i++ {
						data := make([]byte, rng.IntN(3000))
						for j := range data {
							data[j] = byte(g + i + j)
						}
						xid := uint64(g)<<32 | uint64(i)
						start, end, err := w.Insert(16, xid, data)
						if err != nil {
							errs <- err
							return
						}
						if err := w.Flush(end); err != nil {
							errs <- err
							return
						}
						if got := w.FlushedLSN(); got < end {
							errs <- fmt.Errorf("Flush(%s) returned with FlushedLSN %s", end, got)
							return
						}
						mu.Lock()
						all = append(all, written{start, end, 16, xid, data})
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			st := w.Stats()
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if st.FlushRequests != workers*commits || st.Records != workers*commits {
				t.Fatalf("stats %+v: want %d flush requests and records", st, workers*commits)
			}
			if st.SegmentSwitches == 0 {
				t.Fatalf("no segment switch; the test wants to cross segments")
			}
			if st.SyncLatency.Count != st.Syncs || st.SyncLatency.Sum != st.SyncNanos {
				t.Fatalf("sync latency histogram %v disagrees with %d syncs taking %d ns", st.SyncLatency, st.Syncs, st.SyncNanos)
			}
			if cps := w.Stats().CommitsPerSync; cps.Sum != workers*commits || cps.Count == 0 || cps.Count > st.Flushes {
				t.Fatalf("commits per sync %v (sum %d) after close; want a sum of %d over at most %d rounds", cps, cps.Sum, workers*commits, st.Flushes)
			}
			if st.CommitWaitNanos == 0 {
				t.Fatal("no commit wait time recorded")
			}
			got, _, _ := readAll(t, fsys, dir, 0)
			byLSN := make(map[LSN]written, len(all))
			for _, w := range all {
				byLSN[w.lsn] = w
			}
			if len(got) != len(all) {
				t.Fatalf("read %d records, inserted %d", len(got), len(all))
			}
			for _, g := range got {
				w, ok := byLSN[g.LSN]
				if !ok || w.xid != g.XID || w.end != g.End || string(w.data) != string(g.Data) {
					t.Fatalf("record at %s does not match what was inserted there", g.LSN)
				}
			}
		})
	}
}

func TestCommitDelayGroupsSiblings(t *testing.T) {
	for _, tc := range []struct {
		name  string
		delay int // µs
	}{
		{"sleep", 5000}, // >= 1ms: the injected sleep
		{"spin", 50},    // < 1ms: the clock-checked loop with a frozen clock
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 8
			opts := testOpts()
			opts.CommitDelay = tc.delay
			opts.CommitSiblings = n - 1
			opts.ActiveTransactions = func() int { return n }
			w, err := OpenWriter(vfs.OS{}, t.TempDir(), 0, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			frozen := time.Unix(0, 0)
			w.now = func() time.Time { return frozen } // the deadline never passes
			// The leader's delay ends only when every sibling waits on it.
			w.sleep = func(time.Duration) {
				for w.waiters.Load() < n-1 {
					time.Sleep(100 * time.Microsecond)
				}
			}
			before := w.Stats()
			var wg sync.WaitGroup
			for i := 0; i < n; i++ {
				wg.Go(func() {
					_, end, err := w.Insert(16, uint64(i), []byte("commit"))
					if err == nil {
						err = w.Flush(end)
					}
					if err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			d := w.Stats().Sub(before)
			if d.Syncs != 1 || d.Flushes != 1 || d.CommitDelays != 1 || d.GroupedCommits != n-1 {
				t.Fatalf("%d commits: %d syncs, %d flushes, %d delays, %d grouped; want 1, 1, 1, %d",
					n, d.Syncs, d.Flushes, d.CommitDelays, d.GroupedCommits, n-1)
			}
		})
	}
}

func TestCommitDelayNeedsSiblings(t *testing.T) {
	opts := testOpts()
	opts.CommitDelay = 50
	opts.CommitSiblings = 5
	opts.ActiveTransactions = func() int { return 5 } // 4 others: too few
	w, err := OpenWriter(vfs.OS{}, t.TempDir(), 0, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.now = func() time.Time { t.Error("commit delay applied without enough siblings"); return time.Now() }
	for i := 0; i < 3; i++ {
		_, end, _ := w.Insert(16, 1, nil)
		if err := w.Flush(end); err != nil {
			t.Fatal(err)
		}
	}
	if d := w.Stats().CommitDelays; d != 0 {
		t.Fatalf("%d commit delays", d)
	}
	w.SetCommitSiblings(4)
	var calls atomic.Int64
	start := time.Now()
	w.now = func() time.Time { return start.Add(time.Duration(calls.Add(1)) * 10 * time.Microsecond) }
	_, end, _ := w.Insert(16, 1, nil)
	if err := w.Flush(end); err != nil {
		t.Fatal(err)
	}
	if d := w.Stats().CommitDelays; d != 1 {
		t.Fatalf("%d commit delays after lowering commit_siblings, want 1", d)
	}
}

func TestSyncFailureIsSticky(t *testing.T) {
	for _, policy := range []FlusherPolicy{FlusherSerial, FlusherPipelined} {
		t.Run(string(policy), func(t *testing.T) {
			fsys, dir := &faultFS{}, t.TempDir()
			opts := testOpts()
			opts.Flusher = policy
			w, err := OpenWriter(fsys, dir, 0, opts)
			if err != nil {
				t.Fatal(err)
			}
			_, end, err := w.Insert(16, 1, []byte("durable"))
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Flush(end); err != nil {
				t.Fatal(err)
			}
			good := w.FlushedLSN()
			fsys.failSync.Store(true)
			var wg sync.WaitGroup
			for i := 0; i < 8; i++ {
				wg.Go(func() {
					_, end, err := w.Insert(16, 2, []byte("lost"))
					if err == nil {
						err = w.Flush(end)
					}
					if !errors.Is(err, ErrSyncFailed) {
						t.Errorf("commit during failure: %v, want ErrSyncFailed", err)
					}
				})
			}
			wg.Wait()
			fsys.failSync.Store(false) // a later success must not hide the failure
			if _, _, err := w.Insert(16, 3, nil); !errors.Is(err, ErrSyncFailed) {
				t.Fatalf("Insert after failure: %v", err)
			}
			if err := w.FlushAll(); !errors.Is(err, ErrSyncFailed) || !errors.Is(err, errInjected) {
				t.Fatalf("FlushAll after failure: %v", err)
			}
			if w.FlushedLSN() != good {
				t.Fatalf("FlushedLSN moved from %s to %s after a failed sync", good, w.FlushedLSN())
			}
			if err := w.Close(); !errors.Is(err, ErrSyncFailed) {
				t.Fatalf("Close after failure: %v", err)
			}
		})
	}
}

// waitPrepared waits for the second segment of a new log in dir to be
// prepared in the background.
func waitPrepared(t *testing.T, fsys vfs.FS, dir string) {
	t.Helper()
	next := path.Join(dir, segmentName(2*testSeg))
	for i := 0; ; i++ {
		if n, err := fsys.Stat(next); err == nil && n == testSeg {
			return
		}
		if i > 5000 {
			t.Fatal("next segment never prepared")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestSegmentPrepared(t *testing.T) {
	fsys, dir := vfs.OS{}, t.TempDir()
	w, err := OpenWriter(fsys, dir, 0, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// The next segment is prepared in the background.
	waitPrepared(t, fsys, dir)
	payload := make([]byte, 100_000)
	for w.Stats().SegmentSwitches == 0 {
		if _, _, err := w.Insert(16, 1, payload); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.FlushAll(); err != nil {
		t.Fatal(err)
	}
	if st := w.Stats(); st.SegmentsPrepped != 1 || st.SegmentsInline != 0 {
		t.Fatalf("prepared %d inline %d, want 1 and 0", st.SegmentsPrepped, st.SegmentsInline)
	}
}

// TestStalePrepareRequest: a request to prepare a segment the log has
// already moved past, which the preparer can still hold when the flusher
// created that segment inline, switched on and a checkpoint removed it,
// creates nothing: an empty segment below the log would read as lost
// records to a reader starting before the redo point.
func TestStalePrepareRequest(t *testing.T) {
	fsys, dir := vfs.NewMemFS(), "/wal"
	if err := fsys.MkdirAll(dir); err != nil {
		t.Fatal(err)
	}
	w, err := OpenWriter(fsys, dir, 0, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	writeUntilSwitches(t, w, 2)
	cur := LSN(w.curSegA.Load())
	if err := w.RemoveSegmentsBefore(cur); err != nil {
		t.Fatal(err)
	}
	for _, seg := range []LSN{cur - testSeg, cur} {
		w.prepare(seg)
	}
	segs, _, err := listSegments(fsys, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(segs) == 0 || segs[0] != cur {
		t.Fatalf("segments %v after stale prepare requests, want the open one %s first", segs, segmentName(cur))
	}
	if err := w.FlushAll(); err != nil {
		t.Fatal(err)
	}
	// A reader from the start of what is left reads the whole log.
	r, err := NewReader(fsys, dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for {
		if _, err := r.Next(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if r.End() != w.InsertLSN() {
		t.Fatalf("the log reads to %s, want %s", r.End(), w.InsertLSN())
	}
}

func TestRemoveSegmentsBefore(t *testing.T) {
	fsys, dir := vfs.OS{}, t.TempDir()
	w, err := OpenWriter(fsys, dir, 0, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 200_000)
	var ends []LSN
	for w.Stats().SegmentSwitches < 3 {
		_, end, err := w.Insert(16, 1, payload)
		if err != nil {
			t.Fatal(err)
		}
		ends = append(ends, end)
	}
	if err := w.FlushAll(); err != nil {
		t.Fatal(err)
	}
	// Everything below segment 3 may go; segment 3 (where the cut lies) stays.
	if err := w.RemoveSegmentsBefore(3*testSeg + 100); err != nil {
		t.Fatal(err)
	}
	segs, _, err := listSegments(fsys, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(segs) == 0 || segs[0] != 3*testSeg {
		t.Fatalf("segments left %v, want the first to be %s", segs, segmentName(3*testSeg))
	}
	// The open segment is never removed, whatever the LSN.
	if err := w.RemoveSegmentsBefore(w.InsertLSN() + 10*testSeg); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	segs, _, err = listSegments(fsys, dir)
	if err != nil {
		t.Fatal(err)
	}
	if open := LSN(4 * testSeg); len(segs) == 0 || segs[0] != open {
		t.Fatalf("segments left %v, want the first to be the open one %s", segs, segmentName(open))
	}
	if _, err := NewReader(fsys, dir, FirstLSN(testSeg)); err == nil {
		t.Fatal("reading from a removed segment succeeded")
	}
	recs, end, _ := readAll(t, fsys, dir, 0)
	if len(recs) == 0 || end != ends[len(ends)-1] {
		t.Fatalf("after removal read %d records ending %s, want end %s", len(recs), end, ends[len(ends)-1])
	}
}

func TestInsertLimitsAndOptions(t *testing.T) {
	w, err := OpenWriter(vfs.OS{}, t.TempDir(), 0, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.Insert(16, 1, make([]byte, MaxPayload(testSeg)+1)); !errors.Is(err, ErrRecordTooLarge) {
		t.Fatalf("oversized insert: %v", err)
	}
	if _, _, err := w.Insert(typeSwitch, 1, nil); err == nil {
		t.Fatal("insert of a reserved type succeeded")
	}
	if err := w.Flush(w.InsertLSN() + 8); err == nil {
		t.Fatal("flush beyond the insert position succeeded")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.Insert(16, 1, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("insert after close: %v", err)
	}
	for _, o := range []Options{
		{SegmentSize: 3 << 20},
		{SegmentSize: 512 << 10},
		{Flusher: "bogus"},
		{CommitDelay: 100001},
		{CommitDelay: -2},
		{Flusher: FlusherPipelined, PipelineDepth: -1},
	} {
		if _, err := OpenWriter(vfs.OS{}, t.TempDir(), 0, o); err == nil {
			t.Errorf("options %+v accepted", o)
		}
	}
}

func TestFlusherNoneSyncsEveryCommit(t *testing.T) {
	fsys := &faultFS{}
	opts := testOpts()
	opts.Flusher = FlusherNone
	w, err := OpenWriter(fsys, t.TempDir(), 0, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Go(func() {
			for j := 0; j < 5; j++ {
				_, end, err := w.Insert(16, 1, []byte("x"))
				if err == nil {
					err = w.Flush(end)
				}
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if st := w.Stats(); st.Syncs != 40 || st.GroupedCommits != 0 {
		t.Fatalf("none policy: %d syncs, %d grouped for 40 commits", st.Syncs, st.GroupedCommits)
	}
}

func TestWALWriterFlushesInBackground(t *testing.T) {
	opts := testOpts()
	opts.WALWriterDelay = time.Millisecond
	w, err := OpenWriter(vfs.OS{}, t.TempDir(), 0, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	_, end, err := w.Insert(16, 1, []byte("async commit"))
	if err != nil {
		t.Fatal(err)
	}
	for w.FlushedLSN() < end {
		time.Sleep(time.Millisecond)
	}
	if st := w.Stats(); st.FlushRequests != 0 || st.Syncs == 0 {
		t.Fatalf("stats %+v: want a background sync and no flush requests", st)
	}
}

func BenchmarkInsertFlush(b *testing.B) {
	for _, size := range []int{100, 1000} {
		b.Run(fmt.Sprintf("payload=%d", size), func(b *testing.B) {
			w, err := OpenWriter(vfs.OS{}, b.TempDir(), 0, Options{WALWriterDelay: time.Hour})
			if err != nil {
				b.Fatal(err)
			}
			data := make([]byte, size)
			b.SetParallelism(16)
			b.SetBytes(int64(size))
			b.ResetTimer()
			before := w.Stats()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					_, end, err := w.Insert(16, 1, data)
					if err == nil {
						err = w.Flush(end)
					}
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			d := w.Stats().Sub(before)
			if d.Syncs > 0 {
				b.ReportMetric(float64(d.Records)/float64(d.Syncs), "commits/sync")
			}
			if err := w.Close(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// TestOldSegmentSyncedFirst checks rule 9 on a flush that spans a segment
// switch: the old segment is written and fdatasynced before the new one is
// written, and the new one is synced before Flush returns.
func TestOldSegmentSyncedFirst(t *testing.T) {
	for _, policy := range []FlusherPolicy{FlusherSerial, FlusherPipelined} {
		t.Run(string(policy), func(t *testing.T) {
			fsys := &faultFS{}
			opts := testOpts()
			opts.Flusher = policy
			w, err := OpenWriter(fsys, t.TempDir(), 0, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			payload := make([]byte, 100_000)
			fsys.mu.Lock()
			fsys.logOps = true
			fsys.mu.Unlock()
			var end LSN
			for w.Stats().SegmentSwitches == 0 || w.InsertLSN() < 2*testSeg+200_000 {
				if _, end, err = w.Insert(16, 1, payload); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Flush(end); err != nil {
				t.Fatal(err)
			}
			fsys.mu.Lock()
			ops := append([]string(nil), fsys.ops...)
			fsys.mu.Unlock()
			old, next := segmentName(testSeg), segmentName(2*testSeg)
			want := []string{"write " + old, "datasync " + old, "write " + next, "datasync " + next}
			var got []string
			for _, op := range ops {
				if strings.HasSuffix(op, old) || strings.HasSuffix(op, next) {
					if len(got) == 0 || got[len(got)-1] != op {
						got = append(got, op)
					}
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("operations %v, want %v", got, want)
			}
		})
	}
}

// TestOnSegmentSwitch: the callback runs once per segment switch, with
// the start of the new segment, where the next record is placed.
func TestOnSegmentSwitch(t *testing.T) {
	var seen []LSN
	opts := testOpts()
	opts.OnSegmentSwitch = func(seg LSN) { seen = append(seen, seg) }
	w, err := OpenWriter(vfs.NewMemFS(), "/wal", 0, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	payload := make([]byte, 100_000)
	var last LSN
	for len(seen) < 3 {
		start, _, err := w.Insert(16, 1, payload)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(seen); n > 0 && seen[n-1] > last {
			if want := seen[n-1] + segHeaderSize; start != want {
				t.Fatalf("record after the switch to %d at %d, want %d", seen[n-1], start, want)
			}
			last = seen[n-1]
		}
	}
	if got := w.Stats().SegmentSwitches; got != uint64(len(seen)) {
		t.Fatalf("%d switches, %d calls", got, len(seen))
	}
	for i, seg := range seen {
		if want := LSN(i+2) * testSeg; seg != want {
			t.Fatalf("switch %d to %d, want %d", i, seg, want)
		}
	}
}

// TestOpenRemovesStaleSegmentsAndSaysSo checks that a segment past the end
// of the log is removed at open with a log line naming it, while the next
// segment, prepared and still empty, is kept even when a stale one lies
// beyond it.
func TestOpenRemovesStaleSegmentsAndSaysSo(t *testing.T) {
	fsys, dir := vfs.OS{}, t.TempDir()
	w, err := OpenWriter(fsys, dir, 0, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	_, end, err := w.Insert(16, 1, []byte("x"))
	if err == nil {
		err = w.FlushAll()
	}
	if err != nil {
		t.Fatal(err)
	}
	waitPrepared(t, fsys, dir)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	stale := segmentName(9 * testSeg)
	f, err := fsys.Create(path.Join(dir, stale))
	if err == nil {
		_, err = f.WriteAt([]byte("not this log's"), 0)
		f.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	opts := testOpts()
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	w, err = OpenWriter(fsys, dir, end, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := fsys.Stat(path.Join(dir, stale)); err == nil {
		t.Errorf("%s past the end still there", stale)
	}
	if !strings.Contains(logs.String(), "removed a segment past the end of the log") || !strings.Contains(logs.String(), stale) {
		t.Errorf("no log line names the removed segment: %q", logs.String())
	}
	if strings.Contains(logs.String(), segmentName(2*testSeg)) {
		t.Errorf("the prepared next segment was removed: %q", logs.String())
	}
	if got := w.RemovedAtOpen(); len(got) != 1 || got[0] != stale {
		t.Errorf("RemovedAtOpen = %v, want [%s]", got, stale)
	}
}

// TestCreatedDirectoryIsDurable: OpenWriter on a directory that does not
// exist yet creates it, and its parents, durably: a record flushed there
// survives a power loss that drops every directory change not synced.
func TestCreatedDirectoryIsDurable(t *testing.T) {
	m := vfs.NewMemFS()
	if err := m.SyncDir("/"); err != nil {
		t.Fatal(err)
	}
	w, err := OpenWriter(m, "/data/db/wal", 0, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	start, end, err := w.Insert(MinUserRecordType, 1, []byte("durable"))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(end); err != nil {
		t.Fatal(err)
	}
	c := m.CrashCopy(vfs.DropUnsynced, nil)
	w.Close()
	r, err := NewReader(c, "/data/db/wal", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rec, err := r.Next()
	if err != nil || rec.LSN != start || string(rec.Data) != "durable" {
		t.Fatalf("after a power loss: %+v, %v; want the flushed record at %s", rec, err, start)
	}
}
