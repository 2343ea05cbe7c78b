package engine

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"mvkv/vfs"
)

// TestCrashLeavesNoCLOGSegmentPastNextXid: the xids have just crossed into
// a new CLOG segment, and the first xid there is handed out (its record not
// yet logged) while a checkpoint runs, after the checkpoint flushed the heap.
// The checkpoint writes the CLOG up to that xid, creating the segment's
// file, before its record and the control file carry the xid. A crash in
// between loses the xid: recovery's next xid lies in the segment before,
// and the new file must go with it, or Verify takes it for a file another
// database put there. The crash copies are taken at every file operation
// of the checkpoint from the one that creates the file on.
func TestCrashLeavesNoCLOGSegmentPastNextXid(t *testing.T) {
	m := memDB(t)
	db := openTest(t, "/db", Options{FS: m, CheckpointTimeout: -1, Autovacuum: noAutovacuum})
	defer db.Close()
	// Four commits, the last on the segment's last xid.
	db.procs.setNext(clogSegXids - 4)
	for i := range 3 {
		mustPut(t, db, fmt.Sprintf("k%d", i), "v")
	}
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	mustPut(t, db, "k0", "again")
	var (
		copies []*vfs.MemFS
		ops    []vfs.Op
		st     *txnState
		xid    uint64
	)
	seg1 := false
	m.SetOpHook(func(p vfs.CrashPoint) {
		seg1 = seg1 || strings.HasSuffix(p.Op.Path, "/"+clogDir+"/000000000001")
		if seg1 {
			copies = append(copies, p.CrashCopy(vfs.DropUnsynced, nil))
			ops = append(ops, p.Op)
		}
		if st == nil && (p.Op.Kind == vfs.OpSync || p.Op.Kind == vfs.OpDatasync) && strings.Contains(p.Op.Path, "/"+heapDir+"/") {
			// A writer takes its xid: its record comes after
			// whatever the checkpoint flushes.
			st = newTxnState()
			xid, _ = db.procs.assign(st)
		}
	})
	err := db.Checkpoint()
	m.SetOpHook(nil)
	if err != nil {
		t.Fatal(err)
	}
	if st == nil || clogSegment(xid) != 1 || xid%clogSegXids != 0 {
		t.Fatalf("the xid taken during the checkpoint is %d, not the first of segment 1 (%d)", xid, clogSegXids)
	}
	db.procs.remove(st)
	lost := 0
	for i, c := range copies {
		db, err := Open("/db", Options{FS: c, CheckpointTimeout: -1, Autovacuum: noAutovacuum})
		if err != nil {
			t.Fatalf("copy %d, crash after %v: %v", i, ops[i], err)
		}
		next := db.procs.next()
		rep, err := db.Verify()
		if err != nil || !rep.OK() {
			t.Errorf("copy %d, crash after %v, next xid %d: verify: %v %v", i, ops[i], next, err, rep.Problems)
		}
		if next <= xid {
			if segs := clogSegments(t, c, "/db"); slices.Contains(segs, "000000000001") {
				t.Errorf("copy %d, crash after %v: next xid %d, and CLOG segment 1 is still there", i, ops[i], next)
			}
			if removed := db.Recovery().RemovedCLOGSegments; len(removed) > 0 {
				lost++
			}
		}
		db.Close()
	}
	if lost == 0 {
		t.Fatal("no crash copy had the segment to remove: the test tests nothing")
	}
}
