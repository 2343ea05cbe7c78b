package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/tidwall/redcon"

	"mvkv/engine"
	"mvkv/internal/clip"
)

// errShutdown stops a connection's reads once a shutdown has begun.
var errShutdown = errors.New("server: shutting down")

// errNoop is returned by update functions that leave a key as it is; the
// engine hands it back unchanged and keeps the transaction usable.
var errNoop = errors.New("server: no change")

// flushThreshold is how many reply bytes a connection collects before it
// writes them even though more pipelined requests are waiting.
const flushThreshold = 64 << 10

// conn is one client connection, served by one goroutine (serve).
type conn struct {
	s       *Server
	nc      net.Conn
	id      uint64
	rd      *reader
	ctx     context.Context
	created time.Time
	// gone ends when the client has gone away: CLIENT KILL closed its
	// connection, or a close watch (watchClose), which the commands that
	// may run long and write nothing start (BACKUP, VACUUM, KEYS, a SCAN
	// of many keys, DBSIZE, INFO's count of the keys), saw its socket
	// close; or when ctx ends. Those commands stop at its end, where
	// Redis, which runs one command at a time, has nothing to stop.
	// Transactions keep ctx: a write the server has read is carried out,
	// or not at all, whether or not its client stays for the reply, as
	// Redis carries out every command it has read. leave ends it.
	gone  context.Context
	leave context.CancelFunc

	// Owned by the serving goroutine.
	out    []byte // replies not yet written
	authed bool
	more   bool // more request bytes were buffered after the current request
	quit   bool // close after writing out
	// holdOpen is set by SHUTDOWN: the connection is handed to the
	// server when it ends, which closes it once the shutdown is done.
	holdOpen bool
	inMulti  bool
	dirty    bool // a queue-time error: EXEC answers EXECABORT
	queue    [][][]byte
	queued   int64              // bytes held by queue, charged against QueryBufferLimit
	watched  map[string]watched // key -> what WATCH saw
	expired  [][]byte           // expired keys the last command read, for reapExpired
	scratchX execCtx
	// pending are the commits of pipelined writes appended with
	// CommitAsync, oldest first, whose replies wait in out until they
	// complete (see settle).
	pending []pendingCommit
	// early are request bytes read from the socket while the connection
	// was blocked (watchClose), handed to the reader before the socket.
	early []byte
	// bumped are the watch entries the running transaction bumped
	// (execCtx.wrote), undone if it rolls back (see rollback).
	bumped []*watchEntry
	// expiredN counts the keys the running transaction deleted because
	// they had expired, taken off expired_keys if it rolls back (a
	// deadlock's rerun, an error reply) or its commit fails before the
	// commit record exists, so that each counts once.
	// expiredGen is the server's expiredResets when they were counted:
	// a CONFIG RESETSTAT since has taken them off already.
	expiredN   int
	expiredGen uint64

	// CLIENT REPLY and CLIENT NO-EVICT/NO-TOUCH state.
	replyOff bool       // CLIENT REPLY OFF: no replies until ON
	skipNext bool       // CLIENT REPLY SKIP: no reply to the next command
	replyOn  bool       // the running command is CLIENT REPLY ON, whose +OK is sent
	noPipe   bool       // the running command's reply is dropped: no pipelined commit
	wmu      sync.Mutex // serializes writes to nc: the connection's and, for a monitor, the feed's

	// What CLIENT LIST shows of the connection's buffers, stored by its
	// goroutine after each request (the buffers themselves are its own).
	fd       int          // the socket's file descriptor, -1 if unknown
	qbuf     atomic.Int64 // request bytes read but not yet parsed
	argvMem  atomic.Int64 // bytes of the last request's arguments
	multiMem atomic.Int64 // bytes of the queued MULTI commands
	outLen   atomic.Int64 // replies collected and not yet written
	outCap   atomic.Int64 // capacity of the reply buffer

	mu      sync.Mutex // guards the fields below, read by CLIENT LIST
	name    string
	libName string // CLIENT SETINFO lib-name
	libVer  string // CLIENT SETINFO lib-ver
	lastCmd string
	active  time.Time
	queuedN int  // commands queued in MULTI when the last command began, -1 outside MULTI
	noEvict bool // CLIENT NO-EVICT, shown as flag e
	noTouch bool // CLIENT NO-TOUCH, shown as flag T
	// unblock is set while the connection is blocked in WAIT (flag b,
	// INFO's blocked_clients); CLIENT UNBLOCK sends its reason on it.
	unblock chan string

	// deadlineWritten: a write of this connection stored a deadline whose
	// commit has not been reported to the expiry cycle yet (encode). Not
	// guarded by mu: only the connection's goroutine uses it.
	deadlineWritten bool
}

func (s *Server) newConn(nc net.Conn) *conn {
	c := &conn{
		s:       s,
		nc:      nc,
		id:      s.nextID.Add(1),
		ctx:     s.baseCtx,
		created: time.Now(),
		active:  time.Now(),
		authed:  s.requirePass() == "",
		queuedN: -1,
	}
	c.gone, c.leave = context.WithCancel(s.baseCtx)
	c.rd = newReader(hookReader{c}, s.cfg.ReadBufferSize, s.limits)
	c.rd.preAuth = c.authRequired
	c.fd = socketFD(nc)
	return c
}

// authRequired reports whether the connection must authenticate before
// it runs commands: it has not, and the server has a password now. As in
// Redis, clearing requirepass at run time admits every connection at
// once, and setting it leaves the connections made before it admitted.
func (c *conn) authRequired() bool { return !c.authed && c.s.requirePass() != "" }

// socketFD returns nc's file descriptor, for CLIENT LIST's fd, or -1.
func socketFD(nc net.Conn) int {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return -1
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1
	}
	fd := -1
	rc.Control(func(f uintptr) { fd = int(f) })
	return fd
}

// hookReader is the connection as the request reader sees it. Before
// every read from the socket, that is whenever the reader has run out of
// buffered bytes, it writes the replies collected so far: a pipeline's
// replies go out together, and the server never blocks on a client while
// holding replies.
type hookReader struct{ c *conn }

