package engine

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// Autovacuum, the analog of PostgreSQL's autovacuum launcher and worker for
// a single table.
//
// Every transaction that ends reports the dead tuples it leaves: a commit
// the versions it superseded or deleted, an abort the versions it placed
// (pgstat's n_dead_tup). Every autovacuum_naptime the worker compares the
// count with
//
//	autovacuum_vacuum_threshold + autovacuum_vacuum_scale_factor * live tuples
//
// (PostgreSQL's vacuum threshold, live tuples being the keys in the index,
// our reltuples) and runs Vacuum when it is exceeded, or when the frozen
// horizon lags the vacuum horizon by autovacuum_freeze_max_age
// (freezeDue: PostgreSQL's anti-wraparound run, here what lets the CLOG be
// truncated under a workload that leaves no dead tuples); either is
// checked again once the run holds vacuum's lock (PostgreSQL's
// table_recheck_autovac: a VACUUM the run waited for has paid the count,
// and, if aggressive, advanced the frozen horizon). Every Vacuum that
// completes, autovacuum's or a caller's, subtracts the count it saw at its
// start, as PostgreSQL's pgstat_report_vacuum sets n_dead_tup after a
// manual VACUUM too; versions that were still visible
// to some snapshot are not counted again, so a long-running snapshot cannot
// make the worker vacuum at every nap for nothing, and later activity
// triggers the run that removes them.
//
// Pruning by updates and reads takes what it frees off the count
// (noteRemoved), as heap_page_prune reports to pgstat, so that a workload
// whose pages keep themselves pruned does not start runs with nothing left
// to do; its debt is then only what pruning cannot reach (deleted keys'
// index heads, out-of-line values, freezing), which the threshold covers.
//
// At a nap with no run due, the worker still frees the out-of-line chunks
// vacuum owes (chunkdebt.go: those of versions a run stopped between its
// passes, or cut off by a crash there, removed), reading only their pages:
// nothing else would start the run that frees them while the rest of the
// heap stays clean.
//
// A restart does not forget the debt, where PostgreSQL's statistics start
// from zero after a crash: each checkpoint's index file keeps the count,
// and Open adds what the transactions it replays left, each counted at its
// end in the log as noteEnd counts it (replayDead; one the crash cut off
// is aborted), less the versions the replayed pruning records free, as
// pruning and vacuum took them off the running count; or, rebuilding the
// index, the heap scan counts the dead versions it meets (aborted,
// deleted or replaced) and starts there. The
// worker's first check comes a second after open rather than a naptime
// later, so that a process restarted more often than the naptime still
// pays it.

// autovacuumState holds the dead-tuple count and the worker's counters.
type autovacuumState struct {
	dead     atomic.Int64  // dead tuples not yet paid by a completed Vacuum or a prune; never below 0
	runs     atomic.Uint64 // autovacuum runs that completed
	failures atomic.Uint64 // autovacuum runs that failed
}

// noteEnd records the dead tuples a transaction leaves: obsoleted versions
// if it committed, its own new versions if it aborted.
func (a *autovacuumState) noteEnd(committed bool, newVersions, obsoleted int) {
	if committed {
		a.dead.Add(int64(obsoleted))
	} else {
		a.dead.Add(int64(newVersions))
	}
}

// noteRemoved takes n tuples off the count: the versions a prune by an
// update or a read removed, as PostgreSQL's heap_page_prune reports what it
// reclaimed to pgstat, and, once any Vacuum completes (autovacuum's or a
// caller's), the count as it stood at that run's start. The count never
// goes below zero (pgstat clamps n_dead_tup the same way): a run subtracts
// the count it started from, which may include versions a prune removed
// during the run. Safe for concurrent use.
func (a *autovacuumState) noteRemoved(n int64) {
	for {
		old := a.dead.Load()
		if a.dead.CompareAndSwap(old, max(0, old-n)) {
			return
		}
	}
}

// autovacuumDue reports whether the dead tuples exceed the threshold or
// the frozen horizon lags too far (freezeDue), and how many dead tuples
// there are.
func (db *DB) autovacuumDue() (bool, int64) {
	dead := db.av.dead.Load()
	scale := max(0, db.opts.AutovacuumVacuumScaleFactor)   // negative: 0 (Options)
	threshold := max(0, db.opts.AutovacuumVacuumThreshold) // negative: 0 (Options)
	limit := float64(threshold) + scale*float64(db.idx.len())
	return float64(dead) > limit || db.freezeDue(), dead
}

