package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"mvkv/vfs"
	"mvkv/wal"
	"mvkv/waldump"
)

const waldumpUsage = `mvkv waldump prints a data directory's WAL records in LSN order, like pg_waldump.

Usage:
  mvkv waldump [OPTION]... DIR
  mvkv waldump [OPTION]... --dir=DIR

Options:
  --start=LSN   first record to print (default: the oldest present)
  --end=LSN     stop before the record at this LSN (default, or 0: the end of the valid log)
  -h, --help    show this help, then exit

An LSN is written as PostgreSQL writes it (e.g. 0/01000060, as waldump
prints them) or as a decimal or 0x-prefixed hexadecimal byte position.
`

// parseLSN accepts "HI/LO" in hex (PostgreSQL's form), 0x-hex or decimal.
func parseLSN(s string) (uint64, error) {
	if hi, lo, ok := strings.Cut(s, "/"); ok {
		h, err1 := strconv.ParseUint(hi, 16, 32)
		l, err2 := strconv.ParseUint(lo, 16, 32)
		if err1 != nil || err2 != nil {
			return 0, fmt.Errorf("invalid LSN %q", s)
		}
		return h<<32 | l, nil
	}
	// Decimal unless 0x-prefixed: base 0 would read a leading zero as
	// octal.
	base, digits := 10, s
	if rest, ok := strings.CutPrefix(strings.ToLower(s), "0x"); ok {
		base, digits = 16, rest
	}
	v, err := strconv.ParseUint(digits, base, 64)
	if err != nil {
		return 0, fmt.Errorf("invalid LSN %q", s)
	}
	return v, nil
}

func waldumpMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("waldump", flag.ContinueOnError)
	start := fs.String("start", "", "")
	end := fs.String("end", "", "")
	var s, e uint64
	dir, code, ok := parseDirCommand(fs, waldumpUsage, args, stdout, stderr, func() error {
		// A flag given empty is refused as pg_waldump refuses it, not
		// taken for its default.
		given := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
		var err error
		if given["start"] {
			if s, err = parseLSN(*start); err != nil {
				return fmt.Errorf("--start: %v", err)
			}
		}
		if given["end"] {
			if e, err = parseLSN(*end); err != nil {
				return fmt.Errorf("--end: %v", err)
			}
		}
		if e != 0 && e < s { // --end 0, like no --end, means the end of the log
			return fmt.Errorf("--end %s lies before --start %s", *end, *start)
		}
		return nil
	})
	if !ok {
		return code
	}
	live := inUse(dir)
	if live {
		fmt.Fprintf(stderr, "mvkv waldump: warning: %s is in use by a running database; the log's end moves during the dump\n", dir)
	}
	if err := waldump.Dump(nil, dir, wal.LSN(s), wal.LSN(e), stdout); err != nil {
		fmt.Fprintf(stderr, "mvkv waldump: %s\n", errText(err))
		if live {
			// pg_waldump has the same limit on a live server.
			fmt.Fprintf(stderr, "mvkv waldump: the database was running: a record being written or a segment being recycled meanwhile reads as damage; stop it (or give --end) and run again before taking this for damage\n")
		}
		return 1
	}
	return 0
}

// inUse reports whether a running database holds dir's lock file (the
// engine's LOCK, taken with flock), without creating one: the lock is
// tried only on a file that exists, and let go at once.
func inUse(dir string) bool {
	name := filepath.Join(dir, "LOCK")
	if _, err := os.Stat(name); err != nil {
		return false
	}
	l, err := vfs.OS{}.Lock(name)
	if err != nil {
		return errors.Is(err, vfs.ErrLocked)
	}
	l.Close()
	return false
}
