package wal

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"mvkv/vfs"
)

// parallel reports whether the chosen way is to overlap syncs.
func (o *syncOverlap) parallel() bool { return o.pipelined }

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
	// merge is, for a serial device, the share of a sync's service time
	// during which a newly issued sync joins it and completes with it, as
	// the kernel merges a cache flush into one not yet sent to the device.
	merge float64
	// cpu, when set, is a single core that every commit occupies for
	// commitCPU and every sync for syncCPU before it reaches the device:
	// a machine whose syncs are fast enough for the CPU to be the
	// bottleneck, where every extra round costs the commits time.
	commitCPU, syncCPU time.Duration
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
	core  chan struct{}

	mu        sync.Mutex
	busyUntil time.Time // guarded by mu: serial: when the device is next free
	curStart  time.Time // guarded by mu: serial: when the sync in service started
	n         uint64    // guarded by mu: syncs issued
	out       int       // guarded by mu: syncs outstanding now
	overlap   uint64    // guarded by mu: syncs issued with another outstanding
}

// onCore occupies the simulated core for t.
func (d *simDisk) onCore(t time.Duration) {
	if t == 0 {
		return
	}
	d.core <- struct{}{}
	time.Sleep(t)
	<-d.core
}

func (d *simDisk) sync() {
	d.onCore(d.syncCPU)
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
		d.mu.Lock()
		now := time.Now()
		var done time.Time
		if now.Before(d.busyUntil) && float64(now.Sub(d.curStart)) < d.merge*float64(d.service) {
			done = d.busyUntil
		} else {
			start := now
			if start.Before(d.busyUntil) {
				start = d.busyUntil
			}
			d.curStart, d.busyUntil = start, start.Add(d.service)
			done = d.busyUntil
		}
		d.mu.Unlock()
		time.Sleep(time.Until(done))
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
		d.core = make(chan struct{}, 1)
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
					d.onCore(d.commitCPU)
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
	t.Logf("%d syncs, %d overlapped (second half: %d of %d); commits per second %.0f one at a time, %.0f overlapped, over %d windows",
		res.syncs, res.overlapped, res.lateOverlaps, res.lateSyncs, res.overlap.rate[0], res.overlap.rate[1], res.overlap.windows)
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
// disk and the fixed-latency model, also when the sync goroutines wake
// late as on a busy CPU), and ends at one sync at a time on a fast,
// partly serializing device whose CPU every round costs. Where the two
// ways commit at about the same rate either choice is right, and the test
// only checks that the way chosen is not more than 10% slower than the
// other, as measured.
func TestSyncOverlapDetection(t *testing.T) {
	const rot = 4 * time.Millisecond // 250 rotations per second
	for _, tc := range []struct {
		name    string
		disk    simModel
		clients int
		commits int
		want    string // "overlap", "one" or "either"
	}{
		{"rotation", simModel{rotation: true, service: rot}, 16, 150, "overlap"},
		{"rotation-2-clients", simModel{rotation: true, service: rot}, 2, 600, "overlap"},
		// A sync issued with k others outstanding runs again k x 400 µs
		// after its boundary: with 24 clients the last of a rotation's
		// syncs wakes nearly two rotations late, and overlapping gains
		// about nothing.
		{"rotation-late-wakeups", simModel{rotation: true, service: rot, wake: staggered(400 * time.Microsecond)}, 24, 150, "either"},
		{"rotation-late-wakeups-8-clients", simModel{rotation: true, service: rot, wake: staggered(100 * time.Microsecond)}, 8, 300, "overlap"},
		{"rotation-jitter", simModel{rotation: true, service: rot, wake: jitter(2 * time.Millisecond)}, 12, 150, "overlap"},
		{"fixed-latency", simModel{service: 2 * time.Millisecond}, 8, 150, "overlap"},
		{"fixed-latency-jitter", simModel{service: 2 * time.Millisecond, wake: jitter(time.Millisecond)}, 8, 150, "overlap"},
		// This machine: syncs of about 150 µs that the device partly
		// serializes (it merges a third of the overlapped ones into the
		// one ahead) and a core that commits and rounds keep busy.
		{"fast-sync-busy-cpu", simModel{serial: true, service: 150 * time.Microsecond, merge: 1.0 / 3, commitCPU: 30 * time.Microsecond, syncCPU: 100 * time.Microsecond}, 8, 2000, "one"},
		{"fast-sync-busy-cpu-jitter", simModel{serial: true, service: 150 * time.Microsecond, merge: 1.0 / 3, commitCPU: 30 * time.Microsecond, syncCPU: 100 * time.Microsecond, wake: jitter(50 * time.Microsecond)}, 8, 2000, "one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runSim(t, tc.disk, tc.clients, tc.commits)
			if r.overlap.measured[0] == 0 || r.overlap.measured[1] == 0 {
				t.Fatalf("windows measured one at a time and overlapped: %v; the run compared nothing", r.overlap.measured)
			}
			chosen, other := r.overlap.rate[0], r.overlap.rate[1]
			if r.overlap.parallel() {
				chosen, other = other, chosen
			}
			if chosen < 0.9*other {
				t.Fatalf("kept the way committing %.0f/s against %.0f/s the other way", chosen, other)
			}
			if tc.want == "either" {
				return
			}
			if got, want := r.overlap.parallel(), tc.want == "overlap"; got != want {
				t.Fatalf("parallel() = %v, want %v", got, want)
			}
			// What the decision did to the second half of the run: mostly
			// overlapped syncs on a parallel device, few on a serial one.
			share := float64(r.lateOverlaps) / float64(r.lateSyncs)
			if tc.want == "overlap" && share < 0.3 {
				t.Fatalf("only %.0f%% of the second half's syncs overlapped", 100*share)
			}
			// The depth at the end is the chosen way's unless the run
			// ended inside a short trial of the other way.
			if tc.want == "one" && (share > 0.2 || (r.pipelineDepth > 2 && !r.overlap.trial)) {
				t.Fatalf("%.0f%% of the second half's syncs overlapped, %d slots at the end", 100*share, r.pipelineDepth)
			}
		})
	}
}

