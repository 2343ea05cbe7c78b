package engine

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestRowLockWakesOneWaiterAtATimeInOrder queues eight writers of one key
// behind its holder: each release wakes only the oldest waiter, so the
// writers get the key in the order they asked for it and none wakes to
// find it taken. Waking every waiter at each release (as when all slept
// on the holder's end) makes seven, six, ... of them wake for nothing.
func TestRowLockWakesOneWaiterAtATimeInOrder(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{})
	defer db.Close()
	holder := writer(t, db, "k")

	const n = 8
	var mu sync.Mutex
	var order []int
	errc := make(chan error, n)
	for i := range n {
		go func() {
			tx, err := db.Begin(context.Background(), TxnOptions{})
			if err != nil {
				errc <- err
				return
			}
			if err := tx.Put([]byte("k"), []byte{byte(i)}); err != nil {
				tx.Rollback()
				errc <- err
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			errc <- tx.Commit()
		}()
		waitUntilWaitingN(t, db, int64(i+1))
	}
	woken, requeued := db.locks.woken.Load(), db.locks.requeued.Load()
	if w := db.Stats().Txn.LockWaits; w != n {
		t.Errorf("Stats counts %d lock waits, want %d", w, n)
	}
	if err := holder.Commit(); err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := receive(t, errc, "a queued writer"); err != nil {
			t.Fatal(err)
		}
	}
	for i, got := range order {
		if got != i {
			t.Fatalf("writers got the key in the order %v, want the order they queued in", order)
		}
	}
	if w, r := db.locks.woken.Load()-woken, db.locks.requeued.Load()-requeued; w != n || r != 0 {
		t.Errorf("%d wake-ups, %d of them finding the key taken again; want %d and 0", w, r, n)
	}
	if v, _ := get(t, db, "k"); v != string([]byte{n - 1}) {
		t.Errorf("k = %q, want the last writer's", v)
	}
}

// TestRowLockDeadlockAfterTheHolderChanges closes a cycle through a waiter
// that slept while the key it waits for changed hands: a and b queue for k
// behind its holder, b holding l; the holder ends and a gets k, b sleeping
// on. a then writes l, waiting for b, which waits for a: the cycle must be
// seen. Had b's edge still named the ended holder, a's walk would end there
// and the two would wait for each other for ever.
func TestRowLockDeadlockAfterTheHolderChanges(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{})
	defer db.Close()
	ctx := context.Background()
	holder := writer(t, db, "k")
	a, _ := db.Begin(ctx, TxnOptions{})
	b := writer(t, db, "l")

	aPut := putInBackground(a, "k", "a")
	waitUntilWaitingN(t, db, 1)
	bPut := putInBackground(b, "k", "b")
	waitUntilWaitingN(t, db, 2)

	if err := holder.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := receive(t, aPut, "a's write of k"); err != nil {
		t.Fatal(err)
	}
	aPut2 := putInBackground(a, "l", "a")
	if err := receive(t, aPut2, "a's write of l, closing the cycle"); !errors.Is(err, ErrDeadlock) {
		t.Fatalf("a's write of l: %v, want ErrDeadlock", err)
	}
	a.Rollback()
	if err := receive(t, bPut, "b's write of k"); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	if v, _ := get(t, db, "k"); v != "b" {
		t.Errorf("k = %q, want b", v)
	}
}

