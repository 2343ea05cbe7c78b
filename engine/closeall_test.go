package engine

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"iter"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"mvkv/vfs"
)

var (
	closeAllRounds = flag.Int("closeall.rounds", 24, "TestCloseAmidEverything: rounds (databases) per run")
	closeAllSeed   = flag.Uint64("closeall.seed", 0, "TestCloseAmidEverything: first seed (0: from the clock, logged)")
)

// liveness is how long any wait of these tests may take before the test
// calls the engine stuck: far beyond anything a loaded machine needs.
const liveness = time.Minute

// waitLive waits for ch, or fails the test with every goroutine's stack
// once liveness has passed.
func waitLive(t testing.TB, ch <-chan struct{}, what string) bool {
	t.Helper()
	timer := time.NewTimer(liveness)
	defer timer.Stop()
	select {
	case <-ch:
		return true
	case <-timer.C:
		pprof.Lookup("goroutine").WriteTo(os.Stderr, 2)
		t.Errorf("%s: still waiting after %v (goroutines dumped)", what, liveness)
		return false
	}
}

// closeRound is one database of TestCloseAmidEverything: its workers, the
// Close they race with, and what was acknowledged.
type closeRound struct {
	t    *testing.T
	db   *DB
	rng  *rand.Rand // the round's own, for choices made before the workers start
	bulk bool       // the database starts empty, for bulk loads

	ops       atomic.Int64 // operations begun, all workers
	loadTried atomic.Bool  // a bulk load has returned
	closeAt   int64        // the operation count at which a worker closes
	claim     atomic.Bool  // some goroutine has taken the Close
	closed    chan struct{}
	trigger   chan struct{}
	trigOne   sync.Once

	mu        sync.Mutex
	acked     map[string]string // written and acknowledged: must survive
	loaded    []string          // prefixes of bulk loads that returned nil
	notLoaded []string          // prefixes of bulk loads that failed
	closeErrs []error
	errs      []string
	from      string // where the Close that won came from
	site      string // where the round wants it to come from
}

func (r *closeRound) fail(format string, args ...any) {
	r.mu.Lock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

// check records an error that is neither nil nor one the operation may
// meet beside a Close: ErrClosed, a context's error, a retryable conflict,
// or what extra allows.
func (r *closeRound) check(op string, err error, extra ...error) {
	if err == nil || errors.Is(err, ErrClosed) || errors.Is(err, context.Canceled) ||
		errors.Is(err, context.DeadlineExceeded) || IsRetryable(err) {
		return
	}
	for _, e := range extra {
		if errors.Is(err, e) {
			return
		}
	}
	r.fail("%s: %v", op, err)
}

// tick counts an operation and, at closeAt, wakes the round's Close.
func (r *closeRound) tick() {
	if r.ops.Add(1) == r.closeAt {
		r.trigOne.Do(func() { close(r.trigger) })
	}
}

// maybeClose closes the database if the moment has come and nobody else
// has; a second Close now and then runs beside it.
func (r *closeRound) maybeClose(from string) {
	select {
	case <-r.trigger:
	default:
		return
	}
	// The round's chosen place first; any, should it not come soon.
	if from == r.site || r.ops.Load() > r.closeAt+1000 {
		r.doClose(from)
	}
}

// closeSites are the places a round's Close may come from.
var closeSites = []string{"a worker", "an Update's function", "a View's function", "an open transaction's goroutine",
	"a goroutine with commits in flight", "a Scan's function", "a ScanKeys function", "StatTuple's class",
	"a bulk load's rows", "the test's goroutine"}

func (r *closeRound) doClose(from string) {
	if !r.claim.CompareAndSwap(false, true) {
		return
	}
	r.from = from
	var second chan struct{}
	if rand.IntN(3) == 0 {
		second = make(chan struct{})
		go func() {
			defer close(second)
			err := r.db.Close()
			r.mu.Lock()
			r.closeErrs = append(r.closeErrs, err)
			r.mu.Unlock()
		}()
	}
	err := r.db.Close()
	r.mu.Lock()
	r.closeErrs = append(r.closeErrs, err)
	r.mu.Unlock()
	if second != nil {
		<-second
	}
	close(r.closed)
}

func (r *closeRound) isClosed() bool {
	select {
	case <-r.closed:
		return true
	default:
		return false
	}
}

// ctx returns a context that, at random, is canceled: at once, by a
// goroutine of its own, or never.
func (r *closeRound) ctx(rng *rand.Rand) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	switch rng.IntN(6) {
	case 0:
		cancel()
	case 1:
		go cancel()
	}
	return ctx, cancel
}

func (r *closeRound) ack(k, v string) {
	r.mu.Lock()
	r.acked[k] = v
	r.mu.Unlock()
}

// value makes the value of key k: now and then too large for a page, so
// that it goes out of line and vacuum has chunks to free.
func closeAllValue(rng *rand.Rand, k string) string {
	if rng.IntN(8) == 0 {
		return k + strings.Repeat("x", 2*chunkSize+rng.IntN(chunkSize))
	}
	return k + strings.Repeat("v", rng.IntN(64))
}

