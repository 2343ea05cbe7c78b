package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"mvkv/engine"
)

// ErrBadSweep is returned for a --sweep that names an unknown knob or gives
// a value the knob does not take.
var ErrBadSweep = errors.New("bench: bad sweep")

// Axis is one --sweep: a knob and the values it takes, in the order given.
type Axis struct {
	Name   string // canonical: clients, commit_delay, commit_siblings, wal_flusher, synchronous_commit, early_lock_release, target, fsync_latency, disk_rotation, vm, visibility_map, clog, clog_locking, clog_group_update
	Values []string
}

// ParseAxis reads "NAME=V1,V2,...". Dashes in NAME are read as
// underscores (wal-flusher is wal_flusher). Only the first '=' separates,
// so "target=engine,postgres=URL" works for URLs without commas. Values are
// checked when the sweep starts, not here. Errors wrap ErrBadSweep.
func ParseAxis(s string) (Axis, error) {
	name, vals, ok := strings.Cut(s, "=")
	name = strings.ReplaceAll(strings.TrimSpace(name), "-", "_")
	if !ok || vals == "" {
		return Axis{}, fmt.Errorf("%w: %q: want NAME=V1,V2 and so on", ErrBadSweep, s)
	}
	if _, known := knobs[name]; !known {
		return Axis{}, fmt.Errorf("%w: unknown knob %q (want one of %s)", ErrBadSweep, name, knobNames)
	}
	a := Axis{Name: name}
	for v := range strings.SplitSeq(vals, ",") {
		if v = strings.TrimSpace(v); v == "" {
			return Axis{}, fmt.Errorf("%w: %q: empty value", ErrBadSweep, s)
		}
		if slices.Contains(a.Values, v) {
			// A repeated cell would be run once and shown once; use
			// --repeat for repeats.
			return Axis{}, fmt.Errorf("%w: %q: %s given twice (use --repeat N to run each cell N times)", ErrBadSweep, s, v)
		}
		a.Values = append(a.Values, v)
	}
	return a, nil
}

const knobNames = "clients, commit_delay, commit_siblings, wal_flusher, synchronous_commit, early_lock_release, target, fsync_latency, disk_rotation, vm (or visibility_map), clog, clog_locking, clog_group_update"

// knobs set one Config field from a sweep value.
var knobs = map[string]func(c *Config, v string) error{
	"clients": func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxClients {
			return fmt.Errorf("want a number of clients from 1 to %d", MaxClients)
		}
		c.Clients = n
		c.Threads = min(c.Threads, n)
		return nil
	},
	// commit_delay, commit_siblings and synchronous_commit are read as
	// the engine's settings and applied to every target that takes them.
	"commit_delay": engineKnob("commit_delay", func(c *Config, o *engine.Options) {
		c.Options.CommitDelay = o.CommitDelay
	}),
	"commit_siblings": engineKnob("commit_siblings", func(c *Config, o *engine.Options) {
		c.Options.CommitSiblings = max(o.CommitSiblings, 0) // NoCommitSiblings is 0
	}),
	"synchronous_commit": engineKnob("synchronous_commit", func(c *Config, o *engine.Options) {
		c.Options.SynchronousCommit = o.SynchronousCommit == engine.SyncCommitOn
	}),
	"wal_flusher": engineKnob("wal_flusher", nil),
	// vm is the engine's visibility map mode, for the 2011 question
	// whether WAL-logging the map costs throughput.
	"vm":             engineKnob("visibility_map", nil),
	"visibility_map": engineKnob("visibility_map", nil),
	// clog_locking and clog_group_update are the engine's settings of
	// those names; clog (below) sets both from one variant name.
	"clog_locking":      engineKnob("clog_locking", nil),
	"clog_group_update": engineKnob("clog_group_update", nil),
	// early_lock_release is the engine's commit order: on releases row
	// locks when the commit record is in the WAL, off when it is durable.
	"early_lock_release": engineKnob("early_lock_release", nil),
	"target": func(c *Config, v string) error {
		if v != "engine" && v != "pebble" && !strings.HasPrefix(v, "postgres=") && !strings.HasPrefix(v, "resp=") {
			return fmt.Errorf("want engine, pebble, postgres=URL or resp=ADDR")
		}
		c.Target = v
		return nil
	},
	"fsync_latency": func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return fmt.Errorf("want a duration such as 4ms")
		}
		c.Options.Disk.FsyncLatency = d
		return nil
	},
	"disk_rotation": func(c *Config, v string) error {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r < 0 || math.IsInf(r, 0) || math.IsNaN(r) {
			return fmt.Errorf("want rotations per second >= 0")
		}
		c.Options.Disk.RotationsPerSec = r
		return nil
	},
	"clog": func(c *Config, v string) error {
		locking, group, err := ParseCLOGVariant(v)
		c.Options.Engine.CLOGLocking, c.Options.Engine.CLOGGroupUpdate = engine.CLOGLocking(locking), &group
		return err
	},
}

