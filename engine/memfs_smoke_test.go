package engine

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"mvkv/internal/vfs"
)

// TestMemFSSmoke runs the engine on the in-memory file system: commits, a
// simulated power loss that drops everything unsynced (and one that tears
// the last unsynced writes), and a reopen of the crash copy that must find
// every acknowledged commit.
func TestMemFSSmoke(t *testing.T) {
	m := vfs.NewMemFS()
	// Open fsyncs the data directory it creates but not the directory's
	// parent, so without this /db itself may vanish in a crash.
	if err := m.MkdirAll("/db"); err != nil {
		t.Fatal(err)
	}
	if err := m.SyncDir("/"); err != nil {
		t.Fatal(err)
	}
	db := openTest(t, "/db", Options{FS: m})
	const n = 20
	for i := range n {
		mustPut(t, db, fmt.Sprintf("k%02d", i), fmt.Sprintf("v%d", i))
	}
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		mustPut(t, db, fmt.Sprintf("k%02d", i), fmt.Sprintf("w%d", i))
	}
	copies := map[string]*vfs.MemFS{
		"DropUnsynced": m.CrashCopy(vfs.DropUnsynced, nil),
		"TearLast":     m.CrashCopy(vfs.TearLast, rand.New(rand.NewPCG(1, 1))),
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for name, c := range copies {
		t.Run(name, func(t *testing.T) {
			db := openTest(t, "/db", Options{FS: c})
			defer db.Close()
			for i := range n {
				k := fmt.Sprintf("k%02d", i)
				if v, ok := get(t, db, k); !ok || v != fmt.Sprintf("w%d", i) {
					t.Fatalf("after crash: %s = %q, %v; want w%d", k, v, ok, i)
				}
			}
			rep, err := db.Verify()
			if err != nil {
				t.Fatal(err)
			}
			if !rep.OK() {
				t.Fatalf("verify after crash: %v", rep.Problems)
			}
		})
	}
}
