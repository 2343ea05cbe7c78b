package vfs

import (
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// SectorSize is the unit in bytes that a disk writes atomically: TearLast
// cuts a torn write at a multiple of it, never inside a sector.
const SectorSize = 512

// MaxMemFileSize is the largest size in bytes of a MemFS file (16 GiB). A
// write or truncation that would make a file longer fails with EFBIG, as one
// past a real file system's limit does (16 TiB on ext4 with 4 KiB blocks).
// MemFS keeps a pointer per 4 KiB of a file's length, holes included, so
// without a limit a stray offset would be an allocation of its size (or a
// crash) rather than an error; 16 GiB is far above any file mvkv makes (heap
// segments are 1 GiB, WAL segments smaller) and costs at most 32 MiB of
// pointers.
const MaxMemFileSize = 1 << 34

// CrashMode says what a crash copy keeps of the state that was not yet durable
// when the simulated power loss happened. Whatever was made durable (file
// data by Sync or Datasync, directory entries by SyncDir of their directory)
// survives in every mode.
type CrashMode int

const (
	// DropUnsynced loses every write, truncation and directory change made
	// since the last Sync of its file or SyncDir of its directory.
	DropUnsynced CrashMode = iota
	// KeepRandom keeps or loses each unsynced write, truncation and
	// directory change independently at random, applying the kept ones in
	// their original order. One decision is taken per operation, so both
	// halves of a rename between two directories are kept or lost together.
	// This allows more outcomes than a journaling file system would (ext4
	// commits metadata in order), which is what a crash test wants.
	KeepRandom
	// TearLast is DropUnsynced, except that the last unsynced write to each
	// file is kept torn: a prefix of it ending at a SectorSize boundary of
	// the file, at least one byte short of the whole write. A write that does
	// not cross a sector boundary is lost whole (sector writes are atomic).
	TearLast
)

// String returns the mode's Go name.
func (c CrashMode) String() string {
	switch c {
	case DropUnsynced:
		return "DropUnsynced"
	case KeepRandom:
		return "KeepRandom"
	case TearLast:
		return "TearLast"
	}
	return fmt.Sprintf("CrashMode(%d)", int(c))
}

// OpKind names a file-system operation, as recorded in MemFS's op log and
// counted and failed by FaultFS.
type OpKind uint8

// The mutating kinds, which MemFS records, come first; the rest are seen
// only by FaultFS.
const (
	OpCreate   OpKind = iota + 1 // FS.Create, and FS.Lock when it creates the file
	OpWrite                      // File.WriteAt
	OpTruncate                   // File.Truncate
	OpSync                       // File.Sync
	OpDatasync                   // File.Datasync
	OpRename                     // FS.Rename
	OpRemove                     // FS.Remove
	OpMkdir                      // FS.MkdirAll, once per directory created
	OpSyncDir                    // FS.SyncDir
	OpOpen                       // FS.Open and FS.OpenReadOnly
	OpRead                       // File.ReadAt
	OpStat                       // FS.Stat and File.Size
	OpReadDir                    // FS.ReadDir
	OpLock                       // FS.Lock
	numOpKinds
)

var opKindNames = [numOpKinds]string{
	OpCreate: "create", OpWrite: "write", OpTruncate: "truncate", OpSync: "sync",
	OpDatasync: "datasync", OpRename: "rename", OpRemove: "remove", OpMkdir: "mkdir",
	OpSyncDir: "syncdir", OpOpen: "open", OpRead: "read", OpStat: "stat",
	OpReadDir: "readdir", OpLock: "lock",
}

// String returns the kind's lower-case name ("write", "syncdir", ...).
func (k OpKind) String() string {
	if k > 0 && k < numOpKinds {
		return opKindNames[k]
	}
	return fmt.Sprintf("OpKind(%d)", int(k))
}

// Op is one completed mutating operation in MemFS's log.
type Op struct {
	// Index is the operation's position in the log, starting at 1: the
	// crash point "after op i" is the state once the op with Index i has
	// completed.
	Index int64
	Kind  OpKind
	// Path is the cleaned, absolute name of the file or directory (for a
	// rename, the old name).
	Path string
	// NewPath is the new name of a rename.
	NewPath string
	// Offset is a write's file offset in bytes, or a truncation's new size.
	Offset int64
	// Length is a write's length in bytes.
	Length int64
}

// String formats the op for failure messages, e.g. "#12 write /d/f @8192+512".
func (o Op) String() string {
	switch o.Kind {
	case OpWrite:
		return fmt.Sprintf("#%d write %s @%d+%d", o.Index, o.Path, o.Offset, o.Length)
	case OpTruncate:
		return fmt.Sprintf("#%d truncate %s to %d", o.Index, o.Path, o.Offset)
	case OpRename:
		return fmt.Sprintf("#%d rename %s -> %s", o.Index, o.Path, o.NewPath)
	}
	return fmt.Sprintf("#%d %s %s", o.Index, o.Kind, o.Path)
}

// MemFS is an in-memory FS that knows, for every file and directory entry,
// what has been made durable, so that it can produce the file system a
// machine would find after losing power: a crash copy. It is the analog of
// pebble's vfs.MemFS with its crash-clone support.
//
// Durability follows POSIX as ext4 honours it without dirsync: a file's data
// (writes and truncations) becomes durable at File.Sync or File.Datasync,
// which are treated alike; creating, renaming or removing a name, and
// creating a directory, become durable only at SyncDir of the directory that
// holds the name. Syncing a file does not make its name durable, and a
// durable name whose file was never synced comes back empty. A directory
// whose own entry is lost in a crash takes its whole subtree with it.
//
// Every successful mutating operation is counted and logged in order (see
// Op). A test takes crash copies in one of three ways:
//   - CrashCopy, for the state now;
//   - SetCrashAfter(i) before running a workload, then CrashState, a Clone
//     frozen when op i completed, from which crash copies in any mode can be
//     made afterwards;
//   - SetOpHook, whose function runs after every op and may take a crash copy
//     (or a Clone) of that exact point, to enumerate every crash point of a
//     workload in a single run.
//
// Names are slash-separated; relative names are taken from the root, so "d"
// and "/d" are the same directory. Errors are *fs.PathError (*os.LinkError
// for Rename) wrapping the errno the operating system would return, so
// errors.Is(err, fs.ErrNotExist) and fs.ErrExist work as with OS. A file
// holds at most MaxMemFileSize bytes (EFBIG past it). Lock is exclusive
// within one MemFS: a second Lock of the same file returns
// ErrLocked until the first is closed.
//
// All methods are safe for concurrent use; one lock serializes mutations
// (reads share it).
type MemFS struct {
	mu sync.RWMutex
	// root is the root directory; it is durable by definition. Guarded by mu,
	// as is every inode reachable from it.
	root *inode
	// ops counts completed mutating operations. Guarded by mu.
	ops int64
	// log holds the ops in order while logging is on. Guarded by mu.
	log     []Op
	logging bool // guarded by mu
	// locked holds the inodes locked with Lock (flock locks the file, not
	// the name). Guarded by mu.
	locked map[*inode]bool
	// crashAfter is the op index at which to freeze crashState. Guarded by mu.
	crashAfter int64
	crashState *MemFS           // guarded by mu
	hook       func(CrashPoint) // guarded by mu
}

var _ FS = (*MemFS)(nil)

// inode is a file or a directory. Files and directories keep two views: the
// current one, which reads see, and the durable one, which survives a crash,
// with the changes between them in order so that a crash copy can keep some
// of them.
type inode struct {
	isDir bool

	// Files. data and durable share chunks copy-on-write (memdata.go).
	data    content      // current contents
	durable content      // contents as of the last Sync
	pending []fileChange // changes since the last Sync, in order

	// Directories.
	children   map[string]*inode // current entries
	durableDir map[string]*inode // entries as of the last SyncDir
	dirPending []dirChange       // entry changes since the last SyncDir, in order
}

// fileChange is an unsynced write (zero-length ones are never stored) or
// truncation of a file.
type fileChange struct {
	op       int64 // Op.Index
	truncate bool
	off      int64  // write offset, or the new size of a truncation
	data     []byte // the bytes written up to the trailing zeros; owned by the change, never modified
	zeros    int64  // the length of the zeros that end the write (a preallocated segment), kept without their bytes
}

// length returns the number of bytes a write stores.
func (ch fileChange) length() int64 { return int64(len(ch.data)) + ch.zeros }

// prefix returns the write cut to its first n bytes.
func (ch fileChange) prefix(n int64) fileChange {
	if n <= int64(len(ch.data)) {
		ch.data, ch.zeros = ch.data[:n], 0
	} else {
		ch.zeros = n - int64(len(ch.data))
	}
	return ch
}

// applyTo applies the change to c.
func (ch fileChange) applyTo(c *content) {
	if ch.truncate {
		c.truncate(ch.off)
		return
	}
	c.write(ch.off, ch.data, int64(len(ch.data)), false)
	c.write(ch.off+int64(len(ch.data)), nil, ch.zeros, true)
}

// newWrite returns the change for writing p at off: the zeros that end p
// (a header followed by a zero-filled segment) are kept as a length.
func newWrite(op, off int64, p []byte) fileChange {
	n := len(p)
	for n > 0 {
		k := min(n, chunkSize)
		if !isZero(p[n-k : n]) {
			for p[n-1] == 0 {
				n--
			}
			break
		}
		n -= k
	}
	ch := fileChange{op: op, off: off, zeros: int64(len(p) - n)}
	if n > 0 {
		ch.data = slices.Clone(p[:n])
	}
	return ch
}

// dirChange is an unsynced change of one directory entry: name now refers to
// node, or is gone when node is nil.
type dirChange struct {
	op   int64 // Op.Index
	name string
	node *inode
}

func newDirInode() *inode {
	return &inode{isDir: true, children: map[string]*inode{}, durableDir: map[string]*inode{}}
}

// NewMemFS returns an empty MemFS holding only its root directory, with op
// logging on.
func NewMemFS() *MemFS {
	return &MemFS{root: newDirInode(), logging: true, locked: map[*inode]bool{}}
}

// CrashPoint is passed to the function set with SetOpHook: the op that just
// completed and access to the file system as it stands right after it. It is
// valid only during the call.
type CrashPoint struct {
	Op Op
	m  *MemFS
}

// CrashCopy returns the crash copy of the state right after p.Op, as
// MemFS.CrashCopy does.
func (p CrashPoint) CrashCopy(mode CrashMode, rng *rand.Rand) *MemFS {
	return p.m.crashCopyLocked(mode, rng)
}

// Clone returns a full copy of the state right after p.Op, as MemFS.Clone
// does.
func (p CrashPoint) Clone() *MemFS { return p.m.cloneLocked() }

// SetOpHook sets fn to run after every successful mutating operation, with
// the MemFS locked: fn must not call methods of this MemFS (the CrashPoint
// gives what it may use), and other goroutines' file operations wait until it
// returns, so the workload is paused at exactly that point. A commit cannot be
// acknowledged before the sync it waits for returns, so whatever the workload
// has acknowledged when fn runs was acknowledged before the crash point.
// nil removes the hook.
func (m *MemFS) SetOpHook(fn func(CrashPoint)) {
	m.mu.Lock()
	m.hook = fn
	m.mu.Unlock()
}

// SetCrashAfter arranges for a Clone of the state to be frozen when the op
// with Index i completes (i == OpCount() freezes the current state at once);
// CrashState returns it. The MemFS itself carries on unchanged. i <= 0
// cancels, as does a later call with another i. An i below OpCount() names
// an op already past, whose state is gone: nothing is ever frozen, and
// CrashState stays nil.
func (m *MemFS) SetCrashAfter(i int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.crashAfter, m.crashState = i, nil
	if i > 0 && i == m.ops {
		m.crashState = m.cloneLocked()
	}
}

// CrashState returns the Clone frozen by SetCrashAfter, or nil if op i has
// not completed yet. Take crash copies of it with CrashCopy.
func (m *MemFS) CrashState() *MemFS {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.crashState
}

// OpCount returns how many mutating operations have completed.
func (m *MemFS) OpCount() int64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.ops
}