// engineKnob is a sweep knob that takes the values of the engine's setting
// name, as engine.Setting.Set parses them, into the engine target's
// options; apply, if not nil, also hands the value to the fields the other
// targets read. The error says what the setting takes.
func engineKnob(name string, apply func(c *Config, o *engine.Options)) func(c *Config, v string) error {
	s, ok := engine.LookupSetting(name)
	if !ok {
		panic("bench: no engine setting " + name)
	}
	return func(c *Config, v string) error {
		if err := s.Set(&c.Options.Engine, v); err != nil {
			var se *engine.SettingError
			if errors.As(err, &se) {
				return errors.New(se.Want)
			}
			return err
		}
		if apply != nil {
			apply(c, &c.Options.Engine)
		}
		return nil
	}
}

// ParseCLOGVariant reads a CLOG locking variant as the clog sweep knob
// takes it: "global" or "bank", optionally followed by "+group" for group
// update (global, bank, global+group, bank+group: the pgsql-hackers
// thread's master, granular-locking and group-update variants and their
// combination). It returns the engine's CLOGLocking and whether group
// update is on, or, for any other text, an error saying what it takes.
func ParseCLOGVariant(v string) (locking string, group bool, err error) {
	locking, suffix, group := strings.Cut(v, "+")
	if (locking != "global" && locking != "bank") || (group && suffix != "group") {
		return "", false, fmt.Errorf("want global, bank, global+group or bank+group")
	}
	return locking, group, nil
}

// SweepTable is a finished (or interrupted) sweep, what WriteSweepTable
// prints and WritePlot draws.
type SweepTable struct {
	// Title is the line above the table: workload, scale, run length, disk.
	Title string
	// Axes are the swept knob names in column order: the others in the
	// order given, then clients, which varies fastest so that each group of
	// rows reads like one of the pgsql-hackers threads' tables.
	Axes []string
	Rows []SweepRow
	// Notes are printed under the table (invariant checks, aborts).
	Notes []string
}

// SweepRow is one cell of the sweep.
type SweepRow struct {
	// Values are the cell's knob values, parallel to SweepTable.Axes.
	Values []string
	// Clients is the cell's client count.
	Clients int
	// Calc is the optimum tps under the disk model (clients x the model's
	// sync rate); 0 when there is no model or it does not apply (a
	// PostgreSQL server, synchronous commit off).
	Calc float64
	// Runs are the --repeat results, in order.
	Runs []*Results
}

// TPS returns the mean and sample standard deviation of the runs' tps (0
// stddev for a single run).
func (r *SweepRow) TPS() (mean, stddev float64) {
	n := float64(len(r.Runs))
	if n == 0 {
		return 0, 0
	}
	for _, x := range r.Runs {
		mean += x.TPS
	}
	mean /= n
	if n < 2 {
		return mean, 0
	}
	var ss float64
	for _, x := range r.Runs {
		ss += (x.TPS - mean) * (x.TPS - mean)
	}
	return mean, math.Sqrt(ss / (n - 1))
}

