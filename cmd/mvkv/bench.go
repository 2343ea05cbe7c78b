package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"mvkv/bench"
	"mvkv/engine"
)

// benchUsage is the help text; its engine options come from the engine's
// table of settings, as mvkv serve's do.
var benchUsage = `mvkv bench is a benchmarking tool for mvkv, after pgbench.

Usage:
  mvkv bench [OPTION]...

Initialization options:
  -i, --initialize         invokes initialization mode (needs --dir, except
                           with a postgres= or resp= target, which it
                           reloads, deleting pgbench's old rows)
  -s, --scale=NUM          scaling factor (default: 1): 100000 accounts,
                           10 tellers and 1 branch per unit
  -F NUM                   --fillfactor (an engine option below). The
                           engine takes it at open, so give it to the runs
                           as well as to -i.

Options to select what to run:
  -b, --builtin=NAME[@W]   add builtin script NAME: tpcb-like (the default),
                           simple-update or select-only, or a prefix of one
                           ("-b list" lists them); one script per run, so
                           the weight W is accepted and changes nothing
  -N, --skip-some-updates  skip updates of tellers and branches
                           (builtin "simple update")
  -S, --select-only        perform SELECT-only transactions
                           (builtin "select only")
  -M, --protocol=simple    query mode: simple, the only one (accepted so
                           that pgbench command lines run unchanged)
  -n, --no-vacuum          accepted and changes nothing: no run vacuums or
                           truncates history first (pgbench without -n does)

Benchmarking options:
  -c, --client=NUM         number of concurrent database clients (default: 1)
  -j, --jobs=NUM           number of threads (default: 1)
  -P, --progress=NUM       show thread progress report every NUM seconds
  -s, --scale=NUM          scale to load into an empty directory; a loaded
                           directory's scale is counted from its branches
  -t, --transactions=NUM   number of transactions each client runs (default: 10)
  -T, --time=NUM           duration of benchmark test in seconds
  --random-seed=NUM        seed the random generators (default: the clock)
  --max-tries=NUM          max number of tries to run a transaction that
                           fails with a serialization failure or deadlock
                           (or, over RESP, an aborted EXEC) (default: 1);
                           0, unlimited, only with -T

Target options:
  --target=engine|pebble|postgres=URL
                           store to benchmark (default: engine); URL is a
                           PostgreSQL connection URL, e.g.
                           postgres://user@/db?host=/tmp, where -i creates
                           and loads pgbench's tables (dropping old ones)
  --target=resp=ADDR       a RESP server such as mvkv serve, e.g.
                           resp=127.0.0.1:7379 (balances as integers, the
                           transaction as MULTI/INCRBY/EXEC); a server
                           holding no pgbench rows is loaded first
  --resp-mode=multi|watch  RESP: MULTI/EXEC blocks (default), or WATCH, GET,
                           MULTI/SET/EXEC with aborted EXECs counted as failed
  --resp-password=PASS     RESP: AUTH with PASS on every connection, for a
                           server with requirepass (default: the
                           REDISCLI_AUTH environment variable, as redis-cli)
  --dir=DIR                data directory (default: a temporary directory,
                           removed afterwards); loaded first if empty
  --fsync-latency=DURATION simulated disk: every sync takes DURATION, e.g.
                           4ms (engine and pebble)
  --disk-rotation=NUM      simulated disk turning NUM times a second: a sync
                           ends at the next rotation boundary (engine and
                           pebble; 250 is a 15k rpm drive)
  --cpuprofile=FILE        write a CPU profile of the run to FILE

Engine options (the engine target's, except --synchronous-commit, which
every target takes, --commit-delay and --commit-siblings, which postgres=
takes too, and --shared-buffers, pebble's block cache too):
` + engineUsage() + `
Sweep options:
  --sweep=NAME=V1,V2,...   run every value of a knob; repeat the option to
                           run the cross product. Knobs: clients,
                           commit_delay, commit_siblings, wal_flusher,
                           synchronous_commit, early_lock_release, target,
                           fsync_latency, disk_rotation, vm or
                           visibility_map (crash-safe,unlogged),
                           clog_locking, clog_group_update, clog (global,
                           bank, global+group, bank+group: the two CLOG
                           options above together). Prints one table (tps,
                           calc = clients x sync rate of the disk model,
                           ratio, WAL syncs/s, commits/sync) instead of
                           the report; data is loaded once per target and
                           reused. target takes engine, pebble,
                           postgres=URL and resp=ADDR; a knob a target has
                           no use for (wal_flusher off the engine, anything
                           but clients on a RESP server, which keeps its
                           own settings) runs once for it
  --repeat=NUM             run each cell NUM times; the table shows mean
                           and standard deviation (default: 1), and for a
                           swept knob with two values, whether their
                           difference exceeds the run-to-run variation
  --plot=FILE.png|FILE.svg draw tps against clients per series, with the
                           optimum line when a disk model is set
  --pivot                  with a sweep of clients: also print tps as one
                           table with a row per value of the other knobs
                           and a column per client count
  --fresh                  with --sweep or --repeat: run every run on a fresh
                           copy of the loaded data (engine and pebble; the
                           copy is a new directory DIR.fresh-* beside the
                           data directory, removed after the run), so that
                           no run inherits the history rows, bloat and WAL
                           of the runs before it

Common options:
  -h, -?, --help           show this help, then exit

pgbench's other options (custom scripts with -f, several scripts, -r, -l,
-R, -L, -C, -D, the connection options) are refused with a message saying
so.
`

