package waldump

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"

	_ "mvkv/engine" // registers the engine's record descriptions in rmgr.Engine
	"mvkv/internal/rmgr"
	"mvkv/vfs"
	"mvkv/wal"
)

// Describe renders one WAL record on one line, as Dump prints it: LSN,
// type, transaction, payload length and what the payload says. It never
// fails: a malformed payload is described as such.
func Describe(rec wal.Record) string {
	return rmgr.Engine.Describe(rec)
}

// ErrNotRecordStart is Dump's error for a start LSN that lies inside a
// valid record rather than at its beginning.
var ErrNotRecordStart = errors.New("not the start of a record")

// recordAround reads the log from its oldest record and returns the record
// that start lies inside of and the LSN of the one after it (or of the end
// of the valid log, for the last record); ok is false when no valid record
// read from the beginning spans start.
func recordAround(fsys vfs.FS, walPath string, start wal.LSN) (in, next wal.LSN, ok bool) {
	r, err := wal.NewReader(fsys, walPath, 0)
	if err != nil {
		return 0, 0, false
	}
	defer r.Close()
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) && in != 0 && start < r.End() {
			return in, r.End(), true
		}
		if err != nil {
			return 0, 0, false
		}
		switch {
		case rec.LSN == start:
			return 0, 0, false // a record starts there after all
		case rec.LSN > start:
			return in, rec.LSN, in != 0
		}
		in = rec.LSN
	}
}