// syncs returns WAL syncs per second and commits per sync over all runs,
// ok false when the target does not count syncs.
func (r *SweepRow) syncs() (perSec, commitsPerSync float64, ok bool) {
	var syncs, commits uint64
	var el time.Duration
	for _, x := range r.Runs {
		if x.Commit == nil {
			return 0, 0, false
		}
		syncs += x.Commit.WALSyncs
		commits += x.Commit.Commits
		el += x.Elapsed
	}
	if len(r.Runs) == 0 || el <= 0 {
		return 0, 0, false
	}
	perSec = float64(syncs) / el.Seconds()
	if syncs > 0 {
		commitsPerSync = float64(commits) / float64(syncs)
	}
	return perSec, commitsPerSync, true
}

// walBytesPerTxn returns the WAL bytes written per committed transaction
// over all runs, ok false when the target does not count them.
func (r *SweepRow) walBytesPerTxn() (float64, bool) {
	var bytes, commits uint64
	for _, x := range r.Runs {
		if x.Commit == nil {
			return 0, false
		}
		bytes += x.Commit.WALBytes
		commits += x.Commit.Commits
	}
	if commits == 0 {
		return 0, false
	}
	return float64(bytes) / float64(commits), true
}

// WriteSweepTable prints t as a markdown table in the pgsql-hackers threads' form:
// the knob columns, tps (with ± the standard deviation and every run's tps
// when cells ran more than once), calc and ratio = tps / calc, WAL syncs per
// second, commits per sync and WAL bytes per transaction. Empty cells mean "does not apply". Only write errors are
// returned.
func WriteSweepTable(w io.Writer, t *SweepTable) error {
	ew := &errWriter{w: w}
	repeat := false
	for _, r := range t.Rows {
		repeat = repeat || len(r.Runs) > 1
	}
	if t.Title != "" {
		ew.printf("%s\n\n", t.Title)
	}
	cols := append([]string{}, t.Axes...)
	cols = append(cols, "tps")
	if repeat {
		cols = append(cols, "±", "runs")
	}
	cols = append(cols, "calc", "ratio", "syncs/s", "commits/sync", "WAL B/txn")
	ew.printf("| %s |\n", strings.Join(cols, " | "))
	ew.printf("|%s\n", strings.Repeat(" --- |", len(cols)))
	for _, r := range t.Rows {
		cells := append([]string{}, r.Values...)
		mean, sd := r.TPS()
		if len(r.Runs) == 0 {
			cells = append(cells, "")
		} else {
			cells = append(cells, fmt.Sprintf("%.1f", mean))
		}
		if repeat {
			if len(r.Runs) > 1 {
				cells = append(cells, fmt.Sprintf("%.1f", sd))
			} else {
				cells = append(cells, "")
			}
			each := make([]string, len(r.Runs))
			for i, x := range r.Runs {
				each[i] = fmt.Sprintf("%.0f", x.TPS)
			}
			cells = append(cells, strings.Join(each, ", "))
		}
		if r.Calc > 0 {
			cells = append(cells, strconv.FormatFloat(r.Calc, 'f', -1, 64))
			if len(r.Runs) > 0 {
				cells = append(cells, fmt.Sprintf("%.0f%%", 100*mean/r.Calc))
			} else {
				cells = append(cells, "")
			}
		} else {
			cells = append(cells, "", "")
		}
		if ps, cps, ok := r.syncs(); ok {
			cells = append(cells, fmt.Sprintf("%.1f", ps), "")
			if cps > 0 {
				cells[len(cells)-1] = fmt.Sprintf("%.2f", cps)
			}
		} else {
			cells = append(cells, "", "")
		}
		if b, ok := r.walBytesPerTxn(); ok {
			cells = append(cells, fmt.Sprintf("%.0f", b))
		} else {
			cells = append(cells, "")
		}
		ew.printf("| %s |\n", strings.Join(cells, " | "))
	}
	if len(t.Notes) > 0 {
		ew.printf("\n")
		for _, n := range t.Notes {
			ew.printf("%s\n", n)
		}
	}
	return ew.err
}

