package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"mvkv/internal/filecopy"
	"mvkv/internal/heap"
	"mvkv/vfs"
)

// ErrBackupTargetExists is returned by Backup when its target directory,
// or the ".partial" directory it builds the copy in, already exists: a
// backup never writes into, or over, anything that was there.
var ErrBackupTargetExists = errors.New("mvkv: backup target already exists")

// BackupInfo describes a copy Backup made.
type BackupInfo struct {
	// Dir is the directory holding the copy.
	Dir string
	// StartLSN is the redo point of the checkpoint Backup took first, from
	// which opening the copy replays the WAL; EndLSN the end of the WAL
	// when the last page was copied: the copy holds every transaction that
	// committed before Backup was called, and no transaction whose commit
	// record lies past EndLSN. Which of those in between it holds is
	// settled when it is opened, as after a crash.
	StartLSN, EndLSN uint64
	// HeapPages, MapPages and WALSegments count what was copied; Bytes is
	// the size of the copy.
	HeapPages, MapPages, WALSegments uint64
	Bytes                            uint64
	// Duration is the time Backup took.
	Duration time.Duration
}

// Backup writes a consistent copy of the database into dir, a new
// directory (on the file system the database was opened with), while
// transactions keep running: PostgreSQL's base backup, as pg_basebackup
// takes one, made by the engine itself. The copy is a data directory that
// Open accepts as it is, recovering it as after a crash; it holds every
// transaction that committed before Backup was called (see BackupInfo).
//
// How: a checkpoint first, whose redo point the copy's recovery starts
// from; then every heap page and every visibility map page, each copied
// from the buffer pool under its shared content lock (never torn, and
// read through a small ring of buffers, as vacuum reads, so the working
// set stays cached), every CLOG page likewise, the index file and the
// control file of that checkpoint, and last the WAL from its redo point
// to its end, flushed first. A page may be copied at any state between the
// checkpoint and the end of the copy: redo of the copied WAL, which holds
// every change made to any page after the checkpoint (the first as a
// full-page image), brings each page to the same end, as recovery does
// after a crash. A plain copy of the files (cp -r) is no such copy: pages
// torn by writes in progress, and files copied at different moments (the
// WAL before a heap page that logged changes after it), can make a copy
// that recovery cannot repair.
//
// The copy is built in dir+".partial" and renamed to dir once every file
// in it is durable, so a crash or failure partway never leaves a dir that
// could be taken for a whole copy; a failed Backup removes what it wrote.
// While Backup runs, checkpoints, vacuum (and its truncations) and bulk
// loads wait for it, and the WAL written meanwhile stays until the next
// checkpoint after it: the copy needs that WAL, and pages moved by vacuum
// or cut off by truncation would make it harder to reason about. Reads
// and writes run as usual. A vacuum, checkpoint or bulk load running when
// Backup is called finishes first.
//
// dir's parent directories are created as needed (and fsynced, so that
// a power loss cannot take the copy's name away with them); a failed
// Backup removes its copy and those it created. A dir inside the data
// directory is refused, judged from the path as given (made absolute)
// and, on the operating system's file system, with symbolic links
// resolved and by identity (so a bind mount of it is seen through too).
// The context is looked at while Backup waits for a running vacuum,
// Verify, checkpoint, bulk load or other Backup to finish, once it holds
// the locks it waits for, while pages are copied, and between the parts
// of the copy.
//
// Errors: ErrBackupTargetExists when dir or dir+".partial" exists (a
// symbolic link to nothing counts as existing, as the rename cannot
// replace it); the failure that stopped the database taking writes
// (Failure), as the copy could not be trusted; ErrClosed after Close
// (Close waits for a running Backup to stop at its next page); ctx's
// error, wrapped with dir once the copy has begun; an error wrapping
// ErrCorruption, naming the file and offset, when a page that must be
// read from disk fails its checks; I/O errors naming the file. Safe to
// call concurrently with every other method; one Backup runs at a time.
func (db *DB) Backup(ctx context.Context, dir string) (BackupInfo, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	begin := time.Now()
	info := BackupInfo{Dir: filepath.Clean(dir)}
	if dir == "" {
		return info, errors.New("mvkv: backup needs a target directory; the empty path names none")
	}
	// Not closeMu for the whole copy (see BulkLoad): longOps, which Close
	// waits for, and db.closeBegun, which ends the copy at its next page.
	// closeBegun, not closing, which Close closes only once it has
	// closeMu: a Checkpoint may wait for this copy with closeMu held.
	db.closeMu.RLock()
	if db.closed.Load() {
		db.closeMu.RUnlock()
		return info, ErrClosed
	}
	db.longOps.Add(1)
	db.closeMu.RUnlock()
	defer db.longOps.Done()
	if err := db.writable(); err != nil {
		return info, err
	}
	inside := inDataDir(db.fs, db.dir)
	if inside(info.Dir) {
		return info, fmt.Errorf("mvkv: backup: %s lies inside the data directory %s: give a directory outside it", info.Dir, db.dir)
	}
	partial := info.Dir + ".partial"
	// The data directory named X.partial, and X as the target: the
	// check below would call it a copy cut short, which can be removed.
	if inside(partial) {
		return info, fmt.Errorf("mvkv: backup: %s, where a backup into %s builds its copy, is the data directory %s: give another directory", partial, info.Dir, db.dir)
	}
	targetFree := func() error {
		for _, d := range []string{info.Dir, partial} {
			_, err := db.fs.Stat(d)
			if errors.Is(err, fs.ErrNotExist) && isLink(db.fs, d) {
				// A dangling symbolic link: Stat follows it and finds
				// nothing, but the final rename cannot replace it, and
				// would fail only once everything had been copied.
				return fmt.Errorf("%w: %s is a symbolic link to nothing (remove it or give a new directory)", ErrBackupTargetExists, d)
			}
			if err == nil && d == partial {
				return fmt.Errorf("%w: %s, where a backup builds its copy (one is running, or one cut short left it, which can then be removed)", ErrBackupTargetExists, d)
			} else if err == nil {
				return fmt.Errorf("%w: %s (give a new directory)", ErrBackupTargetExists, d)
			} else if !errors.Is(err, fs.ErrNotExist) {
				return wrapf(err, "backup")
			}
		}
		return nil
	}
	if err := targetFree(); err != nil {
		return info, err
	}
	// Vacuum moves versions between pages and truncates the heap and the
	// CLOG; a checkpoint would remove WAL the copy needs and rewrite the
	// control and index files being copied. Both wait, in the order
	// Verify takes them.
	if err := db.vac.mu.lockCtx(ctx, db.closeBegun); err != nil {
		return info, err
	}
	defer db.vac.mu.Unlock()
	if err := db.ckptMu.lockCtx(ctx, db.closeBegun); err != nil {
		return info, err
	}
	defer db.ckptMu.Unlock()
	// A cancel or Close while this waited for a vacuum or checkpoint to
	// finish ends it here, before it runs a checkpoint of its own.
	if err := db.backupStop(ctx); err != nil {
		return info, err
	}
	// Again under the locks: another Backup into the same place may have
	// finished while this one waited for them.
	if err := targetFree(); err != nil {
		return info, err
	}
	if err := db.checkpointLocked(); err != nil {
		return info, err
	}
	parents, err := mkdirDurable(db.fs, filepath.Dir(info.Dir))
	if err == nil {
		err = db.fs.MkdirAll(partial)
	}
	if err != nil {
		err = wrapf(err, "backup")
	} else {
		err = db.backupInto(ctx, partial, &info)
	}
	written := partial
	if err == nil {
		if err = db.fs.Rename(partial, info.Dir); err == nil {
			// Renamed but not durably so: a copy whose name a power
			// loss may undo is no copy to report, nor one to leave
			// where it would be taken for one. Its parents were made
			// durable before (mkdirDurable).
			written = info.Dir
			err = db.fs.SyncDir(filepath.Dir(info.Dir))
			if err != nil {
				err = wrapf(err, "backup: fsync the directory holding %s", info.Dir)
			}
		} else {
			err = wrapf(err, "backup")
		}
	}
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("mvkv: backup into %s stopped: %w", info.Dir, err)
		}
		db.logger.Warn("backup failed; its unfinished copy is removed", "dir", info.Dir, "err", err)
		if rerr := removeAll(db.fs, written); rerr != nil {
			db.logger.Warn("backup: removing the unfinished copy", "dir", written, "err", rerr)
		}
		// And the parents it made, deepest first, while they are empty
		// (another Backup may have put its own copy in one meanwhile).
		for _, d := range parents {
			if names, rerr := db.fs.ReadDir(d); rerr != nil || len(names) > 0 || db.fs.Remove(d) != nil {
				break
			}
		}
		return info, err
	}
	info.Duration = time.Since(begin)
	db.logger.Info("backup complete", "dir", info.Dir, "startLSN", info.StartLSN, "endLSN", info.EndLSN,
		"heapPages", info.HeapPages, "mapPages", info.MapPages, "walSegments", info.WALSegments, "bytes", info.Bytes, "took", info.Duration)
	return info, nil
}

