package engine

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// lockManager holds row locks: one exclusive lock per key, held by a
// transaction from its first write of the key until it ends. A writer that
// finds the key locked waits for the holder to end (PostgreSQL waits on the
// xid that set the tuple's xmax; here the in-memory table plays the role of
// the tuple header's locker field, so no lock state is ever written to disk).
//
// Waiters queue per key, oldest first, and a release wakes only the first
// of them, as PostgreSQL's lock manager serves its wait queue in order
// (heap_lock_tuple takes the tuple lock first so that the waiters of a hot
// row queue there instead of all waiting on the xid). The woken waiter is
// not handed the lock: it retries, and a writer that arrives meanwhile and
// finds the key free may take it first (as sync.Mutex lets a running
// goroutine barge), in which case the woken waiter queues again at the
// front. A waiter that leaves the queue without the lock (timeout,
// cancellation, Close) after a release woke it passes the wake-up on, or
// the next would sleep on a free key.
//
// Rejected: every waiter sleeping on the holder's end, which woke them all
// at each release (with n writers waiting for one key, n wake-ups a
// release, all but one finding the key taken again); and granting the key
// to the woken waiter at the release, as PostgreSQL grants a lock, which
// made the key wait for one particular sleeping goroutine to be scheduled
// (a lock convoy, measured slower through the server). Through the server,
// with early lock release, few writes of even one hot key wait at all, and
// the queue saved no CPU that could be measured there; it is kept for its
// order and for the wake-ups it does not make.
//
// Deadlock detection: each waiter waits for exactly one transaction, so the
// waits-for graph is a set of chains. Before it sleeps, a waiter records its
// edge and follows the chain from the holder under deadlockMu; reaching
// itself means its edge closed a cycle, and it fails with ErrDeadlock instead
// of waiting. Because edges are added under one mutex, exactly the
// transaction that closes a cycle sees it, as with PostgreSQL's deadlock
// checker (which runs after deadlock_timeout instead of at once; checking at
// once costs little here because the check is a pointer walk). A queued
// waiter sleeps through the holder's end, so whoever takes the key next
// moves the edges of the waiters still queued to itself: a waiter's edge
// always names the key's holder, or the holder that has just ended when
// nobody holds the key, which waits for nothing.
//
// Lock order: a shard's mu, then deadlockMu.
type lockManager struct {
	seed   maphash.Seed
	shards [64]lockShard

	deadlockMu sync.Mutex

	// waiting counts the transactions sleeping on a row lock. A waiter
	// may have no xid yet (it gets one when it places its first version),
	// so the running table does not show it.
	waiting atomic.Int64
	// deadlocks counts the waits refused with ErrDeadlock, waits the
	// sleeps in a key's queue (Stats).
	deadlocks, waits atomic.Uint64
	// woken counts the waits a release ended, and requeued those of them
	// that found the key taken again by a writer that barged in: with
	// one wake-up per release, requeued stays near zero however many
	// wait.
	woken, requeued atomic.Uint64
}

type lockShard struct {
	mu sync.Mutex
	// holders maps a key to the transaction holding its lock. Guarded by mu.
	holders map[string]*txnState
	// queues maps a key to the transactions waiting for its lock, oldest
	// first; a key has an entry only while someone waits. Guarded by mu.
	queues map[string]lockQueue
	// peak is the most keys holders has held since it was made: a Go map
	// never gives back the room it grew to, and one transaction that
	// held a lock on a million keys (a DeleteRange) left every shard's
	// map thousands of slots wide for good, spread over megabytes, so
	// that each later lock and release missed the cache on it (vacuum's
	// row-lock try and release after a mass delete: 0.9 to 1.0 µs a key,
	// 0.25 µs with the map made anew). Guarded by mu.
	peak int
}

// lockShardShrink is the peak above which a shard's map, once empty
// again, is replaced by a new one: 64 shards of it are 16,384 keys.
const lockShardShrink = 256

// hold records me as key's holder; sh.mu is held and key is free. The
// waiters queued for key now wait for me: their edges in the waits-for
// graph move to me (lockManager's comment). me is running, so moving them
// closes no cycle.
func (lm *lockManager) hold(sh *lockShard, key string, me *txnState) {
	sh.holders[key] = me
	sh.peak = max(sh.peak, len(sh.holders))
	if len(sh.queues) == 0 {
		return
	}
	if q, ok := sh.queues[key]; ok {
		lm.deadlockMu.Lock()
		for w := q.head; w != nil; w = w.next {
			w.me.waitingFor = me
		}
		lm.deadlockMu.Unlock()
	}
}

// drop frees key; sh.mu is held. The map is made anew when it empties
// after it grew past lockShardShrink.
func (sh *lockShard) drop(key string) {
	delete(sh.holders, key)
	if len(sh.holders) == 0 && sh.peak > lockShardShrink {
		sh.holders = make(map[string]*txnState)
		sh.peak = 0
	}
}

