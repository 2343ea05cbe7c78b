package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"mvkv/vfs"
)

type linOp struct {
	kind string // get, put, incr, del
	key  string
	val  int
}

type linOut struct {
	val     int
	found   bool
	unknown bool // in flight at the crash: it may or may not have happened
}

// linState is one key's value; absent when !found.
type linState struct {
	val   int
	found bool
}

var kvModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		for _, op := range h {
			k := op.Input.(linOp).key
			by[k] = append(by[k], op)
		}
		var out [][]porcupine.Operation
		for _, ops := range by {
			out = append(out, ops)
		}
		return out
	},
	Init: func() any { return linState{} },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(linState), input.(linOp), output.(linOut)
		switch in.kind {
		case "get":
			return out.unknown || (out.found == s.found && (!s.found || out.val == s.val)), s
		case "put":
			return true, linState{in.val, true}
		case "del":
			return true, linState{}
		case "incr":
			n := linState{1, true}
			if s.found {
				n.val = s.val + 1
			}
			return out.unknown || out.val == n.val, n
		}
		return false, s
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(linOp), output.(linOut)
		return fmt.Sprintf("%s(%s,%d) -> %d %v unknown=%v", in.kind, in.key, in.val, out.val, out.found, out.unknown)
	},
}

func runLinOp(db *DB, op linOp) (linOut, error) {
	tx, err := db.Begin(context.Background(), TxnOptions{})
	if err != nil {
		return linOut{}, err
	}
	var out linOut
	k := []byte(op.key)
	switch op.kind {
	case "get":
		v, err := tx.Get(k)
		if err == nil {
			out.val, _ = strconv.Atoi(string(v))
			out.found = true
		} else if !errors.Is(err, ErrNotFound) {
			tx.Rollback()
			return out, err
		}
	case "put":
		err = tx.Put(k, []byte(strconv.Itoa(op.val)))
	case "del":
		err = tx.Delete(k)
	case "incr":
		err = tx.Update(k, func(old []byte, found bool) ([]byte, error) {
			n := 1
			if found {
				v, _ := strconv.Atoi(string(old))
				n = v + 1
			}
			out.val, out.found = n, true
			return []byte(strconv.Itoa(n)), nil
		})
	}
	if err != nil {
		tx.Rollback()
		return out, err
	}
	return out, tx.Commit()
}

// TestLinearizableAcrossCrash runs concurrent single-key reads, writes,
// deletes and read-modify-writes, takes a power-loss copy of the file
// system in the middle, reopens the copy and goes on; the whole history
// must be linearizable (porcupine), with the operations in flight at the
// crash free to have happened or not.
func TestLinearizableAcrossCrash(t *testing.T) {
	// Races show up in a small share of histories: check several.
	rounds := 20
	if raceEnabled {
		rounds = 5
	}
	seed := testSeed(t, 0)
	for i := 0; i < rounds; i++ {
		linearizableAcrossCrash(t, seed+uint64(i))
		if t.Failed() {
			return
		}
	}
}

func linearizableAcrossCrash(t *testing.T, seed uint64) {
	t.Logf("seed %d", seed)
	m := vfs.NewMemFS()
	m.MkdirAll("/db")
	m.SyncDir("/")
	db := openTest(t, "/db", Options{FS: m})
	keys := []string{"x", "y", "z"}

	var mu sync.Mutex
	var history []porcupine.Operation
	var crashBefore, crashAfter int64 = math.MaxInt64, math.MaxInt64
	record := func(client int, op linOp, out linOut, call, ret int64) {
		mu.Lock()
		defer mu.Unlock()
		history = append(history, porcupine.Operation{ClientId: client, Input: op, Output: out, Call: call, Return: ret})
	}
	var opsDone atomic.Int64
	phase := func(db *DB, base int, crashes bool) {
		var wg sync.WaitGroup
		for c := 0; c < 4; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(seed, uint64(base+c)))
				for i := 0; i < 60; i++ {
					op := linOp{kind: []string{"get", "put", "incr", "del", "get", "incr"}[r.IntN(6)], key: keys[r.IntN(len(keys))], val: r.IntN(100)}
					call := time.Now().UnixNano()
					out, err := runLinOp(db, op)
					ret := time.Now().UnixNano()
					opsDone.Add(1)
					mu.Lock()
					cb, ca := crashBefore, crashAfter
					mu.Unlock()
					if !crashes {
						cb, ca = math.MaxInt64, math.MaxInt64
					}
					switch {
					case call >= ca:
						return // runs on the database after its crash copy was taken
					case ret > cb && op.kind == "get":
						// A read in flight at the crash constrains
						// nothing: leave it out of the history.
					case ret > cb:
						record(base+c, op, linOut{unknown: true}, call, math.MaxInt64)
					case err != nil:
						t.Errorf("%s %s: %v", op.kind, op.key, err)
						return
					default:
						record(base+c, op, out, call, ret)
					}
				}
			}()
		}
		wg.Wait()
	}

	var crashCopy *vfs.MemFS
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Crash somewhere in the middle of the first phase.
		for opsDone.Load() < int64(40+seed%120) {
			time.Sleep(50 * time.Microsecond)
		}
		mu.Lock()
		crashBefore = time.Now().UnixNano()
		mu.Unlock()
		c := m.CrashCopy(vfs.DropUnsynced, nil)
		mu.Lock()
		crashCopy, crashAfter = c, time.Now().UnixNano()
		mu.Unlock()
	}()
	phase(db, 0, true)
	<-done
	db.Close()

	db2 := openTest(t, "/db", Options{FS: crashCopy})
	defer db2.Close()
	phase(db2, 10, false)

	res, info := porcupine.CheckOperationsVerbose(kvModel, history, 60*time.Second)
	if res == porcupine.Unknown {
		// The checker ran out of time (operations whose outcome the crash
		// left open can make its search long): no verdict either way.
		t.Logf("history of %d operations: linearizability check inconclusive after 60 s", len(history))
		return
	}
	if res != porcupine.Ok {
		path := t.TempDir() + "/history.html"
		porcupine.VisualizePath(kvModel, info, path)
		for _, k := range keys {
			var ops []porcupine.Operation
			for _, op := range history {
				if op.Input.(linOp).key == k {
					ops = append(ops, op)
				}
			}
			if porcupine.CheckOperationsTimeout(kvModel, ops, 10*time.Second) != porcupine.Illegal {
				continue
			}
			sort.Slice(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
			for _, op := range ops {
				ret := op.Return - ops[0].Call
				if op.Return == math.MaxInt64 {
					ret = -1
				}
				t.Logf("client %d call %d ns return %d ns: %s", op.ClientId, op.Call-ops[0].Call, ret, kvModel.DescribeOperation(op.Input, op.Output))
			}
		}
		t.Fatalf("history of %d operations is not linearizable (%s); visualization in %s", len(history), res, path)
	}
	t.Logf("%d operations linearizable", len(history))
}
