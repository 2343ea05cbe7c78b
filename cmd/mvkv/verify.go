package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"mvkv/engine"
	"mvkv/wal"
)

const verifyUsage = `mvkv verify checks a data directory's consistency, like bbolt check.

Usage:
  mvkv verify [--lost-keys] DIR
  mvkv verify [--lost-keys] --dir=DIR

It opens the database (running crash recovery if the directory was not
closed cleanly, as any Open does: a torn WAL tail is cut off) and takes a
checkpoint, so it writes to the directory: run it on a copy to keep
evidence untouched. Then it checks every heap page checksum and line
pointer, the heap segment files' sizes (every segment before the last
must be 1 GiB), every tuple header against the CLOG and the next xid, every
version chain, the index against the heap, every visibility map page
checksum and every set map bit against its heap page (PD_ALL_VISIBLE, and
every tuple visible to all; problems name the heap block), map files
missing or cut short where heap pages vacuum marked all-visible show bits
were set (the bits are lost; vacuum sets them again), the control
file against the WAL, every WAL record on disk, every commit and abort
still in the WAL against the CLOG, and that the WAL, CLOG, heap and map
directories hold only their own files.

Out-of-line value chunks that no version names are printed as "note:"
lines, with their count and bytes and the first twenty by file, block and
slot: space leaked (a lost directory chunk of a large value), not damage,
and they leave the exit status 0. An Open that rebuilds the index (remove the index file from the
stopped directory) hands them to the next vacuum.

With --lost-keys it also prints every key whose newest version lies on a
heap page that cannot be read, or whose value has a chunk on one, one per
line after the report, as
"lost key: " and the key in Go's quoted form (the report names the first
ten).

Exit status: 0 when everything checks out (notes do not count); 1 when a
problem was found or the check could not run (the directory in use, or a
directory holding other files but no control file and no WAL segment,
which may be a data directory that lost both); 2 on bad usage, including
a DIR that does not exist, is not a directory or is empty (no data
directory is ever empty: an empty DIR is a wrong path, or a volume not
mounted, not damage).
`

func verifyMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	lostKeys := fs.Bool("lost-keys", false, "")
	dir, code, ok := parseDirCommand(fs, verifyUsage, args, stdout, stderr, nil)
	if !ok {
		return code
	}
	db, err := engine.Open(dir, engine.Options{})
	if err != nil {
		fmt.Fprintf(stderr, "mvkv verify: %s\n", errText(err))
		return 1
	}
	ri := db.Recovery()
	if !ri.IndexFromFile && ri.IndexRebuildReason != "" && ri.RedoLSN != 0 {
		// Not damage to data: the index file is a copy, rebuilt from the
		// heap and written again; but the user should know it was.
		fmt.Fprintf(stdout, "note: the key index was rebuilt from the heap (%s)\n", ri.IndexRebuildReason)
	}
	if ri.BulkLoadCutBlocks > 0 {
		// What Open removed is said, as the log would: a bulk load that
		// did not commit was never part of the database.
		fmt.Fprintf(stdout, "note: removed %d heap pages from block %d on, written by a bulk load that did not commit\n", ri.BulkLoadCutBlocks, ri.BulkLoadCutFrom)
	}
	if len(ri.FilledSegments) > 0 {
		// A crash's doing, repaired, but the user should know: a later
		// segment file put there by hand would read the same way.
		fmt.Fprintf(stdout, "note: heap segment(s) %s were shorter than 1 GiB before a later segment after a crash; recovery filled their missing blocks with %d empty pages\n", strings.Join(ri.FilledSegments, ", "), ri.FilledBlocks)
	}
	if ri.EmptiedSegmentsFrom > 0 {
		fmt.Fprintf(stdout, "note: a heap segment was shorter than 1 GiB before later segment files that held nothing but pages of zeros or a piece of a page after a crash (a partial page at a file's end is one a crash cut short, read as never written); recovery emptied them, cutting the heap back to %d blocks\n", ri.EmptiedSegmentsFrom)
	}
	if ri.EmptiedBlocks > 0 {
		fmt.Fprintf(stdout, "note: recovery wrote %d empty pages in place of pages of zeros past the last checkpoint's heap length (extended and not written before a crash)\n", ri.EmptiedBlocks)
	}
	if ri.ControlFileMissing {
		fmt.Fprintf(stdout, "note: the control file was missing though a checkpoint had run; recovery replayed the whole WAL from its beginning\n")
	}
	for _, p := range ri.CLOGTornPages {
		fmt.Fprintf(stdout, "note: the CLOG page in %s failed its checksum after a crash and was taken as torn by it: every commit and abort record the WAL still holds for it agrees with its bits\n", p)
	}
	if len(ri.RemovedWALSegments) > 0 {
		// Not damage (a crash leaves such segments), but a file put in
		// wal/ by hand reads the same way, and so does one further out
		// than the segment after the end, zeroed whole (the segment
		// after the end so damaged fails Open instead): the user should
		// know it is gone, and that nothing in it could be read, which
		// is not the same as nothing having been there.
		fmt.Fprintf(stdout, "note: recovery removed WAL segment file(s) %s past the end of the log at %s: prepared ahead or written after the end a crash left, or put there; no record in them could be read as this log's\n", strings.Join(ri.RemovedWALSegments, ", "), wal.LSN(ri.EndLSN))
	}
	if len(ri.RemovedCLOGSegments) > 0 {
		// Not damage either: a checkpoint writes the CLOG ahead of the
		// record that carries its next xid, and the crash came between.
		fmt.Fprintf(stdout, "note: recovery removed CLOG segment file(s) %s past the segment of the next xid: written for xids handed out just before a crash, whose records were lost with it\n", strings.Join(ri.RemovedCLOGSegments, ", "))
	}
	if ri.DroppedRecords > 0 {
		fmt.Fprintf(stdout, "note: cut off a torn WAL tail at %s (%d bytes after it dropped: the record there failed its checks, and nothing showed the log durable past it); %s, %d of them commits, lie past the %d damaged bytes, from %s, and were dropped with it: a crash's torn write leaves that, and so does WAL zeroed or damaged after it was durable, in which case those commits were acknowledged and are lost\n",
			wal.LSN(ri.EndLSN), ri.DroppedBytes, countOf(ri.DroppedRecords, "valid record"), ri.DroppedCommits, ri.DroppedRecordsFrom-ri.EndLSN, wal.LSN(ri.DroppedRecordsFrom))
	} else if ri.DroppedBytes > 0 {
		fmt.Fprintf(stdout, "note: cut off a torn WAL tail at %s (%d bytes after it dropped: the record there failed its checks, and nothing showed the log durable past it)\n", wal.LSN(ri.EndLSN), ri.DroppedBytes)
	}
	rep, err := db.Verify()
	if d := db.Damage(); d.MapBitsCleared > 0 {
		// Not damage to data, but the map file did not match the heap:
		// the user should know why (a file copied back?).
		fmt.Fprintf(stdout, "note: the visibility map had bits set for %d heap pages the heap does not mark all-visible (%s): cleared, and written by the check's checkpoint; a map file older than the heap, restored from another copy?\n", d.MapBitsCleared, d.MapBits)
	}
	cerr := db.Close()
	if err != nil {
		// The check did not run to its end: no report, which would say
		// "ok" of pages it never read.
		fmt.Fprintf(stderr, "mvkv verify: the check could not run: %s\n", errText(err))
		return 1
	}
	err = cerr
	fmt.Fprint(stdout, rep.String())
	if *lostKeys {
		for _, k := range rep.LostKeys {
			fmt.Fprintf(stdout, "lost key: %q\n", k)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "mvkv verify: %s\n", errText(err))
		return 1
	}
	if !rep.OK() {
		return 1
	}
	return 0
}

// parseDirCommand parses the flags of a subcommand that takes exactly one
// data directory: -h prints usage to stdout (exit 0); a bad flag, a
// missing or extra argument, or a DIR that does not exist, is not a
// directory or is empty prints the problem and where the help is to
// stderr (exit 2); a directory that holds other files but no data
// directory, or one that cannot be looked into, prints the problem (exit
// 1, as a problem verify finds).
// ok is false when the caller should return code.
//
// The directory may also be given as --dir DIR, as serve, bench and
// crashtest take it.
//
// options, when not nil, checks the options' values once they are parsed;
// its error is a usage error, reported before the directory is looked at.
func parseDirCommand(fs *flag.FlagSet, usage string, args []string, stdout, stderr io.Writer, options func() error) (dir string, code int, ok bool) {
	fs.SetOutput(io.Discard)
	dirFlag := fs.String("dir", "", "")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			fmt.Fprint(stdout, usage)
			return "", 0, false
		}
		fmt.Fprintf(stderr, "mvkv %s: %s\n%s", fs.Name(), flagError(fs, err), tryHelp(fs.Name()))
		return "", 2, false
	}
	if *dirFlag != "" {
		if fs.NArg() > 0 {
			fmt.Fprintf(stderr, "mvkv %s: the data directory given twice (--dir %s, and %q): give it once\n%s", fs.Name(), *dirFlag, fs.Arg(0), tryHelp(fs.Name()))
			return "", 2, false
		}
	} else if fs.NArg() != 1 {
		// The flag package stops at the first argument that is not a
		// flag, so options after DIR arrive here as extra arguments.
		for _, a := range fs.Args()[min(1, fs.NArg()):] {
			if strings.HasPrefix(a, "-") {
				fmt.Fprintf(stderr, "mvkv %s: %s after the data directory: options go before DIR\n%s", fs.Name(), a, tryHelp(fs.Name()))
				return "", 2, false
			}
		}
		fmt.Fprintf(stderr, "mvkv %s: need exactly one data directory\n%s", fs.Name(), tryHelp(fs.Name()))
		return "", 2, false
	}
	if options != nil {
		if err := options(); err != nil {
			fmt.Fprintf(stderr, "mvkv %s: %v\n%s", fs.Name(), err, tryHelp(fs.Name()))
			return "", 2, false
		}
	}
	dir = *dirFlag
	if dir == "" {
		dir = fs.Arg(0)
	}
	if err := checkDataDir(dir); err != nil {
		var bad badDirError
		if errors.As(err, &bad) {
			fmt.Fprintf(stderr, "mvkv %s: %v\n%s", fs.Name(), err, tryHelp(fs.Name()))
			return "", 2, false
		}
		fmt.Fprintf(stderr, "mvkv %s: %v\n", fs.Name(), err)
		return "", 1, false
	}
	return dir, 0, true
}

