package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"mvkv/engine"
)

// TestNewCommandsGoRedis drives the string and keyspace commands through
// go-redis, as an application would; their exact replies are compared
// with redis-server's in TestRepliesMatchRedis.
func TestNewCommandsGoRedis(t *testing.T) {
	ts := startServer(t, Config{})
	ctx := context.Background()
	rdb := ts.client(t)
	check := func(what string, err error, got, want any) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got != want {
			t.Fatalf("%s: got %v, want %v", what, got, want)
		}
	}
	n, err := rdb.Append(ctx, "a", "hello").Result()
	check("APPEND", err, n, int64(5))
	n, err = rdb.StrLen(ctx, "a").Result()
	check("STRLEN", err, n, int64(5))
	ok, err := rdb.SetNX(ctx, "a", "x", 0).Result()
	check("SETNX", err, ok, false)
	s, err := rdb.Do(ctx, "SETEX", "e", "60", "v").Text()
	check("SETEX", err, s, "OK")
	s, err = rdb.Do(ctx, "GETSET", "e", "w").Text()
	check("GETSET", err, s, "v")
	s, err = rdb.GetEx(ctx, "e", time.Hour).Result()
	check("GETEX", err, s, "w")
	d, err := rdb.TTL(ctx, "e").Result()
	check("TTL after GETEX", err, d > 59*time.Minute, true)
	et, err := rdb.ExpireTime(ctx, "e").Result()
	check("EXPIRETIME", err, et > time.Duration(time.Now().Unix())*time.Second, true)
	s, err = rdb.GetDel(ctx, "e").Result()
	check("GETDEL", err, s, "w")
	s, err = rdb.GetRange(ctx, "a", 1, 3).Result()
	check("GETRANGE", err, s, "ell")
	n, err = rdb.SetRange(ctx, "a", 5, " world").Result()
	check("SETRANGE", err, n, int64(11))
	ok, err = rdb.MSetNX(ctx, "m1", "1", "m2", "2").Result()
	check("MSETNX", err, ok, true)
	f, err := rdb.IncrByFloat(ctx, "fl", 0.1).Result()
	check("INCRBYFLOAT", err, f, 0.1)
	f, err = rdb.IncrByFloat(ctx, "fl", 0.2).Result()
	check("INCRBYFLOAT", err, f, 0.3)
	rdb.Set(ctx, "l1", "ohmytext", 0)
	rdb.Set(ctx, "l2", "mynewtext", 0)
	lm, err := rdb.LCS(ctx, &redis.LCSQuery{Key1: "l1", Key2: "l2"}).Result()
	check("LCS", err, lm.MatchString, "mytext")
	lcs, err := rdb.LCS(ctx, &redis.LCSQuery{Key1: "l1", Key2: "l2", Idx: true, WithMatchLen: true}).Result()
	if err != nil || lcs.Matches == nil || lcs.Len != 6 || len(lcs.Matches) != 2 {
		t.Fatalf("LCS IDX: %+v, %v", lcs, err)
	}
	n, err = rdb.SetBit(ctx, "b", 7, 1).Result()
	check("SETBIT", err, n, int64(0))
	n, err = rdb.GetBit(ctx, "b", 7).Result()
	check("GETBIT", err, n, int64(1))
	n, err = rdb.BitCount(ctx, "a", nil).Result()
	check("BITCOUNT", err, n > 0, true)
	n, err = rdb.BitPos(ctx, "b", 1).Result()
	check("BITPOS", err, n, int64(7))
	n, err = rdb.BitOpOr(ctx, "bo", "b", "a").Result()
	check("BITOP", err, n, int64(11))
	ks, err := rdb.Keys(ctx, "m*").Result()
	check("KEYS", err, strings.Join(ks, ","), "m1,m2")
	s, err = rdb.Rename(ctx, "m1", "m3").Result()
	check("RENAME", err, s, "OK")
	ok, err = rdb.RenameNX(ctx, "m3", "m2").Result()
	check("RENAMENX", err, ok, false)
	n, err = rdb.Copy(ctx, "m3", "m4", 0, false).Result()
	check("COPY", err, n, int64(1))
	n, err = rdb.Unlink(ctx, "m4", "nosuch").Result()
	check("UNLINK", err, n, int64(1))
	n, err = rdb.Touch(ctx, "m3", "m2", "nosuch").Result()
	check("TOUCH", err, n, int64(2))
	s, err = rdb.RandomKey(ctx).Result()
	check("RANDOMKEY", err, s != "", true)
	s, err = rdb.ObjectEncoding(ctx, "m3").Result()
	check("OBJECT ENCODING", err, s, "int")
	n, err = rdb.MemoryUsage(ctx, "a").Result()
	check("MEMORY USAGE", err, n > 11, true)
	tm, err := rdb.Time(ctx).Result()
	check("TIME", err, time.Since(tm).Abs() < time.Minute, true)
	s, err = rdb.Save(ctx).Result()
	check("SAVE", err, s, "OK")
	ls, err := rdb.LastSave(ctx).Result()
	check("LASTSAVE", err, time.Since(time.Unix(ls, 0)) < time.Minute, true)
	s, err = rdb.BgSave(ctx).Result()
	check("BGSAVE", err, s, "Background saving started")
	n, err = rdb.Wait(ctx, 0, 0).Result()
	check("WAIT", err, n, int64(0))
	s, err = rdb.FlushDB(ctx).Result()
	check("FLUSHDB", err, s, "OK")
	n, err = rdb.DBSize(ctx).Result()
	check("DBSIZE", err, n, int64(0))
	if _, err := rdb.Get(ctx, "a").Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET after FLUSHDB: %v", err)
	}
}