func (h hookReader) Read(p []byte) (int, error) {
	c := h.c
	if err := c.flush(); err != nil {
		return 0, err
	}
	if t := time.Duration(c.s.timeout.Load()); t > 0 {
		c.nc.SetReadDeadline(time.Now().Add(t))
	}
	// After the deadline is set, so that a shutdown's wake (a deadline in
	// the past) is either seen here or interrupts the read.
	if c.s.isClosing() {
		return 0, errShutdown
	}
	if len(c.early) > 0 {
		n := copy(p, c.early)
		c.early = c.early[n:]
		return n, nil
	}
	n, err := c.nc.Read(p)
	c.s.netIn.Add(uint64(n))
	return n, err
}

// closeWatch reads a connection whose goroutine is blocked in a command
// that waits without reading requests (WAIT, a command held by CLIENT
// PAUSE), so that a client that goes away meanwhile ends the wait, as
// Redis frees a blocked client whose connection closes; otherwise the
// connection, its goroutine and its maxclients slot would stay until the
// wait's end, which may be never. What it reads is kept in conn.early for
// the reader, up to client-query-buffer-limit; past that it stops
// reading until the wait ends.
type closeWatch struct {
	c        *conn
	gone     chan struct{} // closed when a read failed: the client is gone
	done     chan struct{} // closed when the reading goroutine has returned
	stopping atomic.Bool
}

// watchClose starts watching c's socket: if the client goes away, w.gone
// closes and c.gone ends, which a command that may run long stops at. The
// caller must call stop before it reads from the connection again; after
// it, c.gone.Err() says whether the client went away.
func (c *conn) watchClose() *closeWatch {
	w := &closeWatch{c: c, gone: make(chan struct{}), done: make(chan struct{})}
	limit := c.s.limits().QueryBufferLimit
	// A blocked client is not idle: the timeout does not close it, as in
	// Redis. Only stop and a shutdown's wake set a deadline from here on.
	c.nc.SetReadDeadline(time.Time{})
	go func() {
		defer close(w.done)
		var buf [4096]byte
		for int64(len(c.early)) < limit {
			n, err := c.nc.Read(buf[:])
			c.early = append(c.early, buf[:n]...)
			c.s.netIn.Add(uint64(n))
			if err != nil {
				// The next read of the connection meets the error
				// again (a closed socket stays closed). A timeout is
				// stop's or a shutdown's, which the waiter sees itself.
				var ne net.Error
				if !w.stopping.Load() && !(errors.As(err, &ne) && ne.Timeout()) {
					close(w.gone)
					c.leave()
				}
				return
			}
		}
	}()
	return w
}

// clientGone reports whether the client went away (c.gone) and, if so,
// makes the connection close after the command: there is nobody to
// answer.
func (c *conn) clientGone() bool {
	if c.gone.Err() == nil {
		return false
	}
	c.quit = true
	return true
}

// errClientGone ends a command that stopped because its client went
// away; its reply reaches nobody.
var errClientGone = errors.New("server: client went away")

// stop ends the watch: it interrupts the read with a deadline in the past
// and waits for the reading goroutine, after which conn.early is the
// serving goroutine's again.
func (w *closeWatch) stop() {
	w.stopping.Store(true)
	w.c.nc.SetReadDeadline(time.Unix(1, 0))
	<-w.done
	// A shutdown's wake may have set a deadline in the past meanwhile;
	// clearing it is safe, as hookReader checks for a shutdown after
	// setting its deadline and before every read.
	w.c.nc.SetReadDeadline(time.Time{})
}

// wake interrupts a read the connection is blocked in; called by shutdown.
// Its replies get shutdownWriteGrace to be taken, counted from each write
// of them (flush): a client that does not read them (stalled, or gone
// without closing) must not hold the shutdown until its timeout, and
// Redis does not wait for it either.
func (c *conn) wake() {
	c.nc.SetReadDeadline(time.Unix(1, 0))
	c.nc.SetWriteDeadline(time.Now().Add(shutdownWriteGrace))
}

// shutdownWriteGrace bounds how long a shutdown waits for a connection's
// replies to be written.
const shutdownWriteGrace = time.Second

func (c *conn) serve() {
	defer c.s.removeConn(c)
	defer c.leave()
	defer func() {
		if c.holdOpen && c.s.hold(c.nc) {
			return
		}
		c.nc.Close()
	}()
	defer c.unwatchAll()
	defer c.s.stopMonitor(c)
	c.s.met.connected()
	defer c.s.met.disconnected()
	for !c.quit {
		req, err := c.rd.read()
		if err != nil {
			var pe *protocolError
			if errors.As(err, &pe) {
				// Under CLIENT REPLY OFF, or SKIP for the next
				// request, Redis drops the error reply too.
				if !c.replyOff && !c.skipNext {
					c.out = redcon.AppendError(c.out, "ERR "+pe.Error())
				}
				c.flush()
			} else if errors.Is(err, errQueryBufferLimit) {
				c.s.log.Warn("closing client that reached max query buffer length", "id", c.id, "addr", c.nc.RemoteAddr().String())
			} else if tc, ok := c.nc.(*tls.Conn); ok && !tc.ConnectionState().HandshakeComplete && !errors.Is(err, io.EOF) {
				// A TLS handshake that failed (a plain-text client, a
				// bad certificate), which Redis logs at verbose level.
				c.s.log.Log(context.Background(), levelVerbose, "Error accepting a client connection",
					"err", err, "addr", c.nc.RemoteAddr().String(), "laddr", c.nc.LocalAddr().String())
			}
			return
		}
		if crossProtocol(req.args[0]) {
			c.refuseCrossProtocol()
			return
		}
		c.more = c.rd.br.Buffered() > 0
		c.qbuf.Store(int64(c.rd.br.Buffered()))
		c.argvMem.Store(req.size)
		c.dispatch(req)
		c.multiMem.Store(c.queued)
		c.outLen.Store(int64(len(c.out)))
		c.outCap.Store(int64(cap(c.out)))
		if len(c.out) >= flushThreshold {
			if c.flush() != nil {
				return
			}
		}
		if c.s.isClosing() && !c.more {
			break
		}
	}
	c.flush()
}

