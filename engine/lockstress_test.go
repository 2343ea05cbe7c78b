package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"mvkv/vfs"
)

// errStressFailed stands for the failure that stops a database taking
// writes, in TestRowLockQueueStress's "failed" run.
var errStressFailed = errors.New("stress: writes stopped")

// lockBook is TestRowLockQueueStress's own record of who holds which key
// and who waits for which, kept apart from the lock manager's, to check
// each ErrDeadlock against. Guarded by mu.
type lockBook struct {
	mu      sync.Mutex
	holder  map[string]int // key -> worker holding it (by this record)
	want    map[int]string // worker -> key it is waiting for
	exits   uint64         // waits ended by a timeout, a cancellation, Close or failure
	checked int            // ErrDeadlocks whose cycle was seen
}

// cycleFrom reports whether the waits recorded from worker g lead back to
// g: g waits for a key whose holder waits for a key ... held by g.
func (b *lockBook) cycleFrom(g int) bool {
	seen := map[int]bool{}
	for w := g; !seen[w]; {
		seen[w] = true
		k, ok := b.want[w]
		if !ok {
			return false
		}
		h, ok := b.holder[k]
		if !ok {
			return false
		}
		if h == g {
			return true
		}
		w = h
	}
	return false
}

// TestRowLockQueueStress has workers lock random sets of a few keys in
// random orders, a key sometimes twice, each wait with a random lock
// timeout, a context that may end during it, or neither, while a
// vacuum-like worker takes free keys with tryAcquire under owners of
// its own; in the "strict" run no wait has a timeout or a context that
// ends, in the "closing" and "failed" runs the database closes or fails
// part way. It checks that every worker finishes within a minute
// (a waiter asleep on a free key with nothing to end its wait would not),
// that each ErrDeadlock came with a cycle of waits in the test's own
// record (unless a wait ended by a timeout, a cancellation, Close or the
// failure since the victim began its own), and that
// at the end no key is held or has waiters queued. A release that woke
// nobody, a waiter left in a queue after it returned, or a waits-for edge
// left naming a transaction that no longer holds the key shows here as a
// hang, a queue left behind or a deadlock out of nowhere.
func TestRowLockQueueStress(t *testing.T) {
	for _, mode := range []string{"strict", "plain", "closing", "failed"} {
		t.Run(mode, func(t *testing.T) { rowLockStress(t, mode) })
	}
}

