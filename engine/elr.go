package engine

import (
	"mvkv/clog"
	"mvkv/wal"
)

// Early lock release with commit-dependency waits (controlled lock
// violation).
//
// With Options.EarlyLockRelease on, a synchronous commit makes itself
// visible and releases its row locks as soon as its commit record is in
// the WAL, and only then waits for the flush that makes the record
// durable (Johnson et al., "Aether: a scalable approach to logging",
// VLDB 2010). What keeps this from acknowledging anything a crash could
// lose is the dependency rule of controlled lock violation (Graefe et al.,
// SIGMOD 2013): every transaction that could have seen or overwritten such
// a commit waits, before it reports success, until the WAL is durable past
// that commit.
//
// The dependency is tracked with one number, visibleLSN: the highest end
// of a commit record made visible before it was durable. A committer
// raises it before it sets the CLOG and leaves the running table
// (publishEarly); a transaction reads it after each snapshot is taken and
// after each row lock is granted (noteDependency). The snapshot is taken
// under the running table's mutex, which the committer's removal also
// takes, and a row lock is granted only after its holder has released it,
// which it does after leaving the table: so whatever commit a transaction
// can see, or find as the newest version under its row lock, had raised
// visibleLSN before the transaction read it. The transaction then waits
// for the WAL to be durable up to the largest value it read (waitDurable)
// before Commit returns; a writer's own commit record lies later in the
// WAL, so its own flush covers the dependency and the wait costs nothing
// more. The number over-approximates: a reader waits for the newest early
// commit at its snapshot, whether it read that commit's rows or not. It
// waits at most for a flush already under way, never longer.
//
// Asynchronous commits never raise visibleLSN: they are visible at once
// and durable later, as in PostgreSQL, and a transaction that reads them
// does not wait. A commit made with early lock release off raises nothing
// either: it is durable before it is visible.

// noteDependency records in t the highest commit LSN it may have observed
// so far. Called after a snapshot is taken and after a row lock is granted.
func (t *Txn) noteDependency() {
	if v := wal.LSN(t.db.visibleLSN.Load()); v > t.dep {
		t.dep = v
	}
}

// raiseVisibleLSN raises visibleLSN to at least end.
func (db *DB) raiseVisibleLSN(end wal.LSN) {
	for {
		cur := db.visibleLSN.Load()
		if cur >= uint64(end) || db.visibleLSN.CompareAndSwap(cur, uint64(end)) {
			return
		}
	}
}

// publishEarly is the visible half of an early-lock-release commit whose
// record ends at end, before its flush: it raises visibleLSN, marks the
// xid committed in the CLOG with end as its group LSN (so that neither a
// hint bit nor the CLOG page can reach disk before the record is durable,
// as for an asynchronous commit), ends the checkpoint interlock, takes the
// transaction out of the running table and releases its row locks. It is
// called with what insertCommit left held; on success closeMu stays held
// shared until the caller has waited for the flush, and the transaction
// counts in committingEarly, still open for commit_siblings, until the
// caller uncounts it when that wait ends. On a CLOG failure it
// releases both and returns the error, leaving the transaction in the
// running table, invisible, until recovery decides (as completeCommit
// does).
func (db *DB) publishEarly(st *txnState, end wal.LSN) error {
	db.raiseVisibleLSN(end)
	err := db.clog.SetStatus(st.xid.Load(), clog.StatusCommitted, uint64(end))
	db.ckptInterlock.RUnlock()
	if err != nil {
		db.closeMu.RUnlock()
		return db.fail(err)
	}
	// Counted before it leaves the running table, so that the count of
	// open transactions never dips in between.
	db.committingEarly.Add(1)
	db.finish(st)
	db.stats.commits.Add(1)
	db.earlyCommits.Add(1)
	return nil
}

// waitDurable returns once the WAL is durable up to dep, at once when it
// already is. It fails with the WAL's sticky failure (ErrWALSyncFailed) if
// the flush that was to make dep durable failed: a commit that depended
// on a record that may be lost is never acknowledged.
func (db *DB) waitDurable(dep wal.LSN) error {
	if dep == 0 || db.wal.FlushedLSN() >= dep {
		return nil
	}
	db.dependencyWaits.Add(1)
	if err := db.wal.FlushData(dep); err != nil {
		return db.fail(err)
	}
	return nil
}

// SetEarlyLockRelease turns early lock release on or off for the commits
// that start afterwards (see Options.EarlyLockRelease). Safe to call
// concurrently; commits in progress keep the order they started with.
func (db *DB) SetEarlyLockRelease(on bool) { db.elr.Store(on) }

// EarlyLockRelease reports whether synchronous commits release their locks
// and become visible before their commit record is durable.
func (db *DB) EarlyLockRelease() bool { return db.elr.Load() }

// WaitObserved returns once the WAL is durable past every early-released
// commit the transaction may have seen or overwritten so far (see
// Txn.Commit), at once when it already is. Commit waits for this itself;
// WaitObserved is for a caller that reports something it read in a
// transaction it rolls back (an error such as "value is not an integer"
// tells what the value was, and ErrSerializationFailure that another
// transaction changed the key), and may be called after Rollback. It returns
// ErrWALSyncFailed if the flush failed, and then what was read must not be
// reported. Like the Txn, it is not safe for concurrent use.
func (t *Txn) WaitObserved() error { return t.db.waitDurable(t.dep) }
