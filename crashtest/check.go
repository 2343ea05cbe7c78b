package crashtest

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Status is what became of an operation.
type Status uint8

// Operation outcomes.
const (
	// Pending: invoked, and no answer before the crash; it may or may not
	// have taken effect.
	Pending Status = iota
	// Acked: the operation returned success, so its effect must survive.
	Acked
	// Failed: it returned an error. A write's effect is then unknown, as
	// for a pending one (the commit may have reached the log).
	Failed
)

// Entry is one operation in a history, with logical invocation and return
// times (Return is 0 while pending).
type Entry struct {
	Op           Op     // what was invoked
	Call, Return int64  // logical times of invocation and return
	Status       Status // how it ended: Acked, Failed or Pending
	Out          int64  // Incr: the new value
	Val          string // Get: the value read
	Found        bool   // Get: whether the key existed
}

// History records operations as they are invoked and answered. It is safe
// for concurrent use.
type History struct {
	mu      sync.Mutex
	clock   int64
	entries []*Entry
}

// Invoke records the start of op and returns its entry.
func (h *History) Invoke(op Op) *Entry {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.clock++
	e := &Entry{Op: op, Call: h.clock}
	h.entries = append(h.entries, e)
	return e
}

// Done records the answer to e: err nil means acknowledged.
func (h *History) Done(e *Entry, out int64, val string, found bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.clock++
	e.Return = h.clock
	e.Out, e.Val, e.Found = out, val, found
	if err != nil {
		e.Status = Failed
	} else {
		e.Status = Acked
	}
}

// Snapshot returns a copy of the entries as they stand now, in invocation
// order: what a crash at this moment leaves the checker.
func (h *History) Snapshot() []Entry {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]Entry, len(h.entries))
	for i, e := range h.entries {
		out[i] = *e
	}
	return out
}

// Ops returns the operations of entries in invocation order.
func Ops(entries []Entry) []Op {
	ops := make([]Op, len(entries))
	for i, e := range entries {
		ops[i] = e.Op
	}
	return ops
}

// State maps each key present to its value.
type State map[string]string

func describe(v string, ok bool) string {
	if !ok {
		return "absent"
	}
	if t := TagOf(v); t != "" {
		return "the value tagged " + t
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return strconv.FormatInt(n, 10)
	}
	return fmt.Sprintf("a %d-byte value no write made (starting %q)", len(v), v[:min(len(v), 24)])
}

