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
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"mvkv/engine"
	"mvkv/server"
	"mvkv/vfs"
)

// serveUsage is the help text; its engine options come from the engine's
// table of settings, as mvkv bench's do.
var serveUsage = `mvkv serve runs mvkv as a server speaking the Redis protocol (RESP2).

Usage:
  mvkv serve --dir DIR [OPTION]...

Server options:
  --dir=DIR                data directory (created if needed; required)
  --listen=ADDR            address to listen on, HOST:PORT with PORT 0 to
                           65535 (default: 127.0.0.1:7379)
  --bind=HOST, --port=PORT the same in Redis's two parts: either replaces
                           that part of the default (not with --listen);
                           --bind '*' is every IPv4 address, --port 0 no
                           plain TCP listener (TLS only), as in Redis
  --metrics=ADDR           serve Prometheus metrics at http://ADDR/metrics
                           (default: off), e.g. 127.0.0.1:9121
  --requirepass=PASS       require AUTH PASS (default: no password)
  --protected-mode=yes|no  with no password, refuse clients that connect
                           from other hosts, as Redis (default: yes)
  --enable-backup-command=local|yes|no
                           who may run BACKUP DIR (a copy of the running
                           database into DIR on this host): local clients,
                           every client, or none (default: local)
  --tls-port=PORT          also accept TLS connections on this port, on
                           --listen's host (default: 0, off)
  --tls-cert-file=FILE     the server's certificate (PEM), for --tls-port
  --tls-key-file=FILE      its private key (PEM)
  --tls-ca-cert-file=FILE  CA certificates that client certificates must
                           chain to (PEM)
  --tls-auth-clients=yes|no|optional
                           require a client certificate, not ask for one, or
                           check one if given (default: yes, as Redis)
  --maxclients=NUM         most client connections; 1 to 4294967295, as
                           CONFIG SET takes (default: 10000)
  --timeout=SEC            close clients idle this long; 0 never; 0 to
                           2147483647, as CONFIG SET takes (default: 0)
  --hz=NUM                 how many times a second the server's background
                           tasks run (active expiry; INFO's rates are
                           sampled about every 100 ms, as Redis); 0 to
                           2147483647, clamped to 1 to 500 as Redis
                           (default: 10)
  --loglevel=LEVEL         log messages of this level and above: debug,
                           verbose, notice or warning, as Redis; CONFIG SET
                           loglevel changes it (default: notice)
  --shutdown-timeout=SEC   longest graceful shutdown; 1 to 2147483647
                           (default: 30)
  --cpuprofile=FILE        write a CPU profile of the server's whole run to
                           FILE, completed at shutdown (default: none)

Engine options:
` + engineUsage() + `
SIGTERM, SIGINT and the SHUTDOWN command stop the server gracefully: running
commands finish, a checkpoint is taken, the data directory is closed.
SIGTERM or SIGINT while the data directory opens stops its recovery where
it is (the next start recovers it from the same checkpoint) and exits 0.
After SHUTDOWN NOSAVE no checkpoint is taken: the next start replays the
WAL written since the last one.

Common options:
  -h, --help               show this help, then exit
`

// serveMain is `mvkv serve`. Exit status: 0 after a clean shutdown (a
// signal while the data directory opens included), 1 on an error, 2 on a
// usage error.
func serveMain(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// As redis-server: a closed terminal or SSH session does not take the
	// server down (without a checkpoint); SIGTERM and SIGINT stop it.
	signal.Ignore(syscall.SIGHUP)
	return serveRun(ctx, args, stdout, stderr)
}

