package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"mvkv/engine"
	"mvkv/vfs"
)

// gateFS holds every WAL fsync while its gate is shut, so a test can stop
// the clock between a commit record's insertion and its durability without
// relying on timing: while the gate is shut no commit record written after
// it was shut can become durable.
type gateFS struct {
	vfs.FS
	mu      sync.Mutex
	gate    chan struct{} // guarded by mu; nil when open, closed to release
	blocked chan struct{} // one token per WAL sync that reached a shut gate
}

func newGateFS() *gateFS {
	return &gateFS{FS: vfs.OS{}, blocked: make(chan struct{}, 64)}
}

func (g *gateFS) shut() {
	g.mu.Lock()
	g.gate = make(chan struct{})
	g.mu.Unlock()
}

func (g *gateFS) open() {
	g.mu.Lock()
	if g.gate != nil {
		close(g.gate)
		g.gate = nil
	}
	g.mu.Unlock()
}

func (g *gateFS) wait() {
	g.mu.Lock()
	ch := g.gate
	g.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case g.blocked <- struct{}{}:
	default:
	}
	<-ch
}

func (g *gateFS) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	if !strings.Contains(f.Name(), "/wal/") {
		return f, nil
	}
	return gateFile{File: f, g: g}, nil
}

func (g *gateFS) Create(name string) (vfs.File, error) { return g.wrap(g.FS.Create(name)) }
func (g *gateFS) Open(name string) (vfs.File, error)   { return g.wrap(g.FS.Open(name)) }

type gateFile struct {
	vfs.File
	g *gateFS
}

func (f gateFile) Sync() error     { f.g.wait(); return f.File.Sync() }
func (f gateFile) Datasync() error { f.g.wait(); return f.File.Datasync() }

// waitCommitInFlight waits until a commit has asked for a WAL flush since
// before (the stats) and a WAL sync is held at the gate.
func waitCommitInFlight(t *testing.T, ts *testServer, g *gateFS, before engine.Stats) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	blocked := false
	for {
		if !blocked {
			select {
			case <-g.blocked:
				blocked = true
			default:
			}
		}
		if blocked && ts.db.Stats().Sub(before).WAL.FlushRequests > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no commit reached the WAL flush")
		}
		time.Sleep(time.Millisecond)
	}
}

// setInFlight shuts the gate and has r send SET key val, and returns once
// its commit is held at the WAL sync.
func setInFlight(t *testing.T, ts *testServer, g *gateFS, r *raw, key, val string) {
	t.Helper()
	g.shut()
	before := ts.db.Stats()
	r.cmd("SET", key, val)
	waitCommitInFlight(t, ts, g, before)
}

// noReplyYet checks that r has received nothing. The gate holds the only
// event that could produce a reply, so a short wait cannot give a false
// failure; it only bounds how long a wrong early reply is looked for.
func noReplyYet(t *testing.T, r *raw, what string) {
	t.Helper()
	r.nc.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	b, err := r.br.Peek(1)
	r.nc.SetReadDeadline(time.Time{})
	var ne net.Error
	if err == nil || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("%s: reply %q (%v) before its commit record was durable", what, b, err)
	}
}