func rowLockStress(t *testing.T, mode string) {
	const (
		workers = 10
		txns    = 150 // each worker's
	)
	keys := []string{"a", "b", "c", "d", "e"}
	lm := newLockManager()
	closing, failed := make(chan struct{}), make(chan struct{})
	var endOnce sync.Once
	end := func() {
		endOnce.Do(func() {
			switch mode {
			case "closing":
				close(closing)
			case "failed":
				close(failed)
			}
		})
	}
	failure := func() error { return errStressFailed }
	book := &lockBook{holder: map[string]int{}, want: map[int]string{}}
	var deadlocks, timeouts, cancels, stops, commits sync.Map // per worker counts, for the log

	var wg sync.WaitGroup
	errc := make(chan error, workers+1)
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			var nDeadlock, nTimeout, nCancel, nStop, nCommit int
			defer func() {
				deadlocks.Store(g, nDeadlock)
				timeouts.Store(g, nTimeout)
				cancels.Store(g, nCancel)
				stops.Store(g, nStop)
				commits.Store(g, nCommit)
			}()
			for i := range txns {
				if g == 0 && i == txns/2 {
					end()
				}
				st := newTxnState()
				var held []string
				n := 1 + rng.IntN(3)
				var err error
				for range n {
					k := keys[rng.IntN(len(keys))]
					ctx, cancel := context.Background(), context.CancelFunc(func() {})
					var timeout time.Duration
					how := rng.IntN(5)
					if mode == "strict" {
						how = 4 // every wait ends with the lock or ErrDeadlock
					}
					switch how {
					case 0:
						timeout = time.Duration(1+rng.IntN(2000)) * time.Microsecond
					case 1:
						ctx, cancel = context.WithTimeout(context.Background(), time.Duration(rng.IntN(2000))*time.Microsecond)
					}
					book.mu.Lock()
					book.want[g] = k
					exits := book.exits
					book.mu.Unlock()
					err = lm.acquire(ctx, []byte(k), st, timeout, closing, failed, failure)
					cancel()
					book.mu.Lock()
					delete(book.want, g)
					switch {
					case err == nil:
						if h, ok := book.holder[k]; ok && h != g {
							book.mu.Unlock()
							errc <- fmt.Errorf("worker %d got key %q held by worker %d", g, k, h)
							return
						}
						book.holder[k] = g
						held = append(held, k)
					case errors.Is(err, ErrDeadlock):
						// Checked before the victim lets its keys go:
						// the other waits of the cycle cannot end but
						// by an error of their own.
						book.want[g] = k
						ok := book.cycleFrom(g)
						delete(book.want, g)
						if ok {
							book.checked++
						} else if book.exits == exits {
							book.mu.Unlock()
							errc <- fmt.Errorf("worker %d: %v, but no cycle of waits leads back to it", g, err)
							return
						}
					default:
						book.exits++
					}
					book.mu.Unlock()
					if err != nil {
						break
					}
				}
				switch {
				case err == nil:
					nCommit++
				case errors.Is(err, ErrDeadlock):
					nDeadlock++
				case errors.Is(err, ErrLockTimeout):
					nTimeout++
				case errors.Is(err, context.DeadlineExceeded):
					nCancel++
				case errors.Is(err, ErrClosed), errors.Is(err, errStressFailed):
					nStop++
				default:
					errc <- fmt.Errorf("worker %d: unexpected error %v", g, err)
					return
				}
				if err == nil && rng.IntN(4) == 0 {
					time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
				}
				book.mu.Lock()
				for _, k := range held {
					delete(book.holder, k)
				}
				book.mu.Unlock()
				lm.releaseAll(st)
			}
		}()
	}
	// Vacuum: takes what is free, under an owner of its own, and lets
	// it go, as revisit and repairZeroedPage do.
	stop := make(chan struct{})
	vacDone := make(chan struct{})
	go func() {
		defer close(vacDone)
		rng := rand.New(rand.NewPCG(99, 7))
		for {
			select {
			case <-stop:
				return
			default:
			}
			owner := newTxnState()
			for range 1 + rng.IntN(len(keys)) {
				lm.tryAcquire(keys[rng.IntN(len(keys))], owner)
			}
			time.Sleep(time.Duration(rng.IntN(100)) * time.Microsecond)
			lm.releaseAll(owner)
		}
	}()

	awaitWorkers(t, &wg, errc, lm)
	close(stop)
	<-vacDone
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}

	for i := range lm.shards {
		sh := &lm.shards[i]
		sh.mu.Lock()
		for k, h := range sh.holders {
			t.Errorf("key %q still held by %p", k, h)
		}
		for k := range sh.queues {
			t.Errorf("key %q has waiters queued after every worker returned", k)
		}
		sh.mu.Unlock()
	}
	if n := lm.waiting.Load(); n != 0 {
		t.Errorf("%d waiters counted after every worker returned", n)
	}
	sum := func(m *sync.Map) (n int) {
		m.Range(func(_, v any) bool { n += v.(int); return true })
		return n
	}
	t.Logf("%s: %d committed, %d deadlocks (%d cycles seen), %d lock timeouts, %d canceled, %d closed or failed; %d waits, %d woken, %d requeued",
		mode, sum(&commits), sum(&deadlocks), book.checked, sum(&timeouts), sum(&cancels), sum(&stops),
		lm.waits.Load(), lm.woken.Load(), lm.requeued.Load())
}

