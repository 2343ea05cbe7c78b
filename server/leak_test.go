package server

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"mvkv/engine"
)

// TestAbusiveClientsLeakNothing: clients that close in the middle of a
// pipeline of thousands of mixed commands (blocks with queued errors,
// WATCH, expiry options, an unfinished request at the end), that close
// while their commits wait for the WAL flush, and that break the protocol
// in the middle of a pipeline, leave no goroutine behind, apply EXEC
// blocks whole or not at all, and run nothing sent after a protocol error.
func TestAbusiveClientsLeakNothing(t *testing.T) {
	g := newGateFS()
	ts := startServerOn(t, Config{}, engine.Options{FS: g})
	defer g.open() // before the cleanup's shutdown checkpoint
	check := ts.raw(t)
	check.cmd("PING")
	check.expect("+PONG\r\n")
	base := runtime.NumGoroutine()

	// Commits held at the WAL flush when their clients go away.
	g.shut()
	before := ts.db.Stats()
	var held []net.Conn
	for i := range 8 {
		nc, err := net.Dial("tcp", ts.addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, nc)
		fmt.Fprintf(nc, "SET held%d v\r\nMULTI\r\nINCR hx%d\r\nINCR hy%d\r\nEXEC\r\n", i, i, i)
	}
	waitCommitInFlight(t, ts, g, before)
	for _, nc := range held {
		nc.Close()
	}
	g.open()

	// Pipelines closed part way, each client after reading a different
	// number of replies (0 for the first: it never reads).
	const clients, rounds = 12, 150
	var wg sync.WaitGroup
	for i := range clients {
		nc, err := net.Dial("tcp", ts.addr)
		if err != nil {
			t.Fatal(err)
		}
		var p bytes.Buffer
		n := 0
		for range rounds {
			fmt.Fprintf(&p, "INCR c%d\r\nMULTI\r\nINCR x%d\r\nINCR y%d\r\nEXEC\r\n", i, i, i)
			fmt.Fprintf(&p, "SET s%d v EX 100 GET\r\nGETEX s%d PX 100000\r\nWATCH x%d\r\nMULTI\r\nINCR x%d\r\nINCRBY y%d 1\r\nEXEC\r\n", i, i, i, i, i)
			fmt.Fprintf(&p, "MULTI\r\nINCR x%d\r\nSET\r\nINCR y%d\r\nEXEC\r\n*3\r\n$3\r\nSET\r\n$2\r\nz%d\r\n$1\r\n1\r\nDEL nothing\r\nPING\r\n", i, i, i%3)
			n += 20
		}
		p.WriteString("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\nabc")
		stopAfter := i * n / clients
		wg.Add(2)
		go func() {
			defer wg.Done()
			// Fails once the reader below has closed the connection.
			nc.Write(p.Bytes())
		}()
		go func() {
			defer wg.Done()
			defer nc.Close()
			br := bufio.NewReader(nc)
			for range stopAfter {
				if _, err := br.ReadString('\n'); err != nil {
					t.Errorf("client %d: %v", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()

	// A protocol error in the middle of a pipeline: what follows it does
	// not run.
	for _, bad := range []string{"*-x\r\n", "*1\r\n$-2\r\n", "*1\r\n+x\r\n", "SET p \"2\r\n", "*1\n$4\r\n"} {
		r := ts.raw(t)
		r.send("SET p 1\r\n" + bad + "SET p 2\r\nSET p 3\r\n")
		r.expect("+OK\r\n")
		if got := r.reply(); !strings.HasPrefix(got, "-ERR Protocol error: ") {
			t.Errorf("%q: got %q", bad, got)
		}
		r.expectClosed()
		r.nc.Close()
	}

	// Every connection but check's has ended: the server's count of them
	// falls to 1 once their goroutines are done.
	waitFor(t, "connections to end", func() bool { return ts.s.clients.Load() == 1 })
	check.cmd("GET", "p")
	check.expect("$1\r\n1\r\n")
	for i := range clients {
		check.cmd("MGET", fmt.Sprintf("x%d", i), fmt.Sprintf("y%d", i))
		rep := check.reply()
		var x, y string
		if parts := strings.Split(rep, "\r\n"); len(parts) >= 5 {
			x, y = parts[2], parts[4]
		}
		if x != y {
			t.Errorf("client %d: x %q, y %q: an EXEC block applied in part", i, x, y)
		}
	}
	for i := range held {
		check.cmd("MGET", fmt.Sprintf("hx%d", i), fmt.Sprintf("hy%d", i))
		if rep := check.reply(); strings.Count(rep, "$-1") == 1 {
			t.Errorf("held client %d: %q: an EXEC block applied in part", i, rep)
		}
	}
	waitFor(t, "goroutines to end", func() bool { return runtime.NumGoroutine() <= base })
}

// waitFor waits for cond, failing the test with every goroutine's stack
// if it has not held within 20 seconds. The bound is only a guard: cond
// is expected to hold soon after the events the test caused.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("waiting for %s: gave up; goroutines:\n%s", what, buf)
		}
	}
}

// TestBlockedClientGoneEndsWait: a client that closes its connection while
// it is blocked in WAIT, or while CLIENT PAUSE holds its write, or that
// CLIENT KILL closes, is freed at once, as in Redis, and the held write does not run; a blocked client that
// stays gets the requests it sent meanwhile run after the wait.
func TestBlockedClientGoneEndsWait(t *testing.T) {
	ts := startServer(t, Config{})
	check := ts.raw(t)
	clients := func() string { return check.info("clients", "connected_clients") }

	// WAIT 1 0 waits forever for a replica.
	a := ts.raw(t)
	a.cmd("WAIT", "1", "0")
	waitFor(t, "the WAIT to block", func() bool { return check.info("clients", "blocked_clients") == "1" })
	a.nc.Close()
	waitFor(t, "the closed client in WAIT to be freed", func() bool { return clients() == "1" })
	if n := check.info("clients", "blocked_clients"); n != "0" {
		t.Fatalf("blocked_clients %s after the client in WAIT closed", n)
	}

	// CLIENT KILL of a client in WAIT closes its socket.
	k := ts.raw(t)
	k.cmd("CLIENT", "ID")
	kid := strings.TrimSuffix(strings.TrimPrefix(k.reply(), ":"), "\r\n")
	k.cmd("WAIT", "1", "0")
	waitFor(t, "the WAIT to block", func() bool { return check.info("clients", "blocked_clients") == "1" })
	check.cmd("CLIENT", "KILL", "ID", kid)
	check.expect(":1\r\n")
	k.expectClosed()
	waitFor(t, "the killed client in WAIT to be freed", func() bool { return clients() == "1" })

	// A write held by CLIENT PAUSE WRITE.
	check.cmd("CLIENT", "PAUSE", "1000000", "WRITE")
	check.expect("+OK\r\n")
	b := ts.raw(t)
	b.cmd("CLIENT", "ID")
	id := strings.TrimSuffix(strings.TrimPrefix(b.reply(), ":"), "\r\n")
	b.cmd("SET", "held", "1")
	waitFor(t, "the SET to be held", func() bool {
		check.cmd("CLIENT", "LIST", "ID", id)
		return strings.Contains(check.reply(), " cmd=set ")
	})
	b.nc.Close()
	waitFor(t, "the closed client held by the pause to be freed", func() bool { return clients() == "1" })
	check.cmd("CLIENT", "UNPAUSE")
	check.expect("+OK\r\n")
	check.cmd("GET", "held")
	check.expect("$-1\r\n")

	// A blocked client that sends more requests and stays.
	c := ts.raw(t)
	c.cmd("CLIENT", "ID")
	id = strings.TrimSuffix(strings.TrimPrefix(c.reply(), ":"), "\r\n")
	c.cmd("WAIT", "1", "0")
	waitFor(t, "the WAIT to block", func() bool { return check.info("clients", "blocked_clients") == "1" })
	c.cmd("SET", "after", "1")
	c.cmd("GET", "after")
	check.cmd("CLIENT", "UNBLOCK", id)
	check.expect(":1\r\n")
	c.expect(":0\r\n")
	c.expect("+OK\r\n")
	c.expect("$1\r\n1\r\n")
}
