package wal

import "time"

// syncOverlap decides, for the pipelined flusher, whether overlapping
// syncs pays: it runs the log both ways and keeps the one that commits
// faster. It is not safe for concurrent use; the Writer keeps it under
// fmu.
//
// Whether a second sync issued while one is outstanding helps depends on
// more than the device. On a rotating disk, or any device that works on
// several syncs at once, it saves a commit that just missed a sync from
// waiting for a whole extra one. On a device that serializes syncs, or
// merges only some of them, the overlapped sync waits for the one ahead
// of it anyway and splits the next group in two; and where syncs are fast
// and the CPU is the bottleneck (as on the two-core machine of
// docs/BENCHMARKS.md, about 150 µs per fdatasync), every extra round costs
// the commits CPU time. Judging the device by its sync latencies and
// completion gaps was tried and failed on that machine's disk (the group
// commit lab notes have the figures): an overlapped fdatasync takes 1.25
// times a solo one at the median and returns 0.6 of a solo latency after
// the one ahead, between the parallel and the serializing pictures, and
// the moving averages flipped the flusher into overlapping for a third
// of its rounds, losing a third of its commit rate.
//
// So the flusher measures what it is for. The rounds are cut into
// windows of at least windowRounds rounds and windowTime, run in the
// chosen way (overlapping up to the configured depth, or one sync at a
// time as the serial scheme); every trialEvery-th window (every
// trialRarely-th once one way is 1.5 times as fast) is a shorter trial
// run the other way. Each window's commit rate goes into that way's
// moving average (weight 1/4), and the flusher switches when the other
// way's average is more than 10% higher. The rate is commits made durable
// per second during which at least one committer was waiting for the
// flusher: a window spanning an idle spell would otherwise look slow, and
// one such window could make the worse way look 1.5 times better and keep
// it chosen until the rare trials corrected it. Trials grow rare only
// after the other way has been measured three times. The trials cost
// little where one way is far better (on a rotating disk a trial runs at
// half the rate for under 1% of the time) and keep the choice current
// when the load changes: a trial every 400 ms at most.
type syncOverlap struct {
	pipelined bool       // the chosen way: overlap syncs
	trial     bool       // the current window runs the other way
	start     time.Time  // when the current window's first round was issued
	rounds    int        // rounds issued in the current window
	windows   uint64     // windows completed
	rate      [2]float64 // moving average commits per busy second, one at a time [0] and overlapped [1]; 0 before the first window
	measured  [2]int     // windows measured each way

	// The current window's commits: how many are waiting for the flusher
	// now, since when at least one has been, the time with at least one
	// waiting before that, and how many finished.
	waiting   int
	busySince time.Time
	busy      time.Duration
	done      uint64
}

const (
	// A window run the chosen way lasts at least windowRounds rounds and
	// windowTime; a trial of the other way lasts trialRounds rounds or an
	// eighth of windowTime, whichever ends first. The bounds in time keep
	// a trial's share of the time small when the two ways' rounds differ
	// in length: on a rotating disk an overlapped round takes a fraction
	// of a rotation and a round one at a time takes two rotations.
	windowRounds = 64
	trialRounds  = 16
	windowTime   = 50 * time.Millisecond
	// trialEvery is how often, in windows, one is a trial; trialRarely
	// how often when the chosen way commits at least 1.5 times as fast as
	// the other, where a trial costs the most and is least likely to
	// change anything.
	trialEvery  = 8
	trialRarely = 32
)

func newSyncOverlap() syncOverlap { return syncOverlap{pipelined: true} }

// overlapping reports whether the current window overlaps syncs.
func (o *syncOverlap) overlapping() bool { return o.pipelined != o.trial }

// enter counts a committer starting to wait for the flusher now. The
// clock is read only when the busy time starts, not by every committer
// that joins one already waiting.
func (o *syncOverlap) enter(now func() time.Time) {
	if o.waiting == 0 {
		o.busySince = now()
	}
	o.waiting++
}

// leave counts a committer done waiting now, its commit durable if ok; the
// clock is read only by the last one.
func (o *syncOverlap) leave(now func() time.Time, ok bool) {
	o.waiting--
	if ok {
		o.done++
	}
	if o.waiting == 0 {
		o.busy += now().Sub(o.busySince)
	}
}

// issued counts a round being issued at now, and closes the window when it
// is full.
func (o *syncOverlap) issued(now time.Time) {
	if o.rounds == 0 {
		o.start = now
	}
	o.rounds++
	el := now.Sub(o.start)
	if o.trial {
		if o.rounds < trialRounds && el < windowTime/8 {
			return
		}
	} else if o.rounds < windowRounds || el < windowTime {
		return
	}
	busy := o.busy
	if o.waiting > 0 {
		busy += now.Sub(o.busySince)
		o.busySince = now
	}
	if busy > 0 {
		r := float64(o.done) / busy.Seconds()
		i := 0
		if o.overlapping() {
			i = 1
		}
		if o.rate[i] == 0 {
			o.rate[i] = r
		} else {
			o.rate[i] += (r - o.rate[i]) / 4
		}
		o.measured[i]++
	}
	one, pipe := o.rate[0], o.rate[1]
	if one > 0 && pipe > 0 {
		if o.pipelined && one > 1.1*pipe {
			o.pipelined = false
		} else if !o.pipelined && pipe > 1.1*one {
			o.pipelined = true
		}
	}
	every := uint64(trialEvery)
	chosen, other, otherMeasured := o.rate[1], o.rate[0], o.measured[0]
	if !o.pipelined {
		chosen, other, otherMeasured = other, chosen, o.measured[1]
	}
	if otherMeasured >= 3 && 2*chosen >= 3*other {
		every = trialRarely
	}
	o.windows++
	o.rounds, o.busy, o.done = 0, 0, 0
	o.trial = !o.trial && o.windows%every == 1
}

// slots returns how many syncs may be outstanding at once in the current
// window, given the configured depth.
func (o *syncOverlap) slots(depth int) int {
	if o.overlapping() {
		return depth
	}
	return 1
}