// benchMain is `mvkv bench`. Exit status: 0 on success, 1 on an error or a
// violated invariant, 2 on an aborted run (as pgbench) or a usage error
// (as every mvkv command and Go's flag package; pgbench says 1 there),
// 128 plus the signal's number when SIGINT (130) or SIGTERM (143)
// interrupted the load, run or sweep, as a shell reports a command killed
// by the signal.
func benchMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mvkv bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	// The flag package prints the error itself; -h prints the full usage
	// once, to stdout, below.
	fs.Usage = func() {}

	var (
		init, simple, selectOnly   bool
		scale, clients, jobs, txns int
		seconds, progress          int
		target, dir                string
		cpuprofile, plotFile       string
		pivot, fresh               bool
		repeat                     int
		fsyncLatency               time.Duration
		diskRotation               float64
		sweeps                     []bench.Axis
		seed                       uint64
		eopts                      engine.Options
	)
	boolVar := func(p *bool, short, long string) {
		fs.BoolVar(p, short, false, "")
		fs.BoolVar(p, long, false, "")
	}
	intVar := func(p *int, short, long string, def int) {
		intFlag(fs, p, short, def)
		intFlag(fs, p, long, def)
	}
	boolVar(&init, "i", "initialize")
	// pgbench's -b, for one of its builtin scripts: the runs do not mix
	// scripts.
	var builtins []bench.Workload
	var listBuiltins bool
	builtin := func(v string) error {
		if v == "list" {
			listBuiltins = true
			return nil
		}
		w, err := parseBuiltin(v)
		if err != nil {
			return err
		}
		builtins = append(builtins, w)
		return nil
	}
	fs.Func("b", "", builtin)
	fs.Func("builtin", "", builtin)
	boolVar(&simple, "N", "skip-some-updates")
	boolVar(&selectOnly, "S", "select-only")
	// pgbench's -n and -M, so that a pgbench command line runs unchanged:
	// no run vacuums or truncates anything first, and every target is
	// driven as pgbench's simple query mode is.
	var noVacuum bool
	boolVar(&noVacuum, "n", "no-vacuum")
	var protocol string
	fs.StringVar(&protocol, "M", "simple", "")
	fs.StringVar(&protocol, "protocol", "simple", "")
	intVar(&scale, "s", "scale", 1)
	intVar(&clients, "c", "client", 1)
	intVar(&jobs, "j", "jobs", 1)
	intVar(&txns, "t", "transactions", 10)
	intVar(&seconds, "T", "time", 0)
	intVar(&progress, "P", "progress", 0)
	fs.StringVar(&target, "target", "engine", "")
	var respMode, respPassword string
	fs.StringVar(&respMode, "resp-mode", "multi", "")
	fs.StringVar(&respPassword, "resp-password", os.Getenv("REDISCLI_AUTH"), "")
	fs.StringVar(&dir, "dir", "", "")
	engineFlags(fs, &eopts)
	fillfactor, _ := engine.LookupSetting("fillfactor")
	fs.Func("F", "", func(v string) error { return setFlag(fillfactor, &eopts, v) })
	fs.DurationVar(&fsyncLatency, "fsync-latency", 0, "")
	fs.Float64Var(&diskRotation, "disk-rotation", 0, "")
	fs.Func("sweep", "", func(s string) error {
		a, err := bench.ParseAxis(s)
		if err != nil {
			// The flag package prints it after its own prefix.
			return errors.New(errText(err))
		}
		for _, b := range sweeps {
			if b.Name == a.Name {
				return fmt.Errorf("%s is swept twice; give all its values to one --sweep, as %s=V1,V2", a.Name, a.Name)
			}
		}
		sweeps = append(sweeps, a)
		return nil
	})
	intFlag(fs, &repeat, "repeat", 1)
	fs.StringVar(&plotFile, "plot", "", "")
	fs.BoolVar(&pivot, "pivot", false, "")
	fs.BoolVar(&fresh, "fresh", false, "")
	fs.StringVar(&cpuprofile, "cpuprofile", "", "")
	uint64Flag(fs, &seed, "random-seed", 0)
	maxTries := 1
	intFlag(fs, &maxTries, "max-tries", 1)

	if err := fs.Parse(args); err != nil {
		// -? is pgbench's help option, as -h and --help are here.
		if errors.Is(err, flag.ErrHelp) || err.Error() == "flag provided but not defined: -?" {
			fmt.Fprint(stdout, benchUsage)
			return 0
		}
		if msg := unsupportedPgbenchOption(err); msg != "" {
			fmt.Fprintf(stderr, "mvkv bench: %s\n%s", msg, tryHelp("bench"))
			return 2
		}
		fmt.Fprintf(stderr, "mvkv bench: %s\n%s", flagError(fs, err), tryHelp("bench"))
		return 2
	}
	if listBuiltins {
		// As pgbench -b list: to stderr, exit 0.
		fmt.Fprint(stderr, builtinList())
		return 0
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "mvkv bench: "+format+"\n", a...)
		fmt.Fprint(stderr, tryHelp("bench"))
		return 2
	}
	if fs.NArg() > 0 {
		return fail("too many command-line arguments (first is %q)", fs.Arg(0))
	}
	if (set["t"] || set["transactions"]) && (set["T"] || set["time"]) {
		return fail("specify either a number of transactions (-t) or a duration (-T), not both")
	}
	if simple && selectOnly {
		return fail("-N and -S are mutually exclusive")
	}
	if len(builtins) > 1 || (len(builtins) > 0 && (simple || selectOnly)) {
		return fail("one script per run: -b, -N and -S each choose one, and mvkv bench does not mix scripts")
	}
	if len(builtins) == 1 {
		simple = builtins[0] == bench.SimpleUpdate
		selectOnly = builtins[0] == bench.SelectOnly
	}
	if protocol != "simple" {
		return fail("invalid query mode (-M) %q: only simple (the postgres= target sends pgbench's SQL text in the simple protocol; the others run no SQL)", protocol)
	}
	switch {
	case scale < 1 || scale > bench.MaxScale:
		return fail("invalid scaling factor: %d (1 to %d)", scale, bench.MaxScale)
	case clients < 1 || clients > bench.MaxClients:
		return fail("invalid number of clients: %d (1 to %d)", clients, bench.MaxClients)
	case jobs < 1:
		return fail("invalid number of threads: %d", jobs)
	case txns < 1 || txns > math.MaxInt32:
		// pgbench's bound; it also keeps the report's total, -t times
		// -c, from overflowing.
		return fail("invalid number of transactions: %d (1 to %d per client)", txns, math.MaxInt32)
	case seconds < 0 || (seconds == 0 && (set["T"] || set["time"])) || seconds > maxSeconds:
		return fail("invalid duration: %d", seconds)
	case progress < 0 || (progress == 0 && (set["P"] || set["progress"])) || progress > maxSeconds:
		return fail("invalid thread progress delay: %d", progress)
	case fsyncLatency < 0 || fsyncLatency > maxFsyncLatency:
		return fail("invalid --fsync-latency: %v (0..%v)", fsyncLatency, maxFsyncLatency)
	case math.IsNaN(diskRotation) || diskRotation < 0 || (diskRotation > 0 && diskRotation < 1) || diskRotation > 1e6:
		return fail("invalid --disk-rotation: %v (0, or 1..1000000 rotations a second)", diskRotation)
	case repeat < 1:
		return fail("invalid --repeat: %d", repeat)
	case maxTries < 0:
		return fail("invalid number of maximum tries: %d", maxTries)
	case maxTries == 0 && seconds == 0:
		// pgbench 15 says the same of its own, with --latency-limit.
		return fail("an unlimited number of transaction tries (--max-tries 0) can only be used with a duration (-T)")
	}
	if maxTries == 0 {
		maxTries = math.MaxInt // unlimited: the duration ends the retries
	}
	// The settings were checked one by one as they were parsed; this
	// checks them together (max_wal_size against the segment size).
	eopts = withDiskSegmentSize(eopts, dir)
	if err := eopts.Validate(); err != nil {
		return fail("%s", errText(err))
	}
	if (set["F"] || set["fillfactor"]) && target != "engine" {
		return fail("--fillfactor applies to the engine target only (PostgreSQL's pgbench takes -F itself)")
	}
	// Checked here too, not only when a RESP target opens, so that a
	// mistyped mode is not silently ignored on other targets.
	if respMode != bench.RESPModeMulti && respMode != bench.RESPModeWatch {
		return fail("invalid --resp-mode %q (want multi or watch)", respMode)
	}
	if plotFile != "" {
		if err := bench.CheckPlotFile(plotFile); err != nil {
			return fail("invalid --plot: %s", errText(err))
		}
	}
	// A file written over one of the data directory's would damage it.
	for _, f := range []struct{ name, path string }{{"--plot", plotFile}, {"--cpuprofile", cpuprofile}} {
		if f.path != "" && dir != "" && inDir(f.path, dir) {
			return fail("%s %s is in the data directory %s: give a file outside it", f.name, f.path, dir)
		}
	}
	// As pgbench, more threads than clients is not an error: bench.Run
	// takes one thread per client at most (-j 8 -c 2 runs 2 threads), and
	// a sweep over clients as many as each cell's clients allow.
	if init {
		// As pgbench: -i loads and exits, so an option of the run would
		// be ignored without a word.
		for _, f := range []string{"c", "client", "j", "jobs", "t", "transactions", "T", "time", "P", "progress",
			"N", "skip-some-updates", "S", "select-only", "b", "builtin", "M", "protocol", "max-tries"} {
			if set[f] {
				dash := "--"
				if len(f) == 1 {
					dash = "-"
				}
				return fail("%s%s cannot be used in initialization (-i) mode: -i loads and exits; run again without -i", dash, f)
			}
		}
	}
	if init && (len(sweeps) > 0 || repeat > 1 || plotFile != "" || pivot) {
		return fail("-i cannot be combined with --sweep, --repeat, --plot or --pivot")
	}
	if pivot && !slices.ContainsFunc(sweeps, func(a bench.Axis) bool { return a.Name == "clients" }) {
		// Its columns are the client counts: without them it would
		// print nothing.
		return fail("--pivot needs a sweep of clients (--sweep clients=N1,N2,...): its columns are the client counts")
	}
	if fresh && len(sweeps) == 0 && repeat < 2 {
		return fail("--fresh needs --sweep or --repeat")
	}
	if init && fresh {
		return fail("-i cannot be combined with --fresh")
	}
	// A swept knob's own option would be overridden by the sweep without
	// a word; two disk models, one replacing the other likewise.
	for _, a := range sweeps {
		if f := sweptFlag(a.Name, set); f != "" {
			dash := "--"
			if len(f) == 1 {
				dash = "-"
			}
			return fail("%s%s and --sweep %s=... both set %s; give its values to the sweep only", dash, f, a.Name, a.Name)
		}
	}
	if fsyncLatency > 0 && diskRotation > 0 {
		return fail("--fsync-latency and --disk-rotation are two disk models; give one")
	}
	// --resp-mode and --resp-password apply to a resp=ADDR target, given
	// by --target or among a sweep's targets.
	resp := strings.HasPrefix(target, "resp=")
	for _, a := range sweeps {
		if a.Name == "target" && slices.ContainsFunc(a.Values, func(v string) bool { return strings.HasPrefix(v, "resp=") }) {
			resp = true
		}
	}
	if set["resp-password"] && !resp {
		return fail("--resp-password applies to a resp=ADDR target only")
	}
	if set["resp-mode"] && !resp {
		return fail("--resp-mode applies to a resp=ADDR target only")
	}
	if init && dir == "" && !strings.HasPrefix(target, "postgres=") && !strings.HasPrefix(target, "resp=") {
		return fail("-i needs --dir: a temporary directory would be removed right away")
	}

	eff := eopts
	eff.EnsureDefaults()
	workload := bench.TPCB
	switch {
	case simple:
		workload = bench.SimpleUpdate
	case selectOnly:
		workload = bench.SelectOnly
	}
	cfg := bench.Config{
		Target: target,
		Dir:    dir,
		Options: bench.TargetOptions{
			// The knobs other targets share, as the engine reads them.
			SynchronousCommit: eff.SynchronousCommit == engine.SyncCommitOn,
			CommitDelay:       eff.CommitDelay,
			CommitSiblings:    max(eff.CommitSiblings, 0),
			SharedBuffers:     eff.SharedBuffers,
			Engine:            eopts,
			RESPMode:          respMode,
			RESPPassword:      respPassword,
			Disk:              bench.DiskModel{FsyncLatency: fsyncLatency, RotationsPerSec: diskRotation},
		},
		Initialize:   init,
		Scale:        scale,
		ScaleSet:     set["s"] || set["scale"],
		Workload:     workload,
		Clients:      clients,
		Threads:      jobs,
		Transactions: txns,
		Duration:     time.Duration(seconds) * time.Second,
		Progress:     time.Duration(progress) * time.Second,
		Seed:         seed,
		MaxTries:     maxTries,
		Sweep:        sweeps,
		Repeat:       repeat,
		Plot:         plotFile,
		Pivot:        pivot,
		Fresh:        fresh,
	}
	if cfg.Dir == "" {
		tmp, err := os.MkdirTemp("", "mvkv-bench-")
		if err != nil {
			fmt.Fprintf(stderr, "mvkv bench: %v\n", err)
			return 1
		}
		defer os.RemoveAll(tmp)
		cfg.Dir = tmp
	}
	if cpuprofile != "" {
		stop, err := startCPUProfile(cpuprofile)
		if err != nil {
			fmt.Fprintf(stderr, "mvkv bench: %v\n", err)
			return 1
		}
		defer stop()
	}

	ctx, stop := signalContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return benchStatus(ctx, bench.Main(ctx, cfg, stdout, stderr), stderr)
}

