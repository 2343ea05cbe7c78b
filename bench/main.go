package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"
)

// Errors Main returns after printing its report, so a command can pick its
// exit status.
var (
	// ErrAborted: at least one client stopped on an error that is not a
	// serialization failure or deadlock (pgbench: "Run was aborted").
	ErrAborted = errors.New("bench: run was aborted; the above results are incomplete")
	// ErrInvariantViolated: the post-run balance sums disagree.
	ErrInvariantViolated = errors.New("bench: invariant violated")
	// ErrAlreadyLoaded: -i on a directory that already holds data.
	ErrAlreadyLoaded = errors.New("bench: directory is already initialized")
	// ErrIncompleteLoad: the directory (or the server) holds the branches
	// of a load but not its last account: the load was killed before it
	// finished.
	ErrIncompleteLoad = errors.New("bench: the load did not finish")
	// ErrForeignData: the directory holds keys that are not pgbench's
	// (written by mvkv serve or another program); loading beside them
	// would mix the two, and the invariant check would not hold.
	ErrForeignData = errors.New("bench: directory holds data other than pgbench's")
	// ErrInterrupted: ctx ended (an interrupt) before the load, run or
	// sweep completed. What was measured until then has been written;
	// a command exits non-zero on it, as pgbench killed by SIGINT does.
	ErrInterrupted = errors.New("bench: interrupted; the above results are incomplete")
)

// Config is everything `mvkv bench` takes; see the command's usage for the
// pgbench flag each field mirrors.
type Config struct {
	// Target is a name OpenTarget takes: "engine", "pebble",
	// "postgres=URL" or "resp=ADDR".
	Target string
	// Dir is the data directory of the engine and pebble targets; must
	// be set.
	Dir     string
	Options TargetOptions

	// Initialize loads Scale into an empty Dir and returns (pgbench -i).
	Initialize bool
	// Scale is used to load an empty Dir; a loaded Dir's scale is detected.
	Scale int
	// ScaleSet says Scale was given explicitly, so ignoring it deserves a
	// notice.
	ScaleSet bool
	// Accounts per scale unit; 0 means 100,000. For tests.
	Accounts int

	// The run, as RunConfig's fields of the same names: the script, -c,
	// -j, -t per client, -T, -P, and --random-seed (0: the clock).
	Workload     Workload
	Clients      int
	Threads      int
	Transactions int
	Duration     time.Duration
	Progress     time.Duration
	Seed         uint64
	// MaxTries is --max-tries (RunConfig.MaxTries).
	MaxTries int

	// Sweep lists the knobs to vary (--sweep): every cell of their cross
	// product is run and one table is printed instead of the report.
	Sweep []Axis
	// Repeat runs each cell this many times (--repeat); below 2, once.
	// Repeat > 1 without Sweep is a sweep of one cell.
	Repeat int
	// Plot is a .png or .svg file to draw the sweep's tps into (--plot).
	Plot string
	// Pivot prints, after the sweep's table, its tps again as one table
	// with a row per value of the other knobs and a column per client
	// count (--pivot; WritePivotTable).
	Pivot bool
	// Fresh runs every run of a sweep on its own copy of the loaded data
	// (--fresh): the engine and pebble targets are loaded once as before,
	// then each run copies the directory to a new sibling DIR.fresh-*
	// (os.MkdirTemp, so nothing already there is touched), runs there,
	// checks the balances and removes it. Without it the runs share one directory
	// and each inherits the history rows, dead versions and WAL of the
	// ones before it, which in a long sweep can move tps more than the
	// knob being swept. Server targets cannot be copied and are refused.
	Fresh bool
}

