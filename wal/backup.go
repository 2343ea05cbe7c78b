package wal

import (
	"errors"
	"fmt"
	"io"
	"path"

	"mvkv/vfs"
)

// Backup copies into the directory dst on fsys (created if missing; the
// caller gives a new one) every segment file holding a byte of the log
// from from up to to, each whole as it stands, and fsyncs the files and
// dst: the WAL of a base backup, which recovery of the copy replays from
// the backup's checkpoint. The caller makes the log durable through to
// first (Flush), so that every byte up to it is final when it is read,
// and keeps the segments from being removed meanwhile (no checkpoint
// runs). Records written after to while the copy runs may be in it
// whole, in part or not at all: a Reader of the copy stops at the first
// incomplete one, as at the end of a log cut by a crash. Segments after
// to's are not copied.
//
// Errors: ErrClosed after Close; an error wrapping fs.ErrNotExist when a
// segment in the range is missing (removed, or never written); I/O errors
// naming the file. Safe for concurrent use with Insert and Flush.
func (w *Writer) Backup(fsys vfs.FS, dst string, from, to LSN) error {
	w.fmu.Lock()
	closed := w.closed
	w.fmu.Unlock()
	if closed {
		return ErrClosed
	}
	if to < from {
		return fmt.Errorf("wal: backup: end %#x lies before start %#x", uint64(to), uint64(from))
	}
	if err := fsys.MkdirAll(dst); err != nil {
		return fmt.Errorf("wal: backup: %w", err)
	}
	size := LSN(w.segSize)
	buf := make([]byte, 1<<20)
	for seg := from - from%size; seg <= to; seg += size {
		if err := copySegment(w.fs, path.Join(w.dir, segmentName(seg)), fsys, path.Join(dst, segmentName(seg)), w.segSize, buf); err != nil {
			return fmt.Errorf("wal: backup: %w", err)
		}
	}
	if err := fsys.SyncDir(dst); err != nil {
		return fmt.Errorf("wal: backup: fsync directory %s: %w", dst, err)
	}
	return nil
}

// copySegment copies the file src (at most size bytes of it) on sfs to the
// new file dst on dfs, and fsyncs dst.
func copySegment(sfs vfs.FS, src string, dfs vfs.FS, dst string, size int64, buf []byte) (err error) {
	in, err := sfs.OpenReadOnly(src)
	if err != nil {
		return err // the path error names the file
	}
	defer in.Close()
	out, err := dfs.Create(dst)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, out.Close()) }()
	for off := int64(0); off < size; {
		n, rerr := in.ReadAt(buf[:min(int64(len(buf)), size-off)], off)
		if n > 0 {
			if _, err := out.WriteAt(buf[:n], off); err != nil {
				return fmt.Errorf("write %s at offset %d: %w", dst, off, err)
			}
			off += int64(n)
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return fmt.Errorf("read %s at offset %d: %w", src, off, rerr)
		}
	}
	if err := out.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dst, err)
	}
	return nil
}
