package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"mvkv/engine"
)

func TestValueEncoding(t *testing.T) {
	for _, c := range []struct {
		val      string
		deadline int64
	}{
		{"", 0}, {"v", 0}, {"\xff", 0}, {"\xff\x01abcdefghij", 0}, {"\xff\x00", 0},
		{"", 1}, {"v", 1700000000000}, {"\xffx", -5},
	} {
		enc := encodeValue([]byte(c.val), c.deadline)
		v, d := decodeValue(enc)
		if string(v) != c.val || d != c.deadline {
			t.Errorf("encode(%q, %d) = %q decodes to %q, %d", c.val, c.deadline, enc, v, d)
		}
	}
	if enc := encodeValue([]byte("plain"), 0); string(enc) != "plain" {
		t.Errorf("a plain value is stored as %q", enc)
	}
}

// FuzzDecodeValue: any stored bytes decode without panic, a value that
// decodes as plain re-encodes to bytes that decode the same, and every
// value and deadline round-trip.
func FuzzDecodeValue(f *testing.F) {
	f.Add([]byte("v"), int64(0))
	f.Add([]byte("\xff\x01\x00\x00\x00\x00\x00\x00\x00\x00x"), int64(12))
	f.Add([]byte("\xff"), int64(-1))
	f.Fuzz(func(t *testing.T, raw []byte, deadline int64) {
		v, d := decodeValue(raw)
		v2, d2 := decodeValue(encodeValue(v, d))
		if !bytes.Equal(v, v2) || d != d2 {
			t.Fatalf("%q decodes to %q, %d, which re-encodes to %q, %d", raw, v, d, v2, d2)
		}
		v3, d3 := decodeValue(encodeValue(raw, deadline))
		if !bytes.Equal(v3, raw) || d3 != deadline {
			t.Fatalf("(%q, %d) round-trips to (%q, %d)", raw, deadline, v3, d3)
		}
	})
}

// putRaw stores bytes for key directly through the engine.
func putRaw(t *testing.T, db *engine.DB, key string, raw []byte) {
	t.Helper()
	if err := db.Update(context.Background(), func(tx *engine.Txn) error { return tx.Put([]byte(key), raw) }); err != nil {
		t.Fatal(err)
	}
}

func engineHas(t *testing.T, db *engine.DB, key string) bool {
	t.Helper()
	err := db.View(context.Background(), func(tx *engine.Txn) error { _, err := tx.Get([]byte(key)); return err })
	if err != nil && !errors.Is(err, engine.ErrNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

// TestExpiredKeysAbsent: a key past its deadline reads as absent to every
// command, writes treat it as absent, and a read removes it.
func TestExpiredKeysAbsent(t *testing.T) {
	ts := startServer(t, Config{})
	r := ts.raw(t)
	past := encodeValue([]byte("7"), 1) // 1 ms after the epoch
	for _, k := range []string{"e1", "e2", "e3", "e4", "e5", "e6", "e7"} {
		putRaw(t, ts.db, k, past)
	}
	r.cmd("SET", "live", "v")
	r.expect("+OK\r\n")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"GET", "e1"}, "$-1\r\n"},
		{[]string{"EXISTS", "e2", "live"}, ":1\r\n"},
		{[]string{"MGET", "e2", "live"}, "*2\r\n$-1\r\n$1\r\nv\r\n"},
		{[]string{"TYPE", "e2"}, "+none\r\n"},
		{[]string{"TTL", "e2"}, ":-2\r\n"},
		{[]string{"PTTL", "e2"}, ":-2\r\n"},
		{[]string{"SCAN", "0", "COUNT", "100"}, "*2\r\n$1\r\n0\r\n*1\r\n$4\r\nlive\r\n"},
		{[]string{"DBSIZE"}, ":1\r\n"},
		{[]string{"INCR", "e3"}, ":1\r\n"},
		{[]string{"TTL", "e3"}, ":-1\r\n"},
		{[]string{"SET", "e4", "x", "XX"}, "$-1\r\n"},
		{[]string{"SET", "e5", "x", "NX"}, "+OK\r\n"},
		{[]string{"SET", "e6", "x", "GET"}, "$-1\r\n"},
		{[]string{"DEL", "e7"}, ":0\r\n"},
		{[]string{"EXPIRE", "e7", "100"}, ":0\r\n"},
		{[]string{"PERSIST", "e7"}, ":0\r\n"},
	} {
		r.cmd(c.args...)
		if got := r.reply(); got != c.want {
			t.Errorf("%q: got %q, want %q", c.args, got, c.want)
		}
	}
	// Reads removed what they found expired (SCAN and DBSIZE found them
	// all); writes replaced or deleted theirs.
	for _, k := range []string{"e1", "e2", "e4", "e7"} {
		if engineHas(t, ts.db, k) {
			t.Errorf("expired %s still stored after it was read", k)
		}
	}
	r.cmd("INFO", "stats")
	if got := r.reply(); !strings.Contains(got, "expired_keys:") || strings.Contains(got, "expired_keys:0\r\n") {
		t.Errorf("INFO stats does not count expired keys:\n%s", got)
	}
}

