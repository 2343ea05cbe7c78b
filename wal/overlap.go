package wal

import "time"

// syncOverlap decides, for the pipelined flusher, whether overlapping
// syncs pays on the device under the log. It is not safe for concurrent
// use; the Writer keeps it under fmu.
//
// Two measurements, and the pipeline stays on when either says so:
//
//   - Latency: overlapped syncs taking no more than 1.5 times as long as
//     solo ones (moving averages, weight 1/8). A device that serializes
//     syncs, or shares one queue among them, makes an overlapped sync wait
//     for the ones ahead of it; then overlapping only splits the next group
//     and one sync at a time (the serial scheme, larger groups) does
//     better. This disk's fdatasync is such a device: overlapped, its syncs
//     take about twice as long, and the log commits about twice as fast
//     with one sync at a time.
//   - Batching: at least half of recent overlapped syncs (moving share,
//     weight 1/8) returning less than an eighth of a solo latency after
//     the sync ahead of it, or before it. A rotating disk completes every
//     sync issued within a rotation at the same boundary, so overlapped
//     syncs come back together. This test is for a busy CPU: the syncs
//     completing at one boundary are woken one after another, so their
//     measured latencies grow by the wake-up delays and the latency test
//     takes the disk for a serializing one, but the delays shift both ends
//     of a completion gap, which stays short.
//
// Once it has fallen back to one sync at a time, every probeEvery-th round
// may overlap one sync to keep measuring.
type syncOverlap struct {
	solo    time.Duration // moving average latency of syncs issued with none outstanding; 0 before the first
	overlap time.Duration // moving average latency of syncs issued with others outstanding; 0 before the first
	batched int64         // moving share of overlapped syncs that came back with the one ahead, in units of 1/earlyOne
	samples uint64        // overlapped syncs measured
	rounds  uint64        // syncs issued
}

const (
	// earlyOne is a share of 1 in syncOverlap.batched.
	earlyOne = 1 << 16
	// probeEvery is how often, in rounds, a flusher that has fallen back to
	// one sync at a time allows a second one.
	probeEvery = 32
)

func newSyncOverlap() syncOverlap { return syncOverlap{} }

// issued counts a sync being issued.
func (o *syncOverlap) issued() { o.rounds++ }

// soloDone records the latency of a sync issued with none outstanding.
func (o *syncOverlap) soloDone(lat time.Duration) {
	o.solo = time.Duration(ewma(int64(o.solo), int64(max(lat, 1))))
}

// overlappedDone records an overlapped sync that took lat and returned gap
// after the sync issued just before it (gap may be negative when the
// goroutines returned out of order). Before any solo sync there is nothing
// to compare with, and the sample is dropped.
func (o *syncOverlap) overlappedDone(lat, gap time.Duration) {
	if o.solo == 0 {
		return
	}
	o.samples++
	o.overlap = time.Duration(ewma(int64(o.overlap), int64(max(lat, 1))))
	var b int64
	if 8*gap < o.solo {
		b = earlyOne
	}
	o.batched += (b - o.batched) / 8 // weight 1/8, as ewma
}

// parallel reports whether overlapped syncs are worth issuing.
func (o *syncOverlap) parallel() bool {
	return o.overlap == 0 || 2*o.overlap <= 3*o.solo || 2*o.batched >= earlyOne
}

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
