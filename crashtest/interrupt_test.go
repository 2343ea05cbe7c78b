package crashtest

import (
	"context"
	"io"
	"testing"
	"time"
)

// TestInterruptedRunHasNoFailure: a run interrupted at any moment (the
// command's Ctrl-C or SIGTERM) reports no problem, since what it cut
// short (a read of a crash copy's state, say) failed for that reason and
// not because of the engine. The cut lands mostly in the checks of crash
// copies, where a power-mode cycle spends most of its time.
func TestInterruptedRunHasNoFailure(t *testing.T) {
	for i := range 8 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(150+170*i)*time.Millisecond)
		res, err := Run(ctx, Config{Mode: "power", Seed: uint64(i + 1), Clients: 2, Duration: time.Minute, Out: io.Discard})
		cancel()
		if err != nil {
			t.Fatalf("run interrupted after %d ms: %v", 150+170*i, err)
		}
		if len(res.Problems) > 0 {
			t.Fatalf("run interrupted after %d ms, cycle %d, reports problems: %q", 150+170*i, res.Cycles, res.Problems)
		}
	}
}
