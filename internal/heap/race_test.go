package heap

import (
	"sync"
	"testing"

	"mvkv/vfs"
)

// pausingFS holds a ReadAt at pauseOff, after it has read, until release
// is closed: a reader preempted between its read and its checks.
type pausingFS struct {
	vfs.FS
	pauseOff int64
	reached  chan struct{}
	release  chan struct{}
	once     sync.Once
}

type pausingFile struct {
	vfs.File
	fs *pausingFS
}

func (p *pausingFS) Open(name string) (vfs.File, error) {
	f, err := p.FS.Open(name)
	if err != nil {
		return nil, err
	}
	return &pausingFile{f, p}, nil
}

func (p *pausingFS) Create(name string) (vfs.File, error) {
	f, err := p.FS.Create(name)
	if err != nil {
		return nil, err
	}
	return &pausingFile{f, p}, nil
}

func (f *pausingFile) ReadAt(b []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(b, off)
	if off == f.fs.pauseOff {
		f.fs.once.Do(func() {
			close(f.fs.reached)
			<-f.fs.release
		})
	}
	return n, err
}

// TestStorageReadRacesFill: a reader of a block past the file's end (a
// block the buffer pool counts but never wrote, such as one that redo's
// EnsureBlocks skipped) races with an extending write of a later block
// that fills it with an empty page: the read finds the file short, and
// must not take the fill that landed meanwhile for a block the file held.
func TestStorageReadRacesFill(t *testing.T) {
	m := vfs.NewMemFS()
	pf := &pausingFS{FS: m, pauseOff: 7 * PageSize, reached: make(chan struct{}), release: make(chan struct{})}
	s, err := OpenStorage(pf, "/heap")
	if err != nil {
		t.Fatal(err)
	}
	for b := uint32(0); b < 5; b++ {
		if err := s.WriteBlock(b, pageWith(t, b, 1)); err != nil {
			t.Fatal(err)
		}
	}
	s.SetNoZeros()
	done := make(chan error, 1)
	go func() {
		p := make([]byte, PageSize)
		done <- s.ReadBlock(7, p) // past the end: should read as new
	}()
	<-pf.reached
	// The pool evicts block 10: WriteBlock fills 5..9 with empty pages.
	if err := s.WriteBlock(10, pageWith(t, 10, 2)); err != nil {
		t.Fatal(err)
	}
	close(pf.release)
	if err := <-done; err != nil {
		t.Fatalf("read of block 7 racing with the fill: %v", err)
	}
}