func newLockManager() *lockManager {
	lm := &lockManager{seed: maphash.MakeSeed()}
	for i := range lm.shards {
		lm.shards[i].holders = make(map[string]*txnState)
		lm.shards[i].queues = make(map[string]lockQueue)
	}
	return lm
}

func (lm *lockManager) shard(key []byte) *lockShard {
	return &lm.shards[maphash.Bytes(lm.seed, key)%uint64(len(lm.shards))]
}

// rowLock takes the row lock on key for st, waiting at most lock_timeout,
// until ctx ends, Close, or a failure that stops writes (acquire).
func (db *DB) rowLock(ctx context.Context, key []byte, st *txnState) error {
	return db.locks.acquire(ctx, key, st, db.opts.LockTimeout, db.closing, db.failed, db.writable)
}

// lockWaiter is one transaction waiting in a key's queue.
type lockWaiter struct {
	me *txnState
	// wake gets a value when a release pops the waiter from the queue;
	// buffered, so that the release never blocks.
	wake chan struct{}
	next *lockWaiter
}

// wakeChans keeps lockWaiter.wake channels for reuse: a wait ends with
// its channel empty (its one wake-up received, or drained when it gives
// up), and the one-key writes of many clients would otherwise make one a
// wait.
var wakeChans = sync.Pool{New: func() any { return make(chan struct{}, 1) }}

// lockQueue is a key's waiters, oldest first.
type lockQueue struct{ head, tail *lockWaiter }

// enqueue adds w to key's queue: at the back, or at the front for a
// waiter that a release woke and that found the key taken again, so that
// a barging writer costs it its turn at most once. sh.mu is held.
func (sh *lockShard) enqueue(key string, w *lockWaiter, front bool) {
	q := sh.queues[key]
	w.next = nil
	switch {
	case q.head == nil:
		q.head, q.tail = w, w
	case front:
		w.next, q.head = q.head, w
	default:
		q.tail.next, q.tail = w, w
	}
	sh.queues[key] = q
}

// dequeue removes w from key's queue and reports whether it was there (a
// release pops a waiter before it wakes it). sh.mu is held.
func (sh *lockShard) dequeue(key string, w *lockWaiter) bool {
	q, ok := sh.queues[key]
	if !ok {
		return false
	}
	var prev *lockWaiter
	for x := q.head; x != nil; prev, x = x, x.next {
		if x != w {
			continue
		}
		if prev == nil {
			q.head = x.next
		} else {
			prev.next = x.next
		}
		if q.tail == x {
			q.tail = prev
		}
		x.next = nil
		if q.head == nil {
			delete(sh.queues, key)
		} else {
			sh.queues[key] = q
		}
		return true
	}
	return false
}

// wakeFirst pops key's oldest waiter, if any, and wakes it; key is free.
// sh.mu is held.
func (sh *lockShard) wakeFirst(key string) {
	if len(sh.queues) == 0 {
		return // the common case, at every write's end: nobody waits
	}
	q, ok := sh.queues[key]
	if !ok {
		return
	}
	w := q.head
	q.head, w.next = w.next, nil
	if q.head == nil {
		delete(sh.queues, key)
	} else {
		sh.queues[key] = q
	}
	w.wake <- struct{}{}
}

