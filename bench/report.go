package bench

import (
	"fmt"
	"io"
	"math"
	"time"

	"mvkv/engine"
)

// Invariant is the outcome of the post-run balance check (see the package
// doc): accounts == history and tellers == branches, and, when the sums
// before the run are known, the run's changes against what its clients
// committed.
type Invariant struct {
	Sums Sums
	OK   bool
	// Run compares the run's changes with its commits; nil when they
	// were not compared (no sums from before the run).
	Run *RunCheck
	// Err, if not nil, is why the sums could not be read (a target that
	// failed during the run, say); Sums and OK mean nothing then.
	Err error
}

// RunCheck compares what the tables gained over a run with what its
// clients committed: one history row per commit, the sum of the committed
// deltas on accounts, and on tellers too for TPC-B (nothing for simple
// update). It catches what the absolute sums cannot: a commit reported
// that did not happen (every sum still agrees without it), or one whose
// account and history writes were lost together.
type RunCheck struct {
	Applied Applied
	// The tables' changes over the run: history rows, and the balance
	// sums of accounts and tellers.
	HistoryRows, Accounts, Tellers int64
	// OK is false when a change differs from the commits; always true
	// when Applied is not Exact (nothing was compared).
	OK bool
}

// CheckInvariant compares the sums that must agree after any mix of
// workloads: every account change has its history row, and tellers and
// branches are always updated together.
func CheckInvariant(s Sums) *Invariant {
	return &Invariant{Sums: s, OK: s.Accounts == s.History && s.Tellers == s.Branches}
}

// CheckRun adds to inv the comparison of the run's changes (after minus
// before) with what its clients committed (a).
func (inv *Invariant) CheckRun(before Sums, a Applied) {
	after := inv.Sums
	rc := &RunCheck{Applied: a, HistoryRows: after.HistoryRows - before.HistoryRows,
		Accounts: after.Accounts - before.Accounts, Tellers: after.Tellers - before.Tellers, OK: true}
	if a.Exact {
		rc.OK = rc.HistoryRows == a.Commits && rc.Accounts == a.Delta && rc.Tellers == a.wantTellers()
	}
	inv.Run = rc
	inv.OK = inv.OK && rc.OK
}

// wantTellers is what a run's commits add to the tellers' balances.
func (a Applied) wantTellers() int64 {
	if a.Simple {
		return 0
	}
	return a.Delta
}