// benchStatus prints bench.Main's error, if any, and returns the exit
// status for it (see benchMain). ctx is the one Main ran with; its cause
// names the signal that interrupted the run.
func benchStatus(ctx context.Context, err error, stderr io.Writer) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, bench.ErrBadSweep) || errors.Is(err, bench.ErrBadPlot) || errors.Is(err, bench.ErrUnknownTarget):
		fmt.Fprintf(stderr, "mvkv bench: %s\n", errText(err))
		fmt.Fprint(stderr, tryHelp("bench"))
		return 2
	case errors.Is(err, bench.ErrAborted):
		fmt.Fprintf(stderr, "mvkv bench: fatal: Run was aborted; the above results are incomplete.\n")
		return 2
	case errors.Is(err, bench.ErrInterrupted):
		// Main returns ErrInterrupted itself after the report (or a
		// sweep's table of the runs made), and wraps the error the load
		// or the reads before the run ended on when there is none.
		what := "the above results are incomplete"
		if err != bench.ErrInterrupted {
			what = "no results: the load or the reads before the run did not finish"
		}
		var sig signalCause
		if errors.As(context.Cause(ctx), &sig) {
			n, ok := sig.sig.(syscall.Signal)
			if !ok {
				fmt.Fprintf(stderr, "mvkv bench: interrupted (%v); %s\n", sig.sig, what)
				return 1
			}
			fmt.Fprintf(stderr, "mvkv bench: interrupted (signal %d, %v); %s\n", int(n), n, what)
			return 128 + int(n)
		}
		fmt.Fprintf(stderr, "mvkv bench: %s\n", errText(err))
		return 1
	default:
		fmt.Fprintf(stderr, "mvkv bench: %s\n", errText(err))
		return 1
	}
}

