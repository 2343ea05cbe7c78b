package server

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"mvkv/engine"
	"mvkv/vfs"
)

// mkdirGateFS is the OS whose MkdirAll of dir signals entered and waits for
// release: a BACKUP held after its checkpoint, before it copies anything.
type mkdirGateFS struct {
	vfs.OS
	dir              string
	entered, release chan struct{}
}

func (f mkdirGateFS) MkdirAll(name string) error {
	if name == f.dir {
		close(f.entered)
		<-f.release
	}
	return f.OS.MkdirAll(name)
}

// connOf asks r's connection its CLIENT ID and returns the server's
// connection of that id, and the id.
func (ts *testServer) connOf(t *testing.T, r *raw) (*conn, string) {
	t.Helper()
	r.cmd("CLIENT", "ID")
	id := strings.TrimSuffix(strings.TrimPrefix(r.reply(), ":"), "\r\n")
	ts.s.mu.Lock()
	defer ts.s.mu.Unlock()
	for c := range ts.s.conns {
		if strconv.FormatUint(c.id, 10) == id {
			return c, id
		}
	}
	t.Fatalf("no connection with id %s", id)
	return nil, ""
}

// waitGone waits until c's client is taken as gone (conn.gone ended).
func waitGone(t *testing.T, c *conn) {
	t.Helper()
	select {
	case <-c.gone.Done():
	case <-time.After(time.Minute):
		t.Fatal("the server did not see the client go away within a minute")
	}
}

// TestBackupStopsWhenClientGoes: a BACKUP whose client closes its
// connection, or is killed with CLIENT KILL, while the copy is under way
// stops instead of running to its end, leaves neither the target nor its
// .partial directory, and is logged.
func TestBackupStopsWhenClientGoes(t *testing.T) {
	for _, how := range []string{"close", "kill"} {
		t.Run(how, func(t *testing.T) {
			target := filepath.Join(t.TempDir(), "bk")
			gate := mkdirGateFS{dir: target + ".partial", entered: make(chan struct{}), release: make(chan struct{})}
			released := false
			let := func() {
				if !released {
					released = true
					close(gate.release)
				}
			}
			defer let()
			var logs logBuffer
			ts := startServerOn(t, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))}, engine.Options{FS: gate})
			r := ts.raw(t)
			r.cmd("SET", "k", "v")
			r.reply()
			c, id := ts.connOf(t, r)
			r.cmd("BACKUP", target)
			<-gate.entered
			if how == "close" {
				r.nc.Close()
			} else {
				k := ts.raw(t)
				k.cmd("CLIENT", "KILL", "ID", id)
				if got := k.reply(); got != ":1\r\n" {
					t.Fatalf("CLIENT KILL ID %s: %q", id, got)
				}
			}
			waitGone(t, c)
			let()
			// Shutdown waits for the BACKUP's connection to end.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := ts.s.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			for _, d := range []string{target, target + ".partial"} {
				if _, err := os.Stat(d); !os.IsNotExist(err) {
					t.Errorf("%s after a BACKUP whose client went away: %v; want it absent (the backup stopped)", d, err)
				}
			}
			if !strings.Contains(logs.String(), "BACKUP stopped: its client went away") {
				t.Errorf("no log line for the stopped BACKUP:\n%s", logs.String())
			}
		})
	}
}

// TestLongReadsStopWhenClientGoes: KEYS, SCAN with a large COUNT, DBSIZE
// and INFO keyspace, whose client goes away while they read the keys,
// stop (counted as failed calls in INFO commandstats), where they read
// every key for nobody. The client goes away at the scan's first look
// (testGoneCheck), so the test does not race the scan.
func TestLongReadsStopWhenClientGoes(t *testing.T) {
	ts := startServer(t, Config{})
	check := ts.raw(t)
	for i := 0; i < 3000; i += 500 {
		args := []string{"MSET"}
		for j := i; j < i+500; j++ {
			args = append(args, "key:"+strconv.Itoa(j), "v")
		}
		check.cmd(args...)
		check.reply()
	}
	for _, req := range [][]string{
		{"KEYS", "*"},
		{"SCAN", "0", "COUNT", "100000"},
		{"DBSIZE"},
		{"INFO", "keyspace"},
	} {
		name := strings.ToLower(req[0])
		// A write since the last count makes DBSIZE and INFO count
		// again rather than answer the count they keep.
		check.cmd("SET", "bump", name)
		check.reply()
		r := ts.raw(t)
		c, _ := ts.connOf(t, r)
		looks := 0
		hook := func() {
			if looks++; looks == 1 {
				r.nc.Close()
				waitGone(t, c)
			}
		}
		ts.s.testGoneCheck.Store(&hook)
		r.cmd(req...)
		waitServed(t, ts, c)
		ts.s.testGoneCheck.Store(nil)
		if looks != 1 {
			t.Errorf("%s: %d looks at the client after it went away, want 1 (the scan stops there)", req, looks)
		}
		line := check.info("commandstats", "cmdstat_"+name)
		if !strings.Contains(line, "failed_calls=1") {
			t.Errorf("%s whose client went away: cmdstat_%s %s, want failed_calls=1 (stopped)", req, name, line)
		}
	}
}

