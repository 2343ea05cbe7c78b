package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"mvkv/vfs"
)

// TestEndOfRecoveryCheckpointInBackground: Open after a crash returns
// before its end-of-recovery checkpoint, which runs in the checkpointer,
// and a second crash before that checkpoint completes, with commits made
// after the first recovery, recovers them all by replaying from the same
// redo point again.
func TestEndOfRecoveryCheckpointInBackground(t *testing.T) {
	m := vfs.NewMemFS()
	if err := m.MkdirAll("/db"); err != nil {
		t.Fatal(err)
	}
	m.SyncDir("/")
	opts := Options{FS: m, CheckpointTimeout: -1, SharedBuffers: 2 << 20, WALSegmentSize: 1 << 20, Autovacuum: new(bool)}
	db, err := Open("/db", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	put := func(db *DB, from, to int, v string) {
		t.Helper()
		for i := from; i < to; i++ {
			if err := db.Update(ctx, func(tx *Txn) error {
				return tx.Put([]byte(fmt.Sprintf("k%03d", i)), []byte(v))
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	put(db, 0, 200, "a")
	before, _, err := readControl(m, "/db")
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))

	// First crash; hold the end-of-recovery checkpoint of the next Open.
	c1 := m.CrashCopy(vfs.DropUnsynced, rng)
	hold, held := make(chan struct{}), make(chan *DB, 1)
	testEndOfRecoveryHook = func(d *DB) {
		held <- d
		<-hold
	}
	defer func() { testEndOfRecoveryHook = nil }()
	opts.FS = c1
	db2, err := Open("/db", opts)
	if err != nil {
		t.Fatal(err)
	}
	released := false
	defer func() {
		if !released {
			close(hold)
		}
		db2.Close()
	}()
	select {
	case d := <-held:
		if d != db2 {
			t.Fatal("the hook ran for another database")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no end-of-recovery checkpoint was started after a recovery that replayed records")
	}
	if ctrl, _, err := readControl(c1, "/db"); err != nil || ctrl != before {
		t.Fatalf("Open returned after writing a new checkpoint: control %+v, before the crash %+v (%v)", ctrl, before, err)
	}
	put(db2, 0, 100, "b")

	// Second crash, before that checkpoint ran.
	c2 := c1.CrashCopy(vfs.DropUnsynced, rng)
	testEndOfRecoveryHook = nil
	opts.FS = c2
	db3, err := Open("/db", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db3.Close()
	if got := db3.Recovery().RedoLSN; got != uint64(before.RedoLSN) {
		t.Errorf("second recovery started at redo point %#x, want the first checkpoint's %#x", got, uint64(before.RedoLSN))
	}
	for i := 0; i < 200; i++ {
		want := "a"
		if i < 100 {
			want = "b"
		}
		var v []byte
		err := db3.View(ctx, func(tx *Txn) error {
			var err error
			v, err = tx.Get([]byte(fmt.Sprintf("k%03d", i)))
			return err
		})
		if err != nil || string(v) != want {
			t.Fatalf("k%03d = %q, %v after the second crash; want %q", i, v, err, want)
		}
	}

	// Released, the held checkpoint completes and the control file moves.
	close(hold)
	released = true
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctrl, _, err := readControl(c1, "/db")
		if err == nil && ctrl.CheckpointLSN > before.CheckpointLSN {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the end-of-recovery checkpoint did not complete: control %+v", ctrl)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