// errText is err's message without the package prefix ("bench: ",
// "mvkv: ") that the sentinels of the packages start with, for a line
// that starts with the command's own prefix: "mvkv bench: bad sweep: ...",
// not "mvkv bench: bench: bad sweep: ...". The error itself is unchanged,
// so errors.Is still matches it.
func errText(err error) string {
	msg := err.Error()
	for _, p := range []string{"bench: ", "mvkv: "} {
		if m, ok := strings.CutPrefix(msg, p); ok {
			return m
		}
	}
	return msg
}

// signalCause is the cause of a context that signalContext ended.
type signalCause struct{ sig os.Signal }

func (s signalCause) Error() string { return "received " + s.sig.String() }

// signalContext is signal.NotifyContext that also records which signal
// ended the context, as its cause (context.Cause gives a signalCause), so
// that the exit status can name it: NotifyContext's cause is only a
// message. The first signal only ends the context: the signals are then
// unregistered, so that a second one kills the process, as a second
// Ctrl-C should while the report and the checks after an interrupted
// run read the whole store. stop unregisters the signals and releases the
// context.
func signalContext(parent context.Context, sigs ...os.Signal) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sigs...)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-ch:
			signal.Stop(ch)
			cancel(signalCause{s})
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(done)
		cancel(context.Canceled)
	}
}