// Log returns a copy of the ops logged so far, in order. Ops done while
// logging was off are counted but missing from it.
func (m *MemFS) Log() []Op {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return slices.Clone(m.log)
}

// SetLogging turns the op log on or off (it is on in a new MemFS); a long run
// that only needs OpCount can save the memory.
func (m *MemFS) SetLogging(on bool) {
	m.mu.Lock()
	m.logging = on
	m.mu.Unlock()
}

// CrashCopy returns a new MemFS holding what a machine would find after
// losing power now, according to mode: everything durable, plus what mode
// keeps of the rest. rng decides for KeepRandom and where TearLast cuts; nil
// means a fixed seed. For a given state, mode and seed the copy is the same.
//
// The copy is independent of m (they share file contents copy-on-write, so
// a copy costs a pointer per 4 KiB of data, not a copy of it); in it
// everything is durable, no file is open or locked, and its op count and
// log start empty, so a test can enumerate crash points of recovery run on
// the copy.
func (m *MemFS) CrashCopy(mode CrashMode, rng *rand.Rand) *MemFS {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.crashCopyLocked(mode, rng)
}

// Clone returns a full, independent copy of m: current contents, durable
// state and pending changes, op count and log, but no open files or locks.
// Crash copies of the clone in any mode equal those m would have given at the
// time of the Clone.
func (m *MemFS) Clone() *MemFS {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.cloneLocked()
}