// badDirError is checkDataDir's refusal of a path that names no directory
// at all (missing, or a file): a bad argument, reported as a usage error.
type badDirError struct{ msg string }

func (e badDirError) Error() string { return e.msg }

// tryHelp is the line after a usage error, as PostgreSQL's tools and
// git print it: the error stays the last thing on the screen instead of
// scrolling away above the whole usage text.
func tryHelp(cmd string) string {
	return fmt.Sprintf("Try \"mvkv %s --help\" for more information.\n", cmd)
}

// checkDataDir refuses a path that is not an existing data directory, so
// that a mistyped path gives an error instead of a new, empty database
// (engine.Open creates what is missing) and a false "ok". A directory with
// neither a control file nor a WAL segment in wal/ is not one; the error
// lists which of a data directory's entries it lacks.
//
// A path that does not exist, is not a directory or is empty gives a
// badDirError. An empty directory is a wrong path, not damage: Open makes
// wal/, heap/, clog/ and vm/ before anything else, so no data directory
// is ever empty, and one emptied whole is no more there to check than a
// missing one (an unmounted volume's mount point reads so too, where a
// "damage found" exit would send a script to restore a backup).
func checkDataDir(dir string) error {
	fi, err := os.Stat(dir)
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		// ENOTDIR: a file along the path, as in FILE/sub.
		return badDirError{fmt.Sprintf("%s does not exist", dir)}
	}
	if err != nil {
		return err // permission denied on a parent, say
	}
	if !fi.IsDir() {
		return badDirError{fmt.Sprintf("%s is not a directory", dir)}
	}
	_, err = os.Stat(filepath.Join(dir, "control"))
	if err == nil {
		return nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return err // permission denied, say, not a missing file
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	if len(ents) == 0 {
		return badDirError{fmt.Sprintf("%s is empty, not an mvkv data directory: none of a data directory's files are there (%s)", dir, strings.Join(dataDirEntries, ", "))}
	}
	// No checkpoint yet (a process killed before its first): the WAL must
	// hold a segment, named by its first LSN in 16 hex digits. A wal/
	// directory of anything else (a source tree's) is not a database,
	// and opening it would create one there.
	names, err := os.ReadDir(filepath.Join(dir, "wal"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for _, e := range names {
		if n := e.Name(); len(n) == 16 && strings.Trim(n, "0123456789ABCDEFabcdef") == "" && e.Type().IsRegular() {
			return nil
		}
	}
	var missing []string
	for _, n := range dataDirEntries {
		if _, err := os.Stat(filepath.Join(dir, strings.TrimSuffix(n, "/"))); errors.Is(err, os.ErrNotExist) {
			missing = append(missing, n)
		}
	}
	return fmt.Errorf("%s is not an mvkv data directory: it holds no control file and no WAL segment in wal/ (missing: %s)", dir, strings.Join(missing, ", "))
}

// dataDirEntries are the entries of a data directory that every one
// has once its first checkpoint has run: the control file and the
// directories Open makes (engine's layout).
var dataDirEntries = []string{"control", "wal/", "heap/", "clog/", "vm/"}

// countOf writes n and noun, with an s unless n is 1: "1 valid record",
// "2 valid records".
func countOf(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
