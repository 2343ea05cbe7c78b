package clog

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sync"
	"sync/atomic"

	"mvkv/internal/fserr"
	"mvkv/vfs"
)

// maxOpenSegments bounds the segment files kept open. A segment covers about
// a million xids, so a long-lived database looking up old xids would
// otherwise hold a descriptor for every segment it ever touched.
const maxOpenSegments = 64

// segFiles caches the open segment files. A segment is opened at its first
// read or write and stays open until Close, or until more than
// maxOpenSegments are open and it is the least recently used one that is
// neither in use nor waiting for an fsync.
type segFiles struct {
	// mu guards open, and each segFile's refs and lastUse; it also
	// serializes opening and creating files so a segment is created (and
	// its directory entry synced) exactly once.
	mu    sync.Mutex
	open  map[uint64]*segFile
	clock uint64 // guarded by mu; advanced on every acquire
}

// segFile is one open segment file.
type segFile struct {
	f    vfs.File
	name string
	// refs counts callers between segment and release; a file is closed
	// only at zero. Guarded by segFiles.mu.
	refs int
	// lastUse is segFiles.clock at the last acquire. Guarded by
	// segFiles.mu.
	lastUse uint64
	// needsSync is set before every write and cleared just before the
	// fsync that covers it, so a write racing a Checkpoint's fsync is
	// synced by the next one.
	needsSync atomic.Bool
	// forgotten is set when Truncate dropped the file from segFiles.open
	// while it was in use; the release that brings refs to zero closes it.
	// Guarded by segFiles.mu.
	forgotten bool
}

func (s *segFiles) init() { s.open = make(map[uint64]*segFile) }

// segment returns the open file of segment segno, which the caller must hand
// back to release when done with it. When the file does not exist it returns
// nil if create is false; otherwise it creates the file and syncs the
// directory before returning, so that no page write (and no Checkpoint
// fsync) can depend on a directory entry that a crash would lose (DESIGN
// rule 9).
func (c *CLOG) segment(segno uint64, create bool) (*segFile, error) {
	s := &c.files
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clock++
	if sf, ok := s.open[segno]; ok {
		sf.refs++
		sf.lastUse = s.clock
		return sf, nil
	}
	s.trimLocked(maxOpenSegments - 1)
	name := path.Join(c.dir, segmentName(segno))
	f, err := c.fs.Open(name)
	switch {
	case errors.Is(err, fs.ErrNotExist) && !create:
		return nil, nil
	case errors.Is(err, fs.ErrNotExist):
		f, err = c.fs.Create(name)
		if err != nil {
			return nil, withPath("create", name, err)
		}
		c.stats.fileSyncs.Add(1)
		if err := c.fs.SyncDir(c.dir); err != nil {
			f.Close()
			return nil, c.fail(fmt.Errorf("clog: sync directory %s after creating %s: %w", c.dir, name, err))
		}
	case err != nil:
		return nil, withPath("open", name, err)
	}
	sf := &segFile{f: f, name: name, refs: 1, lastUse: s.clock}
	s.open[segno] = sf
	return sf, nil
}

// release hands back a file obtained from segment.
func (s *segFiles) release(sf *segFile) {
	s.mu.Lock()
	sf.refs--
	if sf.refs == 0 && sf.forgotten {
		sf.f.Close() // its file was removed; a close error changes nothing
	}
	s.mu.Unlock()
}

// trimLocked closes least recently used open files until at most limit are
// open, skipping files in use and files with a write awaiting fsync (closing
// one would lose the chance to learn of a write-back error at the next
// Checkpoint); if those alone exceed limit, more files stay open for now. A
// close error is ignored: the file holds no unsynced writes, so there is
// nothing it could have lost.
func (s *segFiles) trimLocked(limit int) {
	for len(s.open) > limit {
		var (
			victim *segFile
			segno  uint64
		)
		for n, sf := range s.open {
			if sf.refs > 0 || sf.needsSync.Load() {
				continue
			}
			if victim == nil || sf.lastUse < victim.lastUse {
				victim, segno = sf, n
			}
		}
		if victim == nil {
			return
		}
		victim.f.Close()
		delete(s.open, segno)
	}
}