// TestTTLCommands pins TTL, PTTL, EXPIRE and its options, PERSIST, and SET's
// expiry options against Redis's replies.
func TestTTLCommands(t *testing.T) {
	ts := startServer(t, Config{})
	rdb := ts.client(t)
	ctx := context.Background()
	do := func(args ...any) string {
		t.Helper()
		v, err := rdb.Do(ctx, args...).Result()
		if err != nil {
			return "err: " + err.Error()
		}
		return fmt.Sprint(v)
	}
	eq := func(got, want string) {
		t.Helper()
		if got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
	inRange := func(got string, lo, hi int64) {
		t.Helper()
		n, err := strconv.ParseInt(got, 10, 64)
		if err != nil || n < lo || n > hi {
			t.Fatalf("got %q, want %d..%d", got, lo, hi)
		}
	}
	eq(do("SET", "k", "v", "EX", "100"), "OK")
	eq(do("TTL", "k"), "100")
	inRange(do("PTTL", "k"), 90000, 100000)
	eq(do("SET", "k", "w", "KEEPTTL"), "OK")
	inRange(do("PTTL", "k"), 90000, 100000)
	eq(do("SET", "k", "w"), "OK")
	eq(do("TTL", "k"), "-1")
	eq(do("TTL", "missing"), "-2")
	eq(do("SET", "k", "v", "PX", "50000", "GET"), "w")
	inRange(do("PTTL", "k"), 40000, 50000)
	future := time.Now().Add(time.Hour).UnixMilli()
	eq(do("SET", "k", "v", "PXAT", future), "OK")
	inRange(do("PTTL", "k"), 3500000, 3600000)
	eq(do("SET", "k", "v", "EXAT", "1"), "OK") // long past: the key is gone
	eq(do("GET", "k"), "err: redis: nil")

	// INCR keeps the expiry.
	eq(do("SET", "n", "1", "EX", "100"), "OK")
	eq(do("INCR", "n"), "2")
	inRange(do("TTL", "n"), 99, 100)

	// EXPIRE and its conditions.
	eq(do("EXPIRE", "missing", "10"), "0")
	eq(do("SET", "e", "v"), "OK")
	eq(do("EXPIRE", "e", "100", "XX"), "0")
	eq(do("EXPIRE", "e", "100", "GT"), "0") // no expiry is an infinite one
	eq(do("EXPIRE", "e", "100", "NX"), "1")
	eq(do("EXPIRE", "e", "200", "NX"), "0")
	eq(do("EXPIRE", "e", "50", "GT"), "0")
	eq(do("EXPIRE", "e", "200", "GT"), "1")
	eq(do("TTL", "e"), "200")
	eq(do("EXPIRE", "e", "300", "LT"), "0")
	eq(do("PEXPIRE", "e", "150000", "LT"), "1")
	eq(do("TTL", "e"), "150")
	eq(do("EXPIREAT", "e", time.Now().Add(time.Hour).Unix()), "1")
	inRange(do("TTL", "e"), 3590, 3600)
	eq(do("PERSIST", "e"), "1")
	eq(do("PERSIST", "e"), "0")
	eq(do("TTL", "e"), "-1")
	eq(do("EXPIRE", "e", "-1"), "1") // a deadline in the past deletes
	eq(do("EXISTS", "e"), "0")

	// Errors, as Redis words them.
	eq(do("EXPIRE", "e", "10", "FOO"), "err: ERR Unsupported option FOO")
	eq(do("EXPIRE", "e", "10", "NX", "XX"), "err: ERR NX and XX, GT or LT options at the same time are not compatible")
	eq(do("EXPIRE", "e", "10", "GT", "LT"), "err: ERR GT and LT options at the same time are not compatible")
	eq(do("EXPIRE", "e", "x"), "err: ERR value is not an integer or out of range")
	eq(do("EXPIRE", "e", "9223372036854775807"), "err: ERR invalid expire time in 'expire' command")
	eq(do("PEXPIRE", "e", "9223372036854775807"), "err: ERR invalid expire time in 'pexpire' command")
	eq(do("SET", "e", "v", "EX", "-1"), "err: ERR invalid expire time in 'set' command")
	eq(do("SET", "e", "v", "EX", "10", "PX", "10"), "err: ERR syntax error")
	eq(do("SET", "e", "v", "EX", "10", "KEEPTTL"), "err: ERR syntax error")
	eq(do("TTL"), "err: ERR wrong number of arguments for 'ttl' command")

	// A value starting with the encoding's mark byte is stored as it is.
	eq(do("SET", "m", "\xff\x01odd"), "OK")
	eq(do("GET", "m"), "\xff\x01odd")
	eq(do("MSET", "m", "\xff"), "OK")
	eq(do("GET", "m"), "\xff")
}

// TestWatchExpiry: as Redis, a watched key that expires between WATCH and
// EXEC aborts EXEC; one already expired at WATCH, and removed since, does
// not.
func TestWatchExpiry(t *testing.T) {
	ts := startServer(t, Config{})
	rdb := redis.NewClient(&redis.Options{Addr: ts.addr, PoolSize: 1})
	defer rdb.Close()
	ctx := context.Background()
	putRaw(t, ts.db, "gone", encodeValue([]byte("v"), 1))
	err := rdb.Watch(ctx, func(tx *redis.Tx) error {
		// Another client's read removes the expired key.
		if err := ts.client(t).Get(ctx, "gone").Err(); !errors.Is(err, redis.Nil) {
			return fmt.Errorf("GET gone: %v", err)
		}
		_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error { p.Set(ctx, "a", "1", 0); return nil })
		return err
	}, "gone")
	if err != nil {
		t.Fatalf("EXEC after an already expired watched key was removed: %v", err)
	}
	// The key must still be live when WATCH runs: a slow machine can
	// take longer than the key's life between its SET and its WATCH, and
	// then tries again with a new key that lives longer. The watch is
	// known to have seen the key live if the callback starts before the
	// deadline (WATCH ran before it, on the same clock).
	errTooLate := errors.New("the key's deadline passed before WATCH returned")
	for life := 50 * time.Millisecond; ; life *= 2 {
		key := fmt.Sprintf("soon%d", life.Milliseconds())
		deadline := time.Now().Add(life).UnixMilli()
		if err := rdb.Do(ctx, "SET", key, "v", "PXAT", deadline).Err(); err != nil {
			t.Fatal(err)
		}
		err = rdb.Watch(ctx, func(tx *redis.Tx) error {
			if time.Now().UnixMilli() >= deadline {
				return errTooLate
			}
			for time.Now().UnixMilli() <= deadline {
				time.Sleep(5 * time.Millisecond)
			}
			_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error { p.Set(ctx, "a", "2", 0); return nil })
			return err
		}, key)
		if errors.Is(err, errTooLate) && life < 10*time.Second {
			t.Logf("%v: the key expired before WATCH; again with a longer life", life)
			continue
		}
		if !errors.Is(err, redis.TxFailedErr) {
			t.Fatalf("EXEC after a watched key expired: %v; want a failed transaction", err)
		}
		break
	}
	if v := rdb.Get(ctx, "a").Val(); v != "1" {
		t.Fatalf("a = %q; want 1", v)
	}
}

