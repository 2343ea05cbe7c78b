package engine

import (
	"context"
	"sync"

	"mvkv/wal"
)

// CommitAsync is Commit split in two, for a caller that pipelines
// transactions: a server that has read several write requests of one client
// and wants them to share one WAL flush instead of waiting for a flush per
// request. CommitAsync appends the commit record and returns at once; the
// rest of the commit (the wait for the flush, the CLOG, leaving the running
// table, releasing the row locks) runs on its own goroutine, in the order of
// docs/DESIGN.md rule 2, and the returned CommitWait reports its outcome.
//
// Rule 2 holds unchanged: until the commit record is durable the transaction
// stays invisible to every snapshot and keeps its row locks, so the caller
// must not acknowledge it before Wait returns nil. The completion does not
// depend on the caller: the caller's next transaction may write a key this
// one wrote, and its Put waits for the row lock exactly as another client's
// would, until this commit has completed.
//
// after, if not nil, is an earlier CommitAsync of the same caller: this
// commit becomes visible (CLOG, running table) only after that one has, so
// a pipeline's transactions become visible in the order they were
// committed, as their commit records are in the WAL. Both wait for the
// flush concurrently, so one flush normally covers a whole pipeline.
//
// With synchronous commit off the flush is not waited for; the commit still
// completes after after's.
//
// CommitAsync returns the same errors as Commit does before the commit
// record exists (ErrTxnDone; the error that aborted the transaction, after
// rolling back; the context's error, after rolling back; ErrClosed; an
// error wrapping ErrIOFailure if the record could not be appended). A
// transaction that wrote nothing returns a CommitWait that is already done.
// Errors after the record exists (ErrWALSyncFailed, ErrIOFailure,
// ErrCorruption) come from Wait, and leave the outcome to recovery, as
// Commit's do. Close waits for every commit in progress to complete.
//
// The idea is PostgreSQL's commit split between XLogInsert of the commit
// record and XLogFlush, with the wait moved off the caller, as pebble's
// commit pipeline publishes a batch only after its WAL sync.
//
// Rejected: releasing the row locks when the commit record is appended
// (early lock release, as in Shore-MT's Aether). A later transaction of
// the key would then commit after this one in the WAL, so it could never
// be durable without it, and a pipeline of writes to one key could share
// one flush; but it would read this transaction's write before that write
// is durable, which rule 2 forbids.
func (t *Txn) CommitAsync(after *CommitWait) (*CommitWait, error) {
	st, err := t.end()
	if st == nil {
		if err != nil {
			return nil, err
		}
		w := &CommitWait{done: make(chan struct{})}
		close(w.done)
		return w, nil
	}
	db, sync := t.db, t.sync
	end, err := db.insertCommit(st)
	if err != nil {
		return nil, err
	}
	w := &CommitWait{done: make(chan struct{}), lsn: end}
	it := chainItem{w: w, st: st, end: end, sync: sync, after: after}
	if after != nil && after.chain != nil && after.chain.add(it) {
		return w, nil
	}
	ch := &commitChain{db: db, queue: []chainItem{it}, running: true}
	w.chain = ch
	go ch.run()
	return w, nil
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

// chainItem is one commit waiting in a commitChain.
type chainItem struct {
	w     *CommitWait
	st    *txnState
	end   wal.LSN
	sync  bool
	after *CommitWait // an earlier commit this one completes after; may be in another chain
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
		if last.sync {
			lastErr = ch.db.wal.Flush(last.end)
		}
		for i, it := range batch {
			var err error
			if it.sync {
				if i == len(batch)-1 {
					err = lastErr
				} else {
					err = ch.db.wal.Flush(it.end)
				}
			}
			it.w.complete(ch.db, it.st, err, it.after)
		}
	}
}

// complete runs the commit's second half once its flush (if any) has ended
// with err. It holds what insertCommit left held (closeMu and ckptInterlock
// shared), so a checkpoint cannot choose a redo point past this commit
// record until the CLOG has it, and Close waits.
func (w *CommitWait) complete(db *DB, st *txnState, err error, after *CommitWait) {
	if after != nil {
		<-after.done
	}
	if err != nil {
		db.ckptInterlock.RUnlock()
		db.closeMu.RUnlock()
		// The commit record may or may not be durable: the transaction
		// stays in the running table, invisible, until recovery decides.
		w.err = db.fail(err)
	} else {
		// Durable already (or synchronous commit is off): only the
		// CLOG, the running table and the row locks remain.
		w.err = db.completeCommit(st, w.lsn, false)
	}
	close(w.done)
}

// CommitWait is a commit in progress, returned by Txn.CommitAsync. Its
// methods are safe for concurrent use.
type CommitWait struct {
	done  chan struct{}
	lsn   wal.LSN
	err   error        // set before done is closed
	chain *commitChain // completing this commit; set before CommitAsync returns
}

// Wait returns once the commit has completed: nil means its commit record
// is durable (with synchronous commit), it is visible to new snapshots and
// its row locks are released, so it may be acknowledged. Otherwise it
// returns the commit's error (see CommitAsync), or ctx's error if ctx ends
// first; the commit then goes on completing, and must not be acknowledged.
func (w *CommitWait) Wait(ctx context.Context) error {
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
func (w *CommitWait) Done() <-chan struct{} { return w.done }

// LSN is the end of the commit record in the WAL (the position a flush must
// pass for it to be durable), or 0 for a transaction that wrote nothing.
func (w *CommitWait) LSN() uint64 { return uint64(w.lsn) }
