package server

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"mvkv/engine"
)

// lower agrees with lowerSlow, which lowers with bytes.ToLower whatever has
// an ASCII capital, on every input, ASCII or not, long or short, a
// command's name or not.
func TestLowerAgreesWithToLower(t *testing.T) {
	words := [][]byte{
		[]byte("SET"), []byte("set"), []byte("InCr"), []byte("CLIENT"), []byte(""),
		[]byte("key:__rand_int__"), []byte("ÉTÉ"), []byte("\xff\xfeSET"),
		bytes.Repeat([]byte("A"), maxCommandName), bytes.Repeat([]byte("A"), maxCommandName+1),
	}
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte("aAzZ@[`{09:_|\x00\x7f\x80\xc3\xa9")
	for range 5000 {
		w := make([]byte, r.IntN(40))
		for i := range w {
			w[i] = alphabet[r.IntN(len(alphabet))]
		}
		words = append(words, w)
	}
	for _, w := range words {
		if got, want := lower(w), lowerSlow(w); got != want {
			t.Fatalf("lower(%q) = %q, want %q", w, got, want)
		}
	}
}

// Looking up a request's command, and checking its subcommand, allocate
// nothing for a command in upper case (as clients send them) or one that
// has no subcommands.
func TestCommandLookupAllocatesNothing(t *testing.T) {
	if raceOn {
		t.Skip("the race detector allocates")
	}
	args := [][]byte{[]byte("SET"), []byte("key:__rand_int__"), []byte("xxx")}
	n := testing.AllocsPerRun(100, func() {
		if commandTable[lower(args[0])] == nil {
			t.Fatal("SET not found")
		}
		if msg := subcommandError(lower(args[0]), args); msg != "" {
			t.Fatal(msg)
		}
	})
	if n != 0 {
		t.Fatalf("looking up SET made %v allocations, want 0", n)
	}
}

// A connection's transaction allocates only the engine's Txn: its options
// point at the server's settings rather than at a copy of one.
func TestBeginAllocatesOnlyTheTxn(t *testing.T) {
	if raceOn {
		t.Skip("the race detector allocates")
	}
	ts := startServer(t, Config{})
	c := &conn{s: ts.s, ctx: context.Background()}
	n := testing.AllocsPerRun(100, func() {
		tx, err := c.begin(true, engine.ReadCommitted)
		if err != nil {
			t.Fatal(err)
		}
		c.rollback(tx)
	})
	if n > 1 {
		t.Fatalf("begin and rollback made %v allocations, want 1", n)
	}
}

// Requests of a few short arguments are cut from shared blocks: reading
// one costs a fraction of an allocation, and each request's arguments
// and list are its own (an append to one reaches no other request's).
func TestReaderCarvesSmallRequests(t *testing.T) {
	const n = 1000
	set := "*3\r\n$3\r\nSET\r\n$16\r\nkey:__rand_int__\r\n$3\r\nxxx\r\n"
	data := []byte(strings.Repeat(set+"*2\r\n$4\r\nINCR\r\n$0\r\n\r\n", n))
	src := bytes.NewReader(data)
	rd := newReader(src, 16<<10, func() Limits { return DefaultLimits })
	var reqs []request
	for range 2 * n {
		req, err := rd.read()
		if err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, req)
	}
	for i, req := range reqs {
		want := [][]byte{[]byte("SET"), []byte("key:__rand_int__"), []byte("xxx")}
		if i%2 == 1 {
			want = [][]byte{[]byte("INCR"), {}}
		}
		if fmt.Sprintf("%q", req.args) != fmt.Sprintf("%q", want) {
			t.Fatalf("request %d read as %q, want %q", i, req.args, want)
		}
		// Grow every argument and list in place as far as it goes.
		for j := range req.args {
			a := req.args[j]
			req.args[j] = append(a[:len(a):cap(a)], "!!!!"...)
		}
		_ = append(req.args, []byte("extra"))
	}
	for i, req := range reqs {
		for _, a := range req.args {
			if !bytes.HasSuffix(a, []byte("!!!!")) || bytes.Count(a, []byte("!")) != 4 {
				t.Fatalf("request %d: argument %q was changed by another's append", i, a)
			}
		}
	}
	if raceOn {
		return
	}
	allocs := testing.AllocsPerRun(10, func() {
		src.Reset(data)
		rd := newReader(src, 16<<10, func() Limits { return DefaultLimits })
		for range 2 * n {
			if _, err := rd.read(); err != nil {
				t.Fatal(err)
			}
		}
	})
	if per := allocs / (2 * n); per > 0.2 {
		t.Fatalf("reading a request made %.2f allocations, want at most 0.2", per)
	}
}
