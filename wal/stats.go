package wal

import (
	"sync"
	"sync/atomic"
)

// Stats counts what a Writer has done since it was opened. It is a value:
// take two snapshots and Sub them to measure an interval (as bbolt's Stats).
// Counters are read one by one without a common lock, so a snapshot taken
// while the Writer is busy may be off by the operations in flight.
type Stats struct {
	Records         uint64 // records inserted (segment switches excluded)
	Bytes           uint64 // log bytes inserted: headers, payloads and padding
	Writes          uint64 // WriteAt calls on segment files
	WrittenBytes    uint64 // bytes passed to those WriteAt calls
	Syncs           uint64 // fdatasync calls on segment files
	SyncNanos       uint64 // total time spent in those fdatasync calls, nanoseconds
	Flushes         uint64 // write-and-sync rounds performed by a flush leader
	FlushRequests   uint64 // calls to Flush and FlushAll
	FlushWaits      uint64 // Flush calls that found their LSN not yet durable and had to wait
	GroupedCommits  uint64 // Flush calls made durable by a round another caller led
	CommitDelays    uint64 // rounds in which the leader waited commit_delay
	SegmentSwitches uint64 // times insertion moved on to the next segment
	SegmentsPrepped uint64 // segments created ahead by the background preparer
	SegmentsInline  uint64 // segments the flusher had to create itself on a switch

	// SyncLatency is the duration of every fdatasync of a segment file, in
	// nanoseconds (Nanos is set). Its Sum equals SyncNanos.
	SyncLatency Histogram
	// CommitsPerSync counts, for every write-and-sync round that made log
	// durable, how many commit Flush calls it made durable: each successful
	// Flush is credited to the first round whose end covered its LSN, also
	// when the caller arrived after that round and did not wait. A round
	// crossing into a new segment syncs twice but counts once; rounds of the
	// WAL writer and of FlushAll count, often with 0 commits.
	CommitsPerSync Histogram
	// CommitWaitNanos is the total time Flush calls spent waiting for their
	// records to become durable, nanoseconds: the commit latency the log
	// added, summed over committers.
	CommitWaitNanos uint64
}

// Sub returns s minus o, counter by counter.
func (s Stats) Sub(o Stats) Stats {
	return Stats{
		Records:         s.Records - o.Records,
		Bytes:           s.Bytes - o.Bytes,
		Writes:          s.Writes - o.Writes,
		WrittenBytes:    s.WrittenBytes - o.WrittenBytes,
		Syncs:           s.Syncs - o.Syncs,
		SyncNanos:       s.SyncNanos - o.SyncNanos,
		Flushes:         s.Flushes - o.Flushes,
		FlushRequests:   s.FlushRequests - o.FlushRequests,
		FlushWaits:      s.FlushWaits - o.FlushWaits,
		GroupedCommits:  s.GroupedCommits - o.GroupedCommits,
		CommitDelays:    s.CommitDelays - o.CommitDelays,
		SegmentSwitches: s.SegmentSwitches - o.SegmentSwitches,
		SegmentsPrepped: s.SegmentsPrepped - o.SegmentsPrepped,
		SegmentsInline:  s.SegmentsInline - o.SegmentsInline,
		SyncLatency:     s.SyncLatency.Sub(o.SyncLatency),
		CommitsPerSync:  s.CommitsPerSync.Sub(o.CommitsPerSync),
		CommitWaitNanos: s.CommitWaitNanos - o.CommitWaitNanos,
	}
}

// counters is the live, atomically updated form of Stats.
type counters struct {
	records, bytes, writes, writtenBytes, syncs, syncNanos   atomic.Uint64
	flushes, flushRequests, flushWaits, grouped, commitDelay atomic.Uint64
	switches, prepped, inline                                atomic.Uint64
	commitWaitNanos                                          atomic.Uint64
	syncLatency                                              atomicHistogram
	rounds                                                   roundLog
}

func (c *counters) snapshot() Stats {
	return Stats{
		Records:         c.records.Load(),
		Bytes:           c.bytes.Load(),
		Writes:          c.writes.Load(),
		WrittenBytes:    c.writtenBytes.Load(),
		Syncs:           c.syncs.Load(),
		SyncNanos:       c.syncNanos.Load(),
		Flushes:         c.flushes.Load(),
		FlushRequests:   c.flushRequests.Load(),
		FlushWaits:      c.flushWaits.Load(),
		GroupedCommits:  c.grouped.Load(),
		CommitDelays:    c.commitDelay.Load(),
		SegmentSwitches: c.switches.Load(),
		SegmentsPrepped: c.prepped.Load(),
		SegmentsInline:  c.inline.Load(),
		SyncLatency:     c.syncLatency.snapshot(true),
		CommitsPerSync:  c.rounds.snapshot(),
		CommitWaitNanos: c.commitWaitNanos.Load(),
	}
}

// roundLogSize is how many recent rounds keep their commit counts open: a
// committer is credited to one of them when its Flush returns, and the
// oldest is folded into the histogram when a new round retires. A committer
// whose round has already been folded (it returned that many rounds late)
// is credited to the oldest open round instead. Snapshots show folded
// rounds only, so that Sub of two snapshots never sees a bucket shrink;
// they lag by this many rounds until Close folds the rest.
const roundLogSize = 32

// roundLog attributes returning commits to the rounds that made them
// durable, for Stats.CommitsPerSync.
type roundLog struct {
	mu      sync.Mutex
	targets [roundLogSize]LSN    // guarded by mu: end LSN of each open round, a ring
	counts  [roundLogSize]uint64 // guarded by mu: commits credited to each open round
	head, n int                  // guarded by mu: oldest open round and how many are open
	done    Histogram            // guarded by mu: folded rounds
}

// retired records a round that made everything below target durable.
// Rounds retire in LSN order.
func (r *roundLog) retired(target LSN) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == roundLogSize {
		r.done.Observe(r.counts[r.head])
		r.head = (r.head + 1) % roundLogSize
		r.n--
	}
	i := (r.head + r.n) % roundLogSize
	r.targets[i], r.counts[i] = target, 0
	r.n++
}

// commit credits a Flush up to upTo, now durable, to its round.
func (r *roundLog) commit(upTo LSN) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == 0 {
		return
	}
	// Binary search for the first open round whose target covers upTo.
	lo, hi := 0, r.n-1
	for lo < hi {
		mid := (lo + hi) / 2
		if r.targets[(r.head+mid)%roundLogSize] >= upTo {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	r.counts[(r.head+lo)%roundLogSize]++
}

func (r *roundLog) snapshot() Histogram {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.done
}

// foldAll folds every open round; Close calls it once no Flush can return
// any more.
func (r *roundLog) foldAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for ; r.n > 0; r.n-- {
		r.done.Observe(r.counts[r.head])
		r.head = (r.head + 1) % roundLogSize
	}
}
