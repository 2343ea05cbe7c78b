package server

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"mvkv/engine"
)

// ErrServerClosed is returned by Serve after Shutdown, as net/http's.
var ErrServerClosed = errors.New("server: closed")

// Config configures a Server. The zero value is usable: Redis's defaults
// for the limits, synchronous commit on.
type Config struct {
	// Limits bound request sizes; zero fields take DefaultLimits' values.
	Limits Limits
	// MaxClients is Redis's maxclients (default 10000): a connection
	// beyond it is answered "-ERR max number of clients reached" and
	// closed.
	MaxClients int
	// Hz is Redis's hz: how many times a second the server's cron runs
	// the active expiry cycle, which may spend a quarter of each tick.
	// INFO's instantaneous rates are sampled every 100 ms / tick ticks,
	// rounded down and at least one, as Redis samples them: every tick
	// at hz 19 or below (every 53 to 91 ms from hz 11 to 19), every
	// 100 ms where a tick divides it, a little sooner elsewhere (89 ms at
	// hz 45). Zero takes Redis's default, 10; values are clamped to 1 to
	// 500 as Redis clamps them (ParseHz). CONFIG SET hz changes it while
	// the server runs: the next tick comes a new period after the last.
	Hz int
	// Timeout is Redis's timeout: a client idle this long between
	// requests, or stalled this long inside one, is disconnected. Zero
	// (the default, as Redis) never disconnects.
	Timeout time.Duration
	// RequirePass is Redis's requirepass: when set, every command but
	// AUTH, HELLO (with AUTH), QUIT and PING-before-auth answers
	// "-NOAUTH Authentication required." until AUTH gives it. Compared
	// in constant time. CONFIG SET requirepass changes it for the
	// connections made afterwards (those already authenticated stay so, as
	// in Redis).
	RequirePass string
	// SynchronousCommit is the synchronous_commit of the server's
	// transactions (default on; a value other than engine.SyncCommitOff
	// is taken as on); CONFIG SET synchronous_commit changes it.
	// On: a write is replied to, and visible to other clients, only once
	// its commit record is durable. Off: a reply means the commit record
	// is in the WAL buffer, not that it is durable; a crash may lose the
	// last acknowledged transactions (whole, never in part).
	SynchronousCommit engine.SynchronousCommit
	// MaxRetries bounds how many times in all a command or EXEC block runs
	// while it fails with a deadlock or serialization failure: after the
	// last failed run the error is returned to the client (default 10, so
	// at most 9 reruns).
	MaxRetries int
	// ShutdownTimeout bounds the graceful shutdown begun by the SHUTDOWN
	// command or by Serve's context (default 30 s).
	ShutdownTimeout time.Duration
	// ReadBufferSize is each connection's read buffer in bytes (default
	// 16 KiB).
	ReadBufferSize int
	// Logger receives connection and shutdown messages; nil discards them.
	Logger *slog.Logger
	// LogLevel, if not nil, is the level Logger's handler filters with
	// (slog.HandlerOptions.Level): CONFIG GET and SET loglevel read and
	// change it under Redis's names (see ParseLogLevel). With nil,
	// loglevel reports notice and CONFIG SET refuses to change it.
	LogLevel *slog.LevelVar
	// ProtectedModeOff turns Redis's protected-mode off. With it on (the
	// default, as Redis 7) and no RequirePass, a client connecting from
	// an address other than a loopback one is answered Redis's "-DENIED
	// Redis is running in protected mode ..." error and disconnected, so
	// that a server listening on every interface without a password
	// answers nobody but the local host. CONFIG SET protected-mode
	// changes it at run time.
	ProtectedModeOff bool
	// BackupCommand says who may run BACKUP, which writes a copy of the
	// database into a directory on the server's host that the client
	// names: "local" (the default, for ""), clients on a loopback address
	// or a Unix socket (a listener Serve is given); "yes", every client;
	// "no", none. The values are those of Redis's enable-debug-command; like
	// it, the setting is fixed for the server's life (CONFIG GET
	// enable-backup-command shows it). Any other value is taken as "no"
	// (ParseBackupCommand checks one).
	BackupCommand string
	// OnShutdown, if set, runs at the end of the first Shutdown, after its
	// checkpoint, and its error joins Shutdown's. The connections of
	// clients that sent SHUTDOWN stay open until it returns, as
	// redis-server's stay open until the process exits: mvkv serve closes
	// the DB here, so that such a client sees its connection close only
	// once the data directory is closed and free for the next process
	// (a restart, or mvkv verify).
	OnShutdown func() error
}

