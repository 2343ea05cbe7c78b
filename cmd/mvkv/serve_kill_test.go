package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"

	"mvkv/engine"
	"mvkv/vfs"
)

// serveChildEnv, when set, makes the test binary run `mvkv serve` with the
// arguments it holds (separated by 0x1F bytes) instead of the tests, so a
// test can SIGKILL or SIGTERM a real server process.
const serveChildEnv = "MVKV_SERVE_CHILD"

func TestMain(m *testing.M) {
	if a, ok := os.LookupEnv(serveChildEnv); ok {
		if os.Getenv(openGateEnv) != "" {
			testOpenFS = func(ctx context.Context) vfs.FS { return &openGateFS{ctx: ctx} }
		}
		os.Exit(serveMain(strings.Split(a, "\x1f"), os.Stdout, os.Stderr))
	}
	if _, ok := os.LookupEnv(signalChildEnv); ok {
		signalChild()
	}
	os.Exit(m.Run())
}

// serveChild is `mvkv serve` in a child process.
type serveChild struct {
	cmd    *exec.Cmd
	addr   string
	stderr *strings.Builder
}

func startServeChild(t *testing.T, dir string) *serveChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serveChildEnv+"="+strings.Join([]string{"--dir", dir, "--listen", "127.0.0.1:0"}, "\x1f"))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &serveChild{cmd: cmd, stderr: &strings.Builder{}}
	cmd.Stderr = c.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), "ready to accept connections on "); ok {
			c.addr = a
			break
		}
	}
	if c.addr == "" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("mvkv serve did not start\n%s", c.stderr)
	}
	go func() {
		for sc.Scan() {
		}
	}()
	return c
}

// TestServeKill SIGKILLs `mvkv serve` while clients write, pipelined and
// not, and checks after a restart that every acknowledged write is there;
// then sends the restarted server SIGHUP, which it ignores, and stops it
// with SIGTERM, which must exit cleanly.
func TestServeKill(t *testing.T) {
	dir := t.TempDir()
	srv := startServeChild(t, dir)
	ctx := context.Background()
	const clients = 4
	var (
		mu      sync.Mutex
		ackSeq  [clients]int // highest k:<client>:<seq> acknowledged (all below too)
		ackIncr [clients]int // INCR ctr:<client> acknowledged
		total   atomic.Int64
		wg      sync.WaitGroup
	)
	killed := make(chan struct{})
	var killOnce sync.Once // two clients may reach the total at once
	for g := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := redis.NewClient(&redis.Options{Addr: srv.addr, PoolSize: 1, MaxRetries: -1})
			defer c.Close()
			next := 1 // the next k:<client>:<seq> to set
			for round := 0; ; round++ {
				select {
				case <-killed:
					return
				default:
				}
				// Even rounds: a pipeline of eight SETs and an INCR;
				// odd rounds: one INCR.
				n := 0
				_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
					if round%2 == 0 {
						for i := range 8 {
							p.Set(ctx, fmt.Sprintf("k:%d:%d", g, next+i), strconv.Itoa(next+i), 0)
						}
						n = 8
					}
					p.Incr(ctx, fmt.Sprintf("ctr:%d", g))
					return nil
				})
				if err != nil {
					return
				}
				mu.Lock()
				if n > 0 {
					ackSeq[g] = next + n - 1
				}
				ackIncr[g]++
				mu.Unlock()
				next += n
				if total.Add(int64(n+1)) >= 600 {
					killOnce.Do(func() { close(killed) })
				}
			}
		}()
	}
	<-killed
	if err := srv.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	srv.cmd.Wait()
	wg.Wait()

	srv = startServeChild(t, dir)
	c := redis.NewClient(&redis.Options{Addr: srv.addr})
	defer c.Close()
	mu.Lock()
	defer mu.Unlock()
	for g := range clients {
		for seq := 1; seq <= ackSeq[g]; seq++ {
			k := fmt.Sprintf("k:%d:%d", g, seq)
			if v, err := c.Get(ctx, k).Result(); err != nil || v != strconv.Itoa(seq) {
				t.Errorf("acknowledged %s = %q (%v) after SIGKILL", k, v, err)
			}
		}
		n, err := c.Get(ctx, fmt.Sprintf("ctr:%d", g)).Int()
		if err != nil || n < ackIncr[g] {
			t.Errorf("ctr:%d = %d (%v) after SIGKILL; %d increments were acknowledged", g, n, err, ackIncr[g])
		}
	}
	// SIGHUP (a closed terminal) is ignored, as by redis-server: the
	// server still answers afterwards.
	if err := srv.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "after-hup", "1", 0).Err(); err != nil {
		t.Fatalf("SET after SIGHUP: %v\n%s", err, srv.stderr)
	}
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := srv.cmd.Wait(); err != nil {
		t.Fatalf("mvkv serve after SIGTERM: %v\n%s", err, srv.stderr)
	}
	if !strings.Contains(srv.stderr.String(), "server shut down") {
		t.Errorf("no graceful shutdown logged after SIGTERM:\n%s", srv.stderr)
	}
}

