package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"mvkv/bench"
	"mvkv/engine"
	"mvkv/server"
)

const serveUsage = `mvkv serve runs mvkv as a server speaking the Redis protocol (RESP2).

Usage:
  mvkv serve --dir DIR [OPTION]...

Server options:
  --dir=DIR                data directory (created if needed; required)
  --listen=ADDR            address to listen on (default: 127.0.0.1:7379)
  --metrics=ADDR           serve Prometheus metrics at http://ADDR/metrics
                           (default: off), e.g. 127.0.0.1:9121
  --requirepass=PASS       require AUTH PASS (default: no password)
  --protected-mode=yes|no  with no password, refuse clients that connect
                           from other hosts, as Redis (default: yes)
  --tls-port=PORT          also accept TLS connections on this port, on
                           --listen's host (default: 0, off)
  --tls-cert-file=FILE     the server's certificate (PEM), for --tls-port
  --tls-key-file=FILE      its private key (PEM)
  --tls-ca-cert-file=FILE  CA certificates that client certificates must
                           chain to (PEM)
  --tls-auth-clients=yes|no|optional
                           require a client certificate, not ask for one, or
                           check one if given (default: yes, as Redis)
  --maxclients=NUM         most client connections (default: 10000)
  --timeout=SEC            close clients idle this long; 0 never (default: 0)
  --shutdown-timeout=SEC   longest graceful shutdown (default: 30)
  --cpuprofile=FILE        write a CPU profile of the server's whole run to
                           FILE, completed at shutdown (default: none)

Engine options:
  --synchronous-commit=on|off
                           on: a write is replied to and visible to others
                           only once its commit record is durable; off: a
                           reply does not mean the write is durable, and a
                           crash may lose the last ones (default: on)
  --commit-delay=NUM|auto  commit_delay in microseconds, or auto (default: 0)
  --commit-siblings=NUM    commit_siblings (default: 5)
  --shared-buffers=SIZE    buffer pool, e.g. 128MB (default: 128MB)
  --wal-flusher=serial|pipelined|none
                           group-commit flusher policy (default:
                           pipelined, as the engine's: it overlaps syncs
                           only while that commits faster than one at a
                           time)
  --wal-writer-delay=MS    wal_writer_delay: how often the WAL writer
                           flushes asynchronous commits (default: 200)
  --wal-segment-size=SIZE  WAL segment size for a new data directory, a
                           power of two from 1MB to 1GB (default: 16MB)
  --checkpoint-timeout=SEC checkpoint_timeout; 0 turns time-driven
                           checkpoints off (default: 300)
  --max-wal-size=SIZE      max_wal_size: WAL written between checkpoints;
                           a bare number counts MB (default: 1GB)
  --lock-timeout=MS        lock_timeout: longest wait for a row lock; 0
                           waits as long as the client (default: 0)
  --clog-buffers=NUM       CLOG pages cached, in banks of 16 (default: 0,
                           shared_buffers/512 from 16 to 1024, as
                           PostgreSQL 17's transaction_buffers)
  --clog-locking=bank|global
                           one lock per CLOG bank, or one for all
                           (default: bank)
  --clog-group-update=on|off
                           CLOG group update of statuses (default: on)
  --early-lock-release=on|off
                           on: a synchronous commit is visible and releases
                           its row locks once its commit record is in the
                           WAL, and is replied to once it is durable; a
                           reply that read it also waits until then, so
                           many writes of one key share a WAL flush. off:
                           PostgreSQL's order, visible only once durable
                           (default: on)
  --autovacuum=on|off      autovacuum (default: on)
  --autovacuum-naptime=SEC|DURATION
                           autovacuum_naptime: how often autovacuum checks
                           the dead-tuple count; a bare number counts
                           seconds, as PostgreSQL's, or a duration such as
                           90s or 5m, from 1s to 2147483s (default: 60)
  --autovacuum-vacuum-threshold=NUM
                           autovacuum_vacuum_threshold: autovacuum runs
                           vacuum once the dead tuples exceed this plus
                           the scale factor times the live tuples; at
                           least 1 (default: 50)
  --autovacuum-vacuum-scale-factor=NUM
                           autovacuum_vacuum_scale_factor: the fraction of
                           the live tuples added to the threshold, from 0
                           (the threshold alone) to 100 (default: 0.2)
  --fillfactor=NUM         fillfactor, 10 to 100 percent: a new key goes on
                           a page only if the rest stays free for updates
                           (default: 100, as PostgreSQL)
  --vacuum-freeze-min-age=NUM
                           vacuum_freeze_min_age in transactions, 0 to
                           1000000000: vacuum freezes a tuple this much
                           older than its horizon; 0 freezes every tuple
                           it can (default: 50000000)
  --vacuum-freeze-table-age=NUM
                           vacuum_freeze_table_age in transactions, 0 to
                           2000000000: a vacuum reads every page not
                           all-frozen once the frozen horizon lags this
                           far; 0 makes every vacuum aggressive (default:
                           150000000)
  --visibility-map=crash-safe|unlogged
                           WAL-logged visibility map bits (default), or
                           unlogged ones as before PostgreSQL 9.2: UNSAFE
                           after a crash, for experiments only

SIGTERM, SIGINT and the SHUTDOWN command stop the server gracefully: running
commands finish, a checkpoint is taken, the data directory is closed.

Common options:
  -h, --help               show this help, then exit
`