func (c Config) withDefaults() Config {
	d := DefaultLimits
	if c.Limits.MaxBulkLen <= 0 {
		c.Limits.MaxBulkLen = d.MaxBulkLen
	}
	c.Limits.MaxBulkLen = min(c.Limits.MaxBulkLen, maxBulkLen)
	if c.Limits.MaxArgLen <= 0 {
		c.Limits.MaxArgLen = d.MaxArgLen
	}
	if c.Limits.MaxMultibulkLen <= 0 {
		c.Limits.MaxMultibulkLen = d.MaxMultibulkLen
	}
	if c.Limits.MaxInlineLen <= 0 {
		c.Limits.MaxInlineLen = d.MaxInlineLen
	}
	if c.Limits.QueryBufferLimit <= 0 {
		c.Limits.QueryBufferLimit = d.QueryBufferLimit
	}
	if c.MaxClients <= 0 {
		c.MaxClients = 10000
	}
	if c.SynchronousCommit != engine.SyncCommitOff {
		c.SynchronousCommit = engine.SyncCommitOn
	}
	if c.MaxRetries <= 0 {
		c.MaxRetries = 10
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 30 * time.Second
	}
	if c.ReadBufferSize <= 0 {
		c.ReadBufferSize = 16 << 10
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.BackupCommand == "" {
		c.BackupCommand = "local"
	}
	if v, err := ParseBackupCommand(c.BackupCommand); err == nil {
		c.BackupCommand = v
	} else {
		c.BackupCommand = "no"
	}
	return c
}

// ParseBackupCommand checks a value for Config.BackupCommand (any case)
// and returns it in lower case; the error says what is taken, as Redis's
// for enable-debug-command.
func ParseBackupCommand(v string) (string, error) {
	switch v = strings.ToLower(v); v {
	case "yes", "no", "local":
		return v, nil
	}
	return "", errors.New("argument(s) must be one of the following: no, yes, local")
}

// Server serves one engine.DB over RESP2. Create it with New, run it with
// Serve, stop it with Shutdown. All methods are safe for concurrent use.
type Server struct {
	db     *engine.DB
	cfg    Config // immutable after New except through the atomics below
	log    *slog.Logger
	start  time.Time
	met    *metrics
	watch  watchTable
	cursor cursorTable

	expiry  expiryState // the active expiry cycle
	slowlog slowlog     // SLOWLOG

	// ksSem, one slot, is held while the keyspace is counted and while
	// ks is read or set: a channel, so that a caller whose context ends
	// (its client went away) stops waiting for another's count.
	ksSem chan struct{}
	ks    *keyspaceCount // guarded by ksSem; the last count, nil before the first

	// Runtime knobs changed by CONFIG SET.
	syncCommit atomic.Int32           // engine.SynchronousCommit
	protected  atomic.Bool            // protected-mode
	pass       atomic.Pointer[string] // requirepass; "" for none
	maxClients atomic.Int64
	timeout    atomic.Int64  // nanoseconds
	hz         atomic.Int64  // Config.Hz, clamped
	hzChanged  chan struct{} // CONFIG SET hz wakes the cron to retime its ticker
	cronPeriod atomic.Int64  // the cron's ticker period, nanoseconds; 0 before it starts
	cronLoops  atomic.Uint64 // the cron's ticks so far (Redis's cronloops)
	lim        atomic.Pointer[Limits]
	limMu      sync.Mutex // serializes CONFIG SET of lim (copy on write)

	nextID    atomic.Uint64
	clients   atomic.Int64 // connections being served
	openTxns  atomic.Int64 // engine transactions begun and not yet ended
	commands  atomic.Uint64
	connsRecv atomic.Uint64
	rejected  atomic.Uint64
	// crossProto counts connections closed for sending POST or Host: as
	// a command (crossProtocol); crossProtoLog is when that was last
	// logged, in Unix nanoseconds.
	crossProto    atomic.Uint64
	crossProtoLog atomic.Int64
	// lingering bounds the refused connections being closed gracefully
	// (reject); beyond it they are closed at once.
	lingering chan struct{}
	// expiredKeys counts keys removed because they were past their
	// deadline (Redis's expired_keys). expiredResets counts CONFIG
	// RESETSTAT's resets of it: a transaction's rollback takes back only
	// the keys it counted since the last one (conn.uncountExpired).
	expiredKeys   atomic.Uint64
	expiredResets atomic.Uint64
	// keyspaceHits and keyspaceMisses count the keys read commands looked
	// up and found live or not (Redis's keyspace_hits and misses);
	// netIn and netOut the bytes read from and written to clients.
	keyspaceHits, keyspaceMisses atomic.Uint64
	netIn, netOut                atomic.Uint64
	// opsRate, inRate and outRate sample total_commands_processed, netIn
	// and netOut every rateSamplePeriod, for INFO's instantaneous rates.
	opsRate, inRate, outRate rateSampler

	bgsave     atomic.Bool  // a BGSAVE checkpoint is running
	saveFailed atomic.Bool  // the last SAVE, BGSAVE or BGREWRITEAOF failed
	monitors   monitorSet   // MONITOR connections
	monitorsN  atomic.Int64 // len(monitors.m), read without its lock
	pause      pauseState   // CLIENT PAUSE
	params     sync.Map     // CONFIG parameters kept only to be reported (see knobs)
	stats      *serverStats // INFO's stats, commandstats and errorstats
	replID     string       // INFO's master_replid, random per server
	pauseUntil atomic.Int64 // pause.until in Unix nanoseconds, for a check without the lock
	// testGoneCheck, if set, runs each time a scan that stops when its
	// client goes away looks whether it has (tests only).
	testGoneCheck atomic.Pointer[func()]

	// baseCtx bounds every engine call; cancel ends in-flight waits when a
	// shutdown's deadline passes.
	baseCtx context.Context
	cancel  context.CancelFunc

	mu        sync.Mutex
	listeners map[net.Listener]bool // TLS or not; guarded by mu
	conns     map[*conn]struct{}    // guarded by mu
	closing   bool                  // guarded by mu; set once by Shutdown
	closingA  atomic.Bool           // closing, readable without mu
	closingC  chan struct{}         // closed when closing is set
	blocked   atomic.Int64          // connections blocked in WAIT
	connWG    sync.WaitGroup        // one per entry ever added to conns
	shutOnce  sync.Once
	done      chan struct{} // closed when a shutdown has completed
	shutErr   error         // set before done is closed
	// nosave is set by SHUTDOWN NOSAVE: the shutdown skips its
	// checkpoint, and has the DB's Close skip its own.
	nosave atomic.Bool
	// held are the connections of clients that sent SHUTDOWN, closed
	// when the shutdown is done (after OnShutdown); heldDone says they
	// were. Guarded by mu.
	held     []net.Conn
	heldDone bool
}

// New returns a server for db. The server does not own db: the caller
// closes it after Shutdown. New sets db's synchronous_commit default to
// cfg.SynchronousCommit.
func New(db *engine.DB, cfg Config) *Server {
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		ksSem:     make(chan struct{}, 1),
		db:        db,
		cfg:       cfg,
		lingering: make(chan struct{}, maxLingering),
		log:       cfg.Logger,
		start:     time.Now(),
		baseCtx:   ctx,
		cancel:    cancel,
		listeners: map[net.Listener]bool{},
		conns:     map[*conn]struct{}{},
		done:      make(chan struct{}),
	}
	s.expiry.stop, s.expiry.done = make(chan struct{}), make(chan struct{})
	s.closingC = make(chan struct{})
	s.slowlog.slowerThan.Store(10000) // Redis's defaults
	s.slowlog.maxLen.Store(128)
	s.watch.keys = map[string]*watchEntry{}
	s.cursor.m = map[uint64][]byte{}
	s.cursor.next = cursorBase()
	s.syncCommit.Store(int32(cfg.SynchronousCommit))
	_ = db.SetSynchronousCommit(cfg.SynchronousCommit) // on or off: withDefaults
	s.maxClients.Store(int64(cfg.MaxClients))
	s.protected.Store(!cfg.ProtectedModeOff)
	s.pass.Store(&cfg.RequirePass)
	s.stats = newServerStats()
	var id [20]byte
	rand.Read(id[:])
	s.replID = hex.EncodeToString(id[:])
	s.timeout.Store(int64(cfg.Timeout))
	hz := defaultHz
	if cfg.Hz != 0 {
		hz = clampHz(int64(cfg.Hz))
	}
	s.hz.Store(int64(hz))
	s.hzChanged = make(chan struct{}, 1)
	lim := cfg.Limits
	s.lim.Store(&lim)
	s.met = newMetrics(s)
	return s
}

