package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"mvkv/bench"
	"mvkv/engine"
)

func TestBenchHelp(t *testing.T) {
	var out, errb bytes.Buffer
	// -? is pgbench's.
	if code := run([]string{"bench", "-?"}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "mvkv bench is ") {
		t.Errorf("-?: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	if code := run([]string{"bench", "-h"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errb.String())
	}
	for _, want := range []string{"Usage:\n  mvkv bench [OPTION]...", "-c, --client=NUM", "-T, --time=NUM", "--target=engine|pebble"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("usage lacks %q:\n%s", want, out.String())
		}
	}
}

func TestUnknownCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"frobnicate"}, &out, &errb); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
	if !strings.Contains(errb.String(), `unknown command "frobnicate"`) {
		t.Errorf("stderr: %s", errb.String())
	}
}

func TestBenchUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-t", "5", "-T", "5"},
		{"-N", "-S"},
		{"-c", "0"},
		{"-t", "4611686018427387904", "-c", "2"},
		{"-t", "2147483648"},
		{"-c", "100000000"},
		{"-s", "100000"},
		{"-s", "99999999999"},
		{"-T", "9300000000"},
		{"-P", "18446744073"},
		{"-P", "0"},
		{"--shared-buffers", "0"},
		{"--shared-buffers", "1B"},
		{"--sweep", "clients=1,20000"},
		{"-i"},
		{"--synchronous-commit", "maybe"},
		{"--shared-buffers", "12XB"},
		{"--no-such-flag"},
		{"extra"},
		{"--wal-flusher", "eager"},
		{"--visibility-map", "sometimes"},
		{"--sweep", "vm=unlogged,lazy"},
		{"--commit-delay", "soon"},
		{"--commit-delay", "100001"},
		{"--fsync-latency", "4"},
		{"--disk-rotation", "-250"},
		{"--fsync-latency", "1h"},
		{"--disk-rotation", "0.001"},
		{"--disk-rotation", "NaN"},
		{"--sweep", "clients"},
		{"--sweep", "shared_buffers=1,2"},
		{"--sweep", "clients=0,1"},
		{"--repeat", "0"},
		{"--plot", "tps.txt", "--sweep", "clients=1,2"},
		{"--plot", "/nonexistent-dir/tps.png", "--sweep", "clients=1,2"},
		{"--sweep", "clients=1,2", "--sweep", "clients=3"},
		{"-i", "--dir", "x", "--sweep", "clients=1,2"},
		{"--clog-locking", "striped"},
		{"--clog-group-update", "sometimes"},
		{"--sweep", "clog=global,bank+groups"},
		{"--pivot"},
		{"--pivot", "--sweep", "clog=global,bank"},
		{"--fresh"},
		{"-i", "--dir", "x", "--fresh"},
		{"-i", "--dir", "x", "-c", "4"},
		{"-i", "--dir", "x", "-T", "5"},
		{"-i", "--dir", "x", "-N"},
		{"-i", "--dir", "x", "-b", "select-only"},
		{"--autovacuum-naptime", "0"},
		{"--autovacuum-naptime", "-5s"},
		{"--autovacuum-naptime", "soon"},
		{"--autovacuum-vacuum-scale-factor", "-0.5"},
		{"--autovacuum-vacuum-scale-factor", "NaN"},
		{"--vacuum-freeze-min-age", "-1"},
		{"--vacuum-freeze-min-age", "1000000001"},
		{"--vacuum-freeze-table-age", "-1"},
		{"--vacuum-freeze-table-age", "2000000001"},
		{"--target", "nope"},
		{"--resp-mode", "weird"},
		// Options that contradict each other, where one was ignored.
		{"-c", "3", "--sweep", "clients=1,2"},
		{"--commit-delay", "10", "--sweep", "commit_delay=0,10"},
		{"--fsync-latency", "1ms", "--disk-rotation", "100"},
		{"--resp-mode", "watch"},
		{"--resp-mode", "watch", "--sweep", "target=engine,pebble"},
	} {
		var out, errb bytes.Buffer
		if code := run(append([]string{"bench"}, args...), &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (stderr %s)", args, code, errb.String())
		}
	}
}