// TestCommitVisibleOnlyWhenDurable is the server's side of docs/DESIGN.md
// rule 2 with early lock release off: with synchronous_commit on, a write
// (a single command or an EXEC block) is neither replied to nor visible to
// another client before its commit record is durable. With the WAL's
// fsyncs held, client A's SET is in flight; client B must still read the
// old value, and A's reply comes only once the sync is let through.
func TestCommitVisibleOnlyWhenDurable(t *testing.T) {
	g := newGateFS()
	off := false
	ts := startServerOn(t, Config{}, engine.Options{FS: g, WALWriterDelay: time.Hour, EarlyLockRelease: &off})
	defer g.open() // before the cleanup's shutdown checkpoint
	a, b := ts.raw(t), ts.raw(t)
	a.cmd("SET", "k", "old")
	a.expect("+OK\r\n")

	// A single command.
	setInFlight(t, ts, g, a, "k", "new")
	b.cmd("GET", "k")
	b.expect("$3\r\nold\r\n")
	noReplyYet(t, a, "SET")
	g.open()
	a.expect("+OK\r\n")
	b.cmd("GET", "k")
	b.expect("$3\r\nnew\r\n")

	// An EXEC block: none of its writes is visible before its one commit
	// record is durable.
	a.cmd("MULTI")
	a.expect("+OK\r\n")
	a.cmd("SET", "k", "newer")
	a.expect("+QUEUED\r\n")
	a.cmd("INCR", "ctr")
	a.expect("+QUEUED\r\n")
	g.shut()
	before := ts.db.Stats()
	a.cmd("EXEC")
	waitCommitInFlight(t, ts, g, before)
	b.cmd("GET", "k")
	b.expect("$3\r\nnew\r\n")
	b.cmd("GET", "ctr")
	b.expect("$-1\r\n")
	noReplyYet(t, a, "EXEC")
	g.open()
	a.expect("*2\r\n+OK\r\n:1\r\n")
	b.cmd("MGET", "k", "ctr")
	b.expect("*2\r\n$5\r\nnewer\r\n$1\r\n1\r\n")
}

// TestEarlyLockReleaseReplies is rule 2 with early lock release on: while
// the WAL sync is held, client A's SET is visible but not replied to;
// client B's GET, which reads it, gets no reply either, nor does client
// C's INCR of a key A's MULTI block wrote, or C's error reply from
// INCR of a value that is not an integer; once the sync is let through,
// all are answered with the new values.
func TestEarlyLockReleaseReplies(t *testing.T) {
	g := newGateFS()
	on := true
	ts := startServerOn(t, Config{}, engine.Options{FS: g, WALWriterDelay: time.Hour, EarlyLockRelease: &on})
	defer g.open() // before the cleanup's shutdown checkpoint
	a, b, c, d := ts.raw(t), ts.raw(t), ts.raw(t), ts.raw(t)
	a.cmd("SET", "k", "old")
	a.expect("+OK\r\n")

	g.shut()
	before := ts.db.Stats()
	a.cmd("MULTI")
	a.expect("+OK\r\n")
	a.cmd("SET", "k", "new")
	a.expect("+QUEUED\r\n")
	a.cmd("SET", "ctr", "41")
	a.expect("+QUEUED\r\n")
	a.cmd("EXEC")
	waitCommitInFlight(t, ts, g, before)
	b.cmd("GET", "k")
	c.cmd("INCR", "ctr")
	d.cmd("INCR", "k")
	noReplyYet(t, a, "EXEC")
	noReplyYet(t, b, "GET of an undurable write")
	noReplyYet(t, c, "INCR of an undurable write")
	noReplyYet(t, d, "error reply about an undurable write")
	g.open()
	a.expect("*2\r\n+OK\r\n+OK\r\n")
	b.expect("$3\r\nnew\r\n")
	c.expect(":42\r\n")
	d.expect("-ERR value is not an integer or out of range\r\n")
	if st := ts.db.Stats().Sub(before); st.Txn.EarlyCommits < 2 {
		t.Fatalf("%d early commits; want the EXEC's and the INCR's", st.Txn.EarlyCommits)
	}
}