// crossProtocol reports whether a request's first word is "POST" or
// "Host:", in any case: an HTTP request sent to the server, whose request
// line and headers arrive as inline commands. A web page can make a
// browser send one to a server on the local network (cross-protocol
// scripting); its body, which the page controls, would follow as further
// commands. As Redis does, the server runs none of it.
func crossProtocol(name []byte) bool {
	switch len(name) {
	case 4:
		return lower(name) == "post"
	case 5:
		return lower(name) == "host:"
	}
	return false
}

// crossProtoLogEvery is the least time between two warnings about
// cross-protocol requests, so that a flood of them cannot flood the log.
const crossProtoLogEvery = time.Minute

// refuseCrossProtocol ends a connection that sent an HTTP request line or
// header as a command (crossProtocol), without a reply to it and without
// reading what follows. Replies to the commands before it are written.
func (c *conn) refuseCrossProtocol() {
	s := c.s
	n := s.crossProto.Add(1)
	now := time.Now().UnixNano()
	last := s.crossProtoLog.Load()
	if (last == 0 || now-last >= int64(crossProtoLogEvery)) && s.crossProtoLog.CompareAndSwap(last, now) {
		s.log.Warn("possible security attack: a client sent POST or Host: as a command, as an HTTP request does (a web page may be attacking the server through a browser by cross-protocol scripting); connection closed without running anything it sent after that",
			"id", c.id, "addr", c.nc.RemoteAddr().String(), "total", n)
	}
	c.flush()
}

// pendingCommit is a pipelined write whose commit is in progress; its
// reply is out[start:end].
type pendingCommit struct {
	w          *engine.CommitWait
	start, end int
}

// settle waits for every pending commit of the connection. A commit that
// failed has its reply replaced by the error, so no reply acknowledges a
// write that is not durable and visible.
func (c *conn) settle() {
	if len(c.pending) == 0 {
		return
	}
	var fixed []byte
	done := 0 // bytes of out already copied to fixed
	for _, p := range c.pending {
		err := p.w.Wait(c.ctx)
		c.s.openTxns.Add(-1)
		if err == nil {
			continue
		}
		fixed = append(fixed, c.out[done:p.start]...)
		fixed = appendEngineError(fixed, err)
		done = p.end
	}
	c.pending = c.pending[:0]
	if fixed != nil {
		c.out = append(fixed, c.out[done:]...)
	}
	c.noteCommitted()
}

// flush writes the collected replies, after the commits they acknowledge
// have completed: with synchronous_commit on, no reply is written before
// the commit record of the write it answers is durable.
func (c *conn) flush() error {
	c.settle()
	if len(c.out) == 0 {
		return nil
	}
	c.wmu.Lock()
	if c.s.isClosing() {
		// The grace starts now: a command that ran past the first
		// one since the shutdown began (a BACKUP) still gets its reply.
		c.nc.SetWriteDeadline(time.Now().Add(shutdownWriteGrace))
	}
	n, err := c.nc.Write(c.out)
	c.wmu.Unlock()
	c.s.netOut.Add(uint64(n))
	if cap(c.out) > 4*flushThreshold {
		c.out = nil
	} else {
		c.out = c.out[:0]
	}
	return err
}

// syncModes holds the two synchronous_commit settings for a transaction's
// options to point at (conn.begin): Begin reads the value once, and a
// pointer to a copy would escape, an allocation a transaction. Never
// written.
var syncModes = [2]engine.SynchronousCommit{engine.SyncCommitOn, engine.SyncCommitOff}

// begin starts an engine transaction at isolation level iso (see
// docs/SERVER.md, "Isolation", for which command runs at which) with the server's current
// synchronous_commit. With it on, Commit returns only after the commit
// record is durable, and after every write the transaction read or
// overwrote is durable (rule 2 of the design; with early lock release off
// the transaction also becomes visible and releases its row locks only
// then); with it off, Commit returns when the commit record is in the WAL
// buffer.
func (c *conn) begin(write bool, iso engine.IsolationLevel) (*engine.Txn, error) {
	sc := &syncModes[0]
	if engine.SynchronousCommit(c.s.syncCommit.Load()) == engine.SyncCommitOff {
		sc = &syncModes[1]
	}
	tx, err := c.s.db.Begin(c.ctx, engine.TxnOptions{Isolation: iso, ReadOnly: !write, SynchronousCommit: sc})
	if err == nil {
		c.s.openTxns.Add(1)
	}
	return tx, err
}

// commit commits tx. Its watch bumps stay when the commit succeeds, and
// when it fails in doubt (its record may be durable: a watcher must then
// assume the key changed). A commit that certainly wrote nothing puts
// them back, as a rollback does, so that a WATCHing client's EXEC does
// not abort for a write that never happened: the engine's rollback runs
// untouch (OnAbort) when Commit rolls back (the context had ended, the
// database stopped taking writes), still under the row locks; and after
// ErrClosed (committedNothing) untouch runs here, where no write can
// bump the keys again (the database is closed, and the transaction
// keeps its locks). The expired keys it counted stay counted too, unless
// the failure is one that comes before the commit record exists
// (committedNothing): then none was deleted, and they are taken back as
// a rollback takes them.
func (c *conn) commit(tx *engine.Txn) error {
	err := tx.Commit()
	if committedNothing(err) {
		c.untouch() // nothing left to undo if the rollback did it
		c.uncountExpired()
	}
	c.bumped = c.bumped[:0]
	c.expiredN = 0
	c.s.openTxns.Add(-1)
	c.noteCommitted()
	return err
}