// --resp-mode applies when a sweep's targets include a RESP server: the
// run goes as far as connecting to it (nothing listens at the address).
func TestBenchRESPModeWithSweptTarget(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var out, errb bytes.Buffer
	args := []string{"bench", "--dir", t.TempDir(), "--resp-mode", "watch", "-t", "1", "--sweep", "target=resp=" + addr}
	code := run(args, &out, &errb)
	if code == 0 || code == 2 || !strings.Contains(errb.String(), addr) {
		t.Errorf("exit %d, want a failed connection to %s (stderr %s)", code, addr, errb.String())
	}
}

// More threads than clients is not an error, as in pgbench: the run takes
// one thread per client.
func TestBenchMoreThreadsThanClients(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	var out, errb bytes.Buffer
	args := []string{"bench", "--dir", dir, "--shared-buffers=16MB", "--synchronous-commit=off", "-c", "2", "-j", "4", "-t", "5"}
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "number of threads: 2\n") {
		t.Errorf("report lacks %q:\n%s", "number of threads: 2", out.String())
	}
}

// -b picks one of pgbench's builtin scripts by name or prefix, and
// "-b list" lists them as pgbench does; pgbench's options mvkv bench does
// not take are named as such.
func TestBenchBuiltinAndPgbenchOptions(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"bench", "-b", "list"}, &out, &errb); code != 0 || !strings.Contains(errb.String(), "  simple-update: <builtin: simple update>\n") {
		t.Errorf("-b list: exit %d, stderr %q", code, errb.String())
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-b", "s"}, "ambiguous builtin name: 2 builtin scripts found for prefix \"s\""},
		{[]string{"-b", "nope"}, "no builtin script found for name \"nope\""},
		{[]string{"-b", "tpcb-like@0"}, "total script weight must not be zero"},
		{[]string{"-b", "tpcb-like@x"}, "invalid weight specification"},
		{[]string{"-b", "simple", "-b", "select"}, "one script per run"},
		{[]string{"-b", "select", "-N"}, "one script per run"},
		{[]string{"-f", "x.sql"}, "mvkv bench: -f is a pgbench option mvkv bench does not take: custom scripts"},
		{[]string{"--file=x.sql"}, "mvkv bench: --file is a pgbench option"},
		{[]string{"-r"}, "mvkv bench: -r is a pgbench option"},
		{[]string{"-l"}, "mvkv bench: -l is a pgbench option"},
		{[]string{"-R", "100"}, "mvkv bench: -R is a pgbench option"},
		{[]string{"-U", "postgres"}, "mvkv bench: -U is a pgbench option"},
	} {
		out.Reset()
		errb.Reset()
		if code := run(append([]string{"bench"}, c.args...), &out, &errb); code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", c.args, code, errb.String(), c.want)
		}
	}
	out.Reset()
	errb.Reset()
	dir := filepath.Join(t.TempDir(), "data")
	args := []string{"bench", "--dir", dir, "--shared-buffers=16MB", "--synchronous-commit=off", "-b", "select-o@5", "-t", "5"}
	if code := run(args, &out, &errb); code != 0 || !strings.Contains(out.String(), "transaction type: <builtin: select only>\n") {
		t.Errorf("-b select-o@5: exit %d, stdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
}

// A --cpuprofile or --plot file in the data directory is refused before
// anything is written: it could overwrite one of the directory's files.
func TestBenchOutputFileInDataDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	var out, errb bytes.Buffer
	if code := run([]string{"bench", "-i", "--dir", dir}, &out, &errb); code != 0 {
		t.Fatalf("-i: exit %d: %s", code, errb.String())
	}
	before, err := os.ReadFile(filepath.Join(dir, "control"))
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--cpuprofile", filepath.Join(dir, "control"), "-t", "1"},
		{"--cpuprofile", filepath.Join(dir, "heap", "..", "new.prof"), "-t", "1"},
		{"--plot", filepath.Join(dir, "control.png"), "--sweep", "clients=1", "-t", "1"},
	} {
		out.Reset()
		errb.Reset()
		if code := run(append([]string{"bench", "--dir", dir}, args...), &out, &errb); code != 2 || !strings.Contains(errb.String(), "is in the data directory") {
			t.Errorf("%v: exit %d, stderr %q; want exit 2, refused", args, code, errb.String())
		}
	}
	if after, err := os.ReadFile(filepath.Join(dir, "control")); err != nil || !bytes.Equal(after, before) {
		t.Fatalf("control file changed: %v", err)
	}
	if !inDir(filepath.Join(dir, "x"), dir+"/") || inDir(dir+"-other/x", dir) || inDir(filepath.Join(dir, "..", "x"), dir) {
		t.Errorf("inDir is wrong")
	}
}