// TestSyncOverlapRules checks the windows: a trial of the other way every
// trialEvery windows, a switch when the other way commits more than 10%
// faster, and none for less.
func TestSyncOverlapRules(t *testing.T) {
	o := newSyncOverlap()
	if o.slots(64) != 64 {
		t.Fatalf("%d slots before any measurement, want 64", o.slots(64))
	}
	now := time.Unix(0, 0)
	clock := func() time.Time { return now }
	// window runs one window at rate commits per second (per way), each
	// round a millisecond with a second of idle time between windows, and
	// returns the slots it ran with.
	window := func(onePerSec, pipePerSec float64) int {
		slots := o.slots(64)
		rate := onePerSec
		if slots > 1 {
			rate = pipePerSec
		}
		for w := o.windows; o.windows == w; {
			k := int(rate / 1000)
			for range k {
				o.enter(clock)
			}
			o.issued(now)
			now = now.Add(time.Millisecond)
			for range k {
				o.leave(clock, true)
			}
		}
		now = now.Add(time.Second) // idle: not counted
		return slots
	}
	var ran []int
	for range 3 * trialEvery {
		ran = append(ran, window(10000, 13000)) // overlapping 30% faster
	}
	trials := 0
	for i, s := range ran {
		if s == 1 {
			trials++
			if i%trialEvery != 1 {
				t.Fatalf("window %d ran one sync at a time outside a trial: %v", i, ran)
			}
		}
	}
	if trials != 3 || !o.parallel() {
		t.Fatalf("windows %v, parallel %v; want a trial of one at a time every %d windows", ran, o.parallel(), trialEvery)
	}
	// A rotating disk: overlapping twice as fast, and trials grow rare.
	ran = ran[:0]
	for range 4 * trialRarely {
		ran = append(ran, window(10000, 20000))
	}
	trials = 0
	for _, s := range ran[trialRarely:] {
		if s == 1 {
			trials++
		}
	}
	if trials != 3 || !o.parallel() {
		t.Fatalf("windows %v, parallel %v; want a trial every %d windows once overlapping is twice as fast", ran, o.parallel(), trialRarely)
	}
	// The device turns serializing: one at a time is now twice as fast,
	// and the next trial and a window or two of averaging switch.
	for range 2 * trialEvery {
		window(20000, 10000)
	}
	if o.parallel() {
		t.Fatalf("still overlapping after %d windows at half the rate (%.0f against %.0f)", 2*trialEvery, o.rate[1], o.rate[0])
	}
	// Within 10%: no switch back.
	for range 4 * trialEvery {
		window(20000, 21000)
	}
	if o.parallel() {
		t.Fatalf("switched for a 5%% difference (%.0f against %.0f)", o.rate[1], o.rate[0])
	}
}

// Committers that join a busy time already begun do not read the clock:
// only the first to wait and the last to leave do, twice a busy time
// however many commits it holds.
func TestOverlapReadsClockOncePerBusyEdge(t *testing.T) {
	var o syncOverlap
	reads := 0
	now := time.Unix(0, 0)
	clock := func() time.Time {
		reads++
		now = now.Add(time.Millisecond)
		return now
	}
	for range 10 {
		o.enter(clock)
	}
	for range 10 {
		o.leave(clock, true)
	}
	if reads != 2 {
		t.Fatalf("ten committers read the clock %d times, want 2", reads)
	}
	if o.busy != time.Millisecond || o.done != 10 {
		t.Fatalf("busy %v done %d, want 1ms and 10", o.busy, o.done)
	}
}
