package wal

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"mvkv/internal/vfs"
)

// simModel is a disk model on the fake clock of a testing/synctest
// bubble, so the pipelined flusher's device detection can be run
// deterministically however loaded the machine is.
type simModel struct {
	// rotation: a sync completes at the first multiple of service after it
	// is issued, all syncs at once (the vfs rotating-disk model).
	// Otherwise a sync takes service; serial devices do one at a time,
	// others any number at once (the vfs fixed-latency model).
	rotation bool
	serial   bool
	service  time.Duration
	// wake is how long a sync's goroutine takes to run again once the
	// device is done with it, given how many syncs were outstanding when
	// it was issued and a sync counter: the scheduling delay of a busy
	// CPU, which has more goroutines to run the more syncs complete.
	wake func(ahead int, n uint64) time.Duration
}

// simDisk is a simModel at work under a Writer.
type simDisk struct {
	simModel
	epoch time.Time
	sem   chan struct{}

	mu      sync.Mutex
	n       uint64 // guarded by mu: syncs issued
	out     int    // guarded by mu: syncs outstanding now
	overlap uint64 // guarded by mu: syncs issued with another outstanding
}

func (d *simDisk) sync() {
	d.mu.Lock()
	d.n++
	n, ahead := d.n, d.out
	if d.out > 0 {
		d.overlap++
	}
	d.out++
	d.mu.Unlock()

	switch {
	case d.rotation:
		since := time.Since(d.epoch)
		time.Sleep((since/d.service+1)*d.service - since)
	case d.serial:
		d.sem <- struct{}{}
		time.Sleep(d.service)
		<-d.sem
	default:
		time.Sleep(d.service)
	}

	d.mu.Lock()
	d.out--
	d.mu.Unlock()
	if d.wake != nil {
		time.Sleep(d.wake(ahead, n))
	}
}

type simFS struct {
	*vfs.MemFS
	d *simDisk
}

type simFile struct {
	vfs.File
	d *simDisk
}

func (f simFile) Datasync() error {
	if err := f.File.Datasync(); err != nil {
		return err
	}
	f.d.sync()
	return nil
}

func (fs simFS) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return simFile{f, fs.d}, nil
}

func (fs simFS) Create(name string) (vfs.File, error) { return fs.wrap(fs.MemFS.Create(name)) }
func (fs simFS) Open(name string) (vfs.File, error)   { return fs.wrap(fs.MemFS.Open(name)) }

// simResult is what a simulated run ends with.
type simResult struct {
	overlap       syncOverlap
	syncs         uint64 // syncs the device saw
	overlapped    uint64 // of them, issued while another was outstanding
	lateOverlaps  uint64 // overlapped syncs in the second half of the run
	lateSyncs     uint64 // syncs in the second half of the run
	pipelineDepth int
}

