package clog

import (
	"errors"
	"fmt"
	"path"

	"mvkv/vfs"
)

// Backup writes a copy of the CLOG, as it stands now, into the directory
// dst on fsys (created if missing; the caller gives a new one): the
// truncation point's file, if the CLOG was ever truncated, and every page
// from the first of the truncation point's segment up to the page holding
// lastXid, each with a fresh checksum. Every file is fsynced, then dst.
//
// A page is copied from its buffer when one holds it and read from its
// file otherwise, under its bank's lock either way: no write of the page
// is in progress while it is read, so the copy holds no page torn by one
// (a plain copy of the files taken while the CLOG writes would). Statuses
// set while Backup runs may or may not be in the copy; a page in a buffer
// may hold statuses whose commit records are not durable yet. Both are
// for the caller's WAL copy to settle: the caller flushes the WAL past
// every status the copy can hold (everything inserted before Backup
// returned) and copies it, and redo of that WAL sets each status again,
// as after a crash. The caller also keeps Truncate from running meanwhile.
//
// Errors: ErrClosed after Close; an error wrapping ErrCorrupt, naming
// the file and offset, for a page not in a buffer that fails its checks
// (a copy would carry the damage on); I/O errors from either side, naming
// the file. Safe to call concurrently with every method but Truncate; it
// holds one bank's lock at a time, for one page.
func (c *CLOG) Backup(fsys vfs.FS, dst string, lastXid uint64) error {
	if c.closed.Load() {
		return ErrClosed
	}
	if err := fsys.MkdirAll(dst); err != nil {
		return fmt.Errorf("clog: backup: %w", err)
	}
	oldest := c.oldest.Load()
	if oldest > 0 {
		if err := writeSynced(fsys, path.Join(dst, oldestName), encodeOldest(oldest)); err != nil {
			return err
		}
	}
	img := make([]byte, PageSize)
	var out vfs.File
	var outName string
	finish := func() error {
		if out == nil {
			return nil
		}
		err := out.Sync()
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		out = nil
		if err != nil {
			return fmt.Errorf("clog: backup: write %s: %w", outName, err)
		}
		return nil
	}
	defer func() {
		if out != nil {
			out.Close()
		}
	}()
	first, last := SegmentOf(oldest)*PagesPerSegment, xidPage(lastXid)
	for p := first; p <= last; p++ {
		segno, off := pageSegment(p)
		if out == nil || off == 0 {
			if err := finish(); err != nil {
				return err
			}
			outName = path.Join(dst, segmentName(segno))
			f, err := fsys.Create(outName)
			if err != nil {
				return fmt.Errorf("clog: backup: %w", err)
			}
			out = f
		}
		if err := c.pageImage(p, img); err != nil {
			return err
		}
		encodePage(img, p)
		if _, err := out.WriteAt(img, off); err != nil {
			return fmt.Errorf("clog: backup: write %s at offset %d: %w", outName, off, err)
		}
	}
	if err := finish(); err != nil {
		return err
	}
	if err := fsys.SyncDir(dst); err != nil {
		return fmt.Errorf("clog: backup: fsync directory %s: %w", dst, err)
	}
	return nil
}

// pageImage copies page p's status bits into img (PageSize bytes; the
// header is left for the caller to stamp): from the buffer holding it, or
// from its file, with the bank's lock held so that no write of the page
// runs meanwhile (pages are written only from a buffer, which stays
// indexed until its write is done).
func (c *CLOG) pageImage(p uint64, img []byte) error {
	b := c.bankFor(p)
	c.lock(b)
	defer b.mu.Unlock()
	for {
		i, ok := b.index[p]
		if !ok {
			_, err := c.readPage(p, img)
			return err
		}
		if sl := &b.slots[i]; sl.state == slotValid {
			copy(img, sl.buf[:])
			return nil
		}
		// Being read in by someone else: wait for it.
		b.ioDone.Wait()
	}
}

// writeSynced writes b as the whole of a new file name and fsyncs it.
func writeSynced(fsys vfs.FS, name string, b []byte) error {
	f, err := fsys.Create(name)
	if err != nil {
		return fmt.Errorf("clog: backup: %w", err)
	}
	_, err = f.WriteAt(b, 0)
	if err == nil {
		err = f.Sync()
	}
	err = errors.Join(err, f.Close())
	if err != nil {
		return fmt.Errorf("clog: backup: write %s: %w", name, err)
	}
	return nil
}