// Dump writes a description of every valid WAL record of the data directory
// dir in LSN order, from start (0: the oldest record present) up to but not
// including end (0: the end of the valid log), one per line, then a summary
// line saying where the log ends and how many torn bytes follow. It only
// reads. fsys nil means the operating system's file system.
//
// A start inside a valid record returns an error wrapping ErrNotRecordStart
// that names that record and the next; a start where the log is damaged,
// an error wrapping wal.ErrCorrupt that says so; a start past the end of the valid
// log returns an error saying where the log ends. A dump from the oldest
// record to the end that does not meet the checkpoint record the control
// file names returns an error wrapping wal.ErrCorrupt naming the segment
// file that should hold it; one whose checkpoint record there was written by
// another database (its system identifier is not the control file's), an
// error wrapping wal.ErrCorrupt that says so, after the records. Errors from
// writing to w are returned as they are.
func Dump(fsys vfs.FS, dir string, start, end wal.LSN, w io.Writer) error {
	if fsys == nil {
		fsys = vfs.OS{}
	}
	walPath := filepath.Join(dir, rmgr.Engine.WALDir)
	// The checkpoint record the control file names must be in the log;
	// a dump that reads past where it should be without meeting it is
	// reading a log with a segment missing or damaged. A control file that
	// cannot be read leaves the dump to the WAL alone.
	var ckpt wal.LSN
	ctrlNote := ""
	ctrl, found, err := rmgr.Engine.ReadControl(fsys, dir)
	switch {
	case err != nil:
		ctrlNote = fmt.Sprintf("the control file could not be read (%v), so the checkpoint record it names was not looked for", err)
	case !found:
		ctrlNote = fmt.Sprintf("%s has no control file, so no checkpoint record was looked for", dir)
	case ctrl.CheckpointLSN != 0 && end == 0 && start <= ctrl.CheckpointLSN:
		ckpt = ctrl.CheckpointLSN
	}
	// A start at or past the end of the valid log is answered from where
	// the log really ends, read from the checkpoint (or, without one at or
	// below start, from the oldest segment): the reader alone would stop
	// where the segment files run out, or call the torn tail after the
	// end a start inside a record.
	if start != 0 && (!found || ctrl.CheckpointLSN <= start) {
		from := wal.LSN(0)
		if found {
			from = ctrl.CheckpointLSN
		}
		if logEnd, dropped, ok := validLogEnd(fsys, walPath, from); ok && start >= logEnd {
			if start > logEnd {
				return fmt.Errorf("--start %s lies past the end of the valid log, at %s", start, logEnd)
			}
			fmt.Fprintf(w, "0 records; the valid log ends at %s", logEnd)
			if dropped > 0 {
				fmt.Fprintf(w, " followed by a torn tail of %d bytes", dropped)
			}
			fmt.Fprintln(w)
			if ctrlNote != "" {
				fmt.Fprintln(w, "note: "+ctrlNote)
			}
			return nil
		}
	}
	r, err := wal.NewReader(fsys, walPath, start)
	if err != nil {
		return err
	}
	defer r.Close()
	sawCheckpoint := false
	// foreign is the system identifier of the checkpoint record the control
	// file names, when it is another database's: the log (or the control
	// file) was copied from elsewhere, and the records are not this one's.
	var foreign uint64
	n := 0
	// A start inside a record reads as damage; say what is more likely.
	notARecord := func() bool { return n == 0 && start != 0 }
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			if notARecord() && r.DroppedBytes() > 0 {
				if in, next, ok := recordAround(fsys, walPath, start); ok {
					return fmt.Errorf("%w: %s lies inside the record at %s; the next record starts at %s (--start takes a record's LSN, as waldump prints them, or a segment's first)", ErrNotRecordStart, start, in, next)
				}
				return fmt.Errorf("%w: no valid record starts at %s (--start takes a record's LSN, as waldump prints them, or a segment's first)", wal.ErrCorrupt, start)
			}
			break
		}
		if err != nil {
			if notARecord() && errors.Is(err, wal.ErrCorrupt) {
				if in, next, ok := recordAround(fsys, walPath, start); ok {
					// Not damage: a start in the middle of a record.
					return fmt.Errorf("%w: %s lies inside the record at %s; the next record starts at %s (--start takes a record's LSN, as waldump prints them, or a segment's first)", ErrNotRecordStart, start, in, next)
				}
				return fmt.Errorf("no valid record starts at %s (--start takes a record's LSN, as waldump prints them, or a segment's first): %w", start, err)
			}
			return err
		}
		if end != 0 && rec.LSN >= end {
			if n == 0 {
				fmt.Fprintf(w, "0 records: the first record, at %s, lies at or past --end %s\n", rec.LSN, end)
				return nil
			}
			fmt.Fprintf(w, "stopped at %s (--end)\n", end)
			return nil
		}
		if _, err := fmt.Fprintln(w, Describe(rec)); err != nil {
			return err
		}
		if rec.LSN == ckpt {
			sawCheckpoint = rmgr.Engine.IsCheckpoint(rec.Type)
			if sawCheckpoint && ctrl.SystemID != 0 {
				if id, err := rmgr.Engine.CheckpointSystemID(rec); err == nil && id != 0 && id != ctrl.SystemID {
					foreign = id
				}
			}
		}
		n++
	}
	fmt.Fprintf(w, "%d records; the valid log ends at %s", n, r.End())
	if d := r.DroppedBytes(); d > 0 {
		fmt.Fprintf(w, " followed by a torn tail of %d bytes", d)
	}
	fmt.Fprintln(w)
	if ctrlNote != "" {
		fmt.Fprintln(w, "note: "+ctrlNote)
	}
	if foreign != 0 {
		return fmt.Errorf("%w: the checkpoint record at %s that the control file names was written by the database with system identifier %d, and the control file is that of %d: the log in %s is another database's, or the control file is",
			wal.ErrCorrupt, ckpt, foreign, ctrl.SystemID, segmentPathOf(walPath, ckpt, r.SegmentSize()))
	}
	if ckpt != 0 && !sawCheckpoint {
		return fmt.Errorf("%w: the control file names a checkpoint record at %s (in %s), but the valid log read here, which ends at %s, has no checkpoint there: that segment is missing or damaged",
			wal.ErrCorrupt, ckpt, segmentPathOf(walPath, ckpt, r.SegmentSize()), r.End())
	}
	return nil
}

// validLogEnd reads the log from from (a record's LSN, or 0 for the oldest
// segment) to its end and returns where the valid log ends and how many
// bytes of torn tail follow; ok is false if it could not be read to the end.
func validLogEnd(fsys vfs.FS, walPath string, from wal.LSN) (end wal.LSN, dropped int64, ok bool) {
	r, err := wal.NewReader(fsys, walPath, from)
	if err != nil {
		return 0, 0, false
	}
	defer r.Close()
	for {
		if _, err := r.Next(); errors.Is(err, io.EOF) {
			return r.End(), r.DroppedBytes(), true
		} else if err != nil {
			return 0, 0, false
		}
	}
}

// segmentPathOf names the segment file in walPath holding lsn, or walPath
// itself when the segment size is unknown (no segment could be read).
func segmentPathOf(walPath string, lsn wal.LSN, segSize int64) string {
	if segSize <= 0 {
		return walPath
	}
	name, _ := wal.SegmentFile(lsn, segSize)
	return filepath.Join(walPath, name)
}
