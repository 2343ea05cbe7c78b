package server

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"mvkv/engine"
)

func TestMultiExecPipelined(t *testing.T) {
	ts := startServer(t, Config{})
	rdb := ts.client(t)
	ctx := context.Background()
	rdb.Set(ctx, "bal", "100", 0)
	before := ts.db.Stats()
	cmds, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.IncrBy(ctx, "bal", -30)
		p.IncrBy(ctx, "other", 30)
		p.Get(ctx, "bal")
		p.Set(ctx, "note", "moved", 0)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := cmds[2].(*redis.StringCmd).Val(); got != "70" {
		t.Fatalf("GET inside EXEC saw %q", got)
	}
	// One EXEC block is one engine transaction with one commit, which
	// waited for its own commit record to be durable.
	if d := ts.db.Stats().Sub(before); d.Txn.Commits != 1 || d.WAL.FlushRequests < 1 {
		t.Fatalf("%d commits and %d WAL flush requests for one EXEC", d.Txn.Commits, d.WAL.FlushRequests)
	}
	if got := rdb.Get(ctx, "other").Val(); got != "30" {
		t.Fatalf("other = %q", got)
	}
}

func TestMultiExecReplies(t *testing.T) {
	ts := startServer(t, Config{})
	r := ts.raw(t)
	// Empty EXEC.
	r.cmd("MULTI")
	r.expect("+OK\r\n")
	r.cmd("EXEC")
	r.expect("*0\r\n")
	// Nested MULTI and WATCH inside MULTI are refused without aborting.
	r.cmd("MULTI")
	r.expect("+OK\r\n")
	r.cmd("MULTI")
	r.expect("-ERR MULTI calls can not be nested\r\n")
	r.cmd("WATCH", "x")
	r.expect("-ERR WATCH inside MULTI is not allowed\r\n")
	r.cmd("SET", "k", "1")
	r.expect("+QUEUED\r\n")
	r.cmd("INCR", "k")
	r.expect("+QUEUED\r\n")
	r.cmd("EXEC")
	r.expect("*2\r\n+OK\r\n:2\r\n")
	// Queue-time errors discard the transaction.
	r.cmd("MULTI")
	r.expect("+OK\r\n")
	r.cmd("SET", "k", "9")
	r.expect("+QUEUED\r\n")
	r.cmd("GET")
	r.expect("-ERR wrong number of arguments for 'get' command\r\n")
	r.cmd("NOSUCH")
	r.expect("-ERR unknown command 'NOSUCH', with args beginning with: \r\n")
	r.cmd("EXEC")
	r.expect("-EXECABORT Transaction discarded because of previous errors.\r\n")
	r.cmd("GET", "k")
	r.expect("$1\r\n2\r\n")
}

func TestMultiRunTimeErrors(t *testing.T) {
	ts := startServer(t, Config{})
	r := ts.raw(t)
	r.cmd("SET", "s", "text")
	r.expect("+OK\r\n")
	// As Redis: a command failing at run time does not stop the others.
	r.cmd("MULTI")
	r.expect("+OK\r\n")
	r.cmd("SET", "a", "1")
	r.expect("+QUEUED\r\n")
	r.cmd("INCR", "s")
	r.expect("+QUEUED\r\n")
	r.cmd("SET", "b", "2", "BOGUS")
	r.expect("+QUEUED\r\n")
	r.cmd("SET", "c", "3")
	r.expect("+QUEUED\r\n")
	r.cmd("EXEC")
	r.expect("*4\r\n+OK\r\n-ERR value is not an integer or out of range\r\n-ERR syntax error\r\n+OK\r\n")
	r.cmd("MGET", "a", "b", "c")
	r.expect("*3\r\n$1\r\n1\r\n$-1\r\n$1\r\n3\r\n")
}

