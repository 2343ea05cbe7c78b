package server

import (
	"bufio"
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"mvkv/engine"
)

// remoteListener accepts loopback connections but reports each client as
// coming from 192.0.2.7, as one from another host would.
type remoteListener struct{ net.Listener }

type remoteConn struct{ net.Conn }

func (remoteConn) RemoteAddr() net.Addr {
	return &net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 4242}
}

func (l remoteListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return remoteConn{c}, nil
}

// TestProtectedMode: with no password, a client from another host gets
// Redis's DENIED error and is disconnected; a loopback one is served;
// with a password, or protected mode off, the remote one is served.
func TestProtectedMode(t *testing.T) {
	for _, c := range []struct {
		name   string
		cfg    Config
		denied bool
	}{
		{"default", Config{}, true},
		{"password", Config{RequirePass: "pw"}, false},
		{"off", Config{ProtectedModeOff: true}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			db, err := engine.Open(t.TempDir(), engine.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			s := New(db, c.cfg)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- s.Serve(context.Background(), remoteListener{ln}) }()
			defer func() {
				s.Shutdown(context.Background())
				if err := <-done; !errors.Is(err, ErrServerClosed) {
					t.Error(err)
				}
			}()
			nc, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			nc.SetDeadline(time.Now().Add(5 * time.Second))
			nc.Write([]byte("PING\r\n"))
			line, err := bufio.NewReader(nc).ReadString('\n')
			if c.denied {
				if !strings.HasPrefix(line, "-DENIED Redis is running in protected mode because protected mode is enabled and no password is set for the default user.") {
					t.Fatalf("reply %q, %v", line, err)
				}
				if _, err := bufio.NewReader(nc).ReadString('\n'); err == nil {
					t.Fatal("connection still open after DENIED")
				}
				return
			}
			want := "+PONG\r\n"
			if c.cfg.RequirePass != "" {
				want = "-NOAUTH Authentication required.\r\n"
			}
			if line != want {
				t.Fatalf("reply %q, %v; want %q", line, err, want)
			}
		})
	}
	// A loopback client is served with protected mode on.
	ts := startServer(t, Config{})
	r := ts.raw(t)
	r.cmd("PING")
	r.expect("+PONG\r\n")
	r.cmd("CONFIG", "GET", "protected-mode")
	r.expect("*2\r\n$14\r\nprotected-mode\r\n$3\r\nyes\r\n")
}
