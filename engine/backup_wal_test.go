package engine

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"mvkv/vfs"
)

// readHookFS calls onRead after each ReadAt of a file opened read-only
// whose name contains sub, outside any lock of the file system below.
type readHookFS struct {
	vfs.FS
	sub    string
	onRead func(name string, off int64)
}

type readHookFile struct {
	vfs.File
	fs readHookFS
}

func (f readHookFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(p, off)
	f.fs.onRead(f.Name(), off)
	return n, err
}

func (h readHookFS) OpenReadOnly(name string) (vfs.File, error) {
	f, err := h.FS.OpenReadOnly(name)
	if err != nil || !strings.Contains(name, h.sub) {
		return f, err
	}
	return readHookFile{f, h}, nil
}

// TestBackupWALCopyRacesWriter commits a megabyte and more of WAL while
// Backup is between two reads of the segment it ends in (a segment larger
// than one read): the copy must still open. Bytes past the backup's end
// read at different moments may show a hole followed by records whose
// durable-LSN mark lies above it, which recovery rightly takes for a lost
// durable log.
func TestBackupWALCopyRacesWriter(t *testing.T) {
	m := vfs.NewMemFS()
	var during atomic.Bool
	var once sync.Once
	var db *DB
	var hookErr error
	fsys := readHookFS{FS: m, sub: "/db/wal/", onRead: func(name string, off int64) {
		if !during.Load() || off != 0 {
			return
		}
		once.Do(func() {
			for i := range 80 {
				if err := db.Update(context.Background(), func(tx *Txn) error {
					return tx.Put(fmt.Appendf(nil, "big%d", i), bytes.Repeat([]byte{byte(i)}, 20000))
				}); err != nil {
					hookErr = err
					return
				}
			}
		})
	}}
	var err error
	db, err = Open("/db", Options{FS: fsys, SharedBuffers: 2 << 20, WALSegmentSize: 4 << 20, CheckpointTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	mustPut(t, db, "k", "v")
	during.Store(true)
	info, err := db.Backup(context.Background(), "/bk")
	during.Store(false)
	if err != nil {
		t.Fatal(err)
	}
	if hookErr != nil {
		t.Fatal(hookErr)
	}
	t.Logf("backup: %+v", info)
	c, err := Open("/bk", Options{FS: m, SharedBuffers: 2 << 20, WALSegmentSize: 4 << 20, CheckpointTimeout: -1})
	if err != nil {
		t.Fatalf("open the copy: %v", err)
	}
	defer c.Close()
	if rep, err := c.Verify(); err != nil || !rep.OK() {
		t.Fatalf("verify the copy: %v %v", err, rep.Problems)
	}
}
