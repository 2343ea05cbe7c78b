package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"mvkv/engine"
)

// servedProcess is `mvkv serve` running in this process.
type servedProcess struct {
	addr, metrics string
	tlsAddr       string // the --tls-port listener's address, if any
	exit          chan int
	stderr        *bytes.Buffer
}

func startServe(t *testing.T, dir string, extra ...string) *servedProcess {
	t.Helper()
	pr, pw := io.Pipe()
	p := &servedProcess{exit: make(chan int, 1), stderr: &bytes.Buffer{}}
	args := []string{"--dir", dir, "--metrics", "127.0.0.1:0"}
	if !slices.Contains(extra, "--port") && !slices.Contains(extra, "--bind") {
		args = append(args, "--listen", "127.0.0.1:0")
	}
	args = append(args, extra...)
	go func() {
		code := serveRun(context.Background(), args, pw, p.stderr)
		pw.Close()
		p.exit <- code
	}()
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		line := sc.Text()
		if a, ok := strings.CutPrefix(line, "metrics at http://"); ok {
			p.metrics = strings.TrimSuffix(a, "/metrics")
		}
		if a, ok := strings.CutPrefix(line, "ready to accept TLS connections on "); ok {
			p.tlsAddr = a
		}
		if a, ok := strings.CutPrefix(line, "ready to accept connections on "); ok {
			p.addr = a
			break
		}
	}
	if p.addr == "" {
		t.Fatalf("mvkv serve did not start: exit %d\n%s", <-p.exit, p.stderr)
	}
	go io.Copy(io.Discard, pr)
	return p
}

// shutdown sends SHUTDOWN and waits for serveRun to return.
func (p *servedProcess) shutdown(t *testing.T) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: p.addr, MaxRetries: -1})
	defer c.Close()
	c.Shutdown(context.Background())
	if code := <-p.exit; code != 0 {
		t.Fatalf("mvkv serve exited with %d\n%s", code, p.stderr)
	}
}