// TestBenchRun loads scale 1 (100,000 accounts) into each target once and
// runs each workload on it through the command line.
func TestBenchRun(t *testing.T) {
	for _, target := range []string{"pebble", "engine"} {
		t.Run(target, func(t *testing.T) { testBenchRun(t, target) })
	}
}

func testBenchRun(t *testing.T, target string) {
	dir := filepath.Join(t.TempDir(), "data")
	var out, errb bytes.Buffer
	if code := run([]string{"bench", "--target", target, "--dir", dir, "-i", "-s", "1", "--synchronous-commit", "off"}, &out, &errb); code != 0 {
		if strings.Contains(errb.String(), "not yet implemented") {
			t.Skipf("%s: %s", target, errb.String())
		}
		t.Fatalf("-i: exit %d: %s", code, errb.String())
	}
	for _, w := range [][]string{nil, {"-N"}, {"-S"}} {
		out.Reset()
		errb.Reset()
		args := append([]string{"bench", "--target=" + target, "--dir=" + dir, "--shared-buffers=16MB", "-c", "4", "-j", "2", "-t", "20"}, w...)
		if code := run(args, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", w, code, errb.String())
		}
		wants := []string{"number of threads: 2\n", "processed: 80/80\n", "invariant: ok"}
		if target == "engine" {
			wants = append(wants, "heap pages holding accounts, tellers or branches rows at end: ", "pruning during run: ")
		}
		if len(w) > 0 && w[0] == "-S" {
			// A select-only run reads no table's usage and checks no balance.
			wants = []string{"number of threads: 2\n", "processed: 80/80\n", "invariant: not checked"}
			if target == "engine" {
				wants = append(wants, "pruning during run: ", "open time = ", "index file loaded, ")
			}
		}
		for _, want := range wants {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%v: report lacks %q:\n%s", w, want, out.String())
			}
		}
	}

	// A sweep on the loaded directory under a simulated disk, with a plot.
	out.Reset()
	errb.Reset()
	plot := filepath.Join(t.TempDir(), "tps.svg")
	args := []string{"bench", "--target=" + target, "--dir=" + dir, "--shared-buffers=16MB", "-N", "-t", "10",
		"--fsync-latency=1ms", "--sweep", "clients=1,2", "--sweep=synchronous-commit=on", "--repeat=2", "--plot", plot}
	if target == "engine" {
		args = append(args, "--wal-flusher=serial", "--commit-delay=0")
	}
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("sweep: exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"| synchronous_commit | clients | tps | ± | runs | calc | ratio | syncs/s | commits/sync | WAL B/txn |\n", "| on | 2 | ", " | 2000 | ", "invariant (" + target + "): ok"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("sweep output lacks %q:\n%s", want, out.String())
		}
	}
	if fi, err := os.Stat(plot); err != nil || fi.Size() == 0 {
		t.Errorf("plot: %v", err)
	}
}

// An interrupted bench exits as a shell reports a command killed by the
// signal (130 for SIGINT, 143 for SIGTERM) and says so; an ended context
// without a signal exits 1. Before, an interrupted sweep exited 0.
func TestBenchStatusInterrupted(t *testing.T) {
	for _, tc := range []struct {
		cause error
		want  int
	}{
		{signalCause{os.Interrupt}, 130},
		{signalCause{syscall.SIGTERM}, 143},
		{context.Canceled, 1},
	} {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(tc.cause)
		var errb bytes.Buffer
		err := fmt.Errorf("%w: %w", bench.ErrInterrupted, context.Canceled)
		if got := benchStatus(ctx, err, &errb); got != tc.want {
			t.Errorf("%v: exit %d, want %d", tc.cause, got, tc.want)
		}
		if s := errb.String(); !strings.HasPrefix(s, "mvkv bench: interrupted") || strings.Count(s, "bench:") != 1 {
			t.Errorf("%v: stderr %q, want one line saying it was interrupted", tc.cause, s)
		}
	}
}

// An interrupt after the report says the report is incomplete; one before
// any (during the load or the reads before the run) says there is none,
// instead of pointing at results above that were never written.
func TestBenchStatusInterruptedBeforeResults(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(signalCause{os.Interrupt})
	for _, tc := range []struct {
		err  error
		want string
	}{
		{bench.ErrInterrupted, "the above results are incomplete"},
		{fmt.Errorf("%w: %w", bench.ErrInterrupted, fmt.Errorf("bench: read the balances before the run: %w", context.Canceled)), "no results"},
	} {
		var errb bytes.Buffer
		if got := benchStatus(ctx, tc.err, &errb); got != 130 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 130 and %q", tc.err, got, errb.String(), tc.want)
		}
	}
}