// CompareVariants answers, for every swept knob other than clients that
// took exactly two values, the question the 2011 visibility-map thread
// asked of crash-safe against unlogged maps: does the difference between
// the two variants exceed the run-to-run variation? It returns one line
// per combination of the other knobs (one client count, say) where both
// cells ran at least twice, giving both means, the difference in percent
// and both sample standard deviations. The difference exceeds the
// variation when it is more than twice the standard error of the
// difference of the means (Welch's), about a two-sided 95% test for runs
// whose tps is normally distributed. Cells with one run say nothing about
// variation and are skipped, so a sweep without --repeat gets no lines.
func CompareVariants(t *SweepTable) []string {
	var out []string
	for ai, axis := range t.Axes {
		if axis == "clients" {
			continue
		}
		var vals []string
		for _, r := range t.Rows {
			if !slices.Contains(vals, r.Values[ai]) {
				vals = append(vals, r.Values[ai])
			}
		}
		if len(vals) != 2 {
			continue
		}
		// Rows keyed by the other knobs' values, in the order first run.
		var keys []string
		pairs := map[string]*[2]*SweepRow{}
		for i := range t.Rows {
			r := &t.Rows[i]
			var parts []string
			for j, name := range t.Axes {
				if j != ai {
					parts = append(parts, name+"="+r.Values[j])
				}
			}
			key := strings.Join(parts, ", ")
			p, ok := pairs[key]
			if !ok {
				p = new([2]*SweepRow)
				pairs[key] = p
				keys = append(keys, key)
			}
			p[slices.Index(vals, r.Values[ai])] = r
		}
		for _, key := range keys {
			a, b := pairs[key][0], pairs[key][1]
			if a == nil || b == nil || len(a.Runs) < 2 || len(b.Runs) < 2 {
				continue
			}
			ma, sa := a.TPS()
			mb, sb := b.TPS()
			se := math.Sqrt(sa*sa/float64(len(a.Runs)) + sb*sb/float64(len(b.Runs)))
			verdict := "within the run-to-run variation"
			if math.Abs(mb-ma) > 2*se {
				verdict = "the difference EXCEEDS the run-to-run variation"
			}
			where := ""
			if key != "" {
				where = " at " + key
			}
			diff := 0.0
			if ma > 0 {
				diff = 100 * (mb - ma) / ma
			}
			out = append(out, fmt.Sprintf("%s %s vs %s%s: %.0f vs %.0f tps (%+.1f%%), stddev %.0f and %.0f: %s",
				axis, vals[0], vals[1], where, ma, mb, diff, sa, sb, verdict))
		}
	}
	return out
}

// sweepCell is one point of the cross product with its configuration.
type sweepCell struct {
	cfg    Config
	values []string
}