// mkdirDurable creates dir and whatever of its parents is missing, and
// fsyncs the directory holding each one it created: the final rename's
// directory fsync makes the copy's name durable in dir, which is of no
// use if dir itself can vanish in a power loss. It returns the
// directories it created, deepest first.
func mkdirDurable(fsys vfs.FS, dir string) ([]string, error) {
	var missing []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := fsys.Stat(d); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		} else if isLink(fsys, d) {
			// MkdirAll would fail on it with a bare "file exists".
			return nil, fmt.Errorf("%s is a symbolic link to nothing, where a directory above the target must go", d)
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if len(missing) == 0 {
		return nil, nil
	}
	if err := fsys.MkdirAll(dir); err != nil {
		return nil, err
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := fsys.SyncDir(filepath.Dir(missing[i])); err != nil {
			return missing, fmt.Errorf("fsync the directory holding %s: %w", missing[i], err)
		}
	}
	return missing, nil
}

// insideDir reports whether path is dir or lies under it, lexically (both
// made absolute against the working directory first).
func insideDir(dir, path string) bool {
	if a, err := filepath.Abs(dir); err == nil {
		dir = a
	}
	if a, err := filepath.Abs(path); err == nil {
		path = a
	}
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// inDataDir returns a test of whether a path lies inside dataDir: by the
// path as given and with symbolic links resolved (realPath), and, on the
// OS file system, by identity: whether an existing directory on the way
// from the path up to the root is dataDir or a directory inside it (the
// same device and inode), as a bind mount of the data directory, of a
// directory above it or of one inside it (its WAL or heap directory)
// names it by a path that no resolving of symbolic links reaches. The
// data directory is read once, for every path tested.
func inDataDir(fsys vfs.FS, dataDir string) func(path string) bool {
	// realPath leaves a path with no link in it as it is, so the
	// lexical test also judges the paths as given.
	data := realPath(fsys, dataDir)
	var dirs []os.FileInfo
	if _, ok := fsys.(vfs.OS); ok {
		_ = filepath.WalkDir(data, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				if fi, err := os.Stat(p); err == nil {
					dirs = append(dirs, fi)
				}
			}
			return nil
		})
	}
	return func(path string) bool {
		if insideDir(data, realPath(fsys, path)) {
			return true
		}
		if len(dirs) == 0 {
			return false
		}
		if a, err := filepath.Abs(path); err == nil {
			path = a
		}
		for p := path; ; p = filepath.Dir(p) {
			if fi, err := os.Stat(p); err == nil {
				for _, d := range dirs {
					if os.SameFile(fi, d) {
						return true
					}
				}
			}
			if filepath.Dir(p) == p {
				return false
			}
		}
	}
}