// Check compares the state read after a crash, final, with what the history
// allows, starting from initial (the state read after the previous crash),
// and returns the problems found: an acknowledged write missing, a value no
// write made (a partial one), a counter off its acknowledged count, a
// multi-key transaction visible in part, or a history that is not
// linearizable. clients is the number of clients of the workload.
func Check(initial State, hist []Entry, final State, clients int) []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	get := func(s State, k string) (string, bool) { v, ok := s[k]; return v, ok }

	// Values no write made, anywhere.
	for _, k := range AllKeys(clients) {
		v, ok := final[k]
		if !ok || strings.HasPrefix(k, "ctr:") {
			continue
		}
		if TagOf(v) == "" {
			add("%s holds %s: a partial or foreign value", k, describe(v, true))
		}
	}

	// Keys one client owns, and multi-key groups: the value after the last
	// acknowledged write, or after a later write whose outcome is unknown.
	allowed := map[string][]cand{} // key or group -> candidates
	lastAck := map[string]*Entry{}
	for k, v := range initial {
		if isClientKey(k) {
			allowed[k] = []cand{{v, true}}
		}
	}
	for i := range hist {
		e := &hist[i]
		var target string
		var c cand
		switch {
		case e.Op.Kind == Set && isClientKey(e.Op.Key):
			target, c = e.Op.Key, cand{Expand(e.Op.Tag), true}
		case e.Op.Kind == Del && isClientKey(e.Op.Key):
			target, c = e.Op.Key, cand{}
		case e.Op.Kind == Multi:
			target, c = groupOf(e.Op.Keys[0]), cand{Expand(e.Op.Tag), true}
		default:
			continue
		}
		if e.Status == Acked {
			allowed[target] = []cand{c}
			lastAck[target] = e
		} else {
			if _, seen := allowed[target]; !seen {
				// Nothing acknowledged yet: the initial state stays possible.
				allowed[target] = []cand{initialCand(initial, target)}
			}
			allowed[target] = append(allowed[target], c)
		}
	}
	for c := range clients {
		for i := range clientKeys {
			k := clientKey(c, i)
			v, ok := get(final, k)
			cs, seen := allowed[k]
			if !seen {
				cs = []cand{initialCand(initial, k)}
			}
			if !slices.Contains(cs, cand{v, ok}) {
				if e := lastAck[k]; e != nil {
					add("%s is %s, but %q was acknowledged (call %d) and nothing acknowledged after it", k, describe(v, ok), e.Op.String(), e.Call)
				} else {
					add("%s is %s, which no write of this cycle nor the state before it explains", k, describe(v, ok))
				}
			}
		}
		for g := range clientGroups {
			keys := groupKeys(c, g)
			group := groupOf(keys[0])
			v0, ok0 := get(final, keys[0])
			torn := false
			for _, k := range keys[1:] {
				if v, ok := get(final, k); v != v0 || ok != ok0 {
					var parts []string
					for _, k := range keys {
						v, ok := get(final, k)
						parts = append(parts, k+"="+describe(v, ok))
					}
					add("multi-key transaction visible in part: %s", strings.Join(parts, ", "))
					torn = true
					break
				}
			}
			if torn {
				continue
			}
			cs, seen := allowed[group]
			if !seen {
				cs = []cand{initialCand(initial, group)}
			}
			if !slices.Contains(cs, cand{v0, ok0}) {
				if e := lastAck[group]; e != nil {
					add("group %s is %s, but %q was acknowledged (call %d)", group, describe(v0, ok0), e.Op.String(), e.Call)
				} else {
					add("group %s is %s, which nothing explains", group, describe(v0, ok0))
				}
			}
		}
	}

	// Counters: exact when no increment is in doubt.
	for j := range counters {
		k := counterKey(j)
		base := int64(0)
		if v, ok := initial[k]; ok {
			base, _ = strconv.ParseInt(v, 10, 64)
		}
		acked, doubt := int64(0), int64(0)
		for _, e := range hist {
			if e.Op.Kind == Incr && e.Op.Key == k {
				if e.Status == Acked {
					acked++
				} else {
					doubt++
				}
			}
		}
		got := int64(0)
		if v, ok := final[k]; ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				add("counter %s holds %s", k, describe(v, true))
				continue
			}
			got = n
		}
		if got < base+acked || got > base+acked+doubt {
			if doubt == 0 {
				add("counter %s is %d, want exactly %d (%d before, %d increments acknowledged)", k, got, base+acked, base, acked)
			} else {
				add("counter %s is %d, want %d to %d (%d before, %d increments acknowledged, %d in doubt)", k, got, base+acked, base+acked+doubt, base, acked, doubt)
			}
		}
	}

	if len(problems) == 0 {
		if msg := checkLinearizable(initial, hist, final, clients); msg != "" {
			add("%s", msg)
		}
	}
	return problems
}

// cand is a value a key or group may hold after a crash (ok false: absent).
type cand struct {
	val string
	ok  bool
}

// initialCand is what target (a key, or a group such as "c1:g0") held at
// the start of the cycle.
func initialCand(initial State, target string) cand {
	if strings.Contains(target, ":g") && groupOf(target+":x") == target {
		v, ok := initial[target+":0"]
		return cand{v, ok}
	}
	v, ok := initial[target]
	return cand{v, ok}
}

// isClientKey reports whether k is a single key one client owns.
func isClientKey(k string) bool {
	return strings.HasPrefix(k, "c") && !strings.HasPrefix(k, "ctr:") && groupOf(k) == ""
}

// Porcupine model of single-key operations: a register per key (Set, Del,
// Get) or a counter (Incr), partitioned by key.
type kvInput struct {
	kind Kind
	key  string
	val  string
}

type kvOutput struct {
	val     string
	found   bool
	n       int64
	unknown bool // no answer: any output is possible
}

type kvState struct {
	init  bool
	val   string
	found bool
}