func (m *MemFS) crashCopyLocked(mode CrashMode, rng *rand.Rand) *MemFS {
	if rng == nil {
		rng = rand.New(rand.NewPCG(1, 2))
	}
	c := &crasher{mode: mode, rng: rng, keep: map[int64]bool{}, done: map[*inode]*inode{}}
	out := NewMemFS()
	out.root = c.dir(m.root)
	return out
}

// crasher builds a crash copy. Its walk visits names in sorted order and
// draws from rng in that order, which makes the copy a function of the seed.
type crasher struct {
	mode CrashMode
	rng  *rand.Rand
	keep map[int64]bool    // KeepRandom's decision per op index
	done map[*inode]*inode // inodes already copied: a file reachable by two names stays one file
}

func (c *crasher) kept(op int64) bool {
	k, ok := c.keep[op]
	if !ok {
		k = c.rng.IntN(2) == 1
		c.keep[op] = k
	}
	return k
}

func (c *crasher) node(n *inode) *inode {
	if out, ok := c.done[n]; ok {
		return out
	}
	if n.isDir {
		return c.dir(n)
	}
	// The copy shares the durable chunks; the changes it keeps copy only
	// the chunks they write.
	b := n.durable.share()
	switch c.mode {
	case KeepRandom:
		for _, ch := range n.pending {
			if c.kept(ch.op) {
				ch.applyTo(&b)
			}
		}
	case TearLast:
		for i := len(n.pending) - 1; i >= 0; i-- {
			ch := n.pending[i]
			if ch.truncate {
				continue
			}
			if keep := tornLength(ch.off, ch.length(), c.rng); keep > 0 {
				ch.prefix(keep).applyTo(&b)
			}
			break
		}
	}
	out := &inode{data: b, durable: b.share()}
	c.done[n] = out
	return out
}