// Registry returns the server's own Prometheus registry (never the global
// one), for an HTTP handler such as promhttp.HandlerFor.
func (s *Server) Registry() *prometheus.Registry { return s.met.reg }

// OpenTransactions is the number of engine transactions the server has
// begun and not yet committed or rolled back: 0 whenever no command is
// running.
func (s *Server) OpenTransactions() int64 { return s.openTxns.Load() }

// Done is closed when a shutdown (by Shutdown, SHUTDOWN or Serve's
// context) has completed.
func (s *Server) Done() <-chan struct{} { return s.done }

func (s *Server) limits() Limits { return *s.lim.Load() }

// Serve accepts connections on ln until Shutdown, serving each on its own
// goroutine. It returns ErrServerClosed after a shutdown has completed, or
// the listener's error. Canceling ctx starts a graceful shutdown bounded by
// Config.ShutdownTimeout.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	return s.serve(ctx, ln, false)
}

// ServeTLS is Serve on TLS connections: it accepts on ln, a TCP listener,
// and runs the TLS handshake of config (crypto/tls's server side) on each
// connection. CONFIG GET tls-port reports its port; port and INFO's
// tcp_port report Serve's. It returns as Serve does: ErrServerClosed after
// a shutdown has completed, or the listener's error.
func (s *Server) ServeTLS(ctx context.Context, ln net.Listener, config *tls.Config) error {
	return s.serve(ctx, tls.NewListener(ln, config), true)
}