func TestDiscard(t *testing.T) {
	ts := startServer(t, Config{})
	r := ts.raw(t)
	r.cmd("WATCH", "w")
	r.expect("+OK\r\n")
	r.cmd("MULTI")
	r.expect("+OK\r\n")
	r.cmd("SET", "d", "1")
	r.expect("+QUEUED\r\n")
	r.cmd("DISCARD")
	r.expect("+OK\r\n")
	// State is reset: not in MULTI, nothing applied, nothing watched.
	r.cmd("GET", "d")
	r.expect("$-1\r\n")
	r.cmd("EXEC")
	r.expect("-ERR EXEC without MULTI\r\n")
	if n := ts.s.watch.n.Load(); n != 0 {
		t.Fatalf("%d keys still watched after DISCARD", n)
	}
	// A dirty transaction is reset by DISCARD too.
	r.cmd("MULTI")
	r.expect("+OK\r\n")
	r.cmd("GET")
	r.expect("-ERR wrong number of arguments for 'get' command\r\n")
	r.cmd("DISCARD")
	r.expect("+OK\r\n")
	r.cmd("MULTI")
	r.expect("+OK\r\n")
	r.cmd("EXEC")
	r.expect("*0\r\n")
}

func TestWatch(t *testing.T) {
	ts := startServer(t, Config{})
	ctx := context.Background()
	a := redis.NewClient(&redis.Options{Addr: ts.addr, PoolSize: 1})
	defer a.Close()
	b := redis.NewClient(&redis.Options{Addr: ts.addr, PoolSize: 1})
	defer b.Close()
	a.Set(ctx, "w", "1", 0)

	run := func(between func()) error {
		return a.Watch(ctx, func(tx *redis.Tx) error {
			v, err := tx.Get(ctx, "w").Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				return err
			}
			between()
			_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, "w", v+"x", 0)
				return nil
			})
			return err
		}, "w")
	}
	// Untouched: EXEC runs.
	if err := run(func() {}); err != nil {
		t.Fatal(err)
	}
	// Another connection writes the same value: EXEC aborts all the same.
	if err := run(func() { b.Set(ctx, "w", b.Get(ctx, "w").Val(), 0) }); !errors.Is(err, redis.TxFailedErr) {
		t.Fatalf("write from another connection: %v", err)
	}
	// Another connection deletes it.
	if err := run(func() { b.Del(ctx, "w") }); !errors.Is(err, redis.TxFailedErr) {
		t.Fatalf("delete from another connection: %v", err)
	}
	// FLUSHALL touches every watched key that exists.
	b.Set(ctx, "w", "1", 0)
	if err := run(func() { b.FlushAll(ctx) }); !errors.Is(err, redis.TxFailedErr) {
		t.Fatalf("FLUSHALL: %v", err)
	}
	// As Redis 7, and not one that does not exist: w is absent now.
	if err := run(func() { b.FlushAll(ctx) }); err != nil {
		t.Fatalf("FLUSHALL of a database without the watched key: %v", err)
	}
	// A write of another key does not abort.
	if err := run(func() { b.Set(ctx, "unrelated", "1", 0) }); err != nil {
		t.Fatalf("write of an unwatched key: %v", err)
	}
	// The watching connection's own write aborts, as in Redis.
	r := ts.raw(t)
	r.cmd("WATCH", "w")
	r.expect("+OK\r\n")
	r.cmd("SET", "w", "self")
	r.expect("+OK\r\n")
	r.cmd("MULTI")
	r.expect("+OK\r\n")
	r.cmd("SET", "w", "again")
	r.expect("+QUEUED\r\n")
	r.cmd("EXEC")
	r.expect("*-1\r\n")
	r.cmd("GET", "w")
	r.expect("$4\r\nself\r\n")
	// UNWATCH forgets.
	r.cmd("WATCH", "w")
	r.expect("+OK\r\n")
	r.cmd("UNWATCH")
	r.expect("+OK\r\n")
	b.Set(ctx, "w", "other", 0)
	r.cmd("MULTI")
	r.expect("+OK\r\n")
	r.cmd("GET", "w")
	r.expect("+QUEUED\r\n")
	r.cmd("EXEC")
	r.expect("*1\r\n$5\r\nother\r\n")
	if n := ts.s.watch.n.Load(); n != 0 {
		t.Fatalf("%d keys still watched", n)
	}
}

