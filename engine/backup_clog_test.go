package engine

import (
	"context"
	"fmt"
	"testing"

	"mvkv/clog"
	"mvkv/vfs"
)

// TestBackupXidsCrossCLOGSegment holds a Backup right after it has chosen
// the last CLOG page to copy, commits transactions whose xids cross into a
// new CLOG page and segment, then lets it finish: redo of the copied WAL
// must set their statuses in pages and a segment file the copy lacks.
// With synchronous commit, and asynchronous with early lock release.
func TestBackupXidsCrossCLOGSegment(t *testing.T) {
	for _, async := range []bool{false, true} {
		t.Run(fmt.Sprintf("async=%v", async), func(t *testing.T) {
			m := vfs.NewMemFS()
			o := Options{}
			if async {
				elr := true
				o.SynchronousCommit, o.EarlyLockRelease = SyncCommitOff, &elr
			}
			db, reached, release := gatedDB(t, m, "/bk.partial/clog/", o)
			defer db.Close()
			seg := uint64(clog.PagesPerSegment * clog.XidsPerPage)
			db.procs.setNext(seg - 5)
			mustPut(t, db, "before", "x")
			done := make(chan error, 1)
			go func() {
				_, err := db.Backup(context.Background(), "/bk")
				done <- err
			}()
			<-reached
			for i := range 20 {
				mustPut(t, db, fmt.Sprintf("w%d", i), "v")
			}
			if next := db.procs.next(); next <= seg {
				t.Fatalf("next xid %d did not cross the segment at %d", next, seg)
			}
			close(release)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			c := openVerifiedCopy(t, m, "/bk", 1<<20)
			if err := c.View(context.Background(), func(tx *Txn) error {
				for i := range 20 {
					if _, err := tx.Get(fmt.Appendf(nil, "w%d", i)); err != nil {
						return fmt.Errorf("w%d: %w", i, err)
					}
				}
				_, err := tx.Get([]byte("before"))
				return err
			}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestBackupAfterCLOGTruncation backs up right after a freezing vacuum
// truncated the CLOG: the copy keeps the truncation point, opens,
// verifies, and finds its rows.
func TestBackupAfterCLOGTruncation(t *testing.T) {
	m := memDB(t)
	db := openTest(t, "/db", Options{FS: m, CheckpointTimeout: -1, VacuumFreezeMinAge: -1, WALSegmentSize: 1 << 20})
	defer db.Close()
	oldest := oldCLOGSegments(t, db, 3)
	for i := range 50 {
		mustPut(t, db, fmt.Sprintf("k%d", i), "v")
	}
	ctx := context.Background()
	if _, err := db.Vacuum(ctx); err != nil {
		t.Fatal(err)
	}
	if segs := clogSegments(t, m, "/db"); len(segs) != 1 {
		t.Fatalf("CLOG segments after the freezing vacuum: %v, want one", segs)
	}
	if _, err := db.Backup(ctx, "/bk"); err != nil {
		t.Fatal(err)
	}
	mustPut(t, db, "after", "v")
	c := openVerifiedCopy(t, m, "/bk", 1<<20)
	if got := clogSegments(t, m, "/bk"); len(got) != 1 {
		t.Fatalf("CLOG segments in the copy: %v", got)
	}
	if _, err := c.clog.Status(oldest - 1); err == nil {
		t.Fatalf("status of xid %d below the truncation point read from the copy", oldest-1)
	}
	for i := range 50 {
		if err := c.View(ctx, func(tx *Txn) error { _, err := tx.Get(fmt.Appendf(nil, "k%d", i)); return err }); err != nil {
			t.Fatal(err)
		}
	}
}