// serveMain is `mvkv serve`. Exit status: 0 after a clean shutdown, 1 on an
// error, 2 on a usage error.
func serveMain(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serveRun(ctx, args, stdout, stderr)
}

func serveRun(ctx context.Context, args []string, stdout, stderr io.Writer) (status int) {
	fs := flag.NewFlagSet("mvkv serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	// The flag package prints a bad flag's error itself; -h prints the
	// full usage once, to stdout, below.
	fs.Usage = func() {}
	var (
		dir, listen, metricsAddr, pass string
		syncCommit, commitDelay        string
		shared, walFlusher             string
		maxClients, commitSiblings     int
		timeout, shutdownTimeout       int
		walWriterDelay, lockTimeout    int
		ckptTimeout, clogBuffers       int
		segSize, maxWAL                string
		clogLocking, clogGroup         string
		autovacuum, visibilityMap      string
		naptime                        string
		avThreshold                    int
		avScaleFactor                  float64
		freezeMinAge, freezeTableAge   int64
		cpuprofile                     string
	)
	fs.StringVar(&dir, "dir", "", "")
	fs.StringVar(&listen, "listen", "127.0.0.1:7379", "")
	fs.StringVar(&metricsAddr, "metrics", "", "")
	fs.StringVar(&pass, "requirepass", "", "")
	protectedMode := "yes"
	fs.StringVar(&protectedMode, "protected-mode", "yes", "")
	var tlsPort int
	var tlsCert, tlsKey, tlsCA, tlsAuth string
	fs.IntVar(&tlsPort, "tls-port", 0, "")
	fs.StringVar(&tlsCert, "tls-cert-file", "", "")
	fs.StringVar(&tlsKey, "tls-key-file", "", "")
	fs.StringVar(&tlsCA, "tls-ca-cert-file", "", "")
	fs.StringVar(&tlsAuth, "tls-auth-clients", "yes", "")
	fs.IntVar(&maxClients, "maxclients", 10000, "")
	fs.IntVar(&timeout, "timeout", 0, "")
	fs.IntVar(&shutdownTimeout, "shutdown-timeout", 30, "")
	fs.StringVar(&cpuprofile, "cpuprofile", "", "")
	fs.StringVar(&syncCommit, "synchronous-commit", "on", "")
	fs.StringVar(&commitDelay, "commit-delay", "0", "")
	fs.IntVar(&commitSiblings, "commit-siblings", 5, "")
	fs.StringVar(&shared, "shared-buffers", "128MB", "")
	// Serial, as the engine's default: under redis-benchmark with 32
	// and 64 clients of random keys it made 2 to 3 times fewer WAL syncs
	// and 1.3 to 1.9 times the requests per second, the two CPUs being
	// shared with the clients (docs/BENCHMARKS.md).
	fs.StringVar(&walFlusher, "wal-flusher", "pipelined", "")
	fs.IntVar(&walWriterDelay, "wal-writer-delay", 200, "")
	fs.StringVar(&segSize, "wal-segment-size", "16MB", "")
	fs.IntVar(&ckptTimeout, "checkpoint-timeout", 300, "")
	fs.StringVar(&maxWAL, "max-wal-size", "1GB", "")
	fs.IntVar(&lockTimeout, "lock-timeout", 0, "")
	fs.IntVar(&clogBuffers, "clog-buffers", 0, "")
	fs.StringVar(&clogLocking, "clog-locking", "bank", "")
	fs.StringVar(&clogGroup, "clog-group-update", "on", "")
	var earlyLockRelease string
	fs.StringVar(&earlyLockRelease, "early-lock-release", "on", "")
	fs.StringVar(&autovacuum, "autovacuum", "on", "")
	fs.StringVar(&naptime, "autovacuum-naptime", "60", "")
	fs.IntVar(&avThreshold, "autovacuum-vacuum-threshold", 50, "")
	fs.Float64Var(&avScaleFactor, "autovacuum-vacuum-scale-factor", 0.2, "")
	fs.Int64Var(&freezeMinAge, "vacuum-freeze-min-age", 50_000_000, "")
	fs.Int64Var(&freezeTableAge, "vacuum-freeze-table-age", 150_000_000, "")
	fs.StringVar(&visibilityMap, "visibility-map", "crash-safe", "")
	var fillFactor int
	fs.IntVar(&fillFactor, "fillfactor", 100, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, serveUsage)
			return 0
		}
		fmt.Fprintf(stderr, "Try \"mvkv serve --help\" for more information.\n")
		return 2
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "mvkv serve: "+format+"\n", a...)
		fmt.Fprintf(stderr, "Try \"mvkv serve --help\" for more information.\n")
		return 2
	}
	if fs.NArg() > 0 {
		return fail("too many command-line arguments (first is %q)", fs.Arg(0))
	}
	if dir == "" {
		return fail("--dir is required")
	}
	if protectedMode = strings.ToLower(protectedMode); protectedMode != "yes" && protectedMode != "no" {
		return fail("invalid --protected-mode %q (want yes or no)", protectedMode)
	}
	syncOn, err := bench.ParseOnOff(syncCommit)
	if err != nil {
		return fail("invalid --synchronous-commit %q (want on or off)", syncCommit)
	}
	sc := engine.SyncCommitOff
	if syncOn {
		sc = engine.SyncCommitOn
	}
	delay := engine.CommitDelayAuto
	if commitDelay != "auto" {
		d, err := strconv.Atoi(commitDelay)
		if err != nil || d < 0 || d > 100000 {
			return fail("invalid --commit-delay %q (0..100000 microseconds, or auto)", commitDelay)
		}
		delay = d
	}
	switch walFlusher {
	case "serial", "pipelined", "none":
	default:
		return fail("invalid --wal-flusher %q (want serial, pipelined or none)", walFlusher)
	}
	switch {
	case commitSiblings < 0:
		return fail("invalid --commit-siblings %d", commitSiblings)
	case maxClients < 1:
		return fail("invalid --maxclients %d", maxClients)
	case timeout < 0:
		return fail("invalid --timeout %d", timeout)
	case shutdownTimeout < 1:
		return fail("invalid --shutdown-timeout %d", shutdownTimeout)
	}
	sharedBytes, err := parseSharedBuffers(shared)
	if err != nil {
		return fail("invalid --shared-buffers: %v", err)
	}
	switch {
	case walWriterDelay < 1 || walWriterDelay > 10000:
		return fail("invalid --wal-writer-delay %d (1..10000 milliseconds)", walWriterDelay)
	case ckptTimeout < 0 || ckptTimeout > 86400:
		return fail("invalid --checkpoint-timeout %d (0..86400 seconds)", ckptTimeout)
	case lockTimeout < 0:
		return fail("invalid --lock-timeout %d", lockTimeout)
	case clogBuffers != 0 && (clogBuffers < 16 || clogBuffers > 1<<17):
		return fail("invalid --clog-buffers %d (0 or 16..131072)", clogBuffers)
	case clogLocking != "bank" && clogLocking != "global":
		return fail("invalid --clog-locking %q (want bank or global)", clogLocking)
	// engine.Options takes 0 for the default, so 0 cannot be passed on.
	case avThreshold < 1:
		return fail("invalid --autovacuum-vacuum-threshold %d (at least 1; the engine takes 0 for its default)", avThreshold)
	case !(avScaleFactor >= 0 && avScaleFactor <= 100):
		return fail("invalid --autovacuum-vacuum-scale-factor %v (at least 0, at most 100)", avScaleFactor)
	case visibilityMap != engine.VisibilityMapCrashSafe && visibilityMap != engine.VisibilityMapUnlogged:
		return fail("invalid --visibility-map %q (want crash-safe or unlogged)", visibilityMap)
	}
	engineFreezeMinAge, engineFreezeTableAge, err := freezeAges(freezeMinAge, freezeTableAge)
	if err != nil {
		return fail("%v", err)
	}
	if fillFactor < 10 || fillFactor > 100 {
		return fail("invalid --fillfactor %d (10..100 percent)", fillFactor)
	}
	napDuration, err := parseNaptime(naptime)
	if err != nil {
		return fail("invalid --autovacuum-naptime %q: %v", naptime, err)
	}
	autovacuumOn, err := bench.ParseOnOff(autovacuum)
	if err != nil {
		return fail("invalid --autovacuum %q (want on or off)", autovacuum)
	}
	groupUpdate, err := bench.ParseOnOff(clogGroup)
	if err != nil {
		return fail("invalid --clog-group-update %q (want on or off)", clogGroup)
	}
	elrOn, err := bench.ParseOnOff(earlyLockRelease)
	if err != nil {
		return fail("invalid --early-lock-release %q (want on or off)", earlyLockRelease)
	}
	segBytes, err := parseSize(segSize)
	if err != nil || segBytes < 1<<20 || segBytes > 1<<30 || segBytes&(segBytes-1) != 0 {
		return fail("invalid --wal-segment-size %q (a power of two from 1MB to 1GB)", segSize)
	}
	if strings.Trim(maxWAL, "0123456789") == "" {
		maxWAL += "MB" // PostgreSQL's unit for max_wal_size
	}
	maxWALBytes, err := parseSize(maxWAL)
	if err != nil || maxWALBytes < 2*segBytes {
		return fail("invalid --max-wal-size %q (at least two WAL segments)", maxWAL)
	}
	siblings := commitSiblings
	if siblings == 0 {
		siblings = engine.NoCommitSiblings // the zero Option means the default
	}
	ckpt := time.Duration(ckptTimeout) * time.Second
	if ckptTimeout == 0 {
		ckpt = -1
	}

	if cpuprofile != "" {
		stop, err := startCPUProfile(cpuprofile)
		if err != nil {
			fmt.Fprintf(stderr, "mvkv: %v\n", err)
			return 1
		}
		// The profile is complete once the server has shut down.
		defer stop()
	}

	// Bind before opening the data directory: a bad or busy address fails
	// at once rather than after recovery, and the data directory is left
	// untouched.
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		fmt.Fprintln(stderr, errorLine(err))
		return 1
	}
	defer ln.Close() // after Serve has closed it; a second Close is harmless
	var tln net.Listener
	if tlsPort != 0 {
		tc, err := serverTLSConfig(tlsCert, tlsKey, tlsCA, tlsAuth)
		if err != nil {
			fmt.Fprintf(stderr, "mvkv: tls: %v\n", err)
			return 1
		}
		host, _, err := net.SplitHostPort(listen)
		if err != nil {
			fmt.Fprintln(stderr, errorLine(err))
			return 1
		}
		if tlsPort < 0 || tlsPort > 65535 {
			fmt.Fprintf(stderr, "mvkv: invalid --tls-port %d\n", tlsPort)
			return 1
		}
		raw, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(tlsPort)))
		if err != nil {
			fmt.Fprintln(stderr, errorLine(err))
			return 1
		}
		tln = tls.NewListener(raw, tc)
		defer tln.Close()
	}
	var mln net.Listener
	if metricsAddr != "" {
		if mln, err = net.Listen("tcp", metricsAddr); err != nil {
			fmt.Fprintf(stderr, "mvkv: metrics: %v\n", err)
			return 1
		}
		defer mln.Close()
	}

	log := slog.New(slog.NewTextHandler(stderr, nil))
	db, err := engine.Open(dir, engine.Options{
		Logger:            log,
		SharedBuffers:     sharedBytes,
		FillFactor:        fillFactor,
		SynchronousCommit: sc,
		CommitDelay:       delay,
		CommitSiblings:    siblings,
		WALFlusher:        walFlusher,
		WALWriterDelay:    time.Duration(walWriterDelay) * time.Millisecond,
		WALSegmentSize:    segBytes,
		CheckpointTimeout: ckpt,
		MaxWALSize:        maxWALBytes,
		LockTimeout:       time.Duration(lockTimeout) * time.Millisecond,
		CLOGBuffers:       clogBuffers,
		CLOGLocking:       clogLocking,
		CLOGGroupUpdate:   &groupUpdate,
		EarlyLockRelease:  &elrOn,
		Autovacuum:        &autovacuumOn,
		AutovacuumNaptime: napDuration,
		VisibilityMap:     visibilityMap,

		AutovacuumVacuumThreshold:   avThreshold,
		AutovacuumVacuumScaleFactor: engineScaleFactor(avScaleFactor),
		VacuumFreezeMinAge:          engineFreezeMinAge,
		VacuumFreezeTableAge:        engineFreezeTableAge,
	})
	if err != nil {
		fmt.Fprintln(stderr, errorLine(err))
		return 1
	}
	defer func() {
		if err := db.Close(); err != nil {
			fmt.Fprintf(stderr, "mvkv: close: %s\n", strings.TrimPrefix(err.Error(), "mvkv: "))
			status = 1
		}
	}()
	damageDone := make(chan struct{})
	defer close(damageDone)
	go warnDamage(db, log, damageDone)
	srv := server.New(db, server.Config{
		ProtectedModeOff:  protectedMode == "no",
		MaxClients:        maxClients,
		Timeout:           time.Duration(timeout) * time.Second,
		RequirePass:       pass,
		SynchronousCommit: sc,
		ShutdownTimeout:   time.Duration(shutdownTimeout) * time.Second,
		Logger:            log,
	})
	if mln != nil {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(srv.Registry(), promhttp.HandlerOpts{}))
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go hs.Serve(mln)
		defer hs.Close()
		fmt.Fprintf(stdout, "metrics at http://%s/metrics\n", mln.Addr())
	}
	if tln != nil {
		go func() {
			if err := srv.Serve(ctx, tln); !errors.Is(err, server.ErrServerClosed) {
				log.Error("TLS listener failed", "err", err)
			}
		}()
		fmt.Fprintf(stdout, "ready to accept TLS connections on %s\n", tln.Addr())
	}
	fmt.Fprintf(stdout, "ready to accept connections on %s\n", ln.Addr())
	if err := srv.Serve(ctx, ln); !errors.Is(err, server.ErrServerClosed) {
		fmt.Fprintln(stderr, errorLine(err))
		sctx, cancel := context.WithTimeout(context.Background(), time.Duration(shutdownTimeout)*time.Second)
		srv.Shutdown(sctx)
		cancel()
		return 1
	}
	// Serve returned after the shutdown completed; its error, if any.
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		fmt.Fprintf(stderr, "mvkv: shutdown: %v\n", err)
		status = 1
	}
	fmt.Fprintf(stdout, "shut down\n")
	return status
}