func (c *crasher) dir(d *inode) *inode {
	out := newDirInode()
	c.done[d] = out
	ents := make(map[string]*inode, len(d.durableDir))
	for name, n := range d.durableDir {
		ents[name] = n
	}
	if c.mode == KeepRandom {
		for _, ch := range d.dirPending {
			if !c.kept(ch.op) {
				continue
			}
			if ch.node == nil {
				delete(ents, ch.name)
			} else {
				ents[ch.name] = ch.node
			}
		}
	}
	names := make([]string, 0, len(ents))
	for name := range ents {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		n := c.node(ents[name])
		out.children[name] = n
		out.durableDir[name] = n
	}
	return out
}

// tornLength returns how many bytes of a write of length n at off survive a
// tear: a cut at a SectorSize boundary strictly inside the write, chosen by
// rng, or 0 when the write lies inside one sector.
func tornLength(off, n int64, rng *rand.Rand) int64 {
	first := (off/SectorSize + 1) * SectorSize
	last := (off + n - 1) / SectorSize * SectorSize
	if n <= 0 || first > last {
		return 0
	}
	cut := first + rng.Int64N((last-first)/SectorSize+1)*SectorSize
	return cut - off
}

func (m *MemFS) cloneLocked() *MemFS {
	done := map[*inode]*inode{}
	var clone func(n *inode) *inode
	clone = func(n *inode) *inode {
		if n == nil {
			return nil
		}
		if out, ok := done[n]; ok {
			return out
		}
		out := &inode{isDir: n.isDir}
		done[n] = out
		if !n.isDir {
			out.data = n.data.share()
			out.durable = n.durable.share()
			// The bytes of a change are never modified, so they can be shared.
			out.pending = slices.Clone(n.pending)
			return out
		}
		out.children = make(map[string]*inode, len(n.children))
		out.durableDir = make(map[string]*inode, len(n.durableDir))
		for name, c := range n.children {
			out.children[name] = clone(c)
		}
		for name, c := range n.durableDir {
			out.durableDir[name] = clone(c)
		}
		out.dirPending = make([]dirChange, len(n.dirPending))
		for i, ch := range n.dirPending {
			out.dirPending[i] = dirChange{op: ch.op, name: ch.name, node: clone(ch.node)}
		}
		return out
	}
	out := NewMemFS()
	out.root = clone(m.root)
	out.ops = m.ops
	out.log = slices.Clone(m.log)
	out.logging = m.logging
	return out
}

