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
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"mvkv/bench"
)

const benchUsage = `mvkv bench is a benchmarking tool for mvkv, after pgbench.

Usage:
  mvkv bench [OPTION]...

Initialization options:
  -i, --initialize         invokes initialization mode (needs --dir, except
                           with a postgres= or resp= target, which it
                           reloads, deleting pgbench's old rows)
  -s, --scale=NUM          scaling factor (default: 1): 100000 accounts,
                           10 tellers and 1 branch per unit
  -F, --fillfactor=NUM     engine's fillfactor, 10 to 100 percent: new keys
                           leave the rest of a page free for their updates
                           (default: 100). The engine takes it at open, so
                           give it to the runs as well as to -i.

Options to select what to run:
  -N, --skip-some-updates  skip updates of tellers and branches
                           (builtin "simple update")
  -S, --select-only        perform SELECT-only transactions
                           (builtin "select only")

Benchmarking options:
  -c, --client=NUM         number of concurrent database clients (default: 1)
  -j, --jobs=NUM           number of threads (default: 1)
  -P, --progress=NUM       show thread progress report every NUM seconds
  -s, --scale=NUM          scale to load into an empty directory; a loaded
                           directory's scale is counted from its branches
  -t, --transactions=NUM   number of transactions each client runs (default: 10)
  -T, --time=NUM           duration of benchmark test in seconds
  --random-seed=NUM        seed the random generators (default: the clock)

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
  --dir=DIR                data directory (default: a temporary directory,
                           removed afterwards); loaded first if empty
  --synchronous-commit=on|off
                           wait for the WAL sync at commit (default: on)
  --commit-delay=NUM|auto  commit_delay in microseconds, or auto for the
                           engine's adaptive delay (default: 0)
  --commit-siblings=NUM    commit_siblings (default: 5)
  --wal-flusher=serial|pipelined|none
                           engine's group-commit flusher (default:
                           pipelined, the engine's)
  --visibility-map=crash-safe|unlogged
                           engine's visibility map: WAL-logged bits
                           (default) or unlogged ones as before PostgreSQL
                           9.2 (unsafe after a crash; for comparison only)
  --fsync-latency=DURATION simulated disk: every sync takes DURATION, e.g.
                           4ms (engine and pebble)
  --disk-rotation=NUM      simulated disk turning NUM times a second: a sync
                           ends at the next rotation boundary (engine and
                           pebble; 250 is a 15k rpm drive)
  --shared-buffers=SIZE    buffer pool (engine) or block cache (pebble), e.g.
                           128MB; units B, kB, MB, GB, TB; a bare number counts
                           8kB pages, as PostgreSQL (default: 128MB)
  --clog-locking=global|bank
                           engine's CLOG locking: one lock for all buffers
                           (as before PostgreSQL 17) or one per bank of 16
                           (default: bank)
  --clog-group-update=on|off
                           engine's CLOG group update of commit statuses
                           (default: on)
  --early-lock-release=on|off
                           engine's commit order: on releases a synchronous
                           commit's row locks once its record is in the WAL
                           (readers of it wait for its flush before they
                           commit); off is PostgreSQL's, once it is durable
                           (default: on)
  --autovacuum=on|off      engine's autovacuum (default: on)
  --autovacuum-naptime=SECONDS|DURATION
                           engine's autovacuum_naptime: how often autovacuum
                           checks the dead-tuple count, seconds or a
                           duration such as 10s, 1s to 2147483s (default:
                           1m, as PostgreSQL)
  --autovacuum-vacuum-threshold=NUM
                           engine's autovacuum_vacuum_threshold (default: 50)
  --autovacuum-vacuum-scale-factor=NUM
                           engine's autovacuum_vacuum_scale_factor, a
                           fraction of the keys; 0: the threshold alone
                           (default: 0.2)
  --vacuum-freeze-min-age=NUM
                           engine's vacuum_freeze_min_age in transactions,
                           0 to 1000000000; 0 freezes every tuple vacuum
                           can (default: 50000000, as PostgreSQL)
  --vacuum-freeze-table-age=NUM
                           engine's vacuum_freeze_table_age in
                           transactions, 0 to 2000000000; 0 makes every
                           vacuum aggressive (default: 150000000)
  --cpuprofile=FILE        write a CPU profile of the run to FILE

Sweep options:
  --sweep=NAME=V1,V2,...   run every value of a knob; repeat the option to
                           run the cross product. Knobs: clients,
                           commit_delay, commit_siblings, wal_flusher,
                           synchronous_commit, early_lock_release, target,
                           fsync_latency, disk_rotation, vm
                           (crash-safe,unlogged), clog
                           (global, bank, global+group, bank+group: the two
                           CLOG options above together). Prints one table (tps, calc =
                           clients x sync rate of the disk model, ratio,
                           WAL syncs/s, commits/sync) instead of the report;
                           data is loaded once per target and reused
  --repeat=NUM             run each cell NUM times; the table shows mean
                           and standard deviation (default: 1), and for a
                           swept knob with two values, whether their
                           difference exceeds the run-to-run variation
  --plot=FILE.png|FILE.svg draw tps against clients per series, with the
                           optimum line when a disk model is set
  --pivot                  also print tps as one table with a row per value
                           of the other knobs and a column per client count
  --fresh                  with --sweep or --repeat: run every run on a fresh
                           copy of the loaded data (engine and pebble; the
                           copy is a new directory DIR.fresh-* beside the
                           data directory, removed after the run), so that
                           no run inherits the history rows, bloat and WAL
                           of the runs before it

Common options:
  -h, --help               show this help, then exit
`