// sweep runs every cell of cfg.Sweep's cross product cfg.Repeat times and
// prints the table (and writes the plot). Data is loaded once per target
// and reused by every cell, as pgbench runs reuse one initialized database;
// each cell reopens the target with its own knobs.
func sweep(ctx context.Context, cfg Config, out, log io.Writer) error {
	repeat := max(cfg.Repeat, 1)
	// Clients last, so it varies fastest.
	var axes []Axis
	var clients *Axis
	for i, a := range cfg.Sweep {
		if a.Name == "clients" {
			clients = &cfg.Sweep[i]
			continue
		}
		axes = append(axes, a)
	}
	if clients != nil {
		axes = append(axes, *clients)
	}
	names := make([]string, len(axes))
	for i, a := range axes {
		names[i] = a.Name
		for _, v := range a.Values {
			c := cfg
			if err := knobs[a.Name](&c, v); err != nil {
				return fmt.Errorf("%w: %s=%s: %v", ErrBadSweep, a.Name, v, err)
			}
		}
	}
	if cfg.Plot != "" {
		if _, err := plotX(names, func(i int) []string { return axes[i].Values }); err != nil {
			return err
		}
	}

	// The cross product, first axis outermost.
	cells := []sweepCell{{cfg: cfg}}
	for _, a := range axes {
		var next []sweepCell
		for _, c := range cells {
			for _, v := range a.Values {
				n := sweepCell{cfg: c.cfg, values: append(append([]string{}, c.values...), v)}
				knobs[a.Name](&n.cfg, v) // validated above
				next = append(next, n)
			}
		}
		cells = next
	}
	cells = collapse(names, cells)
	if cfg.Fresh {
		for _, c := range cells {
			if c.cfg.Target != "engine" && c.cfg.Target != "pebble" {
				t, _ := targetKind(c.cfg.Target)
				return fmt.Errorf("%w: --fresh copies a data directory, and target %s has none", ErrBadSweep, t)
			}
		}
	}

	// One data directory (or database) per target.
	var targets []string
	dirs := map[string]string{}
	for _, c := range cells {
		if _, ok := dirs[c.cfg.Target]; !ok {
			targets = append(targets, c.cfg.Target)
			dirs[c.cfg.Target] = cfg.Dir
		}
	}
	if len(targets) > 1 {
		for _, t := range targets {
			if _, server := targetKind(t); !server {
				dirs[t] = filepath.Join(cfg.Dir, t)
			}
		}
		// The subdirectories go in cfg.Dir: one holding anything else,
		// a data directory of its own say, would get strangers.
		entries, err := os.ReadDir(cfg.Dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("bench: %w", err)
		}
		for _, e := range entries {
			if d, ok := dirs[e.Name()]; !ok || d != filepath.Join(cfg.Dir, e.Name()) {
				return fmt.Errorf("%w: a sweep over targets loads each into a subdirectory of %s named after it, and %s holds %q: give a new or empty directory, or one such a sweep used before", ErrBadSweep, cfg.Dir, cfg.Dir, e.Name())
			}
		}
	}
	scales := map[string]int{}
	for _, name := range targets {
		s, err := prepare(ctx, cfg, name, dirs[name], log)
		if err != nil {
			return err
		}
		scales[name] = s
	}

	// The title shows the scale the runs used: the loaded one when all
	// targets agree on it.
	titled := cfg
	for _, s := range scales {
		titled.Scale = s
	}
	for _, s := range scales {
		if s != titled.Scale {
			titled.Scale = cfg.Scale
		}
	}
	table := &SweepTable{Title: sweepTitle(titled, repeat), Axes: names}
	var aborted bool
	for i := range cells {
		if ctx.Err() != nil {
			break
		}
		c := &cells[i]
		row := SweepRow{Values: shown(names, c.values), Clients: c.cfg.Clients}
		if _, server := targetKind(c.cfg.Target); !server && c.cfg.Options.SynchronousCommit {
			row.Calc = float64(c.cfg.Clients) * c.cfg.Options.Disk.SyncRate()
		}
		runs, err := runCell(ctx, c.cfg, dirs[c.cfg.Target], scales[c.cfg.Target], repeat, label(names, c.values), log)
		row.Runs = runs
		table.Rows = append(table.Rows, row)
		if err != nil {
			return err
		}
		for _, r := range runs {
			aborted = aborted || r.Aborted > 0
		}
	}
	if ctx.Err() != nil {
		table.Notes = append(table.Notes, "interrupted: the sweep stopped early")
	}

	// The invariant, once per target after all its runs.
	violated := false
	switch {
	case cfg.Workload == SelectOnly:
		// Nothing wrote a balance, and the check reads every row.
		table.Notes = append(table.Notes, "invariant: not checked (select-only runs write no balance)")
		targets = nil
	case cfg.Fresh:
		// The copies are gone; the loaded data was never written.
		table.Notes = append(table.Notes, "invariant: ok after every completed run, each on a fresh copy of the loaded data")
		targets = nil
	}
	for _, name := range targets {
		inv, err := checkTarget(context.WithoutCancel(ctx), cfg, name, dirs[name])
		if err != nil {
			return err
		}
		kind, _ := targetKind(name)
		word := "ok"
		if !inv.OK {
			word, violated = "VIOLATED", true
		}
		s := inv.Sums
		table.Notes = append(table.Notes, fmt.Sprintf("invariant (%s): %s (accounts=%d, tellers=%d, branches=%d, history=%d)",
			kind, word, s.Accounts, s.Tellers, s.Branches, s.History))
	}
	if aborted {
		table.Notes = append(table.Notes, "some runs had aborted clients; see the log")
	}
	table.Notes = append(table.Notes, CompareVariants(table)...)
	if err := WriteSweepTable(out, table); err != nil {
		return err
	}
	if cfg.Pivot {
		if _, err := io.WriteString(out, "\n"); err != nil {
			return err
		}
		if err := WritePivotTable(out, table); err != nil {
			return err
		}
	}
	if cfg.Plot != "" {
		if err := WritePlot(cfg.Plot, table); err != nil {
			return err
		}
	}
	switch {
	case aborted:
		return ErrAborted
	case violated:
		return ErrInvariantViolated
	}
	return nil
}