// runSim runs clients committers, each making commits commits with a
// think time of a few hundred microseconds, against a pipelined Writer of
// depth 64 on d, in a synctest bubble.
func runSim(t *testing.T, m simModel, clients, commits int) simResult {
	t.Helper()
	d := &simDisk{simModel: m}
	var res simResult
	synctest.Test(t, func(t *testing.T) {
		d.epoch = time.Now()
		if d.serial {
			d.sem = make(chan struct{}, 1)
		}
		opts := testOpts()
		opts.Flusher = FlusherPipelined
		opts.PipelineDepth = 64
		w, err := OpenWriter(simFS{vfs.NewMemFS(), d}, "/wal", 0, opts)
		if err != nil {
			t.Fatal(err)
		}
		var mid sync.Once
		var midSyncs, midOverlap uint64
		var done sync.WaitGroup
		for c := range clients {
			done.Go(func() {
				for i := range commits {
					if c == 0 && i == commits/2 {
						mid.Do(func() {
							d.mu.Lock()
							midSyncs, midOverlap = d.n, d.overlap
							d.mu.Unlock()
						})
					}
					time.Sleep(time.Duration(100+37*((c+i)%11)) * time.Microsecond)
					_, end, err := w.Insert(16, uint64(c), []byte("commit"))
					if err == nil {
						err = w.Flush(end)
					}
					if err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		done.Wait()
		w.fmu.Lock()
		res.overlap = w.overlap
		res.pipelineDepth = w.syncSlotsLocked()
		w.fmu.Unlock()
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		d.mu.Lock()
		res.syncs, res.overlapped = d.n, d.overlap
		res.lateSyncs, res.lateOverlaps = d.n-midSyncs, d.overlap-midOverlap
		d.mu.Unlock()
	})
	t.Logf("%d syncs, %d overlapped (second half: %d of %d); solo %v, overlapped %v, batched share %.2f over %d samples",
		res.syncs, res.overlapped, res.lateOverlaps, res.lateSyncs, res.overlap.solo, res.overlap.overlap,
		float64(res.overlap.batched)/earlyOne, res.overlap.samples)
	return res
}

// staggered is the wake-up delay of a busy CPU at a rotation boundary: the
// syncs that complete together run again one after another, step apart,
// in the order they were issued.
func staggered(step time.Duration) func(int, uint64) time.Duration {
	return func(ahead int, _ uint64) time.Duration { return time.Duration(ahead) * step }
}

// jitter is a pseudo-random wake-up delay of 0 to max in four steps.
func jitter(max time.Duration) func(int, uint64) time.Duration {
	return func(_ int, n uint64) time.Duration { return time.Duration(n*7919%5) * max / 4 }
}

// TestSyncOverlapDetection checks that the pipelined flusher keeps
// overlapping syncs on devices that work on several at once (the rotating
// disk and the fixed-latency model), also when every sync's goroutine is
// woken late as on a busy CPU, and falls back to about one at a time on a
// device that serializes them, also with noisy wake-ups. With the latency
// test alone, rotation-late-wakeups falls back.
func TestSyncOverlapDetection(t *testing.T) {
	const rot = 4 * time.Millisecond // 250 rotations per second
	for _, tc := range []struct {
		name     string
		disk     simModel
		clients  int
		parallel bool
	}{
		{"rotation", simModel{rotation: true, service: rot}, 16, true},
		{"rotation-2-clients", simModel{rotation: true, service: rot}, 2, true},
		// A sync issued with k others outstanding runs again k x 400 µs
		// after its boundary: overlapped syncs look half as slow again as
		// solo ones, and only the batching test keeps the pipeline.
		{"rotation-late-wakeups", simModel{rotation: true, service: rot, wake: staggered(400 * time.Microsecond)}, 24, true},
		{"rotation-jitter", simModel{rotation: true, service: rot, wake: jitter(2 * time.Millisecond)}, 12, true},
		{"fixed-latency", simModel{service: 2 * time.Millisecond}, 8, true},
		{"fixed-latency-jitter", simModel{service: 2 * time.Millisecond, wake: jitter(time.Millisecond)}, 8, true},
		{"serializing", simModel{serial: true, service: 2 * time.Millisecond}, 8, false},
		{"serializing-jitter", simModel{serial: true, service: 2 * time.Millisecond, wake: jitter(time.Millisecond)}, 8, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runSim(t, tc.disk, tc.clients, 150)
			if r.overlap.samples < 10 {
				t.Fatalf("only %d overlapped syncs measured; the run decided nothing", r.overlap.samples)
			}
			if got := r.overlap.parallel(); got != tc.parallel {
				t.Fatalf("parallel() = %v, want %v", got, tc.parallel)
			}
			// What the decision did to the second half of the run: mostly
			// overlapped syncs on a parallel device, few on a serial one.
			share := float64(r.lateOverlaps) / float64(r.lateSyncs)
			if tc.parallel && share < 0.3 {
				t.Fatalf("only %.0f%% of the second half's syncs overlapped", 100*share)
			}
			if !tc.parallel && (share > 0.2 || r.pipelineDepth > 2) {
				t.Fatalf("%.0f%% of the second half's syncs overlapped, %d slots at the end", 100*share, r.pipelineDepth)
			}
		})
	}
}

// TestSyncOverlapRules checks the two tests and the probes: slow
// overlapped syncs make the flusher fall back unless they come back
// together with the sync ahead of them, enough batched ones restore the
// full depth, and a probe slot opens every probeEvery rounds.
func TestSyncOverlapRules(t *testing.T) {
	o := newSyncOverlap()
	if o.slots(64) != 64 {
		t.Fatalf("%d slots before any measurement, want 64", o.slots(64))
	}
	o.overlappedDone(time.Millisecond, 0) // no solo latency yet: dropped
	if o.samples != 0 {
		t.Fatal("an overlapped sync was measured without a solo latency to compare with")
	}
	o.soloDone(2 * time.Millisecond)
	for range 40 {
		o.overlappedDone(3*time.Millisecond, time.Millisecond) // fast enough
	}
	if !o.parallel() {
		t.Fatal("fell back with overlapped syncs 1.5 times as slow as solo ones")
	}
	for range 40 {
		o.overlappedDone(4*time.Millisecond, 2*time.Millisecond) // a serializing device
	}
	if o.parallel() {
		t.Fatalf("parallel after 40 slow overlapped syncs (%v against %v solo)", o.overlap, o.solo)
	}
	slots := map[int]int{}
	for range 2 * probeEvery {
		o.issued()
		slots[o.slots(64)]++
	}
	if slots[1] != 2*probeEvery-2 || slots[2] != 2 {
		t.Fatalf("slots over %d rounds: %v; want two probes of 2", 2*probeEvery, slots)
	}
	// Slow, but back together with the sync ahead (a rotating disk whose
	// goroutines wake late): five in a row are not yet half the share,
	// six are.
	for i := range 6 {
		if o.parallel() {
			t.Fatalf("parallel after %d batched probes", i)
		}
		gap := 249 * time.Microsecond // just under an eighth of a solo sync
		if i%2 == 1 {
			gap = -100 * time.Microsecond // returned before the one ahead
		}
		o.overlappedDone(5*time.Millisecond, gap)
	}
	if !o.parallel() {
		t.Fatalf("not parallel after six batched probes (share %d/%d)", o.batched, earlyOne)
	}
}
