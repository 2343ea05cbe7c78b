package engine

import (
	"mvkv/clog"
	"mvkv/visibility"
	"mvkv/wal"
)

// Stats are the engine's counters since Open, grouped by subsystem as
// pebble's Metrics and bbolt's Stats are. It is a value: take two snapshots
// and Sub them for the activity in between. Counters are read one by one
// without a common lock, so a snapshot taken while the database is busy may
// be off by the operations in flight. Gauges (Heap.Blocks, Index.Keys) give
// the level when Stats was called, and Sub keeps the later one.
type Stats struct {
	// Txn counts commits, aborts, early-released commits, dependency
	// waits and deadlocks.
	Txn TxnStats
	// WAL is the write-ahead log's activity: records and bytes inserted,
	// writes, fsyncs and their latency, group-commit rounds and commits
	// per round, commit wait (see wal.Stats).
	WAL wal.Stats
	// Checkpoint counts checkpoints and the full-page images they
	// caused.
	Checkpoint CheckpointStats
	// CLOG is the commit log's activity: status lookups and sets, SLRU
	// buffer hits and misses, pages read and written, bank lock waits,
	// group updates and truncations (see clog.Stats).
	CLOG clog.Stats
	// Buffers is the shared buffer pool's activity: hits, misses, reads,
	// writes and evictions.
	Buffers BufferStats
	// Heap is the heap's size in blocks, pruning by updates and reads,
	// and hint bits.
	Heap HeapStats
	// Index is the number of keys in the index and how index-only
	// reads fared (all-visible pages against heap fetches).
	Index IndexStats
	// VisibilityMap counts the visibility map's bits set and cleared and
	// its pages read and written (see visibility.MapStats).
	VisibilityMap visibility.MapStats
	// Vacuum sums what every vacuum run (manual and autovacuum) did.
	Vacuum VacuumTotals
}

// TxnStats count transactions (PostgreSQL's pg_stat_database xact_commit,
// xact_rollback and deadlocks).
type TxnStats struct {
	// Commits counts the transactions that wrote and committed, each once
	// it is visible to new snapshots: a snapshot taken after Commits was
	// read sees every commit it counts, so a caller that keeps something
	// computed from a snapshot (a count of the keys, say) may reuse it
	// while Commits is unchanged. Aborts counts the rollbacks.
	Commits, Aborts uint64
	// EarlyCommits counts the synchronous commits that became visible and
	// released their row locks before their commit record was durable
	// (Options.EarlyLockRelease); DependencyWaits the transactions
	// (read-only ones included) that, before reporting success, waited
	// for the WAL to become durable past such a commit they could have
	// seen or overwritten.
	EarlyCommits, DependencyWaits uint64
	// Deadlocks counts row lock waits refused with ErrDeadlock.
	Deadlocks uint64
	// LockWaits counts the times a transaction slept for a row lock that
	// another held: the contention on hot keys, as PostgreSQL's
	// log_lock_waits reports each long one. A waiter that a release woke
	// and that found the key taken again by a writer that came first
	// sleeps, and counts, again.
	LockWaits uint64
	// LockWaiters is the number of transactions waiting for a row lock
	// when Stats was called (a gauge, kept as it is by Sub), as
	// PostgreSQL's pg_stat_activity shows backends with a Lock wait
	// event: a caller can tell that a transaction has reached a wait
	// behind another's write.
	LockWaiters uint64
}

// Sub returns s minus o, counter by counter.
func (s TxnStats) Sub(o TxnStats) TxnStats {
	return TxnStats{
		Commits: s.Commits - o.Commits, Aborts: s.Aborts - o.Aborts,
		EarlyCommits: s.EarlyCommits - o.EarlyCommits, DependencyWaits: s.DependencyWaits - o.DependencyWaits,
		Deadlocks: s.Deadlocks - o.Deadlocks, LockWaits: s.LockWaits - o.LockWaits, LockWaiters: s.LockWaiters,
	}
}