// TestWatchAbortWaitsForWhatItSaw: with early lock release on, an EXEC
// aborted because another client's write changed a watched key tells
// that the write happened, so its *-1 waits, as a read's reply does,
// until that write is durable: a crash before could still take it away.
func TestWatchAbortWaitsForWhatItSaw(t *testing.T) {
	g := newGateFS()
	on := true
	ts := startServerOn(t, Config{}, engine.Options{FS: g, WALWriterDelay: time.Hour, EarlyLockRelease: &on})
	defer g.open()
	a, b := ts.raw(t), ts.raw(t)
	a.cmd("SET", "k", "old")
	a.expect("+OK\r\n")
	b.cmd("WATCH", "k")
	b.expect("+OK\r\n")
	b.cmd("MULTI")
	b.expect("+OK\r\n")
	b.cmd("SET", "k", "mine")
	b.expect("+QUEUED\r\n")

	setInFlight(t, ts, g, a, "k", "new")
	b.cmd("EXEC")
	noReplyYet(t, a, "SET")
	noReplyYet(t, b, "EXEC aborted by an undurable write")
	g.open()
	a.expect("+OK\r\n")
	b.expect("*-1\r\n")
	b.cmd("GET", "k")
	b.expect("$3\r\nnew\r\n")
}

// TestPipelineOneKeySharesFlush: with early lock release on, a client's
// pipeline of increments of one key commits without waiting for any
// flush (each finds the row lock free), no reply is sent while the WAL
// sync is held, and once it is let through a few syncs cover them all:
// with early lock release off each would take its own.
func TestPipelineOneKeySharesFlush(t *testing.T) {
	g := newGateFS()
	on := true
	ts := startServerOn(t, Config{}, engine.Options{FS: g, WALWriterDelay: time.Hour, WALFlusher: "serial", EarlyLockRelease: &on})
	defer g.open()
	a, b := ts.raw(t), ts.raw(t)
	a.cmd("PING")
	a.expect("+PONG\r\n")
	const n = 64
	req := strings.Repeat("*2\r\n$4\r\nINCR\r\n$3\r\nctr\r\n", n)
	g.shut()
	before := ts.db.Stats()
	a.send(req)
	deadline := time.Now().Add(20 * time.Second)
	for ts.db.Stats().Sub(before).Txn.EarlyCommits < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d pipelined increments of one key committed while the WAL sync was held", ts.db.Stats().Sub(before).Txn.EarlyCommits, n)
		}
		time.Sleep(time.Millisecond)
	}
	b.cmd("GET", "ctr")
	noReplyYet(t, a, "pipelined INCR")
	noReplyYet(t, b, "GET of undurable increments")
	g.open()
	for i := range n {
		a.expect(fmt.Sprintf(":%d\r\n", i+1))
	}
	b.expect(fmt.Sprintf("$2\r\n%d\r\n", n))
	if d := ts.db.Stats().Sub(before); d.Txn.Commits != n || d.WAL.Syncs > 3 {
		t.Fatalf("%d commits with %d WAL syncs; want %d commits with at most 3", d.Txn.Commits, d.WAL.Syncs, n)
	}
}

// TestPipelineReadsShareFlush: with early lock release on, a pipeline
// alternating writes and reads of one key runs to its end while the WAL
// sync is held (each read sees the write before it, visible already), no
// reply is sent until the sync is let through, and a few syncs cover the
// whole pipeline. A read that waited for the connection's pending commits
// instead would stop the pipeline at its first GET until the sync.
func TestPipelineReadsShareFlush(t *testing.T) {
	g := newGateFS()
	on := true
	ts := startServerOn(t, Config{}, engine.Options{FS: g, WALWriterDelay: time.Hour, WALFlusher: "serial", EarlyLockRelease: &on})
	defer g.open()
	a := ts.raw(t)
	a.cmd("PING")
	a.expect("+PONG\r\n")
	const n = 32
	var req strings.Builder
	for i := range n {
		fmt.Fprintf(&req, "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\n%02d\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", i)
	}
	g.shut()
	before := ts.db.Stats()
	a.send(req.String())
	deadline := time.Now().Add(20 * time.Second)
	for ts.db.Stats().Sub(before).Txn.EarlyCommits < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d pipelined SETs committed while the WAL sync was held: a GET waited for the one before it", ts.db.Stats().Sub(before).Txn.EarlyCommits, n)
		}
		time.Sleep(time.Millisecond)
	}
	noReplyYet(t, a, "pipelined SET and GET")
	g.open()
	for i := range n {
		a.expect("+OK\r\n")
		a.expect(fmt.Sprintf("$2\r\n%02d\r\n", i))
	}
	if d := ts.db.Stats().Sub(before); d.Txn.Commits != n || d.WAL.Syncs > 3 {
		t.Fatalf("%d commits with %d WAL syncs; want %d commits with at most 3", d.Txn.Commits, d.WAL.Syncs, n)
	}
	if n := ts.s.OpenTransactions(); n != 0 {
		t.Fatalf("%d transactions left open", n)
	}
}