// TestRedisCLI runs some of the new commands through redis-cli.
func TestRedisCLI(t *testing.T) {
	bin, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Skip("redis-cli not installed")
	}
	ts := startServer(t, Config{})
	_, port, _ := net.SplitHostPort(ts.addr)
	cli := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(bin, append([]string{"-p", port}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli %v: %v: %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	cli("MSET", "l1", "ohmytext", "l2", "mynewtext")
	if got := cli("LCS", "l1", "l2", "LEN"); got != "6" {
		t.Fatalf("LCS LEN: %q", got)
	}
	if got := cli("APPEND", "l1", "!"); got != "9" {
		t.Fatalf("APPEND: %q", got)
	}
	if got := cli("INCRBYFLOAT", "f", "10.5"); got != "10.5" {
		t.Fatalf("INCRBYFLOAT: %q", got)
	}
	if got := cli("COMMAND", "GETKEYSANDFLAGS", "rename", "a", "b"); !strings.Contains(got, "RW") || !strings.Contains(got, "OW") {
		t.Fatalf("COMMAND GETKEYSANDFLAGS: %q", got)
	}
	if got := cli("--no-raw", "OBJECT", "ENCODING", "f"); got != `"embstr"` {
		t.Fatalf("OBJECT ENCODING: %q", got)
	}
}

// TestMonitor: a MONITOR connection sees the commands other clients run,
// in Redis's format, passwords redacted, and not admin commands.
func TestMonitor(t *testing.T) {
	ts := startServer(t, Config{})
	m := ts.raw(t)
	m.cmd("MONITOR")
	m.expect("+OK\r\n")
	r := ts.raw(t)
	r.cmd("SET", "k", "a b\n\"")
	r.expect("+OK\r\n")
	r.cmd("CONFIG", "GET", "timeout")
	r.reply()
	r.cmd("AUTH", "default", "pw")
	r.reply()
	r.cmd("GET", "k")
	r.reply()
	m.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	for _, want := range []string{`"SET" "k" "a b\n\""`, `"AUTH" "(redacted)" "(redacted)"`, `"GET" "k"`} {
		line, err := m.br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(line, "+") || !strings.Contains(line, " [0 127.0.0.1:") || !strings.HasSuffix(line, "] "+want+"\r\n") {
			t.Fatalf("monitor line %q, want one ending in %s", line, want)
		}
	}
}

// TestClientPauseKill: CLIENT PAUSE WRITE holds writes, not reads, until
// CLIENT UNPAUSE; CLIENT KILL ID closes that client.
func TestClientPauseKill(t *testing.T) {
	ts := startServer(t, Config{})
	ctx := context.Background()
	admin := ts.client(t)
	victim := redis.NewClient(&redis.Options{Addr: ts.addr, PoolSize: 1, MaxRetries: -1})
	defer victim.Close()
	if err := admin.Do(ctx, "CLIENT", "PAUSE", "60000", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	if err := victim.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET during a write pause: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- victim.Set(ctx, "k", "v", 0).Err() }()
	select {
	case err := <-done:
		t.Fatalf("SET ran during the pause: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := admin.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	r := ts.raw(t)
	r.cmd("CLIENT", "ID")
	id := strings.TrimSuffix(strings.TrimPrefix(r.reply(), ":"), "\r\n")
	if n, err := admin.ClientKillByFilter(ctx, "ID", id).Result(); err != nil || n != 1 {
		t.Fatalf("CLIENT KILL ID %s: %d, %v", id, n, err)
	}
	r.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(r.nc, "PING\r\n") // may fail already: the server closed it
	if _, err := r.br.ReadString('\n'); err == nil {
		t.Fatal("killed client still answered")
	}
}

// TestInfoSections: INFO has Redis's memory, cpu, replication, stats
// error counters, errorstats and (when asked for) commandstats, in
// Redis's field formats, and CONFIG RESETSTAT resets the counters.
func TestInfoSections(t *testing.T) {
	ts := startServer(t, Config{})
	r := ts.raw(t)
	r.cmd("GET", "k")
	r.reply()
	r.cmd("INCR", "k")
	r.reply()
	r.cmd("SET", "k", "x")
	r.reply()
	r.cmd("INCR", "k")
	r.expect("-ERR value is not an integer or out of range\r\n")
	r.cmd("NOSUCH")
	r.reply()
	r.cmd("GET")
	r.reply()
	r.cmd("INFO")
	info := r.reply()
	for _, want := range []string{"# Memory\r\nused_memory:", "\r\nused_memory_rss:", "\r\nused_memory_peak:", "\r\nmem_allocator:go",
		"# Replication\r\nrole:master\r\nconnected_slaves:0\r\n", "\r\nmaster_repl_offset:",
		"# CPU\r\nused_cpu_sys:", "\r\nused_cpu_user_children:", "\r\ntotal_error_replies:3\r\n", "\r\nrejected_calls:2\r\n",
		"# Errorstats\r\nerrorstat_ERR:count=3\r\n", "\r\n# Cluster\r\ncluster_enabled:0\r\n\r\n# Keyspace\r\n"} {
		if !strings.Contains(info, want) {
			t.Errorf("INFO lacks %q", want)
		}
	}
	r.cmd("INFO", "cluster")
	if got, want := r.reply(), "$30\r\n# Cluster\r\ncluster_enabled:0\r\n\r\n"; got != want {
		t.Errorf("INFO cluster = %q; want %q, as a Redis server not in cluster mode", got, want)
	}
	if strings.Contains(info, "cmdstat_") {
		t.Error("INFO without arguments shows commandstats; Redis shows them only when asked")
	}
	r.cmd("INFO", "commandstats")
	cs := r.reply()
	for _, want := range []string{"# Commandstats\r\n", "cmdstat_get:calls=1,usec=", ",rejected_calls=1,failed_calls=0\r\n",
		"cmdstat_incr:calls=2,usec=", ",rejected_calls=0,failed_calls=1\r\n"} {
		if !strings.Contains(cs, want) {
			t.Errorf("INFO commandstats lacks %q:\n%s", want, cs)
		}
	}
	r.cmd("CONFIG", "RESETSTAT")
	r.expect("+OK\r\n")
	r.cmd("INFO", "stats", "errorstats")
	if got := r.reply(); !strings.Contains(got, "total_error_replies:0\r\n") || strings.Contains(got, "errorstat_") {
		t.Errorf("after RESETSTAT: %s", got)
	}
}

// TestClientListFields: CLIENT LIST and CLIENT INFO have every Redis 7
// field, with real values: the socket's descriptor, the request and
// reply buffers, the MULTI queue.
func TestClientListFields(t *testing.T) {
	ts := startServer(t, Config{})
	r := ts.raw(t)
	r.cmd("CLIENT", "NO-EVICT", "on")
	r.expect("+OK\r\n")
	r.cmd("MULTI")
	r.expect("+OK\r\n")
	r.cmd("SET", "k", strings.Repeat("v", 1000))
	r.expect("+QUEUED\r\n")
	other := ts.raw(t)
	other.cmd("CLIENT", "LIST")
	var got string
	for _, l := range strings.Split(other.reply(), "\n") {
		if strings.Contains(l, " flags=xe ") {
			got = l
		}
	}
	r.cmd("EXEC")
	r.reply()
	fields := map[string]string{}
	for _, f := range strings.Fields(got) {
		if k, v, ok := strings.Cut(f, "="); ok {
			fields[k] = v
		}
	}
	for _, k := range []string{"id", "addr", "laddr", "fd", "name", "age", "idle", "flags", "db", "sub", "psub", "ssub", "multi",
		"qbuf", "qbuf-free", "argv-mem", "multi-mem", "rbs", "rbp", "obl", "oll", "omem", "tot-mem", "events", "cmd", "user", "redir", "resp"} {
		if _, ok := fields[k]; !ok {
			t.Errorf("CLIENT INFO lacks %s: %s", k, got)
		}
	}
	if fd, err := strconv.Atoi(fields["fd"]); err != nil || fd < 0 {
		t.Errorf("fd=%s", fields["fd"])
	}
	if n, _ := strconv.Atoi(fields["multi-mem"]); n < 1000 {
		t.Errorf("multi-mem=%s with a 1000-byte value queued", fields["multi-mem"])
	}
	if fields["flags"] != "xe" || fields["multi"] != "1" || fields["rbs"] != "16384" {
		t.Errorf("flags=%s multi=%s rbs=%s", fields["flags"], fields["multi"], fields["rbs"])
	}
}

// TestCommandstatsCountExec: the commands EXEC runs are counted in
// commandstats, as Redis counts them, beside MULTI and EXEC themselves.
func TestCommandstatsCountExec(t *testing.T) {
	ts := startServer(t, Config{})
	r := ts.raw(t)
	for _, c := range [][]string{{"MULTI"}, {"SET", "a", "x"}, {"GET", "a"}, {"INCR", "a"}} {
		r.cmd(c...)
		r.reply()
	}
	r.cmd("EXEC")
	r.expect("*3\r\n+OK\r\n$1\r\nx\r\n-ERR value is not an integer or out of range\r\n")
	r.cmd("INFO", "commandstats")
	cs := r.reply()
	for _, want := range []string{"cmdstat_multi:calls=1,", "cmdstat_exec:calls=1,", "cmdstat_set:calls=1,", "cmdstat_get:calls=1,",
		"cmdstat_incr:calls=1,usec="} {
		if !strings.Contains(cs, want) {
			t.Errorf("INFO commandstats lacks %q:\n%s", want, cs)
		}
	}
	if !strings.Contains(cs[strings.Index(cs, "cmdstat_incr:"):], ",failed_calls=1\r\n") {
		t.Errorf("the INCR that failed inside EXEC is not counted as failed:\n%s", cs)
	}
}

// TestRandomKeySpread: RANDOMKEY answers keys from all over a keyspace
// that shares one prefix (picking the first key after random bytes
// answered nearly the same one every time), and never an expired key.
func TestRandomKeySpread(t *testing.T) {
	ts := startServer(t, Config{})
	r := ts.raw(t)
	for i := range 200 {
		r.cmd("SET", fmt.Sprintf("user:%03d", i), "v")
		r.expect("+OK\r\n")
	}
	for i := range 50 {
		r.cmd("SET", fmt.Sprintf("gone:%03d", i), "v", "PX", "1")
		r.expect("+OK\r\n")
	}
	time.Sleep(20 * time.Millisecond)
	seen := map[string]bool{}
	for range 600 {
		r.cmd("RANDOMKEY")
		k := r.reply()
		if strings.Contains(k, "gone:") {
			t.Fatalf("RANDOMKEY answered an expired key: %q", k)
		}
		seen[k] = true
	}
	if len(seen) < 150 {
		t.Fatalf("600 RANDOMKEYs answered %d of 200 keys", len(seen))
	}
}

// TestRole: ROLE answers as a Redis master with no replicas, at the offset
// INFO replication shows.
func TestRole(t *testing.T) {
	ts := startServer(t, Config{})
	r := ts.raw(t)
	r.cmd("SET", "a", "1")
	r.expect("+OK\r\n")
	r.cmd("ROLE")
	got := r.reply()
	r.cmd("INFO", "replication")
	info := r.reply()
	var role, info0 int64
	if _, err := fmt.Sscanf(got, "*3\r\n$6\r\nmaster\r\n:%d\r\n*0\r\n", &role); err != nil || !strings.HasSuffix(got, "\r\n*0\r\n") {
		t.Fatalf("ROLE = %q, want master, an offset and no replicas", got)
	}
	off := info[strings.Index(info, "master_repl_offset:")+len("master_repl_offset:"):]
	if _, err := fmt.Sscanf(off, "%d", &info0); err != nil || role <= 0 || role > info0 {
		// Background work (a checkpoint) may log between the two.
		t.Fatalf("ROLE's offset %d, INFO's %d", role, info0)
	}
}

// TestConfigGetDir: CONFIG GET dir answers the data directory, as backup
// scripts read Redis's; it cannot be changed while the server runs.
func TestConfigGetDir(t *testing.T) {
	dir := t.TempDir()
	ts := startServerIn(t, Config{}, engine.Options{}, dir)
	r := ts.raw(t)
	r.cmd("CONFIG", "GET", "dir")
	r.expect(fmt.Sprintf("*2\r\n$3\r\ndir\r\n$%d\r\n%s\r\n", len(dir), dir))
	r.cmd("CONFIG", "SET", "dir", "/tmp")
	r.expect("-ERR CONFIG SET failed (possibly related to argument 'dir') - can't set immutable config\r\n")
}

// TestResetDeauthenticates: with a password asked for, RESET leaves the
// connection unauthenticated, as Redis's RESET returns it to the default
// user; it is answered even with replies off.
func TestResetDeauthenticates(t *testing.T) {
	ts := startServer(t, Config{RequirePass: "pw"})
	r := ts.raw(t)
	r.cmd("AUTH", "pw")
	r.expect("+OK\r\n")
	r.cmd("CLIENT", "REPLY", "OFF")
	r.cmd("RESET")
	r.expect("+RESET\r\n")
	r.cmd("GET", "k")
	r.expect("-NOAUTH Authentication required.\r\n")
}

// TestCommandstatsSubcommands: a container's subcommands are counted
// under their own names, as Redis 7's cmdstat_client|setname, and the
// container itself not at all; an unknown subcommand counts nowhere.
func TestCommandstatsSubcommands(t *testing.T) {
	ts := startServer(t, Config{})
	r := ts.raw(t)
	for _, c := range [][]string{
		{"CLIENT", "SETNAME", "x"}, {"CLIENT", "GETNAME"}, {"CONFIG", "GET", "maxclients"},
		{"CLIENT", "FOO"}, {"COMMAND", "COUNT"}, {"SLOWLOG", "LEN"}, {"GET", "k"},
	} {
		r.cmd(c...)
		r.reply()
	}
	r.cmd("INFO", "commandstats")
	got := r.reply()
	for _, want := range []string{"cmdstat_client|setname:calls=1,", "cmdstat_client|getname:calls=1,",
		"cmdstat_config|get:calls=1,", "cmdstat_command|count:calls=1,", "cmdstat_slowlog|len:calls=1,", "cmdstat_get:calls=1,"} {
		if !strings.Contains(got, want) {
			t.Errorf("INFO commandstats lacks %q:\n%s", want, got)
		}
	}
	for _, absent := range []string{"cmdstat_client:", "cmdstat_config:", "cmdstat_client|foo"} {
		if strings.Contains(got, absent) {
			t.Errorf("INFO commandstats has %q:\n%s", absent, got)
		}
	}
}
