package engine

import "testing"

// TestXidStateCrashedOnlyBelowNext: an xid the CLOG calls in progress and
// that is not running counts as aborted (a crash's) only when it was handed
// out, below the next xid; one at or above it (a tuple no transaction of
// this database wrote, on a damaged page) stays in progress, so that
// pruning never frees what it names as an aborted write's.
func TestXidStateCrashedOnlyBelowNext(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1})
	defer db.Close()
	mustPut(t, db, "a", "1")
	state := func(xid uint64) (committed, aborted bool) {
		t.Helper()
		v := version{}
		v.hdr.Xmin = xid
		c, a, err := db.xidState(&v, false)
		if err != nil {
			t.Fatalf("xid %d: %v", xid, err)
		}
		return c, a
	}
	// Handed out, left the running table with no CLOG status: crashed.
	st := newTxnState()
	crashed, err := db.procs.assign(st)
	if err != nil {
		t.Fatal(err)
	}
	if c, a := state(crashed); c || a {
		t.Fatalf("running xid %d: committed %v, aborted %v; want in progress", crashed, c, a)
	}
	db.procs.remove(st)
	if c, a := state(crashed); c || !a {
		t.Fatalf("crashed xid %d: committed %v, aborted %v; want aborted", crashed, c, a)
	}
	next := db.procs.next()
	for _, x := range []uint64{next, next + 5, next + 100_000} {
		if c, a := state(x); c || a {
			t.Fatalf("xid %d at or above the next xid %d: committed %v, aborted %v; want in progress", x, next, c, a)
		}
	}
}
