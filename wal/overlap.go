package wal

import "time"

// syncOverlap decides, for the pipelined flusher, whether the device under
// the log works on several syncs at once, from when the syncs it has been
// given returned. It is not safe for concurrent use; the Writer keeps it
// under fmu.
//
// The test is on completion spacing, not latency. A device that serializes
// syncs starts an overlapped sync only when the one ahead of it is done,
// so it completes at least one service time (about a solo sync's latency)
// after its predecessor, whenever it was issued. A device with a queue
// completes it sooner: a rotating disk finishes every sync issued within a
// rotation at the same boundary (spacing 0), a device with a fixed latency
// and parallel syncs finishes them as far apart as they were issued (less
// than one latency, since the predecessor was still outstanding). So an
// overlapped sync is counted early when it returned less than half a solo
// latency after its predecessor, and the device is taken to serialize
// syncs while fewer than a quarter of the recent overlapped syncs were
// early.
//
// Why not latency: a sync's measured latency includes the issuing
// goroutine's wake-up delay after the device is done, and on a busy CPU
// the syncs that complete together at a rotation boundary are woken one
// after another, so overlapped syncs look slow on a device that does not
// serialize them at all. The same delays shift both ends of a completion
// gap, so the gap is unbiased where the latency is not; and the early
// share is a lower quantile (is the 25th percentile of the gaps under half
// a solo sync?), which the occasional long stall cannot move. What the
// test cannot tell apart is a predecessor that the device had finished but
// whose goroutine had not yet returned when the next sync was issued: that
// gap is long on every device, which only dilutes the early share, hence a
// quarter rather than a half.
//
// Once it has fallen back to one sync at a time, every probeEvery-th round
// may overlap one sync to keep measuring; three early probes in a row
// bring the share back above a quarter.
type syncOverlap struct {
	solo    time.Duration // moving average latency of syncs issued with none outstanding; 0 before the first
	early   int64         // moving share of overlapped syncs that were early, in units of 1/earlyOne
	samples uint64        // overlapped syncs measured
	rounds  uint64        // syncs issued
}

const (
	// earlyOne is a share of 1 in syncOverlap.early.
	earlyOne = 1 << 16
	// probeEvery is how often, in rounds, a flusher that has fallen back to
	// one sync at a time allows a second one.
	probeEvery = 16
)

func newSyncOverlap() syncOverlap { return syncOverlap{early: earlyOne} }

// issued counts a sync being issued.
func (o *syncOverlap) issued() { o.rounds++ }

// soloDone records the latency of a sync issued with none outstanding.
func (o *syncOverlap) soloDone(lat time.Duration) {
	o.solo = time.Duration(ewma(int64(o.solo), int64(max(lat, 1))))
}

// overlappedDone records an overlapped sync that returned gap after the
// sync issued just before it (gap may be negative when the goroutines
// returned out of order). Before any solo sync there is nothing to compare
// with, and the sample is dropped.
func (o *syncOverlap) overlappedDone(gap time.Duration) {
	if o.solo == 0 {
		return
	}
	o.samples++
	var e int64
	if 2*gap < o.solo {
		e = earlyOne
	}
	o.early += (e - o.early) / 8 // weight 1/8, as ewma
}

// parallel reports whether overlapped syncs are worth issuing.
func (o *syncOverlap) parallel() bool { return 4*o.early >= earlyOne }

// slots returns how many syncs may be outstanding at once, given the
// configured depth.
func (o *syncOverlap) slots(depth int) int {
	if o.parallel() {
		return depth
	}
	if o.rounds%probeEvery == 0 {
		return min(2, depth)
	}
	return 1
}