// worker runs random operations until the database is closed, and one
// more after.
func (r *closeRound) worker(id int, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, uint64(id)))
	db := r.db
	n := 0
	for after := 0; after < 2; {
		if r.isClosed() {
			after++
		}
		r.tick()
		r.maybeClose("a worker")
		n++
		key := fmt.Sprintf("w/%d/%d", id, n)
		val := closeAllValue(rng, key)
		op := rng.IntN(17)
		if r.bulk && op <= 7 && op != 2 && op != 6 && (!r.loadTried.Load() || rng.IntN(4) != 0) && rng.IntN(8) != 0 {
			// Writes would leave no empty database to load into.
			op = 8
		}
		switch op {
		case 0, 1: // Update, the Close now and then from inside it
			ctx, cancel := r.ctx(rng)
			inside := rng.IntN(4) == 0
			err := db.Update(ctx, func(tx *Txn) error {
				if inside {
					r.maybeClose("an Update's function")
				}
				if err := tx.Put([]byte(key), []byte(val)); err != nil {
					return err
				}
				if rng.IntN(3) == 0 {
					_, err := tx.Get([]byte(fmt.Sprintf("d/%04d", rng.IntN(200))))
					if err != nil && !errors.Is(err, ErrNotFound) {
						return err
					}
				}
				return nil
			})
			cancel()
			r.check("Update", err)
			if err == nil {
				r.ack(key, val)
			}
		case 2: // View
			ctx, cancel := r.ctx(rng)
			err := db.View(ctx, func(tx *Txn) error {
				r.maybeClose("a View's function")
				_, err := tx.Get([]byte(fmt.Sprintf("d/%04d", rng.IntN(200))))
				if errors.Is(err, ErrNotFound) {
					err = nil
				}
				return err
			})
			cancel()
			r.check("View", err)
		case 3, 4: // Begin, Put, Commit or Rollback
			ctx, cancel := r.ctx(rng)
			tx, err := db.Begin(ctx, TxnOptions{})
			r.check("Begin", err)
			if err == nil {
				err = tx.Put([]byte(key), []byte(val))
				r.check("Put", err, ErrTxnDone)
				r.maybeClose("an open transaction's goroutine")
				if rng.IntN(4) == 0 {
					r.check("Rollback", tx.Rollback(), ErrTxnDone)
				} else if cerr := tx.Commit(); err == nil && cerr == nil {
					r.ack(key, val)
				} else {
					r.check("Commit", cerr, ErrTxnDone)
				}
			}
			cancel()
		case 5: // a pipeline of CommitAsync, as the server runs them
			var prev *CommitWait
			var waits []*CommitWait
			var keys, vals []string
			for i := 0; i < 1+rng.IntN(4); i++ {
				k := fmt.Sprintf("%s/%d", key, i)
				v := closeAllValue(rng, k)
				tx, err := db.Begin(context.Background(), TxnOptions{})
				if err != nil {
					r.check("Begin (pipeline)", err)
					break
				}
				if err := tx.Put([]byte(k), []byte(v)); err != nil {
					r.check("Put (pipeline)", err)
					r.check("Rollback (pipeline)", tx.Rollback(), ErrTxnDone)
					break
				}
				w, err := tx.CommitAsync(prev)
				if err != nil {
					r.check("CommitAsync", err)
					break
				}
				prev = w
				waits, keys, vals = append(waits, w), append(keys, k), append(vals, v)
			}
			r.maybeClose("a goroutine with commits in flight")
			for i, w := range waits {
				ctx, cancel := context.WithTimeout(context.Background(), liveness)
				err := w.Wait(ctx)
				cancel()
				if errors.Is(err, context.DeadlineExceeded) {
					r.fail("CommitWait.Wait: still waiting after %v", liveness)
				}
				r.check("CommitWait.Wait", err)
				if err == nil {
					r.ack(keys[i], vals[i])
				}
			}
		case 6: // Scan and ScanKeys, the Close now and then from the callback
			ctx, cancel := r.ctx(rng)
			err := db.View(ctx, func(tx *Txn) error {
				if err := tx.Scan([]byte("d/"), []byte("d0"), func(k, v []byte) bool {
					if rng.IntN(50) == 0 {
						r.maybeClose("a Scan's function")
					}
					return true
				}); err != nil {
					return err
				}
				return tx.ScanKeys(nil, nil, func(k []byte) bool {
					if rng.IntN(50) == 0 {
						r.maybeClose("a ScanKeys function")
					}
					return true
				})
			})
			cancel()
			r.check("Scan", err)
		case 7: // DeleteRange of the preloaded keys, never of acknowledged ones
			ctx, cancel := r.ctx(rng)
			lo := rng.IntN(200)
			err := db.Update(ctx, func(tx *Txn) error {
				_, err := tx.DeleteRange([]byte(fmt.Sprintf("d/%04d", lo)), []byte(fmt.Sprintf("d/%04d", lo+20)), nil)
				return err
			})
			cancel()
			r.check("DeleteRange", err)
		case 8, 9: // BulkLoad, into the empty database of a bulk round
			if !r.bulk {
				continue
			}
			r.bulkLoad(rng, fmt.Sprintf("b/%d/%d/", id, n))
		case 10: // Backup to a directory of its own
			ctx, cancel := r.ctx(rng)
			_, err := db.Backup(ctx, fmt.Sprintf("/bk/%d-%d", id, n))
			cancel()
			r.check("Backup", err)
		case 11:
			r.check("Checkpoint", db.Checkpoint())
		case 12: // Vacuum, canceled now and then
			ctx, cancel := r.ctx(rng)
			_, err := db.Vacuum(ctx)
			cancel()
			r.check("Vacuum", err)
		case 13:
			rep, err := db.Verify()
			r.check("Verify", err)
			if err == nil && !rep.OK() {
				r.fail("Verify: %v", rep.Problems)
			}
		case 14: // StatTuple, the Close now and then from its class
			ctx, cancel := r.ctx(rng)
			_, _, err := db.StatTuple(ctx, func(k []byte) string {
				if rand.IntN(50) == 0 {
					r.maybeClose("StatTuple's class")
				}
				return string(k[:min(len(k), 1)])
			})
			cancel()
			r.check("StatTuple", err)
		case 15:
			_ = db.Stats()
		case 16: // Close itself, when its moment has come
			r.maybeClose("a worker")
		}
	}
}