// startCPUProfile starts a CPU profile written to path; stop ends it and
// closes the file.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// maxFsyncLatency bounds --fsync-latency: a model is for experiments, and a
// sync of hours would only hang the run (Open syncs too).
const maxFsyncLatency = 10 * time.Second

// maxSeconds is the longest -T or -P a time.Duration holds (about 292
// years); a longer one would wrap to a negative duration.
const maxSeconds = int(math.MaxInt64 / int64(time.Second))

// sweptFlag returns the option among set (the options given, by name)
// that sets the knob a sweep axis named axis sweeps, or "".
func sweptFlag(axis string, set map[string]bool) string {
	names := map[string][]string{
		"clients": {"c", "client"}, "target": {"target"},
		"fsync_latency": {"fsync-latency"}, "disk_rotation": {"disk-rotation"},
		"vm": {"visibility-map"}, "clog": {"clog-locking", "clog-group-update"},
	}[axis]
	if names == nil {
		names = []string{strings.ReplaceAll(axis, "_", "-")}
		if s, ok := engine.LookupSetting(axis); ok {
			names = []string{flagName(s)}
			for _, a := range s.Aliases {
				names = append(names, strings.ReplaceAll(a, "_", "-"))
			}
		}
	}
	for _, n := range names {
		if set[n] {
			return n
		}
	}
	return ""
}