func serveRun(ctx context.Context, args []string, stdout, stderr io.Writer) (status int) {
	fs := flag.NewFlagSet("mvkv serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	// The flag package prints a bad flag's error itself; -h prints the
	// full usage once, to stdout, below.
	fs.Usage = func() {}
	var (
		dir, listen, metricsAddr, pass string
		maxClients                     = 10000
		timeout                        time.Duration
		hz                             int
		shutdownTimeout                int
		cpuprofile                     string
		opts                           engine.Options
	)
	fs.StringVar(&dir, "dir", "", "")
	fs.StringVar(&listen, "listen", "127.0.0.1:7379", "")
	// redis-server's names for the two halves of the address.
	var bind, port string
	fs.StringVar(&bind, "bind", "", "")
	fs.StringVar(&port, "port", "", "")
	fs.StringVar(&metricsAddr, "metrics", "", "")
	fs.StringVar(&pass, "requirepass", "", "")
	logLevel := new(slog.LevelVar)
	fs.Func("loglevel", "", func(v string) error {
		l, err := server.ParseLogLevel(v)
		if err == nil {
			logLevel.Set(l)
		}
		return err
	})
	protectedMode := "yes"
	fs.Func("protected-mode", "", func(v string) error {
		if v = strings.ToLower(v); v != "yes" && v != "no" {
			return errors.New("argument must be 'yes' or 'no'")
		}
		protectedMode = v
		return nil
	})
	backupCommand := "local"
	fs.Func("enable-backup-command", "", func(v string) (err error) {
		backupCommand, err = server.ParseBackupCommand(v)
		return err
	})
	var tlsPort int
	var tlsCert, tlsKey, tlsCA, tlsAuth string
	intFlag(fs, &tlsPort, "tls-port", 0)
	fs.StringVar(&tlsCert, "tls-cert-file", "", "")
	fs.StringVar(&tlsKey, "tls-key-file", "", "")
	fs.StringVar(&tlsCA, "tls-ca-cert-file", "", "")
	fs.StringVar(&tlsAuth, "tls-auth-clients", "yes", "")
	// protected-mode, maxclients, timeout and hz take what CONFIG SET takes,
	// with its errors.
	fs.Func("maxclients", "", func(v string) (err error) {
		maxClients, err = server.ParseMaxClients(v)
		return err
	})
	fs.Func("timeout", "", func(v string) (err error) {
		timeout, err = server.ParseTimeout(v)
		return err
	})
	fs.Func("hz", "", func(v string) (err error) {
		hz, err = server.ParseHz(v)
		return err
	})
	intFlag(fs, &shutdownTimeout, "shutdown-timeout", 30)
	fs.StringVar(&cpuprofile, "cpuprofile", "", "")
	engineFlags(fs, &opts)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, serveUsage)
			return 0
		}
		fmt.Fprintf(stderr, "mvkv serve: %s\n%s", flagError(fs, err), tryHelp("serve"))
		return 2
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "mvkv serve: "+format+"\n", a...)
		fmt.Fprint(stderr, tryHelp("serve"))
		return 2
	}
	if fs.NArg() > 0 {
		return fail("too many command-line arguments (first is %q)", fs.Arg(0))
	}
	if listen == "" {
		// An empty address would listen on every interface at a port
		// the system picks: what an unset shell variable gives.
		return fail("--listen needs an address, HOST:PORT (default 127.0.0.1:7379)")
	}
	// The port is checked as --port's is, and refused the same way (a
	// usage error naming the flag), rather than by the listen call after
	// the other options: net.Listen's own error for 70000 names neither
	// the flag nor the range, and it takes service names ("http") that
	// Redis's port does not.
	if _, p, err := net.SplitHostPort(listen); err != nil {
		return fail("invalid --listen %q: want HOST:PORT, PORT 0 to 65535 (%s)", listen, strings.TrimPrefix(err.Error(), "address "+listen+": "))
	} else if !validPort(p) {
		return fail("invalid --listen %q: port %q (want 0 to 65535)", listen, p)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["bind"] || set["port"] {
		if set["listen"] {
			return fail("--listen and --bind or --port are two ways to give one address: give one")
		}
		// An empty one given is refused, as --listen's is, rather than
		// taken for the default: it is what an unset shell variable
		// gives, and redis-server refuses both (port "" is no integer,
		// bind "" listens nowhere).
		if set["bind"] && bind == "" {
			return fail("invalid --bind \"\": want a host name or address")
		}
		if strings.ContainsAny(bind, " ,") {
			return fail("invalid --bind %q: one host name or address (this server listens on one)", bind)
		}
		// Redis's forms: "*" for every IPv4 address, "::*" for every
		// IPv6 one, and a leading "-" for an address that may be missing.
		if b, optional := strings.CutPrefix(bind, "-"); optional {
			if b == "" {
				return fail("invalid --bind %q: want a host name or address after the '-'", bind)
			}
			bind = b
		}
		switch bind {
		case "*":
			bind = "0.0.0.0"
		case "::*":
			bind = "::"
		}
		if set["port"] && !validPort(port) {
			return fail("invalid --port %q (want 0 to 65535)", port)
		}
		host, p, _ := net.SplitHostPort(listen)
		if bind != "" {
			host = bind
		}
		if port != "" {
			p = port
		}
		listen = net.JoinHostPort(host, p)
	}
	// The TLS options are checked whether or not --tls-port is given.
	clientAuth, ok := tlsClientAuth(tlsAuth)
	if !ok {
		return fail("invalid --tls-auth-clients %q (want yes, no or optional)", tlsAuth)
	}
	if tlsPort < 0 || tlsPort > 65535 {
		return fail("invalid --tls-port %d (want 0 to 65535)", tlsPort)
	}
	plainOff := port == "0" // Redis's "port 0": TLS only
	if plainOff && tlsPort == 0 {
		return fail("--port 0 turns the plain TCP listener off, as in Redis; it needs --tls-port")
	}
	if tlsPort != 0 && (tlsCert == "" || tlsKey == "") {
		return fail("--tls-port needs --tls-cert-file and --tls-key-file")
	}
	if tlsPort != 0 && clientAuth != tls.NoClientCert && tlsCA == "" {
		return fail("--tls-auth-clients %s needs --tls-ca-cert-file", strings.ToLower(tlsAuth))
	}
	if shutdownTimeout < 1 || shutdownTimeout > math.MaxInt32 {
		return fail("invalid --shutdown-timeout %d (want 1 to %d)", shutdownTimeout, math.MaxInt32)
	}
	// After the values given are checked, so that a mistyped one is
	// reported whether or not --dir was given too.
	if dir == "" {
		return fail("--dir is required")
	}
	// The settings were checked one by one as they were parsed; this
	// checks them together (max_wal_size against the segment size).
	opts = withDiskSegmentSize(opts, dir)
	if err := opts.Validate(); err != nil {
		return fail("%s", errText(err))
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
	var ln net.Listener
	var err error
	if !plainOff {
		if ln, err = net.Listen(tcpNetwork(listen), listen); err != nil {
			fmt.Fprintln(stderr, errorLine(err))
			return 1
		}
		defer ln.Close() // after Serve has closed it; a second Close is harmless
	}
	var tln net.Listener // for ServeTLS, with tlsConfig
	var tlsConfig *tls.Config
	if tlsPort != 0 {
		tc, err := serverTLSConfig(tlsCert, tlsKey, tlsCA, clientAuth)
		if err != nil {
			// The crypto/tls errors start with "tls: " themselves.
			fmt.Fprintf(stderr, "mvkv: tls: %s\n", strings.TrimPrefix(err.Error(), "tls: "))
			return 1
		}
		host, _, err := net.SplitHostPort(listen)
		if err != nil {
			fmt.Fprintln(stderr, errorLine(err))
			return 1
		}
		tlsAddr := net.JoinHostPort(host, strconv.Itoa(tlsPort))
		raw, err := net.Listen(tcpNetwork(tlsAddr), tlsAddr)
		if err != nil {
			fmt.Fprintln(stderr, errorLine(err))
			return 1
		}
		tln, tlsConfig = raw, tc
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

	// Redis's verbose level, between slog's Debug and Info, is named as
	// Redis names it rather than DEBUG+2.
	verbose, _ := server.ParseLogLevel("verbose")
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: logLevel,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if l, ok := a.Value.Any().(slog.Level); ok && len(groups) == 0 && a.Key == slog.LevelKey && l == verbose {
				a.Value = slog.StringValue("VERBOSE")
			}
			return a
		}}))
	opts.Logger = log
	// Recovery can take a while (an index rebuilt from a large heap):
	// meanwhile clients are told so, as Redis answers while it loads.
	stopLoading := answerLoading(ln)
	if testOpenFS != nil {
		opts.FS = testOpenFS(ctx)
	}
	// SIGTERM or SIGINT (ctx) stops a long recovery where it is, as a
	// crash there would: the next start begins it again.
	db, err := engine.OpenContext(ctx, dir, opts)
	stopLoading()
	if errors.Is(err, engine.ErrOpenStopped) && ctx.Err() != nil {
		fmt.Fprintf(stderr, "mvkv serve: stopped by a signal while opening %s, before its recovery ended; the next start recovers it from the same checkpoint\n", dir)
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, errorLine(err))
		return 1
	}
	// Closed by the server at the end of its shutdown (OnShutdown), so
	// that a client's SHUTDOWN returns once the directory is free, or
	// here when serving ends another way.
	var closeOnce sync.Once
	var closeErr error
	closeDB := func() error {
		closeOnce.Do(func() { closeErr = db.Close() })
		return closeErr
	}
	defer func() {
		if err := closeDB(); err != nil {
			fmt.Fprintf(stderr, "mvkv: close: %s\n", strings.TrimPrefix(err.Error(), "mvkv: "))
			status = 1
		}
	}()
	// The warning goroutine is stopped and waited for before the DB
	// closes (defers run last first), so that a warning due at shutdown
	// is written before the process exits.
	damageDone, warned := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(warned)
		warnDamage(db.Damage, log, damageDone)
	}()
	var stopOnce sync.Once
	stopWarnings := func() {
		stopOnce.Do(func() {
			close(damageDone)
			<-warned
		})
	}
	defer stopWarnings()
	srv := server.New(db, server.Config{
		ProtectedModeOff:  protectedMode == "no",
		BackupCommand:     backupCommand,
		MaxClients:        maxClients,
		Timeout:           timeout,
		Hz:                hz,
		RequirePass:       pass,
		SynchronousCommit: opts.SynchronousCommit,
		ShutdownTimeout:   time.Duration(shutdownTimeout) * time.Second,
		Logger:            log,
		LogLevel:          logLevel,
		OnShutdown: func() error {
			// The damage warnings are stopped first, as below.
			stopWarnings()
			closeDB() // its error is reported below, once
			return nil
		},
	})
	if mln != nil {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(srv.Registry(), promhttp.HandlerOpts{}))
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go hs.Serve(mln)
		defer hs.Close()
		fmt.Fprintf(stdout, "metrics at http://%s/metrics\n", mln.Addr())
	}
	var serveErr error
	switch {
	case ln == nil:
		fmt.Fprintf(stdout, "ready to accept TLS connections on %s\n", tln.Addr())
		serveErr = srv.ServeTLS(ctx, tln, tlsConfig)
	default:
		if tln != nil {
			go func() {
				if err := srv.ServeTLS(ctx, tln, tlsConfig); !errors.Is(err, server.ErrServerClosed) {
					log.Error("TLS listener failed", "err", err)
				}
			}()
			fmt.Fprintf(stdout, "ready to accept TLS connections on %s\n", tln.Addr())
		}
		fmt.Fprintf(stdout, "ready to accept connections on %s\n", ln.Addr())
		serveErr = srv.Serve(ctx, ln)
	}
	if err := serveErr; !errors.Is(err, server.ErrServerClosed) {
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

// validPort reports whether p is a TCP port as Redis's port option takes
// one: decimal digits only (no sign, no service name) of 0 to 65535.
func validPort(p string) bool {
	if p == "" || strings.Trim(p, "0123456789") != "" {
		return false
	}
	n, err := strconv.Atoi(p)
	return err == nil && n <= 65535
}

// serverTLSConfig builds the TLS configuration of --tls-port from Redis's
// options: the certificate and key, the CA client certificates must chain
// to, and tls-auth-clients (yes: a client must present one; optional: one
// presented is checked; no: none is asked for). TLS 1.2 at least. The
// caller has checked that the files it needs are named. Every error names
// the option and file it is about, since crypto/tls's own name neither.
func serverTLSConfig(certFile, keyFile, caFile string, auth tls.ClientAuthType) (*tls.Config, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert-file: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-key-file: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert-file %s, --tls-key-file %s: %s", certFile, keyFile, strings.TrimPrefix(err.Error(), "tls: "))
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, ClientAuth: auth}
	if tc.ClientAuth != tls.NoClientCert {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca-cert-file: %w", err)
		}
		tc.ClientCAs = x509.NewCertPool()
		if !tc.ClientCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca-cert-file %s holds no PEM certificate", caFile)
		}
	}
	return tc, nil
}

