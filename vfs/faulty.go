package vfs

import (
	"io"
	"io/fs"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// OpSet is a set of OpKinds.
type OpSet uint32

// Ops returns the set holding kinds.
func Ops(kinds ...OpKind) OpSet {
	var s OpSet
	for _, k := range kinds {
		s |= 1 << k
	}
	return s
}

// Has reports whether k is in s.
func (s OpSet) Has(k OpKind) bool { return s&(1<<k) != 0 }

// OpLock must stay the last kind for AllOps: this fails to compile if a
// kind is added after it.
var _ = [1]struct{}{}[numOpKinds-OpLock-1]

// Common sets of kinds.
const (
	// AllOps holds every kind (OpLock is the last).
	AllOps = OpSet(1<<(OpLock+1)-1) &^ 1
	// MutatingOps holds the kinds that change the file system (the ones
	// MemFS logs): a disk that fails these but still reads is what ext4
	// leaves after remounting read-only on an I/O error.
	MutatingOps = OpSet(1<<OpCreate | 1<<OpWrite | 1<<OpTruncate | 1<<OpSync |
		1<<OpDatasync | 1<<OpRename | 1<<OpRemove | 1<<OpMkdir | 1<<OpSyncDir)
	// SyncOps holds File.Sync and File.Datasync.
	SyncOps = OpSet(1<<OpSync | 1<<OpDatasync)
)

// Rule says which operations a FaultFS fails. An operation matches when its
// kind is in Kinds and its path passes both path filters; for a rename,
// either name may pass.
type Rule struct {
	// Kinds are the operations the rule counts and fails; 0 means all.
	Kinds OpSet
	// Base, if not empty, is a path.Match pattern the base name must match
	// (e.g. "*.tmp", "control"). A malformed pattern (path.ErrBadPattern)
	// matches nothing, so a test that injects a fault should check
	// Fault.Fired to know the fault was met.
	Base string
	// Contains, if not empty, must be a substring of the name as the caller
	// passed it (e.g. "/wal/").
	Contains string
	// Nth, if positive, fails only the Nth matching operation after the rule
	// was injected (counting from 1); 0 fails every matching operation; a
	// negative Nth fails none.
	Nth int64
	// Err is the errno injected, wrapped in *fs.PathError; nil means
	// syscall.EIO. syscall.ENOSPC is the other usual choice.
	Err error
	// Permanent, if not empty, makes the failure stick: once the rule has
	// failed an operation, every later operation whose kind is in Permanent
	// fails with the same error, whatever its path. MutatingOps models a disk
	// gone read-only, AllOps a dead disk.
	Permanent OpSet
	// Growing, if set, restricts the rule to the writes and truncations
	// that make a file longer; other operations never match it. With
	// Err syscall.ENOSPC it models a full disk more closely than failing
	// every write: a write over bytes a file already has needs no new
	// blocks on the usual file systems (ext4, XFS) and succeeds there.
	Growing bool
}

// Fault is a Rule injected into a FaultFS.
type Fault struct {
	fs       *FaultFS
	rule     Rule
	seen     int64  // matching operations counted so far; guarded by fs.mu
	lastPath string // name of the last operation failed; guarded by fs.mu
	fired    atomic.Int64
}

// Fired returns how many operations the fault has failed (not counting the
// later ones failed by Permanent).
func (f *Fault) Fired() int64 { return f.fired.Load() }

// LastPath returns the name (the first name, for a rename) of the last
// operation the fault failed, or "" if none: a harness that fails the Nth
// sync learns which file it hit.
func (f *Fault) LastPath() string {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	return f.lastPath
}

// FaultFS wraps an FS and fails chosen operations with an injected error,
// as pebble's vfs/errorfs does. A failed operation never reaches the wrapped
// FS: a failed write writes nothing, a failed sync makes nothing durable
// (with MemFS underneath, a crash copy then loses the data, the way Linux may
// drop dirty pages after fsync reports EIO).
//
// It counts every operation it sees, by kind, whether or not it fails, so a
// test can run a workload once to learn how many sync or write points it has
// and then rerun it failing each one in turn:
//
//	n := ffs.Count(OpSync) // after a clean run
//	for i := int64(1); i <= n; i++ {
//		ffs := NewFaultFS(NewMemFS())
//		ffs.Inject(Rule{Kinds: Ops(OpSync), Nth: i})
//		... run the workload on ffs, check its errors ...
//	}
//
// File.Close and File.Name are passed through uncounted, since a failing
// Close would only leak the file. All methods are safe for concurrent use.
type FaultFS struct {
	fs FS

	mu      sync.Mutex
	rules   []*Fault          // guarded by mu
	counts  [numOpKinds]int64 // operations seen per kind; guarded by mu
	perm    OpSet             // kinds failed by a fired Permanent rule; guarded by mu
	permErr error             // the error they fail with; guarded by mu
	// growing counts the rules with Growing set, so that a write asks
	// its file's size only when one of them may match.
	growing atomic.Int32
}

var _ FS = (*FaultFS)(nil)

// NewFaultFS returns a FaultFS over fs with no rules.
func NewFaultFS(fs FS) *FaultFS { return &FaultFS{fs: fs} }

// Inject adds r; rules are checked in the order they were injected, and each
// counts its matching operations from now.
func (f *FaultFS) Inject(r Rule) *Fault {
	if r.Kinds == 0 {
		r.Kinds = AllOps
	}
	if r.Err == nil {
		r.Err = syscall.EIO
	}
	flt := &Fault{fs: f, rule: r}
	f.mu.Lock()
	f.rules = append(f.rules, flt)
	if r.Growing {
		f.growing.Add(1)
	}
	f.mu.Unlock()
	return flt
}

// Clear removes every rule and any permanent failure; counts are kept.
func (f *FaultFS) Clear() {
	f.mu.Lock()
	f.rules, f.perm, f.permErr = nil, 0, nil
	f.growing.Store(0)
	f.mu.Unlock()
}

// Count returns how many operations of kind k the FaultFS has seen, failed
// ones included.
func (f *FaultFS) Count(k OpKind) int64 {
	if k == 0 || k >= numOpKinds {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counts[k]
}

// Failing reports whether a Permanent failure is in force.
func (f *FaultFS) Failing() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.perm != 0
}

// check counts an operation and returns the error to inject, or nil. names
// holds the operation's path (two for a rename; the first is reported).
func (f *FaultFS) check(k OpKind, names ...string) error {
	return f.checkOp(k, false, names...)
}

// checkOp is check for an operation that makes its file longer (grows)
// or not.
func (f *FaultFS) checkOp(k OpKind, grows bool, names ...string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts[k]++
	if f.perm.Has(k) {
		return &fs.PathError{Op: k.String(), Path: names[0], Err: f.permErr}
	}
	var fail *Fault
	for _, r := range f.rules {
		if !r.matches(k, names) || r.rule.Growing && !grows {
			continue
		}
		r.seen++
		if fail == nil && (r.rule.Nth == 0 || r.seen == r.rule.Nth) {
			fail = r
		}
	}
	if fail == nil {
		return nil
	}
	fail.fired.Add(1)
	fail.lastPath = names[0]
	if fail.rule.Permanent != 0 {
		f.perm |= fail.rule.Permanent
		f.permErr = fail.rule.Err
	}
	return &fs.PathError{Op: k.String(), Path: names[0], Err: fail.rule.Err}
}

func (r *Fault) matches(k OpKind, names []string) bool {
	if !r.rule.Kinds.Has(k) {
		return false
	}
	for _, n := range names {
		if r.rule.Contains != "" && !strings.Contains(n, r.rule.Contains) {
			continue
		}
		if r.rule.Base != "" {
			if ok, _ := path.Match(r.rule.Base, path.Base(n)); !ok {
				continue
			}
		}
		return true
	}
	return false
}

func (f *FaultFS) wrap(file File, err error) (File, error) {
	if err != nil {
		return nil, err
	}
	return &faultFile{f: file, fs: f}, nil
}

// Create implements FS.
func (f *FaultFS) Create(name string) (File, error) {
	if err := f.check(OpCreate, name); err != nil {
		return nil, err
	}
	return f.wrap(f.fs.Create(name))
}

// Open implements FS.
func (f *FaultFS) Open(name string) (File, error) {
	if err := f.check(OpOpen, name); err != nil {
		return nil, err
	}
	return f.wrap(f.fs.Open(name))
}

// OpenReadOnly implements FS.
func (f *FaultFS) OpenReadOnly(name string) (File, error) {
	if err := f.check(OpOpen, name); err != nil {
		return nil, err
	}
	return f.wrap(f.fs.OpenReadOnly(name))
}

// Rename implements FS; a rule's path filters may match either name.
func (f *FaultFS) Rename(oldname, newname string) error {
	if err := f.check(OpRename, oldname, newname); err != nil {
		return err
	}
	return f.fs.Rename(oldname, newname)
}

// Remove implements FS.
func (f *FaultFS) Remove(name string) error {
	if err := f.check(OpRemove, name); err != nil {
		return err
	}
	return f.fs.Remove(name)
}

// MkdirAll implements FS; the whole call is one OpMkdir.
func (f *FaultFS) MkdirAll(name string) error {
	if err := f.check(OpMkdir, name); err != nil {
		return err
	}
	return f.fs.MkdirAll(name)
}

// ReadDir implements FS.
func (f *FaultFS) ReadDir(name string) ([]string, error) {
	if err := f.check(OpReadDir, name); err != nil {
		return nil, err
	}
	return f.fs.ReadDir(name)
}

// SyncDir implements FS.
func (f *FaultFS) SyncDir(name string) error {
	if err := f.check(OpSyncDir, name); err != nil {
		return err
	}
	return f.fs.SyncDir(name)
}

// Stat implements FS.
func (f *FaultFS) Stat(name string) (int64, error) {
	if err := f.check(OpStat, name); err != nil {
		return 0, err
	}
	return f.fs.Stat(name)
}

// Lock implements FS.
func (f *FaultFS) Lock(name string) (io.Closer, error) {
	if err := f.check(OpLock, name); err != nil {
		return nil, err
	}
	return f.fs.Lock(name)
}

type faultFile struct {
	f  File
	fs *FaultFS
}

func (f *faultFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.fs.check(OpRead, f.f.Name()); err != nil {
		return 0, err
	}
	return f.f.ReadAt(p, off)
}

// grows reports whether the file is shorter than end bytes, asking only
// when a Growing rule is in force. An error reading the size counts as
// growing.
func (f *faultFile) grows(end int64) bool {
	if f.fs.growing.Load() == 0 {
		return false
	}
	size, err := f.f.Size()
	return err != nil || end > size
}

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.fs.checkOp(OpWrite, f.grows(off+int64(len(p))), f.f.Name()); err != nil {
		return 0, err
	}
	return f.f.WriteAt(p, off)
}

func (f *faultFile) Sync() error {
	if err := f.fs.check(OpSync, f.f.Name()); err != nil {
		return err
	}
	return f.f.Sync()
}

func (f *faultFile) Datasync() error {
	if err := f.fs.check(OpDatasync, f.f.Name()); err != nil {
		return err
	}
	return f.f.Datasync()
}

func (f *faultFile) Truncate(size int64) error {
	if err := f.fs.checkOp(OpTruncate, f.grows(size), f.f.Name()); err != nil {
		return err
	}
	return f.f.Truncate(size)
}

func (f *faultFile) Size() (int64, error) {
	if err := f.fs.check(OpStat, f.f.Name()); err != nil {
		return 0, err
	}
	return f.f.Size()
}

func (f *faultFile) Close() error { return f.f.Close() }
func (f *faultFile) Name() string { return f.f.Name() }