func (s *Server) serve(ctx context.Context, ln net.Listener, isTLS bool) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		ln.Close()
		<-s.done
		return ErrServerClosed
	}
	s.listeners[ln] = isTLS
	s.mu.Unlock()
	s.startCron()
	stop := context.AfterFunc(ctx, func() { s.shutdownAsync() })
	defer stop()
	var tempDelay time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closing := s.closing
			delete(s.listeners, ln)
			s.mu.Unlock()
			if closing {
				<-s.done
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				tempDelay = min(max(2*tempDelay, 5*time.Millisecond), time.Second)
				time.Sleep(tempDelay)
				continue
			}
			return err
		}
		tempDelay = 0
		s.connsRecv.Add(1)
		if s.deniedByProtectedMode(nc) {
			s.reject(nc, deniedProtected)
			continue
		}
		if s.clients.Load() >= s.maxClients.Load() {
			s.reject(nc, "-ERR max number of clients reached\r\n")
			continue
		}
		c := s.newConn(nc)
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			nc.Close()
			continue
		}
		s.conns[c] = struct{}{}
		s.connWG.Add(1)
		s.clients.Add(1)
		s.mu.Unlock()
		go c.serve()
	}
}

// hold keeps nc open until the shutdown is done (see Shutdown), unless it
// is done already; it reports whether it took nc.
func (s *Server) hold(nc net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.heldDone {
		return false
	}
	s.held = append(s.held, nc)
	return true
}

func (s *Server) removeConn(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.clients.Add(-1)
	s.connWG.Done()
}

func (s *Server) shutdownAsync() {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
		defer cancel()
		s.Shutdown(ctx)
	}()
}

// Shutdown stops the server gracefully, as Redis's SHUTDOWN and
// PostgreSQL's smart-then-fast shutdown: it stops accepting connections,
// lets every connection finish the command it is running (including its
// commit and durability wait) and closes it, then takes a checkpoint. A
// client that does not read its replies gets a second to take them, then
// its connection is closed, so that it cannot hold the shutdown. If
// ctx ends first, in-flight engine waits are canceled, connections are
// closed, and ctx's error is returned (a commit whose wait was canceled
// stays in doubt until recovery, never acknowledged). Shutdown does not
// close the DB. Calls after the first wait for the first to finish.
//
// The connection of a client that sent SHUTDOWN is closed last, after
// Config.OnShutdown, with no reply, as Redis's.
//
// After a SHUTDOWN NOSAVE command, no checkpoint is taken, and the DB is
// told to close without one (engine.DB.SetCheckpointOnClose), so that the
// caller's Close skips it too: every acknowledged write is in the WAL,
// which Close makes durable to its end (asynchronous commits' included),
// and the next Open replays the WAL since the last checkpoint.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutOnce.Do(func() {
		s.shutErr = s.shutdown(ctx)
		if s.cfg.OnShutdown != nil {
			s.shutErr = errors.Join(s.shutErr, s.cfg.OnShutdown())
		}
		s.mu.Lock()
		held := s.held
		s.held, s.heldDone = nil, true
		s.mu.Unlock()
		for _, nc := range held {
			nc.Close()
		}
		close(s.done)
	})
	select {
	case <-s.done:
		return s.shutErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Server) shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	s.closingA.Store(true)
	close(s.closingC)
	for ln := range s.listeners {
		ln.Close()
	}
	for c := range s.conns {
		c.wake()
	}
	s.mu.Unlock()
	finished := make(chan struct{})
	go func() { s.connWG.Wait(); close(finished) }()
	var err error
	select {
	case <-finished:
	case <-ctx.Done():
		err = ctx.Err()
		s.cancel()
		s.mu.Lock()
		for c := range s.conns {
			c.nc.Close()
		}
		s.mu.Unlock()
		<-finished
	}
	s.stopCron()
	s.cancel()
	if s.nosave.Load() {
		if cerr := s.db.SetCheckpointOnClose(false); cerr != nil && !errors.Is(cerr, engine.ErrClosed) {
			err = errors.Join(err, cerr)
		}
		s.log.Info("server shut down without a checkpoint (SHUTDOWN NOSAVE): the next start replays the WAL since the last one", "err", err)
		return err
	}
	if cerr := s.db.Checkpoint(); cerr != nil && !errors.Is(cerr, engine.ErrClosed) {
		err = errors.Join(err, fmt.Errorf("server: shutdown checkpoint: %w", cerr))
	}
	s.log.Info("server shut down", "err", err)
	return err
}