// freezeDue reports whether the frozen horizon (the last run's
// RelFrozenXid) lags the vacuum horizon by AutovacuumFreezeMaxAge or
// more: PostgreSQL's anti-wraparound trigger, which starts a run whatever
// the dead tuples. Without it a workload that leaves no dead tuples to
// count (pgbench's history inserts, updates pruned on their own pages)
// would never vacuum, so never freeze, and the CLOG would grow for ever.
// The vacuum horizon, not the next xid: a snapshot that holds the horizon
// back would otherwise start a run at every nap that could not advance
// the frozen horizon past it.
func (db *DB) freezeDue() bool {
	horizon, frozen := db.oldestXmin(), db.vac.relFrozenXid.Load()
	return horizon-min(horizon, frozen) >= uint64(db.opts.AutovacuumFreezeMaxAge)
}

// freezeMinAge is VacuumFreezeMinAge capped at half of
// AutovacuumFreezeMaxAge, as PostgreSQL caps vacuum_freeze_min_age: a run
// that froze only what is older than the lag that started it would leave
// the frozen horizon that far behind, and freezeDue would start another
// at every nap.
func (db *DB) freezeMinAge() int64 {
	return min(db.opts.VacuumFreezeMinAge, db.opts.AutovacuumFreezeMaxAge/2)
}

// freezeTableAge is VacuumFreezeTableAge capped at 95% of
// AutovacuumFreezeMaxAge, as PostgreSQL caps vacuum_freeze_table_age, so
// that the run freezeDue starts is aggressive and advances the frozen
// horizon instead of starting again at every nap.
func (db *DB) freezeTableAge() int64 {
	return min(db.opts.VacuumFreezeTableAge, db.opts.AutovacuumFreezeMaxAge/20*19)
}

// payChunkDebtNow frees the chunks in vacuum's debt when no run is due:
// a VACUUM stopped by its context between its passes, or an Open after a
// crash there, leaves chunks no version names, whose space the next run
// would free but which nothing else may start for a long time. It reads
// only the pages that hold them, and skips the nap if a run, Verify or
// Backup holds vacuum's lock. Failures are the next run's to report.
func (db *DB) payChunkDebtNow(ctx context.Context) {
	if db.vac.debt.len() == 0 || !db.vac.mu.tryLock() {
		return
	}
	defer db.vac.mu.Unlock()
	freed, err := db.payChunkDebt(ctx, db.whileOpen)
	db.logger.Debug("autovacuum: chunks vacuum owed", "freed", freed, "err", err)
}

// autovacuumFirstCheck is how long after open the worker first compares
// the dead-tuple count with the threshold.
const autovacuumFirstCheck = time.Second

// autovacuumWorker runs until Close, waking autovacuumFirstCheck after open
// and then every AutovacuumNaptime.
func (db *DB) autovacuumWorker() {
	defer db.bgWG.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-db.stopBG
		cancel()
	}()
	// The first check comes soon after open, not a naptime later: the
	// debt open found (the index file's count and what recovery
	// replayed, or the heap scan's) is owed now, and a server
	// restarted more often than the naptime would otherwise never vacuum
	// (PostgreSQL's launcher likewise starts its first worker at once).
	// The pause lets Open's caller start its work first.
	timer := time.NewTimer(min(db.opts.AutovacuumNaptime, autovacuumFirstCheck))
	defer timer.Stop()
	// A failure that repeats (a damaged page vacuum cannot read) is
	// logged when first seen and then at most every failureLogEvery,
	// with how often it failed in between, so that a short naptime does
	// not fill the log with one message.
	const failureLogEvery = 10 * time.Minute
	var lastErr string
	var lastLogged time.Time
	var suppressed int
	for {
		select {
		case <-db.stopBG:
			return
		case <-timer.C:
		}
		timer.Reset(db.opts.AutovacuumNaptime)
		due, dead := db.autovacuumDue()
		if db.testAutovacuumNap != nil {
			db.testAutovacuumNap(due)
		}
		if db.writable() != nil {
			continue
		}
		if !due {
			db.payChunkDebtNow(ctx)
			continue
		}
		st, err := db.vacuum(ctx, true)
		switch {
		case errors.Is(err, errVacuumNotDue):
			// A VACUUM ran while this one waited for the lock, and
			// paid the count.
		case err == nil:
			if suppressed > 0 {
				db.logger.Warn("autovacuum succeeded after failing", "last err", lastErr, "failures not logged since the last message", suppressed)
			}
			lastErr, suppressed = "", 0
			db.av.runs.Add(1)
			db.logger.Debug("autovacuum", "dead", dead, "removed", st.TuplesRemoved, "took", st.Duration)
		case errors.Is(err, context.Canceled), errors.Is(err, ErrClosed):
			return
		default:
			db.av.failures.Add(1)
			if msg := err.Error(); msg != lastErr || time.Since(lastLogged) >= failureLogEvery {
				attrs := []any{"err", err}
				if suppressed > 0 {
					attrs = append(attrs, "failures not logged since the last message", suppressed)
				}
				db.logger.Warn("autovacuum failed", attrs...)
				lastErr, lastLogged, suppressed = msg, time.Now(), 0
			} else {
				suppressed++
			}
		}
	}
}
