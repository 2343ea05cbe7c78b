package engine

import (
	"context"
	"errors"
	"sync"

	"mvkv/wal"
)

// CommitAsync is Commit split in two, for a caller that pipelines
// transactions: a server that has read several write requests of one client
// and wants them to share one WAL flush instead of waiting for a flush per
// request. CommitAsync appends the commit record and returns at once; the
// rest of the commit runs on its own goroutine, in Commit's order, and the
// returned CommitWait reports its outcome.
//
// With early lock release off, the rest is the wait for the flush, the
// CLOG, leaving the running table and releasing the row locks: until the
// commit record is durable the transaction stays invisible to every
// snapshot and keeps its row locks, and the caller's next transaction that
// writes a key this one wrote waits for the row lock exactly as another
// client's would, until this commit has completed. With early lock release
// on (a synchronous commit, and after, if any, already visible),
// CommitAsync itself makes the transaction visible and releases its row
// locks before it returns, and only the flush is left: the caller's next
// transaction of the same key takes the lock at once, its commit record
// follows this one in the WAL, and a pipeline of writes to one key shares
// one flush. Either way the caller must not acknowledge the commit before
// Wait returns nil, and Wait returns nil only once the WAL is durable past
// the commit record and past every early-released commit the transaction
// may have seen or overwritten (see Txn.Commit). A transaction that wrote
// nothing gets a CommitWait that completes when that dependency is
// durable, at once when it already is: a server holds a read's reply until
// then.
//
// after, if not nil, is an earlier CommitAsync of the same caller in the
// same database (else CommitAsync returns an error before it ends the
// transaction): this
// commit becomes visible (CLOG, running table) only after that one has, so
// a pipeline's transactions become visible in the order they were
// committed, as their commit records are in the WAL. Both wait for the
// flush concurrently, so one flush normally covers a whole pipeline.
//
// With synchronous commit off the flush is not waited for; the commit still
// completes after after's, and if a failure has stopped writes by then (after's
// flush failed, say) it does not become visible and Wait returns that
// failure, as PostgreSQL commits nothing after a failed WAL write.
//
// CommitAsync returns the same errors as Commit does before the commit
// record exists (ErrTxnManaged, doing nothing, inside DB.Update or DB.View;
// ErrTxnDone; the error that aborted the transaction, after
// rolling back; the context's error, after rolling back a transaction that
// placed a version; ErrClosed; the failure that stopped writes,
// ErrWALSyncFailed or ErrIOFailure, if the WAL refused the record, having
// failed a write or sync since the transaction began: the transaction is
// then rolled back as an abort does, its xid aborted, out of the running
// table, its row locks released, since a commit whose record was never
// appended cannot be found by recovery).
// Errors after the record exists (ErrWALSyncFailed, ErrIOFailure,
// ErrCorruption) come from Wait, and leave the outcome to recovery, as
// Commit's do. Close waits for every commit in progress to complete.
//
// The idea is PostgreSQL's commit split between XLogInsert of the commit
// record and XLogFlush, with the wait moved off the caller, as pebble's
// commit pipeline publishes a batch only after its WAL sync.
//
// Early lock release is Aether's (Shore-MT, VLDB 2010), made safe for
// readers by controlled lock violation (Graefe et al., SIGMOD 2013).
func (t *Txn) CommitAsync(after *CommitWait) (*CommitWait, error) {
	if t.managed {
		return nil, ErrTxnManaged
	}
	if after != nil && after.db != t.db {
		// Its chain would complete this commit in the other database.
		return nil, errors.New("mvkv: CommitAsync after a commit of another database; the transaction is still open")
	}
	st, err := t.end()
	db, dep := t.db, t.dep
	if st == nil {
		if err != nil {
			return nil, err
		}
		w := &CommitWait{db: db, done: make(chan struct{}), visible: true}
		if dep == 0 || db.wal.FlushedLSN() >= dep {
			close(w.done)
			return w, nil
		}
		w.start(db, chainItem{w: w, dep: dep, after: after})
		return w, nil
	}
	sync := t.sync
	end, err := db.insertCommit(st)
	if err != nil {
		return nil, err
	}
	w := &CommitWait{db: db, done: make(chan struct{}), lsn: end}
	it := chainItem{w: w, st: st, end: end, sync: sync, after: after, dep: dep}
	if sync && db.elr.Load() && (after == nil || after.isVisible()) {
		if err := db.publishEarly(st, end); err != nil {
			w.err = err
			close(w.done)
			return w, nil
		}
		it.early, w.visible = true, true
	}
	w.start(db, it)
	return w, nil
}

// start has it completed by after's chain if that is still running, or by
// a new chain.
func (w *CommitWait) start(db *DB, it chainItem) {
	after := it.after
	if after != nil && after.chain != nil && after.chain.add(it) {
		return
	}
	ch := &commitChain{db: db, queue: []chainItem{it}, running: true}
	w.chain = ch
	go ch.run()
}

// commitChain completes a caller's CommitAsync transactions in order on one
// goroutine: a commit whose after is still in progress joins after's chain
// instead of starting a goroutine of its own. A pipeline of 16 writes then
// costs one goroutine and one wait for a flush, not 16 goroutines each
// waiting for the same flush and each woken when it ends (in a
// redis-benchmark run with -P 16, docs/BENCHMARKS.md).
type commitChain struct {
	db      *DB
	mu      sync.Mutex
	queue   []chainItem // guarded by mu; oldest first
	running bool        // guarded by mu; false once run has returned
}

