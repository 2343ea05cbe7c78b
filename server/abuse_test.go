package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestProtocolErrors(t *testing.T) {
	ts := startServer(t, Config{})
	for _, c := range []struct{ send, want string }{
		{"*99999999999\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
		{"*2147483648\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
		{"*x\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
		{"*1\r\n$999999999999\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
		{"*1\r\n$600000000\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
		{"*1\r\n$-5\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
		{"*1\r\n+GET\r\n", "-ERR Protocol error: expected '$', got '+'\r\n"},
		// A count line ends at its first "\r", as in Redis: a bare "\n"
		// does not end it, and the byte after the "\r" is skipped.
		{"*1\n$4\r\nPING\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
		{"*2\r\n$4\r\nECHO\r\n$1\n\r\nx\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
		{"*1\r$4\r\nPING\r\n", "-ERR Protocol error: expected '$', got '4'\r\n"},
		{"SET \"abc v\r\n", "-ERR Protocol error: unbalanced quotes in request\r\n"},
		{"SET 'abc v\r\n", "-ERR Protocol error: unbalanced quotes in request\r\n"},
		{"SET \"a\"b v\r\n", "-ERR Protocol error: unbalanced quotes in request\r\n"},
		{strings.Repeat("x", 70<<10), "-ERR Protocol error: too big inline request\r\n"},
		{"*" + strings.Repeat("1", 70<<10), "-ERR Protocol error: too big mbulk count string\r\n"},
		{"*1\r\n$" + strings.Repeat("1", 70<<10), "-ERR Protocol error: too big bulk count string\r\n"},
	} {
		r := ts.raw(t)
		r.send(c.send)
		if got := r.reply(); got != c.want {
			t.Errorf("%.40q: got %q, want %q", c.send, got, c.want)
		}
		r.expectClosed()
	}
	// Under CLIENT REPLY OFF or SKIP, the error is not sent either.
	for _, mode := range []string{"OFF", "SKIP"} {
		r := ts.raw(t)
		r.send("CLIENT REPLY " + mode + "\r\n*1\r\n$-5\r\n")
		r.expectClosed()
	}
	// Redis does not look at the byte after a count line's "\r".
	r := ts.raw(t)
	r.send("*1\rX$4\r\nPING\r\n*2\r\n$4\rXECHO\r\n$2\r\nhi\r\n")
	r.expect("+PONG\r\n")
	r.expect("$2\r\nhi\r\n")
	// Other clients are unaffected.
	rdb := ts.client(t)
	if err := rdb.Set(context.Background(), "still", "fine", 0).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestManyArguments: as in Redis 7, a request may have more than 2^20
// arguments (a DEL of over a million keys, say); the count's limit is
// 2^31-1. ECHO's arity error answers it without touching the engine.
func TestManyArguments(t *testing.T) {
	ts := startServer(t, Config{})
	r := ts.raw(t)
	const n = 1<<20 + 1
	go func() {
		var b bytes.Buffer
		fmt.Fprintf(&b, "*%d\r\n$4\r\nECHO\r\n", n)
		for range n - 1 {
			b.WriteString("$1\r\nk\r\n")
		}
		r.nc.Write(b.Bytes())
	}()
	r.expect("-ERR wrong number of arguments for 'echo' command\r\n")
	r.cmd("PING")
	r.expect("+PONG\r\n")
}

// TestOversizeArgument: an argument over the longest kept (MaxArgLen, here
// lowered to 1 MiB) but within proto-max-bulk-len is read without being
// stored and refused; the connection stays usable.
func TestOversizeArgument(t *testing.T) {
	ts := startServer(t, Config{Limits: Limits{MaxArgLen: 1 << 20}})
	r := ts.raw(t)
	n := 2 << 20
	go func() {
		fmt.Fprintf(r.nc, "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$%d\r\n", n)
		chunk := bytes.Repeat([]byte("v"), 64<<10)
		for sent := 0; sent < n; sent += len(chunk) {
			r.nc.Write(chunk)
		}
		io.WriteString(r.nc, "\r\n")
	}()
	r.expect("-ERR string exceeds maximum allowed size (2097152 bytes; the limit is 1048576)\r\n")
	r.cmd("GET", "k")
	r.expect("$-1\r\n")
	// Exactly the limit is fine.
	v := strings.Repeat("v", 1<<20)
	r.cmd("SET", "k", v)
	r.expect("+OK\r\n")
	r.cmd("GET", "k")
	r.expect(fmt.Sprintf("$%d\r\n%s\r\n", len(v), v))
}

// TestQueryBufferLimit: a request holding more than
// client-query-buffer-limit closes the connection.
func TestQueryBufferLimit(t *testing.T) {
	ts := startServer(t, Config{Limits: Limits{QueryBufferLimit: 1 << 20}})
	r := ts.raw(t)
	go func() {
		io.WriteString(r.nc, "*100\r\n")
		arg := fmt.Sprintf("$%d\r\n%s\r\n", 100<<10, strings.Repeat("a", 100<<10))
		for i := 0; i < 100; i++ {
			if _, err := io.WriteString(r.nc, arg); err != nil {
				return
			}
		}
	}()
	r.expectClosed()
}

// TestStalledHalfRequests: a thousand clients each stalled in the middle of
// a request that declares a large argument or a million arguments hold
// little memory, and other clients are served meanwhile.
func TestStalledHalfRequests(t *testing.T) {
	ts := startServer(t, Config{})
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const n = 1000
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", ts.addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if i%2 == 0 {
			// Declares a 512 MiB value, sends 10 bytes of it.
			fmt.Fprintf(c, "*3\r\n$3\r\nSET\r\n$3\r\nk%02d\r\n$536870912\r\n0123456789", i%100)
		} else {
			// Declares a million arguments, sends one.
			fmt.Fprintf(c, "*1048576\r\n$3\r\nSET\r\n")
		}
	}
	rdb := ts.client(t)
	ctx := context.Background()
	for i := 0; i < 20; i++ {
		if err := rdb.Incr(ctx, "served").Err(); err != nil {
			t.Fatal(err)
		}
	}
	for ts.s.clients.Load() < n {
		rdb.Ping(ctx)
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	// 500 x 512 MiB would be 250 GiB; each stalled client holds its read
	// buffer and at most growStep of argument.
	if grew := int64(after.HeapInuse) - int64(before.HeapInuse); grew > n*(growStep+64<<10) {
		t.Fatalf("heap grew by %d MiB for %d stalled clients", grew>>20, n)
	}
}

// TestTrickle: a request sent one byte per write is answered as usual.
func TestTrickle(t *testing.T) {
	ts := startServer(t, Config{})
	r := ts.raw(t)
	req := "*3\r\n$3\r\nSET\r\n$5\r\nslow!\r\n$5\r\nvalue\r\nGET slow!\r\n"
	for i := 0; i < len(req); i++ {
		r.send(req[i : i+1])
	}
	r.expect("+OK\r\n")
	r.expect("$5\r\nvalue\r\n")
}

// TestShutdownInFlight: Shutdown waits for the connections' current
// commands and closes idle ones.
func TestShutdownWithClients(t *testing.T) {
	ts := startServer(t, Config{})
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: ts.addr, PoolSize: 8, MaxRetries: -1})
	defer rdb.Close()
	stop := make(chan struct{})
	errc := make(chan error, 8)
	for i := 0; i < 8; i++ {
		go func() {
			for {
				select {
				case <-stop:
					errc <- nil
					return
				default:
				}
				if err := rdb.Incr(ctx, "n").Err(); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	for rdb.Get(ctx, "n").Val() == "" {
	}
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := ts.s.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	close(stop)
	for i := 0; i < 8; i++ {
		<-errc // connection errors are expected
	}
	if n := ts.s.OpenTransactions(); n != 0 {
		t.Fatalf("%d transactions open after shutdown", n)
	}
}

// readAll returns the commands in data, or the first error.
func readAll(r io.Reader, lim Limits) ([]string, error) {
	rd := newReader(r, 16, func() Limits { return lim })
	var cmds []string
	for {
		req, err := rd.read()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return cmds, nil
			}
			return cmds, err
		}
		cmds = append(cmds, fmt.Sprintf("%q/%d", req.args, req.oversize))
	}
}

func errKind(err error) string {
	var pe *protocolError
	switch {
	case err == nil:
		return "nil"
	case errors.As(err, &pe):
		return pe.Msg
	case errors.Is(err, errQueryBufferLimit):
		return "qbuf"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "eof"
	}
	return err.Error()
}

// FuzzReader: the reader never panics, and the bytes split at any offset
// (or trickled a byte at a time) give the same commands and error.
func FuzzReader(f *testing.F) {
	for _, s := range []string{
		"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n",
		"PING\r\nSET \"a\\x41\" 'b\\'c'\r\n",
		"*1\r\n$5\r\nhello\r\n*0\r\n*-1\r\n\r\n",
		"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$40\r\n0123456789012345678901234567890123456789\r\n",
		"*1\r\n$99999999999999999999\r\n",
		"SET \"abc\r\n",
		"*2\r\n:1\r\n",
	} {
		f.Add([]byte(s), uint16(3))
	}
	lim := Limits{MaxBulkLen: 1 << 20, MaxArgLen: 32, MaxMultibulkLen: 64, MaxInlineLen: 100, QueryBufferLimit: 1 << 10}
	f.Fuzz(func(t *testing.T, data []byte, split uint16) {
		want, werr := readAll(bytes.NewReader(data), lim)
		at := int(split) % (len(data) + 1)
		got, gerr := readAll(io.MultiReader(bytes.NewReader(data[:at]), bytes.NewReader(data[at:])), lim)
		if fmt.Sprint(got) != fmt.Sprint(want) || errKind(gerr) != errKind(werr) {
			t.Fatalf("split at %d: %v %v, whole: %v %v", at, got, gerr, want, werr)
		}
		got, gerr = readAll(iotest.OneByteReader(bytes.NewReader(data)), lim)
		if fmt.Sprint(got) != fmt.Sprint(want) || errKind(gerr) != errKind(werr) {
			t.Fatalf("one byte at a time: %v %v, whole: %v %v", got, gerr, want, werr)
		}
	})
}

func TestSplitArgs(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string
		ok   bool
	}{
		{`a b  c`, `["a" "b" "c"]`, true},
		{`"a b" 'c d'`, `["a b" "c d"]`, true},
		{`"\x41\n" ''`, `["A\n" ""]`, true},
		{`'it\'s'`, `["it's"]`, true},
		{`"abc`, ``, false},
		{`"a"b`, ``, false},
		{`'a'b`, ``, false},
		// Vertical tab and form feed separate arguments only where
		// sdssplitargs skips isspace: before one, and after a quote.
		{"a\vb c\fd", `["a\vb" "c\fd"]`, true},
		{"\v\fa \v b", `["a" "b"]`, true},
		{"\"a\"\v'b'\f", `["a" "b"]`, true},
	} {
		args, ok := splitArgs([]byte(c.in))
		if ok != c.ok || (ok && fmt.Sprintf("%q", args) != c.want) {
			t.Errorf("splitArgs(%s) = %q %v", c.in, args, ok)
		}
	}
}

// TestMaxBulkLenCapped: a configured proto-max-bulk-len above the
// engine's 1 GiB value limit is taken as 1 GiB.
func TestMaxBulkLenCapped(t *testing.T) {
	ts := startServer(t, Config{Limits: Limits{MaxBulkLen: 4 << 30}})
	r := ts.raw(t)
	r.cmd("CONFIG", "GET", "proto-max-bulk-len")
	r.expect("*2\r\n$18\r\nproto-max-bulk-len\r\n$10\r\n1073741824\r\n")
	r.send("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1073741825\r\n")
	r.expect("-ERR Protocol error: invalid bulk length\r\n")
	r.expectClosed()
}

// TestSetRangeHugeOffset: an offset near the largest int64 plus the value's
// length overflows; it is refused as Redis refuses it, on a missing key and
// an existing one, and the server goes on.
func TestSetRangeHugeOffset(t *testing.T) {
	ts := startServer(t, Config{})
	r := ts.raw(t)
	r.cmd("SET", "k", "abc")
	r.expect("+OK\r\n")
	for _, c := range [][]string{
		{"SETRANGE", "fresh", "9223372036854775807", "x"},
		{"SETRANGE", "k", "9223372036854775807", "x"},
		{"SETRANGE", "fresh", "9223372036854775800", strings.Repeat("y", 42)},
		{"SETRANGE", "k", "536870912", "x"},
		{"APPEND", "k", "x"}, // still works
	} {
		r.cmd(c...)
		if c[0] == "APPEND" {
			r.expect(":4\r\n")
			continue
		}
		r.expect("-ERR string exceeds maximum allowed size (proto-max-bulk-len)\r\n")
	}
	r.cmd("EXISTS", "fresh")
	r.expect(":0\r\n")
}