// serverTLSConfig builds the TLS configuration of --tls-port from Redis's
// options: the certificate and key, the CA client certificates must chain
// to, and tls-auth-clients (yes: a client must present one; optional: one
// presented is checked; no: none is asked for). TLS 1.2 at least.
func serverTLSConfig(certFile, keyFile, caFile, auth string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("--tls-port needs --tls-cert-file and --tls-key-file")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	switch strings.ToLower(auth) {
	case "yes":
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	case "optional":
		tc.ClientAuth = tls.VerifyClientCertIfGiven
	case "no":
		tc.ClientAuth = tls.NoClientCert
	default:
		return nil, fmt.Errorf("invalid --tls-auth-clients %q (want yes, no or optional)", auth)
	}
	if tc.ClientAuth != tls.NoClientCert {
		if caFile == "" {
			return nil, errors.New("--tls-auth-clients yes or optional needs --tls-ca-cert-file")
		}
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, err
		}
		tc.ClientCAs = x509.NewCertPool()
		if !tc.ClientCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s holds no PEM certificate", caFile)
		}
	}
	return tc, nil
}

// errorLine is err as one line of stderr with a single "mvkv: " prefix: the
// engine's errors carry it already, the standard library's do not.
func errorLine(err error) string {
	if msg := err.Error(); strings.HasPrefix(msg, "mvkv: ") {
		return msg
	}
	return "mvkv: " + err.Error()
}