// chainItem is one commit waiting in a commitChain, or (st nil) a
// transaction without a commit record waiting for its dependency.
type chainItem struct {
	w     *CommitWait
	st    *txnState
	end   wal.LSN
	sync  bool
	after *CommitWait // an earlier commit this one completes after; may be in another chain
	early bool        // visible and unlocked already (publishEarly); only the flush is left
	dep   wal.LSN     // the highest early-released commit the transaction may have observed
}

// add appends it to the chain, and reports false when the chain's
// goroutine has already finished (the caller then starts a chain).
func (ch *commitChain) add(it chainItem) bool {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if !ch.running {
		return false
	}
	it.w.chain = ch
	ch.queue = append(ch.queue, it)
	return true
}

// run completes the queued commits, batch by batch, until the queue is
// empty. Every commit of a batch was inserted before the batch is taken,
// so a flush up to the last one makes them all durable; the others' Flush
// calls then return at once, and are made only so that the WAL counts
// each commit (commits per sync).
func (ch *commitChain) run() {
	for {
		ch.mu.Lock()
		batch := ch.queue
		ch.queue = nil
		if len(batch) == 0 {
			ch.running = false
			ch.mu.Unlock()
			return
		}
		ch.mu.Unlock()
		var lastErr error
		last := batch[len(batch)-1]
		if last.sync && last.st != nil {
			lastErr = ch.db.wal.Flush(last.end)
		}
		for i, it := range batch {
			var err error
			if it.sync && it.st != nil {
				if i == len(batch)-1 {
					err = lastErr
				} else {
					err = ch.db.wal.Flush(it.end)
				}
			}
			it.w.complete(ch.db, it, err)
		}
	}
}

// complete runs the commit's second half once its flush (if any) has ended
// with err, then waits for its dependency. It holds what insertCommit left
// held (closeMu, and ckptInterlock unless the commit was published early),
// so a checkpoint cannot choose a redo point past this commit record until
// the CLOG has it, and Close waits.
func (w *CommitWait) complete(db *DB, it chainItem, err error) {
	st := it.st
	if it.after != nil {
		<-it.after.done
	}
	switch {
	case st == nil:
		w.err = db.waitDurable(it.dep)
	case it.early:
		db.committingEarly.Add(-1) // counted by publishEarly
		db.closeMu.RUnlock()
		if err == nil {
			// dep lies below end (read before the insert), so a
			// synchronous commit's flush covered it.
			err = db.waitDurable(it.dep)
		}
		w.err = db.fail(err)
	case err != nil:
		db.ckptInterlock.RUnlock()
		db.closeMu.RUnlock()
		// The commit record may or may not be durable: the transaction
		// stays in the running table, invisible, until recovery decides.
		w.err = db.fail(err)
	default:
		// Durable already (or synchronous commit is off): only the
		// CLOG, the running table and the row locks remain, then the
		// dependency.
		w.err = db.completeCommit(st, w.lsn, false, !it.sync)
		if w.err == nil {
			w.err = db.waitDurable(it.dep)
		}
	}
	close(w.done)
}

// CommitWait is a commit in progress, returned by Txn.CommitAsync. Its
// methods are safe for concurrent use.
type CommitWait struct {
	db      *DB // the database it commits in
	done    chan struct{}
	lsn     wal.LSN
	err     error        // set before done is closed
	chain   *commitChain // completing this commit; set before CommitAsync returns
	visible bool         // visible (or nothing to make visible) when CommitAsync returned
}

// isVisible reports whether the commit is visible to new snapshots, or
// has ended otherwise, so that a later commit of the same caller may be
// published without overtaking it.
func (w *CommitWait) isVisible() bool {
	if w == nil || w.visible {
		return true
	}
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// Visible reports whether a transaction begun now would see this commit's
// writes (with early lock release, a synchronous commit is visible as soon
// as CommitAsync returns, before it is durable), or whether the commit has
// already ended otherwise, failed, so that there is nothing left to
// become visible. A caller that pipelines reads behind its own writes (a
// server reading a key its client has just set) may run the read at once
// when its last CommitAsync is Visible, and hold the read's reply behind
// that commit's by committing the read with CommitAsync too; otherwise it
// must Wait first, or the read would miss its own write. Safe for
// concurrent use; once true it stays true.
func (w *CommitWait) Visible() bool { return w.isVisible() }

// Wait returns once the commit has completed: nil means its commit record
// is durable (with synchronous commit), every early-released commit it
// depended on is durable, it is visible to new snapshots and its row locks
// are released, so it may be acknowledged. Otherwise it
// returns the commit's error (see CommitAsync), or ctx's error if ctx ends
// first; the commit then goes on completing, and must not be acknowledged.
// A nil ctx waits without a deadline. A nil *CommitWait stands for a
// commit that has completed with nothing to wait for (as CommitAsync
// takes a nil after): Wait returns nil, Visible is true, Done is closed
// and LSN is 0.
func (w *CommitWait) Wait(ctx context.Context) error {
	if w == nil {
		return nil
	}
	if ctx == nil {
		ctx = context.Background()
	}
	select {
	case <-w.done:
		return w.err
	default:
	}
	select {
	case <-w.done:
		return w.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Done is closed when the commit has completed, successfully or not; Wait
// then returns at once.
func (w *CommitWait) Done() <-chan struct{} {
	if w == nil {
		return closedChan
	}
	return w.done
}

// closedChan is the Done of a nil *CommitWait.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// LSN is the end of the commit record in the WAL (the position a flush must
// pass for it to be durable), or 0 for a transaction that wrote nothing.
func (w *CommitWait) LSN() uint64 {
	if w == nil {
		return 0
	}
	return uint64(w.lsn)
}