// isLink reports whether path is a symbolic link on the OS file system
// (the others have none).
func isLink(fsys vfs.FS, path string) bool {
	if _, ok := fsys.(vfs.OS); !ok {
		return false
	}
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode()&fs.ModeSymlink != 0
}

// realPath resolves the symbolic links in the longest part of path that
// exists, on the OS file system (the others have none): a target named
// through a link to the data directory, or a data directory opened through
// one, is inside it all the same.
func realPath(fsys vfs.FS, path string) string {
	if _, ok := fsys.(vfs.OS); !ok {
		return path
	}
	if a, err := filepath.Abs(path); err == nil {
		path = a
	}
	rest := ""
	for p := path; ; {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(r, rest)
		}
		parent := filepath.Dir(p)
		if parent == p {
			return path
		}
		rest = filepath.Join(filepath.Base(p), rest)
		p = parent
	}
}

// backupStop returns ErrClosed once Close has begun, else ctx's error.
func (db *DB) backupStop(ctx context.Context) error {
	select {
	case <-db.closeBegun:
		return ErrClosed
	default:
	}
	return ctx.Err()
}

// backupInto writes the copy into dir, which exists; the caller holds the
// checkpoint lock and vacuum's, right after a checkpoint.
func (db *DB) backupInto(ctx context.Context, dir string, info *BackupInfo) error {
	ctrl, _, err := readControl(db.fs, db.dir)
	if err != nil {
		return err
	}
	info.StartLSN = uint64(ctrl.RedoLSN)
	stop := func() error { return db.backupStop(ctx) }

	// The heap, through a ring.
	st, err := heap.OpenStorage(db.fs, filepath.Join(dir, heapDir))
	if err != nil {
		return wrapf(err, "backup")
	}
	err = db.pool.CopyBlocks(db.pool.NBlocks(), vacuumRingFrames, func(blk uint32, p []byte) error {
		if blk%64 == 0 {
			if err := stop(); err != nil {
				return err
			}
		}
		info.HeapPages++
		return st.WriteBlock(blk, p)
	})
	if err == nil {
		err = st.Sync()
	}
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return db.backupErr("copying the heap", err)
	}
	if err := stop(); err != nil {
		return err
	}
	info.MapPages = uint64(db.vm.NBlocks())
	if err := db.vm.Backup(db.fs, filepath.Join(dir, vmDir)); err != nil {
		return db.backupErr("copying the visibility map", err)
	}
	if err := stop(); err != nil {
		return err
	}
	// Every xid handed out so far: a status set on a later one comes
	// with a commit or abort record past this point, which redo of the
	// copied WAL sets again.
	if next := db.procs.next(); next > 0 {
		if err := db.clog.Backup(db.fs, filepath.Join(dir, clogDir), next-1); err != nil {
			return db.backupErr("copying the CLOG", err)
		}
	} else if err := db.fs.MkdirAll(filepath.Join(dir, clogDir)); err != nil {
		return wrapf(err, "backup")
	}
	if err := stop(); err != nil {
		return err
	}
	// The WAL last, flushed to its end: past every LSN on a page copied
	// above, so that no copied page is newer than the copied WAL.
	end := db.wal.InsertLSN()
	if err := db.wal.FlushData(end); err != nil {
		return db.fail(err)
	}
	info.EndLSN = uint64(end)
	segs, err := db.wal.Backup(db.fs, filepath.Join(dir, walDir), ctrl.RedoLSN, end)
	if err != nil {
		return db.backupErr("copying the WAL", err)
	}
	info.WALSegments = uint64(segs)

	// The index file of the checkpoint (a missing one is rebuilt by
	// Open), then, last, the control file naming that checkpoint (no
	// checkpoint has rewritten either since: the caller holds the
	// checkpoint lock): a directory with no control file is no data
	// directory Open would recover (it has WAL, so Open says the control
	// file is missing). The index file may be hundreds of megabytes:
	// copied a buffer at a time.
	buf := make([]byte, 1<<20)
	if err := filecopy.Synced(db.fs, filepath.Join(db.dir, indexFileName), db.fs, filepath.Join(dir, indexFileName), -1, 0, buf); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := filecopy.Synced(db.fs, filepath.Join(db.dir, controlName), db.fs, filepath.Join(dir, controlName), -1, 0, buf); err != nil {
		return err
	}
	if err := db.fs.SyncDir(dir); err != nil {
		return wrapf(err, "backup: fsync directory %s", dir)
	}
	info.Bytes = dirBytes(db.fs, dir)
	return nil
}

// backupErr wraps a copy's error; one that the source's damage caused
// matches ErrCorruption, as it does from the read that met it.
func (db *DB) backupErr(what string, err error) error {
	if errors.Is(err, ErrClosed) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return wrapf(asCorruption(err), "backup: %s", what)
}

// dirBytes sums the sizes of the files under dir (0 for what cannot be
// read: the figure is for reports).
func dirBytes(fsys vfs.FS, dir string) uint64 {
	names, err := fsys.ReadDir(dir)
	if err != nil {
		return 0
	}
	var n uint64
	for _, name := range names {
		p := filepath.Join(dir, name)
		if _, err := fsys.ReadDir(p); err == nil {
			n += dirBytes(fsys, p)
		} else if size, err := fsys.Stat(p); err == nil && size >= 0 {
			n += uint64(size)
		}
	}
	return n
}

// removeAll removes dir and everything under it from fsys.
func removeAll(fsys vfs.FS, dir string) error {
	names, err := fsys.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err == nil {
		for _, name := range names {
			if err := removeAll(fsys, filepath.Join(dir, name)); err != nil {
				return err
			}
		}
	}
	if err := fsys.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