func TestServeUsage(t *testing.T) {
	var out, errb bytes.Buffer
	for _, h := range []string{"-h", "--help"} {
		out.Reset()
		errb.Reset()
		if code := run([]string{"serve", h}, &out, &errb); code != 0 || out.String() != serveUsage || errb.Len() != 0 {
			t.Fatalf("%s: exit %d, stdout %q, stderr %q", h, code, out.String(), errb.String())
		}
	}
	// A bad flag: the flag package's error and one hint line, no usage.
	out.Reset()
	errb.Reset()
	if code := run([]string{"serve", "--bogus"}, &out, &errb); code != 2 {
		t.Fatalf("--bogus: exit %d", code)
	}
	want := "mvkv serve: flag provided but not defined: --bogus\nTry \"mvkv serve --help\" for more information.\n"
	if out.Len() != 0 || errb.String() != want {
		t.Fatalf("--bogus: stdout %q, stderr %q, want stderr %q", out.String(), errb.String(), want)
	}
	for _, args := range [][]string{
		{"serve"},
		{"serve", "--dir", t.TempDir(), "--synchronous-commit", "maybe"},
		{"serve", "--dir", t.TempDir(), "--commit-delay", "-1"},
		{"serve", "--dir", t.TempDir(), "--wal-flusher", "fast"},
		{"serve", "--dir", t.TempDir(), "extra"},
		{"serve", "--dir", t.TempDir(), "--clog-locking", "none"},
		{"serve", "--dir", t.TempDir(), "--clog-group-update", "maybe"},
		{"serve", "--dir", t.TempDir(), "--wal-segment-size", "3MB"},
		{"serve", "--dir", t.TempDir(), "--max-wal-size", "1MB"},
		{"serve", "--dir", t.TempDir(), "--wal-writer-delay", "0"},
		{"serve", "--dir", t.TempDir(), "--autovacuum-naptime", "500ms"},
		{"serve", "--dir", t.TempDir(), "--autovacuum-naptime", "0"},
		{"serve", "--dir", t.TempDir(), "--autovacuum-vacuum-threshold", "-1"},
		{"serve", "--dir", t.TempDir(), "--autovacuum-vacuum-scale-factor", "-0.5"},
		{"serve", "--dir", t.TempDir(), "--autovacuum-vacuum-scale-factor", "101"},
		{"serve", "--dir", t.TempDir(), "--autovacuum-vacuum-scale-factor", "NaN"},
		{"serve", "--dir", t.TempDir(), "--vacuum-freeze-min-age", "-5"},
		{"serve", "--dir", t.TempDir(), "--vacuum-freeze-table-age", "3000000000"},
		{"serve", "--dir", t.TempDir(), "--listen", "127.0.0.1:0", "--port", "1"},
		{"serve", "--dir", t.TempDir(), "--port", "0"}, // TLS only, without --tls-port
		{"serve", "--dir", t.TempDir(), "--port", "70000"},
		{"serve", "--dir", t.TempDir(), "--port", "x"},
		{"serve", "--dir", t.TempDir(), "--listen", ""},
		{"serve", "--dir", t.TempDir(), "--bind", "127.0.0.1 ::1"},
	} {
		errb.Reset()
		if code := run(args, &out, &errb); code != 2 {
			t.Errorf("%q: exit %d, want 2 (%s)", args, code, errb.String())
		}
	}
	// A port out of range is the same usage error whichever flag gives
	// it, named with its flag, before the data directory is touched.
	for _, a := range [][]string{
		{"--port", "70000"},
		{"--listen", "127.0.0.1:70000"},
		{"--listen", "[::1]:65536"},
		{"--listen", "127.0.0.1:-1"},
		{"--listen", "127.0.0.1:http"},
		{"--listen", "127.0.0.1:notaport"},
		{"--listen", "127.0.0.1"},
	} {
		dir := filepath.Join(t.TempDir(), "data")
		errb.Reset()
		code := run(append([]string{"serve", "--dir", dir}, a...), &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), "invalid "+a[0]+" ") || !strings.Contains(errb.String(), "mvkv serve --help") {
			t.Errorf("serve %q: exit %d, %q; want 2 naming %s", a, code, errb.String(), a[0])
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("serve %q: the data directory was made (stat: %v)", a, err)
		}
	}
	// An empty --port or --bind, what an unset shell variable gives, is
	// refused as an empty --listen is, not taken for the default address;
	// so is Redis's '-' (an address that may be missing) with no address.
	// The --metrics address no listen takes makes a server that took it
	// so exit rather than serve.
	for _, a := range [][]string{{"--port", ""}, {"--bind", ""}, {"--bind", "-"}} {
		errb.Reset()
		code := run(append([]string{"serve", "--dir", t.TempDir(), "--metrics", "nowhere"}, a...), &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), "invalid "+a[0]+` "`+a[1]+`"`) {
			t.Errorf("serve %q: exit %d, %q; want 2 naming %s", a, code, errb.String(), a[0])
		}
	}
	// A mistyped value is named even when --dir is missing too.
	errb.Reset()
	if code := run([]string{"serve", "--port", "abc"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), `invalid --port "abc"`) {
		t.Errorf("serve --port abc: exit %d, %q; want 2 and the port named", code, errb.String())
	}
}

