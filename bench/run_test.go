package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"mvkv/engine"
)

// testAccounts keeps loads small: 2,000 accounts per scale unit instead of
// 100,000; tellers and branches are pgbench's.
const testAccounts = 2000

// openTestTarget opens name in a fresh directory, skipping the test while
// the engine is not implemented yet.
func openTestTarget(t *testing.T, name, dir string) Target {
	t.Helper()
	tg, err := OpenTarget(name, dir, TargetOptions{SynchronousCommit: true})
	if err != nil {
		if strings.Contains(err.Error(), "not yet implemented") {
			t.Skipf("%s target: %v", name, err)
		}
		t.Fatal(err)
	}
	return tg
}

func testWorkloads(t *testing.T, name string) {
	ctx := context.Background()
	dir := t.TempDir()
	tg := openTestTarget(t, name, dir)
	defer func() {
		if err := tg.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}()
	if s, err := tg.DetectScale(ctx); err != nil || s != 0 {
		t.Fatalf("DetectScale on an empty directory = %d, %v; want 0", s, err)
	}
	var log bytes.Buffer
	if err := Load(ctx, tg, 2, testAccounts, &log); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "4000 of 4000 tuples (100%) done") || !strings.Contains(log.String(), "done in ") {
		t.Errorf("load log lacks pgbench's lines:\n%s", log.String())
	}
	if s, err := tg.DetectScale(ctx); err != nil || s != 2 {
		t.Fatalf("DetectScale = %d, %v; want 2", s, err)
	}
	var history int64 // rows expected in history
	for _, w := range []Workload{TPCB, SimpleUpdate, SelectOnly} {
		t.Run(w.Builtin(), func(t *testing.T) {
			before, err := tg.Sums(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var plog bytes.Buffer
			r, err := Run(ctx, tg, RunConfig{
				Workload: w, Scale: 2, Accounts: testAccounts,
				Clients: 6, Threads: 2, Transactions: 150, Log: &plog, Seed: 1,
			})
			if err != nil {
				t.Fatal(err)
			}
			if r.Aborted != 0 || r.Failed != 0 {
				t.Fatalf("aborted %d clients, %d failed transactions; log:\n%s", r.Aborted, r.Failed, plog.String())
			}
			if r.Processed != 6*150 || r.TPS <= 0 || r.Threads != 2 {
				t.Fatalf("processed %d, tps %f, threads %d; want 900, > 0, 2", r.Processed, r.TPS, r.Threads)
			}
			s, err := tg.Sums(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if inv := CheckInvariant(s); !inv.OK {
				t.Fatalf("invariant violated: %+v", s)
			}
			switch w {
			case TPCB:
				history += r.Processed
				if s.Tellers != s.Accounts {
					t.Errorf("after TPC-B only, tellers %d != accounts %d", s.Tellers, s.Accounts)
				}
			case SimpleUpdate:
				history += r.Processed
				if s.Tellers != before.Tellers || s.Branches != before.Branches {
					t.Errorf("simple update changed tellers or branches: %+v -> %+v", before, s)
				}
			case SelectOnly:
				if s != before {
					t.Errorf("select only changed the sums: %+v -> %+v", before, s)
				}
			}
			if s.HistoryRows != history {
				t.Errorf("history has %d rows, want %d", s.HistoryRows, history)
			}
			var rep bytes.Buffer
			r.Invariant = CheckInvariant(s)
			if err := WriteReport(&rep, r); err != nil {
				t.Fatal(err)
			}
			t.Logf("\n%s", rep.String())
		})
	}
}

func TestPebbleWorkloads(t *testing.T) { testWorkloads(t, "pebble") }
func TestEngineWorkloads(t *testing.T) { testWorkloads(t, "engine") }

// TestMainDirectory checks Main's directory handling: an empty directory is
// loaded, a loaded one keeps its scale (with a notice) and its history keys
// never collide with an earlier run's, -i refuses a loaded directory, and a
// damaged balance is reported as a violated invariant by a run that writes
// (a select-only run does not check it).
func TestMainDirectory(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cfg := Config{
		Target: "pebble", Dir: dir, Options: TargetOptions{SynchronousCommit: false},
		Scale: 1, Accounts: testAccounts, Clients: 3, Threads: 1,
		Duration: 300 * time.Millisecond, Progress: 100 * time.Millisecond,
	}
	var out, log bytes.Buffer
	if err := Main(ctx, cfg, &out, &log); err != nil {
		t.Fatalf("first run: %v\n%s", err, log.String())
	}
	if !strings.Contains(log.String(), "generating data") || !strings.Contains(log.String(), "progress: ") {
		t.Errorf("first run did not load or report progress:\n%s", log.String())
	}
	for _, want := range []string{"target: pebble\n", "duration: 0 s\n", "invariant: ok"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}

	out.Reset()
	log.Reset()
	cfg.Scale, cfg.ScaleSet = 5, true
	cfg.Duration, cfg.Transactions = 0, 50
	if err := Main(ctx, cfg, &out, &log); err != nil {
		t.Fatalf("second run: %v", err)
	}
	if strings.Contains(log.String(), "generating data") {
		t.Errorf("second run loaded again:\n%s", log.String())
	}
	if !strings.Contains(log.String(), "scale option ignored, using count from branches (1)") ||
		!strings.Contains(out.String(), "scaling factor: 1\n") ||
		!strings.Contains(out.String(), "processed: 150/150\n") {
		t.Errorf("second run did not keep scale 1:\nlog:\n%s\nreport:\n%s", log.String(), out.String())
	}

	cfg.Initialize = true
	if err := Main(ctx, cfg, &out, &log); !errors.Is(err, ErrAlreadyLoaded) {
		t.Errorf("-i on a loaded directory: err = %v, want ErrAlreadyLoaded", err)
	}
	cfg.Initialize = false

	// Damage one account: the check must notice.
	tg := openTestTarget(t, "pebble", dir)
	if err := tg.LoadBatch(ctx, []KV{{accountKey(17), accountValue(1_000_000, 1)}}, true); err != nil {
		t.Fatal(err)
	}
	if err := tg.Close(); err != nil {
		t.Fatal(err)
	}
	// A select-only run has no invariant to check and says so.
	out.Reset()
	cfg.Workload = SelectOnly
	if err := Main(ctx, cfg, &out, &log); err != nil {
		t.Errorf("select-only run on a damaged balance: %v", err)
	}
	if !strings.Contains(out.String(), "invariant: not checked") {
		t.Errorf("select-only report does not say the invariant was not checked:\n%s", out.String())
	}
	out.Reset()
	cfg.Workload = SimpleUpdate
	if err := Main(ctx, cfg, &out, &log); !errors.Is(err, ErrInvariantViolated) {
		t.Errorf("damaged balance: err = %v, want ErrInvariantViolated", err)
	}
	if !strings.Contains(out.String(), "invariant: VIOLATED") {
		t.Errorf("report does not say VIOLATED:\n%s", out.String())
	}
}

// TestRunAbortsClientOnMissingRow: running with more accounts than were
// loaded makes clients hit missing rows, which pgbench treats as an abort,
// not as a failed transaction.
func TestRunAbortsClientOnMissingRow(t *testing.T) {
	ctx := context.Background()
	tg := openTestTarget(t, "pebble", t.TempDir())
	defer tg.Close()
	if err := Load(ctx, tg, 1, 10, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	r, err := Run(ctx, tg, RunConfig{Workload: SimpleUpdate, Scale: 1, Accounts: 100000, Clients: 2, Transactions: 50, Log: &log, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if r.Aborted != 2 || r.Failed != 0 || !strings.Contains(log.String(), "aborted") {
		t.Fatalf("aborted %d, failed %d; want 2, 0; log:\n%s", r.Aborted, r.Failed, log.String())
	}
}

// TestProgressReportsLastInterval checks that the interval ending with the
// run is reported even when the run's end beats the last tick.
func TestProgressReportsLastInterval(t *testing.T) {
	for i := range 3 {
		cfg := Config{
			Target: "pebble", Dir: t.TempDir(), Options: TargetOptions{SynchronousCommit: false},
			Scale: 1, Accounts: testAccounts, Clients: 2, Threads: 1,
			Duration: 400 * time.Millisecond, Progress: 200 * time.Millisecond,
		}
		var out, log bytes.Buffer
		if err := Main(context.Background(), cfg, &out, &log); err != nil {
			t.Fatalf("run %d: %v\n%s", i, err, log.String())
		}
		var last float64
		for _, line := range strings.Split(log.String(), "\n") {
			var at float64
			if _, err := fmt.Sscanf(line, "progress: %f s,", &at); err == nil {
				last = at
			}
		}
		if last < 0.39 {
			t.Fatalf("run %d: last progress line at %.1f s of a 0.4 s run:\n%s", i, last, log.String())
		}
	}
}

// A directory whose load was cut short (branches written, accounts not)
// is refused with ErrIncompleteLoad, by a run and by -i alike.
func TestIncompleteLoadIsRefused(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tg, err := OpenTarget("pebble", dir, TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rows := []KV{{branchKey(1), branchValue(0)}, {tellerKey(1), tellerValue(0, 1)}}
	if err := tg.LoadBatch(ctx, rows, true); err != nil {
		t.Fatal(err)
	}
	if err := tg.Close(); err != nil {
		t.Fatal(err)
	}
	for _, init := range []bool{false, true} {
		cfg := Config{
			Target: "pebble", Dir: dir, Initialize: init,
			Scale: 1, Accounts: testAccounts, Clients: 1, Threads: 1,
			Duration: 100 * time.Millisecond,
		}
		var out, log bytes.Buffer
		err := Main(ctx, cfg, &out, &log)
		if !errors.Is(err, ErrIncompleteLoad) {
			t.Fatalf("-i %v: %v, want ErrIncompleteLoad\n%s", init, err, log.String())
		}
	}
}

// A directory holding one store is refused by the other target, which
// would write its own files beside them.
func TestTargetRefusesTheOtherStore(t *testing.T) {
	pdir, edir := t.TempDir(), t.TempDir()
	for _, c := range []struct{ target, dir string }{{"pebble", pdir}, {"engine", edir}} {
		tg, err := OpenTarget(c.target, c.dir, TargetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := tg.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ target, dir, want string }{{"engine", pdir, "pebble store"}, {"pebble", edir, "mvkv data directory"}} {
		if tg, err := OpenTarget(c.target, c.dir, TargetOptions{}); err == nil || !strings.Contains(err.Error(), c.want) {
			if tg != nil {
				tg.Close()
			}
			t.Errorf("%s target on a directory of the other: %v; want an error naming the %s", c.target, err, c.want)
		}
	}
}

// flakyTarget's clients fail every other TPC-B try with a serialization
// failure before touching the store, as a transaction that lost a race
// would.
type flakyTarget struct{ Target }

func (f flakyTarget) NewClient(ctx context.Context) (Client, error) {
	c, err := f.Target.NewClient(ctx)
	return &flakyClient{Client: c}, err
}

type flakyClient struct {
	Client
	tries int
}

func (c *flakyClient) TPCB(ctx context.Context, p *TxnParams, simple bool) error {
	if c.tries++; c.tries%2 == 1 {
		return fmt.Errorf("%w: lost a race (test)", engine.ErrSerializationFailure)
	}
	return c.Client.TPCB(ctx, p, simple)
}

// TestMaxTries: with --max-tries 1 every other transaction fails; with 2
// each failed try is run again with the same values and commits, counted
// as retried, and the run's commits still match what the tables gained.
func TestMaxTries(t *testing.T) {
	ctx := context.Background()
	tg := openTestTarget(t, "pebble", t.TempDir())
	defer tg.Close()
	if err := Load(ctx, tg, 1, testAccounts, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tries                            int
		processed, failed, retried, rtry int64
	}{
		{1, 100, 100, 0, 0},
		{2, 200, 0, 200, 200},
	} {
		before, err := tg.Sums(ctx)
		if err != nil {
			t.Fatal(err)
		}
		r, err := Run(ctx, flakyTarget{tg}, RunConfig{Workload: TPCB, Scale: 1, Accounts: testAccounts, Clients: 2, Transactions: 100, MaxTries: c.tries, Seed: 5})
		if err != nil {
			t.Fatal(err)
		}
		if r.Processed != c.processed || r.Failed != c.failed || r.Retried != c.retried || r.Retries != c.rtry {
			t.Errorf("--max-tries %d: %d processed, %d failed, %d retried, %d retries; want %d, %d, %d, %d",
				c.tries, r.Processed, r.Failed, r.Retried, r.Retries, c.processed, c.failed, c.retried, c.rtry)
		}
		after, err := tg.Sums(ctx)
		if err != nil {
			t.Fatal(err)
		}
		inv := CheckInvariant(after)
		inv.CheckRun(before, *r.Applied)
		if !inv.OK {
			t.Errorf("--max-tries %d: invariant %+v, run %+v", c.tries, inv, inv.Run)
		}
		var out bytes.Buffer
		if err := WriteReport(&out, r); err != nil {
			t.Fatal(err)
		}
		retried := strings.Contains(out.String(), "number of transactions retried: 200 (100.000%)\ntotal number of retries: 200\n")
		if !strings.Contains(out.String(), fmt.Sprintf("maximum number of tries: %d\n", c.tries)) || retried != (c.tries > 1) {
			t.Errorf("--max-tries %d: report\n%s", c.tries, out.String())
		}
	}
}

// With --max-tries other than 1 a progress line counts the interval's
// retried transactions and retries, as pgbench 15's does; with 1 it does
// not.
func TestProgressCountsRetries(t *testing.T) {
	ctx := context.Background()
	tg := openTestTarget(t, "pebble", t.TempDir())
	defer tg.Close()
	if err := Load(ctx, tg, 1, testAccounts, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	for _, tries := range []int{1, 2} {
		var log bytes.Buffer
		_, err := Run(ctx, flakyTarget{tg}, RunConfig{Workload: TPCB, Scale: 1, Accounts: testAccounts, Clients: 1,
			Duration: 300 * time.Millisecond, Progress: 100 * time.Millisecond, MaxTries: tries, Seed: 5, Log: &log})
		if err != nil {
			t.Fatal(err)
		}
		lines := 0
		for _, line := range strings.Split(log.String(), "\n") {
			if !strings.HasPrefix(line, "progress: ") {
				continue
			}
			lines++
			if has := strings.Contains(line, " retried, ") && strings.HasSuffix(line, " retries"); has != (tries > 1) {
				t.Errorf("--max-tries %d: progress line %q", tries, line)
			}
		}
		if lines == 0 {
			t.Errorf("--max-tries %d: no progress line:\n%s", tries, log.String())
		}
	}
}

// A lock timeout is known to have rolled its transaction back, so the
// run's changes can still be compared; any other error leaves the commit
// open.
func TestRolledBack(t *testing.T) {
	if !rolledBack(fmt.Errorf("update: %w", engine.ErrLockTimeout)) {
		t.Error("a wrapped engine.ErrLockTimeout is not taken as rolled back")
	}
	for _, err := range []error{engine.ErrWALSyncFailed, errors.New("connection reset"), context.Canceled} {
		if rolledBack(err) {
			t.Errorf("%v taken as rolled back", err)
		}
	}
}
