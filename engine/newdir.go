package engine

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"

	"mvkv/clog"
	"mvkv/internal/heap"
	"mvkv/internal/rmgr"
	"mvkv/vfs"
	"mvkv/wal"
)

// A first Open that fails removes what it made. Open makes a data
// directory in a directory that is missing or new (checkForeignDir): the
// directory itself and any missing parents, the four subdirectories, the
// lock file, and, if it gets that far, the first WAL segments, the CLOG's
// first segment and the control and index files. Left behind after a
// failure (a setting recovery refuses, a full disk, a failed fsync), they
// would make the directory look like a database that was begun, and the
// next Open would take it for one. initdb removes the data directory it
// made when it fails, for the same reason; here exactly what this Open
// made goes, and nothing that was there before it: a directory the caller
// made and gave empty stays, empty again, and so does anything a first
// Open cut short by a crash left there.
//
// What was there is listed before anything is made; the undo lists the
// directories again and removes every name not on the first list, files
// before their directories, while it still holds the lock (so that no
// other Open can have begun to use them), then the lock file, then, once
// the lock is released, the data directory and the parents Open made.
// Only names the engine gives its files are removed, and directories only
// when empty, so that a file put there meanwhile by anyone else stays and
// keeps its directories, instead of going with them.
// Nothing is removed from a directory that was a data directory: what
// recovery wrote there is redone by the next Open, and the rest is the
// database's. What could not be removed is named in Open's error, after
// the reason Open failed, which stays matchable with errors.Is.

// newDirUndo is what a new data directory held before Open made anything
// in it (see above).
type newDirUndo struct {
	fsys vfs.FS
	dir  string
	// missing are dir and those of its parents that did not exist,
	// deepest first.
	missing []string
	// had holds the paths that existed in dir and its subdirectories.
	had map[string]bool
	// failed are the paths that could not be removed.
	failed []string
}

// newDirSubdirs are the subdirectories Open makes in a data directory.
var newDirSubdirs = []string{walDir, heapDir, clogDir, vmDir}

// noteNewDir lists what dir (fresh, as checkForeignDir found it) and its
// missing parents hold before Open makes anything there.
func noteNewDir(fsys vfs.FS, dir string) (*newDirUndo, error) {
	u := &newDirUndo{fsys: fsys, dir: dir, had: map[string]bool{}}
	for p := dir; ; p = filepath.Dir(p) {
		_, err := fsys.ReadDir(p)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, wrapf(err, "read %s", p)
		}
		u.missing = append(u.missing, p)
		if filepath.Dir(p) == p {
			break
		}
	}
	if len(u.missing) > 0 {
		return u, nil
	}
	names, err := fsys.ReadDir(dir)
	if err != nil {
		return nil, wrapf(err, "read %s", dir)
	}
	for _, n := range names {
		u.had[filepath.Join(dir, n)] = true
	}
	for _, sub := range newDirSubdirs {
		d := filepath.Join(dir, sub)
		if !u.had[d] {
			continue
		}
		names, err := fsys.ReadDir(d)
		if err != nil {
			return nil, wrapf(err, "read %s", d)
		}
		for _, n := range names {
			u.had[filepath.Join(d, n)] = true
		}
	}
	return u, nil
}

// dirsToSync returns the directories whose entries Open syncs once it
// holds the lock on dir: dir, its parent, and the parent of each missing
// parent that made (a new data directory's newDirUndo, nil for one that
// existed) lists, deepest first, so that every directory Open made has a
// durable entry.
func dirsToSync(dir string, made *newDirUndo) []string {
	dirs := []string{dir, filepath.Dir(dir)}
	if made == nil {
		return dirs
	}
	for _, d := range made.missing {
		if p := filepath.Dir(d); !slices.Contains(dirs, p) {
			dirs = append(dirs, p)
		}
	}
	return dirs
}

// undo removes what Open made since noteNewDir and returns err, the
// reason Open failed. lock, if not nil, is the data directory's lock,
// which undo releases (after removing the files, before the directories
// Open made). A nil u (a data directory that existed) only releases the
// lock.
func (u *newDirUndo) undo(lock io.Closer, err error) error {
	if u == nil {
		if lock != nil {
			lock.Close()
		}
		return err
	}
	for _, sub := range newDirSubdirs {
		d := filepath.Join(u.dir, sub)
		names, _ := u.fsys.ReadDir(d)
		for _, n := range names {
			u.remove(filepath.Join(d, n))
		}
		u.remove(d)
	}
	names, _ := u.fsys.ReadDir(u.dir)
	for _, n := range names {
		if n != lockName {
			u.remove(filepath.Join(u.dir, n))
		}
	}
	if lock != nil {
		// Removed while still held, so that no other Open takes the
		// lock on it between the release and the removal.
		u.remove(filepath.Join(u.dir, lockName))
		lock.Close()
	}
	for _, d := range u.missing {
		if len(u.failed) > 0 {
			break // not empty: its parents are not either
		}
		// Made by this Open, and removed only if empty.
		if err := u.fsys.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
			u.failed = append(u.failed, d)
		}
	}
	if len(u.failed) > 0 {
		err = fmt.Errorf("%w (and what it made in %s could not all be removed: %v)", err, u.dir, u.failed)
	}
	return err
}

// remove removes path if Open made it, noting a failure. A file whose
// name the engine never gives is another program's, put there while Open
// ran: it stays, and so do the directories holding it.
func (u *newDirUndo) remove(path string) {
	if u.had[path] {
		return
	}
	if !u.ownName(path) {
		u.failed = append(u.failed, path)
		return
	}
	if err := u.fsys.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		u.failed = append(u.failed, path)
	}
}

// ownName reports whether path, in u.dir, is one of the names Open gives
// what it makes (ownFileName).
func (u *newDirUndo) ownName(path string) bool {
	rel, err := filepath.Rel(u.dir, path)
	if err != nil {
		return false
	}
	sub, name := filepath.Split(rel)
	sub = filepath.Clean(sub)
	if sub == "." {
		sub = ""
	}
	return ownFileName(sub, name)
}

// ownFileName is rmgr.Engine.OwnFile: whether name is one the engine gives
// what it keeps in subdirectory sub of a data directory ("" for the
// directory itself).
func ownFileName(sub, name string) bool {
	switch sub {
	case "":
		return slices.Contains(newDirSubdirs, name) || slices.Contains(rmgr.Engine.RootFiles, name)
	case walDir:
		return wal.IsSegmentName(name)
	case heapDir, vmDir:
		return heap.IsSegmentName(name)
	case clogDir:
		_, seg := clog.ParseSegmentName(name)
		return seg || clog.IsOwnFile(name)
	}
	return false
}
