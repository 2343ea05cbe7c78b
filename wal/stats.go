package wal

import "sync/atomic"

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
	}
}

// counters is the live, atomically updated form of Stats.
type counters struct {
	records, bytes, writes, writtenBytes, syncs, syncNanos   atomic.Uint64
	flushes, flushRequests, flushWaits, grouped, commitDelay atomic.Uint64
	switches, prepped, inline                                atomic.Uint64
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
	}
}