// WriteReport writes r in pgbench 15's words, followed by the target's
// commit statistics and the invariant line when r has them. Only write
// errors are returned.
func WriteReport(w io.Writer, r *Results) error {
	ew := &errWriter{w: w}
	p := ew.printf
	p("target: %s\n", r.Target)
	p("transaction type: %s\n", r.Workload)
	p("scaling factor: %d\n", r.Scale)
	p("query mode: simple\n")
	p("number of clients: %d\n", r.Clients)
	p("number of threads: %d\n", r.Threads)
	if r.MaxTries != math.MaxInt {
		// pgbench 15 leaves the line out for --max-tries=0 (unlimited).
		p("maximum number of tries: %d\n", max(r.MaxTries, 1))
	}
	if r.Duration > 0 {
		if r.Elapsed > 0 && r.Elapsed < r.Duration-time.Second {
			// Stopped early (interrupted): say how long it ran.
			p("duration: %.1f s (of %d s)\n", r.Elapsed.Seconds(), int64(r.Duration.Seconds()))
		} else {
			p("duration: %d s\n", int64(r.Duration.Seconds()))
		}
		p("number of transactions actually processed: %d\n", r.Processed)
	} else {
		p("number of transactions per client: %d\n", r.Transactions)
		p("number of transactions actually processed: %d/%d\n", r.Processed, int64(r.Transactions)*int64(r.Clients))
	}
	pct := 0.0
	if n := r.Processed + r.Failed; n > 0 {
		pct = 100 * float64(r.Failed) / float64(n)
	}
	p("number of failed transactions: %d (%.3f%%)\n", r.Failed, pct)
	if r.MaxTries > 1 {
		// As pgbench 15 prints them when --max-tries is not 1: retried
		// among every transaction, committed or failed.
		pct := 0.0
		if n := r.Processed + r.Failed; n > 0 {
			pct = 100 * float64(r.Retried) / float64(n)
		}
		p("number of transactions retried: %d (%.3f%%)\n", r.Retried, pct)
		p("total number of retries: %d\n", r.Retries)
	}
	// As pgbench: the remaining figures mean nothing without a transaction.
	if r.Processed > 0 {
		p("latency average = %.3f ms\n", r.LatencyAvg)
		p("latency stddev = %.3f ms\n", r.LatencyStddev)
		p("initial connection time = %.3f ms\n", r.ConnTime)
		p("tps = %f (without initial connection time)\n", r.TPS)
	}
	if o := r.Open; o != nil && o.Recovery.RedoLSN == 0 && o.Recovery.Records == 0 {
		p("open time = %.3f s before the run (a new database)\n", o.Took.Seconds())
	} else if o != nil {
		rec := o.Recovery
		index := fmt.Sprintf("index file loaded, %s in %.3f s", plural(int64(rec.IndexKeys), "key"), rec.IndexTime.Seconds())
		if !rec.IndexFromFile {
			index = fmt.Sprintf("index rebuilt from the heap (%s), %s in %.3f s", rec.IndexRebuildReason, plural(int64(rec.IndexKeys), "key"), rec.IndexTime.Seconds())
		}
		p("open time = %.3f s before the run (redo: %s, %s of WAL in %.3f s; %s)\n",
			o.Took.Seconds(), plural(int64(rec.Records), "record"), plural(int64(rec.EndLSN-rec.RedoLSN), "byte"), (rec.ScanTime + rec.RedoTime).Seconds(), index)
	}
	if c := r.Commit; c != nil {
		if c.WALSyncs > 0 {
			p("WAL syncs during run: %d (%.2f commits per sync)\n", c.WALSyncs, float64(c.Commits)/float64(c.WALSyncs))
		} else {
			p("WAL syncs during run: 0 (%d commits)\n", c.Commits)
		}
		mb := float64(c.WALBytes) / 1e6
		if r.Elapsed > 0 {
			p("WAL written during run: %.3f MB (%.3f MB/s)\n", mb, mb/r.Elapsed.Seconds())
		} else {
			p("WAL written during run: %.3f MB\n", mb)
		}
	}
	if w := r.Engine; w != nil && w.WAL.Flushes > 0 {
		wait := 0.0
		if w.Txn.Commits > 0 {
			wait = float64(w.WAL.CommitWaitNanos) / float64(w.Txn.Commits) / 1e6
		}
		// Syncs above counts fdatasync calls; a flush is a round of
		// write and sync, one sync unless it crosses into a new segment.
		p("WAL flushes during run: %d rounds of write and sync, commit wait average = %.3f ms\n", w.WAL.Flushes, wait)
		p("WAL sync latency: %s\n", w.WAL.SyncLatency)
		p("WAL commits per sync: %s (per flush round, the WAL writer's and checkpoints' rounds counting 0; the last 32 rounds are counted when the database closes)\n", w.WAL.CommitsPerSync)
		p("full-page images during run: %d (%d checkpoints)\n", w.Checkpoint.FullPageImages, w.Checkpoint.Count)
	}
	if w := r.Engine; w != nil && w.CLOG.Lookups > 0 {
		writeCLOGReport(p, w)
	}
	if w := r.Engine; w != nil && w.Heap.Blocks > 0 {
		writeVacuumReport(p, r.HeapBlocksBefore, w)
		if u := r.Tables; u != nil && u.UpdatedPagesBefore > 0 {
			p("heap pages holding accounts, tellers or branches rows at end: %.1f MiB (%.2fx at start); history rows: %.1f MiB (a page holding both counts in both)\n",
				float64(u.UpdatedPages)*8192/(1<<20), float64(u.UpdatedPages)/float64(u.UpdatedPagesBefore), float64(u.HistoryPages)*8192/(1<<20))
		}
	}
	if r.Aborted > 0 {
		p("number of aborted clients: %d\n", r.Aborted)
	}
	if r.Invariant == nil && r.Workload == SelectOnly {
		p("invariant: not checked (a select-only run writes no balance)\n")
	}
	if inv := r.Invariant; inv != nil && inv.Err != nil {
		p("invariant: not checked (%v)\n", inv.Err)
	} else if inv != nil {
		word := "ok"
		if !inv.OK {
			word = "VIOLATED"
		}
		s := inv.Sums
		run := ""
		switch rc := inv.Run; {
		case rc == nil:
		case !rc.Applied.Exact:
			run = "; the run's changes not compared: a transaction ended with an error that leaves open whether it committed"
		default:
			a := rc.Applied
			run = fmt.Sprintf("; the run's %d commits: %d new history rows, accounts %+d, tellers %+d", a.Commits, rc.HistoryRows, rc.Accounts, rc.Tellers)
			if !rc.OK {
				run += fmt.Sprintf(" (want %d, %+d, %+d)", a.Commits, a.Delta, a.wantTellers())
			}
		}
		p("invariant: %s (accounts=%d, tellers=%d, branches=%d, history=%d%s)\n",
			word, s.Accounts, s.Tellers, s.Branches, s.History, run)
	}
	return ew.err
}

