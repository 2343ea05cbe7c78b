package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"mvkv/engine"
	"mvkv/internal/rmgr"
	"mvkv/vfs"
)

// TestShutdownNoSave: SHUTDOWN NOSAVE ends without a checkpoint, the
// server's or the DB's Close's, so the control file still names the one
// taken before the last writes, and reopening replays the WAL since and
// finds every acknowledged write; SHUTDOWN and SHUTDOWN SAVE checkpoint.
func TestShutdownNoSave(t *testing.T) {
	for _, c := range []struct {
		args       []any
		checkpoint bool
	}{
		{[]any{"SHUTDOWN", "NOSAVE"}, false},
		{[]any{"SHUTDOWN", "nosave", "NOW"}, false},
		{[]any{"SHUTDOWN"}, true},
		{[]any{"SHUTDOWN", "SAVE"}, true},
	} {
		t.Run(strings.TrimSpace(fmt.Sprintln(c.args...)), func(t *testing.T) {
			dir := t.TempDir()
			eo := engine.Options{CheckpointTimeout: -1, SharedBuffers: 4 << 20, WALSegmentSize: 1 << 20}
			db, err := engine.Open(dir, eo)
			if err != nil {
				t.Fatal(err)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			s := New(db, Config{})
			done := make(chan error, 1)
			go func() { done <- s.Serve(context.Background(), ln) }()
			rdb := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), MaxRetries: -1})
			defer rdb.Close()
			ctx := context.Background()
			if err := rdb.Set(ctx, "before", "1", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if err := db.Checkpoint(); err != nil {
				t.Fatal(err)
			}
			ckpt, _, err := rmgr.Engine.ReadControl(vfs.OS{}, dir)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 20 {
				if err := rdb.Set(ctx, fmt.Sprintf("k%02d", i), "v", 0).Err(); err != nil {
					t.Fatal(err)
				}
			}
			if err := rdb.Do(ctx, c.args...).Err(); err != nil && !errors.Is(err, io.EOF) {
				t.Fatalf("%v: %v", c.args, err)
			}
			if err := <-done; !errors.Is(err, ErrServerClosed) {
				t.Fatalf("Serve: %v", err)
			}
			<-s.Done()
			if err := db.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			after, _, err := rmgr.Engine.ReadControl(vfs.OS{}, dir)
			if err != nil {
				t.Fatal(err)
			}
			if moved := after.CheckpointLSN != ckpt.CheckpointLSN; moved != c.checkpoint {
				t.Fatalf("checkpoint at %s before the writes, %s after %v and Close; want it moved: %v", ckpt.CheckpointLSN, after.CheckpointLSN, c.args, c.checkpoint)
			}
			db, err = engine.Open(dir, eo)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			// The checkpoint record alone after a checkpoint; the 20
			// writes' records at least without one.
			if n := db.Recovery().Records; c.checkpoint && n > 1 || !c.checkpoint && n < 20 {
				t.Errorf("reopen replayed %d records", n)
			}
			err = db.View(ctx, func(tx *engine.Txn) error {
				for _, k := range []string{"before", "k00", "k19"} {
					if v, err := tx.Get([]byte(k)); err != nil {
						return fmt.Errorf("%s: %w", k, err)
					} else if len(v) == 0 {
						return fmt.Errorf("%s empty", k)
					}
				}
				return nil
			})
			if err != nil {
				t.Fatalf("after reopening: %v", err)
			}
		})
	}
}