// bulkLoad runs one BulkLoad of keys under prefix, its rows reading the
// database, closing it, or waiting for the Close, at random.
func (r *closeRound) bulkLoad(rng *rand.Rand, prefix string) {
	db := r.db
	n := 1 + rng.IntN(3000)
	if rng.IntN(8) == 0 {
		n = 0 // nothing to load: BulkLoad returns nil, after a checkpoint
	}
	mode := rng.IntN(4) // 0 plain, 1 reads, 2 closes, 3 waits for the Close
	if r.site == "a bulk load's rows" && rng.IntN(2) == 0 {
		mode = 2
	}
	at := rng.IntN(n + 1)
	var rows iter.Seq2[[]byte, []byte] = func(yield func(k, v []byte) bool) {
		for i := 0; i <= n; i++ {
			if i == at {
				switch mode {
				case 1:
					err := db.View(context.Background(), func(tx *Txn) error {
						_, err := tx.Get([]byte("d/0001"))
						if errors.Is(err, ErrNotFound) {
							err = nil
						}
						return err
					})
					r.check("View (in rows)", err)
				case 2:
					r.tick()
					r.trigOne.Do(func() { close(r.trigger) })
					r.maybeClose("a bulk load's rows")
				case 3:
					r.trigOne.Do(func() { close(r.trigger) })
					if !waitLive(r.t, r.closed, "rows waiting for Close") {
						return
					}
				}
			}
			if i == n || !yield(fmt.Appendf(nil, "%s%06d", prefix, i), fmt.Appendf(nil, "%d", i)) {
				return
			}
		}
	}
	ctx, cancel := r.ctx(rng)
	if rng.IntN(2) == 0 {
		cancel()
		ctx, cancel = context.WithCancel(context.Background())
	}
	_, err := db.BulkLoad(ctx, rows)
	cancel()
	r.loadTried.Store(true)
	r.check("BulkLoad", err, ErrBulkLoadNotEmpty)
	r.mu.Lock()
	if err == nil {
		r.loaded = append(r.loaded, fmt.Sprintf("%s\x00%d", prefix, n))
	} else {
		r.notLoaded = append(r.notLoaded, prefix)
	}
	r.mu.Unlock()
}

// TestCloseAmidEverything closes a database at a random moment, from a
// random goroutine (a worker, an Update's function, a Scan's or
// StatTuple's callback, a bulk load's rows), while other goroutines run
// every kind of operation beside it, some with contexts canceled. Every
// call must return, with nil or ErrClosed, a context's error or a
// retryable conflict; exactly one Close returns nil; and the database
// must reopen, pass Verify, and hold every acknowledged write and bulk
// load and nothing of a failed load.
func TestCloseAmidEverything(t *testing.T) {
	seed := *closeAllSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	rounds := *closeAllRounds
	if testing.Short() {
		rounds = min(rounds, 4)
	} else if raceEnabled && !isFlagSet("closeall.rounds") {
		rounds = 8 // about 10 s under -race on two cores
	}
	t.Logf("seeds %d..%d", seed, seed+uint64(rounds)-1)
	from := map[string]int{}
	for i := 0; i < rounds && !t.Failed(); i++ {
		from[closeAllRound(t, seed+uint64(i))]++
	}
	t.Logf("%d rounds; the Close came from: %v", rounds, from)
}

