package engine

import (
	"errors"
	"io/fs"
	"strings"
	"syscall"
	"testing"

	"mvkv/vfs"
)

// TestReadErrorNamesFileOnce: a WAL or CLOG segment whose read fails (an
// I/O error, as the file system reports it, naming the file) is reported
// with its path once, not once by the engine's wrapping and again by the
// file system's error, and the error stays an *fs.PathError.
func TestReadErrorNamesFileOnce(t *testing.T) {
	for _, sub := range []string{"/wal/", "/clog/"} {
		t.Run(sub, func(t *testing.T) {
			m := vfs.NewMemFS()
			db := openTest(t, "/db", Options{FS: m, Autovacuum: noAutovacuum})
			mustPut(t, db, "k", "v")
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			ffs := vfs.NewFaultFS(m)
			ffs.Inject(vfs.Rule{Kinds: vfs.Ops(vfs.OpRead), Contains: sub, Err: syscall.EIO})
			_, err := Open("/db", Options{FS: ffs})
			var pe *fs.PathError
			if !errors.As(err, &pe) {
				t.Fatalf("Open with reads of %s failing: %v; want an *fs.PathError in it", sub, err)
			}
			if n := strings.Count(err.Error(), pe.Path); n != 1 {
				t.Errorf("Open's error names %s %d times, want once: %v", pe.Path, n, err)
			}
		})
	}
}
