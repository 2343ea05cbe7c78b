package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"mvkv/crashtest"
)

const crashtestUsage = `mvkv crashtest runs a randomized crash-recovery test and gives a verdict.

Usage:
  mvkv crashtest [--mode power|kill|server] [--duration D] [--cycles N]
                 [--seed S] [--clients N] [--dir DIR] [--cpuprofile FILE]

Each cycle runs a seeded workload of concurrent clients (single-key writes,
counter increments, multi-key transactions, deletes, values up to 100 KB,
reads, vacuums and checkpoints), crashes it at a random moment, restarts,
and checks: every acknowledged commit is present, nothing unacknowledged is
visible in part, counters are exact (or within the increments still in
doubt at the crash), multi-key transactions are all-or-nothing, verify
finds nothing, and the history of single-key operations with the reads
after the restart is linearizable (porcupine).

Modes:
  power    the engine in this process on an in-memory file system; several
           simulated power losses a cycle, each dropping unsynced writes,
           keeping a random subset, or tearing the last write at 512 bytes
  kill     the engine in a child process on DIR, killed with SIGKILL
  server   "mvkv serve" on DIR as a child, driven by RESP clients, kill -9

Options:
  --mode M        power, kill or server (default power)
  --duration D    stop starting cycles after D (e.g. 60s); default (and
                  0) 60s unless --cycles is given
  --cycles N      stop after N cycles; 0 (the default): no limit but
                  --duration's
  --seed S        the workload and crash-moment seed (default: random,
                  printed)
  --clients N     concurrent clients (default 4)
  --dir DIR       the data directory for kill and server modes, and where
                  power mode writes a failing crash copy (must be new or
                  empty; default a temporary one, removed after a PASS)
  --cpuprofile F  write a CPU profile of the run to F, not inside --dir (go
                  tool pprof reads it)

It prints a line per cycle, then PASS or FAIL with the seed; on failure the
problems, the shortest operation list found that still fails (replayed in
process with a crash after every sync and every answer) and the directory
kept for inspection. Exit status: 0 PASS, 1 FAIL or error, 2 bad usage.
`

func crashtestMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("crashtest", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var (
		mode, dir  string
		cpuprofile string
		duration   time.Duration
		cycles     int
		seed       uint64
		clients    int
		child      bool
	)
	fs.StringVar(&mode, "mode", "power", "")
	fs.DurationVar(&duration, "duration", 0, "")
	intFlag(fs, &cycles, "cycles", 0)
	uint64Flag(fs, &seed, "seed", 0)
	intFlag(fs, &clients, "clients", 4)
	fs.StringVar(&dir, "dir", "", "")
	fs.StringVar(&cpuprofile, "cpuprofile", "", "")
	fs.BoolVar(&child, "child", false, "") // the kill-mode child (internal)
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			fmt.Fprint(stdout, crashtestUsage)
			return 0
		}
		fmt.Fprintf(stderr, "mvkv crashtest: %s\n%s", flagError(fs, err), tryHelp("crashtest"))
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "mvkv crashtest: unexpected argument %q\n%s", fs.Arg(0), tryHelp("crashtest"))
		return 2
	}
	if child {
		if err := crashtest.ChildMain(dir, seed, clients, cycles, os.Stdout); err != nil {
			fmt.Fprintf(stderr, "mvkv crashtest child: %s\n", crashtestErrorText(err))
			return 1
		}
		return 0
	}
	switch mode {
	case "power", "kill", "server":
	default:
		fmt.Fprintf(stderr, "mvkv crashtest: unknown mode %q (power, kill or server)\n%s", mode, tryHelp("crashtest"))
		return 2
	}
	// One line for each option out of range, naming it and its value.
	var bad []string
	if clients < 1 || clients > 64 {
		bad = append(bad, fmt.Sprintf("invalid --clients %d (want 1 to 64)", clients))
	}
	if cycles < 0 {
		bad = append(bad, fmt.Sprintf("invalid --cycles %d (want 0 or more)", cycles))
	}
	if duration < 0 {
		bad = append(bad, fmt.Sprintf("invalid --duration %s (want 0 or more)", duration))
	}
	if len(bad) > 0 {
		for _, b := range bad {
			fmt.Fprintf(stderr, "mvkv crashtest: %s\n", b)
		}
		fmt.Fprint(stderr, tryHelp("crashtest"))
		return 2
	}
	if duration == 0 && cycles == 0 {
		duration = 60 * time.Second
	}
	if seed == 0 {
		seed = rand.Uint64() >> 1
	}
	if dir != "" {
		// Refused before the run's first line, which would otherwise
		// read as the start of a run that never came, and before
		// --cpuprofile's file is created, which would truncate a file
		// of that name for nothing.
		if err := crashtest.CheckNewDir(dir); err != nil {
			fmt.Fprintf(stderr, "mvkv crashtest: %s\n", crashtestErrorText(err))
			return 1
		}
	}
	if cpuprofile != "" && dir != "" && pathWithin(cpuprofile, dir) {
		// The run needs --dir empty, and would refuse it once the
		// profile was made there, after the run's first line.
		fmt.Fprintf(stderr, "mvkv crashtest: --cpuprofile %s is inside --dir %s, which the run needs empty\n%s", cpuprofile, dir, tryHelp("crashtest"))
		return 2
	}
	if cpuprofile != "" {
		f, err := os.Create(cpuprofile)
		if err != nil {
			fmt.Fprintf(stderr, "mvkv crashtest: %v\n", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(stderr, "mvkv crashtest: %v\n", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(stdout, "mvkv crashtest --mode %s --seed %d --clients %d", mode, seed, clients)
	if duration > 0 {
		fmt.Fprintf(stdout, " --duration %s", duration)
	}
	if cycles > 0 {
		fmt.Fprintf(stdout, " --cycles %d", cycles)
	}
	fmt.Fprintln(stdout)
	start := time.Now()
	res, err := crashtest.Run(ctx, crashtest.Config{
		Mode: mode, Duration: duration, Cycles: cycles, Seed: seed, Clients: clients, Dir: dir, Out: stdout,
	})
	if err != nil {
		fmt.Fprintf(stderr, "mvkv crashtest: %s\n", crashtestErrorText(err))
		if strings.Contains(err.Error(), "unknown mode") {
			return 2
		}
		return 1
	}
	took := time.Since(start).Round(time.Millisecond)
	if ctx.Err() != nil && len(res.Problems) == 0 {
		fmt.Fprintf(stdout, "INTERRUPTED: mode %s, %d cycles, %d crash points, %d operations, %s, seed %d: no verdict\n", mode, res.Cycles, res.Crashes, res.Ops, took, seed)
		return 1
	}
	if res.Pass && res.Crashes == 0 {
		fmt.Fprintf(stdout, "NO VERDICT: mode %s: no crash point was reached in %s; give a longer --duration\n", mode, took)
		return 1
	}
	if res.Pass {
		fmt.Fprintf(stdout, "PASS: mode %s, %d cycles, %d crash points (%.0f a minute), %d operations, %s, seed %d\n",
			mode, res.Cycles, res.Crashes, float64(res.Crashes)/took.Minutes(), res.Ops, took, seed)
		return 0
	}
	fmt.Fprintf(stdout, "FAIL: mode %s, cycle %d, seed %d, clients %d, after %s\n", mode, res.Cycles, seed, clients, took)
	for _, p := range res.Problems {
		fmt.Fprintf(stdout, "  problem: %s\n", p)
	}
	if res.Reproduced {
		fmt.Fprintf(stdout, "shortest failing operation list (%d operations, replayed one at a time in process):\n", len(res.Shortest))
	} else {
		fmt.Fprintf(stdout, "the failure did not reproduce in an in-process replay; the failing cycle's operations (%d, in invocation order):\n", len(res.Shortest))
	}
	const maxListed = 200
	for i, op := range res.Shortest {
		if i == maxListed {
			fmt.Fprintf(stdout, "  ... %d more\n", len(res.Shortest)-i)
			break
		}
		fmt.Fprintf(stdout, "  %3d  %s\n", i+1, op)
	}
	if res.KeptDir != "" {
		fmt.Fprintf(stdout, "data directory kept for inspection: %s (mvkv verify and mvkv waldump read it)\n", res.KeptDir)
	}
	return 1
}

// crashtestErrorText is err's text without the prefixes the command's own
// ("mvkv crashtest: ") already says: the crashtest package's "crashtest: "
// and the engine's "mvkv: ".
func crashtestErrorText(err error) string {
	msg := err.Error()
	for {
		if m, ok := strings.CutPrefix(msg, "crashtest: "); ok {
			msg = m
		} else if m, ok := strings.CutPrefix(msg, "mvkv: "); ok {
			msg = m
		} else {
			return msg
		}
	}
}

// pathWithin reports whether path is dir or lies under it, comparing
// their absolute, cleaned forms with symbolic links resolved: those of
// dir, and those of path or, when path does not exist yet (a profile
// about to be created), of the nearest of its parents that does, so that
// a profile reaching dir through a link is caught too.
func pathWithin(path, dir string) bool {
	p, err1 := resolvePath(path)
	d, err2 := resolvePath(dir)
	if err1 != nil || err2 != nil {
		return false
	}
	rel, err := filepath.Rel(d, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// resolvePath is path made absolute, with the symbolic links of its
// longest existing prefix resolved and the rest, which does not exist
// yet, appended cleaned.
func resolvePath(path string) (string, error) {
	p, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	rest := ""
	for {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(r, rest), nil
		}
		parent := filepath.Dir(p)
		if parent == p {
			return filepath.Join(p, rest), nil
		}
		rest = filepath.Join(filepath.Base(p), rest)
		p = parent
	}
}