// committedNothing reports whether err, from engine.Txn.Commit, says for
// certain that nothing was committed: engine.ErrClosed (the database was
// closed before the commit record was written; Close waits for commits
// whose record is in) and the context's error (it had ended before
// Commit, which rolled back). Commit's other failures (ErrWALSyncFailed,
// ErrIOFailure, ErrCorruption) may come after the record, so the outcome
// is left to recovery and is in doubt; among them is a commit refused
// because the database had stopped taking writes, which therefore keeps
// its expired keys counted.
func committedNothing(err error) bool {
	return errors.Is(err, engine.ErrClosed) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// lockKeys takes the row locks of keys, which must be sorted, before the
// transaction's first read: under REPEATABLE READ its snapshot is then
// taken after they were granted, so its writes of them cannot fail with a
// serialization failure (engine.Txn.Lock). Keys the engine cannot store
// are skipped: nobody can write them.
func lockKeys(tx *engine.Txn, keys []string) error {
	for _, k := range keys {
		if !storable(k) {
			continue
		}
		if err := tx.Lock([]byte(k)); err != nil {
			return err
		}
	}
	return nil
}

// commitPipelined commits tx, whose reply is out[mark:], without waiting:
// the commit joins the connection's pending ones, which complete in order
// and share WAL flushes, and the reply waits in out until settle. It is
// used for a write while more requests of a pipeline are already read (or
// earlier ones are still pending, so that this one completes after them).
func (c *conn) commitPipelined(tx *engine.Txn, mark int) error {
	var after *engine.CommitWait
	if n := len(c.pending); n > 0 {
		after = c.pending[n-1].w
	}
	w, err := tx.CommitAsync(after)
	if err != nil {
		// Every error of CommitAsync comes before the commit record
		// exists, and here ends the transaction (the two that leave it
		// open, inside DB.Update or after another database's commit,
		// cannot arise): nothing was deleted, and no key written, so the
		// watch bumps go back as at a rollback (commit). A record that
		// could not be appended stops the database taking writes, and
		// the transaction keeps its locks until recovery: no write can
		// bump the keys between.
		c.untouch()
		c.uncountExpired()
		c.s.openTxns.Add(-1)
		return err
	}
	c.bumped = c.bumped[:0]
	// Counted for good unless the commit is lost, which only recovery
	// can tell.
	c.expiredN = 0
	select {
	case <-w.Done():
		// Complete already (a read of nothing undurable): nothing to
		// hold its reply for, unless it failed.
		if err := w.Wait(c.ctx); err == nil {
			c.s.openTxns.Add(-1)
			c.noteCommitted()
			return nil
		}
	default:
	}
	c.pending = append(c.pending, pendingCommit{w: w, start: mark, end: len(c.out)})
	return nil
}

// maxPendingCommits bounds a connection's pending commits (each holds its
// row locks and a goroutine until it completes): at the bound the
// connection waits for them before it runs the next command.
const maxPendingCommits = 128

// pipelining reports whether a write should commit with commitPipelined:
// more requests are buffered, or earlier commits are still pending.
func (c *conn) pipelining() bool { return !c.noPipe && (c.more || len(c.pending) > 0) }

// readPipelined reports whether cmd is a read that may run before the
// connection's pending commits complete: they are all visible to a new
// snapshot already (early lock release publishes a synchronous commit
// before its flush, and CommitAsync publishes a connection's commits in
// order, so the last one being visible means all are), so the read sees
// the connection's own writes, as Redis's would. Its reply then waits
// behind theirs: the read commits with commitPipelined, and completes
// once the WAL is durable past every commit it may have seen, its own
// connection's included. A pipeline mixing SETs and GETs so shares one
// flush instead of waiting for one at every GET. With early lock release
// off, or synchronous_commit off, the pending commits become visible only
// as they complete, and the read waits for them (settle).
func (c *conn) readPipelined(cmd *command) bool {
	if cmd.flags&(flagRead|flagWrite) != flagRead || c.noPipe {
		return false
	}
	n := len(c.pending)
	return n == 0 || c.pending[n-1].w.Visible()
}

// untouch puts back the watch versions the running transaction bumped.
// It runs while the transaction still holds the keys' row locks: from
// rollback, or from the engine when an error aborts the transaction
// (execCtx.wrote registers it), whichever comes first; the other finds
// nothing left to undo.
func (c *conn) untouch() {
	c.s.watch.untouch(c.bumped)
	c.bumped = c.bumped[:0]
}

// rollback rolls tx back. The watch versions it bumped are put back first,
// while it still holds the keys' row locks: a write that never committed
// does not abort a WATCH (Redis never sees such a write at all), and no
// EXEC can compare versions between the rollback and the undo, since
// EXEC compares only with the watched keys' locks held.
func (c *conn) rollback(tx *engine.Txn) {
	c.untouch()
	c.uncountExpired()
	tx.Rollback()
	c.s.openTxns.Add(-1)
}

// backoff waits before the attempt after attempt (1, 2, ...) of a command
// or EXEC block that ended in a deadlock or serialization failure: a
// random time up to 100 µs doubled per attempt, at most 10 ms. Rerun at
// once, the victim of a deadlock meets the same transactions in the same
// state and is chosen again; a random wait lets them finish first.
func backoff(attempt int) {
	limit := min(100*time.Microsecond<<min(attempt-1, 10), 10*time.Millisecond)
	time.Sleep(rand.N(limit))
}

// dispatch runs or queues one request, appending its reply to c.out.
func (c *conn) dispatch(req request) {
	start := time.Now()
	name := lower(req.args[0])
	cmd := commandTable[name]
	c.mu.Lock()
	c.active = start
	if cmd != nil {
		c.lastCmd = cmd.name
		if cmd.name == "client" || cmd.name == "config" || cmd.name == "command" {
			if len(req.args) > 1 {
				c.lastCmd += "|" + lower(trunc(req.args[1], 32))
			}
		}
	}
	c.queuedN = -1
	if c.inMulti {
		c.queuedN = len(c.queue)
	}
	c.mu.Unlock()
	c.s.commands.Add(1)
	// The command's time, read once for commandstats, the slow log and
	// the metrics; 0 until the command has run (a refused one is timed
	// by the metrics alone).
	var took time.Duration
	defer func() {
		if took == 0 {
			took = time.Since(start)
		}
		c.s.met.observe(cmd, took)
	}()
	// CLIENT REPLY OFF or SKIP: the command runs, its reply is dropped.
	// Its commit is waited for here, so that no pending commit's reply
	// lies in what is dropped.
	skip := c.skipNext
	c.skipNext, c.replyOn = false, false
	if c.replyOff || skip {
		c.settle()
		mark := len(c.out)
		c.noPipe = true
		defer func() {
			c.noPipe = false
			if !c.replyOn {
				c.out = c.out[:mark]
			}
		}()
	}

	if cmd == nil {
		c.queueError(unknownCommand(req.args))
		return
	}
	// Arity before authentication, in the order of Redis's processCommand.
	if !arityOK(cmd.arity, len(req.args)) {
		c.reject(cmd, req.args, "ERR wrong number of arguments for '"+cmd.name+"' command")
		return
	}
	// A container command's subcommand is looked up here too, as Redis's
	// processCommand does: an unknown one or a wrong count is refused
	// before it is queued in MULTI (so EXEC aborts), not when it runs.
	if msg := subcommandError(cmd.name, req.args); msg != "" {
		c.reject(cmd, req.args, msg)
		return
	}
	if c.authRequired() && cmd.flags&flagNoAuth == 0 {
		c.reject(cmd, req.args, "NOAUTH Authentication required.")
		return
	}
	if req.oversize > 0 {
		c.queueError("ERR string exceeds maximum allowed size (" + strconv.FormatInt(req.oversize, 10) +
			" bytes; the limit is " + strconv.Itoa(c.s.limits().MaxArgLen) + ")")
		return
	}
	if c.inMulti && cmd.flags&flagNoMulti != 0 {
		c.queueError("ERR Command not allowed inside a transaction")
		return
	}
	// A write is held by CLIENT PAUSE WRITE even when it is only queued
	// in MULTI, as Redis's processCommand checks the pause before it
	// queues.
	if c.s.paused(start) {
		if !c.waitPause(cmd.flags&flagWrite != 0 || (cmd.name == "exec" && c.queueWrites()), !c.replyOff && !skip) {
			// The client went away while held: as Redis frees it,
			// the command does not run.
			c.quit = true
			return
		}
	}
	if c.inMulti && cmd.flags&flagMultiCtl == 0 {
		c.queued += req.size
		if c.queued > c.s.limits().QueryBufferLimit {
			c.queueError("ERR MULTI queue exceeds client-query-buffer-limit")
			return
		}
		c.queue = append(c.queue, queuedArgs(req.args))
		c.mu.Lock()
		c.queuedN = len(c.queue)
		c.mu.Unlock()
		c.out = append(c.out, "+QUEUED\r\n"...)
		return
	}
	defer c.feedMonitors(cmd, req.args)
	// Anything but a pipelined write waits for the pending commits: a
	// read, EXEC or WATCH must see the connection's own earlier writes,
	// and CONFIG SET or SHUTDOWN must come after them. A read need not
	// when they are visible already (early lock release): it runs at
	// once and its reply waits behind theirs (readPipelined).
	if (cmd.flags&flagPipeline == 0 && !(cmd.name == "exec" && c.execPipelined()) && !c.readPipelined(cmd)) || len(c.pending) >= maxPendingCommits {
		c.settle()
	}
	runMark := len(c.out)
	defer func() {
		failed := len(c.out) > runMark && c.out[runMark] == '-'
		if failed {
			c.s.stats.noteError(c.out[runMark:])
		}
		took = max(time.Since(start), 1)
		c.s.stats.observeCommand(cmd, req.args, took, failed)
		if cmd.name != "exec" { // as Redis: its commands are logged instead
			c.s.slowlog.add(c, req.args, took)
		}
	}()
	if cmd.flags&(flagRead|flagWrite) == 0 {
		x := &c.scratchX
		*x = execCtx{c: c, out: c.out}
		cmd.fn(x, req.args)
		c.out = x.out
		return
	}
	c.runSingle(cmd, req.args)
	c.reapExpired()
}

// queueWrites reports whether a MULTI queue holds a write, for CLIENT
// PAUSE WRITE.
func (c *conn) queueWrites() bool {
	for _, args := range c.queue {
		if cmd := commandTable[lower(args[0])]; cmd != nil && cmd.flags&flagWrite != 0 {
			return true
		}
	}
	return false
}

// reject refuses a command before it runs. A refused EXEC discards the
// transaction, MULTI or not, and says why, as Redis's rejectCommand and
// execCommandAbort: "EXECABORT Transaction discarded because of: ...".
func (c *conn) reject(cmd *command, args [][]byte, msg string) {
	if cs := c.s.stats.of(cmd, args); cs != nil {
		cs.rejected.Add(1)
	}
	if cmd.name != "exec" {
		c.queueError(msg)
		return
	}
	c.resetMulti()
	c.unwatchAll()
	c.s.stats.rejectedCalls.Add(1)
	c.s.stats.noteError([]byte("-EXECABORT"))
	c.out = redcon.AppendError(c.out, "EXECABORT Transaction discarded because of: "+strings.TrimPrefix(msg, "ERR "))
}

// queueError replies with a command error; inside MULTI it also makes the
// coming EXEC fail with EXECABORT, as Redis's flagTransaction.
func (c *conn) queueError(msg string) {
	c.s.stats.rejectedCalls.Add(1)
	c.s.stats.noteError([]byte("-" + msg))
	if c.inMulti {
		c.dirty = true
	}
	c.out = redcon.AppendError(c.out, msg)
}

// runSingle runs one key command as its own engine transaction, retrying
// deadlocks and serialization failures. The reply is appended only for
// the attempt that ended the transaction; a command that replied with an
// error rolls back, so a multi-key write is all or nothing.
func (c *conn) runSingle(cmd *command, args [][]byte) {
	mark := len(c.out)
	write := cmd.flags&flagWrite != 0
	iso := engine.ReadCommitted
	var locks []string
	if cmd.flags&flagSnapshot != 0 {
		iso = engine.RepeatableRead
		if write {
			locks = sortedKeyStrings(writeKeys(args))
		}
	}
	// FLUSHALL runs at REPEATABLE READ: in a transaction that has not
	// read yet, the engine's DeleteRange locks every key before its
	// snapshot, as a block does, and deletes what that snapshot sees, so
	// that it is as if it ran alone at that moment. At READ COMMITTED,
	// deleting what a snapshot taken before the locks saw, it kept keys
	// created after that snapshot but deleted the versions of older keys
	// committed after them, which no serial order allows. A key created
	// between the locks and the snapshot and changed after it fails the
	// delete with a serialization failure, or its lock closes a cycle
	// (a deadlock): either reruns it.
	if cmd.name == "flushall" || cmd.name == "flushdb" {
		iso = engine.RepeatableRead
	}
	for attempt := 1; ; attempt++ {
		c.out = c.out[:mark]
		tx, err := c.begin(write, iso)
		if err == nil {
			err = lockKeys(tx, locks)
		}
		if err != nil && tx != nil {
			c.rollback(tx)
		} else if err == nil {
			x := &c.scratchX
			*x = execCtx{c: c, tx: tx, out: c.out, lookups: countsLookups(cmd)}
			err = cmd.fn(x, args)
			c.out = x.out
			switch {
			case err != nil:
				c.rollback(tx)
			case !write && c.pipelining():
				// A read, its reply an error or not, is held behind
				// the pending commits until what it read is durable
				// (readPipelined); it wrote nothing to roll back.
				err = c.commitPipelined(tx, mark)
			case x.failed:
				// An error reply may tell what the command read (a
				// value that is not an integer): like a result, it
				// waits until what it read is durable.
				c.rollback(tx)
				err = tx.WaitObserved()
			case cmd.flags&flagPipeline != 0 && c.pipelining():
				err = c.commitPipelined(tx, mark)
			default:
				err = c.commit(tx)
			}
		}
		if err == nil {
			return
		}
		c.out = c.out[:mark]
		if engine.IsRetryable(err) && attempt < c.s.cfg.MaxRetries {
			backoff(attempt)
			continue
		}
		c.out = appendEngineError(c.out, lastFailure(tx, err))
		return
	}
}

// lastFailure returns err, the error that ended a command's or EXEC
// block's last run, once it may be told: a serialization failure (or
// another retryable one) says that another transaction changed a key the
// run wrote, with early lock release a commit a crash could still take
// away, so it waits as a result would, until the WAL is durable past what
// tx, the run's transaction (nil if it never began), observed; if that
// flush fails, its error is told instead. Other errors are returned at
// once.
func lastFailure(tx *engine.Txn, err error) error {
	if tx == nil || !engine.IsRetryable(err) {
		return err
	}
	if werr := tx.WaitObserved(); werr != nil {
		return werr
	}
	return err
}

// tooLargeText is the reply to a key or value above the engine's limits.
var tooLargeText = "ERR key or value too large (keys up to " + strconv.Itoa(engine.MaxKeySize) + " bytes, values up to " + strconv.Itoa(MaxStoredValue) + " bytes)"

// appendEngineError turns an engine error that ended a transaction into a
// Redis error reply.
func appendEngineError(out []byte, err error) []byte {
	switch {
	case errors.Is(err, engine.ErrWALSyncFailed):
		return redcon.AppendError(out, "MISCONF Errors writing to the WAL: "+err.Error())
	case errors.Is(err, engine.ErrIOFailure):
		// A heap, visibility map or CLOG file, which the error names:
		// not the WAL, where an operator would look first otherwise.
		return redcon.AppendError(out, "MISCONF Errors writing to the data files: "+err.Error())
	case errors.Is(err, engine.ErrClosed), errors.Is(err, context.Canceled), errors.Is(err, errShutdown):
		return redcon.AppendError(out, "ERR server is shutting down")
	case errors.Is(err, engine.ErrTooLarge):
		return redcon.AppendError(out, tooLargeText)
	case errors.Is(err, engine.ErrEmptyKey):
		return redcon.AppendError(out, "ERR empty keys are not supported")
	}
	return redcon.AppendError(out, "ERR "+err.Error())
}

// unknownCommand is Redis 7's text for an unknown command.
func unknownCommand(args [][]byte) string {
	// As Redis's processCommand formats it with "%.*s": each argument up
	// to its first NUL (trunc), the name up to 128 bytes, and the
	// arguments while their quoted list is under 128 bytes, each cut to
	// what is left of those 128.
	var list []byte
	for _, a := range args[1:] {
		if len(list) >= 128 {
			break
		}
		list = append(list, '\'')
		list = append(list, trunc(a, 128-len(list)+1)...)
		list = append(list, "' "...)
	}
	var b bytes.Buffer
	b.WriteString("ERR unknown command '")
	b.Write(trunc(args[0], 128))
	b.WriteString("', with args beginning with: ")
	b.Write(list)
	return b.String()
}

// trunc cuts a client's argument as Redis's "%.*s" cuts one it puts in an
// error reply (128 bytes, mostly): at its first NUL byte, and to at most n
// bytes.
func trunc(a []byte, n int) []byte {
	if i := bytes.IndexByte(a, 0); i >= 0 {
		a = a[:i]
	}
	return clip.Prefix(a, n)
}

// lower returns b in lower case, as bytes.ToLower does. A word that
// lowers to a command's name (a subcommand such as CONFIG's "set"
// included) comes back as the command table's own string, so that looking
// up or comparing the name of every request allocates nothing; any other
// word comes back as a string of its own.
func lower(b []byte) string {
	var buf [maxCommandName]byte
	if len(b) <= len(buf) {
		l := buf[:len(b)]
		for i, c := range b {
			if c >= utf8.RuneSelf {
				// bytes.ToLower maps more than ASCII.
				return lowerSlow(b)
			}
			if c >= 'A' && c <= 'Z' {
				c += 'a' - 'A'
			}
			l[i] = c
		}
		// The conversion in a map index does not allocate.
		if cmd := commandTable[string(l)]; cmd != nil {
			return cmd.name
		}
		return string(l)
	}
	return lowerSlow(b)
}

// maxCommandName bounds the words lower looks up in the command table:
// the longest command name is shorter.
const maxCommandName = 32

// lowerSlow is lower for any b, allocating its result.
func lowerSlow(b []byte) string {
	for _, c := range b {
		if c >= 'A' && c <= 'Z' {
			return string(bytes.ToLower(b))
		}
	}
	return string(b)
}

// Transactions (MULTI/EXEC/WATCH).

func (c *conn) resetMulti() {
	c.inMulti, c.dirty = false, false
	c.queue, c.queued = nil, 0
}

func (c *conn) unwatchAll() {
	for k := range c.watched {
		c.s.watch.release(k)
	}
	c.watched = nil
}

// exec runs the queued commands as one engine transaction with one commit.
func (c *conn) exec() {
	defer c.reapExpired()
	if !c.inMulti {
		c.out = redcon.AppendError(c.out, "ERR EXEC without MULTI")
		return
	}
	pipelined := c.execPipelined()
	queue, dirty := c.queue, c.dirty
	c.resetMulti()
	defer c.unwatchAll()
	if dirty {
		c.out = redcon.AppendError(c.out, "EXECABORT Transaction discarded because of previous errors.")
		return
	}
	keys, all := lockOrder(c.watched, queue)
	mark := len(c.out)
	// A queued CLIENT REPLY changes these; a rerun starts from the state
	// the block began with.
	replyOff, replyOn := c.replyOff, c.replyOn
	for attempt := 1; ; attempt++ {
		c.out = c.out[:mark]
		c.replyOff, c.replyOn = replyOff, replyOn
		tx, err := c.execOnce(queue, keys, all, pipelined, mark)
		if err == nil {
			return
		}
		c.out = c.out[:mark]
		if engine.IsRetryable(err) && attempt < c.s.cfg.MaxRetries {
			backoff(attempt)
			continue
		}
		c.out = appendEngineError(c.out, lastFailure(tx, err))
		return
	}
}

// lockOrder returns the keys whose row locks an EXEC takes before it runs
// its commands, in byte order, and whether the block also deletes every
// key (FLUSHALL), whose locks it then takes in the same pass. The keys are
// the watched ones, and, when with them the block names more than one key,
// every key it writes.
//
// The watched keys are locked for WATCH's check (watchKeys). The written
// keys are locked up front, in one order for every block, so that two
// blocks writing the same keys in different orders (MULTI SET a SET b
// against MULTI SET b SET a), or a block and an MSET, queue behind each
// other instead of deadlocking: every transaction that holds more than
// one row lock then takes them in key order, so lock waits always go from
// a smaller key to a larger and no cycle can form. MSET and DEL on their
// own write in key order for the same reason (sortedPairs, sortedKeys),
// WATCH holds at most one lock at a time, and FLUSHALL inside a block
// would lock every key in key order while holding the block's earlier
// writes, so the block locks all of them first. Taking the locks before
// the first command also puts the block's snapshot after them (see
// execOnce). Keys the engine cannot store are left out: nobody can write
// them.
func lockOrder(watched map[string]watched, queue [][][]byte) (keys []string, all bool) {
	set := make(map[string]struct{}, len(watched))
	for k := range watched {
		if storable(k) {
			set[k] = struct{}{}
		}
	}
	for _, args := range queue {
		if n := lower(args[0]); n == "flushall" || n == "flushdb" {
			all = true
		}
		for _, k := range writeKeys(args) {
			set[string(k)] = struct{}{}
		}
	}
	keys = make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys, all
}

// withEveryKey returns keys with every stored key added, sorted and
// without repeats, for a FLUSHALL that locks them all before its
// snapshot. keys is not changed, so that a rerun starts afresh from the
// same ones. The keys are listed by a transaction of their own, since a
// scan in the caller's would take its snapshot before the locks.
func (c *conn) withEveryKey(keys []string) ([]string, error) {
	keys = slices.Clip(keys)
	err := c.s.db.View(c.ctx, func(tx *engine.Txn) error {
		return tx.ScanKeys(nil, nil, func(k []byte) bool {
			keys = append(keys, string(k))
			return true
		})
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(keys)
	return slices.Compact(keys), nil
}

// execOnce runs the block once: one REPEATABLE READ transaction that
// first locks keys (and, for FLUSHALL, every stored key), so that its
// snapshot, taken at its first read or write, comes after the locks were
// granted: every read of the block sees that one snapshot, and its writes
// of the locked keys cannot fail with a serialization failure. It returns
// the transaction it ran, ended, or nil if it began none.
func (c *conn) execOnce(queue [][][]byte, keys []string, all, pipelined bool, mark int) (*engine.Txn, error) {
	if all {
		// FLUSHALL will lock every key: take them now, in one key order
		// with the rest.
		var err error
		if keys, err = c.withEveryKey(keys); err != nil {
			return nil, err
		}
	}
	tx, err := c.begin(true, engine.RepeatableRead)
	if err != nil {
		return nil, err
	}
	// Holding the row lock of every watched key, no transaction can be
	// between writing one and committing: any commit since WATCH has
	// bumped the key's version (writers bump before they commit). The
	// keys the block writes are locked here too (lockOrder).
	if err := lockKeys(tx, keys); err != nil {
		c.rollback(tx)
		return tx, err
	}
	if !c.watchValid() {
		// The abort tells the client that a watched key changed: like a
		// read's result, it waits until the commit that changed it is
		// durable (taking the row locks noted it), since a crash could
		// still take that commit away with early lock release on. (So
		// there is no answer before the locks: it would not know what
		// to wait for.)
		c.rollback(tx)
		if err := tx.WaitObserved(); err != nil {
			return tx, err
		}
		c.out = append(c.out, "*-1\r\n"...)
		return tx, nil
	}
	// As in Redis, CLIENT REPLY OFF or ON in the block takes effect at
	// once: the array's header, and each command's reply, is dropped if
	// replies are off when it is made (the array then has fewer elements
	// than it says, as Redis's has).
	if !c.replyOff {
		c.out = redcon.AppendArray(c.out, len(queue))
	}
	// Each queued command's run, counted in commandstats and the metrics
	// as Redis counts the commands EXEC calls, once the block commits (a
	// rerun after a serialization failure counts once).
	type ran struct {
		took   time.Duration
		failed bool
	}
	runs := make([]ran, 0, len(queue))
	for _, args := range queue {
		cmd := commandTable[lower(args[0])]
		x := &c.scratchX
		*x = execCtx{c: c, tx: tx, out: c.out, inExec: true, lookups: countsLookups(cmd)}
		start, at := time.Now(), len(c.out)
		err := cmd.fn(x, args)
		c.out = x.out
		if err != nil {
			c.rollback(tx)
			return tx, err
		}
		runs = append(runs, ran{time.Since(start), len(c.out) > at && c.out[at] == '-'})
		if c.replyOff {
			c.out = c.out[:at]
		}
	}
	if pipelined {
		err = c.commitPipelined(tx, mark)
	} else {
		err = c.commit(tx)
	}
	if err == nil {
		for i, args := range queue {
			cmd := commandTable[lower(args[0])]
			c.feedMonitors(cmd, args)
			took := runs[i].took // its run, not the commit
			c.s.stats.observeCommand(cmd, args, took, runs[i].failed)
			c.s.met.observe(cmd, took)
			c.s.slowlog.add(c, args, took)
		}
	}
	return tx, err
}

// execPipelined reports whether the EXEC about to run may commit with
// commitPipelined: a block that watches nothing and queues only writes that
// read nothing but the keys they lock (so they need no earlier commit of
// the connection to be visible: a row lock waits for it).
func (c *conn) execPipelined() bool {
	if !c.inMulti || c.dirty || len(c.watched) > 0 || !c.pipelining() {
		return false
	}
	for _, args := range c.queue {
		if cmd := commandTable[lower(args[0])]; cmd == nil || cmd.flags&flagPipeline == 0 {
			return false
		}
	}
	return true
}

// watched is what WATCH saw of a key: its version in the watch table, and
// the deadline it had if it was live with an expiry.
type watched struct {
	version  uint64
	deadline int64 // Unix milliseconds; 0 for none (or absent at WATCH)
}

// watchValid reports whether no watched key was written, or expired, since
// WATCH. As Redis (isWatchedKeyExpired), a key that was live at WATCH and
// has reached its deadline since counts as changed; one already expired at
// WATCH does not.
func (c *conn) watchValid() bool {
	now := time.Now().UnixMilli()
	for k, w := range c.watched {
		if c.s.watch.version(k) != w.version || (w.deadline != 0 && w.deadline <= now) {
			return false
		}
	}
	return true
}

// watchKeys registers keys and then waits, by taking and dropping each
// key's row lock, for any transaction that wrote one before the
// registration and has not committed yet: such a writer might have
// checked for watchers before they existed. Its commit then precedes
// WATCH's reply, so the client's reads after WATCH see it.
func (c *conn) watchKeys(keys [][]byte) error {
	if c.watched == nil {
		c.watched = map[string]watched{}
	}
	var fresh [][]byte
	for _, k := range keys {
		ks := string(k)
		if _, ok := c.watched[ks]; ok {
			continue
		}
		// For a key nobody can write, the version at registration is
		// final; for the others waitForWriters records it under the
		// key's row lock.
		c.watched[ks] = watched{version: c.s.watch.acquire(ks)}
		fresh = append(fresh, k)
	}
	// Each key's lock is taken and dropped in a transaction of its own:
	// holding one while waiting for the next could close a cycle with a
	// writer that takes them in the other order. A key the engine cannot
	// store needs no wait: nobody can write it.
	for i, k := range fresh {
		if !storable(k) {
			continue
		}
		if err := c.waitForWriters(k); err != nil {
			// Registered but not waited for: unregister them, so that
			// a later EXEC does not trust them.
			for _, k := range fresh[i:] {
				c.s.watch.release(string(k))
				delete(c.watched, string(k))
			}
			return err
		}
	}
	return nil
}

// waitForWriters takes and drops k's row lock, so that a writer of k that
// has not committed yet has ended when it returns, and records k's watch
// version and deadline as they are while the lock is held. The version is
// read under the lock, not at registration: a writer that bumped it and
// then rolls back puts it back before releasing the lock, and a version
// read in between would make the EXEC fail for a write that never
// happened.
func (c *conn) waitForWriters(k []byte) error {
	tx, err := c.s.db.Begin(c.ctx, engine.TxnOptions{Isolation: engine.ReadCommitted})
	if err != nil {
		return err
	}
	c.s.openTxns.Add(1)
	defer c.rollback(tx)
	x := &execCtx{c: c, tx: tx}
	// Only the deadline is read (of a large value, its first bytes); a
	// value whose first bytes cannot be read (a chunk lost) has none.
	err = tx.UpdatePrefix(k, deadlineHdrSize, func(prefix []byte, total int, found bool, unreadable error) ([]byte, error) {
		w := c.watched[string(k)]
		w.version = c.s.watch.version(string(k))
		if found && unreadable == nil {
			if _, d := decodeMeta(prefix, total); !x.expiredAt(d) {
				w.deadline = d
			}
		}
		c.watched[string(k)] = w
		return nil, errNoop
	})
	if err != nil && !errors.Is(err, errNoop) {
		return err
	}
	return nil
}

// watchTable is the server's record of watched keys, as Redis's
// db->watched_keys: a version per key, bumped by every write of the key
// through this server before the writing transaction commits.
type watchTable struct {
	n    atomic.Int64
	mu   sync.Mutex
	keys map[string]*watchEntry // guarded by mu
}

type watchEntry struct {
	version uint64
	refs    int
}

func (w *watchTable) acquire(k string) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	e := w.keys[k]
	if e == nil {
		e = &watchEntry{}
		w.keys[k] = e
		w.n.Add(1)
	}
	e.refs++
	return e.version
}

func (w *watchTable) release(k string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e := w.keys[k]; e != nil {
		if e.refs--; e.refs == 0 {
			delete(w.keys, k)
			w.n.Add(-1)
		}
	}
}

func (w *watchTable) version(k string) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e := w.keys[k]; e != nil {
		return e.version
	}
	return 0
}

// touch bumps k's version if anyone watches it, and returns the entry
// bumped (nil if none), for untouch. Writers call it while holding k's row
// lock, before committing.
func (w *watchTable) touch(k []byte) *watchEntry {
	if w.n.Load() == 0 {
		return nil
	}
	w.mu.Lock()
	e := w.keys[string(k)]
	if e != nil {
		e.version++
	}
	w.mu.Unlock()
	return e
}

// untouch undoes the bumps of a transaction that rolls back; it runs while
// the transaction still holds the keys' row locks. Only that transaction
// can have bumped these entries since (bumps need the lock), so the
// decrement restores the version a watcher recorded. An entry dropped from
// the table meanwhile (nobody watches the key any more) is harmless to
// decrement.
func (w *watchTable) untouch(es []*watchEntry) {
	if len(es) == 0 {
		return
	}
	w.mu.Lock()
	for _, e := range es {
		e.version--
	}
	w.mu.Unlock()
}
