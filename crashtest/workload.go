package crashtest

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
)

// Kind is the kind of a workload operation.
type Kind uint8

// The operation kinds.
const (
	Set        Kind = iota + 1 // write Value to Key
	Incr                       // add one to the counter Key; returns the new value
	Multi                      // write Value to every key of Keys in one transaction
	Del                        // delete Key
	Get                        // read Key
	Vacuum                     // run vacuum
	Checkpoint                 // take a checkpoint
)

var kindNames = map[Kind]string{Set: "SET", Incr: "INCR", Multi: "MULTI", Del: "DEL", Get: "GET", Vacuum: "VACUUM", Checkpoint: "CHECKPOINT"}

// String returns the kind's name as the operation list prints it ("SET").
func (k Kind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Op is one operation of the workload. Values are given by a tag from which
// the stored bytes are derived (Expand), so that large values travel between
// processes as a few bytes and a value read back can be checked whole.
type Op struct {
	Client int
	Kind   Kind
	Key    string   // Set, Incr, Del, Get
	Keys   []string // Multi
	Tag    string   // Set, Multi: the value's tag
}

// String formats the op for the failing-operation list, e.g.
// `c1 SET c1:k3 = t1.17 (65536 bytes)`.
func (o Op) String() string {
	switch o.Kind {
	case Set:
		return fmt.Sprintf("c%d SET %s = %s (%d bytes)", o.Client, o.Key, o.Tag, len(Expand(o.Tag)))
	case Multi:
		return fmt.Sprintf("c%d MULTI SET %s = %s", o.Client, strings.Join(o.Keys, " "), o.Tag)
	case Incr, Del, Get:
		return fmt.Sprintf("c%d %s %s", o.Client, o.Kind, o.Key)
	}
	return fmt.Sprintf("c%d %s", o.Client, o.Kind)
}

// Expand returns the value a tag stands for: the tag, a '|', and filler
// derived from the tag up to the length the tag names ("t3.41.65536" is
// 65536 bytes). A value that was cut, or mixed from two writes, differs.
// Values are kept in a bounded cache: the checker expands every write of
// the history at every crash point.
func Expand(tag string) string {
	expandCache.Lock()
	v, ok := expandCache.m[tag]
	expandCache.Unlock()
	if ok {
		return v
	}
	v = expand(tag)
	expandCache.Lock()
	if expandCache.bytes+len(v) > expandCacheBytes {
		clear(expandCache.m)
		expandCache.bytes = 0
	}
	expandCache.m[strings.Clone(tag)] = v
	expandCache.bytes += len(v)
	expandCache.Unlock()
	return v
}

// expandCacheBytes bounds the values Expand keeps (bytes).
const expandCacheBytes = 64 << 20

var expandCache = struct {
	sync.Mutex
	m     map[string]string
	bytes int
}{m: map[string]string{}}

func expand(tag string) string {
	n := len(tag) + 1
	if i := strings.LastIndexByte(tag, '.'); i >= 0 {
		if v, err := strconv.Atoi(tag[i+1:]); err == nil && v > n {
			n = min(v, 8<<20) // bounded: a tag read back from a damaged value may name anything
		}
	}
	h := fnv.New64a()
	h.Write([]byte(tag))
	r := rand.New(rand.NewPCG(h.Sum64(), 1))
	b := make([]byte, n)
	copy(b, tag)
	b[len(tag)] = '|'
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
	// Eight filler bytes per random draw.
	var x uint64
	for i, k := len(tag)+1, 0; i < n; i, k = i+1, k+1 {
		if k%8 == 0 {
			x = r.Uint64()
		}
		b[i] = letters[(x&0xff)%uint64(len(letters))]
		x >>= 8
	}
	return string(b)
}

// TagOf returns the tag a stored value was expanded from, or "" if the
// value is not one Expand made.
func TagOf(v string) string {
	i := strings.IndexByte(v, '|')
	if i <= 0 || Expand(v[:i]) != v {
		return ""
	}
	return v[:i]
}

// Key spaces. Each client owns its single keys and its multi-key groups, so
// the last acknowledged value of each is known exactly; the shared keys and
// the counters are written by every client, and linearizability is checked
// on them.
const (
	clientKeys   = 6
	clientGroups = 2
	groupSize    = 3
	sharedKeys   = 4
	counters     = 2
)

func clientKey(c, i int) string { return fmt.Sprintf("c%d:k%d", c, i) }

func groupKeys(c, g int) []string {
	keys := make([]string, groupSize)
	for m := range keys {
		keys[m] = fmt.Sprintf("c%d:g%d:%d", c, g, m)
	}
	return keys
}

func sharedKey(j int) string  { return fmt.Sprintf("s:%d", j) }
func counterKey(j int) string { return fmt.Sprintf("ctr:%d", j) }

// AllKeys returns every key a workload of clients clients may touch.
func AllKeys(clients int) []string {
	var keys []string
	for c := range clients {
		for i := range clientKeys {
			keys = append(keys, clientKey(c, i))
		}
		for g := range clientGroups {
			keys = append(keys, groupKeys(c, g)...)
		}
	}
	for j := range sharedKeys {
		keys = append(keys, sharedKey(j))
	}
	for j := range counters {
		keys = append(keys, counterKey(j))
	}
	return keys
}

// groupOf returns the group a key belongs to ("c1:g0") or "".
func groupOf(key string) string {
	if i := strings.Index(key, ":g"); i > 0 {
		if j := strings.LastIndexByte(key, ':'); j > i {
			return key[:j]
		}
	}
	return ""
}

// Gen generates one client's operations from a seed. Admin operations
// (vacuum, checkpoint) are left out when admin is false.
type Gen struct {
	client int
	r      *rand.Rand
	n      int
	prefix string
	admin  bool
}

// NewGen returns the generator of client's operations for seed; prefix
// makes the tags of one cycle distinct from every other's.
func NewGen(seed uint64, prefix string, client int, admin bool) *Gen {
	return &Gen{client: client, r: rand.New(rand.NewPCG(seed, uint64(client)+1)), prefix: prefix, admin: admin}
}

// Next returns the next operation.
func (g *Gen) Next() Op {
	g.n++
	c := g.client
	tag := func(size int) string { return fmt.Sprintf("%s.c%d.%d.%d", g.prefix, c, g.n, size) }
	small := func() int { return 8 + g.r.IntN(200) }
	p := g.r.IntN(100)
	switch {
	case p < 25:
		return Op{Client: c, Kind: Set, Key: clientKey(c, g.r.IntN(clientKeys)), Tag: tag(small())}
	case p < 30:
		// Large values, 4 KB to 100 KB, so that they span many WAL
		// pages and out-of-line chunks; larger ones only make every
		// crash copy slower.
		return Op{Client: c, Kind: Set, Key: clientKey(c, g.r.IntN(clientKeys)), Tag: tag(4096 + g.r.IntN(96<<10))}
	case p < 45:
		return Op{Client: c, Kind: Incr, Key: counterKey(g.r.IntN(counters))}
	case p < 60:
		return Op{Client: c, Kind: Multi, Keys: groupKeys(c, g.r.IntN(clientGroups)), Tag: tag(small())}
	case p < 66:
		return Op{Client: c, Kind: Del, Key: clientKey(c, g.r.IntN(clientKeys))}
	case p < 78:
		return Op{Client: c, Kind: Set, Key: sharedKey(g.r.IntN(sharedKeys)), Tag: tag(small())}
	case p < 96:
		keys := []string{sharedKey(g.r.IntN(sharedKeys)), counterKey(g.r.IntN(counters)), clientKey(c, g.r.IntN(clientKeys))}
		return Op{Client: c, Kind: Get, Key: keys[g.r.IntN(len(keys))]}
	case p < 98 && g.admin:
		return Op{Client: c, Kind: Checkpoint}
	case g.admin:
		return Op{Client: c, Kind: Vacuum}
	}
	return Op{Client: c, Kind: Get, Key: sharedKey(g.r.IntN(sharedKeys))}
}