// errWriter keeps the first write error so the report reads top to bottom.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}

// writeVacuumReport prints the heap's growth over the run (table bloat)
// and what vacuum and the visibility map did: the figures of the 2011
// visibility-map experiment and of the bloat check.
func writeVacuumReport(p func(string, ...any), before uint64, w *engine.Stats) {
	mib := func(blocks uint64) float64 { return float64(blocks) * 8192 / (1 << 20) }
	growth := 0.0
	if before > 0 {
		growth = float64(w.Heap.Blocks) / float64(before)
	}
	p("heap size: %.1f MiB at start, %.1f MiB at end (%.2fx)\n", mib(before), mib(w.Heap.Blocks), growth)
	p("vacuum during run: %d runs (%d autovacuum), %d pages scanned, %d skipped as all-visible, %d read from disk through its ring (%d buffers taken from the pool), %d versions removed, %d out-of-line value chunks removed, %d frozen, %d empty pages cut off the heap's end\n",
		w.Vacuum.Runs, w.Vacuum.AutovacuumRuns, w.Vacuum.PagesScanned, w.Vacuum.PagesSkipped, w.Vacuum.PagesRead, w.Vacuum.RingSwept, w.Vacuum.TuplesRemoved, w.Vacuum.ChunksRemoved, w.Vacuum.TuplesFrozen, w.Vacuum.PagesTruncated)
	p("buffer pool during run: %d hits, %d misses, %d page reads, %d page writes, %d evictions\n",
		w.Buffers.Hits, w.Buffers.Misses, w.Buffers.Reads, w.Buffers.Writes, w.Buffers.Evictions)
	p("pruning during run: %d pages pruned by updates (%d versions and %d out-of-line value chunks of aborted writes removed), %d by reads (%d versions and %d chunks removed), %d by vacuum\n",
		w.Heap.PrunesByUpdate, w.Heap.PrunedByUpdate, w.Heap.ChunksPrunedByUpdate, w.Heap.PrunesByRead, w.Heap.PrunedByRead, w.Heap.ChunksPrunedByRead, w.Vacuum.PagesPruned)
	p("visibility map during run: %d bits set, %d cleared; hint bits set: %d\n", w.VisibilityMap.BitsSet, w.VisibilityMap.BitsCleared, w.Heap.HintBitsSet)
}

// writeCLOGReport prints the engine's CLOG counters over the run: lookups
// and hit ratio, page I/O, lock waits (count, total and mean wait), and the
// group updates with their average size (PostgreSQL 17 shows the first
// three in pg_stat_slru; the waits are what its LWLock wait events count).
func writeCLOGReport(p func(string, ...any), w *engine.Stats) {
	p("CLOG lookups during run: %d (%.2f%% hits), %d page reads, %d page writes\n",
		w.CLOG.Lookups, 100*float64(w.CLOG.Hits)/float64(w.CLOG.Lookups), w.CLOG.PageReads, w.CLOG.PageWrites)
	avg := 0.0
	if w.CLOG.LockWaits > 0 {
		avg = float64(w.CLOG.LockWaitNanos) / float64(w.CLOG.LockWaits) / 1e3
	}
	p("CLOG lock waits: %d, %.3f ms in total, %.1f µs average\n",
		w.CLOG.LockWaits, float64(w.CLOG.LockWaitNanos)/1e6, avg)
	if w.CLOG.GroupUpdates > 0 {
		p("CLOG group updates: %d, average group size %.2f\n",
			w.CLOG.GroupUpdates, float64(w.CLOG.GroupMembers)/float64(w.CLOG.GroupUpdates))
	} else {
		p("CLOG group updates: 0\n")
	}
}

// plural is n and the noun, with an s unless n is 1.
func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