// Main does what one `mvkv bench` invocation does: open the target on
// cfg.Dir, load it if empty (and stop there for Initialize), run, check the
// invariant (after a run that writes: a select-only run has none to check)
// and write the report to out. Load messages, notices and progress
// lines go to log. After a complete report it may return ErrAborted,
// ErrInvariantViolated, or the error of an invariant check that could not
// read the sums (the report says so); other errors mean no report was
// written.
//
// With Sweep, Repeat or Plot set, Main runs a sweep instead: it loads each
// target once (in a subdirectory of Dir named after the target when several
// are swept), runs every cell, then prints one table (WriteSweepTable) and
// draws the plot. Errors wrap ErrBadSweep or ErrBadPlot for a sweep that
// cannot run.
//
// When ctx ends first (an interrupt), a run stops and still reports, a
// sweep stops between runs and prints the table of the runs made, and
// Main then returns ErrInterrupted (wrapping ctx's error if the load or
// the run failed on it); ErrAborted and ErrInvariantViolated take
// precedence, since they say more.
func Main(ctx context.Context, cfg Config, out, log io.Writer) (err error) {
	defer func() {
		if ctx.Err() == nil {
			return
		}
		switch {
		case err == nil:
			err = ErrInterrupted
		case errors.Is(err, ctx.Err()) && !errors.Is(err, ErrInterrupted):
			err = fmt.Errorf("%w: %w", ErrInterrupted, err)
		}
	}()
	if cfg.Options.Logger == nil {
		cfg.Options.Logger = slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if len(cfg.Sweep) > 0 || cfg.Repeat > 1 || cfg.Plot != "" {
		if cfg.Initialize {
			return fmt.Errorf("%w: -i loads, it does not run a sweep", ErrBadSweep)
		}
		return sweep(ctx, cfg, out, log)
	}
	t, err := OpenTarget(cfg.Target, cfg.Dir, cfg.Options)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := t.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("bench: close %s: %w", cfg.Target, cerr)
		}
	}()
	scale, err := t.DetectScale(ctx)
	if err != nil {
		return fmt.Errorf("bench: detect scale: %w", err)
	}
	_, server := t.(tableCreator)
	if fc, ok := t.(foreignChecker); ok && scale == 0 {
		key, found, err := fc.ForeignKey(ctx)
		if err != nil {
			return fmt.Errorf("bench: check the directory: %w", err)
		}
		if found {
			return fmt.Errorf("%w: %s holds key %q; choose an empty directory or one that mvkv bench -i loaded", ErrForeignData, cfg.Dir, key)
		}
	}
	if cfg.Initialize {
		// A server has no directory to choose instead, so -i reloads it,
		// as pgbench -i does.
		if scale > 0 && !server {
			if err := checkLoaded(ctx, t, cfg.Dir, false, scale, cfg.Accounts); err != nil {
				return err
			}
			return fmt.Errorf("%w: %s is already loaded at scale %d; remove it or choose another directory", ErrAlreadyLoaded, cfg.Dir, scale)
		}
		return Load(ctx, t, cfg.Scale, cfg.Accounts, log)
	}
	if scale > 0 {
		where := cfg.Dir
		if server {
			where = cfg.Target
		}
		if err := checkLoaded(ctx, t, where, server, scale, cfg.Accounts); err != nil {
			return err
		}
	}
	switch {
	case scale == 0:
		if err := Load(ctx, t, cfg.Scale, cfg.Accounts, log); err != nil {
			return err
		}
		scale = cfg.Scale
	case cfg.ScaleSet && cfg.Scale != scale:
		fmt.Fprintf(log, "scale option ignored, using count from branches (%d)\n", scale)
	}
	// The sums before the run, to compare its changes with its commits
	// afterwards (a select-only run changes nothing).
	var before *Sums
	if cfg.Workload != SelectOnly {
		// It reads every row, as pgbench's "starting vacuum...end."
		// says what it does before the run.
		fmt.Fprint(log, "summing the balances before the run...")
		s, err := t.Sums(ctx)
		if err != nil {
			fmt.Fprintln(log)
			return fmt.Errorf("bench: read the balances before the run: %w", err)
		}
		fmt.Fprintln(log, "end.")
		before = &s
	}
	r, err := Run(ctx, t, RunConfig{
		Workload:     cfg.Workload,
		Scale:        scale,
		Accounts:     cfg.Accounts,
		Clients:      cfg.Clients,
		Threads:      cfg.Threads,
		Transactions: cfg.Transactions,
		Duration:     cfg.Duration,
		Progress:     cfg.Progress,
		Seed:         cfg.Seed,
		MaxTries:     cfg.MaxTries,
		// A select-only run changes no table, and measuring them reads
		// the whole heap: at scale 100 that read took nine times as
		// long as a thousand selects and most of the process's memory.
		TableUsage: cfg.Workload != SelectOnly,
		Log:        log,
	})
	if err != nil {
		return err
	}
	if o, ok := t.(openStatser); ok {
		r.Open = o.OpenStats()
	}
	// Check the invariant even after an interrupt: it is most interesting
	// then. A select-only run writes no balance, so it has nothing to
	// check, and the check reads every row (as pgbench -S checks nothing).
	if cfg.Workload != SelectOnly {
		// A failed check is reported after the run's figures, as
		// pgbench still prints its summary when clients aborted.
		if sums, err := t.Sums(context.WithoutCancel(ctx)); err != nil {
			r.Invariant = &Invariant{Err: err}
		} else {
			r.Invariant = CheckInvariant(sums)
			if before != nil && r.Applied != nil {
				r.Invariant.CheckRun(*before, *r.Applied)
			}
		}
	}
	if err := WriteReport(out, r); err != nil {
		return err
	}
	if inv := r.Invariant; inv != nil && inv.Err != nil {
		return fmt.Errorf("bench: invariant check: %w", inv.Err)
	}
	switch {
	case r.Aborted > 0:
		return ErrAborted
	case r.Invariant != nil && !r.Invariant.OK:
		return ErrInvariantViolated
	}
	return nil
}

// checkLoaded returns ErrIncompleteLoad when the last account of a load of
// the given scale is missing. Load writes the branches first and the
// accounts in order, each batch atomically and the last one durably, so the
// last account is there exactly when the load finished. where names the
// directory, or for a server (which -i reloads) the target.
func checkLoaded(ctx context.Context, t Target, where string, server bool, scale, accounts int) error {
	if accounts <= 0 {
		accounts = defaultAccounts
	}
	c, err := t.NewClient(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	last := int64(scale) * int64(accounts)
	if err := c.SelectOnly(ctx, last); err != nil {
		if errors.Is(err, errMissingRow) {
			again := "remove it and load again"
			if server {
				again = "load it again with -i"
			}
			return fmt.Errorf("%w: %s is loaded at scale %d but lacks account %d; %s", ErrIncompleteLoad, where, scale, last, again)
		}
		return fmt.Errorf("bench: check the load: %w", err)
	}
	return nil
}