// TestPipelinedReadWaitsForWhatItSaw: a pipelined read that sees another
// client's early-released write is held, like a read that is not
// pipelined, until that write is durable, and the replies keep their
// order.
func TestPipelinedReadWaitsForWhatItSaw(t *testing.T) {
	g := newGateFS()
	on := true
	ts := startServerOn(t, Config{}, engine.Options{FS: g, WALWriterDelay: time.Hour, EarlyLockRelease: &on})
	defer g.open()
	a, b := ts.raw(t), ts.raw(t)
	a.cmd("SET", "k", "old")
	a.expect("+OK\r\n")
	b.cmd("PING")
	b.expect("+PONG\r\n")

	setInFlight(t, ts, g, a, "k", "new")
	b.send("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*2\r\n$6\r\nSTRLEN\r\n$1\r\nk\r\n*1\r\n$4\r\nPING\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n")
	noReplyYet(t, a, "SET")
	noReplyYet(t, b, "pipelined GET of an undurable write")
	g.open()
	a.expect("+OK\r\n")
	b.expect("$3\r\nnew\r\n")
	b.expect(":3\r\n")
	b.expect("+PONG\r\n")
	b.expect("$3\r\nnew\r\n")
}

// TestAsyncCommitRepliesBeforeDurable: with synchronous_commit off, a write
// is replied to and visible without waiting for any WAL sync (so the reply
// does not mean it is durable).
func TestAsyncCommitRepliesBeforeDurable(t *testing.T) {
	g := newGateFS()
	ts := startServerOn(t, Config{SynchronousCommit: engine.SyncCommitOff}, engine.Options{FS: g, WALWriterDelay: time.Hour})
	defer g.open()
	a, b := ts.raw(t), ts.raw(t)
	g.shut()
	before := ts.db.Stats()
	a.cmd("SET", "k", "v")
	a.expect("+OK\r\n")
	b.cmd("GET", "k")
	b.expect("$1\r\nv\r\n")
	if d := ts.db.Stats().Sub(before); d.WAL.Syncs != 0 || d.WAL.FlushRequests != 0 {
		t.Fatalf("asynchronous commit made %d WAL syncs and %d flush requests", d.WAL.Syncs, d.WAL.FlushRequests)
	}
}