// collapse drops the cells that would only repeat another: a knob that
// does not apply to a cell's target (wal_flusher and vm off the engine,
// commit_delay and commit_siblings on pebble) is run once, at its first
// value, and shown empty, so that a sweep of target=engine,pebble with
// wal_flusher=serial,pipelined runs pebble once per client count.
func collapse(names []string, cells []sweepCell) []sweepCell {
	seen := map[string]bool{}
	var out []sweepCell
	for _, c := range cells {
		kind, _ := targetKind(c.cfg.Target)
		for i, n := range names {
			if !knobApplies(n, kind) {
				c.values[i] = ""
			}
		}
		key := strings.Join(c.values, "\x00")
		if seen[key] {
			continue
		}
		seen[key] = true
		out = append(out, c)
	}
	return out
}

// knobApplies reports whether a target of kind (engine, pebble, postgres,
// resp) has any use for the knob. A disk model wraps the files of the
// targets the bench opens itself; a RESP server keeps its own settings
// (the bench sets none of them over the wire).
func knobApplies(knob, kind string) bool {
	switch knob {
	case "wal_flusher", "vm", "visibility_map", "clog", "clog_locking", "clog_group_update", "early_lock_release":
		return kind == "engine"
	case "commit_delay", "commit_siblings":
		return kind == "engine" || kind == "postgres"
	case "synchronous_commit":
		return kind != "resp"
	case "fsync_latency", "disk_rotation":
		return kind == "engine" || kind == "pebble"
	}
	return true
}

// targetKind returns a target spec's kind ("postgres" for "postgres=URL",
// "resp" for "resp=ADDR") and whether it is a server, to which disk models
// and calc do not apply.
func targetKind(spec string) (string, bool) {
	for _, kind := range []string{"postgres", "resp"} {
		if strings.HasPrefix(spec, kind+"=") {
			return kind, true
		}
	}
	return spec, false
}

// shown returns knob values as the table shows them: a server target as
// its kind ("postgres", "resp"), without its URL or address.
func shown(names, values []string) []string {
	out := make([]string, len(values))
	for i, v := range values {
		if names[i] == "target" {
			v, _ = targetKind(v)
		}
		out[i] = v
	}
	return out
}

func label(names, values []string) string {
	parts := make([]string, len(names))
	for i, v := range shown(names, values) {
		parts[i] = names[i] + "=" + v
	}
	return strings.Join(parts, " ")
}

func sweepTitle(cfg Config, repeat int) string {
	length := fmt.Sprintf("%d transactions per client", cfg.Transactions)
	if cfg.Duration > 0 {
		length = fmt.Sprintf("%v per run", cfg.Duration)
	}
	runs := "1 run per cell"
	if repeat > 1 {
		runs = fmt.Sprintf("%d runs per cell, mean ± sample stddev", repeat)
	}
	return fmt.Sprintf("%s, scale %d, %s, %s, disk: %s", cfg.Workload.Builtin(), cfg.Scale, length, runs, cfg.Options.Disk)
}

// loadOptions are the options for loading and checking: the base knobs
// without the disk model, which would only make the load slow.
func loadOptions(cfg Config) TargetOptions {
	o := cfg.Options
	o.Disk = DiskModel{}
	if o.CommitDelay < 0 {
		o.CommitDelay = 0
	}
	return o
}

