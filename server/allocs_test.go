package server

import (
	"bytes"
	"context"
	"math/rand/v2"
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
