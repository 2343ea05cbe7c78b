package server

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestRandomRepliesMatchRedis sends the same random command sequences to a
// real redis-server and to the server and compares the replies: string,
// counter and expiry commands with their options, keyspace commands with
// repeated keys, and MULTI/EXEC/WATCH blocks, over a handful of keys so
// that commands meet each other's values. Arities, types and numbers are
// often wrong on purpose. The seeds are fixed, so a run is deterministic;
// MVKV_DIFF_SEEDS and MVKV_DIFF_LEN run more and longer sequences.
// Replies that depend on time (TTL, PTTL) match within a tolerance, and
// SCAN is compared as the set of keys a whole iteration returns (cursors
// and order differ by design).
func TestRandomRepliesMatchRedis(t *testing.T) {
	seeds, n := 4, 400
	if v, err := strconv.Atoi(os.Getenv("MVKV_DIFF_SEEDS")); err == nil {
		seeds = v
	}
	if v, err := strconv.Atoi(os.Getenv("MVKV_DIFF_LEN")); err == nil {
		n = v
	}
	redis := startRedis(t)
	ts := startServer(t, Config{})
	mvkv := ts.raw(t)
	// A second client of each writes outside the first's MULTI blocks,
	// which its WATCHes must see.
	redis2, mvkv2 := redis.another(t), ts.raw(t)
	fails := 0
	for seed := range seeds {
		g := &diffGen{r: rand.New(rand.NewPCG(uint64(seed), 7))}
		send := func(args []string) (string, string) {
			redis.cmd(args...)
			mvkv.cmd(args...)
			return redis.reply(), mvkv.reply()
		}
		send2 := func(args []string) (string, string) {
			redis2.cmd(args...)
			mvkv2.cmd(args...)
			return redis2.reply(), mvkv2.reply()
		}
		send([]string{"FLUSHALL"})
		var history []string
		var pending *diffCmd
		for done := 0; done < n; {
			// A batch of the first client's commands goes out as one
			// pipeline, so that the server's grouping of pipelined
			// commits is compared too; a SCAN or a command of the
			// second client goes alone.
			var batch []diffCmd
			for len(batch) < 1+g.r.IntN(30) && done < n {
				c := pending
				if c == nil {
					c = ptr(g.command())
				}
				pending = nil
				if (c.other || c.scan()) && len(batch) > 0 {
					pending = c
					break
				}
				batch = append(batch, *c)
				done++
				history = append(history, c.String())
				if c.other || c.scan() {
					break
				}
			}
			var wants, gots []string
			switch c := batch[0]; {
			case c.other:
				want, got := send2(c.args)
				wants, gots = []string{want}, []string{got}
			case c.scan():
				wants, gots = []string{scanAll(redis, c.args)}, []string{scanAll(mvkv, c.args)}
			default:
				var rb bytes.Buffer
				for _, c := range batch {
					rb.Write(encodeRequest(c.args))
				}
				redis.send(rb.String())
				mvkv.send(rb.String())
				for range batch {
					wants = append(wants, redis.reply())
					gots = append(gots, mvkv.reply())
				}
			}
			for i, c := range batch {
				want, got := wants[i], gots[i]
				if strings.EqualFold(c.args[0], "KEYS") {
					want, got = sortArray(want), sortArray(got)
				}
				if repliesMatch(c, want, got) {
					continue
				}
				fails++
				t.Errorf("seed %d: %s: got %q, Redis %q\nlast commands:\n%s", seed, c, got, want,
					strings.Join(history[max(0, len(history)-len(batch)-8):], "\n"))
				if fails >= 10 {
					t.FailNow()
				}
				// Start both over so one difference is reported once.
				send([]string{"DISCARD"})
				send([]string{"UNWATCH"})
				send([]string{"FLUSHALL"})
				g.inMulti = false
				break
			}
		}
		send([]string{"DISCARD"})
		send([]string{"UNWATCH"})
	}
}

// diffCmd is a command TestRandomRepliesMatchRedis sends.
type diffCmd struct {
	args  []string
	other bool // sent by the second client
	timed bool // its reply depends on the time: TTLs, or an EXEC with them
}

func (c diffCmd) scan() bool { return strings.EqualFold(c.args[0], "SCAN") && len(c.args) > 1 }

func (c diffCmd) String() string {
	q := make([]string, len(c.args))
	for i, a := range c.args {
		q[i] = strconv.Quote(a)
	}
	if c.other {
		return "(second client) " + strings.Join(q, " ")
	}
	return strings.Join(q, " ")
}

func ptr[T any](v T) *T { return &v }