// TestServe runs the server, writes through go-redis, scrapes the metrics,
// shuts down with SHUTDOWN, and finds the data after a restart.
func TestServe(t *testing.T) {
	dir := t.TempDir()
	p := startServe(t, dir, "--commit-delay", "auto", "--commit-siblings", "0", "--wal-writer-delay", "50",
		"--checkpoint-timeout", "0", "--max-wal-size", "64", "--lock-timeout", "5000", "--transaction-buffers", "32",
		"--clog-locking", "global", "--clog-group-update", "off", "--wal-segment-size", "4MB",
		"--autovacuum-naptime", "90s", "--autovacuum-vacuum-threshold", "10", "--autovacuum-vacuum-scale-factor", "0.5")
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: p.addr})
	if err := c.Set(ctx, "persisted", "yes", 0).Err(); err != nil {
		t.Fatal(err)
	}
	c.Incr(ctx, "n")
	resp, err := http.Get("http://" + p.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`mvkv_commands_total{command="set"} 1`, "mvkv_wal_syncs_total", "mvkv_commits_per_sync", "mvkv_command_duration_seconds_bucket", "mvkv_connected_clients 1", "mvkv_deadlocks_total 0", "mvkv_lock_waits_total 0", "mvkv_lock_waiters 0"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if got := c.ConfigGet(ctx, "commit_delay").Val()["commit_delay"]; got != "auto" {
		t.Errorf("CONFIG GET commit_delay = %q", got)
	}
	if got := c.ConfigGet(ctx, "commit_siblings").Val()["commit_siblings"]; got != "0" {
		t.Errorf("CONFIG GET commit_siblings = %q after --commit-siblings 0", got)
	}
	c.Close()
	p.shutdown(t)

	p = startServe(t, dir)
	c = redis.NewClient(&redis.Options{Addr: p.addr})
	if got := c.Get(ctx, "persisted").Val(); got != "yes" {
		t.Fatalf("after restart: %q", got)
	}
	c.Close()
	p.shutdown(t)
}

// TestServeRedisTools drives mvkv serve with the real redis-cli and
// redis-benchmark (Debian's redis-tools).
func TestServeRedisTools(t *testing.T) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Skip("redis-cli not installed (apt-get install redis-tools)")
	}
	benchBin, err := exec.LookPath("redis-benchmark")
	if err != nil {
		t.Skip("redis-benchmark not installed (apt-get install redis-tools)")
	}
	p := startServe(t, t.TempDir())
	defer p.shutdown(t)
	host, port, _ := strings.Cut(p.addr, ":")
	redisCLI := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(cli, append([]string{"-h", host, "-p", port}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli %q: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"PING"}, "PONG"},
		{[]string{"SET", "greeting", "hello world"}, "OK"},
		{[]string{"GET", "greeting"}, "hello world"},
		{[]string{"INCRBY", "n", "5"}, "5"},
		{[]string{"GET", "missing"}, ""},
		{[]string{"MSET", "a", "1", "b", "2"}, "OK"},
		{[]string{"MGET", "a", "b", "c"}, "1\n2"},
		{[]string{"DEL", "a", "b"}, "2"},
		{[]string{"EXISTS", "greeting"}, "1"},
		{[]string{"CONFIG", "GET", "synchronous_commit"}, "synchronous_commit\non"},
		{[]string{"INCR", "greeting"}, "ERR value is not an integer or out of range"},
		{[]string{"CHECKPOINT"}, "OK"},
	} {
		if got := redisCLI(c.args...); got != c.want {
			t.Errorf("redis-cli %q: %q, want %q", c.args, got, c.want)
		}
	}
	if got := redisCLI("--scan", "--pattern", "gree*"); got != "greeting" {
		t.Errorf("redis-cli --scan: %q", got)
	}
	// A MULTI/EXEC block through redis-cli's stdin.
	cmd := exec.Command(cli, "-h", host, "-p", port)
	cmd.Stdin = strings.NewReader("MULTI\nINCR n\nINCR n\nEXEC\n")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "QUEUED") || !strings.HasSuffix(strings.TrimSpace(string(out)), "7") {
		t.Errorf("MULTI through redis-cli: %v\n%s", err, out)
	}

	bout, err := exec.Command(benchBin, "-h", host, "-p", port, "-t", "set,get,incr,mset",
		"-n", "20000", "-c", "8", "--csv").CombinedOutput()
	if err != nil {
		t.Fatalf("redis-benchmark: %v\n%s", err, bout)
	}
	// One CSV line per test; no errors reported.
	rows := 0
	for _, line := range strings.Split(string(bout), "\n") {
		if strings.HasPrefix(line, `"SET"`) || strings.HasPrefix(line, `"GET"`) || strings.HasPrefix(line, `"INCR"`) || strings.HasPrefix(line, `"MSET`) {
			rows++
		}
	}
	if rows != 4 || strings.Contains(string(bout), "ERR") {
		t.Fatalf("redis-benchmark output:\n%s", bout)
	}
	// Every INCR was applied: redis-benchmark increments counter:__rand_int__
	// keys; without -r all 20000 go to one key.
	c := redis.NewClient(&redis.Options{Addr: p.addr})
	defer c.Close()
	if got := c.Get(context.Background(), "counter:__rand_int__").Val(); got != fmt.Sprint(20000) {
		t.Errorf("counter after redis-benchmark: %q, want 20000", got)
	}
}

