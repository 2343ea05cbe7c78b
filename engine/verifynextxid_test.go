package engine

import (
	"fmt"
	"testing"

	"mvkv/internal/verify"
)

// checkpointAfterNextXid is the database as Verify's checks read it, but
// the first time they ask for the next xid, transactions commit and a
// checkpoint completes before the answer: what a writer and the
// checkpointer do beside a Verify between its start and its read of the
// control file.
type checkpointAfterNextXid struct {
	verifyTarget
	t    *testing.T
	done bool
}

func (c *checkpointAfterNextXid) NextXid() uint64 {
	next := c.verifyTarget.NextXid()
	if !c.done {
		c.done = true
		for i := range 3 {
			mustPut(c.t, c.db, fmt.Sprintf("later%d", i), "v")
		}
		if err := c.db.Checkpoint(); err != nil {
			c.t.Error(err)
		}
	}
	return next
}

// TestVerifyControlNextXidWithCheckpointBeside: the control file's next xid
// is compared with the running one read after the control file, not with
// the one read when the checks began: a checkpoint completing in between,
// after writers took new xids, wrote a next xid above that first reading,
// and a healthy database was reported with "next xid is above the running
// next xid".
func TestVerifyControlNextXidWithCheckpointBeside(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1})
	defer db.Close()
	mustPut(t, db, "k", "v")
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	var rep VerifyReport
	target := &checkpointAfterNextXid{verifyTarget: verifyTarget{db, db.procs.snapshot()}, t: t}
	verify.Run(target, rep.problem, rep.note)
	if !target.done {
		t.Fatal("the checks never asked for the next xid")
	}
	if !rep.OK() {
		t.Fatalf("a healthy database with a checkpoint beside the checks:\n%s", rep)
	}
	if _, err := db.Verify(); err != nil {
		t.Fatal(err)
	}
}
