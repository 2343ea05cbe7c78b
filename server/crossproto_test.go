package server

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// logBuffer collects a server's log for a test.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// expectEOF checks the server closed the connection without sending
// anything more.
func (r *raw) expectEOF() {
	r.t.Helper()
	r.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(r.br)
	if errors.Is(err, syscall.ECONNRESET) {
		err = nil
	}
	if err != nil || len(b) > 0 {
		r.t.Fatalf("read %q, %v; want the connection closed without a reply", b, err)
	}
}

// crossProtoCloses is the server's count of connections closed for
// sending POST or Host:, as its Prometheus registry reports it.
func crossProtoCloses(t *testing.T, s *Server) float64 {
	t.Helper()
	mfs, err := s.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "mvkv_server_cross_protocol_closes_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("no mvkv_server_cross_protocol_closes_total")
	return 0
}

// TestCrossProtocolScripting: an HTTP request sent to the server, whose
// request line and headers arrive as inline commands, closes the
// connection at its POST or Host: line, in any case, without a reply and
// without running the body that follows, whatever state the connection is
// in; the first such close is logged with the client's address and every
// one is counted.
func TestCrossProtocolScripting(t *testing.T) {
	var logs logBuffer
	ts := startServer(t, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	check := ts.raw(t)
	for i, c := range []struct {
		name, send string
		reply      string // replies before the close
	}{
		{"post", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 24\r\n\r\nSET pwned 1\r\n", ""},
		{"host", "GET / HTTP/1.1\r\nhost: x\r\n\r\nSET pwned 1\r\n", "-ERR wrong number of arguments for 'get' command\r\n"},
		{"HOST", "PUT / HTTP/1.1\r\nHOST: x\r\n\r\nSET pwned 1\r\n", "-ERR unknown command 'PUT', with args beginning with: '/' 'HTTP/1.1' \r\n"},
		{"pOsT", "pOsT\r\nSET pwned 1\r\n", ""},
		{"multibulk", "*2\r\n$4\r\nPOST\r\n$1\r\n/\r\n*3\r\n$3\r\nSET\r\n$5\r\npwned\r\n$1\r\n1\r\n", ""},
		{"after", "SET before 1\r\nPOST / HTTP/1.1\r\nSET pwned 1\r\n", "+OK\r\n"},
		{"multi", "MULTI\r\nSET pwned 1\r\nHost: x\r\nEXEC\r\n", "+OK\r\n+QUEUED\r\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := ts.raw(t)
			addr := r.nc.LocalAddr().String()
			r.send(c.send)
			for range strings.Count(c.reply, "\r\n") {
				r.reply()
			}
			r.expectEOF()
			check.cmd("EXISTS", "pwned")
			check.expect(":0\r\n")
			if got := crossProtoCloses(t, ts.s); got != float64(i+1) {
				t.Errorf("mvkv_server_cross_protocol_closes_total %v, want %d", got, i+1)
			}
			// Logged once a minute at most: the first close only.
			if i == 0 && !strings.Contains(logs.String(), "addr="+addr) {
				t.Errorf("log %q does not name the client %s", logs.String(), addr)
			}
		})
	}
	if n := strings.Count(logs.String(), "possible security attack"); n != 1 {
		t.Errorf("%d warnings logged, want 1:\n%s", n, logs.String())
	}
	check.cmd("EXISTS", "before")
	check.expect(":1\r\n")
	// Words that only begin like them are commands as any other.
	check.send("POSTS\r\nHost:x\r\nHOSTS: x\r\nPING\r\n")
	check.expect("-ERR unknown command 'POSTS', with args beginning with: \r\n")
	check.expect("-ERR unknown command 'Host:x', with args beginning with: \r\n")
	check.expect("-ERR unknown command 'HOSTS:', with args beginning with: 'x' \r\n")
	check.expect("+PONG\r\n")
}

// TestCrossProtocolBeforeAuth: with a password set, a client that has not
// authenticated is closed at POST too, rather than answered NOAUTH.
func TestCrossProtocolBeforeAuth(t *testing.T) {
	ts := startServer(t, Config{RequirePass: "pw"})
	r := ts.raw(t)
	r.send("PING\r\nPOST / HTTP/1.1\r\nAUTH pw\r\n")
	r.expect("-NOAUTH Authentication required.\r\n")
	r.expectEOF()
}
