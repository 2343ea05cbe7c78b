package wal

import (
	"fmt"
	"path"

	"mvkv/internal/filecopy"
	"mvkv/vfs"
)

// Backup copies into the directory dst on fsys (created if missing; the
// caller gives a new one) every segment file holding a byte of the log
// from from up to to, and fsyncs the files and dst: the WAL of a base
// backup, which recovery of the copy replays from the backup's
// checkpoint. The caller makes the log durable through to first (Flush),
// so that every byte up to it is final when it is read, and keeps the
// segments from being removed meanwhile (no checkpoint runs). Segments
// before to's are copied whole; to's segment up to to, and zeros after
// it, so that the copy's log ends at to. Segments after to's are not
// copied.
//
// Why not to's segment whole, records written after to and all: the
// writer appends while the file is read, so the bytes past to are read
// at different moments. A stretch read before the writer reached it
// and records read after it wrote further on (a larger segment takes
// several reads, and no read is atomic against a write on a real file
// system) make a hole followed by valid records whose durable-LSN marks
// lie above it, which a Reader rightly takes for durable log lost:
// recovery of the copy would fail.
//
// It returns the number of segment files copied. Errors: ErrClosed after
// Close; an error wrapping fs.ErrNotExist when a segment in the range is
// missing (removed, or never written); I/O errors naming the file. Safe
// for concurrent use with Insert and Flush.
func (w *Writer) Backup(fsys vfs.FS, dst string, from, to LSN) (int, error) {
	w.fmu.Lock()
	closed := w.closed
	w.fmu.Unlock()
	if closed {
		return 0, ErrClosed
	}
	if to < from {
		return 0, fmt.Errorf("wal: backup: end %#x lies before start %#x", uint64(to), uint64(from))
	}
	if err := fsys.MkdirAll(dst); err != nil {
		return 0, fmt.Errorf("wal: backup: %w", err)
	}
	n := 0
	size := LSN(w.segSize)
	buf := make([]byte, 1<<20)
	// seg < to: a log that ends exactly where a segment ends needs no
	// byte of the next one, which may not exist yet.
	for seg := from - from%size; seg < to; seg += size {
		keep := w.segSize
		if seg+size > to {
			keep = max(int64(to-seg), segHeaderSize)
		}
		if err := filecopy.Synced(w.fs, path.Join(w.dir, segmentName(seg)), fsys, path.Join(dst, segmentName(seg)), keep, w.segSize, buf); err != nil {
			return n, fmt.Errorf("wal: backup: %w", err)
		}
		n++
	}
	if err := fsys.SyncDir(dst); err != nil {
		return n, fmt.Errorf("wal: backup: fsync directory %s: %w", dst, err)
	}
	return n, nil
}