// acquire takes the row lock on key for me, waiting in key's queue while
// another transaction holds it. It returns ErrDeadlock, ErrLockTimeout
// (timeout > 0), ErrClosed when closing is closed, failure() when failed
// is closed, or the context's error. A holder whose commit failed never
// ends (it stays running until recovery decides), so the database's
// failure must end the wait.
func (lm *lockManager) acquire(ctx context.Context, key []byte, me *txnState, timeout time.Duration, closing, failed <-chan struct{}, failure func() error) error {
	sh := lm.shard(key)
	var deadline <-chan time.Time
	var w *lockWaiter // me's place in key's queue, once it has waited
	defer func() {
		if w != nil {
			wakeChans.Put(w.wake)
			w.wake = nil
		}
	}()
	for {
		sh.mu.Lock()
		holder := sh.holders[string(key)]
		if holder == nil {
			k := string(key)
			if w != nil {
				lm.deadlockMu.Lock()
				me.waitingFor, me.waitingKey = nil, nil
				lm.deadlockMu.Unlock()
			}
			lm.hold(sh, k, me)
			sh.mu.Unlock()
			me.locks = append(me.locks, k)
			return nil
		}
		if holder == me {
			sh.mu.Unlock()
			return nil
		}

		// Queued and given its edge under the shard's mutex, so that a
		// writer taking the key meanwhile finds it in the queue and
		// moves its edge (hold).
		front := w != nil
		if front {
			lm.requeued.Add(1)
		} else {
			w = &me.lockWait
			w.me, w.wake = me, wakeChans.Get().(chan struct{})
		}
		sh.enqueue(string(key), w, front)
		lm.deadlockMu.Lock()
		me.waitingFor, me.waitingKey = holder, key
		cycle := false
		for t, n := holder, 0; t != nil && n < 1<<20; t, n = t.waitingFor, n+1 {
			if t == me {
				cycle = true
				break
			}
		}
		var detail string
		if cycle {
			// Described under deadlockMu, while every edge of the
			// cycle is still in place.
			detail = describeCycle(me)
			me.waitingFor, me.waitingKey = nil, nil
		}
		lm.deadlockMu.Unlock()
		if cycle {
			sh.dequeue(string(key), w)
			sh.mu.Unlock()
			lm.deadlocks.Add(1)
			return fmt.Errorf("%w: %s", ErrDeadlock, detail)
		}
		sh.mu.Unlock()

		if timeout > 0 && deadline == nil {
			t := time.NewTimer(timeout)
			defer t.Stop()
			deadline = t.C
		}
		var err error
		lm.waits.Add(1)
		lm.waiting.Add(1)
		select {
		case <-w.wake:
		case <-ctx.Done():
			err = ctx.Err()
		case <-deadline:
			err = ErrLockTimeout
		case <-closing:
			err = ErrClosed
		case <-failed:
			err = failure()
		}
		lm.waiting.Add(-1)
		if err == nil {
			lm.woken.Add(1)
			continue
		}
		sh.mu.Lock()
		if !sh.dequeue(string(key), w) {
			// A release popped and woke me as I gave up. Its wake-up
			// is spent here (the channel is reused), and if the key is
			// still free the next waiter must hear of it.
			select {
			case <-w.wake:
			default:
			}
			if sh.holders[string(key)] == nil {
				sh.wakeFirst(string(key))
			}
		}
		lm.deadlockMu.Lock()
		if errors.Is(err, ErrLockTimeout) {
			// The key's holder now, which may not be the one first
			// waited for, nor the one me's edge names: a woken waiter's
			// edge names the holder that released until it queues
			// again, and a writer may have taken the key meanwhile.
			who := "a transaction that has ended"
			if h := sh.holders[string(key)]; h != nil {
				who = h.name()
			}
			err = fmt.Errorf("%w: waiting for %s", ErrLockTimeout, who)
		}
		me.waitingFor, me.waitingKey = nil, nil
		lm.deadlockMu.Unlock()
		sh.mu.Unlock()
		return err
	}
}

// maxCycleEdges bounds the waits an ErrDeadlock message lists.
const maxCycleEdges = 8

// describeCycle names every wait of the cycle that me's wait closes, as a
// chain from me back to me, as PostgreSQL's deadlock report lists each
// process of the cycle with what it waits for: in a cycle of three or
// more, naming only me's holder would leave out the transactions that tie
// it back to me. A transaction with no xid yet has no number to name it by,
// so the chain ends with "the first" when me has none. The caller holds
// deadlockMu, and every transaction of the cycle is waiting.
func describeCycle(me *txnState) string {
	var b strings.Builder
	b.WriteString(me.name())
	n := 0
	for t := me; ; t = t.waitingFor {
		if n == maxCycleEdges {
			rest := 0
			for u := t; u != me; u = u.waitingFor {
				rest++
			}
			fmt.Fprintf(&b, ", and %d more waits back to the first", rest)
			break
		}
		if n > 0 {
			b.WriteString(", which")
		}
		holder := t.waitingFor.name()
		if t.waitingFor == me {
			holder = "the first"
			if me.xid.Load() != 0 {
				holder = me.name()
			}
		}
		fmt.Fprintf(&b, " waits on key %q for %s", truncKey(t.waitingKey), holder)
		n++
		if t.waitingFor == me {
			break
		}
	}
	return b.String()
}

// releaseAll drops every lock me holds and wakes the first waiter of each
// key.
func (lm *lockManager) releaseAll(me *txnState) {
	for _, k := range me.locks {
		sh := lm.shard([]byte(k))
		sh.mu.Lock()
		if sh.holders[k] == me {
			sh.drop(k)
			sh.wakeFirst(k)
		}
		sh.mu.Unlock()
	}
	me.locks = nil
}

// ifUnlocked runs fn, and reports true, if no transaction holds key's row
// lock; no transaction can take it while fn runs (fn runs under the lock's
// shard mutex, so it must only take leaf locks, such as the index's).
func (lm *lockManager) ifUnlocked(key []byte, fn func()) bool {
	sh := lm.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, held := sh.holders[string(key)]; held {
		return false
	}
	fn()
	return true
}