// CheckpointStats count checkpoints and what they cause.
type CheckpointStats struct {
	// Count is the number of checkpoints completed (time-driven, WAL
	// size-driven, requested and at Close).
	Count uint64
	// FullPageImages counts full-page images logged: the first change to
	// a heap page after a checkpoint's redo point logs the whole page
	// (PostgreSQL's full_page_writes; pg_stat_wal's wal_fpi).
	FullPageImages uint64
	// CommitsAtRedo is Txn.Commits when the last checkpoint took its redo
	// point (0 before the first one since Open): Txn.Commits minus it
	// counts the commits logged after that point, which recovery after a
	// crash now would replay (Redis's rdb_changes_since_last_save; a
	// commit under way at the redo point may be counted among them). A
	// gauge, kept as it is by Sub.
	CommitsAtRedo uint64
}

// Sub returns s minus o, counter by counter.
func (s CheckpointStats) Sub(o CheckpointStats) CheckpointStats {
	return CheckpointStats{Count: s.Count - o.Count, FullPageImages: s.FullPageImages - o.FullPageImages, CommitsAtRedo: s.CommitsAtRedo}
}

// BufferStats count the heap buffer pool's events (Options.SharedBuffers;
// PostgreSQL's shared_blks_hit and shared_blks_read).
type BufferStats struct {
	Hits      uint64 // lookups that found the page in the pool
	Misses    uint64 // lookups that had to load the page (or wait for another loading it)
	Reads     uint64 // pages read from the heap files
	Writes    uint64 // pages written to the heap files (evictions and checkpoints)
	Evictions uint64 // frames taken from one page for another
}

// Sub returns s minus o, counter by counter.
func (s BufferStats) Sub(o BufferStats) BufferStats {
	return BufferStats{
		Hits: s.Hits - o.Hits, Misses: s.Misses - o.Misses,
		Reads: s.Reads - o.Reads, Writes: s.Writes - o.Writes, Evictions: s.Evictions - o.Evictions,
	}
}

// HeapStats describe the heap: its size, pruning between vacuums and hint
// bits.
type HeapStats struct {
	// Blocks is the heap's size in 8 KiB blocks when Stats was called (a
	// gauge, kept as it is by Sub), so a run's table bloat can be read off
	// two snapshots.
	Blocks uint64
	// PrunesByUpdate counts heap pages pruned by a writer that found the
	// page without room for its version, PrunesByRead those pruned by a
	// reader that found the page without room for another tuple the size
	// of the one it read; both only when at least four versions may have
	// died on the page since it was last pruned (pruning between vacuums,
	// as PostgreSQL's heap_page_prune_opt). PrunedByUpdate and
	// PrunedByRead count the versions they freed, ChunksPrunedByUpdate
	// and ChunksPrunedByRead the out-of-line value chunks: those of
	// aborted (or crashed) writes, the only chunks pruning outside vacuum
	// frees (a dead version's chunks wait for vacuum). Vacuum's own
	// pruning is counted in VacuumTotals.PagesPruned,
	// VacuumTotals.TuplesRemoved and VacuumTotals.ChunksRemoved.
	PrunesByUpdate, PrunedByUpdate, PrunesByRead, PrunedByRead uint64
	ChunksPrunedByUpdate, ChunksPrunedByRead                   uint64
	// HintBitsSet counts hint bits written by readers, pruning and
	// vacuum; HintHits the CLOG lookups a hint bit made unnecessary.
	HintBitsSet, HintHits uint64
}

// Sub returns s minus o, counter by counter; Blocks keeps s's value.
func (s HeapStats) Sub(o HeapStats) HeapStats {
	return HeapStats{
		Blocks:         s.Blocks,
		PrunesByUpdate: s.PrunesByUpdate - o.PrunesByUpdate, PrunedByUpdate: s.PrunedByUpdate - o.PrunedByUpdate,
		PrunesByRead: s.PrunesByRead - o.PrunesByRead, PrunedByRead: s.PrunedByRead - o.PrunedByRead,
		ChunksPrunedByUpdate: s.ChunksPrunedByUpdate - o.ChunksPrunedByUpdate, ChunksPrunedByRead: s.ChunksPrunedByRead - o.ChunksPrunedByRead,
		HintBitsSet: s.HintBitsSet - o.HintBitsSet, HintHits: s.HintHits - o.HintHits,
	}
}

