package wal

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"time"

	"mvkv/internal/fserr"
	"mvkv/vfs"
)

// tempSuffix marks a segment being prepared; such files are never read and
// are removed when a Writer opens the directory.
const tempSuffix = ".tmp"

// zeroChunk is the size of the zero buffer used to fill segments (bytes).
const zeroChunk = 1 << 20

// scanChunk is the size of the reads that check a segment's unused tail
// for zeros (bytes). Smaller than zeroChunk: these checks run at every
// Open, and a fresh 1 MiB buffer each time (cleared, and faulted in by the
// kernel) cost more than the reads.
const scanChunk = 64 << 10

// zeroBlock is scanChunk zero bytes, compared against and written from;
// never written to.
var zeroBlock [scanChunk]byte

// createSegment makes the segment starting at start durable under its final
// name: it writes the header and zeros to the full segment size into a
// temporary file, fsyncs it, renames it into place and fsyncs the directory
// (rule 9: a created file is followed by a directory fsync before anything
// depends on it). Because the rename is the last step, a segment file under
// its final name is always complete. stop, if non-nil, aborts the work
// between chunks (the file is then removed). durable, if not 0, is an LSN
// below which the log is durable now; the header records it as the
// segment's durable-LSN mark. tag is the log's identifier (segHeader).
func createSegment(fsys vfs.FS, dir string, start LSN, size int64, durable LSN, tag uint16, stop <-chan struct{}) error {
	final := path.Join(dir, segmentName(start))
	tmp := final + tempSuffix
	f, err := fsys.Create(tmp)
	if err != nil {
		return withPath("create", tmp, err)
	}
	fail := func(err error) error {
		f.Close()
		fsys.Remove(tmp)
		return err
	}
	buf := make([]byte, min(zeroChunk, size))
	encodeSegHeader(buf, segHeader{size: size, start: start, durable: durable, tag: tag})
	for off := int64(0); off < size; off += int64(len(buf)) {
		if stop != nil {
			select {
			case <-stop:
				return fail(errStopped)
			default:
			}
		}
		if _, err := f.WriteAt(buf, off); err != nil {
			return fail(withPathAt("write", tmp, off, err))
		}
		if off == 0 {
			clear(buf[:segHeaderSize])
		}
	}
	// Whole, and no more: a file the log uses has the segment size. Create
	// truncates a leftover file of the name, but the size is checked
	// rather than trusted, since a file of another size under the final
	// name would be damage to every later reader.
	if n, err := f.Size(); err != nil || n != size {
		if err == nil {
			err = fmt.Errorf("wal: %s is %d bytes once written, not the %d-byte segment size (a file of that name was there and was not truncated); it is not renamed into place", tmp, n, size)
		} else {
			err = fmt.Errorf("wal: size of %s: %w", tmp, err)
		}
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(withPath("fsync", tmp, err))
	}
	if err := f.Close(); err != nil {
		fsys.Remove(tmp)
		return withPath("close", tmp, err)
	}
	if err := fsys.Rename(tmp, final); err != nil {
		fsys.Remove(tmp)
		return withPath("rename", tmp, err)
	}
	if err := fsys.SyncDir(dir); err != nil {
		return fmt.Errorf("%w: %s: fsync directory %s: %w", errNameNotDurable, segmentName(start), dir, err)
	}
	return nil
}

var errStopped = errors.New("wal: segment preparation stopped")

// errNameNotDurable: a segment is in place under its final name, but the
// directory fsync that makes the name durable failed, so a crash may take
// the file, and every record written into it, away.
var errNameNotDurable = errors.New("wal: a new segment's name is not durable")

// segmentReady reports whether a complete segment file exists for start.
// Only the Writer's own preparation creates files under final names while it
// runs (OpenWriter removed every later segment), so existence and full size
// mean it is ready.
func segmentReady(fsys vfs.FS, dir string, start LSN, size int64) bool {
	n, err := fsys.Stat(path.Join(dir, segmentName(start)))
	return err == nil && n == size
}

// preparedEmpty reports whether the segment starting at start is one
// prepared ahead that holds no record: the segment size, a valid header for
// start, and zeros after it. OpenWriter keeps such a segment past the end
// of the log rather than removing it and preparing it again, so that
// opening a directory shut down cleanly rewrites nothing; it holds nothing
// stale that could resurface behind new records. It also returns the log
// identifier in the segment's header.
func preparedEmpty(fsys vfs.FS, dir string, start LSN, size int64) (tag uint16, ok bool) {
	f, err := fsys.OpenReadOnly(path.Join(dir, segmentName(start)))
	if err != nil {
		return 0, false
	}
	defer f.Close()
	if n, err := f.Size(); err != nil || n != size {
		return 0, false
	}
	h, err := readSegHeader(f, start, size)
	if err != nil {
		return 0, false
	}
	buf := make([]byte, min(scanChunk, size))
	for off := int64(segHeaderSize); off < size; {
		n := min(int64(len(buf)), size-off)
		if _, err := f.ReadAt(buf[:n], off); err != nil || !bytes.Equal(buf[:n], zeroBlock[:n]) {
			return 0, false
		}
		off += n
	}
	return h.tag, true
}

// listSegments returns the start LSNs of the segment files in dir, ascending,
// and the names of leftover temporary files.
func listSegments(fsys vfs.FS, dir string) (segs []LSN, temps []string, err error) {
	names, err := fsys.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil, nil
		}
		return nil, nil, withPath("list", dir, err)
	}
	for _, n := range names {
		if s, ok := parseSegmentName(n); ok {
			segs = append(segs, s)
		} else if strings.HasSuffix(n, tempSuffix) {
			if _, ok := parseSegmentName(strings.TrimSuffix(n, tempSuffix)); ok {
				temps = append(temps, n)
			}
		}
	}
	return segs, temps, nil
}

// newLogTag draws the identifier of a new log (segHeader.tag), never 0.
func newLogTag() uint16 {
	var b [2]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			// crypto/rand does not fail on supported systems; the clock
			// still tells logs apart.
			return uint16(time.Now().UnixNano()) | 1
		}
		if t := binary.LittleEndian.Uint16(b[:]); t != 0 {
			return t
		}
	}
}

// withPath and withPathAt word a file operation's error so that it names
// the file once (see internal/fserr).
func withPath(op, name string, err error) error { return fserr.Wrap("wal", op, name, err) }

func withPathAt(op, name string, off int64, err error) error {
	return fserr.WrapAt("wal", op, name, off, err)
}