// signalContext ends its context on the signal and names it as the cause.
func TestSignalContext(t *testing.T) {
	ctx, stop := signalContext(context.Background(), syscall.SIGUSR1)
	defer stop()
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	<-ctx.Done()
	var sig signalCause
	if !errors.As(context.Cause(ctx), &sig) || sig.sig != syscall.SIGUSR1 {
		t.Fatalf("cause %v, want SIGUSR1", context.Cause(ctx))
	}
}

// signalChildEnv, when set, makes the test binary run signalChild instead
// of the tests.
const signalChildEnv = "MVKV_SIGNAL_CHILD"

// signalChild waits for SIGINT through signalContext, says so, and then
// takes its time, as bench does reporting an interrupted run.
func signalChild() {
	ctx, stop := signalContext(context.Background(), os.Interrupt)
	defer stop()
	fmt.Println("ready")
	<-ctx.Done()
	fmt.Println("interrupted")
	time.Sleep(20 * time.Second)
	os.Exit(0)
}

// A second SIGINT kills a process whose first one signalContext caught,
// instead of being ignored until the report and the checks are done.
func TestSignalContextSecondSignalKills(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), signalChildEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	for _, want := range []string{"ready", "interrupted"} {
		if want == "interrupted" {
			cmd.Process.Signal(os.Interrupt)
		}
		if !sc.Scan() || sc.Text() != want {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("child said %q, want %q", sc.Text(), want)
		}
	}
	start := time.Now()
	cmd.Process.Signal(os.Interrupt)
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGINT || time.Since(start) > 10*time.Second {
		t.Fatalf("after a second SIGINT the child ended with %v after %v; want it killed by the signal at once", err, time.Since(start))
	}
}

// Errors carry one prefix: the command's, not also the package's
// ("mvkv bench: bench: bad sweep").
func TestBenchErrorOnePrefix(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--sweep", "clients=0,1"}, "mvkv bench: bad sweep: clients=0: "},
		{[]string{"--sweep", "shared_buffers=1,2"}, "for flag --sweep: bad sweep: unknown knob"},
		{[]string{"--plot", "tps.txt", "--sweep", "clients=1,2"}, "mvkv bench: invalid --plot: cannot plot: "},
	} {
		var out, errb bytes.Buffer
		if code := run(append([]string{"bench"}, tc.args...), &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2", tc.args, code)
		}
		if s := errb.String(); !strings.Contains(s, tc.want) || strings.Contains(s, "bench: bench:") || strings.Contains(s, ": bench: ") {
			t.Errorf("%v: stderr %q, want it to contain %q with one prefix", tc.args, s, tc.want)
		}
	}
	if got := errText(fmt.Errorf("%w: x", bench.ErrBadSweep)); got != "bad sweep: x" {
		t.Errorf("errText = %q", got)
	}
}

// TestBenchRefusesForeignData: a directory that holds keys other than
// pgbench's (here ones mvkv serve could have written, "b:x" under the
// branches' prefix too, which is no branch) is refused, with -i and
// without, instead of loading 100,000 rows beside them; nothing is
// written to it.
func TestBenchRefusesForeignData(t *testing.T) {
	for _, key := range []string{"user:1", "b:x"} {
		dir := filepath.Join(t.TempDir(), "data")
		db, err := engine.Open(dir, engine.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Update(context.Background(), func(tx *engine.Txn) error { return tx.Put([]byte(key), []byte("x")) }); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		for _, extra := range [][]string{{"-i"}, {"-t", "5"}} {
			var out, errb bytes.Buffer
			args := append([]string{"bench", "--target", "engine", "--dir", dir}, extra...)
			if code := run(args, &out, &errb); code == 0 || !strings.Contains(errb.String(), `holds key "`+key+`"`) {
				t.Fatalf("%s, %v: exit %d: %s", key, extra, code, errb.String())
			}
		}
		db, err = engine.Open(dir, engine.Options{})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		db.View(context.Background(), func(tx *engine.Txn) error {
			return tx.Scan(nil, nil, func(_, _ []byte) bool { n++; return true })
		})
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Fatalf("%s: %d keys after the refused runs, want 1", key, n)
		}
	}
}
