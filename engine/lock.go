package engine

import (
	"context"
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
// Deadlock detection: each waiter waits for exactly one transaction, so the
// waits-for graph is a set of chains. Before it sleeps, a waiter records its
// edge and follows the chain from the holder under deadlockMu; reaching
// itself means its edge closed a cycle, and it fails with ErrDeadlock instead
// of waiting. Because edges are added under one mutex, exactly the
// transaction that closes a cycle sees it, as with PostgreSQL's deadlock
// checker (which runs after deadlock_timeout instead of at once; checking at
// once costs little here because the check is a pointer walk).
type lockManager struct {
	seed   maphash.Seed
	shards [64]lockShard

	deadlockMu sync.Mutex

	// waiting counts the transactions sleeping on a row lock. A waiter
	// may have no xid yet (it gets one when it places its first version),
	// so the running table does not show it.
	waiting atomic.Int64
	// deadlocks counts the waits refused with ErrDeadlock.
	deadlocks atomic.Uint64
}

type lockShard struct {
	mu sync.Mutex
	// holders maps a key to the transaction holding its lock. Guarded by mu.
	holders map[string]*txnState
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

// hold records me as key's holder; sh.mu is held and key is free.
func (sh *lockShard) hold(key string, me *txnState) {
	sh.holders[key] = me
	sh.peak = max(sh.peak, len(sh.holders))
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

// acquire takes the row lock on key for me, waiting for holders to end.
// It returns ErrDeadlock, ErrLockTimeout (timeout > 0), ErrClosed when
// closing is closed, failure() when failed is closed, or the context's
// error. A holder whose commit failed never ends (it stays running until
// recovery decides), so the database's failure must end the wait.
func (lm *lockManager) acquire(ctx context.Context, key []byte, me *txnState, timeout time.Duration, closing, failed <-chan struct{}, failure func() error) error {
	sh := lm.shard(key)
	var deadline <-chan time.Time
	for {
		sh.mu.Lock()
		holder := sh.holders[string(key)]
		if holder == nil {
			k := string(key)
			sh.hold(k, me)
			sh.mu.Unlock()
			me.locks = append(me.locks, k)
			return nil
		}
		sh.mu.Unlock()
		if holder == me {
			return nil
		}

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
			lm.deadlocks.Add(1)
			return fmt.Errorf("%w: %s", ErrDeadlock, detail)
		}

		if timeout > 0 && deadline == nil {
			t := time.NewTimer(timeout)
			defer t.Stop()
			deadline = t.C
		}
		var err error
		lm.waiting.Add(1)
		select {
		case <-holder.done:
		case <-ctx.Done():
			err = ctx.Err()
		case <-deadline:
			err = fmt.Errorf("%w: waiting for %s", ErrLockTimeout, holder.name())
		case <-closing:
			err = ErrClosed
		case <-failed:
			err = failure()
		}
		lm.waiting.Add(-1)
		lm.deadlockMu.Lock()
		me.waitingFor, me.waitingKey = nil, nil
		lm.deadlockMu.Unlock()
		if err != nil {
			return err
		}
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

// releaseAll drops every lock me holds. The caller closes me.done afterwards
// so that waiters retry and find the keys free.
func (lm *lockManager) releaseAll(me *txnState) {
	for _, k := range me.locks {
		sh := lm.shard([]byte(k))
		sh.mu.Lock()
		if sh.holders[k] == me {
			sh.drop(k)
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
