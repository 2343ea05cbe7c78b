package wal

import (
	"errors"
	"sync"
	"testing"
	"time"

	"mvkv/vfs"
)

// gateFS wraps vfs.OS so that every Datasync blocks until the test answers
// it: each call is announced on calls and returns what is sent on its
// reply channel (after the real fdatasync succeeds).
type gateFS struct {
	vfs.OS
	calls chan chan error
}

type gateFile struct {
	vfs.File
	fs *gateFS
}

func (f gateFile) Datasync() error {
	if err := f.File.Datasync(); err != nil {
		return err
	}
	reply := make(chan error)
	f.fs.calls <- reply
	return <-reply
}

func (fs *gateFS) Open(name string) (vfs.File, error) {
	f, err := fs.OS.Open(name)
	if err != nil {
		return nil, err
	}
	return gateFile{f, fs}, nil
}

func (fs *gateFS) Create(name string) (vfs.File, error) {
	f, err := fs.OS.Create(name)
	if err != nil {
		return nil, err
	}
	return gateFile{f, fs}, nil
}

func openGated(t *testing.T, depth int) (*Writer, *gateFS) {
	t.Helper()
	fsys := &gateFS{calls: make(chan chan error)}
	opts := testOpts()
	opts.Flusher = FlusherPipelined
	opts.PipelineDepth = depth
	w, err := OpenWriter(fsys, t.TempDir(), 0, opts)
	if err != nil {
		t.Fatal(err)
	}
	return w, fsys
}

// commitAsync inserts a record and flushes it in a goroutine; the returned
// channel delivers the Flush result.
func commitAsync(t *testing.T, w *Writer) (LSN, <-chan error) {
	t.Helper()
	_, end, err := w.Insert(16, 1, []byte("commit"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Flush(end) }()
	return end, done
}

func notYet(t *testing.T, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("%s returned (%v) before its sync and every earlier one completed", what, err)
	default:
	}
}

// TestPipelinedOverlapsAndRetiresInOrder checks the pipelined flusher's two
// promises: a commit arriving while a sync is outstanding gets its own
// write and sync at once, and the flushed LSN only passes a round once it
// and every earlier round have synced, however the syncs complete.
func TestPipelinedOverlapsAndRetiresInOrder(t *testing.T) {
	w, fsys := openGated(t, 4)
	start := w.FlushedLSN()
	end1, done1 := commitAsync(t, w)
	sync1 := <-fsys.calls // the first sync is outstanding
	end2, done2 := commitAsync(t, w)
	sync2 := <-fsys.calls // and the second was issued without waiting for it

	sync2 <- nil // the later sync completes first
	time.Sleep(10 * time.Millisecond)
	notYet(t, done2, "the second commit")
	notYet(t, done1, "the first commit")
	if got := w.FlushedLSN(); got != start {
		t.Fatalf("FlushedLSN %s after only the second sync completed; want %s", got, start)
	}

	sync1 <- nil
	if err := <-done1; err != nil {
		t.Fatal(err)
	}
	if err := <-done2; err != nil {
		t.Fatal(err)
	}
	if got := w.FlushedLSN(); got != end2 || end2 <= end1 {
		t.Fatalf("FlushedLSN %s, want %s", got, end2)
	}
	st := w.Stats()
	if st.Syncs != 2 || st.Flushes != 2 {
		t.Fatalf("%d syncs in %d rounds, want 2 and 2", st.Syncs, st.Flushes)
	}
	go func() {
		for reply := range fsys.calls {
			reply <- nil
		}
	}()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	close(fsys.calls)
}

// TestPipelinedDepth checks that no more than PipelineDepth syncs are ever
// outstanding, and that commits arriving meanwhile share the next round.
func TestPipelinedDepth(t *testing.T) {
	w, fsys := openGated(t, 2)
	_, done1 := commitAsync(t, w)
	s1 := <-fsys.calls
	_, done2 := commitAsync(t, w)
	s2 := <-fsys.calls
	var later []<-chan error
	for range 5 {
		_, d := commitAsync(t, w)
		later = append(later, d)
	}
	time.Sleep(10 * time.Millisecond)
	select {
	case <-fsys.calls:
		t.Fatal("a third sync was issued with two outstanding and a depth of 2")
	default:
	}
	s1 <- nil
	// A slot is free: the five waiting commits go out in one round.
	s3 := <-fsys.calls
	s2 <- nil
	s3 <- nil
	for _, d := range append([]<-chan error{done1, done2}, later...) {
		if err := <-d; err != nil {
			t.Fatal(err)
		}
	}
	if st := w.Stats(); st.Syncs != 3 || st.GroupedCommits < 4 {
		t.Fatalf("%d syncs, %d grouped commits; want 3 syncs and at least 4 commits grouped", st.Syncs, st.GroupedCommits)
	}
	go func() {
		for reply := range fsys.calls {
			reply <- nil
		}
	}()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	close(fsys.calls)
}

// TestPipelinedEarlierSyncFails checks that a later sync's success does not
// make a round durable when an earlier outstanding sync fails: both
// commits fail and FlushedLSN stays put.
func TestPipelinedEarlierSyncFails(t *testing.T) {
	w, fsys := openGated(t, 4)
	start := w.FlushedLSN()
	_, done1 := commitAsync(t, w)
	s1 := <-fsys.calls
	_, done2 := commitAsync(t, w)
	s2 := <-fsys.calls
	s2 <- nil
	s1 <- errInjected
	for i, d := range []<-chan error{done1, done2} {
		if err := <-d; !errors.Is(err, ErrSyncFailed) {
			t.Fatalf("commit %d: %v, want ErrSyncFailed", i+1, err)
		}
	}
	if got := w.FlushedLSN(); got != start {
		t.Fatalf("FlushedLSN moved to %s past a failed sync", got)
	}
	if err := w.Close(); !errors.Is(err, ErrSyncFailed) {
		t.Fatalf("Close: %v", err)
	}
}

