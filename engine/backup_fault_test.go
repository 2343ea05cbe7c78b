package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"

	"mvkv/vfs"
)

// TestBackupTargetFaults fails, in turn, writes (ENOSPC), file fsyncs,
// creates, directory fsyncs and the final rename of the copy, each only
// under the target: Backup fails naming what failed, leaves neither the
// target nor its ".partial" directory, and the source keeps taking writes.
func TestBackupTargetFaults(t *testing.T) {
	cases := []vfs.Rule{
		{Kinds: vfs.Ops(vfs.OpWrite), Contains: "/bk", Err: syscall.ENOSPC},
		{Kinds: vfs.Ops(vfs.OpWrite), Contains: "/bk.partial/wal", Err: syscall.ENOSPC},
		{Kinds: vfs.Ops(vfs.OpWrite), Contains: "/bk.partial/clog", Err: syscall.ENOSPC},
		{Kinds: vfs.Ops(vfs.OpWrite), Contains: "/bk.partial/control", Err: syscall.ENOSPC},
		{Kinds: vfs.SyncOps, Contains: "/bk.partial/heap"},
		{Kinds: vfs.SyncOps, Contains: "/bk.partial/vm"},
		{Kinds: vfs.SyncOps, Contains: "/bk.partial/wal"},
		{Kinds: vfs.SyncOps, Contains: "/bk.partial/index"},
		{Kinds: vfs.Ops(vfs.OpCreate), Contains: "/bk.partial/"},
		{Kinds: vfs.Ops(vfs.OpSyncDir), Contains: "/bk.partial"},
		{Kinds: vfs.Ops(vfs.OpRename), Contains: "/bk.partial"},
		{Kinds: vfs.Ops(vfs.OpSyncDir), Base: "/", Nth: 1},
	}
	for i, r := range cases {
		t.Run(fmt.Sprintf("%d", i), func(t *testing.T) {
			m := vfs.NewMemFS()
			ffs := vfs.NewFaultFS(m)
			db, err := Open("/db", Options{FS: ffs, SharedBuffers: 2 << 20, WALSegmentSize: 1 << 20, CheckpointTimeout: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			ctx := context.Background()
			put := func(k string) error {
				return db.Update(ctx, func(tx *Txn) error { return tx.Put([]byte(k), make([]byte, 300)) })
			}
			if err := db.Update(ctx, func(tx *Txn) error {
				for j := range 200 {
					if err := tx.Put(fmt.Append(nil, "k", j), make([]byte, 300)); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if _, err := db.Vacuum(ctx); err != nil { // map pages to copy
				t.Fatal(err)
			}
			f := ffs.Inject(r)
			_, err = db.Backup(ctx, "/bk")
			ffs.Clear()
			if f.Fired() == 0 {
				t.Fatalf("rule %+v matched nothing", r)
			}
			if err == nil {
				t.Fatalf("rule %+v: Backup succeeded", r)
			}
			t.Logf("rule %+v: %v", r, err)
			if errors.Is(err, ErrCorruption) {
				t.Fatalf("a failure writing the target reads as corruption of the source: %v", err)
			}
			if f := db.Failure(); f != nil {
				t.Fatalf("the source stopped taking writes: %v", f)
			}
			for _, d := range []string{"/bk", "/bk.partial"} {
				if _, err := m.Stat(d); !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("%s left behind (%v)", d, err)
				}
			}
			if err := put("after"); err != nil {
				t.Fatalf("write after the failed backup: %v", err)
			}
			if _, err := db.Backup(ctx, "/bk"); err != nil {
				t.Fatalf("backup once the fault is gone: %v", err)
			}
		})
	}
}