func (s *Server) isClosing() bool { return s.closingA.Load() }

// deniedProtected is Redis 7's answer to a client refused by protected
// mode.
const deniedProtected = "-DENIED Redis is running in protected mode because protected mode is enabled and no password is set for the default user. " +
	"In this mode connections are only accepted from the loopback interface. If you want to connect from external computers to Redis you may adopt one of the following solutions: " +
	"1) Just disable protected mode sending the command 'CONFIG SET protected-mode no' from the loopback interface by connecting to Redis from the same host the server is running, however MAKE SURE Redis is not publicly accessible from internet if you do so. Use CONFIG REWRITE to make this change permanent. " +
	"2) Alternatively you can just disable the protected mode by editing the Redis configuration file, and setting the protected mode option to 'no', and then restarting the server. " +
	"3) If you started the server manually just for testing, restart it with the '--protected-mode no' option. " +
	"4) Set up an authentication password for the default user. " +
	"NOTE: You only need to do one of the above things in order for the server to start accepting connections from the outside.\r\n"

// deniedByProtectedMode reports whether protected mode refuses nc: it is
// on, there is no password, and the client's address is neither a
// loopback address nor a Unix socket (as Redis's connIsLocal).
func (s *Server) deniedByProtectedMode(nc net.Conn) bool {
	if !s.protected.Load() || s.requirePass() != "" {
		return false
	}
	return !isLocal(nc)
}

// isLocal reports whether nc's client is on this host: a loopback address
// or a Unix socket (Redis's connIsLocal).
func isLocal(nc net.Conn) bool {
	switch a := nc.RemoteAddr().(type) {
	case *net.TCPAddr:
		return a.IP.IsLoopback()
	case *net.UnixAddr:
		return true
	}
	host, _, err := net.SplitHostPort(nc.RemoteAddr().String())
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (s *Server) checkPassword(p []byte) bool {
	return subtle.ConstantTimeCompare(p, []byte(s.requirePass())) == 1
}

// requirePass is the current requirepass, "" for none.
func (s *Server) requirePass() string { return *s.pass.Load() }

// maxLingering is how many refused connections may be closed gracefully
// at once (reject).
const maxLingering = 64

// reject answers a connection the server refuses with msg and closes it.
// A close with the client's first request still unread in the socket
// makes the kernel reset the connection, and the reset can reach the
// client before the reply does, which then sees "connection reset by
// peer" instead of the reason. So the write side is shut first and the
// client's bytes are read and dropped until it closes or a second passes,
// in a goroutine of its own, at most maxLingering at once (beyond that,
// or for a connection that is not TCP, it is closed at once).
func (s *Server) reject(nc net.Conn, msg string) {
	s.rejected.Add(1)
	nc.SetDeadline(time.Now().Add(time.Second))
	io.WriteString(nc, msg)
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		nc.Close()
		return
	}
	select {
	case s.lingering <- struct{}{}:
	default:
		nc.Close()
		return
	}
	go func() {
		defer func() { <-s.lingering }()
		tc.CloseWrite()
		io.Copy(io.Discard, io.LimitReader(tc, 1<<20))
		tc.Close()
	}()
}