// TestCommitDelayAuto checks the adaptive delay's two rules: a lone
// transaction never waits, and with siblings the leader waits until every
// other active transaction's commit is waiting for its round, then takes
// them all in one sync.
func TestCommitDelayAuto(t *testing.T) {
	for _, policy := range []FlusherPolicy{FlusherSerial, FlusherPipelined} {
		t.Run(string(policy), func(t *testing.T) {
			const n = 6
			var active sync.Mutex // held while the siblings are active
			activeN := 1
			opts := testOpts()
			opts.Flusher = policy
			opts.AdaptiveCommitDelay = true
			opts.ActiveTransactions = func() int { active.Lock(); defer active.Unlock(); return activeN }
			w, err := OpenWriter(vfs.OS{}, t.TempDir(), 0, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			w.syncEWMA.Store(int64(time.Hour)) // a budget that never runs out
			frozen := time.Unix(0, 0)
			w.now = func() time.Time { return frozen } // nor does the stall rule fire
			for range 3 {
				_, end, _ := w.Insert(16, 1, nil)
				if err := w.Flush(end); err != nil {
					t.Fatal(err)
				}
			}
			if d := w.Stats().CommitDelays; d != 0 {
				t.Fatalf("a lone committer was delayed %d times", d)
			}

			active.Lock()
			activeN = n
			active.Unlock()
			before := w.Stats()
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					if i > 0 {
						time.Sleep(time.Duration(i) * time.Millisecond)
					}
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
			if d.Syncs != 1 || d.CommitDelays != 1 || d.GroupedCommits != n-1 {
				t.Fatalf("%d commits: %d syncs, %d delays, %d grouped; want 1, 1, %d", n, d.Syncs, d.CommitDelays, d.GroupedCommits, n-1)
			}
		})
	}
}

func TestHistogram(t *testing.T) {
	// Buckets tile the values: each value lies within its bucket's bounds,
	// and bucket i+1 starts right after bucket i ends.
	for i := 0; i < HistogramBuckets-1; i++ {
		lo, hi := bucketBounds(i)
		nlo, _ := bucketBounds(i + 1)
		if lo > hi || hi+1 != nlo || bucketOf(lo) != i || bucketOf(hi) != i {
			t.Fatalf("bucket %d = [%d, %d], next starts at %d", i, lo, hi, nlo)
		}
		if i >= 8 && (hi-lo+1)*4 > lo {
			t.Fatalf("bucket %d = [%d, %d] wider than a quarter of its start", i, lo, hi)
		}
	}
	if _, hi := bucketBounds(HistogramBuckets - 1); hi != ^uint64(0) || bucketOf(^uint64(0)) != HistogramBuckets-1 {
		t.Fatalf("the last bucket ends at %d", hi)
	}

	var h Histogram
	for v := uint64(1); v <= 100; v++ {
		h.Observe(v)
	}
	if h.Count != 100 || h.Sum != 5050 || h.Mean() != 50.5 {
		t.Fatalf("count %d sum %d mean %v", h.Count, h.Sum, h.Mean())
	}
	for _, q := range []struct {
		q      float64
		lo, hi uint64
	}{{0.5, 50, 63}, {0.9, 90, 111}, {0.99, 99, 111}, {0, 1, 1}, {1, 100, 111}} {
		if got := h.Quantile(q.q); got < q.lo || got > q.hi {
			t.Errorf("quantile %v = %d, want within [%d, %d]", q.q, got, q.lo, q.hi)
		}
	}
	before := h
	for range 10 {
		h.Observe(1000)
	}
	d := h.Sub(before)
	if d.Count != 10 || d.Sum != 10000 || d.Quantile(0.5) < 1000 || d.Quantile(0.5) > 1023 {
		t.Fatalf("Sub: %+v", d)
	}
	if s := d.String(); s != "n=10 mean=1000 p50=1023 p90=1023 p99=1023 max=1023" {
		t.Fatalf("String = %q", s)
	}
	d.Nanos = true
	if s := d.String(); s != "n=10 mean=1µs p50=1µs p90=1µs p99=1µs max=1µs" {
		t.Fatalf("String with Nanos = %q", s)
	}
	if s := (Histogram{}).String(); s != "n=0" || (Histogram{}).Quantile(0.5) != 0 {
		t.Fatalf("empty histogram: %q", s)
	}
}

func TestRoundLogAttributesCommits(t *testing.T) {
	var r roundLog
	r.commit(10) // before any round: dropped
	for i := 1; i <= roundLogSize+3; i++ {
		r.retired(LSN(100 * i))
	}
	// Open rounds end at 400, 500, ...; credit 3 commits to the round
	// ending at 500 and one, too old to have an open round, to 400.
	for _, lsn := range []LSN{401, 450, 500, 10} {
		r.commit(lsn)
	}
	if h := r.snapshot(); h.Count != 3 || h.Sum != 0 {
		t.Fatalf("folded rounds: %v", h)
	}
	r.foldAll()
	h := r.snapshot()
	if h.Count != roundLogSize+3 || h.Sum != 4 || h.Buckets[3] != 1 || h.Buckets[1] != 1 {
		t.Fatalf("after folding: count %d sum %d buckets %v", h.Count, h.Sum, h.Buckets[:4])
	}
}