// TestPipelineGroupCommit: a client pipelines writes of distinct keys. They
// are committed one after another without waiting, none is replied to or
// visible to another client while the WAL sync is held, and once it is let
// through one more flush covers all the rest: the pipeline shares flushes
// instead of taking one each.
func TestPipelineGroupCommit(t *testing.T) {
	g := newGateFS()
	// The serial flusher, so that the count of syncs measures the
	// pipeline's sharing: the pipelined one overlaps a sync per round by
	// design while the first is held. Early lock release off, so that the
	// writes stay invisible (see TestEarlyLockReleaseReplies for on).
	off := false
	ts := startServerOn(t, Config{}, engine.Options{FS: g, WALWriterDelay: time.Hour, WALFlusher: "serial", EarlyLockRelease: &off})
	defer g.open()
	a, b := ts.raw(t), ts.raw(t)
	a.cmd("PING")
	a.expect("+PONG\r\n")
	const n = 64
	var req strings.Builder
	for i := range n {
		fmt.Fprintf(&req, "*3\r\n$3\r\nSET\r\n$3\r\nk%02d\r\n$1\r\nv\r\n", i)
	}
	g.shut()
	before := ts.db.Stats()
	a.send(req.String())
	// Every write has begun its commit (and none has completed) once n
	// transactions are open on the server.
	deadline := time.Now().Add(20 * time.Second)
	for ts.s.OpenTransactions() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d pipelined writes reached their commit", ts.s.OpenTransactions(), n)
		}
		time.Sleep(time.Millisecond)
	}
	b.cmd("MGET", "k00", "k63")
	b.expect("*2\r\n$-1\r\n$-1\r\n")
	noReplyYet(t, a, "pipelined SET")
	g.open()
	for range n {
		a.expect("+OK\r\n")
	}
	b.cmd("MGET", "k00", "k63")
	b.expect("*2\r\n$1\r\nv\r\n$1\r\nv\r\n")
	d := ts.db.Stats().Sub(before)
	if d.Txn.Commits != n || d.WAL.Syncs > 3 {
		t.Fatalf("%d commits with %d WAL syncs; want %d commits with at most 3", d.Txn.Commits, d.WAL.Syncs, n)
	}
}

// TestPipelineSyncFailure: when the WAL sync under a pipeline fails, the
// writes it carried are answered with the error, not OK.
func TestPipelineSyncFailure(t *testing.T) {
	ffs := vfs.NewFaultFS(vfs.OS{})
	db, err := engine.Open(t.TempDir(), engine.Options{FS: ffs, WALWriterDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{s: New(db, Config{}), db: db, addr: ln.Addr().String()}
	go ts.s.Serve(context.Background(), ln)
	defer func() {
		// The shutdown checkpoint and Close report the failed sync.
		ts.s.Shutdown(context.Background())
		db.Close()
	}()
	a := ts.raw(t)
	a.cmd("SET", "k", "v")
	a.expect("+OK\r\n")
	ffs.Inject(vfs.Rule{Kinds: vfs.SyncOps, Contains: "/wal/", Permanent: vfs.SyncOps})
	a.send("*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$1\r\n1\r\n*3\r\n$3\r\nSET\r\n$1\r\ny\r\n$1\r\n1\r\n")
	for range 2 {
		if got := a.reply(); !strings.HasPrefix(got, "-MISCONF ") {
			t.Fatalf("reply %q to a write whose WAL sync failed; want -MISCONF", got)
		}
	}
	a.cmd("GET", "x")
	if got := a.reply(); got != "$-1\r\n" && !strings.HasPrefix(got, "-") {
		t.Fatalf("GET x = %q after its commit failed", got)
	}
	if err := db.Failure(); !errors.Is(err, engine.ErrWALSyncFailed) {
		t.Fatalf("engine Failure() = %v after a failed WAL sync; want ErrWALSyncFailed", err)
	}
	a.cmd("INFO", "persistence")
	if got := a.reply(); !strings.Contains(got, "\r\naof_last_write_status:err\r\n") {
		t.Fatalf("INFO persistence after a failed WAL sync has no aof_last_write_status:err: %q", got)
	}
}

// TestShutdownDeadline: a shutdown whose deadline has passed while a
// commit waits for its WAL sync closes the connection without
// acknowledging the write, and finishes once the sync completes.
func TestShutdownDeadline(t *testing.T) {
	g := newGateFS()
	db, err := engine.Open(t.TempDir(), engine.Options{FS: g, WALWriterDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{s: New(db, Config{}), db: db, addr: ln.Addr().String()}
	go ts.s.Serve(context.Background(), ln)
	a := ts.raw(t)
	a.cmd("SET", "k", "old")
	a.expect("+OK\r\n")
	setInFlight(t, ts, g, a, "k", "new")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan error, 1)
	go func() { done <- ts.s.Shutdown(ctx) }()
	// The connection is closed with no reply: the write was never
	// acknowledged.
	if b, err := a.br.ReadByte(); err == nil {
		t.Fatalf("reply %q to a write whose WAL sync had not completed at shutdown", b)
	}
	g.open()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Shutdown past its deadline: %v", err)
	}
	if n := ts.s.OpenTransactions(); n != 0 {
		t.Fatalf("%d transactions open after shutdown", n)
	}
}

// TestPipelinePendingBound: a connection holds at most maxPendingCommits
// commits in progress; the next write waits for them.
func TestPipelinePendingBound(t *testing.T) {
	g := newGateFS()
	ts := startServerOn(t, Config{}, engine.Options{FS: g, WALWriterDelay: time.Hour})
	defer g.open()
	a := ts.raw(t)
	const n = 2*maxPendingCommits + 10
	var req strings.Builder
	for i := range n {
		fmt.Fprintf(&req, "*3\r\n$3\r\nSET\r\n$4\r\nk%03d\r\n$1\r\nv\r\n", i)
	}
	g.shut()
	a.send(req.String())
	deadline := time.Now().Add(20 * time.Second)
	for ts.s.OpenTransactions() < maxPendingCommits {
		if time.Now().After(deadline) {
			t.Fatalf("%d pipelined writes reached their commit", ts.s.OpenTransactions())
		}
		time.Sleep(time.Millisecond)
	}
	noReplyYet(t, a, "pipelined SET")
	if got := ts.s.OpenTransactions(); got != maxPendingCommits {
		t.Fatalf("%d commits in progress on one connection; want at most %d", got, maxPendingCommits)
	}
	g.open()
	for range n {
		a.expect("+OK\r\n")
	}
}

// TestMisconfNamesTheFailedFiles: a failed WAL sync and a failed write of a
// data file both refuse writes with MISCONF, each naming what failed.
func TestMisconfNamesTheFailedFiles(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("%w: fsync wal/000000010000000000000001: EIO", engine.ErrWALSyncFailed), "-MISCONF Errors writing to the WAL: "},
		{fmt.Errorf("%w: heap: write heap/00000000: no space left on device", engine.ErrIOFailure), "-MISCONF Errors writing to the data files: "},
	} {
		if got := string(appendEngineError(nil, c.err)); !strings.HasPrefix(got, c.want) || !strings.Contains(got, c.err.Error()) {
			t.Errorf("reply %q, want %q and the error", got, c.want)
		}
	}
}