// prepare loads the target if it is empty and returns its scale.
func prepare(ctx context.Context, cfg Config, name, dir string, log io.Writer) (int, error) {
	t, err := OpenTarget(name, dir, loadOptions(cfg))
	if err != nil {
		return 0, err
	}
	scale, err := loadIfEmpty(ctx, cfg, t, log)
	if cerr := t.Close(); cerr != nil && err == nil {
		err = cerr
	}
	return scale, err
}

func loadIfEmpty(ctx context.Context, cfg Config, t Target, log io.Writer) (int, error) {
	scale, err := t.DetectScale(ctx)
	if err != nil {
		return 0, fmt.Errorf("bench: detect scale of %s: %w", t.Name(), err)
	}
	switch {
	case scale == 0:
		fmt.Fprintf(log, "loading %s at scale %d\n", t.Name(), cfg.Scale)
		if err := Load(ctx, t, cfg.Scale, cfg.Accounts, log); err != nil {
			return 0, err
		}
		scale = cfg.Scale
	case cfg.ScaleSet && cfg.Scale != scale:
		fmt.Fprintf(log, "%s: scale option ignored, using count from branches (%d)\n", t.Name(), scale)
	}
	return scale, nil
}

// runCell opens the target with the cell's knobs and runs it repeat times,
// or with --fresh runs each repetition on its own copy (runFresh).
func runCell(ctx context.Context, cfg Config, dir string, scale, repeat int, label string, log io.Writer) (runs []*Results, err error) {
	run := func(i int) (*Results, error) { return runFresh(ctx, cfg, dir, scale, i, repeat, label, log) }
	if !cfg.Fresh {
		t, err := OpenTarget(cfg.Target, dir, cfg.Options)
		if err != nil {
			return nil, err
		}
		defer func() {
			if cerr := t.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("bench: close %s: %w", label, cerr)
			}
		}()
		run = func(i int) (*Results, error) { return runOne(ctx, t, cfg, scale, i, repeat, label, log) }
	}
	for i := range repeat {
		if ctx.Err() != nil {
			break
		}
		r, err := run(i)
		if err != nil {
			return runs, err
		}
		runs = append(runs, r)
	}
	return runs, nil
}

// runFresh copies the loaded data in dir to a new directory beside it,
// runs repetition i there, checks the balances and removes the copy
// (--fresh). The copy's name comes from os.MkdirTemp, so nothing that was
// there before is overwritten or removed; dir may be relative, ".", or a
// symbolic link.
func runFresh(ctx context.Context, cfg Config, dir string, scale, i, repeat int, label string, log io.Writer) (_ *Results, err error) {
	src, err := filepath.Abs(dir)
	if err == nil {
		src, err = filepath.EvalSymlinks(src)
	}
	if err != nil {
		return nil, fmt.Errorf("bench: --fresh: %w", err)
	}
	copyDir, err := os.MkdirTemp(filepath.Dir(src), filepath.Base(src)+".fresh-")
	if err != nil {
		return nil, fmt.Errorf("bench: --fresh: make a directory beside %s for the copy: %w", src, err)
	}
	if err := copyTree(src, copyDir); err != nil {
		os.RemoveAll(copyDir)
		return nil, fmt.Errorf("bench: --fresh: copy %s to %s: %w", src, copyDir, err)
	}
	defer func() {
		if rerr := os.RemoveAll(copyDir); rerr != nil && err == nil {
			err = fmt.Errorf("bench: --fresh: %w", rerr)
		}
	}()
	t, err := OpenTarget(cfg.Target, copyDir, cfg.Options)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := t.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("bench: close %s: %w", label, cerr)
		}
	}()
	r, err := runOne(ctx, t, cfg, scale, i, repeat, label, log)
	if err != nil {
		return nil, err
	}
	if cfg.Workload == SelectOnly {
		return r, nil // nothing to check: see sweep
	}
	// The copy is removed next, so its balances are checked now.
	sums, err := t.Sums(context.WithoutCancel(ctx))
	if err != nil {
		return nil, fmt.Errorf("bench: invariant check of %s: %w", t.Name(), err)
	}
	if inv := CheckInvariant(sums); !inv.OK {
		s := inv.Sums
		return nil, fmt.Errorf("%w: %s run %d (accounts=%d, tellers=%d, branches=%d, history=%d)",
			ErrInvariantViolated, label, i+1, s.Accounts, s.Tellers, s.Branches, s.History)
	}
	return r, nil
}

