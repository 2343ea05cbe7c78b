package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"mvkv/engine"
)

func TestParseAxis(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Axis
		ok   bool
	}{
		{"clients=1,2,4", Axis{"clients", []string{"1", "2", "4"}}, true},
		{"wal-flusher=serial, pipelined", Axis{"wal_flusher", []string{"serial", "pipelined"}}, true},
		{"target=engine,postgres=postgres://u@/db?host=/tmp", Axis{"target", []string{"engine", "postgres=postgres://u@/db?host=/tmp"}}, true},
		{"commit_delay=0,auto", Axis{"commit_delay", []string{"0", "auto"}}, true},
		{"vm=crash-safe,unlogged", Axis{"vm", []string{"crash-safe", "unlogged"}}, true},
		{"clients", Axis{}, false},
		{"clients=", Axis{}, false},
		{"clients=1,,2", Axis{}, false},
		{"clients=1,2,1", Axis{}, false},
		{"shared_buffers=1,2", Axis{}, false},
	} {
		got, err := ParseAxis(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("ParseAxis(%q) error %v, want ok=%v", tc.in, err, tc.ok)
			continue
		}
		if !tc.ok {
			if !errors.Is(err, ErrBadSweep) {
				t.Errorf("ParseAxis(%q) error %v does not wrap ErrBadSweep", tc.in, err)
			}
			continue
		}
		if got.Name != tc.want.Name || strings.Join(got.Values, "|") != strings.Join(tc.want.Values, "|") {
			t.Errorf("ParseAxis(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

// TestSweepBadValue: a value a knob does not take stops the sweep before
// anything is loaded.
func TestSweepBadValue(t *testing.T) {
	for _, s := range []string{"clients=1,0", "commit_delay=5,soon", "wal_flusher=serial,eager", "synchronous_commit=maybe", "target=engine,mysql", "fsync_latency=3", "disk_rotation=-1", "vm=crash-safe,logged"} {
		a, err := ParseAxis(s)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		err = Main(context.Background(), Config{Target: "engine", Dir: dir, Scale: 1, Clients: 1, Transactions: 1, Sweep: []Axis{a}}, &bytes.Buffer{}, &bytes.Buffer{})
		if !errors.Is(err, ErrBadSweep) {
			t.Errorf("%s: err = %v, want ErrBadSweep", s, err)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("%s: the sweep created %d entries before failing", s, len(ents))
		}
	}
}

func TestDiskModel(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		m    DiskModel
		rate float64
		s    string
	}{
		{DiskModel{}, 0, "real disk"},
		{DiskModel{FsyncLatency: 4 * ms}, 250, "fsync 4ms"},
		{DiskModel{RotationsPerSec: 120}, 120, "120 rotations/s"},
	} {
		if got := tc.m.SyncRate(); got != tc.rate {
			t.Errorf("%v.SyncRate() = %v, want %v", tc.m, got, tc.rate)
		}
		if got := tc.m.String(); got != tc.s {
			t.Errorf("String() = %q, want %q", got, tc.s)
		}
	}
}

func TestSweepTableGolden(t *testing.T) {
	run := func(tps float64, commits, syncs uint64) *Results {
		return &Results{TPS: tps, Elapsed: 5 * time.Second, Commit: &CommitStats{Commits: commits, WALSyncs: syncs}}
	}
	for _, tc := range []struct {
		name string
		t    SweepTable
	}{
		{"sweep_clients_flusher", SweepTable{
			Title: "simple-update, scale 10, 5s per run, 2 runs per cell, mean ± sample stddev, disk: 250 rotations/s",
			Axes:  []string{"wal_flusher", "clients"},
			Rows: []SweepRow{
				{Values: []string{"serial", "1"}, Clients: 1, Calc: 250, Runs: []*Results{run(221, 1105, 1105), run(223, 1115, 1115)}},
				{Values: []string{"serial", "2"}, Clients: 2, Calc: 500, Runs: []*Results{run(250, 1250, 1250), run(246, 1230, 1230)}},
				{Values: []string{"serial", "48"}, Clients: 48, Calc: 12000, Runs: []*Results{run(6000, 30000, 1250)}},
				{Values: []string{"pipelined", "1"}, Clients: 1, Calc: 250, Runs: []*Results{run(240, 1200, 1200), run(244, 1220, 1220)}},
				// Interrupted before this cell ran.
				{Values: []string{"pipelined", "2"}, Clients: 2, Calc: 500},
			},
			Notes: []string{"invariant (engine): ok (accounts=1, tellers=0, branches=0, history=1)"},
		}},
		{"sweep_targets_real_disk", SweepTable{
			Title: "tpcb-like, scale 1, 10 transactions per client, 1 run per cell, disk: real disk",
			Axes:  []string{"target", "clients"},
			Rows: []SweepRow{
				{Values: []string{"engine", "8"}, Clients: 8, Runs: []*Results{run(5000.04, 25000, 5000)}},
				{Values: []string{"postgres", "8"}, Clients: 8, Runs: []*Results{{TPS: 1500.26, Elapsed: time.Second}}},
				{Values: []string{"pebble", "8"}, Clients: 8, Runs: []*Results{run(3000, 15000, 0)}},
			},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteSweepTable(&buf, &tc.t); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", tc.name+".golden")
			if *updateGolden {
				if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf.Bytes(), want) {
				t.Errorf("table differs from %s:\ngot:\n%s\nwant:\n%s", path, buf.Bytes(), want)
			}
		})
	}
}

func TestPivotTableGolden(t *testing.T) {
	run := func(tps float64) []*Results { return []*Results{{TPS: tps}} }
	tab := SweepTable{
		Axes: []string{"clog", "clients"},
		Rows: []SweepRow{
			{Values: []string{"global", "32"}, Runs: run(1000.4)},
			{Values: []string{"global", "64"}, Runs: run(900)},
			{Values: []string{"bank+group", "32"}, Runs: run(1100)},
			// Interrupted before this cell ran.
			{Values: []string{"bank+group", "64"}},
		},
	}
	var buf bytes.Buffer
	if err := WritePivotTable(&buf, &tab); err != nil {
		t.Fatal(err)
	}
	want := `tps by clog (rows) and clients (columns)

| clog | 32 | 64 |
| --- | --- | --- |
| global | 1000 | 900 |
| bank+group | 1100 |  |
`
	if buf.String() != want {
		t.Errorf("pivot table:\n%s\nwant:\n%s", buf.String(), want)
	}
	buf.Reset()
	if err := WritePivotTable(&buf, &SweepTable{Axes: []string{"clog"}}); err != nil || buf.Len() != 0 {
		t.Errorf("pivot of a sweep without clients wrote %q, %v", buf.String(), err)
	}
}

func TestParseCLOGVariant(t *testing.T) {
	for _, tc := range []struct {
		in      string
		locking string
		group   bool
		ok      bool
	}{
		{"global", "global", false, true},
		{"bank", "bank", false, true},
		{"global+group", "global", true, true},
		{"bank+group", "bank", true, true},
		{"bank+", "", false, false},
		{"striped", "", false, false},
		{"global+groups", "", false, false},
	} {
		locking, group, err := ParseCLOGVariant(tc.in)
		if (err == nil) != tc.ok || locking != tc.locking || group != tc.group {
			t.Errorf("ParseCLOGVariant(%q) = %q, %v, %v; want %q, %v, ok %v", tc.in, locking, group, err, tc.locking, tc.group, tc.ok)
		}
	}
}

// TestSweepCLOG runs the four CLOG variants for a few transactions and
// checks that the pivot table has a row per variant and that each cell's
// engine ran with its variant (group updates only where group update is on
// could be a timing accident, so the test checks the options instead).
func TestSweepCLOG(t *testing.T) {
	a, err := ParseAxis("clog=global,bank,global+group,bank+group")
	if err != nil {
		t.Fatal(err)
	}
	var c Config
	for _, v := range a.Values {
		if err := knobs["clog"](&c, v); err != nil {
			t.Fatal(err)
		}
		locking, group, _ := ParseCLOGVariant(v)
		if string(c.Options.Engine.CLOGLocking) != locking || *c.Options.Engine.CLOGGroupUpdate != group {
			t.Errorf("clog=%s set %+v", v, c.Options)
		}
	}
	cl, _ := ParseAxis("clients=1,2")
	var out bytes.Buffer
	err = Main(context.Background(), Config{
		Target: "engine", Dir: t.TempDir(), Scale: 1, Accounts: 100, Clients: 1, Threads: 1,
		Transactions: 5, Workload: SimpleUpdate, Sweep: []Axis{a, cl}, Pivot: true,
	}, &out, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{"| global | ", "| bank | ", "| global+group | ", "| bank+group | ", "| clog | 1 | 2 |"} {
		if !strings.Contains(out.String(), row) {
			t.Errorf("no %q in:\n%s", row, out.String())
		}
	}
}

// TestSweepEngine runs a real two-cell sweep under a 2 ms disk, twice on one
// directory: the second sweep must reuse the data and may repeat cells.
func TestSweepEngine(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	clients, err := ParseAxis("clients=1,2")
	if err != nil {
		t.Fatal(err)
	}
	png := filepath.Join(t.TempDir(), "sweep.png")
	cfg := Config{
		Target: "engine", Dir: dir, Scale: 1, Accounts: testAccounts, Workload: SimpleUpdate,
		Clients: 1, Threads: 1, Transactions: 20, Seed: 7,
		Options: TargetOptions{SynchronousCommit: true, CommitSiblings: 5, Disk: DiskModel{FsyncLatency: 2 * time.Millisecond}},
		Sweep:   []Axis{clients}, Plot: png,
	}
	var out, log bytes.Buffer
	if err := Main(ctx, cfg, &out, &log); err != nil {
		t.Fatalf("sweep: %v\nlog:\n%s", err, log.String())
	}
	rows := tableRows(t, out.String())
	if len(rows) != 2 || rows[0][0] != "1" || rows[1][0] != "2" {
		t.Fatalf("rows %q, want clients 1 and 2:\n%s", rows, out.String())
	}
	// calc is clients / 2 ms; syncs and commits per sync are counted.
	if rows[0][2] != "500" || rows[1][2] != "1000" || rows[0][4] == "" || rows[1][5] == "" {
		t.Errorf("calc or sync columns wrong:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "invariant (engine): ok") || !strings.Contains(log.String(), "generating data") {
		t.Errorf("no invariant line or no load:\nout:\n%s\nlog:\n%s", out.String(), log.String())
	}
	if fi, err := os.Stat(png); err != nil || fi.Size() == 0 {
		t.Errorf("plot: %v", err)
	}

	// A select-only sweep writes no balance and checks none.
	out.Reset()
	cfg.Workload, cfg.Plot = SelectOnly, ""
	if err := Main(ctx, cfg, &out, &log); err != nil {
		t.Fatalf("select-only sweep: %v\nlog:\n%s", err, log.String())
	}
	if !strings.Contains(out.String(), "invariant: not checked") || strings.Contains(out.String(), "invariant (engine)") {
		t.Errorf("select-only sweep's invariant note:\n%s", out.String())
	}

	out.Reset()
	log.Reset()
	cfg.Repeat = 2
	cfg.Sweep = []Axis{{Name: "wal_flusher", Values: []string{"serial", "none"}}}
	cfg.Plot = ""
	if err := Main(ctx, cfg, &out, &log); err != nil {
		t.Fatalf("second sweep: %v\nlog:\n%s", err, log.String())
	}
	if strings.Contains(log.String(), "generating data") {
		t.Errorf("second sweep loaded again:\n%s", log.String())
	}
	rows = tableRows(t, out.String())
	if len(rows) != 2 || rows[0][0] != "serial" || rows[1][0] != "none" || len(rows[0]) != 9 {
		t.Fatalf("rows %q, want serial and none with stddev and runs columns:\n%s", rows, out.String())
	}
	if n := strings.Count(log.String(), " run "); n != 4 {
		t.Errorf("%d runs logged, want 2 cells x 2:\n%s", n, log.String())
	}
}

// TestSweepTargets sweeps the two embedded targets under a disk model:
// each gets its own subdirectory, and pebble's syncs go through the model.
func TestSweepTargets(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	svg := filepath.Join(t.TempDir(), "sweep.svg")
	cfg := Config{
		Target: "engine", Dir: dir, Scale: 1, Accounts: testAccounts, Workload: TPCB,
		Clients: 2, Threads: 1, Transactions: 10,
		Options: TargetOptions{SynchronousCommit: true, Disk: DiskModel{RotationsPerSec: 1000}},
		Sweep:   []Axis{{Name: "target", Values: []string{"engine", "pebble"}}, {Name: "clients", Values: []string{"2", "3"}}},
		Plot:    svg,
	}
	var out, log bytes.Buffer
	if err := Main(ctx, cfg, &out, &log); err != nil {
		t.Fatalf("sweep: %v\nlog:\n%s", err, log.String())
	}
	rows := tableRows(t, out.String())
	if len(rows) != 4 || rows[2][0] != "pebble" || rows[3][1] != "3" || rows[3][3] != "3000" {
		t.Fatalf("rows %q:\n%s", rows, out.String())
	}
	for _, sub := range []string{"engine", "pebble"} {
		if _, err := os.Stat(filepath.Join(dir, sub)); err != nil {
			t.Errorf("no subdirectory for %s: %v", sub, err)
		}
	}
	for _, want := range []string{"invariant (engine): ok", "invariant (pebble): ok"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q:\n%s", want, out.String())
		}
	}
	if b, err := os.ReadFile(svg); err != nil || !bytes.Contains(b, []byte("<svg")) {
		t.Errorf("plot is not an svg: %v", err)
	}
}

// TestSweepTargetsWithRESP sweeps the engine against a RESP server: the
// server is loaded over the wire (no subdirectory is made for it), runs
// once per client count whatever the engine-only knobs, and its invariant
// is checked.
func TestSweepTargetsWithRESP(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	resp := "resp=" + startRESP(t)
	cfg := Config{
		Target: "engine", Dir: dir, Scale: 1, Accounts: testAccounts, Workload: TPCB,
		Clients: 2, Threads: 1, Transactions: 10,
		Options: TargetOptions{SynchronousCommit: true},
		Sweep: []Axis{
			{Name: "target", Values: []string{"engine", resp}},
			{Name: "wal_flusher", Values: []string{"serial", "pipelined"}},
			{Name: "clients", Values: []string{"1", "2"}},
		},
	}
	var out, log bytes.Buffer
	if err := Main(ctx, cfg, &out, &log); err != nil {
		t.Fatalf("sweep: %v\nlog:\n%s", err, log.String())
	}
	var got []string
	for _, r := range tableRows(t, out.String()) {
		got = append(got, strings.Join(r[:3], " "))
	}
	want := []string{"engine serial 1", "engine serial 2", "engine pipelined 1", "engine pipelined 2", "resp  1", "resp  2"}
	if !slices.Equal(got, want) {
		t.Errorf("rows %q, want %q:\n%s", got, want, out.String())
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != "engine" {
		t.Errorf("the sweep's directory holds %v, want the engine's subdirectory only", ents)
	}
	for _, want := range []string{"invariant (engine): ok", "invariant (resp): ok"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q:\n%s", want, out.String())
		}
	}
}

// A sweep over targets refuses a directory holding anything but its
// targets' subdirectories: it would put them inside, say, a loaded data
// directory, which then holds strangers.
func TestSweepTargetsRefuseUsedDirectory(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tg := openTestTarget(t, "engine", dir)
	if err := Load(ctx, tg, 1, testAccounts, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if err := tg.Close(); err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Target: "engine", Dir: dir, Scale: 1, Accounts: testAccounts, Workload: TPCB,
		Clients: 1, Threads: 1, Transactions: 5,
		Sweep: []Axis{{Name: "target", Values: []string{"engine", "pebble"}}},
	}
	var out, log bytes.Buffer
	if err := Main(ctx, cfg, &out, &log); !errors.Is(err, ErrBadSweep) {
		t.Fatalf("sweep over targets in a data directory: %v, want ErrBadSweep", err)
	}
	for _, sub := range []string{"engine", "pebble"} {
		if _, err := os.Stat(filepath.Join(dir, sub)); err == nil {
			t.Errorf("the refused sweep made %s in the data directory", sub)
		}
	}
}

// TestPebbleDiskModel: pebble's WAL syncs go through the model's clock
// rather than to the disk.
func TestPebbleDiskModel(t *testing.T) {
	ctx := context.Background()
	tg, err := OpenTarget("pebble", t.TempDir(), TargetOptions{SynchronousCommit: true, Disk: DiskModel{FsyncLatency: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	if err := Load(ctx, tg, 1, 10, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	before := tg.(*pebbleTarget).disk.Syncs()
	r, err := Run(ctx, tg, RunConfig{Workload: SimpleUpdate, Scale: 1, Accounts: 10, Clients: 1, Transactions: 20, Seed: 1})
	if err != nil || r.Processed != 20 {
		t.Fatalf("run: %v, %+v", err, r)
	}
	if n := tg.(*pebbleTarget).disk.Syncs() - before; n < 20 {
		t.Errorf("20 synchronous commits made %d model syncs, want at least 20", n)
	}
}

// tableRows returns the cells of the markdown table's body rows in s.
func tableRows(t *testing.T, s string) [][]string {
	t.Helper()
	var rows [][]string
	header := true
	for line := range strings.Lines(s) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			continue
		}
		if header || strings.HasPrefix(line, "| ---") {
			header = false
			continue
		}
		var cells []string
		for c := range strings.SplitSeq(strings.Trim(line, "|"), "|") {
			cells = append(cells, strings.TrimSpace(c))
		}
		rows = append(rows, cells)
	}
	return rows
}

// TestCollapse: a knob that does not apply to a target runs once for it,
// shown empty; cells of the engine keep every value.
func TestCollapse(t *testing.T) {
	names := []string{"target", "wal_flusher", "commit_delay", "clients"}
	var cells []sweepCell
	for _, tg := range []string{"engine", "pebble", "postgres=postgres:///x", "resp=127.0.0.1:7379"} {
		for _, f := range []string{"serial", "pipelined"} {
			for _, d := range []string{"0", "10"} {
				for _, n := range []string{"1", "8"} {
					cells = append(cells, sweepCell{cfg: Config{Target: tg}, values: []string{tg, f, d, n}})
				}
			}
		}
	}
	var got []string
	for _, c := range collapse(names, cells) {
		got = append(got, strings.Join(shown(names, c.values), " "))
	}
	want := []string{
		"engine serial 0 1", "engine serial 0 8", "engine serial 10 1", "engine serial 10 8",
		"engine pipelined 0 1", "engine pipelined 0 8", "engine pipelined 10 1", "engine pipelined 10 8",
		"pebble   1", "pebble   8",
		"postgres  0 1", "postgres  0 8", "postgres  10 1", "postgres  10 8",
		"resp   1", "resp   8",
	}
	if !slices.Equal(got, want) {
		t.Errorf("collapse gave\n%q\nwant\n%q", got, want)
	}
}

// TestSweepVM sweeps the engine's visibility map mode: one row per mode,
// and the mode reaches engine.Open (a bad one fails the open).
func TestSweepVM(t *testing.T) {
	ctx := context.Background()
	cfg := Config{
		Target: "engine", Dir: t.TempDir(), Scale: 1, Accounts: testAccounts, Workload: SimpleUpdate,
		Clients: 1, Threads: 1, Transactions: 5,
		Options: TargetOptions{SynchronousCommit: false},
		Sweep:   []Axis{{Name: "vm", Values: []string{"crash-safe", "unlogged"}}},
	}
	var out, log bytes.Buffer
	if err := Main(ctx, cfg, &out, &log); err != nil {
		t.Fatalf("sweep: %v\nlog:\n%s", err, log.String())
	}
	rows := tableRows(t, out.String())
	if len(rows) != 2 || rows[0][0] != "crash-safe" || rows[1][0] != "unlogged" {
		t.Fatalf("rows %q:\n%s", rows, out.String())
	}
	if _, err := OpenTarget("engine", t.TempDir(), TargetOptions{Engine: engine.Options{VisibilityMap: "eventually"}}); err == nil {
		t.Fatal("the engine opened with an unknown visibility map mode")
	}
}

// TestSweepFresh checks --fresh: every run works on its own copy, so the
// loaded directory keeps no history row, the copy is gone afterwards, a
// file that happened to be named like a copy is left alone, and a server
// target is refused.
func TestSweepFresh(t *testing.T) {
	ctx := context.Background()
	parent := t.TempDir()
	dir := filepath.Join(parent, "data")
	precious := filepath.Join(parent, "data.fresh")
	if err := os.WriteFile(precious, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Target: "engine", Dir: dir, Scale: 1, Accounts: testAccounts, Workload: SimpleUpdate,
		Clients: 2, Threads: 1, Transactions: 25, Seed: 7,
		Options: TargetOptions{SynchronousCommit: true, CommitSiblings: 5},
		Sweep:   []Axis{{Name: "wal_flusher", Values: []string{"serial", "pipelined"}}},
		Repeat:  2, Fresh: true,
	}
	var out, log bytes.Buffer
	if err := Main(ctx, cfg, &out, &log); err != nil {
		t.Fatalf("sweep: %v\nlog:\n%s", err, log.String())
	}
	if n := strings.Count(log.String(), " run "); n != 4 {
		t.Errorf("%d runs logged, want 2 cells x 2:\n%s", n, log.String())
	}
	if !strings.Contains(out.String(), "invariant: ok after every completed run") {
		t.Errorf("no invariant note:\n%s", out.String())
	}
	if left, _ := filepath.Glob(dir + ".fresh-*"); len(left) > 0 {
		t.Errorf("run copies left behind: %v", left)
	}
	if b, err := os.ReadFile(precious); err != nil || string(b) != "keep" {
		t.Errorf("%s was touched: %q, %v", precious, b, err)
	}
	tg, err := OpenTarget("engine", dir, cfg.Options)
	if err != nil {
		t.Fatal(err)
	}
	sums, err := tg.Sums(ctx)
	if cerr := tg.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	if sums.HistoryRows != 0 {
		t.Errorf("the loaded directory has %d history rows after fresh runs; the runs wrote to it", sums.HistoryRows)
	}

	cfg.Sweep = []Axis{{Name: "target", Values: []string{"engine", "postgres=postgres://nobody@/x?host=/nonexistent"}}}
	if err := Main(ctx, cfg, &out, &log); !errors.Is(err, ErrBadSweep) {
		t.Errorf("--fresh with a PostgreSQL target: %v, want ErrBadSweep", err)
	}
}

// cancelOn is a log that cancels a context once a line containing sub has
// been written to it: an interrupt at a known point of a sweep.
type cancelOn struct {
	bytes.Buffer
	sub    string
	cancel context.CancelFunc
}

func (c *cancelOn) Write(p []byte) (int, error) {
	n, err := c.Buffer.Write(p)
	if strings.Contains(c.String(), c.sub) {
		c.cancel()
	}
	return n, err
}

// TestSweepInterrupted: a sweep interrupted after its first cell prints the
// table of what ran, says it was interrupted, and returns ErrInterrupted;
// so does a plain run on an ended context.
func TestSweepInterrupted(t *testing.T) {
	dir := t.TempDir()
	clients, err := ParseAxis("clients=1,2")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Target: "engine", Dir: dir, Scale: 1, Accounts: testAccounts, Workload: SimpleUpdate,
		Clients: 1, Threads: 1, Transactions: 5, Seed: 7,
		Options: TargetOptions{CommitSiblings: 5},
		Sweep:   []Axis{clients},
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := &cancelOn{sub: " run 1/1", cancel: cancel}
	var out bytes.Buffer
	err = Main(ctx, cfg, &out, log)
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("interrupted sweep: err = %v, want ErrInterrupted\nlog:\n%s", err, log.String())
	}
	if !strings.Contains(out.String(), "interrupted: the sweep stopped early") || !strings.Contains(out.String(), "invariant (engine): ok") {
		t.Errorf("interrupted sweep's table lacks the interruption note or the invariant:\n%s", out.String())
	}
	if rows := tableRows(t, out.String()); len(rows) != 1 {
		t.Errorf("rows %q, want only the cell that ran:\n%s", rows, out.String())
	}

	// A plain run on the loaded directory.
	cfg.Sweep = nil
	out.Reset()
	err = Main(ctx, cfg, &out, &bytes.Buffer{})
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("interrupted run: err = %v, want ErrInterrupted", err)
	}
}

// The engine's warnings reach the bench's log: a run on a crash copy whose
// CLOG page was damaged says that recovery accepted the page as torn,
// instead of running on as if nothing had happened.
func TestBenchLogsEngineWarnings(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{
		Target: "engine", Dir: dir, Scale: 1, Accounts: testAccounts, Workload: SimpleUpdate,
		Clients: 1, Threads: 1, Transactions: 20, Seed: 7,
		Options: TargetOptions{CommitSiblings: 5},
	}
	if err := Main(context.Background(), cfg, &bytes.Buffer{}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	// Commits after the last checkpoint, then a copy of the directory as
	// a crash would leave it: recovery redoes them on CLOG page 0.
	db, err := engine.Open(dir, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if err := db.Update(context.Background(), func(tx *engine.Txn) error {
			return tx.Put([]byte(fmt.Sprint("extra", i)), []byte("v"))
		}); err != nil {
			t.Fatal(err)
		}
	}
	crash := t.TempDir()
	if err := os.CopyFS(crash, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	db.Close()
	f, err := os.OpenFile(filepath.Join(crash, "clog", "000000000000"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, 1000); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x40
	if _, err := f.WriteAt(b, 1000); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var log bytes.Buffer
	cfg.Dir = crash
	err = Main(context.Background(), cfg, &bytes.Buffer{}, &log)
	if !strings.Contains(log.String(), "level=WARN") || !strings.Contains(log.String(), "as torn") {
		t.Errorf("run on a damaged CLOG page (err %v) logged no warning:\n%s", err, log.String())
	}
}

func TestCompareVariants(t *testing.T) {
	runs := func(tps ...float64) []*Results {
		var out []*Results
		for _, x := range tps {
			out = append(out, &Results{TPS: x, Elapsed: time.Second})
		}
		return out
	}
	table := &SweepTable{
		Axes: []string{"vm", "clients"},
		Rows: []SweepRow{
			{Values: []string{"crash-safe", "1"}, Clients: 1, Runs: runs(1000, 1100, 900)},
			{Values: []string{"crash-safe", "8"}, Clients: 8, Runs: runs(5000, 5010, 4990)},
			{Values: []string{"crash-safe", "32"}, Clients: 32, Runs: runs(7000)},
			{Values: []string{"unlogged", "1"}, Clients: 1, Runs: runs(1050, 950, 1150)},
			{Values: []string{"unlogged", "8"}, Clients: 8, Runs: runs(6000, 6010, 5990)},
			{Values: []string{"unlogged", "32"}, Clients: 32, Runs: runs(7100, 7200)},
		},
	}
	got := CompareVariants(table)
	want := []string{
		"vm crash-safe vs unlogged at clients=1: 1000 vs 1050 tps (+5.0%), stddev 100 and 100: within the run-to-run variation",
		"vm crash-safe vs unlogged at clients=8: 5000 vs 6000 tps (+20.0%), stddev 10 and 10: the difference EXCEEDS the run-to-run variation",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("CompareVariants:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// Three values, or a clients-only sweep: nothing to compare.
	table.Rows[3].Values[0] = "other"
	if got := CompareVariants(table); len(got) != 0 {
		t.Fatalf("three variants: %q", got)
	}
	if got := CompareVariants(&SweepTable{Axes: []string{"clients"}, Rows: []SweepRow{{Values: []string{"1"}, Runs: runs(1, 2)}}}); len(got) != 0 {
		t.Fatalf("clients only: %q", got)
	}
}

// TestSweepTakesSettingNames: the engine settings' own names work as sweep
// knobs, beside the short ones.
func TestSweepTakesSettingNames(t *testing.T) {
	for _, c := range [][2]string{{"visibility_map", "unlogged"}, {"clog_locking", "global"}, {"clog_group_update", "off"}} {
		a, err := ParseAxis(c[0] + "=" + c[1])
		if err != nil {
			t.Fatalf("%s: %v", c[0], err)
		}
		var cfg Config
		if err := knobs[a.Name](&cfg, a.Values[0]); err != nil {
			t.Fatalf("%s=%s: %v", c[0], c[1], err)
		}
		if !knobApplies(a.Name, "engine") || knobApplies(a.Name, "pebble") {
			t.Errorf("%s applies to the wrong targets", a.Name)
		}
	}
	var cfg Config
	if err := knobs["clog_locking"](&cfg, "sometimes"); err == nil {
		t.Error("clog_locking=sometimes accepted")
	}
	if cfg.Options.Engine.CLOGLocking != "" {
		t.Errorf("a refused value changed the options: %q", cfg.Options.Engine.CLOGLocking)
	}
}