// tlsClientAuth is the client authentication --tls-auth-clients asks for:
// yes, optional or no, in any case.
func tlsClientAuth(v string) (tls.ClientAuthType, bool) {
	switch strings.ToLower(v) {
	case "yes":
		return tls.RequireAndVerifyClientCert, true
	case "optional":
		return tls.VerifyClientCertIfGiven, true
	case "no":
		return tls.NoClientCert, true
	}
	return 0, false
}

// errorLine is err as one line of stderr with a single "mvkv: " prefix: the
// engine's errors carry it already, the standard library's do not.
func errorLine(err error) string {
	if msg := err.Error(); strings.HasPrefix(msg, "mvkv: ") {
		return msg
	}
	return "mvkv: " + err.Error()
}

// warnDamage waits for the engine's background check of the heap pages
// (Open runs it when the key index came from the index file, so that
// opening does not wait for a read of the whole heap) and, when it found
// pages of zeros or pages that fail their checksum or header, logs a
// warning that says what it means for clients, as Redis warns at startup,
// besides the engine's own log line; INFO persistence keeps the counts.
// damage is the DB's Damage method. It returns at stop, after the warning
// if the check has ended by then.
func warnDamage(damage func() engine.DamageInfo, log *slog.Logger, stop <-chan struct{}) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for damage().ScanRunning {
		select {
		case <-stop:
			// A check that ended since the last tick (a server shut
			// down right after it) still gets its warning.
			if damage().ScanRunning {
				return
			}
		case <-t.C:
		}
	}
	d := damage()
	if d.ZeroedPages == 0 && d.CorruptPages == 0 {
		return
	}
	var attrs []any
	var what []string
	if d.ZeroedPages > 0 {
		what = append(what, "are zeros")
		attrs = append(attrs, "zeroedPages", d.ZeroedPages, "zeroed", d.Zeroed)
	}
	if d.CorruptPages > 0 {
		what = append(what, "fail their checksum or header")
		attrs = append(attrs, "corruptPages", d.CorruptPages, "corrupt", d.Corrupt)
	}
	log.Error("WARNING the data directory is damaged: heap pages that a checkpoint wrote "+strings.Join(what, " or ")+", "+
		"the keys whose newest version, or a chunk of whose value, was on them are lost and reading them fails with an error naming the page; "+
		"INFO persistence counts them; run mvkv verify on a copy of the directory to list the keys, and see the README's damage section",
		append([]any{"keysLost", d.KeysLost}, attrs...)...)
}