// builtinScripts are pgbench's builtin scripts, in pgbench's order.
var builtinScripts = []bench.Workload{bench.TPCB, bench.SimpleUpdate, bench.SelectOnly}

// parseBuiltin parses -b's NAME[@WEIGHT] as pgbench does: NAME is a
// script's name or a prefix of only one, and WEIGHT an integer from 0 to
// 2147483647 (a single script's weight changes nothing, but 0 leaves no
// script to run).
func parseBuiltin(v string) (bench.Workload, error) {
	name, weight, hasWeight := strings.Cut(v, "@")
	if hasWeight {
		w, err := strconv.ParseInt(weight, 10, 64)
		switch {
		case err != nil && !errors.Is(err, strconv.ErrRange):
			return 0, fmt.Errorf("invalid weight specification: %s", v)
		case err != nil || w < 0 || w > math.MaxInt32:
			return 0, fmt.Errorf("weight specification out of range (0 .. %d): %s", math.MaxInt32, weight)
		case w == 0:
			return 0, errors.New("total script weight must not be zero")
		}
	}
	var found []bench.Workload
	for _, w := range builtinScripts {
		if strings.HasPrefix(w.Builtin(), name) {
			found = append(found, w)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return 0, fmt.Errorf("no builtin script found for name %q (-b list lists them)", name)
	}
	return 0, fmt.Errorf("ambiguous builtin name: %d builtin scripts found for prefix %q (-b list lists them)", len(found), name)
}

// builtinList is pgbench -b list's output.
func builtinList() string {
	var b strings.Builder
	b.WriteString("Available builtin scripts:\n")
	for _, w := range builtinScripts {
		fmt.Fprintf(&b, "  %13s: %s\n", w.Builtin(), w)
	}
	b.WriteString("\n")
	return b.String()
}

// pgbenchOptions are pgbench options mvkv bench does not take, each with
// its names as the flag package reports them (without dashes) and why.
var pgbenchOptions = []struct {
	names []string
	why   string
}{
	{[]string{"f", "file"}, "custom scripts are not supported: mvkv bench runs pgbench's builtin scripts (-b, -N, -S)"},
	{[]string{"r", "report-per-command", "report-latencies"}, "per-statement latencies are not reported: the builtin transaction is timed as a whole"},
	{[]string{"l", "log", "log-prefix", "aggregate-interval", "sampling-rate"}, "transaction logs are not written; -P prints progress lines"},
	{[]string{"C", "connect"}, "every client keeps one connection for the whole run"},
	{[]string{"R", "rate"}, "rate limiting is not supported: every client runs as fast as it can"},
	{[]string{"L", "latency-limit"}, "latency limits are not supported"},
	{[]string{"D", "define"}, "variables are for custom scripts, which are not supported"},
	{[]string{"I", "init-steps"}, "the load has no steps to choose"},
	{[]string{"q", "quiet"}, "the load prints a progress line per 100,000 rows"},
	{[]string{"foreign-keys", "unlogged-tables", "partitions", "partition-method", "tablespace", "index-tablespace"}, "the load has no table options"},
	{[]string{"d", "debug"}, "there is no debug output"},
	{[]string{"U", "username", "p", "port", "host"}, "connection options are not supported; give --target=postgres=URL or --target=resp=ADDR"},
	{[]string{"V", "version"}, "mvkv version prints the version"},
	{[]string{"show-script"}, "the builtin scripts run no SQL except on the postgres= target"},
	{[]string{"progress-timestamp"}, "progress lines count seconds from the start of the run"},
	{[]string{"failures-detailed", "verbose-errors"}, "failures are counted together"},
}

// unsupportedPgbenchOption returns the message for a flag parsing error
// on an option pgbench has and mvkv bench does not, or "".
func unsupportedPgbenchOption(err error) string {
	name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -")
	if !ok {
		return ""
	}
	for _, o := range pgbenchOptions {
		if slices.Contains(o.names, name) {
			dash := "--"
			if len(name) == 1 {
				dash = "-"
			}
			return fmt.Sprintf("%s%s is a pgbench option mvkv bench does not take: %s", dash, name, o.why)
		}
	}
	return ""
}

// inDir reports whether path names dir or a file under it, after making
// both absolute and resolving the symbolic links of what exists of them.
func inDir(path, dir string) bool {
	resolve := func(p string) string {
		p, err := filepath.Abs(p)
		if err != nil {
			return p
		}
		// The file may not exist yet: resolve its directory.
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return r
		}
		if r, err := filepath.EvalSymlinks(filepath.Dir(p)); err == nil {
			return filepath.Join(r, filepath.Base(p))
		}
		return p
	}
	rel, err := filepath.Rel(resolve(dir), resolve(path))
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
