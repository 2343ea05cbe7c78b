package engine

import (
	"errors"
	"fmt"
	"maps"
	"strings"
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
	m := memFSWithDB(t)
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

// TestRecoverySyncsDataFilesAfterCrashOnly checks which opens fsync the
// data files (syncDataFiles) and that a failure there fails Open: after a
// kill with commits since the last checkpoint, a failed fsync of any heap,
// map or CLOG file, or of their directories, fails Open with ErrIOFailure
// naming the path, rather than being lost or letting redo go on over
// pages that may not be on disk; after a clean shutdown the same opens
// succeed without fsyncing one of them (the shutdown checkpoint synced
// everything, and nothing was written after it).
func TestRecoverySyncsDataFilesAfterCrashOnly(t *testing.T) {
	m := memFSWithDB(t)
	opts := func(fs vfs.FS) Options {
		return Options{FS: fs, CheckpointTimeout: -1, Autovacuum: noAutovacuum, SharedBuffers: 2 << 20, WALSegmentSize: 1 << 20}
	}
	db, err := Open("/db", opts(m))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		mustPut(t, db, fmt.Sprintf("k%02d", i), "v")
	}
	// A map file to sync.
	if _, err := markAllVisible(db); err != nil {
		t.Fatal(err)
	}
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		mustPut(t, db, fmt.Sprintf("n%02d", i), "v")
	}
	killed := m.Clone()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	clean := m.Clone()
	for _, c := range []struct {
		what string
		r    vfs.Rule
	}{
		{"fsync of a heap file", vfs.Rule{Kinds: vfs.Ops(vfs.OpSync), Contains: "/db/heap/"}},
		{"fsync of a map file", vfs.Rule{Kinds: vfs.Ops(vfs.OpSync), Contains: "/db/vm/"}},
		{"fsync of a CLOG file", vfs.Rule{Kinds: vfs.Ops(vfs.OpSync), Contains: "/db/clog/"}},
		{"fsync of the heap directory", vfs.Rule{Kinds: vfs.Ops(vfs.OpSyncDir), Contains: "/db/heap"}},
		{"fsync of the map directory", vfs.Rule{Kinds: vfs.Ops(vfs.OpSyncDir), Contains: "/db/vm"}},
		{"fsync of the CLOG directory", vfs.Rule{Kinds: vfs.Ops(vfs.OpSyncDir), Contains: "/db/clog"}},
	} {
		r := c.r
		ffs := vfs.NewFaultFS(killed.Clone())
		f := ffs.Inject(r)
		rdb, err := Open("/db", opts(ffs))
		if err == nil {
			rdb.Close()
			t.Fatalf("%s failing after a kill: Open succeeded (%d failed)", c.what, f.Fired())
		}
		if !errors.Is(err, ErrIOFailure) || !strings.Contains(err.Error(), r.Contains) {
			t.Fatalf("%s failing after a kill: Open: %v; want ErrIOFailure naming %s", c.what, err, r.Contains)
		}

		ffs = vfs.NewFaultFS(clean.Clone())
		f = ffs.Inject(r)
		rdb, err = Open("/db", opts(ffs))
		if err != nil {
			t.Fatalf("%s failing after a clean shutdown: Open: %v", c.what, err)
		}
		if n := f.Fired(); n != 0 {
			t.Errorf("after a clean shutdown Open made %d of %s", n, c.what)
		}
		rdb.Close()
	}
}

// memFSWithDB is a MemFS holding an empty, durable directory /db.
func memFSWithDB(t *testing.T) *vfs.MemFS {
	t.Helper()
	m := vfs.NewMemFS()
	if err := m.MkdirAll("/db"); err != nil {
		t.Fatal(err)
	}
	if err := m.SyncDir("/"); err != nil {
		t.Fatal(err)
	}
	return m
}