// clean maps a name onto the absolute, cleaned path that keys MemFS.
func clean(name string) string { return path.Clean("/" + name) }

func pathErr(op, name string, err error) error {
	return &fs.PathError{Op: op, Path: name, Err: err}
}

// lookupLocked returns the inode at the cleaned path p.
func (m *MemFS) lookupLocked(p string) (*inode, error) {
	n := m.root
	if p == "/" {
		return n, nil
	}
	for _, part := range strings.Split(p[1:], "/") {
		if !n.isDir {
			return nil, syscall.ENOTDIR
		}
		c, ok := n.children[part]
		if !ok {
			return nil, syscall.ENOENT
		}
		n = c
	}
	return n, nil
}

// parentLocked returns the directory holding the cleaned path p and p's base
// name.
func (m *MemFS) parentLocked(p string) (*inode, string, error) {
	if p == "/" {
		return nil, "", syscall.EINVAL
	}
	d, err := m.lookupLocked(path.Dir(p))
	if err != nil {
		return nil, "", err
	}
	if !d.isDir {
		return nil, "", syscall.ENOTDIR
	}
	return d, path.Base(p), nil
}

// nextLocked returns the index the next op will get.
func (m *MemFS) nextLocked() int64 { return m.ops + 1 }

// doneLocked completes op, whose changes are in place: it counts and logs it,
// then freezes the crash state or runs the hook.
func (m *MemFS) doneLocked(op Op) {
	m.ops++
	op.Index = m.ops
	if m.logging {
		m.log = append(m.log, op)
	}
	if m.crashAfter == op.Index {
		m.crashState = m.cloneLocked()
	}
	if m.hook != nil {
		m.hook(CrashPoint{Op: op, m: m})
	}
}

func setEntry(d *inode, name string, n *inode, op int64) {
	if n == nil {
		delete(d.children, name)
	} else {
		d.children[name] = n
	}
	d.dirPending = append(d.dirPending, dirChange{op: op, name: name, node: n})
}

func (n *inode) changeLocked(ch fileChange) {
	ch.applyTo(&n.data)
	n.pending = append(n.pending, ch)
}

// syncLocked makes the file's contents durable: applying the pending
// changes to the durable state gives the current contents, which are
// shared instead.
func (n *inode) syncLocked() {
	n.durable = n.data.share()
	n.pending = nil
}

// createLocked creates or truncates the file at the cleaned path p.
func (m *MemFS) createLocked(p string) (*inode, error) {
	d, base, err := m.parentLocked(p)
	if err != nil {
		return nil, err
	}
	idx := m.nextLocked()
	n, ok := d.children[base]
	switch {
	case ok && n.isDir:
		return nil, syscall.EISDIR
	case ok:
		n.changeLocked(fileChange{op: idx, truncate: true})
	default:
		n = &inode{}
		setEntry(d, base, n, idx)
	}
	m.doneLocked(Op{Kind: OpCreate, Path: p})
	return n, nil
}

// Create implements FS.
func (m *MemFS) Create(name string) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.createLocked(clean(name))
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	return &memFile{fs: m, ino: n, name: name, path: clean(name)}, nil
}