// parseNaptime parses --autovacuum-naptime as PostgreSQL's
// autovacuum_naptime: a bare integer counts seconds; otherwise a Go
// duration (90s, 5m). The range is PostgreSQL's, 1 s to 2147483 s.
func parseNaptime(v string) (time.Duration, error) {
	const lo, hi = time.Second, 2147483 * time.Second
	var d time.Duration
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 1 || n > int64(hi/time.Second) {
			return 0, fmt.Errorf("want 1..2147483 seconds")
		}
		d = time.Duration(n) * time.Second
	} else {
		if d, err = time.ParseDuration(v); err != nil {
			return 0, fmt.Errorf("want a number of seconds or a duration such as 90s")
		}
	}
	if d < lo || d > hi {
		return 0, fmt.Errorf("want 1s..2147483s")
	}
	return d, nil
}

// engineScaleFactor passes autovacuum_vacuum_scale_factor to engine.Options,
// where 0 means the default and a negative value means 0.
// freezeAges checks --vacuum-freeze-min-age and --vacuum-freeze-table-age
// against PostgreSQL's ranges and turns them into engine.Options values,
// where 0 means the default: PostgreSQL's 0 (freeze everything, every
// vacuum aggressive) is the engine's negative value.
func freezeAges(minAge, tableAge int64) (engineMin, engineTable int64, err error) {
	if minAge < 0 || minAge > 1_000_000_000 {
		return 0, 0, fmt.Errorf("invalid --vacuum-freeze-min-age %d (0..1000000000)", minAge)
	}
	if tableAge < 0 || tableAge > 2_000_000_000 {
		return 0, 0, fmt.Errorf("invalid --vacuum-freeze-table-age %d (0..2000000000)", tableAge)
	}
	if minAge == 0 {
		minAge = -1
	}
	if tableAge == 0 {
		tableAge = -1
	}
	return minAge, tableAge, nil
}

func engineScaleFactor(f float64) float64 {
	if f == 0 {
		return -1
	}
	return f
}

// warnDamage waits for the engine's background check for heap pages of
// zeros (Open runs it when the key index came from the index file, so that
// opening does not wait for a read of the whole heap) and, when it found
// any, logs a warning that says what it means for clients, as Redis warns
// at startup, besides the engine's own log line; INFO persistence keeps
// the counts. It returns at stop.
func warnDamage(db *engine.DB, log *slog.Logger, stop <-chan struct{}) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for db.Damage().ScanRunning {
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
	if d := db.Damage(); d.ZeroedPages > 0 {
		log.Error("WARNING the data directory is damaged: heap pages that a checkpoint wrote are zeros, "+
			"the keys whose newest version was on them are lost and reading them fails with an error naming the page; "+
			"INFO persistence counts them; run mvkv verify on a copy of the directory to list the keys",
			"pages", d.ZeroedPages, "keysLost", d.KeysLost, "where", d.Zeroed)
	}
}