// IndexStats describe the key index and the key-only reads (Txn.Exists,
// Txn.ScanKeys, Txn.Count) that answer from it and the visibility map.
type IndexStats struct {
	// Keys is the number of keys in the index (live, deleted or never
	// committed) when Stats was called, a gauge: Sub keeps the later
	// value.
	Keys uint64
	// AllVisible counts keys that key-only reads answered from the index
	// and the visibility map alone, their heap page being all-visible;
	// HeapFetches those that needed the heap (PostgreSQL's "Heap
	// Fetches" of an index-only scan).
	AllVisible, HeapFetches uint64
}

// Sub returns s minus o, counter by counter; Keys keeps s's value.
func (s IndexStats) Sub(o IndexStats) IndexStats {
	return IndexStats{Keys: s.Keys, AllVisible: s.AllVisible - o.AllVisible, HeapFetches: s.HeapFetches - o.HeapFetches}
}

// VacuumTotals sum the work of every vacuum run since Open, manual and
// autovacuum (VacuumStats describes one run; PostgreSQL's
// pg_stat_progress_vacuum and pg_stat_all_tables show the like).
type VacuumTotals struct {
	// Runs counts vacuum runs of both kinds; AutovacuumRuns those that
	// autovacuum started. AutovacuumFailures counts autovacuum runs that
	// ended in an error (each is logged, a repeat of the same error at
	// most every 10 minutes).
	Runs, AutovacuumRuns, AutovacuumFailures uint64
	// PagesScanned and PagesSkipped count heap pages examined by the
	// first pass and skipped as all-visible; PagesPruned the pages the
	// first pass changed; PagesRead the pages read from disk and
	// RingSwept the buffer frames taken from the pool for its ring (see
	// VacuumStats).
	PagesScanned, PagesSkipped, PagesPruned, PagesRead, RingSwept uint64
	// PagesTruncated counts the empty pages cut off the end of the heap.
	PagesTruncated uint64
	// TuplesRemoved counts versions removed, TuplesFrozen tuples frozen.
	// PagesCompacted counts page compactions outside pruning: vacuum's
	// second pass, and a writer's when a tuple fits a page only with the
	// free space left in place by an older version of mvkv.
	TuplesRemoved, PagesCompacted, TuplesFrozen uint64
	// ChunksRemoved counts the out-of-line value chunks vacuum freed
	// (VacuumStats.ChunksRemoved summed): those of aborted writes its
	// pruning freed, and those of the versions it removed.
	ChunksRemoved uint64
	// ChunksOwed, a gauge, is how many out-of-line value chunks vacuum
	// still owes a free: those of versions a run's first pass removed and
	// its second has not freed yet (mid-run, or left by a run that
	// stopped, or found after a crash), and those an Open that rebuilt the
	// index found no version naming. Autovacuum, the next run or Close
	// frees them; some may already be gone, which the run that looks
	// finds. A count that stays up with autovacuum on says vacuum cannot
	// finish (see its log).
	ChunksOwed uint64
	// DeadTuples, a gauge, is the dead-tuple count autovacuum compares
	// with its threshold (PostgreSQL's n_dead_tup): versions superseded
	// or deleted by commits and placed by aborts, less what pruning by
	// updates and reads freed, less the count each completed Vacuum saw
	// at its start, never below zero. It is an estimate, as n_dead_tup
	// is; a restart restores it from the index file written at the last
	// checkpoint, plus what the replayed transactions left, less the
	// versions the replayed pruning records freed (and some chunks,
	// which recovery cannot tell from versions: after a crash it may err
	// low), or, without an index file, from a scan of the heap.
	DeadTuples uint64
}

// Sub returns s minus o, counter by counter.
func (s VacuumTotals) Sub(o VacuumTotals) VacuumTotals {
	return VacuumTotals{
		Runs: s.Runs - o.Runs, AutovacuumRuns: s.AutovacuumRuns - o.AutovacuumRuns, AutovacuumFailures: s.AutovacuumFailures - o.AutovacuumFailures,
		PagesScanned: s.PagesScanned - o.PagesScanned, PagesSkipped: s.PagesSkipped - o.PagesSkipped,
		PagesPruned: s.PagesPruned - o.PagesPruned, PagesRead: s.PagesRead - o.PagesRead, RingSwept: s.RingSwept - o.RingSwept,
		TuplesRemoved: s.TuplesRemoved - o.TuplesRemoved, PagesCompacted: s.PagesCompacted - o.PagesCompacted,
		TuplesFrozen: s.TuplesFrozen - o.TuplesFrozen, PagesTruncated: s.PagesTruncated - o.PagesTruncated,
		ChunksRemoved: s.ChunksRemoved - o.ChunksRemoved,
		ChunksOwed:    s.ChunksOwed,
		DeadTuples:    s.DeadTuples,
	}
}

