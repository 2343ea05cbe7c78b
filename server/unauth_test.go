package server

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestUnauthenticatedLimits: before it authenticates to a server with a
// password, a client may send at most 10 arguments of at most 16 KiB
// each, and request lines of at most 64 KiB whatever the configured
// limits; beyond them it gets Redis's protocol error and is disconnected.
// After AUTH the configured limits apply.
func TestUnauthenticatedLimits(t *testing.T) {
	ts := startServer(t, Config{RequirePass: "pw", Limits: Limits{MaxInlineLen: 1 << 20}})
	const (
		mbulk = "-ERR Protocol error: unauthenticated multibulk length\r\n"
		bulk  = "-ERR Protocol error: unauthenticated bulk length\r\n"
	)
	for _, c := range []struct{ send, want string }{
		{"*11\r\n", mbulk},
		{"*1048576\r\n", mbulk},
		{"*2000000\r\n", mbulk},
		{"*2147483648\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
		{"*2\r\n$4\r\nAUTH\r\n$16385\r\n", bulk},
		// The request that grew the server by half a gigabyte a
		// connection is refused at its length.
		{"*2\r\n$4\r\nAUTH\r\n$536870912\r\n", bulk},
		{"*2\r\n$4\r\nAUTH\r\n$600000000\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
		{"AUTH " + strings.Repeat("p", 70<<10) + "\r\n", "-ERR Protocol error: too big inline request\r\n"},
		{"*1\r\n$" + strings.Repeat("1", 70<<10), "-ERR Protocol error: too big bulk count string\r\n"},
		// A wrong password does not lift the limits.
		{"AUTH nope\r\n*11\r\n", "-WRONGPASS invalid username-password pair or user is disabled.\r\n" + mbulk},
	} {
		r := ts.raw(t)
		r.nc.SetDeadline(time.Now().Add(10 * time.Second))
		r.send(c.send)
		var got strings.Builder
		for range strings.Count(c.want, "\r\n") {
			got.WriteString(r.reply())
		}
		if got.String() != c.want {
			t.Errorf("%.40q: got %q, want %q", c.send, got.String(), c.want)
		}
		r.expectClosed()
	}

	// Within the limits: answered, and the connection stays open.
	r := ts.raw(t)
	args := make([]string, 10)
	for i := range args {
		args[i] = strings.Repeat("x", 16<<10)
	}
	args[0] = "MSET"
	r.cmd(args...)
	r.expect("-NOAUTH Authentication required.\r\n")
	r.cmd("AUTH", strings.Repeat("p", 16<<10))
	r.expect("-WRONGPASS invalid username-password pair or user is disabled.\r\n")
	r.cmd("HELLO", "2", "AUTH", "default", "nope", "SETNAME", "n")
	r.expect("-WRONGPASS invalid username-password pair or user is disabled.\r\n")

	// Authenticated, pipelined with the requests past the limits.
	big := strings.Repeat("v", 100<<10)
	var b strings.Builder
	b.WriteString("AUTH pw\r\n*13\r\n$4\r\nMSET\r\n")
	for i := range 5 {
		fmt.Fprintf(&b, "$2\r\nk%d\r\n$%d\r\n%s\r\n", i, len(big), big)
	}
	b.WriteString("$2\r\nk5\r\n$1\r\nv\r\n")
	b.WriteString("SET inline " + strings.Repeat("w", 100<<10) + "\r\n")
	r.send(b.String())
	r.expect("+OK\r\n")
	r.expect("+OK\r\n")
	r.expect("+OK\r\n")
	r.cmd("STRLEN", "k4")
	r.expect(fmt.Sprintf(":%d\r\n", len(big)))
	r.cmd("STRLEN", "inline")
	r.expect(fmt.Sprintf(":%d\r\n", 100<<10))

	// HELLO's AUTH lifts them too.
	r = ts.raw(t)
	r.cmd("HELLO", "2", "AUTH", "default", "pw")
	if got := r.reply(); !strings.HasPrefix(got, "*14\r\n") {
		t.Fatalf("HELLO: %q", got)
	}
	r.cmd("SET", "k", big)
	r.expect("+OK\r\n")

	// A connection made before the password was set counts as
	// authenticated, as in Redis.
	open := ts.raw(t)
	open.cmd("AUTH", "pw")
	open.expect("+OK\r\n")
	open.cmd("CONFIG", "SET", "requirepass", "")
	open.expect("+OK\r\n")
	early := ts.raw(t)
	early.cmd("PING")
	early.expect("+PONG\r\n")
	open.cmd("CONFIG", "SET", "requirepass", "pw2")
	open.expect("+OK\r\n")
	early.cmd("SET", "k", big)
	early.expect("+OK\r\n")
	late := ts.raw(t)
	late.cmd("SET", "k", big)
	late.expect(bulk)
	late.expectClosed()

	// Clearing the password admits the connections that had not
	// authenticated, and lifts their limits, at once.
	waiting := ts.raw(t)
	waiting.cmd("GET", "k")
	waiting.expect("-NOAUTH Authentication required.\r\n")
	open.cmd("CONFIG", "SET", "requirepass", "")
	open.expect("+OK\r\n")
	waiting.cmd("SET", "k2", big)
	waiting.expect("+OK\r\n")
	// Cleared while a request was half sent: its next argument gets the
	// configured limits.
	open.cmd("CONFIG", "SET", "requirepass", "pw3")
	open.expect("+OK\r\n")
	half := ts.raw(t)
	half.send("*3\r\n$3\r\nSET\r\n$2\r\nk3\r\n")
	time.Sleep(50 * time.Millisecond) // the server reads the first part
	open.cmd("CONFIG", "SET", "requirepass", "")
	open.expect("+OK\r\n")
	half.send(fmt.Sprintf("$%d\r\n%s\r\n", len(big), big))
	half.expect("+OK\r\n")
	waiting.cmd("HELLO", "2")
	if got := waiting.reply(); !strings.HasPrefix(got, "*14\r\n") {
		t.Fatalf("HELLO after the password was cleared: %q", got)
	}
}

// TestNoPasswordNoUnauthenticatedLimits: without a password every client
// has the configured limits from the start.
func TestNoPasswordNoUnauthenticatedLimits(t *testing.T) {
	ts := startServer(t, Config{})
	r := ts.raw(t)
	big := strings.Repeat("v", 100<<10)
	r.cmd("MSET", "a", big, "b", big, "c", big, "d", big, "e", big, "f", big)
	r.expect("+OK\r\n")
	r.cmd("STRLEN", "f")
	r.expect(fmt.Sprintf(":%d\r\n", len(big)))
}
