package engine

import (
	"fmt"
	"sync"
	"sync/atomic"

	"mvkv/visibility"
)

// txnState is the part of a transaction that other transactions see: its
// xid and whom it waits for. A writer that finds a key's row lock held
// waits in the key's queue until the holder has ended (committed or
// aborted, CLOG set, out of the running table, row locks released): the
// analog of PostgreSQL's XactLockTableWait (lockManager).
//
// A transaction's txnState exists from its first row lock, its xid only
// from the first version it places (procArray.assign): a write that places
// nothing, such as a delete of a missing key, holds its row lock without
// an xid, is never in the running table, and ends as a read-only
// transaction does, with no commit record to wait for. An xid is set once,
// by the owner, while waiters of its row locks may read it for their
// error messages, hence the atomic.
type txnState struct {
	xid atomic.Uint64 // 0 until assign

	// waitingFor is, while this transaction waits for a row lock, the
	// key's holder, or nil. A queued waiter's edge is moved to whoever
	// takes the key next; one that a release woke keeps naming the
	// holder that released, which waits for nothing, until it takes
	// the key or queues again (lockManager). Guarded by
	// lockManager.deadlockMu.
	waitingFor *txnState
	// waitingKey is the key whose row lock it waits for while waitingFor
	// is set, for the deadlock report. Guarded by
	// lockManager.deadlockMu.
	waitingKey []byte

	// locks are the keys whose row locks this transaction holds. Only the
	// owning transaction's goroutine touches it. It starts in lock1, so
	// that a transaction writing one key (most of the server's) does not
	// allocate for it.
	locks []string
	lock1 [1]string

	// lockWait is the transaction's place in a key's queue while it
	// waits for the key's row lock (it waits for one at a time). Owned
	// by the transaction's goroutine, its next link guarded by the
	// shard mutex of the key waited for.
	lockWait lockWaiter

	// stamp holds the payload of the transaction's commit or abort
	// record while it is inserted (timestampPayload). Only the owning
	// transaction's goroutine touches it.
	stamp [8]byte
}

// procArray is the running-transaction table and the xid counter, as
// PostgreSQL's procarray.c with GetNewTransactionId. Snapshots are taken
// under the same mutex that assigns xids and removes finished ones, so a
// snapshot never misses a transaction that is running.
type procArray struct {
	mu sync.Mutex
	// nextXid is the next xid to assign. Guarded by mu.
	nextXid uint64
	// running maps xid to state for every transaction with an xid that has
	// not ended. Guarded by mu.
	running map[uint64]*txnState

	// active counts running transactions, read without mu for
	// commit_siblings.
	active atomic.Int64

	// extend is called under mu with each xid before it is handed out,
	// as GetNewTransactionId calls ExtendCLOG under XidGenLock: the CLOG
	// starts a page as zeros when its first xid is assigned. An error
	// assigns nothing.
	extend func(xid uint64) error
}

func newProcArray(nextXid uint64, extend func(xid uint64) error) *procArray {
	return &procArray{nextXid: nextXid, running: make(map[uint64]*txnState), extend: extend}
}

// newTxnState returns the state of a transaction that has no xid yet.
func newTxnState() *txnState {
	st := &txnState{}
	st.locks = st.lock1[:0]
	return st
}

// name names the transaction in an error message.
func (st *txnState) name() string {
	if xid := st.xid.Load(); xid != 0 {
		return fmt.Sprintf("transaction %d", xid)
	}
	// An xid comes with the first version placed; a transaction that
	// has only locked keys (a delete of an absent key, an update that
	// changed nothing) has none.
	return "a transaction that has written nothing yet"
}

// assign gives st the next xid and enters it into the table, and returns
// the xid. st must not have one yet. It fails, assigning nothing, only if
// the CLOG cannot make room for a new page (an I/O error writing out
// another).
func (p *procArray) assign(st *txnState) (uint64, error) {
	p.mu.Lock()
	xid := p.nextXid
	if err := p.extend(xid); err != nil {
		p.mu.Unlock()
		return 0, err
	}
	st.xid.Store(xid)
	p.nextXid++
	p.running[xid] = st
	p.mu.Unlock()
	p.active.Add(1)
	return xid, nil
}

// remove takes a finished transaction out of the table. The caller must have
// set its CLOG status first (docs/DESIGN.md rule 2).
func (p *procArray) remove(st *txnState) {
	p.mu.Lock()
	delete(p.running, st.xid.Load())
	p.mu.Unlock()
	p.active.Add(-1)
}

// isRunning reports whether xid is in the running table, as PostgreSQL's
// TransactionIdIsInProgress. Together with rule 2's order (the CLOG status
// is set before the transaction leaves the table), a CLOG lookup made after
// isRunning returned false gives the xid's final status.
func (p *procArray) isRunning(xid uint64) bool {
	p.mu.Lock()
	_, ok := p.running[xid]
	p.mu.Unlock()
	return ok
}

// unfinished reports whether xid is running or not yet handed out (at or
// above the next xid): either way an "in progress" in the CLOG is not a
// crash's. Only an xid below the next one can have crashed; a tuple that
// names a later one was not written by this database's transactions (a
// damaged page: Verify reports it), and its inserter is not called aborted.
func (p *procArray) unfinished(xid uint64) bool {
	p.mu.Lock()
	_, ok := p.running[xid]
	ok = ok || xid >= p.nextXid
	p.mu.Unlock()
	return ok
}

// snapshot takes an MVCC snapshot, as GetSnapshotData.
func (p *procArray) snapshot() *visibility.Snapshot {
	p.mu.Lock()
	xip := make([]uint64, 0, len(p.running))
	for xid := range p.running {
		xip = append(xip, xid)
	}
	next := p.nextXid
	p.mu.Unlock()
	return visibility.NewSnapshot(next, xip)
}

// next returns the next xid that will be assigned.
func (p *procArray) next() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nextXid
}

// setNext raises the next xid (recovery found later xids in the WAL).
func (p *procArray) setNext(next uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if next > p.nextXid {
		p.nextXid = next
	}
}