// benchMain is `mvkv bench`. Exit status: 0 on success, 1 on an error or a
// violated invariant, 2 on a usage error or an aborted run (as pgbench),
// 128 plus the signal's number when SIGINT (130) or SIGTERM (143)
// interrupted the load, run or sweep, as a shell reports a command killed
// by the signal.
func benchMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mvkv bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	// The flag package prints the error itself; -h prints the full usage
	// once, to stdout, below.
	fs.Usage = func() {}

	var (
		init, simple, selectOnly        bool
		scale, clients, jobs, txns      int
		seconds, progress               int
		target, dir, syncCommit, shared string
		cpuprofile, commitDelayArg      string
		walFlusher, plotFile            string
		visibilityMap                   string
		clogLocking, clogGroup          string
		autovacuum                      string
		autovacuumNaptime               string
		avThreshold                     int
		freezeMinAge, freezeTableAge    int64
		avScaleFactor                   float64
		pivot, fresh                    bool
		commitSiblings, repeat          int
		fsyncLatency                    time.Duration
		diskRotation                    float64
		sweeps                          []bench.Axis
		seed                            uint64
	)
	boolVar := func(p *bool, short, long string) {
		fs.BoolVar(p, short, false, "")
		fs.BoolVar(p, long, false, "")
	}
	intVar := func(p *int, short, long string, def int) {
		fs.IntVar(p, short, def, "")
		fs.IntVar(p, long, def, "")
	}
	boolVar(&init, "i", "initialize")
	boolVar(&simple, "N", "skip-some-updates")
	boolVar(&selectOnly, "S", "select-only")
	intVar(&scale, "s", "scale", 1)
	var fillFactor int
	intVar(&fillFactor, "F", "fillfactor", 100)
	intVar(&clients, "c", "client", 1)
	intVar(&jobs, "j", "jobs", 1)
	intVar(&txns, "t", "transactions", 10)
	intVar(&seconds, "T", "time", 0)
	intVar(&progress, "P", "progress", 0)
	fs.StringVar(&target, "target", "engine", "")
	var respMode string
	fs.StringVar(&respMode, "resp-mode", "multi", "")
	fs.StringVar(&dir, "dir", "", "")
	fs.StringVar(&syncCommit, "synchronous-commit", "on", "")
	fs.StringVar(&commitDelayArg, "commit-delay", "0", "")
	fs.StringVar(&walFlusher, "wal-flusher", "", "")
	fs.StringVar(&visibilityMap, "visibility-map", "", "")
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
	fs.IntVar(&repeat, "repeat", 1, "")
	fs.StringVar(&plotFile, "plot", "", "")
	fs.BoolVar(&pivot, "pivot", false, "")
	fs.BoolVar(&fresh, "fresh", false, "")
	fs.StringVar(&clogLocking, "clog-locking", "bank", "")
	fs.StringVar(&clogGroup, "clog-group-update", "on", "")
	var earlyLockRelease string
	fs.StringVar(&earlyLockRelease, "early-lock-release", "on", "")
	fs.StringVar(&autovacuum, "autovacuum", "on", "")
	fs.StringVar(&autovacuumNaptime, "autovacuum-naptime", "", "")
	fs.IntVar(&avThreshold, "autovacuum-vacuum-threshold", 0, "")
	fs.Float64Var(&avScaleFactor, "autovacuum-vacuum-scale-factor", 0, "")
	fs.Int64Var(&freezeMinAge, "vacuum-freeze-min-age", 50_000_000, "")
	fs.Int64Var(&freezeTableAge, "vacuum-freeze-table-age", 150_000_000, "")
	fs.IntVar(&commitSiblings, "commit-siblings", 5, "")
	fs.StringVar(&shared, "shared-buffers", "128MB", "")
	fs.StringVar(&cpuprofile, "cpuprofile", "", "")
	fs.Uint64Var(&seed, "random-seed", 0, "")

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, benchUsage)
			return 0
		}
		fmt.Fprintf(stderr, "Try \"mvkv bench --help\" for more information.\n")
		return 2
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "mvkv bench: "+format+"\n", a...)
		fmt.Fprintf(stderr, "Try \"mvkv bench --help\" for more information.\n")
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
	switch {
	case scale < 1 || scale > bench.MaxScale:
		return fail("invalid scaling factor: %d (1 to %d)", scale, bench.MaxScale)
	case clients < 1 || clients > bench.MaxClients:
		return fail("invalid number of clients: %d (1 to %d)", clients, bench.MaxClients)
	case jobs < 1:
		return fail("invalid number of threads: %d", jobs)
	case txns < 1:
		return fail("invalid number of transactions: %d", txns)
	case seconds < 0 || (seconds == 0 && (set["T"] || set["time"])) || seconds > maxSeconds:
		return fail("invalid duration: %d", seconds)
	case progress < 0 || (progress == 0 && (set["P"] || set["progress"])) || progress > maxSeconds:
		return fail("invalid thread progress delay: %d", progress)
	case commitSiblings < 0 || commitSiblings > 1000:
		return fail("invalid commit siblings: %d (0..1000)", commitSiblings)
	case fsyncLatency < 0 || fsyncLatency > maxFsyncLatency:
		return fail("invalid --fsync-latency: %v (0..%v)", fsyncLatency, maxFsyncLatency)
	case math.IsNaN(diskRotation) || diskRotation < 0 || (diskRotation > 0 && diskRotation < 1) || diskRotation > 1e6:
		return fail("invalid --disk-rotation: %v (0, or 1..1000000 rotations a second)", diskRotation)
	case repeat < 1:
		return fail("invalid --repeat: %d", repeat)
	}
	switch walFlusher {
	case "", "serial", "pipelined", "none":
	default:
		return fail("invalid --wal-flusher %q (want serial, pipelined or none)", walFlusher)
	}
	switch visibilityMap {
	case "", "crash-safe", "unlogged":
	default:
		return fail("invalid --visibility-map %q (want crash-safe or unlogged)", visibilityMap)
	}
	commitDelay, err := bench.ParseCommitDelay(commitDelayArg)
	if err != nil {
		return fail("invalid --commit-delay %q: %s", commitDelayArg, errText(err))
	}
	syncOn, err := bench.ParseOnOff(syncCommit)
	if err != nil {
		return fail("invalid --synchronous-commit %q (want on or off)", syncCommit)
	}
	if clogLocking != "global" && clogLocking != "bank" {
		return fail("invalid --clog-locking %q (want global or bank)", clogLocking)
	}
	groupOn, err := bench.ParseOnOff(clogGroup)
	if err != nil {
		return fail("invalid --clog-group-update %q (want on or off)", clogGroup)
	}
	elrOn, err := bench.ParseOnOff(earlyLockRelease)
	if err != nil {
		return fail("invalid --early-lock-release %q (want on or off)", earlyLockRelease)
	}
	autovacuumOn, err := bench.ParseOnOff(autovacuum)
	if err != nil {
		return fail("invalid --autovacuum %q (want on or off)", autovacuum)
	}
	var naptime time.Duration
	if set["autovacuum-naptime"] {
		d, err := parseNaptime(autovacuumNaptime)
		if err != nil {
			return fail("invalid --autovacuum-naptime %q: %v", autovacuumNaptime, err)
		}
		naptime = d
	}
	// engine.Options takes 0 for the default, so 0 cannot be passed on.
	if set["autovacuum-vacuum-threshold"] && avThreshold < 1 {
		return fail("invalid --autovacuum-vacuum-threshold %d (at least 1; the engine takes 0 for its default)", avThreshold)
	}
	if set["autovacuum-vacuum-scale-factor"] {
		if !(avScaleFactor >= 0 && avScaleFactor <= 100) {
			return fail("invalid --autovacuum-vacuum-scale-factor %v (at least 0, at most 100)", avScaleFactor)
		}
		if avScaleFactor == 0 {
			avScaleFactor = -1 // engine.Options' 0, which 0 itself is not
		}
	}
	engineFreezeMinAge, engineFreezeTableAge, err := freezeAges(freezeMinAge, freezeTableAge)
	if err != nil {
		return fail("%v", err)
	}
	if fillFactor < 10 || fillFactor > 100 {
		return fail("invalid --fillfactor %d (10..100 percent)", fillFactor)
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
	sharedBytes, err := parseSharedBuffers(shared)
	if err != nil {
		return fail("invalid --shared-buffers: %v", err)
	}
	if jobs > clients {
		return fail("number of threads (%d) must not exceed number of clients (%d)", jobs, clients)
	}
	if init && (len(sweeps) > 0 || repeat > 1 || plotFile != "" || pivot) {
		return fail("-i cannot be combined with --sweep, --repeat, --plot or --pivot")
	}
	if pivot && len(sweeps) == 0 {
		return fail("--pivot needs --sweep")
	}
	if fresh && len(sweeps) == 0 && repeat < 2 {
		return fail("--fresh needs --sweep or --repeat")
	}
	if init && fresh {
		return fail("-i cannot be combined with --fresh")
	}
	if init && dir == "" && !strings.HasPrefix(target, "postgres=") && !strings.HasPrefix(target, "resp=") {
		return fail("-i needs --dir: a temporary directory would be removed right away")
	}

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
			SynchronousCommit:     syncOn,
			CommitDelay:           commitDelay,
			CommitSiblings:        commitSiblings,
			SharedBuffers:         sharedBytes,
			WALFlusher:            walFlusher,
			RESPMode:              respMode,
			CLOGLocking:           clogLocking,
			CLOGGroupUpdateOff:    !groupOn,
			EarlyLockReleaseOff:   !elrOn,
			VisibilityMap:         visibilityMap,
			AutovacuumOff:         !autovacuumOn,
			AutovacuumNaptime:     naptime,
			AutovacuumThreshold:   avThreshold,
			AutovacuumScaleFactor: avScaleFactor,
			VacuumFreezeMinAge:    engineFreezeMinAge,
			VacuumFreezeTableAge:  engineFreezeTableAge,
			FillFactor:            fillFactor,
			Disk:                  bench.DiskModel{FsyncLatency: fsyncLatency, RotationsPerSec: diskRotation},
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
		fmt.Fprintf(stderr, "Try \"mvkv bench --help\" for more information.\n")
		return 2
	case errors.Is(err, bench.ErrAborted):
		fmt.Fprintf(stderr, "mvkv bench: fatal: Run was aborted; the above results are incomplete.\n")
		return 2
	case errors.Is(err, bench.ErrInterrupted):
		var sig signalCause
		if errors.As(context.Cause(ctx), &sig) {
			n, ok := sig.sig.(syscall.Signal)
			if !ok {
				fmt.Fprintf(stderr, "mvkv bench: interrupted (%v); the above results are incomplete\n", sig.sig)
				return 1
			}
			fmt.Fprintf(stderr, "mvkv bench: interrupted (signal %d, %v); the above results are incomplete\n", int(n), n)
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
// message. stop unregisters the signals and releases the context.
func signalContext(parent context.Context, sigs ...os.Signal) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sigs...)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-ch:
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

// parseSize reads a PostgreSQL memory setting: a number with a unit B, kB,
// MB, GB or TB (1024-based, as PostgreSQL), or a bare number of 8 kB pages.
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

// parseSharedBuffers parses shared_buffers as parseSize does and refuses
// less than PostgreSQL's minimum of 16 buffers (128kB), 0 included: the
// engine would quietly take its default for 0 and 16 buffers for less.
func parseSharedBuffers(s string) (int64, error) {
	n, err := parseSize(s)
	if err == nil && n < 16*8<<10 {
		err = fmt.Errorf("%q: below the minimum of 16 buffers (128kB)", s)
	}
	return n, err
}

func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q: not a size", s)
	}
	var mult int64
	switch strings.TrimSpace(s[i:]) {
	case "":
		mult = 8 << 10
	case "B":
		mult = 1
	case "kB":
		mult = 1 << 10
	case "MB":
		mult = 1 << 20
	case "GB":
		mult = 1 << 30
	case "TB":
		mult = 1 << 40
	default:
		return 0, fmt.Errorf("%q: unit must be B, kB, MB, GB or TB", s)
	}
	if n > (1<<62)/mult {
		return 0, fmt.Errorf("%q: too large", s)
	}
	return n * mult, nil
}

// maxSeconds is the longest -T or -P a time.Duration holds (about 292
// years); a longer one would wrap to a negative duration.
const maxSeconds = int(math.MaxInt64 / int64(time.Second))