// TestServeDirIsFile checks the error for a --dir that is a regular file
// carries one "mvkv: " prefix.
func TestServeDirIsFile(t *testing.T) {
	f := filepath.Join(t.TempDir(), "afile")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := serveRun(context.Background(), []string{"--dir", f, "--listen", "127.0.0.1:0"}, &out, &errb); code != 1 {
		t.Fatalf("exit %d, want 1; stderr %q", code, errb.String())
	}
	if got := errb.String(); !strings.HasPrefix(got, "mvkv: ") || strings.Contains(got, "mvkv: mvkv:") || !strings.Contains(got, f) {
		t.Fatalf("stderr %q, want one line with one \"mvkv: \" prefix naming %s", got, f)
	}
}

// TestServeBadAddress checks that a busy --listen or --metrics
// address fails before the data directory is opened: the directory is not
// even created.
func TestServeBadAddress(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, args := range [][]string{
		{"--listen", busy.Addr().String()},
		{"--listen", "127.0.0.1:0", "--metrics", busy.Addr().String()},
	} {
		dir := filepath.Join(t.TempDir(), "data")
		var out, errb bytes.Buffer
		if code := serveRun(context.Background(), append([]string{"--dir", dir}, args...), &out, &errb); code != 1 {
			t.Errorf("%q: exit %d, want 1; stderr %q", args, code, errb.String())
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%q: the data directory was opened before the address was checked (stat: %v)", args, err)
		}
		if got := errb.String(); !strings.HasPrefix(got, "mvkv: ") || strings.Contains(got, "recovery") {
			t.Errorf("%q: stderr %q", args, got)
		}
	}
}

// TestAnswerLoading: while the database opens, a client's request gets
// Redis's LOADING error, and afterwards the listener accepts as before.
func TestAnswerLoading(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	stop := answerLoading(ln)
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		t.Fatal(err)
	}
	reply, err := io.ReadAll(c)
	c.Close()
	if err != nil || string(reply) != loadingReply {
		t.Fatalf("reply %q, %v; want %q", reply, err, loadingReply)
	}
	stop()
	accepted := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Close()
		}
		accepted <- err
	}()
	c, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := <-accepted; err != nil {
		t.Fatalf("accept after stop: %v", err)
	}
}

// serveFlagAccepted reports whether mvkv serve takes value for --name: a
// value it takes gets as far as the check for extra arguments.
func serveFlagAccepted(t *testing.T, name, value string) (bool, string) {
	t.Helper()
	var out, errb bytes.Buffer
	args := []string{"--dir", t.TempDir(), "--" + name + "=" + value, "extra"}
	if code := serveRun(context.Background(), args, &out, &errb); code != 2 {
		t.Fatalf("%q: exit %d, want 2\n%s", args, code, errb.String())
	}
	return strings.Contains(errb.String(), "too many command-line arguments"), errb.String()
}