// TestServeShutdownFreesDirectory: once a client's SHUTDOWN has returned
// (its connection closed, as redis-cli waits for), the server process has
// closed the data directory: another process opens it at once, as a
// restart or `mvkv verify` in the next line of a script would, and finds
// every write.
func TestServeShutdownFreesDirectory(t *testing.T) {
	dir := t.TempDir()
	for round := range 3 {
		srv := startServeChild(t, dir)
		c := redis.NewClient(&redis.Options{Addr: srv.addr, PoolSize: 1, MaxRetries: -1})
		ctx := context.Background()
		if err := c.Set(ctx, fmt.Sprint("k", round), "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		c.Shutdown(ctx) // returns when the server closes the connection
		c.Close()
		db, err := engine.Open(dir, engine.Options{})
		if err != nil {
			srv.cmd.Wait()
			t.Fatalf("round %d: open right after SHUTDOWN returned: %v\n%s", round, err, srv.stderr)
		}
		if err := db.View(ctx, func(tx *engine.Txn) error {
			for r := range round + 1 {
				if _, err := tx.Get(fmt.Append(nil, "k", r)); err != nil {
					return fmt.Errorf("k%d: %w", r, err)
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		if err := srv.cmd.Wait(); err != nil {
			t.Fatalf("round %d: mvkv serve: %v\n%s", round, err, srv.stderr)
		}
	}
}

// openGateEnv, set beside serveChildEnv, makes the child's data directory
// open on openGateFS.
const openGateEnv = "MVKV_SERVE_OPEN_GATE"

// openGateFS is the OS whose first opening of a WAL segment for reading,
// which recovery's first pass makes, prints "open gate" to stderr and
// waits for ctx, serve's signal context: an open held until a signal.
type openGateFS struct {
	vfs.OS
	ctx  context.Context
	once sync.Once
}

func (f *openGateFS) OpenReadOnly(name string) (vfs.File, error) {
	if strings.Contains(name, "/wal/") {
		f.once.Do(func() {
			fmt.Fprintln(os.Stderr, "open gate")
			<-f.ctx.Done()
		})
	}
	return f.OS.OpenReadOnly(name)
}

// TestServeSignalWhileOpening: SIGTERM, and SIGINT, while mvkv serve is
// still recovering its data directory stop the recovery where it is: the
// process exits 0 without having served, saying so, and the directory
// opens afterwards with every key.
func TestServeSignalWhileOpening(t *testing.T) {
	dir := t.TempDir()
	db, err := engine.Open(dir, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if err := db.Update(context.Background(), func(tx *engine.Txn) error {
			return tx.Put(fmt.Append(nil, "k", i), []byte("v"))
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), openGateEnv+"=1",
			serveChildEnv+"="+strings.Join([]string{"--dir", dir, "--listen", "127.0.0.1:0"}, "\x1f"))
		var stdout strings.Builder
		cmd.Stdout = &stdout
		errPipe, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		sc := bufio.NewScanner(errPipe)
		gated := false
		for !gated && sc.Scan() {
			stderr.WriteString(sc.Text() + "\n")
			gated = sc.Text() == "open gate"
		}
		if !gated {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("%v: the child never reached the open gate\n%s", sig, stderr.String())
		}
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		for sc.Scan() {
			stderr.WriteString(sc.Text() + "\n")
		}
		err = cmd.Wait()
		if err != nil {
			t.Errorf("%v while opening: %v, want exit status 0\n%s", sig, err, stderr.String())
		}
		if strings.Contains(stdout.String(), "ready to accept") || !strings.Contains(stderr.String(), "stopped by a signal while opening") {
			t.Errorf("%v while opening: the open went on to serve, or the stop was not said\nstdout: %s\nstderr: %s", sig, stdout.String(), stderr.String())
		}
	}
	db, err = engine.Open(dir, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.View(context.Background(), func(tx *engine.Txn) error {
		for i := range 100 {
			if _, err := tx.Get(fmt.Append(nil, "k", i)); err != nil {
				return fmt.Errorf("k%d: %w", i, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