// readPage fills buf (len PageSize) with page pageno from disk. A missing
// segment file, or a page at or beyond the end of its file, reads as zeros
// (all in progress); a page cut short by the end of the file is padded with
// zeros and then checked like any other. A page that fails decodePage is an
// ErrCorrupt error naming the file and offset, except during recovery
// (Options.Recovery until EndRecovery): a page holding only xids at or
// above Options.RedoXid has its bits discarded, so that redo rebuilds it;
// any other is taken to be torn by the crash and keeps its bits; either
// way rebuilt is true and the page is rewritten whole at the next
// checkpoint.
func (c *CLOG) readPage(pageno uint64, buf []byte) (rebuilt bool, err error) {
	segno, off := pageSegment(pageno)
	c.stats.pageReads.Add(1)
	sf, err := c.segment(segno, false)
	if err != nil {
		return false, err
	}
	if sf == nil {
		clear(buf)
		return false, nil
	}
	defer c.files.release(sf)
	n, err := sf.f.ReadAt(buf, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return false, withPathAt("read", sf.name, off, err)
	}
	clear(buf[n:])
	if derr := decodePage(buf, pageno); derr != nil {
		lo, hi := c.pageXids(pageno)
		if !c.recovering.Load() {
			return false, fmt.Errorf("%w: %s at offset %d (page %d): %v: the commit statuses of xids %d to %d cannot be trusted",
				ErrCorrupt, sf.name, off, pageno, derr, lo, hi)
		}
		if pageno*XidsPerPage < c.opts.RedoXid {
			// It may have been written again after the checkpoint (it
			// holds xids that were running then, or the next xid) and
			// torn by the crash: each 512-byte sector holds its old or
			// its new bits, and redo sets every status decided since
			// the redo point again. Its bits are kept.
			c.log.Warn("clog: accepting a page that fails its checksum as torn by the crash, if what the WAL still holds agrees",
				"file", sf.name, "offset", off, "page", pageno, "problem", derr.Error(),
				"xids", fmt.Sprintf("%d to %d", lo, hi))
			clear(buf[:headerSize])
			c.tornMu.Lock()
			if c.torn == nil {
				c.torn = map[uint64]string{}
			}
			c.torn[pageno] = fmt.Sprintf("%s at offset %d", sf.name, off)
			c.tornMu.Unlock()
			return true, nil
		}
		c.log.Warn("clog: rebuilding a damaged page from the WAL during recovery",
			"file", sf.name, "offset", off, "page", pageno, "problem", derr.Error(),
			"xids", fmt.Sprintf("%d to %d", lo, hi), "redoXid", c.opts.RedoXid)
		clear(buf)
		return true, nil
	}
	return false, nil
}

// pageXids returns the first and last xid of page pageno that lie at or
// above the truncation point.
func (c *CLOG) pageXids(pageno uint64) (lo, hi uint64) {
	return max(pageno*XidsPerPage, c.oldest.Load()), (pageno+1)*XidsPerPage - 1
}

// writePage writes the stamped page image img as page pageno, creating its
// segment file if needed.
func (c *CLOG) writePage(pageno uint64, img []byte) error {
	segno, off := pageSegment(pageno)
	sf, err := c.segment(segno, true)
	if err != nil {
		return err
	}
	defer c.files.release(sf)
	sf.needsSync.Store(true)
	c.stats.pageWrites.Add(1)
	if _, err := sf.f.WriteAt(img, off); err != nil {
		return withPathAt("write", sf.name, off, err)
	}
	return nil
}

// syncFiles fsyncs every segment file written since its last fsync.
func (c *CLOG) syncFiles() error {
	s := &c.files
	s.mu.Lock()
	var todo []*segFile
	for _, sf := range s.open {
		if sf.needsSync.Load() {
			sf.refs++ // not closed while we sync it
			todo = append(todo, sf)
		}
	}
	s.mu.Unlock()
	var first error
	for _, sf := range todo {
		if first == nil && sf.needsSync.CompareAndSwap(true, false) {
			c.stats.fileSyncs.Add(1)
			if err := sf.f.Sync(); err != nil {
				first = withPath("fsync", sf.name, err)
			}
		}
		s.release(sf)
	}
	// Files kept open only because they awaited this fsync can go now.
	s.mu.Lock()
	s.trimLocked(maxOpenSegments)
	s.mu.Unlock()
	return first
}

// closeAll closes every open segment file and returns the first error.
func (s *segFiles) closeAll() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var first error
	for segno, sf := range s.open {
		if err := sf.f.Close(); err != nil && first == nil {
			first = withPath("close", sf.name, err)
		}
		delete(s.open, segno)
	}
	return first
}

// withPath and withPathAt word a file operation's error so that it names
// the file once (see internal/fserr).
func withPath(op, name string, err error) error { return fserr.Wrap("clog", op, name, err) }

func withPathAt(op, name string, off int64, err error) error {
	return fserr.WrapAt("clog", op, name, off, err)
}