// runOne runs repetition i of a cell on the open target t and logs its line.
func runOne(ctx context.Context, t Target, cfg Config, scale, i, repeat int, label string, log io.Writer) (*Results, error) {
	seed := cfg.Seed
	if seed != 0 {
		seed += uint64(i)
	}
	r, err := Run(ctx, t, RunConfig{
		Workload: cfg.Workload, Scale: scale, Accounts: cfg.Accounts,
		Clients: cfg.Clients, Threads: cfg.Threads, Transactions: cfg.Transactions,
		Duration: cfg.Duration, Progress: cfg.Progress, Seed: seed, MaxTries: cfg.MaxTries, Log: log,
	})
	if err != nil {
		return nil, err
	}
	line := fmt.Sprintf("%s run %d/%d: tps %.1f, latency %.3f ms", label, i+1, repeat, r.TPS, r.LatencyAvg)
	if c := r.Commit; c != nil && c.WALSyncs > 0 {
		line += fmt.Sprintf(", %d WAL syncs (%.2f commits per sync)", c.WALSyncs, float64(c.Commits)/float64(c.WALSyncs))
	}
	if r.Failed > 0 || r.Aborted > 0 {
		line += fmt.Sprintf(", %d failed, %d clients aborted", r.Failed, r.Aborted)
	}
	fmt.Fprintln(log, line)
	return r, nil
}

// copyTree copies the regular files and directories under src into dst,
// an empty directory. Each file is synced: otherwise the kernel would
// write the copy back during the run, and the run's WAL syncs would wait
// behind it.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			if rel == "." {
				return nil
			}
			return os.Mkdir(to, 0o755)
		case d.Type().IsRegular():
			return copyFile(path, to)
		default:
			return fmt.Errorf("%s: not a regular file or directory", path)
		}
	})
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// checkTarget reads the target's sums after the sweep.
func checkTarget(ctx context.Context, cfg Config, name, dir string) (*Invariant, error) {
	t, err := OpenTarget(name, dir, loadOptions(cfg))
	if err != nil {
		return nil, err
	}
	s, err := t.Sums(ctx)
	if cerr := t.Close(); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("bench: invariant check of %s: %w", t.Name(), err)
	}
	return CheckInvariant(s), nil
}

// WritePivotTable prints t's tps as one markdown table in the shape of the
// pgsql-hackers threads: a row per combination of the knobs other than
// clients (in the order first run), a column per client count. A cell is the
// mean tps of its runs, empty if it did not run. It writes nothing for a
// sweep without a clients axis. Only write errors are returned.
func WritePivotTable(w io.Writer, t *SweepTable) error {
	ci := slices.Index(t.Axes, "clients")
	if ci < 0 {
		return nil
	}
	var rows, cols []string
	cells := map[[2]string]string{}
	for _, r := range t.Rows {
		key := strings.Join(slices.Delete(slices.Clone(r.Values), ci, ci+1), " ")
		col := r.Values[ci]
		if !slices.Contains(rows, key) {
			rows = append(rows, key)
		}
		if !slices.Contains(cols, col) {
			cols = append(cols, col)
		}
		if len(r.Runs) > 0 {
			mean, _ := r.TPS()
			cells[[2]string{key, col}] = fmt.Sprintf("%.0f", mean)
		}
	}
	others := strings.Join(slices.Delete(slices.Clone(t.Axes), ci, ci+1), " ")
	if others == "" {
		others = "tps"
	}
	ew := &errWriter{w: w}
	ew.printf("tps by %s (rows) and clients (columns)\n\n", others)
	ew.printf("| %s | %s |\n", others, strings.Join(cols, " | "))
	ew.printf("|%s\n", strings.Repeat(" --- |", len(cols)+1))
	for _, row := range rows {
		line := []string{row}
		for _, col := range cols {
			line = append(line, cells[[2]string{row, col}])
		}
		ew.printf("| %s |\n", strings.Join(line, " | "))
	}
	return ew.err
}