// TestRowLockQueueStressDB runs transactions through the whole write
// path: workers Put and Delete a few keys in random orders (a key
// sometimes twice), one of them now and then deletes the whole range,
// each transaction with a context that may end during a wait, and
// commit or roll back, while vacuum runs; an error aborts the
// transaction, releasing its locks before the call returns. It checks
// that every worker finishes within a minute and that at the end no key
// is held or has waiters queued.
func TestRowLockQueueStressDB(t *testing.T) {
	db := openTest(t, "db", Options{FS: vfs.NewMemFS(), SynchronousCommit: SyncCommitOff, Autovacuum: noAutovacuum, CheckpointTimeout: -1})
	defer db.Close()
	const (
		workers = 8
		txns    = 150 // each worker's
	)
	keys := []string{"a", "b", "c", "d"}
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 11))
			for range txns {
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if rng.IntN(3) == 0 {
					ctx, cancel = context.WithTimeout(ctx, time.Duration(rng.IntN(3000))*time.Microsecond)
				}
				err := stressTxn(ctx, db, rng, keys, g == 0)
				cancel()
				switch {
				case err == nil, errors.Is(err, ErrDeadlock), errors.Is(err, context.DeadlineExceeded):
				default:
					errc <- fmt.Errorf("worker %d: %v", g, err)
					return
				}
			}
		}()
	}
	vacStop, vacDone := make(chan struct{}), make(chan error, 1)
	go func() {
		for {
			select {
			case <-vacStop:
				vacDone <- nil
				return
			default:
			}
			if _, err := db.Vacuum(context.Background()); err != nil {
				vacDone <- err
				return
			}
		}
	}()
	awaitWorkers(t, &wg, errc, db.locks)
	close(vacStop)
	if err := <-vacDone; err != nil {
		t.Fatalf("vacuum: %v", err)
	}
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	for i := range db.locks.shards {
		sh := &db.locks.shards[i]
		sh.mu.Lock()
		for k := range sh.holders {
			t.Errorf("key %q still held after every transaction ended", k)
		}
		for k := range sh.queues {
			t.Errorf("key %q has waiters queued after every transaction ended", k)
		}
		sh.mu.Unlock()
	}
	st := db.Stats().Txn
	t.Logf("%d commits, %d aborts, %d deadlocks, %d lock waits", st.Commits, st.Aborts, st.Deadlocks, st.LockWaits)
}

// stressTxn is one transaction of TestRowLockQueueStressDB: writes of
// one to three of keys, or with ranges a delete of all of them first,
// then a commit or, one time in four, a rollback.
func stressTxn(ctx context.Context, db *DB, rng *rand.Rand, keys []string, ranges bool) error {
	tx, err := db.Begin(ctx, TxnOptions{})
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if ranges && rng.IntN(4) == 0 {
		if _, err := tx.DeleteRange([]byte(keys[0]), nil, nil); err != nil {
			return err
		}
	}
	for range 1 + rng.IntN(3) {
		k := []byte(keys[rng.IntN(len(keys))])
		if rng.IntN(4) == 0 {
			err = tx.Delete(k)
		} else {
			err = tx.Put(k, []byte("v"))
		}
		if err != nil {
			return err
		}
	}
	if rng.IntN(3) == 0 {
		// Holding the locks a while, as a client between commands.
		time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
	}
	if rng.IntN(4) == 0 {
		return tx.Rollback()
	}
	return tx.Commit()
}

// awaitWorkers waits for the workers of wg, failing the test on the first
// error one sends on errc or if they are still running after a minute,
// the sign of a lost wake-up (lm says how many sleep on a row lock).
func awaitWorkers(t *testing.T, wg *sync.WaitGroup, errc <-chan error, lm *lockManager) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case err := <-errc:
		t.Fatal(err)
	case <-time.After(time.Minute):
		t.Fatalf("workers still running after a minute, %d of them asleep on a row lock: a lost wake-up", lm.waiting.Load())
	}
}
