package engine

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"testing"

	"mvkv/internal/heap"
	"mvkv/vfs"
)

// TestVacuumCLOGTruncationCrashLadder: keys written, updated, deleted, and
// deleted or updated by transactions that rolled back (an aborted xmax),
// some with out-of-line values, all with xids in CLOG segment 0; then the
// xids move to segment 2 and an aggressive vacuum freezes every version and
// removes segments 0 and 1, and a checkpoint follows. A crash after any
// file operation of the two (before the segments go, between the record
// and the files, after, before and after the checkpoint records the new
// state) must reopen to every key with its value, with Count agreeing and
// Verify clean, also with the index file missing or left from the
// checkpoint before the vacuum. Every 2nd point by default (every 8th
// under -race); -crash.sample=1 checks every one, as .ci/run does.
func TestVacuumCLOGTruncationCrashLadder(t *testing.T) {
	sample := *ladderSample
	if sample <= 0 {
		sample = 2
		if raceEnabled {
			sample = 8
		}
	}
	m := memDB(t)
	db := openTest(t, "/db", Options{FS: m, CheckpointTimeout: -1, Autovacuum: noAutovacuum,
		SharedBuffers: 16 * heap.PageSize, VacuumFreezeMinAge: -1})
	defer db.Close()
	want := ladderState{}
	put := func(k, v string) {
		mustPut(t, db, k, v)
		want[k] = v
	}
	for i := range 40 {
		v := fmt.Sprintf("%s%d", strings.Repeat("a", 300), i)
		if i%9 == 4 {
			v = fmt.Sprintf("%s%d", strings.Repeat("B", 12000), i)
		}
		put(fmt.Sprintf("a%03d", i), v)
	}
	for i := 0; i < 40; i += 4 {
		put(fmt.Sprintf("a%03d", i), fmt.Sprint("u", i))
		mustDelete(t, db, fmt.Sprintf("a%03d", i+1))
		delete(want, fmt.Sprintf("a%03d", i+1))
	}
	for i := 2; i < 40; i += 4 {
		tx, err := db.Begin(context.Background(), TxnOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if i%8 == 2 {
			err = tx.Delete(fmt.Appendf(nil, "a%03d", i))
		} else {
			err = tx.Put(fmt.Appendf(nil, "a%03d", i), []byte("rolled back"))
		}
		if err != nil {
			t.Fatal(err)
		}
		tx.Rollback()
	}
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	stale, err := readMemFile(m, "/db/index")
	if err != nil {
		t.Fatal(err)
	}
	db.procs.setNext(2*clogSegXids + 10)
	put("z", "segment 2")
	var (
		copies []*vfs.MemFS
		ops    []vfs.Op
	)
	m.SetOpHook(func(p vfs.CrashPoint) {
		copies = append(copies, p.CrashCopy(vfs.DropUnsynced, nil), p.CrashCopy(vfs.TearLast, rand.New(rand.NewPCG(uint64(p.Op.Index), 3))))
		ops = append(ops, p.Op, p.Op)
	})
	vs, err := db.Vacuum(context.Background())
	if err == nil {
		err = db.Checkpoint()
	}
	m.SetOpHook(nil)
	if err != nil {
		t.Fatal(err)
	}
	if vs.TuplesFrozen == 0 || db.clog.OldestXid() < 2*clogSegXids {
		t.Fatalf("the vacuum froze %d versions and the CLOG's oldest xid is %d: the test tests nothing", vs.TuplesFrozen, db.clog.OldestXid())
	}
	for i, c := range copies {
		// Both copies of a point (dropped and torn) or neither.
		if (i/2)%sample != 0 {
			continue
		}
		for _, v := range []struct {
			how   string
			index []byte // nil: removed
		}{{"", nil}, {" without its index file", nil}, {" with the index file from before the vacuum", stale}} {
			fs := c.Clone()
			switch {
			case v.how == "":
			case v.index == nil:
				_ = fs.Remove("/db/index")
			default:
				if err := writeMemFile(fs, "/db/index", v.index); err != nil {
					t.Fatal(err)
				}
			}
			if err := reopenHolds(fs, want); err != nil {
				t.Fatalf("crash after %v%s: %v", ops[i], v.how, err)
			}
		}
	}
}

// reopenHolds opens /db on fs and checks that it holds exactly want, read
// by Scan and by Get key by key, that index-only Count agrees, and that
// Verify finds nothing.
func reopenHolds(fs vfs.FS, want ladderState) error {
	db, err := Open("/db", Options{FS: fs, CheckpointTimeout: -1, Autovacuum: noAutovacuum, SharedBuffers: 16 * heap.PageSize})
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer db.Close()
	got, err := scanState(db)
	if err != nil {
		return fmt.Errorf("scan: %w", err)
	}
	if !maps.Equal(got, want) {
		return fmt.Errorf("the state differs: %s", diffState(got, want))
	}
	err = db.View(context.Background(), func(tx *Txn) error {
		for k, v := range want {
			got, err := tx.Get([]byte(k))
			if err != nil || string(got) != v {
				return fmt.Errorf("get %s: %d bytes, %v", k, len(got), err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if _, n := countKeys(nil, db); n != len(want) {
		return fmt.Errorf("Count says %d keys, want %d", n, len(want))
	}
	if rep, err := db.Verify(); err != nil || !rep.OK() {
		return fmt.Errorf("verify: %v %v", err, rep.Problems)
	}
	return nil
}