// testOpenFS, set only by tests, gives the file system the data directory
// is opened on, for a test to hold the open until a signal (ctx) came.
var testOpenFS func(ctx context.Context) vfs.FS

// loadingReply is Redis's answer while it loads its dataset; clients such
// as go-redis retry on it.
const loadingReply = "-LOADING mvkv is loading the dataset in memory\r\n"

// answerLoading accepts connections on ln while the database opens and
// answers the first request of each with LOADING, then closes it. The
// returned function stops it and leaves ln ready for the server. Only a
// TCP listener can be interrupted that way; others just queue.
func answerLoading(ln net.Listener) (stop func()) {
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return func() {}
	}
	done := make(chan struct{})
	var conns sync.WaitGroup
	go func() {
		defer close(done)
		for {
			c, err := tl.Accept()
			if err != nil {
				return // the deadline set by stop, or the listener failed (Serve says so)
			}
			conns.Add(1)
			go func() {
				defer conns.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				buf := make([]byte, 4096)
				if n, _ := c.Read(buf); n > 0 {
					c.Write([]byte(loadingReply))
				}
			}()
		}
	}()
	return func() {
		tl.SetDeadline(time.Unix(1, 0))
		<-done
		tl.SetDeadline(time.Time{})
		conns.Wait()
	}
}

// tcpNetwork is "tcp4" for an address whose host is an IPv4 address and
// "tcp6" for an IPv6 one, so that --bind 0.0.0.0 listens on IPv4 alone
// and --bind '::*' on IPv6 alone, as in Redis (Go's "tcp" on either also
// takes the other family's connections), and "tcp" for a host name.
func tcpNetwork(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	ip := net.ParseIP(host)
	switch {
	case err != nil || ip == nil:
		return "tcp"
	case ip.To4() != nil:
		return "tcp4"
	}
	return "tcp6"
}