// TestFlushAllRunsOnWhenClientGoes: FLUSHALL, a write, runs to its end
// when its client closes the connection right after sending it, as Redis
// runs every command it has read: one transaction, every key gone.
func TestFlushAllRunsOnWhenClientGoes(t *testing.T) {
	ts := startServer(t, Config{})
	check := ts.raw(t)
	args := []string{"MSET"}
	for j := range 3000 {
		args = append(args, "key:"+strconv.Itoa(j), "v")
	}
	check.cmd(args...)
	check.reply()
	r := ts.raw(t)
	c, _ := ts.connOf(t, r)
	r.cmd("FLUSHALL")
	r.nc.Close()
	waitServed(t, ts, c)
	check.cmd("DBSIZE")
	if got := check.reply(); got != ":0\r\n" {
		t.Fatalf("DBSIZE after a FLUSHALL whose client left at once: %q, want :0", got)
	}
}

// waitServed waits until the server has stopped serving c.
func waitServed(t *testing.T, ts *testServer, c *conn) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ts.s.mu.Lock()
		_, ok := ts.s.conns[c]
		ts.s.mu.Unlock()
		if !ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the connection was still served a minute after its client went away")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestExecRunsOnWhenClientKilled: an EXEC block that writes and then
// reads every key (KEYS, a SCAN of many keys) runs to its end when CLIENT
// KILL closes its connection while it reads, as FLUSHALL does and as Redis
// runs every command it has read: the block is one transaction, and its
// writes are carried out although nobody reads the reply.
func TestExecRunsOnWhenClientKilled(t *testing.T) {
	ts := startServer(t, Config{})
	check := ts.raw(t)
	args := []string{"MSET"}
	for j := range 3000 {
		args = append(args, "key:"+strconv.Itoa(j), "v")
	}
	check.cmd(args...)
	check.reply()
	for _, read := range [][]string{{"KEYS", "*"}, {"SCAN", "0", "COUNT", "100000"}} {
		name := strings.ToLower(read[0])
		r := ts.raw(t)
		c, id := ts.connOf(t, r)
		for _, cmd := range [][]string{{"MULTI"}, {"SET", "written", name}, read} {
			r.cmd(cmd...)
			r.reply()
		}
		looks := 0
		hook := func() {
			if looks++; looks == 1 {
				check.cmd("CLIENT", "KILL", "ID", id)
				if got := check.reply(); got != ":1\r\n" {
					t.Errorf("CLIENT KILL ID %s: %q", id, got)
				}
				waitGone(t, c)
			}
		}
		ts.s.testGoneCheck.Store(&hook)
		r.cmd("EXEC")
		waitServed(t, ts, c)
		ts.s.testGoneCheck.Store(nil)
		if looks == 0 {
			t.Fatalf("%s in EXEC: no look at the client, so no kill during the block: the test does not test the case", read)
		}
		check.cmd("GET", "written")
		if got := check.reply(); got != "$"+strconv.Itoa(len(name))+"\r\n"+name+"\r\n" {
			t.Errorf("GET written after an EXEC whose client was killed during its %s: %q, want %q (the block's SET carried out)", read[0], got, name)
		}
	}
}

// TestCountWaitStopsWhenClientGoes: a DBSIZE or INFO keyspace that waits
// for another client's count of the keyspace stops waiting when its own
// client goes away, rather than when that count ends.
func TestCountWaitStopsWhenClientGoes(t *testing.T) {
	ts := startServer(t, Config{})
	check := ts.raw(t)
	for _, req := range [][]string{{"DBSIZE"}, {"INFO", "keyspace"}} {
		name := strings.ToLower(req[0])
		check.cmd("SET", "bump", name)
		check.reply()
		r := ts.raw(t)
		c, _ := ts.connOf(t, r)
		// Another count under way: this one waits for it.
		ts.s.lockKeyspace()
		r.cmd(req...)
		deadline := time.Now().Add(time.Minute)
		for {
			c.mu.Lock()
			running := c.lastCmd == name
			c.mu.Unlock()
			if running {
				break
			}
			if time.Now().After(deadline) {
				ts.s.unlockKeyspace()
				t.Fatalf("%s did not start within a minute", req)
			}
			time.Sleep(time.Millisecond)
		}
		r.nc.Close()
		waitGone(t, c)
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
			ts.s.mu.Lock()
			_, serving := ts.s.conns[c]
			ts.s.mu.Unlock()
			if !serving {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("%s whose client went away still waits for another's count after a minute", req)
				break
			}
		}
		ts.s.unlockKeyspace()
		waitServed(t, ts, c)
		line := check.info("commandstats", "cmdstat_"+name)
		if !strings.Contains(line, "failed_calls=1") {
			t.Errorf("%s whose client went away: cmdstat_%s %s, want failed_calls=1 (stopped)", req, name, line)
		}
	}
}