func (m *MemFS) open(name string, readOnly bool) (File, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	n, err := m.lookupLocked(clean(name))
	if err == nil && n.isDir {
		err = syscall.EISDIR
	}
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	return &memFile{fs: m, ino: n, name: name, path: clean(name), readOnly: readOnly}, nil
}

// Open implements FS.
func (m *MemFS) Open(name string) (File, error) { return m.open(name, false) }

// OpenReadOnly implements FS. Writes through the file fail with EBADF.
func (m *MemFS) OpenReadOnly(name string) (File, error) { return m.open(name, true) }

// Rename implements FS: newname, if it exists, is replaced in one step. The
// change is durable once SyncDir has run on both directories involved.
func (m *MemFS) Rename(oldname, newname string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.renameLocked(clean(oldname), clean(newname)); err != nil {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: err}
	}
	return nil
}

func (m *MemFS) renameLocked(op, np string) error {
	od, obase, err := m.parentLocked(op)
	if err != nil {
		return err
	}
	n, ok := od.children[obase]
	if !ok {
		return syscall.ENOENT
	}
	nd, nbase, err := m.parentLocked(np)
	if err != nil {
		return err
	}
	if op == np {
		return nil
	}
	if n.isDir && strings.HasPrefix(np, op+"/") {
		return syscall.EINVAL
	}
	if old, ok := nd.children[nbase]; ok {
		switch {
		case n.isDir && !old.isDir:
			return syscall.ENOTDIR
		case !n.isDir && old.isDir:
			return syscall.EISDIR
		case old.isDir && len(old.children) > 0:
			return syscall.ENOTEMPTY
		}
	}
	idx := m.nextLocked()
	setEntry(od, obase, nil, idx)
	setEntry(nd, nbase, n, idx)
	m.doneLocked(Op{Kind: OpRename, Path: op, NewPath: np})
	return nil
}

// Remove implements FS. Files still open keep working on the removed data,
// as on POSIX.
func (m *MemFS) Remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := clean(name)
	d, base, err := m.parentLocked(p)
	if err == nil {
		n, ok := d.children[base]
		switch {
		case !ok:
			err = syscall.ENOENT
		case n.isDir && len(n.children) > 0:
			err = syscall.ENOTEMPTY
		default:
			setEntry(d, base, nil, m.nextLocked())
			m.doneLocked(Op{Kind: OpRemove, Path: p})
		}
	}
	if err != nil {
		return pathErr("remove", name, err)
	}
	return nil
}

// MkdirAll implements FS. Each directory it creates is one OpMkdir, durable
// at SyncDir of its parent.
func (m *MemFS) MkdirAll(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := clean(name)
	d := m.root
	if p == "/" {
		return nil
	}
	sofar := ""
	for _, part := range strings.Split(p[1:], "/") {
		sofar += "/" + part
		c, ok := d.children[part]
		if !ok {
			c = newDirInode()
			setEntry(d, part, c, m.nextLocked())
			m.doneLocked(Op{Kind: OpMkdir, Path: sofar})
		} else if !c.isDir {
			return pathErr("mkdir", name, syscall.ENOTDIR)
		}
		d = c
	}
	return nil
}

// ReadDir implements FS.
func (m *MemFS) ReadDir(name string) ([]string, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	d, err := m.lookupLocked(clean(name))
	if err == nil && !d.isDir {
		err = syscall.ENOTDIR
	}
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	names := make([]string, 0, len(d.children))
	for n := range d.children {
		names = append(names, n)
	}
	slices.Sort(names)
	return names, nil
}

// SyncDir implements FS: the directory's current entries become durable.
// Unlike the operating system, it refuses a file with ENOTDIR, since syncing
// a file by this route is a bug in the caller.
func (m *MemFS) SyncDir(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := clean(name)
	d, err := m.lookupLocked(p)
	if err == nil && !d.isDir {
		err = syscall.ENOTDIR
	}
	if err != nil {
		return pathErr("sync", name, err)
	}
	d.durableDir = make(map[string]*inode, len(d.children))
	for n, c := range d.children {
		d.durableDir[n] = c
	}
	d.dirPending = nil
	m.doneLocked(Op{Kind: OpSyncDir, Path: p})
	return nil
}

