package main

import (
	"bytes"
	"flag"
	"runtime"
	"strings"
	"testing"
)

// TestHelpCommand: "mvkv help CMD" prints what "mvkv CMD --help" prints,
// "mvkv help" the general usage, and an unknown command is an error with
// exit status 2.
func TestHelpCommand(t *testing.T) {
	for name := range commands {
		var want, wantErr, got, gotErr bytes.Buffer
		wantCode := run([]string{name, "--help"}, &want, &wantErr)
		code := run([]string{"help", name}, &got, &gotErr)
		if code != 0 || wantCode != 0 || got.String() != want.String() || gotErr.Len() != 0 || want.Len() == 0 {
			t.Errorf("help %s: exit %d, stderr %q; %s --help: exit %d; same output: %v",
				name, code, gotErr.String(), name, wantCode, got.String() == want.String())
		}
		if got.String() == usage {
			t.Errorf("help %s printed the general usage", name)
		}
	}
	for _, args := range [][]string{{"help"}, {"help", "help"}, {"--help"}, {"-h"}} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 0 || out.String() != usage || errb.Len() != 0 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out.String(), errb.String())
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"help", "nosuch"}, "mvkv help: unknown command \"nosuch\"\n"},
		{[]string{"help", "serve", "verify"}, "mvkv help: too many arguments"},
		{[]string{"nosuch"}, "mvkv: unknown command \"nosuch\"\n"},
	} {
		var out, errb bytes.Buffer
		if code := run(c.args, &out, &errb); code != 2 || out.Len() != 0 || !strings.HasPrefix(errb.String(), c.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2, stderr starting %q", c.args, code, out.String(), errb.String(), c.want)
		}
	}
}

// Flag errors name flags as the usage does, with two dashes, after the
// command's name, for every command, and say what a value that did not
// parse should have been.
func TestFlagErrorsUseTwoDashes(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--bogus"}, "mvkv serve: flag provided but not defined: --bogus\n"},
		{[]string{"serve", "--timeout", "x"}, "mvkv serve: invalid value \"x\" for flag --timeout: "},
		{[]string{"bench", "--clients"}, "mvkv bench: flag provided but not defined: --clients\n"},
		{[]string{"bench", "--fresh=maybe"}, "mvkv bench: invalid boolean value \"maybe\" for --fresh: want true or false\n"},
		{[]string{"bench", "-c"}, "mvkv bench: flag needs an argument: -c\n"},
		{[]string{"bench", "-c", "x"}, "mvkv bench: invalid value \"x\" for flag -c: want an integer\n"},
		{[]string{"bench", "-c", "0x10"}, "mvkv bench: invalid value \"0x10\" for flag -c: want an integer\n"},
		{[]string{"bench", "-t", "99999999999999999999"}, "mvkv bench: invalid value \"99999999999999999999\" for flag -t: out of range\n"},
		{[]string{"bench", "--random-seed", "-1"}, "mvkv bench: invalid value \"-1\" for flag --random-seed: want a non-negative integer\n"},
		{[]string{"bench", "--disk-rotation", "q"}, "mvkv bench: invalid value \"q\" for flag --disk-rotation: want a number\n"},
		{[]string{"bench", "--fsync-latency", "4"}, "mvkv bench: invalid value \"4\" for flag --fsync-latency: want a duration such as 30s or 4ms\n"},
		{[]string{"verify", "--x"}, "mvkv verify: flag provided but not defined: --x\n"},
		{[]string{"waldump", "--nope"}, "mvkv waldump: flag provided but not defined: --nope\n"},
		{[]string{"crashtest", "--cycles=abc"}, "mvkv crashtest: invalid value \"abc\" for flag --cycles: "},
	} {
		var stdout, stderr strings.Builder
		if st := run(c.args, &stdout, &stderr); st != 2 {
			t.Errorf("%v: exit status %d, want 2", c.args, st)
		}
		if !strings.HasPrefix(stderr.String(), c.want) {
			t.Errorf("%v: stderr %q, want it to begin %q", c.args, stderr.String(), c.want)
		}
	}
}

// mvkv version (and --version) prints one line naming the build and the
// Go release.
func TestVersion(t *testing.T) {
	for _, arg := range []string{"version", "--version"} {
		var stdout, stderr strings.Builder
		if st := run([]string{arg}, &stdout, &stderr); st != 0 {
			t.Fatalf("%s: exit status %d, stderr %q", arg, st, stderr.String())
		}
		out := stdout.String()
		if !strings.HasPrefix(out, "mvkv ") || !strings.Contains(out, runtime.Version()) || strings.Count(out, "\n") != 1 {
			t.Errorf("%s: %q", arg, out)
		}
	}
}

// Usage errors found by a user: each is refused with exit status 2 and a
// message naming what is wrong, before anything runs.
func TestUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"version", "extra"}, "mvkv version: unexpected argument \"extra\""},
		{[]string{"serve", "--dir", t.TempDir(), "--tls-port", "7600"}, "mvkv serve: --tls-port needs --tls-cert-file and --tls-key-file\n"},
		{[]string{"bench", "--target=resp=", "-T", "1"}, "resp= needs an address"},
		{[]string{"bench", "--target=postgres=", "-T", "1"}, "postgres= needs a connection URL"},
	} {
		var stdout, stderr strings.Builder
		if st := run(c.args, &stdout, &stderr); st != 2 {
			t.Errorf("%v: exit status %d, want 2 (stderr %q)", c.args, st, stderr.String())
		}
		if !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v: stderr %q, want %q in it", c.args, stderr.String(), c.want)
		}
	}
}

// Numbers on the command line are decimal, as pgbench's and
// redis-server's: "010" is ten, not the flag package's octal eight.
func TestDecimalFlags(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	var n int
	var u uint64
	intFlag(fs, &n, "c", 1)
	uint64Flag(fs, &u, "seed", 0)
	if err := fs.Parse([]string{"-c", "010", "-seed", "0012"}); err != nil {
		t.Fatal(err)
	}
	if n != 10 || u != 12 {
		t.Errorf("-c 010 -seed 0012: %d, %d; want 10, 12", n, u)
	}
}