// TestServeFlagsMatchConfigSet: a flag of mvkv serve that is also a CONFIG
// SET parameter takes exactly the values CONFIG SET takes, and refuses the
// others with exit status 2 and CONFIG SET's reason.
func TestServeFlagsMatchConfigSet(t *testing.T) {
	p := startServe(t, t.TempDir())
	defer p.shutdown(t)
	ctx := context.Background()
	// One connection, kept: maxclients 1 leaves it connected.
	c := redis.NewClient(&redis.Options{Addr: p.addr, PoolSize: 1, MaxRetries: -1})
	defer c.Close()
	type param struct {
		flag, config string
		values       []string
	}
	params := []param{
		{"maxclients", "maxclients", []string{"-1", "0", "1", "10000", "4294967295", "4294967296", "99999999999999999999", "0x10", "1_000", "ten", ""}},
		{"timeout", "timeout", []string{"-1", "0", "300", "2147483647", "2147483648", "0x10", "1_000", "ten", ""}},
		{"protected-mode", "protected-mode", []string{"yes", "no", "YES", "No", "maybe", ""}},
	}
	for _, s := range engine.Settings() {
		if !s.Runtime {
			continue
		}
		values := []string{s.Default, "-1", "bogus", ""}
		if s.Min != "" {
			values = append(values, s.Min)
		}
		if s.Max != "" {
			values = append(values, s.Max)
		}
		params = append(params, param{flagName(s), s.Name, values})
	}
	for _, pm := range params {
		for _, v := range pm.values {
			cerr := c.ConfigSet(ctx, pm.config, v).Err()
			if cerr != nil && !strings.Contains(cerr.Error(), "CONFIG SET failed") {
				t.Fatalf("CONFIG SET %s %q: %v", pm.config, v, cerr)
			}
			ok, stderr := serveFlagAccepted(t, pm.flag, v)
			if ok != (cerr == nil) {
				t.Errorf("--%s=%q accepted %v, CONFIG SET %s %q: %v\n%s", pm.flag, v, ok, pm.config, v, cerr, stderr)
				continue
			}
			if cerr != nil {
				_, reason, _ := strings.Cut(cerr.Error(), ") - ")
				if !strings.Contains(stderr, reason) || !strings.Contains(stderr, pm.flag) || !strings.Contains(stderr, v) {
					t.Errorf("--%s=%q: stderr %q does not name the flag, the value and CONFIG SET's reason %q", pm.flag, v, stderr, reason)
				}
			}
		}
	}
	// The server still answers on the connection kept.
	if err := c.ConfigSet(ctx, "maxclients", "10000").Err(); err != nil {
		t.Fatal(err)
	}
}

// TestServeBindAndPort checks redis-server's --bind and --port: each
// replaces its part of the default address, and --bind '*' is every IPv4
// address, which CONFIG GET bind calls '*'.
func TestServeBindAndPort(t *testing.T) {
	port := freePort(t)
	p := startServe(t, t.TempDir(), "--bind", "127.0.0.1", "--port", port)
	if p.addr != "127.0.0.1:"+port {
		t.Fatalf("listening on %q, want 127.0.0.1:%s", p.addr, port)
	}
	p.shutdown(t)
	port = freePort(t)
	p = startServe(t, t.TempDir(), "--bind", "*", "--port", port)
	if p.addr != "0.0.0.0:"+port {
		t.Fatalf("--bind '*': listening on %q, want 0.0.0.0:%s", p.addr, port)
	}
	p.addr = "127.0.0.1:" + port
	// CONFIG GET bind names it as Redis does.
	c := redis.NewClient(&redis.Options{Addr: p.addr})
	if got := c.ConfigGet(context.Background(), "bind").Val(); got["bind"] != "*" {
		t.Fatalf("--bind '*': CONFIG GET bind: %v, want *", got)
	}
	c.Close()
	p.shutdown(t)
}

// freePort returns a TCP port that was free on 127.0.0.1 a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}

// TestServeEnableBackupCommand: the flag takes Redis's three values of
// enable-debug-command, in any case, and refuses others naming them.
func TestServeEnableBackupCommand(t *testing.T) {
	for _, v := range []string{"local", "YES", "no"} {
		if ok, stderr := serveFlagAccepted(t, "enable-backup-command", v); !ok {
			t.Errorf("--enable-backup-command=%s refused: %s", v, stderr)
		}
	}
	if ok, stderr := serveFlagAccepted(t, "enable-backup-command", "maybe"); ok || !strings.Contains(stderr, "no, yes, local") {
		t.Errorf("--enable-backup-command=maybe: accepted %v, stderr %q", ok, stderr)
	}
}
