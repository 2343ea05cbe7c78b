package crashtest

import (
	"context"
	"strings"
	"testing"
	"time"
)

func acked(h *History, op Op, n int64, val string, found bool) {
	e := h.Invoke(op)
	h.Done(e, n, val, found, nil)
}

func wantProblem(t *testing.T, problems []string, sub string) {
	t.Helper()
	for _, p := range problems {
		if strings.Contains(p, sub) {
			return
		}
	}
	t.Fatalf("want a problem containing %q, got %q", sub, problems)
}

// The checker must catch each kind of loss it is there for.
func TestCheckFindsEachLoss(t *testing.T) {
	const clients = 1
	set := Op{Kind: Set, Key: clientKey(0, 0), Tag: "t.c0.1.20"}
	multi := Op{Kind: Multi, Keys: groupKeys(0, 0), Tag: "t.c0.2.20"}
	incr := Op{Kind: Incr, Key: counterKey(0)}
	h := &History{}
	acked(h, set, 0, "", false)
	acked(h, multi, 0, "", false)
	acked(h, incr, 1, "", false)
	acked(h, incr, 2, "", false)
	good := State{set.Key: Expand(set.Tag), counterKey(0): "2"}
	for _, k := range multi.Keys {
		good[k] = Expand(multi.Tag)
	}
	if p := Check(State{}, h.Snapshot(), good, clients); len(p) > 0 {
		t.Fatalf("a correct outcome: %q", p)
	}
	clone := func() State {
		s := State{}
		for k, v := range good {
			s[k] = v
		}
		return s
	}

	lost := clone()
	delete(lost, set.Key)
	wantProblem(t, Check(State{}, h.Snapshot(), lost, clients), "was acknowledged")

	partial := clone()
	partial[set.Key] = Expand(set.Tag)[:10]
	wantProblem(t, Check(State{}, h.Snapshot(), partial, clients), "partial or foreign value")

	torn := clone()
	delete(torn, multi.Keys[1])
	wantProblem(t, Check(State{}, h.Snapshot(), torn, clients), "multi-key transaction visible in part")

	short := clone()
	short[counterKey(0)] = "1"
	wantProblem(t, Check(State{}, h.Snapshot(), short, clients), "want exactly 2")

	// A read that saw a write which the state after recovery lost: each
	// key's final value is explained, but not in an order a linearizable
	// system allows.
	h2 := &History{}
	w1 := Op{Kind: Set, Key: sharedKey(0), Tag: "t.c0.1.20"}
	e := h2.Invoke(w1) // never answered
	_ = e
	acked(h2, Op{Kind: Get, Key: sharedKey(0)}, 0, Expand(w1.Tag), true)
	wantProblem(t, Check(State{}, h2.Snapshot(), State{}, clients), "not linearizable")
	// The problem says which key, what it reads now and what was answered.
	wantProblem(t, Check(State{}, h2.Snapshot(), State{}, clients),
		"not linearizable: key "+sharedKey(0)+", which reads absent after recovery; of its 1 answered operations the last was \"c0 GET "+sharedKey(0)+" -> the value tagged t.c0.1.20\"")
}

// Shrink finds the one operation a failure needs.
func TestShrink(t *testing.T) {
	var ops []Op
	for i := range 100 {
		ops = append(ops, Op{Client: i, Kind: Get})
	}
	got, ok := Shrink(context.Background(), ops, time.Minute, func(_ context.Context, o []Op) bool {
		for _, op := range o {
			if op.Client == 37 {
				return true
			}
		}
		return false
	})
	if !ok || len(got) != 1 || got[0].Client != 37 {
		t.Fatalf("Shrink: %v %v", got, ok)
	}
}