// encodeRequest returns args as a multibulk request.
func encodeRequest(args []string) []byte {
	b := fmt.Appendf(nil, "*%d\r\n", len(args))
	for _, a := range args {
		b = fmt.Appendf(b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b
}

// diffTimed are the commands whose replies depend on the time.
var diffTimed = []string{"TTL", "PTTL", "EXPIRETIME", "PEXPIRETIME"}

// diffGen draws commands for TestRandomRepliesMatchRedis.
type diffGen struct {
	r       *rand.Rand
	inMulti bool
	queued  []string // the names of the commands queued in MULTI
}

var (
	diffKeys   = []string{"a", "b", "c", "d", "e"}
	diffValues = []string{"", "0", "1", "-1", "10", "007", "+5", " 1", "1 ", "abc", "hello", "1.5", "-0.5", "3.0e3",
		"9223372036854775807", "-9223372036854775808", "9223372036854775806", "1e308", "inf", "\xff\x00x", "\xffab"}
	diffInts = []string{"0", "1", "-1", "2", "10", "100", "-100", "9223372036854775807", "-9223372036854775808",
		"9223372036854775808", "-9223372036854775809", "x", "", "1.5", "+1", "01", " 1", "1e3", "4611686018427387904",
		"-4611686018427387904", "9223372036854775", "9223372036854776", "9223372036854775807000"}
	diffFloats = []string{"0", "1", "-1", "0.1", "-0.1", "1e10", "1e308", "-1e308", "inf", "nan", "x", "", "3.0e3",
		"1.7976931348623157e308", "5e-324", "0x10", "1_0", " 1", "1 ", "+.5", "-.5", "1.", "1e", "10e-1"}
	diffPatterns = []string{"*", "a", "?", "[a-c]", "[^a]", "[!b]*", "*e", "\\a", "[", "[a", "a*b", "**", "[]a]"}
	diffExpiry   = []string{"EX", "PX", "EXAT", "PXAT"}
)

func (g *diffGen) pick(s []string) string { return s[g.r.IntN(len(s))] }
func (g *diffGen) key() string            { return g.pick(diffKeys) }

// ttl draws an expiry amount for opt: mostly far enough away that no key
// expires during a run, sometimes zero, negative or out of range.
func (g *diffGen) ttl(opt string) string {
	switch g.r.IntN(8) {
	case 0:
		// A small positive relative amount would expire the key at
		// different points of the sequence in the two servers.
		v := g.pick(diffInts)
		if n, err := strconv.ParseInt(v, 10, 64); err != nil || n <= 0 || n >= 100000 || strings.HasSuffix(opt, "AT") {
			return v
		}
		return "0"
	case 1:
		return "0"
	}
	switch strings.ToUpper(opt) {
	case "PX":
		return strconv.Itoa(100000 + g.r.IntN(1000000))
	case "EXAT":
		return strconv.Itoa(33177117420 + g.r.IntN(1000))
	case "PXAT":
		return strconv.Itoa(33177117420000 + g.r.IntN(1000000))
	}
	return strconv.Itoa(100 + g.r.IntN(10000))
}

func (g *diffGen) keys(min int) []string {
	n := min + g.r.IntN(4)
	out := make([]string, n)
	for i := range out {
		out[i] = g.key()
	}
	return out
}

// command draws one command, sent by the first client or by the second; a
// few in a hundred have an argument dropped or one added.
func (g *diffGen) command() diffCmd {
	args := g.base()
	switch g.r.IntN(40) {
	case 0:
		if len(args) > 1 {
			args = args[:len(args)-1]
		}
	case 1:
		if name := strings.ToUpper(args[0]); name != "COPY" && name != "SET" {
			args = append(args, g.pick(append(slices.Clone(diffInts), "NX", "XX", "GET", "EX")))
		}
	}
	name := strings.ToUpper(args[0])
	c := diffCmd{args: args, timed: slices.Contains(diffTimed, name)}
	if g.r.IntN(8) == 0 && !slices.Contains([]string{"MULTI", "EXEC", "DISCARD", "WATCH", "UNWATCH", "SCAN", "KEYS"}, name) {
		c.other = true
		return c
	}
	// With a wrong number of arguments, MULTI starts no block, and EXEC
	// and DISCARD end none.
	switch {
	case name == "MULTI" && g.inMulti:
	case name == "MULTI" && len(args) == 1:
		g.inMulti, g.queued = true, nil
	case (name == "EXEC" || name == "DISCARD") && len(args) == 1:
		c.timed = name == "EXEC" && slices.ContainsFunc(g.queued, func(q string) bool { return slices.Contains(diffTimed, q) })
		g.inMulti = false
	case g.inMulti:
		g.queued = append(g.queued, name)
	}
	return c
}

func (g *diffGen) base() []string {
	k := g.key()
	r := g.r
	switch r.IntN(46) {
	case 0, 1:
		return []string{"SET", k, g.pick(diffValues)}
	case 2, 3:
		args := []string{"SET", k, g.pick(diffValues)}
		for range r.IntN(4) {
			switch r.IntN(6) {
			case 0, 1:
				opt := g.pick(diffExpiry)
				ttl := g.ttl(opt)
				if n, err := strconv.ParseInt(ttl, 10, 64); err == nil && n > 0 && strings.HasSuffix(opt, "AT") && n < 33177117420 {
					// Redis 7.0's SET with a deadline in the past
					// stores the key and leaves it for expiry to
					// remove, so DBSIZE counts it until then.
					ttl = "0"
				}
				args = append(args, opt, ttl)
			case 2:
				args = append(args, g.pick([]string{"NX", "XX"}))
			case 3:
				args = append(args, "GET")
			case 4:
				args = append(args, "KEEPTTL")
			case 5:
				args = append(args, g.pick([]string{"nx", "get", "keepttl", "ex", "FOO"}))
			}
		}
		return args
	case 4:
		return []string{"GET", k}
	case 5:
		args := []string{"GETEX", k}
		switch r.IntN(4) {
		case 0:
			opt := g.pick(diffExpiry)
			args = append(args, opt, g.ttl(opt))
		case 1:
			args = append(args, "PERSIST")
		case 2:
			opt := g.pick(diffExpiry)
			args = append(args, opt, g.ttl(opt), g.pick([]string{"PERSIST", "EX", "FOO"}))
		}
		return args
	case 6:
		return []string{"SETEX", k, g.ttl("EX"), g.pick(diffValues)}
	case 7:
		return []string{"PSETEX", k, g.ttl("PX"), g.pick(diffValues)}
	case 8:
		return []string{g.pick([]string{"INCR", "DECR"}), k}
	case 9, 10:
		return []string{g.pick([]string{"INCRBY", "DECRBY"}), k, g.pick(diffInts)}
	case 11:
		return []string{"INCRBYFLOAT", k, g.pick(diffFloats)}
	case 12:
		return []string{"APPEND", k, g.pick(diffValues)}
	case 13:
		return []string{"STRLEN", k}
	case 14:
		return []string{g.pick([]string{"GETRANGE", "SUBSTR"}), k, g.pick(diffInts), g.pick(diffInts)}
	case 15:
		off := g.pick(diffInts)
		if r.IntN(2) == 0 {
			off = strconv.Itoa(r.IntN(20))
		}
		return []string{"SETRANGE", k, off, g.pick(diffValues)}
	case 16:
		args := []string{g.pick([]string{"MSET", "MSETNX"})}
		for range 1 + r.IntN(3) {
			args = append(args, g.key(), g.pick(diffValues))
		}
		return args
	case 17:
		return append([]string{"MGET"}, g.keys(1)...)
	case 18, 19:
		return append([]string{g.pick([]string{"DEL", "UNLINK", "EXISTS", "TOUCH"})}, g.keys(1)...)
	case 20:
		return []string{g.pick([]string{"RENAME", "RENAMENX"}), k, g.key()}
	case 21:
		return []string{g.pick([]string{"TTL", "PTTL", "EXPIRETIME", "PEXPIRETIME"}), k}
	case 22:
		return []string{"PERSIST", k}
	case 23, 24:
		name := g.pick([]string{"EXPIRE", "PEXPIRE", "EXPIREAT", "PEXPIREAT"})
		opt := map[string]string{"EXPIRE": "EX", "PEXPIRE": "PX", "EXPIREAT": "EXAT", "PEXPIREAT": "PXAT"}[name]
		args := []string{name, k, g.ttl(opt)}
		for range r.IntN(3) {
			args = append(args, g.pick([]string{"NX", "XX", "GT", "LT", "gt", "FOO"}))
		}
		return args
	case 25:
		return []string{"TYPE", k}
	case 26:
		if g.inMulti {
			// A queued SCAN's reply is one page in hash order.
			return []string{"DBSIZE"}
		}
		args := []string{"SCAN", "0"}
		if r.IntN(2) == 0 {
			args = append(args, "MATCH", g.pick(diffPatterns))
		}
		if r.IntN(2) == 0 {
			args = append(args, "COUNT", g.pick([]string{"1", "2", "10", "0", "-1", "x"}))
		}
		if r.IntN(4) == 0 {
			args = append(args, "TYPE", g.pick([]string{"string", "list", "foo"}))
		}
		return args
	case 27:
		if g.inMulti {
			return []string{"DBSIZE"}
		}
		return []string{"KEYS", g.pick(diffPatterns)}
	case 28:
		return []string{"DBSIZE"}
	case 29:
		if g.inMulti {
			return []string{"EXEC"}
		}
		return []string{"MULTI"}
	case 30:
		if g.inMulti {
			// Refused inside MULTI, without aborting the block.
			return [][]string{{"MULTI"}, {"WATCH", k}, {"DISCARD"}}[r.IntN(3)]
		}
		return []string{g.pick([]string{"EXEC", "DISCARD"})}
	case 31:
		return append([]string{"WATCH"}, g.keys(1)...)
	case 32:
		return []string{"UNWATCH"}
	case 33:
		return []string{g.pick([]string{"GETSET", "SETNX"}), k, g.pick(diffValues)}
	case 34:
		return []string{"GETDEL", k}
	case 35:
		args := []string{"COPY", k, g.key()}
		if r.IntN(2) == 0 {
			args = append(args, g.pick([]string{"REPLACE", "REPLACE", "DB", "FOO"}))
		}
		if r.IntN(3) == 0 {
			// Databases 1 to 15 are a documented difference.
			args = append(args, "DB", g.pick([]string{"0", "16", "-1", "x", "2147483648", "-2147483649", "9223372036854775808"}))
		}
		return args
	case 36:
		return []string{"SETBIT", k, strconv.Itoa(r.IntN(40)), g.pick([]string{"0", "1", "2", "x"})}
	case 37:
		return []string{"GETBIT", k, g.pick(append([]string{"3", "7", "30"}, diffInts...))}
	case 38:
		args := []string{"BITCOUNT", k}
		if r.IntN(2) == 0 {
			args = append(args, g.pick(diffInts), g.pick(diffInts))
			if r.IntN(2) == 0 {
				args = append(args, g.pick([]string{"BIT", "BYTE", "bit"}))
			}
		}
		return args
	case 39:
		args := []string{"BITPOS", k, g.pick([]string{"0", "1", "2"})}
		for range r.IntN(3) {
			args = append(args, g.pick(diffInts))
		}
		if r.IntN(3) == 0 {
			args = append(args, g.pick([]string{"BIT", "BYTE"}))
		}
		return args
	case 40:
		return append([]string{"BITOP", g.pick([]string{"AND", "OR", "XOR", "NOT"}), k}, g.keys(1)...)
	case 41:
		return []string{"LCS", k, g.key(), g.pick([]string{"LEN", "IDX", "IDX", "FOO"})}[:3+r.IntN(2)]
	case 42:
		return []string{"GET", k}
	case 43:
		// Wrong arity or an unknown command, inside MULTI too.
		return []string{g.pick([]string{"GET", "SET", "INCRBY", "EXPIRE", "NOSUCH", "RENAME", "MSET"})}
	case 44:
		return []string{"EXISTS", k, k}
	}
	return []string{"ECHO", g.pick(diffValues)}
}

// repliesMatch compares a reply with Redis's; integers a time-dependent
// command returned may differ a little.
func repliesMatch(c diffCmd, want, got string) bool {
	if want == got {
		return true
	}
	if !c.timed {
		return false
	}
	wl, gl := strings.Split(want, "\r\n"), strings.Split(got, "\r\n")
	if len(wl) != len(gl) {
		return false
	}
	for i := range wl {
		if wl[i] == gl[i] {
			continue
		}
		if !strings.HasPrefix(wl[i], ":") || !strings.HasPrefix(gl[i], ":") {
			return false
		}
		w, err1 := strconv.ParseInt(wl[i][1:], 10, 64)
		v, err2 := strconv.ParseInt(gl[i][1:], 10, 64)
		if err1 != nil || err2 != nil || w < 0 || v < 0 || max(w-v, v-w) > 2000 {
			return false
		}
	}
	return true
}

// scanAll runs a SCAN to its end and returns the sorted keys it found, or
// its first error.
func scanAll(c *raw, args []string) string {
	var keys []string
	cursor := "0"
	for range 1000 {
		args[1] = cursor
		c.cmd(args...)
		rep := c.reply()
		if !strings.HasPrefix(rep, "*2\r\n") {
			return rep
		}
		lines := strings.Split(rep, "\r\n")
		// *2, $n, cursor, *m, then $len/key pairs.
		cursor = lines[2]
		for i := 5; i+1 < len(lines); i += 2 {
			keys = append(keys, lines[i])
		}
		if cursor == "0" {
			break
		}
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	return strings.Join(keys, ",")
}

// sortArray returns a flat array of bulk strings with its elements sorted.
func sortArray(rep string) string {
	lines := strings.Split(rep, "\r\n")
	if !strings.HasPrefix(rep, "*") || len(lines) < 2 {
		return rep
	}
	var elems []string
	for i := 1; i+1 < len(lines); i += 2 {
		elems = append(elems, lines[i]+"\r\n"+lines[i+1])
	}
	slices.Sort(elems)
	return lines[0] + "\r\n" + strings.Join(elems, "\r\n")
}
