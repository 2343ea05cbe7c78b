package engine

import (
	"bytes"
	"context"
	"errors"
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
	openVerifiedCopy(t, m, "/bk", 4<<20)
}

// TestBackupAcrossSegmentSwitches writes several WAL segments while a
// Backup copies the heap: the copy needs every one of them from the
// checkpoint on, and holds every row committed before the WAL copy.
func TestBackupAcrossSegmentSwitches(t *testing.T) {
	m := vfs.NewMemFS()
	db, reached, release := gatedDB(t, m, "/bk.partial/heap/", Options{})
	defer db.Close()
	done := make(chan error, 1)
	var info BackupInfo
	go func() {
		var err error
		info, err = db.Backup(context.Background(), "/bk")
		done <- err
	}()
	<-reached
	for i := range 150 {
		if err := db.Update(context.Background(), func(tx *Txn) error {
			return tx.Put(fmt.Appendf(nil, "big%d", i), bytes.Repeat([]byte{byte(i)}, 20000))
		}); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if info.WALSegments < 3 {
		t.Fatalf("the copy spans %d WAL segments, want several: %+v", info.WALSegments, info)
	}
	c := openVerifiedCopy(t, m, "/bk", 1<<20)
	if err := c.View(context.Background(), func(tx *Txn) error {
		for i := range 150 {
			v, err := tx.Get(fmt.Appendf(nil, "big%d", i))
			if err != nil {
				return fmt.Errorf("big%d: %w", i, err)
			}
			if len(v) != 20000 || v[0] != byte(i) {
				return fmt.Errorf("big%d: %d bytes", i, len(v))
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestBackupBesideBulkLoad starts a bulk load into an empty database while
// a Backup is held copying: the load waits for the copy, the copy holds
// none of it, and both succeed.
func TestBackupBesideBulkLoad(t *testing.T) {
	m := vfs.NewMemFS()
	reached, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	db, err := Open("/db", Options{FS: gateFS{m, func(name string) {
		if strings.HasPrefix(name, "/bk.partial/clog/") {
			once.Do(func() { close(reached); <-release })
		}
	}}, SharedBuffers: 2 << 20, WALSegmentSize: 1 << 20, CheckpointTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	done := make(chan error, 1)
	go func() {
		_, err := db.Backup(context.Background(), "/bk")
		done <- err
	}()
	<-reached
	loaded := make(chan error, 1)
	go func() {
		_, err := db.BulkLoad(context.Background(), func(yield func([]byte, []byte) bool) {
			for i := range 2000 {
				if !yield(fmt.Appendf(nil, "k%06d", i), []byte("value")) {
					return
				}
			}
		})
		loaded <- err
	}()
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := <-loaded; err != nil {
		t.Fatal(err)
	}
	c := openVerifiedCopy(t, m, "/bk", 1<<20)
	n := 0
	if err := c.View(context.Background(), func(tx *Txn) error {
		_, err := tx.Get([]byte("k000000"))
		if err == nil {
			n++
		} else if !errors.Is(err, ErrNotFound) {
			return err
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatal("the copy holds a row of the load that waited for it")
	}
}
