package engine

import (
	"fmt"
	"maps"
	"testing"

	"mvkv/vfs"
)

// TestKillThenPowerLoss kills the process (kill -9: what it wrote stays in
// the operating system's cache, not yet on disk) after each file operation
// of a workload and two checkpoints, opens the database again, lets the
// recovery complete a checkpoint, and then loses power before anything
// else: the copy left must hold every commit acknowledged before the kill,
// and pass Verify. Without the fsync of the data files before redo
// (syncDataFiles), a CLOG page the killed process wrote but had not synced
// was read from the cache, already saying committed, so the recovery's
// checkpoint neither wrote nor synced it and moved the redo point past the
// commit records: after the power loss the older page on disk made those
// commits read as aborted.
func TestKillThenPowerLoss(t *testing.T) {
	sample := int64(1)
	if raceEnabled {
		sample = 4
	}
	if *ladderSample > 0 {
		sample = int64(*ladderSample)
	}
	m := vfs.NewMemFS()
	if err := m.MkdirAll("/db"); err != nil {
		t.Fatal(err)
	}
	if err := m.SyncDir("/"); err != nil {
		t.Fatal(err)
	}
	opts := func(fs vfs.FS) Options {
		return Options{FS: fs, CheckpointTimeout: -1, SharedBuffers: 2 << 20, WALSegmentSize: 1 << 20}
	}
	db, err := Open("/db", opts(m))
	if err != nil {
		t.Fatal(err)
	}
	acked := map[string]string{}
	for i := range 10 {
		k := fmt.Sprintf("base%02d", i)
		mustPut(t, db, k, "v")
		acked[k] = "v"
	}
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	type kill struct {
		op    vfs.Op
		fs    *vfs.MemFS
		acked map[string]string
	}
	var kills []kill
	// The hook runs inside each file operation, before the put whose
	// fsync it may be returns: acked holds only what was acknowledged
	// before the operation.
	m.SetOpHook(func(p vfs.CrashPoint) {
		if p.Op.Index%sample == 0 {
			kills = append(kills, kill{p.Op, p.Clone(), maps.Clone(acked)})
		}
	})
	for i := range 40 {
		if i == 15 {
			// Map bits for the later inserts to clear.
			if _, err := markAllVisible(db); err != nil {
				t.Fatal(err)
			}
		}
		if i == 25 {
			if err := db.Checkpoint(); err != nil {
				t.Fatal(err)
			}
		}
		k, v := fmt.Sprintf("x%02d", i), fmt.Sprintf("v%d", i)
		mustPut(t, db, k, v)
		acked[k] = v
	}
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	m.SetOpHook(nil)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for _, k := range kills {
		rdb, err := Open("/db", opts(k.fs))
		if err != nil {
			t.Fatalf("killed after %v: open: %v", k.op, err)
		}
		// Nothing is read before the checkpoint: a read would set hint
		// bits on heap pages, which the checkpoint would then write.
		if err := rdb.Checkpoint(); err != nil {
			t.Fatalf("killed after %v: checkpoint after recovery: %v", k.op, err)
		}
		lost := k.fs.CrashCopy(vfs.DropUnsynced, nil)
		rdb.Close()
		cdb, err := Open("/db", opts(lost))
		if err != nil {
			t.Fatalf("killed after %v, then a power loss after the recovery's checkpoint: open: %v", k.op, err)
		}
		got, err := scanState(cdb)
		rep, verr := cdb.Verify()
		cdb.Close()
		if err != nil {
			t.Fatalf("killed after %v, then a power loss: scan: %v", k.op, err)
		}
		for key, v := range k.acked {
			if got[key] != v {
				t.Fatalf("killed after %v, then a power loss after the recovery's checkpoint: acknowledged %s=%s reads %q (%d of %d acknowledged keys differ)",
					k.op, key, v, got[key], len(diffKeys(got, k.acked)), len(k.acked))
			}
		}
		if verr != nil || !rep.OK() {
			t.Fatalf("killed after %v, then a power loss: verify: %v %v", k.op, verr, rep.Problems)
		}
	}
	t.Logf("%d kill points checked", len(kills))
}

// diffKeys returns the keys of want whose values got does not hold.
func diffKeys(got, want map[string]string) []string {
	var out []string
	for k, v := range want {
		if got[k] != v {
			out = append(out, k)
		}
	}
	return out
}