func closeAllRound(t *testing.T, seed uint64) (closedFrom string) {
	rng := rand.New(rand.NewPCG(seed, 0))
	m := vfs.NewMemFS()
	opts := Options{FS: m, SharedBuffers: 512 << 10, WALSegmentSize: 1 << 20, CheckpointTimeout: -1}
	if rng.IntN(2) == 0 {
		opts.Autovacuum = noAutovacuum
	} else {
		opts.AutovacuumNaptime = time.Millisecond
		opts.AutovacuumVacuumThreshold = 1
		opts.AutovacuumVacuumScaleFactor = -1
	}
	db := openTest(t, "/db", opts)
	// Early lock release and asynchronous commits too: a commit
	// acknowledged before its flush must survive a Close all the same,
	// which flushes the WAL to its end.
	elr, async := rng.IntN(3) == 0, rng.IntN(3) == 0
	db.SetEarlyLockRelease(elr)
	if async {
		if err := db.SetSynchronousCommit(SyncCommitOff); err != nil {
			t.Fatal(err)
		}
	}
	r := &closeRound{t: t, db: db, rng: rng, bulk: rng.IntN(3) == 0,
		closeAt: 1 + rng.Int64N(300), closed: make(chan struct{}), trigger: make(chan struct{}),
		acked: map[string]string{}}
	r.site = closeSites[rng.IntN(len(closeSites))]
	if !r.bulk && r.site == "a bulk load's rows" {
		r.site = "a worker"
	}
	if !r.bulk {
		err := db.Update(context.Background(), func(tx *Txn) error {
			for i := 0; i < 200; i++ {
				k := fmt.Sprintf("d/%04d", i)
				if err := tx.Put([]byte(k), []byte(closeAllValue(rng, k))); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("seed %d: preload: %v", seed, err)
		}
	}
	workers := 3 + rng.IntN(4)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.worker(w, seed)
		}()
	}
	// The Close's moment, should every worker be waiting for something
	// only a Close ends (a bulk load's rows waiting for it, say).
	go func() {
		<-r.trigger
		if r.site != "the test's goroutine" {
			timer := time.NewTimer(time.Second)
			defer timer.Stop()
			select {
			case <-r.closed:
				return
			case <-timer.C:
			}
		}
		r.doClose("the test's goroutine")
	}()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	if !waitLive(t, r.closed, fmt.Sprintf("seed %d: Close", seed)) || !waitLive(t, done, fmt.Sprintf("seed %d: workers", seed)) {
		t.FailNow()
	}
	for _, e := range r.errs {
		t.Errorf("seed %d: %s", seed, e)
	}
	nilCloses := 0
	for _, err := range r.closeErrs {
		if err == nil {
			nilCloses++
		} else if !errors.Is(err, ErrClosed) {
			t.Errorf("seed %d: Close: %v", seed, err)
		}
	}
	if nilCloses != 1 {
		t.Errorf("seed %d: %d Closes returned nil of %d; want exactly one", seed, nilCloses, len(r.closeErrs))
	}

	db = openTest(t, "/db", Options{FS: m, SharedBuffers: 512 << 10, WALSegmentSize: 1 << 20, CheckpointTimeout: -1, Autovacuum: noAutovacuum})
	defer db.Close()
	rep, err := db.Verify()
	if err != nil || !rep.OK() {
		t.Fatalf("seed %d: Verify after reopening: %v, %v", seed, err, rep.Problems)
	}
	err = db.View(context.Background(), func(tx *Txn) error {
		for k, v := range r.acked {
			got, err := tx.Get([]byte(k))
			if err != nil || string(got) != v {
				t.Errorf("seed %d: acknowledged %q: %d bytes, %v; want its %d bytes", seed, k, len(got), err, len(v))
			}
		}
		for _, l := range r.loaded {
			prefix, n, _ := strings.Cut(l, "\x00")
			c, err := tx.Count([]byte(prefix), []byte(prefix+"\xff"))
			if err != nil || fmt.Sprint(c) != n {
				t.Errorf("seed %d: bulk load %s: %d keys, %v; want %s", seed, prefix, c, err, n)
			}
		}
		for _, prefix := range r.notLoaded {
			c, err := tx.Count([]byte(prefix), []byte(prefix+"\xff"))
			if err != nil || c != 0 {
				t.Errorf("seed %d: failed bulk load %s: %d keys, %v; want none", seed, prefix, c, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	t.Logf("seed %d: %d workers, bulk %v, early lock release %v, asynchronous commits %v, %d ops, %d acknowledged, %d loads committed, %d failed, %d Closes",
		seed, workers, r.bulk, elr, async, r.ops.Load(), len(r.acked), len(r.loaded), len(r.notLoaded), len(r.closeErrs))
	return r.from
}

// waitBlocked waits until blockedNow(fns...), or fails the test after
// liveness with every goroutine's stack.
func waitBlocked(t testing.TB, fns ...string) bool {
	t.Helper()
	for deadline := time.Now().Add(liveness); time.Now().Before(deadline); runtime.Gosched() {
		if blockedNow(fns...) {
			return true
		}
	}
	pprof.Lookup("goroutine").WriteTo(os.Stderr, 2)
	t.Errorf("no goroutine blocked in %s after %v (goroutines dumped)", strings.Join(fns, " and "), liveness)
	return false
}

// blockedNow reports whether some goroutine is blocked in a channel
// operation with every one of fns on its stack (and none of those written
// with a leading "!"): a goroutine stopped at a runLock, say.
func blockedNow(fns ...string) bool {
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
	for _, g := range strings.Split(string(buf[:n]), "\n\n") {
		head, _, _ := strings.Cut(g, "\n")
		if !strings.Contains(head, "[select") && !strings.Contains(head, "[chan send") && !strings.Contains(head, "[chan receive") {
			continue
		}
		all := true
		for _, fn := range fns {
			if not, ok := strings.CutPrefix(fn, "!"); ok {
				all = all && !strings.Contains(g, not)
			} else {
				all = all && strings.Contains(g, fn)
			}
		}
		if all {
			return true
		}
	}
	return false
}

// TestCloseWithLoadCheckpointBehindLoad: a bulk load that loaded nothing
// (its rows yielded no row) ends with a checkpoint, which waits for the
// checkpoint lock another bulk load, begun meanwhile, holds while its rows
// runs; that rows then closes the database, itself or on a goroutine it
// waits for. Close ends the second load inside rows, the first one's
// checkpoint goes on or gives way, and everything returns: before, Close
// waited for the first load, registered first, which waited for the
// second, which waited for Close.
func TestCloseWithLoadCheckpointBehindLoad(t *testing.T) {
	for _, spawned := range []bool{false, true} {
		t.Run(fmt.Sprintf("spawned=%v", spawned), func(t *testing.T) {
			m := vfs.NewMemFS()
			db := openTest(t, "/db", Options{FS: m, Autovacuum: noAutovacuum, CheckpointTimeout: -1})
			second := make(chan error, 1)
			closed := make(chan error, 1)
			rowsB := func(yield func(k, v []byte) bool) {
				for i := 0; i < 100; i++ {
					if i == 10 {
						// The first load has returned from its rows and
						// waits for the lock this load holds.
						if !waitBlocked(t, "engine.(*DB).BulkLoad(", "runLock).", "!bulkLoadLocked") {
							return
						}
						closeFromRows(db, spawned, closed)
					}
					if !yield(bulkKey(i), bulkVal(i, 100)) {
						return
					}
				}
			}
			rowsA := func(yield func(k, v []byte) bool) {
				// The second load registers after this one and waits
				// for the checkpoint lock this one holds; it takes the
				// lock when this one lets it go, before this one's
				// checkpoint asks for it again.
				go func() {
					_, err := db.BulkLoad(context.Background(), rowsB)
					second <- err
				}()
				waitBlocked(t, "runLock).lockCtx", "bulkLoadLocked")
			}
			first := make(chan error, 1)
			go func() {
				_, err := db.BulkLoad(context.Background(), rowsA)
				first <- err
			}()
			var errA, errB, errC error
			for _, w := range []struct {
				name string
				ch   chan error
				err  *error
			}{{"the first BulkLoad", first, &errA}, {"the second BulkLoad", second, &errB}, {"Close", closed, &errC}} {
				got := make(chan struct{})
				go func() { *w.err = <-w.ch; close(got) }()
				if !waitLive(t, got, w.name) {
					t.FailNow()
				}
			}
			if errA != nil && !errors.Is(errA, ErrClosed) {
				t.Errorf("the first BulkLoad (no rows) = %v; want nil or ErrClosed", errA)
			}
			if !errors.Is(errB, ErrClosed) {
				t.Errorf("the second BulkLoad = %v; want ErrClosed", errB)
			}
			if errC != nil {
				t.Errorf("Close: %v", errC)
			}
			db = openTest(t, "/db", Options{FS: m, Autovacuum: noAutovacuum, CheckpointTimeout: -1})
			defer db.Close()
			if rep, err := db.Verify(); err != nil || !rep.OK() {
				t.Fatalf("Verify after the reopen: %v, %v", err, rep.Problems)
			}
			checkState(t, db, map[string]string{})
		})
	}
}

// TestCloseTwiceConcurrently: a second Close while the first is still
// closing returns ErrClosed only once the first has returned, the files
// closed: a caller that reopens the directory or exits on the second's
// return must not find the first's checkpoint unfinished or the directory
// still locked. The first Close is held by a Backup stopped at its first
// file, which Close waits for; before, the second returned at once.
func TestCloseTwiceConcurrently(t *testing.T) {
	m := vfs.NewMemFS()
	db, reached, release := gatedDB(t, m, "/bk.partial/heap/", Options{Autovacuum: noAutovacuum})
	backedUp := backupInBackground(db, "/bk")
	<-reached // the Backup waits at its first heap file
	first := make(chan error, 1)
	go func() { first <- db.Close() }()
	<-db.closeBegun
	second := make(chan error, 1)
	go func() { second <- db.Close() }()
	// The Backup cannot go on, so neither can the first Close: the second
	// must be waiting, not returned.
	for deadline := time.Now().Add(liveness); !blockedNow("engine.(*DB).Close(", "!stopBulkRuns"); runtime.Gosched() {
		select {
		case err := <-second:
			close(release)
			t.Fatalf("the second Close returned (%v) while the first was still closing", err)
		default:
		}
		if time.Now().After(deadline) {
			pprof.Lookup("goroutine").WriteTo(os.Stderr, 2)
			t.Fatalf("the second Close neither returned nor waited after %v (goroutines dumped)", liveness)
		}
	}
	close(release)
	for name, ch := range map[string]<-chan error{"Backup": backedUp, "the first Close": first} {
		got := make(chan struct{})
		var err error
		go func() { err = <-ch; close(got) }()
		if !waitLive(t, got, name) {
			t.FailNow()
		}
		if name == "Backup" && !errors.Is(err, ErrClosed) {
			t.Errorf("Backup: %v; want ErrClosed", err)
		} else if name != "Backup" && err != nil {
			t.Errorf("the first Close: %v", err)
		}
	}
	got := make(chan struct{})
	var err2 error
	go func() { err2 = <-second; close(got) }()
	if !waitLive(t, got, "the second Close") {
		t.FailNow()
	}
	if !errors.Is(err2, ErrClosed) {
		t.Errorf("the second Close: %v; want ErrClosed", err2)
	}
	db = openTest(t, "/db", Options{FS: m, Autovacuum: noAutovacuum, CheckpointTimeout: -1})
	defer db.Close()
	if rep, err := db.Verify(); err != nil || !rep.OK() {
		t.Fatalf("Verify after the reopen: %v, %v", err, rep.Problems)
	}
}

// errStuck is what recv returns for a wait that did not end.
var errStuck = errors.New("still waiting")

// recv waits for ch's value, or marks the test failed after liveness and
// returns errStuck; it may run on any goroutine.
func recv(t *testing.T, ch <-chan error, what string) error {
	t.Helper()
	timer := time.NewTimer(liveness)
	defer timer.Stop()
	select {
	case err := <-ch:
		return err
	case <-timer.C:
		pprof.Lookup("goroutine").WriteTo(os.Stderr, 2)
		t.Errorf("%s: still waiting after %v (goroutines dumped)", what, liveness)
		return errStuck
	}
}

// reopenCount reopens the database on m, checks it with Verify, and
// counts its keys.
func reopenCount(t *testing.T, m *vfs.MemFS) int {
	t.Helper()
	db := openTest(t, "/db", Options{FS: m, Autovacuum: noAutovacuum, CheckpointTimeout: -1})
	defer db.Close()
	if rep, err := db.Verify(); err != nil || !rep.OK() {
		t.Fatalf("Verify after the reopen: %v, %v", err, rep.Problems)
	}
	n := 0
	if err := db.View(context.Background(), func(tx *Txn) error {
		var err error
		n, err = tx.Count(nil, nil)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCloseWithBulkLoadBehindBackup: a bulk load waits for the checkpoint
// lock a Backup holds for its whole copy, here stopped at its first file.
// Close's start ends the load's wait (ErrClosed) before the Backup has
// gone on; then the Backup stops too, and Close returns.
func TestCloseWithBulkLoadBehindBackup(t *testing.T) {
	m := vfs.NewMemFS()
	db, reached, release := gatedDB(t, m, "/bk.partial/heap/", Options{Autovacuum: noAutovacuum})
	backedUp, loaded, closed := make(chan error, 1), make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := db.Backup(context.Background(), "/bk")
		backedUp <- err
	}()
	<-reached
	go func() {
		_, err := db.BulkLoad(context.Background(), bulkRows(100, 10))
		loaded <- err
	}()
	if !waitBlocked(t, "bulkLoadLocked", "runLock).lockCtx") {
		close(release)
		t.FailNow()
	}
	go func() { closed <- db.Close() }()
	err := recv(t, loaded, "BulkLoad behind the Backup")
	close(release)
	if !errors.Is(err, ErrClosed) {
		t.Errorf("BulkLoad: %v; want ErrClosed", err)
	}
	if err := recv(t, backedUp, "Backup"); !errors.Is(err, ErrClosed) {
		t.Errorf("Backup: %v; want ErrClosed", err)
	}
	if err := recv(t, closed, "Close"); err != nil {
		t.Errorf("Close: %v", err)
	}
	checkNoBackupLeft(t, m, "/bk")
	if n := reopenCount(t, m); n != 300 {
		t.Fatalf("%d keys after the reopen; want the 300 written before", n)
	}
}

// TestCloseWithBackupBehindVacuum: a Backup waits for vacuum's lock behind
// a Vacuum, here held at its first page. Close's start ends the Backup's
// wait (ErrClosed) while the Vacuum is still held; the Vacuum then stops at
// its next page or ends, and Close returns.
func TestCloseWithBackupBehindVacuum(t *testing.T) {
	m := vfs.NewMemFS()
	db := openTest(t, "/db", Options{FS: m, Autovacuum: noAutovacuum, CheckpointTimeout: -1})
	ctx := context.Background()
	for i := range 300 {
		mustPut(t, db, fmt.Sprintf("k%d", i), strings.Repeat("v", 300))
		if i%2 == 0 {
			mustPut(t, db, fmt.Sprintf("k%d", i), "overwritten")
		}
	}
	backedUp, closed := make(chan error, 1), make(chan error, 1)
	hook := &hookCtx{Context: ctx, n: 1, fn: func() {
		go func() {
			_, err := db.Backup(ctx, "/bk")
			backedUp <- err
		}()
		if !waitBlocked(t, "(*DB).Backup(", "runLock).lockCtx") {
			return
		}
		go func() { closed <- db.Close() }()
		if err := recv(t, backedUp, "Backup behind the Vacuum"); !errors.Is(err, ErrClosed) {
			t.Errorf("Backup: %v; want ErrClosed", err)
		}
	}}
	vacuumed := make(chan error, 1)
	go func() {
		_, err := db.Vacuum(hook)
		vacuumed <- err
	}()
	if err := recv(t, vacuumed, "Vacuum"); err != nil && !errors.Is(err, ErrClosed) {
		t.Errorf("Vacuum: %v; want nil or ErrClosed", err)
	}
	mustHaveRun(t, hook)
	if err := recv(t, closed, "Close"); err != nil {
		t.Errorf("Close: %v", err)
	}
	checkNoBackupLeft(t, m, "/bk")
	if n := reopenCount(t, m); n != 300 {
		t.Fatalf("%d keys after the reopen; want 300", n)
	}
}

// TestCloseWhileAutovacuumPaysChunkDebt: a Vacuum canceled between its
// passes leaves the out-of-line chunks of the versions it removed in
// vacuum's debt, which autovacuum, with no run due, pays at its next nap.
// Close comes at a random moment of that (before, during, after): the
// worker stops, Close frees what is left before its checkpoint, and the
// reopened database holds no chunk, passes Verify and reads every key.
func TestCloseWhileAutovacuumPaysChunkDebt(t *testing.T) {
	rounds := 12
	if testing.Short() {
		rounds = 3
	}
	for round := range rounds {
		m := vfs.NewMemFS()
		opts := Options{FS: m, CheckpointTimeout: -1, AutovacuumNaptime: time.Millisecond, AutovacuumVacuumThreshold: 1 << 30}
		db := openTest(t, "/db", opts)
		const keys = 40
		for i := range keys {
			k := fmt.Sprintf("k%02d", i)
			mustPut(t, db, k, string(patterned(3*chunkSize, uint32(i))))
			mustPut(t, db, k, "small "+k)
		}
		// Err is asked before each page of pass 1: cancel once it is
		// done, before pass 2 frees a chunk.
		ctx := &cancelAfter{Context: context.Background()}
		ctx.n.Store(int64(db.pool.NBlocks()))
		if _, err := db.Vacuum(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("round %d: vacuum: %v; want context.Canceled between its passes", round, err)
		}
		for range rand.IntN(20000) {
			runtime.Gosched()
		}
		owed := db.Stats().Vacuum.ChunksOwed
		if err := db.Close(); err != nil {
			t.Fatalf("round %d: Close: %v", round, err)
		}
		db = openTest(t, "/db", Options{FS: m, CheckpointTimeout: -1, Autovacuum: noAutovacuum})
		if n := chunkTuples(t, db); n != 0 {
			t.Errorf("round %d: %d chunk tuples after the reopen (%d owed just before Close); want none", round, n, owed)
		}
		if rep, err := db.Verify(); err != nil || !rep.OK() {
			t.Errorf("round %d: Verify after the reopen: %v, %v", round, err, rep.Problems)
		}
		for i := range keys {
			k := fmt.Sprintf("k%02d", i)
			if v, ok := get(t, db, k); !ok || v != "small "+k {
				t.Errorf("round %d: %s = %q, %v after the reopen", round, k, v, ok)
			}
		}
		db.Close()
		t.Logf("round %d: %d chunks owed just before Close", round, owed)
	}
}

// TestCloseAmidCommitPipelines: clients commit as the server does, each a
// pipeline of CommitAsync calls chained by after, then Wait for each before
// acknowledging, with early lock release on or off, while Close comes at a
// random moment. Every CommitAsync and Wait returns, with nil or ErrClosed,
// and the reopened database holds every acknowledged commit.
func TestCloseAmidCommitPipelines(t *testing.T) {
	for round := range 8 {
		m := vfs.NewMemFS()
		db := openTest(t, "/db", Options{FS: m, CheckpointTimeout: -1, Autovacuum: noAutovacuum})
		db.SetEarlyLockRelease(round%2 == 1)
		var mu sync.Mutex
		acked := map[string]string{}
		// The client's last acknowledged transaction, {pipeline, index};
		// its own key holds that one's write or a later one's.
		last := [4][2]int{{-1, -1}, {-1, -1}, {-1, -1}, {-1, -1}}
		var wg sync.WaitGroup
		var commits atomic.Int64
		closeAt := int64(1 + rand.IntN(400))
		closed := make(chan struct{})
		var closeOnce sync.Once
		var closeErr error
		for c := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; ; n++ {
					var prev *CommitWait
					var waits []*CommitWait
					var keys []string
					stop := false
					for i := range 8 {
						if commits.Add(1) == closeAt {
							closeOnce.Do(func() { go func() { closeErr = db.Close(); close(closed) }() })
						}
						// Two keys: one of the client's own, written by
						// every transaction of the pipeline (its row lock
						// passed along), and one new.
						k := fmt.Sprintf("c%d/%d/%d", c, n, i)
						tx, err := db.Begin(context.Background(), TxnOptions{})
						if err == nil {
							err = tx.Put([]byte(fmt.Sprintf("c%d", c)), []byte(k))
							if err == nil {
								err = tx.Put([]byte(k), []byte(k))
							}
							if err != nil {
								tx.Rollback()
							}
						}
						if err == nil {
							var w *CommitWait
							if w, err = tx.CommitAsync(prev); err == nil {
								prev = w
								waits, keys = append(waits, w), append(keys, k)
							}
						}
						if err != nil {
							if !errors.Is(err, ErrClosed) {
								t.Errorf("client %d: %v", c, err)
							}
							stop = true
							break
						}
					}
					for i, w := range waits {
						ctx, cancel := context.WithTimeout(context.Background(), liveness)
						err := w.Wait(ctx)
						cancel()
						if err == nil {
							mu.Lock()
							acked[keys[i]] = keys[i]
							last[c] = [2]int{n, i}
							mu.Unlock()
						} else if !errors.Is(err, ErrClosed) {
							t.Errorf("client %d: Wait: %v", c, err)
						}
					}
					if stop {
						return
					}
				}
			}()
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		if !waitLive(t, done, "clients") || !waitLive(t, closed, "Close") {
			t.FailNow()
		}
		if closeErr != nil {
			t.Fatalf("round %d: Close: %v", round, closeErr)
		}
		db = openTest(t, "/db", Options{FS: m, CheckpointTimeout: -1, Autovacuum: noAutovacuum})
		for k, v := range acked {
			if got, ok := get(t, db, k); !ok || got != v {
				t.Errorf("round %d: acknowledged %s = %q, %v after the reopen", round, k, got, ok)
			}
		}
		for c, l := range last {
			got, ok := get(t, db, fmt.Sprintf("c%d", c))
			var n, i int
			if ok {
				fmt.Sscanf(got, fmt.Sprintf("c%d/%%d/%%d", c), &n, &i)
			}
			if l[0] >= 0 && (!ok || n < l[0] || n == l[0] && i < l[1]) {
				t.Errorf("round %d: client %d's key holds %q (%v) after the reopen; want c%d/%d/%d or later", round, c, got, ok, c, l[0], l[1])
			}
		}
		if rep, err := db.Verify(); err != nil || !rep.OK() {
			t.Errorf("round %d: Verify after the reopen: %v, %v", round, err, rep.Problems)
		}
		db.Close()
		t.Logf("round %d: early lock release %v, %d commits begun, %d acknowledged", round, round%2 == 1, commits.Load(), len(acked))
	}
}

// TestCloseRacesBulkLoadStart: a Close started together with a bulk load
// into an empty database, and with a Checkpoint or a Backup beside them,
// each after a random number of yields, meets the load at every point of
// its start: before it registers, waiting for the checkpoint lock behind
// the Checkpoint or the Backup, taking the interlock, loading. The load
// returns nil or ErrClosed, Close nil, and the reopened database holds
// the whole load or none of it.
func TestCloseRacesBulkLoadStart(t *testing.T) {
	rounds := 150
	if testing.Short() || raceEnabled {
		rounds = 30
	}
	results := map[string]int{}
	for round := range rounds {
		m := vfs.NewMemFS()
		db := openTest(t, "/db", Options{FS: m, CheckpointTimeout: -1, Autovacuum: noAutovacuum})
		const keys = 2000
		start := make(chan struct{})
		loaded, closed, beside := make(chan error, 1), make(chan error, 1), make(chan error, 1)
		var st BulkLoadStats
		spin := func() {
			<-start
			for range rand.IntN(3000) {
				runtime.Gosched()
			}
		}
		go func() {
			spin()
			var err error
			st, err = db.BulkLoad(context.Background(), bulkRows(keys, 20))
			loaded <- err
		}()
		go func() { spin(); closed <- db.Close() }()
		withBackup := round%2 == 1
		go func() {
			spin()
			if withBackup {
				_, err := db.Backup(context.Background(), "/bk")
				beside <- err
			} else {
				beside <- db.Checkpoint()
			}
		}()
		close(start)
		lerr := recv(t, loaded, "BulkLoad")
		if err := recv(t, closed, "Close"); err != nil {
			t.Fatalf("round %d: Close: %v", round, err)
		}
		if err := recv(t, beside, "the Checkpoint or Backup beside"); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("round %d: Checkpoint or Backup: %v", round, err)
		}
		if lerr != nil && !errors.Is(lerr, ErrClosed) {
			t.Fatalf("round %d: BulkLoad: %v; want nil or ErrClosed", round, lerr)
		}
		// A Close between the load's commit and its checkpoint after
		// gives ErrClosed with the committed load's stats.
		want := 0
		switch {
		case lerr == nil:
			want = keys
			results["loaded"]++
		case st.Keys != 0:
			if st.Keys != keys {
				t.Fatalf("round %d: BulkLoad: %v with stats of %d keys; want %d", round, lerr, st.Keys, keys)
			}
			want = keys
			results["committed, then closed"]++
		default:
			results["closed"]++
		}
		if n := reopenCount(t, m); n != want {
			t.Fatalf("round %d: %d keys after the reopen, BulkLoad having returned %v; want %d", round, n, lerr, want)
		}
	}
	t.Logf("%d rounds: %v", rounds, results)
}

// isFlagSet reports whether the named flag was given on the command line.
func isFlagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
