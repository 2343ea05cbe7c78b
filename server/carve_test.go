package server

import (
	"bytes"
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
	"weak"
)

// readLongArg reads one request whose last argument is longer than
// carveMax from rd and returns a weak pointer to that argument's bytes, so
// that the caller's frame holds no reference of its own.
func readLongArg(t *testing.T, rd *reader) weak.Pointer[byte] {
	t.Helper()
	req, err := rd.read()
	if err != nil {
		t.Fatal(err)
	}
	long := req.args[len(req.args)-1]
	if len(long) <= carveMax {
		t.Fatalf("the last argument has %d bytes; the test needs more than %d", len(long), carveMax)
	}
	return weak.Make(&long[0])
}

// A request with a long argument that is done with is not kept alive by
// the reader: the block its argument list was cut from, which the reader
// goes on cutting the next lists from, points only at short arguments, so
// a connection that sent a large value and went idle holds no copy of it.
func TestReaderKeepsNoLongArgument(t *testing.T) {
	val := strings.Repeat("v", 100_000)
	data := "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100000\r\n" + val + "\r\n"
	rd := newReader(bytes.NewReader([]byte(data)), 16<<10, func() Limits { return DefaultLimits })
	w := readLongArg(t, rd)
	runtime.GC()
	if w.Value() != nil {
		t.Fatal("the reader keeps a 100,000-byte argument alive after its request")
	}
	runtime.KeepAlive(rd)
}

// A command queued in MULTI keeps a copy of its short arguments and list,
// not the pieces the reader cut from its shared blocks: those blocks also
// point at requests the queue does not count against its limit (ones
// refused while queuing), which would stay alive with them until EXEC.
func TestMultiQueueOwnsItsArguments(t *testing.T) {
	ts := startServer(t, Config{})
	nc, peer := net.Pipe()
	defer peer.Close()
	c := ts.s.newConn(nc)
	defer c.leave()
	defer nc.Close()
	data := "*1\r\n$5\r\nMULTI\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\nvv\r\n"
	c.rd = newReader(bytes.NewReader([]byte(data)), 16<<10, ts.s.limits)
	var req request
	for range 2 {
		var err error
		if req, err = c.rd.read(); err != nil {
			t.Fatal(err)
		}
		c.dispatch(req)
	}
	if got := string(c.out); got != "+OK\r\n+QUEUED\r\n" {
		t.Fatalf("replies %q", got)
	}
	if len(c.queue) != 1 || fmt.Sprintf("%q", c.queue[0]) != `["SET" "k" "vv"]` {
		t.Fatalf("queue %q", c.queue)
	}
	q := c.queue[0]
	if &q[0] == &req.args[0] {
		t.Error("the queued list is the one the reader cut from its block")
	}
	for i := range q {
		if &q[i][0] == &req.args[i][0] {
			t.Errorf("queued argument %d (%q) is the piece the reader cut from its block", i, q[i])
		}
		if cap(q[i]) != len(q[i]) {
			t.Errorf("queued argument %d has capacity %d past its %d bytes", i, cap(q[i]), len(q[i]))
		}
	}
}
