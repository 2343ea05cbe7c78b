package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"mvkv/vfs"
)

// TestCloseWithoutCheckpoint: with SetCheckpointOnClose(false), Close
// leaves the control file naming the checkpoint before it, and the next
// Open replays the WAL written since, recovering every commit, an
// asynchronous one included; the default Close checkpoints.
func TestCloseWithoutCheckpoint(t *testing.T) {
	m := memDB(t)
	// No checkpoint but the ones the test takes, and a WAL writer that
	// never runs, so only Close flushes the asynchronous commit.
	opts := Options{FS: m, CheckpointTimeout: -1, WALWriterDelay: time.Hour, Autovacuum: noAutovacuum}
	db := openTest(t, "/db", opts)
	mustPut(t, db, "before", "1")
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	ckpt, _, err := readControl(m, "/db")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		mustPut(t, db, fmt.Sprintf("k%02d", i), "v")
	}
	off := SyncCommitOff
	tx, err := db.Begin(context.Background(), TxnOptions{SynchronousCommit: &off})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Put([]byte("async"), []byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := db.SetCheckpointOnClose(false); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.SetCheckpointOnClose(true); !errors.Is(err, ErrClosed) {
		t.Fatalf("SetCheckpointOnClose after Close: %v, want ErrClosed", err)
	}
	after, _, err := readControl(m, "/db")
	if err != nil {
		t.Fatal(err)
	}
	if after != ckpt {
		t.Fatalf("control file after Close without checkpoint: %+v, want the last checkpoint's %+v", after, ckpt)
	}

	// What a power loss right after Close leaves: the WAL was made
	// durable, nothing else is needed.
	opts.FS = m.CrashCopy(vfs.DropUnsynced, nil)
	db = openTest(t, "/db", opts)
	if ri := db.Recovery(); ri.RedoLSN != uint64(ckpt.RedoLSN) || ri.Records == 0 {
		t.Errorf("Recovery after Close without checkpoint: redo from %#x, %d records; want from %#x, some", ri.RedoLSN, ri.Records, uint64(ckpt.RedoLSN))
	}
	for _, k := range []string{"before", "k00", "k49", "async"} {
		if _, ok := get(t, db, k); !ok {
			t.Errorf("%s lost", k)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	final, _, err := readControl(opts.FS, "/db")
	if err != nil {
		t.Fatal(err)
	}
	if final.CheckpointLSN <= ckpt.CheckpointLSN {
		t.Fatalf("the default Close left the checkpoint at %s, not past %s", final.CheckpointLSN, ckpt.CheckpointLSN)
	}
}