// TestRowLockWaiterGivingUpPassesTheWakeUpOn makes the oldest waiter of a
// key give up (its context ends) just as a release wakes it: the key is
// free, and the next waiter must hear of it from the one that gave up, or
// it would sleep on a free key for ever. The test holds the shard's mutex
// so that the order is certain: the first waiter has left its wait for
// its context's end before the release pops it.
func TestRowLockWaiterGivingUpPassesTheWakeUpOn(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{})
	defer db.Close()
	// The holder writes nothing, as vacuum holding a key's lock: its
	// release below is the whole of its end.
	holder := newTxnState()
	if !db.locks.tryAcquire("k", holder) {
		t.Fatal("k is locked")
	}

	ctx1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	w1, _ := db.Begin(ctx1, TxnOptions{})
	put1 := putInBackground(w1, "k", "1")
	waitUntilWaitingN(t, db, 1)
	w2, _ := db.Begin(context.Background(), TxnOptions{})
	put2 := putInBackground(w2, "k", "2")
	waitUntilWaitingN(t, db, 2)

	sh := db.locks.shard([]byte("k"))
	sh.mu.Lock()
	cancel1()
	for deadline := time.Now().Add(time.Minute); db.locks.waiting.Load() != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			sh.mu.Unlock()
			t.Fatal("the first waiter did not leave its wait within a minute")
		}
	}
	// The holder's release, as releaseAll makes it.
	sh.drop("k")
	sh.wakeFirst("k")
	sh.mu.Unlock()

	if err := receive(t, put1, "the first waiter's write"); !errors.Is(err, context.Canceled) {
		t.Fatalf("first waiter: %v, want context.Canceled", err)
	}
	w1.Rollback()
	if err := receive(t, put2, "the second waiter's write"); err != nil {
		t.Fatal(err)
	}
	if err := w2.Commit(); err != nil {
		t.Fatal(err)
	}
	if v, _ := get(t, db, "k"); v != "2" {
		t.Errorf("k = %q, want 2", v)
	}
}

// TestLockTimeoutNamesTheKeysHolderAfterABarge times a waiter out just
// as a release wakes it and another writer, finding the key free, takes
// it first: the timeout's message must name the transaction holding the
// key when the wait gave up, not call it a transaction that has ended
// (the waiter's edge still names the holder that released, as a woken
// waiter's edge does until it queues again). The test holds the shard's
// mutex so that the order is certain.
func TestLockTimeoutNamesTheKeysHolderAfterABarge(t *testing.T) {
	// A timeout long enough for the test to find the waiter queued;
	// should it give up first all the same, the test begins again with
	// a longer one.
	for timeout := 20 * time.Millisecond; ; timeout *= 2 {
		ok, err := timeoutAfterABarge(t, timeout)
		if !ok {
			if timeout > 10*time.Second {
				t.Fatal("the waiter's lock timeout always ended its wait before the test found it queued")
			}
			continue
		}
		if !errors.Is(err, ErrLockTimeout) {
			t.Fatalf("the waiter: %v, want ErrLockTimeout", err)
		}
		if want := "waiting for transaction 42"; !strings.HasSuffix(err.Error(), want) {
			t.Errorf("the timeout says %q, want it to end %q", err, want)
		}
		return
	}
}

// timeoutAfterABarge plays TestLockTimeoutNamesTheKeysHolderAfterABarge
// with the given lock timeout and returns the waiter's error, or false
// if the waiter had given up before the test held the shard's mutex.
func timeoutAfterABarge(t *testing.T, timeout time.Duration) (bool, error) {
	lm := newLockManager()
	old := newTxnState()
	if !lm.tryAcquire("k", old) {
		t.Fatal("k is locked")
	}
	me := newTxnState()
	never := make(chan struct{})
	got := make(chan error, 1)
	go func() {
		got <- lm.acquire(context.Background(), []byte("k"), me, timeout, never, never, func() error { return nil })
	}()
	// Sleeping: past the count of waiters, so that once it is back to
	// zero below, the wait has ended by its timeout.
	for deadline := time.Now().Add(time.Minute); lm.waiting.Load() != 1; time.Sleep(time.Millisecond) {
		if len(got) > 0 {
			return false, nil
		}
		if time.Now().After(deadline) {
			t.Fatal("the waiter did not queue within a minute")
		}
	}
	sh := lm.shard([]byte("k"))
	sh.mu.Lock()
	if _, queued := sh.queues["k"]; !queued {
		sh.mu.Unlock()
		receive(t, got, "the waiter's acquire")
		return false, nil
	}
	for deadline := time.Now().Add(time.Minute); lm.waiting.Load() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			sh.mu.Unlock()
			t.Fatal("the waiter's lock timeout did not end its wait within a minute")
		}
	}
	// old's release, as releaseAll makes it, and a writer that barges in.
	sh.drop("k")
	sh.wakeFirst("k")
	barger := newTxnState()
	barger.xid.Store(42)
	lm.hold(sh, "k", barger)
	sh.mu.Unlock()
	return true, receive(t, got, "the waiter's acquire")
}

// putInBackground runs tx.Put(key, val) in a goroutine, for a write that
// is to wait for a row lock, and delivers its error.
func putInBackground(tx *Txn, key, val string) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- tx.Put([]byte(key), []byte(val)) }()
	return ch
}