// TestWatchCounter: optimistic increments from several connections never
// lose an update.
func TestWatchCounter(t *testing.T) {
	ts := startServer(t, Config{})
	ctx := context.Background()
	const clients, each = 4, 25
	errc := make(chan error, clients)
	for i := 0; i < clients; i++ {
		go func() {
			c := redis.NewClient(&redis.Options{Addr: ts.addr, PoolSize: 1})
			defer c.Close()
			for j := 0; j < each; j++ {
				for {
					err := c.Watch(ctx, func(tx *redis.Tx) error {
						n, err := tx.Get(ctx, "ctr").Int()
						if err != nil && !errors.Is(err, redis.Nil) {
							return err
						}
						_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
							p.Set(ctx, "ctr", n+1, 0)
							return nil
						})
						return err
					}, "ctr")
					if err == nil {
						break
					}
					if !errors.Is(err, redis.TxFailedErr) {
						errc <- err
						return
					}
				}
			}
			errc <- nil
		}()
	}
	for i := 0; i < clients; i++ {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	rdb := ts.client(t)
	if got, _ := rdb.Get(ctx, "ctr").Int(); got != clients*each {
		t.Fatalf("counter %d, want %d", got, clients*each)
	}
}

// TestCloseInMulti: a client that disconnects inside MULTI, or with keys
// watched, leaves no engine transaction, lock or watch behind.
func TestCloseInMulti(t *testing.T) {
	ts := startServer(t, Config{})
	r := ts.raw(t)
	r.cmd("WATCH", "k")
	r.expect("+OK\r\n")
	r.cmd("MULTI")
	r.expect("+OK\r\n")
	r.cmd("SET", "k", "from-multi")
	r.expect("+QUEUED\r\n")
	// Half of the next request, then gone.
	r.send("*3\r\n$3\r\nSET\r\n")
	r.nc.Close()
	rdb := ts.client(t)
	ctx := context.Background()
	// The connection's goroutine ends; then nothing of it remains.
	for ts.s.watch.n.Load() != 0 {
		rdb.Ping(ctx) // a round trip, to let the server run
	}
	if n := ts.s.OpenTransactions(); n != 0 {
		t.Fatalf("%d engine transactions open", n)
	}
	if n := ts.s.watch.n.Load(); n != 0 {
		t.Fatalf("%d keys still watched", n)
	}
	// The key is writable (no row lock held) and the queued SET never ran.
	if err := rdb.Set(ctx, "k", "after", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got := rdb.Get(ctx, "k").Val(); got != "after" {
		t.Fatalf("k = %q", got)
	}
	if !strings.Contains(rdb.Info(ctx, "clients").Val(), "open_transactions:0") {
		t.Fatal("INFO shows open transactions")
	}
}

// TestMultiKeyWritesDoNotDeadlock: MSET, DEL, WATCH and EXEC blocks (with
// watched keys too) naming the same keys in different orders take their
// row locks in one order, so they queue behind each other and never
// deadlock. With MaxRetries 1 a deadlock
// would reach the client as an error instead of being rerun.
func TestMultiKeyWritesDoNotDeadlock(t *testing.T) {
	ts := startServer(t, Config{MaxRetries: 1})
	ctx := context.Background()
	const rounds = 150
	type job func(rdb *redis.Client, i int) error
	jobs := []job{
		func(rdb *redis.Client, i int) error { return rdb.MSet(ctx, "d1", i, "d2", i, "d3", i).Err() },
		func(rdb *redis.Client, i int) error { return rdb.MSet(ctx, "d3", i, "d2", i, "d1", i).Err() },
		func(rdb *redis.Client, i int) error { return rdb.Del(ctx, "d2", "d1").Err() },
		func(rdb *redis.Client, i int) error {
			_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Incr(ctx, "d3")
				p.Set(ctx, "d1", i, 0)
				return nil
			})
			return err
		},
		func(rdb *redis.Client, i int) error {
			_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, "d1", i, 0)
				p.Set(ctx, "d2", i, 0)
				p.Incr(ctx, "d3")
				return nil
			})
			return err
		},
		// A watched key and one written key: two locks, in key order.
		func(rdb *redis.Client, i int) error {
			err := rdb.Watch(ctx, func(tx *redis.Tx) error {
				_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
					p.Set(ctx, "d1", i, 0)
					return nil
				})
				return err
			}, "d3")
			if errors.Is(err, redis.TxFailedErr) {
				return nil // another client wrote d3: EXEC's null reply
			}
			return err
		},
		// WATCH of several keys holds one lock at a time.
		func(rdb *redis.Client, i int) error {
			return rdb.Watch(ctx, func(*redis.Tx) error { return nil }, "d3", "d2", "d1")
		},
	}
	errs := make(chan error, len(jobs))
	for _, j := range jobs {
		rdb := ts.client(t)
		go func() {
			for i := range rounds {
				if err := j(rdb, i); err != nil && !strings.Contains(err.Error(), "not an integer") {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range jobs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestMSetRepeatedKey: the last value given for a key is the one set, and
// the earlier ones are not written as versions of their own.
func TestMSetRepeatedKey(t *testing.T) {
	ts := startServer(t, Config{})
	rdb := ts.client(t)
	ctx := context.Background()
	args := []any{}
	for i := range 1000 {
		args = append(args, "r", i, "s", -i)
	}
	before := ts.db.Stats()
	if err := rdb.MSet(ctx, args...).Err(); err != nil {
		t.Fatal(err)
	}
	if r, s := rdb.Get(ctx, "r").Val(), rdb.Get(ctx, "s").Val(); r != "999" || s != "-999" {
		t.Fatalf("r = %q, s = %q after MSET", r, s)
	}
	// Two versions and a commit record, not 2,000 versions.
	if d := ts.db.Stats().Sub(before); d.WAL.Records > 3 {
		t.Fatalf("MSET of 2 keys, each named 1000 times, wrote %d WAL records", d.WAL.Records)
	}
	if n := rdb.Del(ctx, "r", "s", "r", "nosuch").Val(); n != 2 {
		t.Fatalf("DEL r s r nosuch = %d, want 2", n)
	}
}

// TestFlushAllInBlockRetries: FLUSHALL inside a block, after the block's
// own write, can still deadlock with MSET (it locks every key, and a key
// written after the block took its locks is out of their order); the
// rerun after a random wait (backoff) succeeds, so no client sees it.
func TestFlushAllInBlockRetries(t *testing.T) {
	ts := startServer(t, Config{})
	ctx := context.Background()
	const rounds = 200
	errs := make(chan error, 3)
	for c := range 3 {
		rdb := ts.client(t)
		go func() {
			for i := range rounds {
				var err error
				if c == 0 {
					_, err = rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
						p.Set(ctx, "f3", i, 0)
						p.FlushAll(ctx)
						return nil
					})
				} else {
					err = rdb.MSet(ctx, "f1", i, "f2", i, "f3", i).Err()
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d deadlocks, each rerun", ts.db.Stats().Txn.Deadlocks)
}

// TestWatchKeyTheEngineCannotStore: WATCH of an empty key, or of one
// longer than the engine takes, succeeds as in Redis and never fires, since
// nobody can write such a key; the EXEC after it runs.
func TestWatchKeyTheEngineCannotStore(t *testing.T) {
	ts := startServer(t, Config{})
	r := ts.raw(t)
	r.cmd("WATCH", "", strings.Repeat("k", 2000), "w")
	r.expect("+OK\r\n")
	r.cmd("MULTI")
	r.expect("+OK\r\n")
	r.cmd("SET", "w", "1")
	r.expect("+QUEUED\r\n")
	r.cmd("EXEC")
	r.expect("*1\r\n+OK\r\n")
}

// TestWatchRolledBackWrite: a write that rolls back never happened, so it
// does not abort a WATCH on its key, as in Redis, where such a write does
// not exist. MSET w z bumps w's watch version when it writes w, then times
// out waiting for z's row lock (held by an embedding program's
// transaction) and rolls back; the watcher's EXEC must still run. A write
// that commits still aborts it.
func TestWatchRolledBackWrite(t *testing.T) {
	ts := startServerOn(t, Config{}, engine.Options{LockTimeout: 200 * time.Millisecond})
	ctx := context.Background()
	r := ts.raw(t)
	other := ts.raw(t)
	r.cmd("SET", "w", "0")
	r.expect("+OK\r\n")
	r.cmd("WATCH", "w")
	r.expect("+OK\r\n")

	hold, err := ts.db.Begin(ctx, engine.TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := hold.Put([]byte("z"), []byte("held")); err != nil {
		t.Fatal(err)
	}
	other.cmd("MSET", "w", "1", "z", "1")
	if got := other.reply(); !strings.Contains(got, "lock timeout") {
		t.Fatalf("MSET against a held lock: %q", got)
	}
	other.cmd("DEL", "w", "z")
	if got := other.reply(); !strings.Contains(got, "lock timeout") {
		t.Fatalf("DEL against a held lock: %q", got)
	}
	hold.Rollback()
	r.cmd("MULTI")
	r.expect("+OK\r\n")
	r.cmd("GET", "w")
	r.expect("+QUEUED\r\n")
	r.cmd("EXEC")
	r.expect("*1\r\n$1\r\n0\r\n")

	// The same with a write that commits: EXEC answers nil.
	r.cmd("WATCH", "w")
	r.expect("+OK\r\n")
	other.cmd("MSET", "w", "2", "z", "2")
	other.expect("+OK\r\n")
	r.cmd("MULTI")
	r.expect("+OK\r\n")
	r.cmd("GET", "w")
	r.expect("+QUEUED\r\n")
	r.cmd("EXEC")
	r.expect("*-1\r\n")
}

// TestWatchFlushAll: FLUSHALL aborts only the WATCHes of keys that existed,
// as Redis 7's touchAllWatchedKeysInDb; one of a key that had already
// expired when WATCH ran is not aborted either.
func TestWatchFlushAll(t *testing.T) {
	ts := startServer(t, Config{})
	r := ts.raw(t)
	other := ts.raw(t)
	step := func(want string, args ...string) {
		t.Helper()
		r.cmd(args...)
		r.expect(want)
	}
	block := func(want string) {
		t.Helper()
		step("+OK\r\n", "MULTI")
		step("+QUEUED\r\n", "PING")
		step(want, "EXEC")
	}
	// Absent key.
	step(":0\r\n", "DEL", "x")
	step("+OK\r\n", "WATCH", "x")
	other.cmd("FLUSHALL")
	other.expect("+OK\r\n")
	block("*1\r\n+PONG\r\n")
	// Live key.
	step("+OK\r\n", "SET", "x", "1")
	step("+OK\r\n", "WATCH", "x")
	other.cmd("FLUSHALL")
	other.expect("+OK\r\n")
	block("*-1\r\n")
	// Key already expired at WATCH, still stored.
	step("+OK\r\n", "SET", "x", "1", "PX", "1")
	time.Sleep(5 * time.Millisecond)
	step("+OK\r\n", "WATCH", "x")
	other.cmd("FLUSHALL")
	other.expect("+OK\r\n")
	block("*1\r\n+PONG\r\n")
	// Another key only.
	step("+OK\r\n", "SET", "x", "1")
	step("+OK\r\n", "WATCH", "y")
	other.cmd("FLUSHALL")
	other.expect("+OK\r\n")
	block("*1\r\n+PONG\r\n")
}

// TestWatchUndoneWhenErrorAborts: the engine releases a transaction's row
// locks as soon as an error aborts it, before the connection gets to roll
// back; the watch versions the transaction bumped must be back by then,
// or a WATCH taking the freed lock would record the bumped version, and
// miss the next real write once the undo came. The undo runs at the
// failing call (engine.Txn.OnAbort), once.
func TestWatchUndoneWhenErrorAborts(t *testing.T) {
	ts := startServerOn(t, Config{}, engine.Options{LockTimeout: 20 * time.Millisecond})
	ctx := context.Background()
	ts.s.watch.acquire("w")
	defer ts.s.watch.release("w")
	v0 := ts.s.watch.version("w")
	hold, err := ts.db.Begin(ctx, engine.TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback()
	if err := hold.Put([]byte("z"), []byte("held")); err != nil {
		t.Fatal(err)
	}
	c := &conn{s: ts.s}
	tx, err := ts.db.Begin(ctx, engine.TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	x := &execCtx{c: c, tx: tx}
	if err := tx.Put([]byte("w"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	x.wrote([]byte("w"))
	if got := ts.s.watch.version("w"); got != v0+1 {
		t.Fatalf("after the write, w's watch version %d; want %d", got, v0+1)
	}
	if err := tx.Put([]byte("z"), []byte("1")); !errors.Is(err, engine.ErrLockTimeout) {
		t.Fatalf("writing a held key: %v; want a lock timeout", err)
	}
	if got := ts.s.watch.version("w"); got != v0 {
		t.Fatalf("w's lock is free, and its watch version is %d; want %d", got, v0)
	}
	// w's lock is free: another writer takes it at once (it would time
	// out otherwise).
	other, err := ts.db.Begin(ctx, engine.TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Lock([]byte("w")); err != nil {
		t.Fatalf("locking w after the abort: %v", err)
	}
	other.Rollback()
	c.untouch()
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if got := ts.s.watch.version("w"); got != v0 {
		t.Fatalf("after the rollback, w's watch version %d; want %d", got, v0)
	}
}

// A write whose commit certainly wrote nothing (the database closed, or
// the connection's context ended, before the commit record) puts back
// the WATCH version it bumped, as a rollback does: a client watching the
// key would otherwise have its EXEC aborted by a write that never
// happened. A commit that succeeds keeps the bump.
func TestWatchBumpUndoneWhenCommitWritesNothing(t *testing.T) {
	for _, c := range append([]commitFailure{
		{"committed", false, func(*Server, context.CancelFunc) {}, nil},
		{"committed, pipelined", true, func(*Server, context.CancelFunc) {}, nil},
	}, commitFailsBeforeRecord...) {
		t.Run(c.name, func(t *testing.T) {
			s, cn := unservedConn(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cn.ctx = ctx
			// What WATCH k records, from another client.
			watched := s.watch.acquire("k")
			defer s.watch.release("k")
			tx, x := beginWrite(t, cn)
			runIn(t, x, "SET", "k", "v")
			if got := s.watch.version("k"); got != watched+1 {
				t.Fatalf("watch version %d after SET k; want %d", got, watched+1)
			}
			c.fail(s, cancel)
			var err error
			if c.pipelined {
				err = cn.commitPipelined(tx, 0)
			} else {
				err = cn.commit(tx)
			}
			if c.want == nil {
				if err != nil {
					t.Fatalf("commit: %v", err)
				}
				if got := s.watch.version("k"); got != watched+1 {
					t.Fatalf("watch version %d after the SET committed; want %d (the watcher's EXEC must abort)", got, watched+1)
				}
				return
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("commit: %v, want %v", err, c.want)
			}
			if got := s.watch.version("k"); got != watched {
				t.Fatalf("watch version %d after the SET's commit failed before its record (%v); want %d, what the watcher recorded", got, err, watched)
			}
			if len(cn.bumped) != 0 {
				t.Fatalf("%d bumps left for the next transaction to undo", len(cn.bumped))
			}
		})
	}
}

// TestExecClientReply: CLIENT REPLY OFF or ON queued in a block takes
// effect at once, as in Redis: the replies made while replies are off are
// dropped, the array's header included (Redis's array then has fewer
// elements than it says, and so does the server's). The expected bytes
// are Redis 7.0's.
func TestExecClientReply(t *testing.T) {
	ts := startServer(t, Config{})
	for _, c := range []struct{ send, want string }{
		{"MULTI\r\nCLIENT REPLY OFF\r\nECHO in\r\nEXEC\r\nECHO out\r\nCLIENT REPLY ON\r\nECHO on\r\n",
			"+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n+OK\r\n$2\r\non\r\n"},
		{"CLIENT REPLY OFF\r\nMULTI\r\nECHO a\r\nCLIENT REPLY ON\r\nECHO b\r\nEXEC\r\nECHO c\r\n",
			"+OK\r\n$1\r\nb\r\n$1\r\nc\r\n"},
		{"MULTI\r\nCLIENT REPLY OFF\r\nSET a 1\r\nCLIENT REPLY ON\r\nGET a\r\nEXEC\r\nECHO c\r\n",
			"+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n*4\r\n+OK\r\n$1\r\n1\r\n$1\r\nc\r\n"},
		{"CLIENT REPLY OFF\r\nMULTI\r\nECHO a\r\nEXEC\r\nCLIENT REPLY ON\r\nECHO c\r\n", "+OK\r\n$1\r\nc\r\n"},
	} {
		r := ts.raw(t)
		r.send(c.send)
		got := make([]byte, len(c.want))
		r.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(r.br, got); err != nil || string(got) != c.want {
			t.Errorf("%q: got %q (%v), want %q", c.send, got, err, c.want)
		}
	}
}

// TestFlushAllAsOfOneMoment: FLUSHALL removes what one moment's keyspace
// held. Here it waits for b's row lock, held by a transaction that
// updates b; meanwhile another client creates a, and then b's writer
// commits. FLUSHALL then removes b's new value, so it comes after b's
// commit, and so after a's: a must be gone too. Deleting every key its
// snapshot saw at READ COMMITTED, FLUSHALL removed b (committed after
// that snapshot) and kept a (created after it), an order no serial run
// gives.
func TestFlushAllAsOfOneMoment(t *testing.T) {
	ts := startServer(t, Config{})
	ctx := context.Background()
	r, other := ts.raw(t), ts.raw(t)
	r.cmd("SET", "b", "old")
	r.expect("+OK\r\n")
	hold, err := ts.db.Begin(ctx, engine.TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback()
	if err := hold.Put([]byte("b"), []byte("new")); err != nil {
		t.Fatal(err)
	}
	r.cmd("FLUSHALL")
	waitFor(t, "FLUSHALL to wait for b's row lock", func() bool { return ts.db.Stats().Txn.LockWaiters == 1 })
	other.cmd("SET", "a", "1")
	other.expect("+OK\r\n")
	if err := hold.Commit(); err != nil {
		t.Fatal(err)
	}
	r.expect("+OK\r\n")
	other.cmd("EXISTS", "a", "b")
	if got := other.reply(); got != ":0\r\n" {
		other.cmd("MGET", "a", "b")
		t.Fatalf("after FLUSHALL, which removed b's new value, EXISTS a b = %q (MGET: %q)", got, other.reply())
	}
}