// Stat implements FS; a directory's size is 0.
func (m *MemFS) Stat(name string) (int64, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	n, err := m.lookupLocked(clean(name))
	if err != nil {
		return 0, pathErr("stat", name, err)
	}
	return n.data.size, nil
}

// Lock implements FS. The lock belongs to the file, not the name, as with
// flock; creating the file is an OpCreate.
func (m *MemFS) Lock(name string) (io.Closer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := clean(name)
	n, err := m.lookupLocked(p)
	if err == syscall.ENOENT {
		d, base, perr := m.parentLocked(p)
		if perr != nil {
			return nil, pathErr("open", name, perr)
		}
		n = &inode{}
		setEntry(d, base, n, m.nextLocked())
		m.doneLocked(Op{Kind: OpCreate, Path: p})
		err = nil
	}
	if err == nil && n.isDir {
		err = syscall.EISDIR
	}
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	if m.locked[n] {
		return nil, fmt.Errorf("%w: %s", ErrLocked, name)
	}
	m.locked[n] = true
	return &memLock{fs: m, ino: n, name: name}, nil
}

type memLock struct {
	fs     *MemFS
	ino    *inode
	name   string
	closed atomic.Bool
}

func (l *memLock) Close() error {
	if l.closed.Swap(true) {
		return pathErr("close", l.name, fs.ErrClosed)
	}
	l.fs.mu.Lock()
	delete(l.fs.locked, l.ino)
	l.fs.mu.Unlock()
	return nil
}

// memFile is an open MemFS file. It refers to the inode, so it keeps working
// after the name is removed or renamed.
type memFile struct {
	fs       *MemFS
	ino      *inode
	name     string // as opened, for Name and errors
	path     string // cleaned, for the op log
	readOnly bool
	closed   atomic.Bool
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	if f.closed.Load() {
		return 0, pathErr("read", f.name, fs.ErrClosed)
	}
	if off < 0 {
		return 0, pathErr("read", f.name, syscall.EINVAL)
	}
	f.fs.mu.RLock()
	defer f.fs.mu.RUnlock()
	if off >= f.ino.data.size {
		return 0, io.EOF
	}
	n := f.ino.data.readAt(p, off)
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) writable(op string) error {
	if f.closed.Load() {
		return pathErr(op, f.name, fs.ErrClosed)
	}
	if f.readOnly {
		return pathErr(op, f.name, syscall.EBADF)
	}
	return nil
}

func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.writable("write"); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, pathErr("write", f.name, syscall.EINVAL)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if off > MaxMemFileSize-int64(len(p)) {
		return 0, pathErr("write", f.name, syscall.EFBIG)
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	f.ino.changeLocked(newWrite(f.fs.nextLocked(), off, p))
	f.fs.doneLocked(Op{Kind: OpWrite, Path: f.path, Offset: off, Length: int64(len(p))})
	return len(p), nil
}

func (f *memFile) Truncate(size int64) error {
	if err := f.writable("truncate"); err != nil {
		return err
	}
	if size < 0 {
		return pathErr("truncate", f.name, syscall.EINVAL)
	}
	if size > MaxMemFileSize {
		return pathErr("truncate", f.name, syscall.EFBIG)
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	f.ino.changeLocked(fileChange{op: f.fs.nextLocked(), truncate: true, off: size})
	f.fs.doneLocked(Op{Kind: OpTruncate, Path: f.path, Offset: size})
	return nil
}

func (f *memFile) sync(kind OpKind) error {
	if f.closed.Load() {
		return pathErr(kind.String(), f.name, fs.ErrClosed)
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	f.ino.syncLocked()
	f.fs.doneLocked(Op{Kind: kind, Path: f.path})
	return nil
}

func (f *memFile) Sync() error     { return f.sync(OpSync) }
func (f *memFile) Datasync() error { return f.sync(OpDatasync) }

func (f *memFile) Size() (int64, error) {
	if f.closed.Load() {
		return 0, pathErr("stat", f.name, fs.ErrClosed)
	}
	f.fs.mu.RLock()
	defer f.fs.mu.RUnlock()
	return f.ino.data.size, nil
}

func (f *memFile) Close() error {
	if f.closed.Swap(true) {
		return pathErr("close", f.name, fs.ErrClosed)
	}
	return nil
}

func (f *memFile) Name() string { return f.name }