func checkLinearizable(initial State, hist []Entry, final State, clients int) string {
	var ops []porcupine.Operation
	end := int64(0)
	for _, e := range hist {
		end = max(end, e.Call, e.Return)
	}
	for _, e := range hist {
		switch e.Op.Kind {
		case Set, Del, Incr, Get:
		default:
			continue
		}
		if e.Op.Kind == Get && e.Status != Acked {
			continue // a read without an answer constrains nothing
		}
		in := kvInput{kind: e.Op.Kind, key: e.Op.Key}
		if e.Op.Kind == Set {
			in.val = Expand(e.Op.Tag)
		}
		out := kvOutput{val: e.Val, found: e.Found, n: e.Out}
		ret := e.Return
		if e.Status != Acked {
			out.unknown, ret = true, math.MaxInt64
		}
		ops = append(ops, porcupine.Operation{ClientId: e.Op.Client, Input: in, Call: e.Call, Output: out, Return: ret})
	}
	// The reads after recovery, after everything else.
	keys := make([]string, 0, len(final))
	for _, k := range AllKeys(clients) {
		if groupOf(k) == "" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for i, k := range keys {
		v, ok := final[k]
		t := end + 10 + int64(2*i)
		ops = append(ops, porcupine.Operation{ClientId: clients, Input: kvInput{kind: Get, key: k}, Call: t, Output: kvOutput{val: v, found: ok}, Return: t + 1})
	}
	model := porcupine.Model{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			by := map[string][]porcupine.Operation{}
			for _, o := range h {
				k := o.Input.(kvInput).key
				by[k] = append(by[k], o)
			}
			out := make([][]porcupine.Operation, 0, len(by))
			for _, p := range by {
				out = append(out, p)
			}
			return out
		},
		Init: func() any { return kvState{init: true} },
		Step: func(st, input, output any) (bool, any) {
			s, in, out := st.(kvState), input.(kvInput), output.(kvOutput)
			if s.init {
				v, ok := initial[in.key]
				s = kvState{val: v, found: ok}
			}
			switch in.kind {
			case Set:
				return true, kvState{val: in.val, found: true}
			case Del:
				return true, kvState{}
			case Incr:
				n := int64(0)
				if s.found {
					var err error
					if n, err = strconv.ParseInt(s.val, 10, 64); err != nil {
						return false, s
					}
				}
				n++
				if !out.unknown && out.n != n {
					return false, s
				}
				return true, kvState{val: strconv.FormatInt(n, 10), found: true}
			case Get:
				return out.found == s.found && (!s.found || out.val == s.val), s
			}
			return false, s
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(kvInput), output.(kvOutput)
			return fmt.Sprintf("%s %s -> %v", in.kind, in.key, out)
		},
	}
	switch porcupine.CheckOperationsTimeout(model, ops, 20*time.Second) {
	case porcupine.Illegal:
		return "the history of single-key operations, with the reads after recovery, is not linearizable" + illegalKeys(model, ops, hist, final)
	case porcupine.Unknown:
		return "" // timed out: no verdict, not a failure
	}
	return ""
}

// illegalKeys names the keys whose own histories are not linearizable (the
// first, with its value after recovery and the writes of it that were
// answered, and how many more), so that a failure says what was lost. Each
// key is checked alone, as the model's partition checks it; a key whose
// check times out is not named.
func illegalKeys(model porcupine.Model, ops []porcupine.Operation, hist []Entry, final State) string {
	by := map[string][]porcupine.Operation{}
	for _, o := range ops {
		k := o.Input.(kvInput).key
		by[k] = append(by[k], o)
	}
	model.Partition = nil
	var bad []string
	for _, k := range slices.Sorted(maps.Keys(by)) {
		if porcupine.CheckOperationsTimeout(model, by[k], 5*time.Second) == porcupine.Illegal {
			bad = append(bad, k)
		}
	}
	if len(bad) == 0 {
		return ""
	}
	k := bad[0]
	v, ok := final[k]
	msg := fmt.Sprintf(": key %s, which reads %s after recovery", k, describe(v, ok))
	var answered []string
	for _, e := range hist {
		if e.Op.Key != k || e.Status != Acked {
			continue
		}
		a := e.Op.String()
		switch e.Op.Kind {
		case Get:
			a += " -> " + describe(e.Val, e.Found)
		case Incr:
			a += fmt.Sprintf(" -> %d", e.Out)
		}
		answered = append(answered, a)
	}
	if n := len(answered); n > 0 {
		msg += fmt.Sprintf("; of its %d answered operations the last was %q", n, answered[n-1])
	}
	if len(bad) > 1 {
		msg += fmt.Sprintf(" (and %d more keys: %s)", len(bad)-1, strings.Join(bad[1:min(len(bad), 6)], ", "))
	}
	return msg
}
