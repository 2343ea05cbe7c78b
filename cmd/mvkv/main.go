// Command mvkv is mvkv's one binary, with one subcommand per tool:
//
//	mvkv bench      pgbench-like driver (engine, pebble, PostgreSQL or a RESP server)
//	mvkv serve      RESP server over a data directory
//	mvkv verify     offline consistency check of a data directory
//	mvkv waldump    WAL records in LSN order, like pg_waldump
//	mvkv crashtest  randomized crash-recovery test with a verdict
//	mvkv version    the build: module version, commit, Go release
//
// "mvkv help COMMAND" (or "mvkv COMMAND --help") prints a command's options.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
)

const usage = `mvkv is a miniature transactional key-value storage engine.

Usage:
  mvkv COMMAND [OPTION]...

Commands:
  bench       run a pgbench-like benchmark against the engine, pebble,
              PostgreSQL or a RESP server such as mvkv serve
  serve       serve a data directory over the Redis protocol
  verify      check a data directory's consistency (exit status 0: ok,
              1: a problem found, 2: bad usage)
  waldump     print a data directory's WAL records, like pg_waldump
  crashtest   crash the engine or the server at random moments and check recovery
  version     print the build: version, commit, Go release

Run "mvkv COMMAND -h" or "mvkv help COMMAND" for a command's options.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// commands are the subcommands, each with its main function.
var commands = map[string]func(args []string, stdout, stderr io.Writer) int{
	"bench":     benchMain,
	"serve":     serveMain,
	"waldump":   waldumpMain,
	"verify":    verifyMain,
	"crashtest": crashtestMain,
	"version":   versionMain,
}

// run dispatches to a subcommand and returns the process exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	if cmd, ok := commands[args[0]]; ok {
		return cmd(args[1:], stdout, stderr)
	}
	switch args[0] {
	case "help":
		return helpMain(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "-?":
		fmt.Fprint(stdout, usage)
		return 0
	case "--version", "-version":
		return versionMain(nil, stdout, stderr)
	}
	fmt.Fprintf(stderr, "mvkv: unknown command %q\nTry \"mvkv help\" for the list of commands.\n", args[0])
	return 2
}

// helpMain is "mvkv help [COMMAND]": the general usage, or COMMAND's help
// as "mvkv COMMAND --help" prints it.
func helpMain(args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0 || len(args) == 1 && args[0] == "help":
		fmt.Fprint(stdout, usage)
		return 0
	case len(args) > 1:
		fmt.Fprintf(stderr, "mvkv help: too many arguments (want at most one command)\nTry \"mvkv help\" for the list of commands.\n")
		return 2
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "mvkv help: unknown command %q\nTry \"mvkv help\" for the list of commands.\n", args[0])
		return 2
	}
	return cmd([]string{"--help"}, stdout, stderr)
}

const versionUsage = `Usage:
  mvkv version

mvkv version prints one line naming the build: the module version (a
pseudo-version for a build from a git checkout, "(devel)" when the build
carries no version control stamp), the commit it was built from and its
time, "(modified)" if the checkout had changes, and the Go release and
platform. "mvkv --version" is the same.
`

// versionMain is mvkv version.
func versionMain(args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 1 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help"):
		fmt.Fprint(stdout, versionUsage)
		return 0
	case len(args) > 0:
		fmt.Fprintf(stderr, "mvkv version: unexpected argument %q\n%s", args[0], tryHelp("version"))
		return 2
	}
	fmt.Fprintln(stdout, versionLine())
	return 0
}

// versionLine says which build this is: the module version (a
// pseudo-version, or "(devel)" without a version control stamp), the commit it was built from and its time,
// whether the checkout had changes, and the Go release and platform.
func versionLine() string {
	v := "mvkv"
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v + " (unknown build) " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
	}
	v += " " + bi.Main.Version
	var rev, at, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = " (modified)"
			}
		}
	}
	if rev != "" {
		v += " " + rev[:min(len(rev), 12)] + " " + at + modified
	}
	return v + " " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
}

// flagError is a flag parsing error as the user typed the flag: the flag
// package names flags with one dash ("flag provided but not defined:
// -bogus", "invalid value "x" for flag -timeout: ..."), these commands
// document them with two, and one-letter ones (bench's -c, -s) with one,
// as pgbench does. An undefined flag is named with two, whatever its
// length.
//
// A value the flag package could not parse ("parse error") is said in the
// words of what the flag wants: true or false, an integer, a number, a
// duration.
func flagError(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	if m := parseErrorRE.FindStringSubmatch(msg); m != nil {
		if f := fs.Lookup(m[1]); f != nil {
			msg = strings.TrimSuffix(msg, "parse error") + wantOf(f)
		}
	}
	return flagNameRE.ReplaceAllString(msg, "${1}${3}--${2}${4}")
}

// wantOf names the kind of value flag f takes, by the type of its value
// (the flag package's own types, whose names it does not export, print
// with %T).
func wantOf(f *flag.Flag) string {
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return "want true or false"
	}
	switch fmt.Sprintf("%T", f.Value) {
	case "*flag.float64Value":
		return "want a number"
	case "*flag.durationValue":
		return "want a duration such as 30s or 4ms"
	}
	return "parse error"
}

var parseErrorRE = regexp.MustCompile(`for (?:flag )?-([A-Za-z][-A-Za-z0-9_]*): parse error$`)

var flagNameRE = regexp.MustCompile(`(not defined: )-([A-Za-z])|(needs an argument: |for flag |value "[^"]*" for )-([A-Za-z][-A-Za-z0-9_]+)`)

// decimalInt is an int flag read in base 10 only, as pgbench's and
// redis-server's numbers are: the flag package's own int flags read "010"
// as octal 8 and accept "0x10", which would quietly run 8 or 16 clients
// where a user of those tools typed 10 or made a mistake.
type decimalInt struct{ p *int }

func (d decimalInt) String() string {
	if d.p == nil {
		return "0"
	}
	return strconv.Itoa(*d.p)
}

func (d decimalInt) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return errors.New("out of range")
		}
		return errors.New("want an integer")
	}
	*d.p = n
	return nil
}

// decimalUint64 is decimalInt for uint64 flags (random seeds).
type decimalUint64 struct{ p *uint64 }

func (d decimalUint64) String() string {
	if d.p == nil {
		return "0"
	}
	return strconv.FormatUint(*d.p, 10)
}

func (d decimalUint64) Set(s string) error {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return errors.New("out of range")
		}
		return errors.New("want a non-negative integer")
	}
	*d.p = n
	return nil
}

// intFlag defines a decimal int flag with a default.
func intFlag(fs *flag.FlagSet, p *int, name string, def int) {
	*p = def
	fs.Var(decimalInt{p}, name, "")
}

// uint64Flag defines a decimal uint64 flag with a default.
func uint64Flag(fs *flag.FlagSet, p *uint64, name string, def uint64) {
	*p = def
	fs.Var(decimalUint64{p}, name, "")
}
