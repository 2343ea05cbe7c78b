package crashtest

import (
	"context"
	"testing"
)

// A replay of a correct engine finds nothing, and returns (the file system
// hook and the replay's own crash copies take their locks in one order).
func TestReplayOfCorrectEngine(t *testing.T) {
	start := newMemFS()
	var ops []Op
	for c := range 2 {
		g := NewGen(5, "r", c, true)
		for range 40 {
			ops = append(ops, g.Next())
		}
	}
	if p := replay(context.Background(), start, State{}, ops, engineReplayTarget, 2); p != nil {
		t.Fatalf("replay of a correct engine: %q", p)
	}
}
