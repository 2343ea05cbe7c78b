package crashtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"mvkv/engine"
	"mvkv/vfs"
)

// replayTarget gives the target a replay runs its operations through, on
// db, and a function that releases it.
type replayTarget func(db *engine.DB) (Target, func(), error)

func engineReplayTarget(db *engine.DB) (Target, func(), error) {
	return EngineTarget{db}, func() {}, nil
}

func serverReplayTarget(db *engine.DB) (Target, func(), error) {
	s, err := startInProcessServer(db)
	if err != nil {
		return nil, nil, err
	}
	c := NewRESPClient(s.addr)
	return RESPTarget{c}, func() { c.Close(); s.stop() }, nil
}

// replay runs ops one at a time, in order, on a copy of start (whose state
// is initial) through the target mk gives, and simulates a power loss
// (dropping what was not synced) after every file sync and after every
// answer, checking each crash copy as a restart would see it. It returns the
// problems of the first crash point that fails, or nil; it stops early,
// finding nothing, once ctx ends.
func replay(ctx context.Context, start *vfs.MemFS, initial State, ops []Op, mk replayTarget, clients int) []string {
	fsys := start.Clone()
	db, err := engine.Open(dbDir, engineOptions(fsys))
	if err != nil {
		return []string{fmt.Sprintf("replay: open: %v", err)}
	}
	defer db.Close()
	t, release, err := mk(db)
	if err != nil {
		return []string{fmt.Sprintf("replay: %v", err)}
	}
	defer release()
	h := &History{}
	var (
		mu       sync.Mutex
		problems []string
	)
	check := func(c *vfs.MemFS, hist []Entry, where string) {
		cdb, err := engine.Open(dbDir, engineOptions(c))
		if err != nil {
			problems = []string{fmt.Sprintf("%s: open: %v", where, err)}
			return
		}
		defer cdb.Close()
		st, err := readState(ctx, EngineTarget{cdb}, clients)
		if err != nil {
			problems = []string{fmt.Sprintf("%s: read: %v", where, err)}
			return
		}
		if p := Check(initial, hist, st, clients); len(p) > 0 {
			problems = append([]string{where}, p...)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	fsys.SetOpHook(func(p vfs.CrashPoint) {
		if p.Op.Kind != vfs.OpSync && p.Op.Kind != vfs.OpDatasync {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if problems != nil || ctx.Err() != nil {
			return
		}
		check(p.CrashCopy(vfs.DropUnsynced, nil), h.Snapshot(), fmt.Sprintf("crash after %v (DropUnsynced)", p.Op))
	})
	defer fsys.SetOpHook(nil)
	for _, op := range ops {
		mu.Lock()
		failed := problems != nil
		mu.Unlock()
		if failed || ctx.Err() != nil {
			break
		}
		e := h.Invoke(op)
		n, v, ok, err := t.Do(ctx, op)
		h.Done(e, n, v, ok, err)
		if err != nil {
			continue
		}
		for _, mode := range []vfs.CrashMode{vfs.DropUnsynced} {
			// The copy is taken before mu: the hook runs with the file
			// system locked and takes mu, so the other order deadlocks
			// with a background flush.
			c, hist := fsys.CrashCopy(mode, rng), h.Snapshot()
			mu.Lock()
			if problems == nil && ctx.Err() == nil {
				check(c, hist, fmt.Sprintf("crash after the answer to %v (%v)", op, mode))
			}
			mu.Unlock()
		}
	}
	mu.Lock()
	defer mu.Unlock()
	return problems
}

// Shrink looks for a shorter operation list that still fails, by removing
// chunks of halving size while fails keeps saying so (delta debugging),
// within budget; fails gets a context that ends with the budget and must
// return false once it has ended. reproduced is false when ops itself does
// not fail when replayed; ops is then returned as it is.
func Shrink(ctx context.Context, ops []Op, budget time.Duration, fails func(context.Context, []Op) bool) (shortest []Op, reproduced bool) {
	deadline := time.Now().Add(budget)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if !fails(ctx, ops) {
		return ops, false
	}
	n := 2
	for len(ops) >= 2 && time.Now().Before(deadline) {
		chunk := (len(ops) + n - 1) / n
		reduced := false
		for i := 0; i < len(ops) && time.Now().Before(deadline); i += chunk {
			cand := append(append([]Op(nil), ops[:i]...), ops[min(i+chunk, len(ops)):]...)
			if fails(ctx, cand) {
				ops, reduced = cand, true
				n = max(n-1, 2)
				break
			}
		}
		if !reduced {
			if n >= len(ops) {
				break
			}
			n = min(2*n, len(ops))
		}
	}
	return ops, true
}