// TestAbortReplyPrefixedOnce: the reply to a transaction that an engine
// error aborted names the engine once ("ERR mvkv: transaction rolled
// back: could not serialize ..."), not once per layer that wrapped it.
func TestAbortReplyPrefixedOnce(t *testing.T) {
	db, err := engine.Open(t.TempDir(), engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	put := func(v string) {
		t.Helper()
		if err := db.Update(ctx, func(tx *engine.Txn) error { return tx.Put([]byte("k"), []byte(v)) }); err != nil {
			t.Fatal(err)
		}
	}
	put("0")
	tx, err := db.Begin(ctx, engine.TxnOptions{Isolation: engine.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Get([]byte("k")); err != nil {
		t.Fatal(err)
	}
	put("1")
	if err := tx.Put([]byte("k"), []byte("2")); !errors.Is(err, engine.ErrSerializationFailure) {
		t.Fatalf("write after a concurrent update: %v; want ErrSerializationFailure", err)
	}
	err = tx.Commit()
	got := string(appendEngineError(nil, err))
	if want := "-ERR mvkv: transaction rolled back: could not serialize access"; !strings.HasPrefix(got, want) || strings.Count(got, "mvkv: ") != 1 {
		t.Errorf("reply %q; want it to begin %q, with no other \"mvkv: \"", got, want)
	}
}