// Sub returns the counters of s minus those of o, group by group; gauges
// keep s's value.
func (s Stats) Sub(o Stats) Stats {
	return Stats{
		Txn:           s.Txn.Sub(o.Txn),
		WAL:           s.WAL.Sub(o.WAL),
		Checkpoint:    s.Checkpoint.Sub(o.Checkpoint),
		CLOG:          s.CLOG.Sub(o.CLOG),
		Buffers:       s.Buffers.Sub(o.Buffers),
		Heap:          s.Heap.Sub(o.Heap),
		Index:         s.Index.Sub(o.Index),
		VisibilityMap: s.VisibilityMap.Sub(o.VisibilityMap),
		Vacuum:        s.Vacuum.Sub(o.Vacuum),
	}
}

// Stats returns the current counters. Safe to call concurrently.
func (db *DB) Stats() Stats {
	p := db.pool.Stats()
	return Stats{
		Txn: TxnStats{
			Commits: db.stats.commits.Load(), Aborts: db.stats.aborts.Load(),
			EarlyCommits: db.earlyCommits.Load(), DependencyWaits: db.dependencyWaits.Load(),
			Deadlocks: db.locks.deadlocks.Load(), LockWaits: db.locks.waits.Load(), LockWaiters: uint64(max(db.locks.waiting.Load(), 0)),
		},
		WAL:        db.wal.Stats(),
		Checkpoint: CheckpointStats{Count: db.stats.checkpoints.Load(), FullPageImages: db.stats.fpis.Load(), CommitsAtRedo: db.ckptCommits.Load()},
		CLOG:       db.clog.Stats(),
		Buffers:    BufferStats{Hits: p.Hits, Misses: p.Misses, Reads: p.Reads, Writes: p.Writes, Evictions: p.Evictions},
		Heap: HeapStats{
			Blocks:         uint64(db.pool.NBlocks()),
			PrunesByUpdate: db.stats.prunesByUpdate.Load(), PrunedByUpdate: db.stats.prunedByUpdate.Load(),
			PrunesByRead: db.stats.prunesByRead.Load(), PrunedByRead: db.stats.prunedByRead.Load(),
			ChunksPrunedByUpdate: db.stats.chunksByUpdate.Load(), ChunksPrunedByRead: db.stats.chunksByRead.Load(),
			HintBitsSet: db.stats.hintBitsSet.Load(), HintHits: db.stats.hintHits.Load(),
		},
		Index: IndexStats{
			Keys:       uint64(db.idx.len()),
			AllVisible: db.stats.indexOnlyVisible.Load(), HeapFetches: db.stats.indexOnlyHeapFetches.Load(),
		},
		VisibilityMap: db.vm.Stats(),
		Vacuum: VacuumTotals{
			Runs: db.vac.runs.Load(), AutovacuumRuns: db.av.runs.Load(), AutovacuumFailures: db.av.failures.Load(),
			PagesScanned: db.vac.pagesScanned.Load(), PagesSkipped: db.vac.pagesSkipped.Load(),
			PagesPruned: db.vac.pagesPruned.Load(), PagesRead: db.vac.pagesRead.Load(), RingSwept: db.vac.ringSwept.Load(),
			TuplesRemoved: db.vac.tuplesRemoved.Load(), PagesCompacted: db.vac.pagesCompacted.Load(),
			TuplesFrozen: db.vac.tuplesFrozen.Load(), PagesTruncated: db.vac.pagesTruncated.Load(),
			ChunksRemoved: db.vac.chunksRemoved.Load(), ChunksOwed: uint64(db.vac.debt.len()),
			DeadTuples: uint64(max(db.av.dead.Load(), 0)),
		},
	}
}