// TestExpiryRestart: a deadline is stored with the value and survives a
// restart.
func TestExpiryRestart(t *testing.T) {
	dir := t.TempDir()
	start := func() (*engine.DB, *Server, string) {
		db, err := engine.Open(dir, engine.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := New(db, Config{})
		go s.Serve(context.Background(), ln)
		return db, s, ln.Addr().String()
	}
	stop := func(db *engine.DB, s *Server) {
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	db, s, addr := start()
	c := redis.NewClient(&redis.Options{Addr: addr})
	if err := c.Set(ctx, "k", "v", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	c.Close()
	stop(db, s)
	db, s, addr = start()
	defer stop(db, s)
	c = redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	if ttl := c.TTL(ctx, "k").Val(); ttl < 59*time.Minute || ttl > time.Hour {
		t.Fatalf("TTL after restart: %v", ttl)
	}
	if v := c.Get(ctx, "k").Val(); v != "v" {
		t.Fatalf("GET after restart: %q", v)
	}
}

// TestActiveExpiry: keys past their deadline that nobody reads are removed
// by the active expiry cycle (INFO's expired_keys counts them), keys
// without one are left alone, and once a pass finds no deadline the cycle
// rests until a write stores one.
func TestActiveExpiry(t *testing.T) {
	ts := startServer(t, Config{})
	r := ts.raw(t)
	var b strings.Builder
	const n, keep = 2500, 700
	for i := range n {
		fmt.Fprintf(&b, "*5\r\n$3\r\nSET\r\n$6\r\nx%05d\r\n$1\r\nv\r\n$2\r\nPX\r\n$3\r\n200\r\n", i)
	}
	for i := range keep {
		fmt.Fprintf(&b, "*3\r\n$3\r\nSET\r\n$6\r\nk%05d\r\n$1\r\nv\r\n", i)
	}
	r.send(b.String())
	for range n + keep {
		r.expect("+OK\r\n")
	}
	expiredKeys := func() int {
		t.Helper()
		r.cmd("INFO", "stats")
		got := r.reply()
		_, v, _ := strings.Cut(got, "expired_keys:")
		v, _, _ = strings.Cut(v, "\r\n")
		e, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("INFO stats: %q", got)
		}
		return e
	}
	deadline := time.Now().Add(30 * time.Second)
	for expiredKeys() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d expired keys removed without being read", expiredKeys(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if e := expiredKeys(); e != n {
		t.Fatalf("expired_keys %d, want %d", e, n)
	}
	// The deletes are real: a scan at the engine finds only the others.
	left := 0
	if err := ts.db.View(context.Background(), func(tx *engine.Txn) error {
		return tx.Scan(nil, nil, func(k, _ []byte) bool { left++; return true })
	}); err != nil || left != keep {
		t.Fatalf("%d keys stored (%v), want %d", left, err, keep)
	}
	for ts.s.expiry.maybe.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the cycle did not come to rest after a pass with no deadline")
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.cmd("SET", "late", "v", "PX", "100")
	r.expect("+OK\r\n")
	// Asleep now, the cycle was not woken, unless it already woke, removed
	// late and went back to rest (a stall of 100 ms or more on a loaded
	// machine): then the removal counts.
	if !ts.s.expiry.maybe.Load() && expiredKeys() < n+1 {
		t.Fatal("a write with a deadline did not wake the cycle")
	}
	for expiredKeys() < n+1 {
		if time.Now().After(deadline) {
			t.Fatal("a key written with a deadline after the cycle rested was not removed")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestActiveExpiryNotRestedByUncommittedWrite: a pass that runs between a
// write's deadline being noted and its commit becoming visible finds
// nothing; the commit must wake the cycle again, or the key would stay
// stored past its deadline until read.
func TestActiveExpiryNotRestedByUncommittedWrite(t *testing.T) {
	g := newGateFS()
	off := false
	ts := startServerOn(t, Config{}, engine.Options{FS: g, WALWriterDelay: time.Hour, EarlyLockRelease: &off})
	defer g.open()
	a, b := ts.raw(t), ts.raw(t)
	a.cmd("PING")
	a.expect("+PONG\r\n")
	g.shut()
	a.cmd("SET", "k", "v", "PX", "300") // invisible until its sync passes the gate
	deadline := time.Now().Add(20 * time.Second)
	for !ts.s.expiry.maybe.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the write's deadline did not wake the cycle")
		}
		time.Sleep(time.Millisecond)
	}
	// A pass over a keyspace where the write is not visible yet puts
	// the cycle to rest.
	for ts.s.expiry.maybe.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the cycle did not come to rest while the write was invisible")
		}
		time.Sleep(time.Millisecond)
	}
	g.open()
	a.expect("+OK\r\n")
	for {
		b.cmd("INFO", "stats")
		if strings.Contains(b.reply(), "\r\nexpired_keys:1\r\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the key was not removed by the cycle after its commit")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// unservedConn opens a database and a Server on it that does not serve
// (so no active expiry cycle reaps keys behind the test's back), and
// returns the server and a connection to drive commands through.
func unservedConn(t *testing.T) (*Server, *conn) {
	t.Helper()
	db, err := engine.Open(t.TempDir(), engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s := New(db, Config{})
	return s, &conn{s: s, ctx: context.Background()}
}

// beginWrite begins a READ COMMITTED write transaction on c.
func beginWrite(t *testing.T, c *conn) (*engine.Txn, *execCtx) {
	t.Helper()
	tx, err := c.begin(true, engine.ReadCommitted)
	if err != nil {
		t.Fatal(err)
	}
	return tx, &execCtx{c: c, tx: tx}
}

// runIn runs one command in x, failing the test on an error or an error
// reply.
func runIn(t *testing.T, x *execCtx, args ...string) {
	t.Helper()
	var a [][]byte
	for _, s := range args {
		a = append(a, []byte(s))
	}
	if err := commandTable[strings.ToLower(args[0])].fn(x, a); err != nil || x.failed {
		t.Fatalf("%q: %v %q", args, err, x.out)
	}
}

// An expired key a transaction deletes counts in expired_keys once: a
// rollback (a deadlock's or serialization failure's rerun, an error reply)
// takes its count back, a commit keeps it. The server is not serving, so
// no active expiry cycle reaps the keys meanwhile.
func TestExpiredKeysCountedOnceAcrossRollback(t *testing.T) {
	s, c := unservedConn(t)
	run := func(commit bool, args ...string) {
		t.Helper()
		tx, x := beginWrite(t, c)
		runIn(t, x, args...)
		if commit {
			if err := c.commit(tx); err != nil {
				t.Fatal(err)
			}
		} else {
			c.rollback(tx)
		}
	}
	const n = 5
	for i := range n {
		run(true, "SET", fmt.Sprint("e", i), "v", "PX", "1")
	}
	run(true, "SET", "live", "v")
	time.Sleep(10 * time.Millisecond)
	run(false, "FLUSHALL")
	if got := s.expiredKeys.Load(); got != 0 {
		t.Fatalf("after a FLUSHALL rolled back, expired_keys %d; want 0", got)
	}
	run(true, "FLUSHALL")
	if got := s.expiredKeys.Load(); got != n {
		t.Fatalf("after a FLUSHALL committed, expired_keys %d; want %d", got, n)
	}
	if err := s.db.View(c.ctx, func(tx *engine.Txn) error {
		k, err := tx.Count(nil, nil)
		if err == nil && k != 0 {
			err = fmt.Errorf("%d keys", k)
		}
		return err
	}); err != nil {
		t.Fatalf("after FLUSHALL: %v", err)
	}
}

// commitFailure is a way a connection's commit ends: fail, run just
// before the commit (plain, or pipelined with CommitAsync), and the error
// the commit then returns.
type commitFailure struct {
	name      string
	pipelined bool
	fail      func(s *Server, cancel context.CancelFunc)
	want      error
}

// commitFailsBeforeRecord are the failures that come before the commit
// record exists, so that the commit certainly wrote nothing: the database
// closed, the connection's context ended.
var commitFailsBeforeRecord = []commitFailure{
	{"closed", false, func(s *Server, _ context.CancelFunc) { s.db.Close() }, engine.ErrClosed},
	{"closed, pipelined", true, func(s *Server, _ context.CancelFunc) { s.db.Close() }, engine.ErrClosed},
	{"cancelled", false, func(_ *Server, cancel context.CancelFunc) { cancel() }, context.Canceled},
	{"cancelled, pipelined", true, func(_ *Server, cancel context.CancelFunc) { cancel() }, context.Canceled},
}

// A commit that fails before its commit record exists committed nothing,
// so the expired keys its transaction deleted are taken off expired_keys,
// as a rollback's are: here the database is closed under the transaction,
// or the connection's context ends, before Commit or CommitAsync.
func TestExpiredKeysUncountedWhenCommitFailsBeforeRecord(t *testing.T) {
	for _, c := range commitFailsBeforeRecord {
		t.Run(c.name, func(t *testing.T) {
			s, cn := unservedConn(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cn.ctx = ctx
			// Stored with a deadline of 1 ms after the epoch: expired
			// however soon FLUSHALL runs.
			const n = 3
			if err := s.db.Update(ctx, func(tx *engine.Txn) error {
				for i := range n {
					if err := tx.Put([]byte(fmt.Sprint("e", i)), encodeValue([]byte("v"), 1)); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			tx, x := beginWrite(t, cn)
			runIn(t, x, "FLUSHALL")
			if got := s.expiredKeys.Load(); got != n {
				t.Fatalf("expired_keys %d after a FLUSHALL of %d expired keys; want %d", got, n, n)
			}
			c.fail(s, cancel)
			var err error
			if c.pipelined {
				err = cn.commitPipelined(tx, 0)
			} else {
				err = cn.commit(tx)
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("commit: %v, want %v", err, c.want)
			}
			if got := s.expiredKeys.Load(); got != 0 {
				t.Fatalf("expired_keys %d after the FLUSHALL's commit failed before its record (%v); want 0", got, err)
			}
		})
	}
}

// TestExpiredKeysRollbackAfterResetStat: a transaction that deleted expired
// keys (counting them in expired_keys at once) and rolls back after a
// CONFIG RESETSTAT from another connection must not take its count off the
// reset counter: expired_keys stays 0 rather than wrapping to 2^64-n. The
// expiry reaper's rollback (reapKeys) takes the same path.
func TestExpiredKeysRollbackAfterResetStat(t *testing.T) {
	s, c := unservedConn(t)
	admin := &conn{s: s, ctx: c.ctx}
	setExpired := func(n int) {
		t.Helper()
		for i := range n {
			tx, x := beginWrite(t, c)
			runIn(t, x, "SET", fmt.Sprint("e", i), "v", "PX", "1")
			if err := c.commit(tx); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	resetStat := func() {
		t.Helper()
		runIn(t, &execCtx{c: admin}, "CONFIG", "RESETSTAT")
	}

	// Counted, reset, rolled back: nothing of the count is left to take.
	const n = 3
	setExpired(n)
	tx, x := beginWrite(t, c)
	runIn(t, x, "FLUSHALL")
	resetStat()
	c.rollback(tx)
	if got := s.expiredKeys.Load(); got != 0 {
		t.Fatalf("a FLUSHALL that deleted %d expired keys rolled back after CONFIG RESETSTAT: expired_keys %d; want 0", n, got)
	}

	// Counted before and after a reset in one transaction, rolled back:
	// only the count after the reset is taken back.
	setExpired(n)
	tx, x = beginWrite(t, c)
	runIn(t, x, "DEL", "e0")
	resetStat()
	s.expiredKeys.Add(5) // other connections' expired keys since the reset
	runIn(t, x, "DEL", "e1")
	if got := s.expiredKeys.Load(); got != 6 {
		t.Fatalf("expired_keys %d before the rollback; want 6", got)
	}
	c.rollback(tx)
	if got := s.expiredKeys.Load(); got != 5 {
		t.Fatalf("expired_keys %d after a rollback straddling CONFIG RESETSTAT; want 5 (the other connections')", got)
	}
}
