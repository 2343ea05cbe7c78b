package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"mvkv/engine"
)

type testServer struct {
	s    *Server
	db   *engine.DB
	addr string
	done chan error
}

func startServer(t testing.TB, cfg Config) *testServer {
	t.Helper()
	return startServerOn(t, cfg, engine.Options{})
}

// startServerOn is startServer over an engine opened with eo (LockTimeout
// defaults to 5 s).
func startServerOn(t testing.TB, cfg Config, eo engine.Options) *testServer {
	t.Helper()
	return startServerIn(t, cfg, eo, t.TempDir())
}

// startServerIn is startServerOn over the data directory dir.
func startServerIn(t testing.TB, cfg Config, eo engine.Options, dir string) *testServer {
	t.Helper()
	if eo.LockTimeout == 0 {
		eo.LockTimeout = 5 * time.Second
	}
	db, err := engine.Open(dir, eo)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{s: New(db, cfg), db: db, addr: ln.Addr().String(), done: make(chan error, 1)}
	go func() { ts.done <- ts.s.Serve(context.Background(), ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := ts.s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-ts.done; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v", err)
		}
		if err := db.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return ts
}

func (ts *testServer) client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: ts.addr, PoolSize: 4, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

// raw is a bare TCP client for exact-reply tests.
type raw struct {
	t  testing.TB
	nc net.Conn
	br *bufio.Reader
}

func (ts *testServer) raw(t testing.TB) *raw {
	nc, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &raw{t, nc, bufio.NewReader(nc)}
}

func (r *raw) send(s string) {
	r.t.Helper()
	if _, err := io.WriteString(r.nc, s); err != nil {
		r.t.Fatal(err)
	}
}

// cmd sends a multibulk request.
func (r *raw) cmd(args ...string) {
	r.t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	r.send(b.String())
}

// info returns the value of field name in INFO section.
func (r *raw) info(section, name string) string {
	r.t.Helper()
	r.cmd("INFO", section)
	got := r.reply()
	_, v, ok := strings.Cut(got, "\r\n"+name+":")
	v, _, _ = strings.Cut(v, "\r\n")
	if !ok {
		r.t.Fatalf("INFO %s has no %s: %q", section, name, got)
	}
	return v
}

// reply reads one whole reply and returns its bytes.
func (r *raw) reply() string {
	r.t.Helper()
	var b strings.Builder
	if err := r.readValue(&b); err != nil {
		r.t.Fatalf("reading reply: %v (got %q)", err, b.String())
	}
	return b.String()
}

func (r *raw) readValue(b *strings.Builder) error {
	line, err := r.br.ReadString('\n')
	b.WriteString(line)
	if err != nil {
		return err
	}
	var n int
	switch line[0] {
	case '$':
		fmt.Sscanf(line[1:], "%d", &n)
		if n >= 0 {
			buf := make([]byte, n+2)
			if _, err := io.ReadFull(r.br, buf); err != nil {
				return err
			}
			b.Write(buf)
		}
	case '*':
		fmt.Sscanf(line[1:], "%d", &n)
		for i := 0; i < n; i++ {
			if err := r.readValue(b); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *raw) expect(want string) {
	r.t.Helper()
	if got := r.reply(); got != want {
		r.t.Fatalf("reply %q, want %q", got, want)
	}
}

// expectClosed checks the server closed the connection.
func (r *raw) expectClosed() {
	r.t.Helper()
	r.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if b, err := r.br.ReadByte(); err == nil {
		r.t.Fatalf("connection still open; read %q", b)
	}
}

func TestStringCommands(t *testing.T) {
	ts := startServer(t, Config{})
	rdb := ts.client(t)
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	eq := func(got, want any) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	eq(rdb.Ping(ctx).Val(), "PONG")
	eq(rdb.Echo(ctx, "hi").Val(), "hi")
	must(rdb.Set(ctx, "k", "v", 0).Err())
	eq(rdb.Get(ctx, "k").Val(), "v")
	_, err := rdb.Get(ctx, "missing").Result()
	eq(err, redis.Nil)
	must(rdb.Set(ctx, "empty", "", 0).Err())
	eq(rdb.Exists(ctx, "empty").Val(), 1)

	// SET options.
	eq(rdb.SetNX(ctx, "k", "x", 0).Val(), false)
	eq(rdb.SetNX(ctx, "nx", "1", 0).Val(), true)
	eq(rdb.SetXX(ctx, "nope", "1", 0).Val(), false)
	eq(rdb.SetXX(ctx, "k", "v2", 0).Val(), true)
	eq(rdb.SetArgs(ctx, "k", "v3", redis.SetArgs{Get: true}).Val(), "v2")
	_, err = rdb.SetArgs(ctx, "fresh", "1", redis.SetArgs{Get: true}).Result()
	eq(err, redis.Nil)
	eq(rdb.Get(ctx, "fresh").Val(), "1")
	eq(rdb.Do(ctx, "SET", "k", "v", "NX", "XX").Err(), "ERR syntax error")
	eq(rdb.Do(ctx, "SET", "k", "v", "EX", "0").Err(), "ERR invalid expire time in 'set' command")
	eq(rdb.Do(ctx, "SET", "k", "v", "EX", "x").Err(), "ERR value is not an integer or out of range")

	// Counters.
	eq(rdb.Incr(ctx, "n").Val(), 1)
	eq(rdb.IncrBy(ctx, "n", 10).Val(), 11)
	eq(rdb.Decr(ctx, "n").Val(), 10)
	eq(rdb.DecrBy(ctx, "n", 20).Val(), -10)
	eq(rdb.Incr(ctx, "k").Err(), "ERR value is not an integer or out of range")
	must(rdb.Set(ctx, "max", "9223372036854775807", 0).Err())
	eq(rdb.Incr(ctx, "max").Err(), "ERR increment or decrement would overflow")
	eq(rdb.Do(ctx, "INCRBY", "n", "1.5").Err(), "ERR value is not an integer or out of range")

	// Multi-key.
	must(rdb.MSet(ctx, "a", "1", "b", "2", "c", "3").Err())
	eq(rdb.MGet(ctx, "a", "missing", "c").Val(), []any{"1", nil, "3"})
	eq(rdb.Exists(ctx, "a", "b", "missing", "a").Val(), 3)
	eq(rdb.Del(ctx, "a", "b", "missing").Val(), 2)
	eq(rdb.Exists(ctx, "a").Val(), 0)
	eq(rdb.Type(ctx, "c").Val(), "string")
	eq(rdb.Type(ctx, "a").Val(), "none")
	eq(rdb.Do(ctx, "MSET", "a", "1", "b").Err(), "ERR wrong number of arguments for 'mset' command")

	// Key limits.
	big := strings.Repeat("k", engine.MaxKeySize+1)
	if err := rdb.Set(ctx, big, "v", 0).Err(); err == nil || !strings.Contains(err.Error(), "too large") {
		t.Fatalf("SET of a too-long key: %v", err)
	}
	_, err = rdb.Get(ctx, big).Result()
	eq(err, redis.Nil)
	if err := rdb.Set(ctx, "", "v", 0).Err(); err == nil {
		t.Fatal("SET of an empty key succeeded")
	}
	// A failed MSET writes nothing.
	if err := rdb.MSet(ctx, "m1", "1", big, "2").Err(); err == nil {
		t.Fatal("MSET with a too-long key succeeded")
	}
	eq(rdb.Exists(ctx, "m1").Val(), 0)

	// Database.
	eq(rdb.Do(ctx, "SELECT", "0").Val(), "OK")
	eq(rdb.Do(ctx, "SELECT", "1").Err(), "ERR DB index is out of range")
	n := rdb.DBSize(ctx).Val()
	if n < 5 {
		t.Fatalf("DBSIZE %d", n)
	}
	must(rdb.FlushAll(ctx).Err())
	eq(rdb.DBSize(ctx).Val(), 0)
	if got := rdb.Info(ctx).Val(); !strings.Contains(got, "# Mvkv") || !strings.Contains(got, "commits_per_sync:") {
		t.Fatalf("INFO lacks the mvkv section:\n%s", got)
	}
	if got := rdb.Info(ctx, "clients").Val(); !strings.Contains(got, "connected_clients:") || strings.Contains(got, "# Server") {
		t.Fatalf("INFO clients:\n%s", got)
	}
	must(rdb.Do(ctx, "CHECKPOINT").Err())
}

func TestScan(t *testing.T) {
	ts := startServer(t, Config{})
	rdb := ts.client(t)
	ctx := context.Background()
	want := map[string]bool{}
	for i := 0; i < 250; i++ {
		k := fmt.Sprintf("user:%03d", i)
		want[k] = true
		rdb.Set(ctx, k, "x", 0)
	}
	rdb.Set(ctx, "other", "x", 0)
	got := map[string]bool{}
	var cursor uint64
	calls := 0
	for {
		keys, next, err := rdb.Scan(ctx, cursor, "user:*", 20).Result()
		if err != nil {
			t.Fatal(err)
		}
		calls++
		for _, k := range keys {
			got[k] = true
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	if len(got) != len(want) || calls < 10 {
		t.Fatalf("SCAN found %d keys in %d calls, want %d", len(got), calls, len(want))
	}
	if err := rdb.Do(ctx, "SCAN", "12345678").Err(); err == nil || err.Error() != "ERR invalid cursor" {
		t.Fatalf("unknown cursor: %v", err)
	}
	keys, _, _ := rdb.Scan(ctx, 0, "user:00[0-2]", 1000).Result()
	if len(keys) != 3 {
		t.Fatalf("MATCH user:00[0-2]: %v", keys)
	}
}

func TestGlob(t *testing.T) {
	for _, c := range []struct {
		p, s string
		ok   bool
	}{
		{"*", "", true}, {"*", "abc", true}, {"a*c", "abbbc", true}, {"a*c", "abcd", false},
		{"a?c", "abc", true}, {"a?c", "ac", false}, {"[abc]x", "bx", true}, {"[^abc]x", "bx", false},
		{"[a-c]", "b", true}, {"[c-a]", "b", true}, {`\*`, "*", true}, {`\*`, "a", false},
		{"h*llo", "heeello", true}, {"*a*b", "aaab", true}, {"*a*b", "aaa", false},
		{"user:*", "user:1", true}, {"[\\]]", "]", true},
	} {
		if got := globMatch([]byte(c.p), []byte(c.s)); got != c.ok {
			t.Errorf("globMatch(%q, %q) = %v", c.p, c.s, got)
		}
	}
}

func TestConnectionCommands(t *testing.T) {
	ts := startServer(t, Config{})
	rdb := redis.NewClient(&redis.Options{Addr: ts.addr, PoolSize: 1, ClientName: "tester"})
	defer rdb.Close()
	ctx := context.Background()
	if got := rdb.ClientGetName(ctx).Val(); got != "tester" {
		t.Fatalf("CLIENT GETNAME %q", got)
	}
	id := rdb.ClientID(ctx).Val()
	list := rdb.ClientList(ctx).Val()
	if !strings.Contains(list, fmt.Sprintf("id=%d ", id)) || !strings.Contains(list, "name=tester") {
		t.Fatalf("CLIENT LIST:\n%s", list)
	}
	r := ts.raw(t)
	r.cmd("CLIENT", "SETNAME", "a b")
	r.expect("-ERR Client names cannot contain spaces, newlines or special characters.\r\n")
	r.cmd("CLIENT", "SETNAME")
	r.expect("-ERR wrong number of arguments for 'client|setname' command\r\n")
	r.cmd("CLIENT", "NOPE")
	r.expect("-ERR unknown subcommand 'NOPE'. Try CLIENT HELP.\r\n")
	r.cmd("HELLO", "3")
	r.expect("-NOPROTO unsupported protocol version\r\n")
	r.cmd("HELLO", "2")
	if got := r.reply(); !strings.HasPrefix(got, "*14\r\n$6\r\nserver\r\n$5\r\nredis\r\n") {
		t.Fatalf("HELLO 2: %q", got)
	}
	r.cmd("COMMAND", "COUNT")
	r.expect(fmt.Sprintf(":%d\r\n", len(commandTable)))
	r.cmd("COMMAND", "COUNT", "x")
	r.expect("-ERR wrong number of arguments for 'command|count' command\r\n")
	r.cmd("COMMAND", "DOCS", "get", "nosuch")
	r.expect("*2\r\n$3\r\nget\r\n*10\r\n$7\r\nsummary\r\n$34\r\nReturns the string value of a key.\r\n" +
		"$5\r\nsince\r\n$5\r\n1.0.0\r\n$5\r\ngroup\r\n$6\r\nstring\r\n$10\r\ncomplexity\r\n$4\r\nO(1)\r\n" +
		"$9\r\narguments\r\n*1\r\n*4\r\n$4\r\nname\r\n$3\r\nkey\r\n$4\r\ntype\r\n$3\r\nkey\r\n")
	r.cmd("COMMAND", "DOCS")
	if got := r.reply(); !strings.HasPrefix(got, fmt.Sprintf("*%d\r\n", 2*len(commandTable))) {
		t.Fatalf("COMMAND DOCS: %.100q", got)
	}
	r.cmd("COMMAND", "INFO", "get")
	r.expect("*1\r\n*10\r\n$3\r\nget\r\n:2\r\n*1\r\n+readonly\r\n:1\r\n:1\r\n:1\r\n*0\r\n*0\r\n*0\r\n*0\r\n")
	r.cmd("CLIENT", "SETINFO", "lib-name", "a b")
	r.expect("-ERR lib-name cannot contain spaces, newlines or special characters.\r\n")
	r.cmd("CLIENT", "SETINFO", "lib-nom", "x")
	r.expect("-ERR Unrecognized option 'lib-nom'\r\n")
	r.cmd("CLIENT", "SETINFO", "LIB-NAME", "mylib")
	r.expect("+OK\r\n")
	r.cmd("CLIENT", "LIST", "ID", "-1")
	r.expect("-ERR Invalid client ID\r\n")
	r.cmd("CONFIG", "SET", "maxclients", "10", "timeout")
	r.expect("-ERR syntax error\r\n")
	r.cmd("CLIENT", "LIST", "TYPE", "pubsub")
	r.expect("$0\r\n\r\n")
	// go-redis v9 asks for RESP3 with HELLO 3, falls back to RESP2 on
	// NOPROTO, and names itself with CLIENT SETINFO.
	rdb3 := redis.NewClient(&redis.Options{Addr: ts.addr, Protocol: 3})
	defer rdb3.Close()
	if err := rdb3.Set(ctx, "p3", "v", 0).Err(); err != nil {
		t.Fatalf("SET over a client asking for RESP3: %v", err)
	}
	list = rdb3.ClientList(ctx).Val()
	if !strings.Contains(list, "lib-name=mylib ") || !strings.Contains(list, "lib-name=go-redis") || !strings.Contains(list, "cmd=client|list") {
		t.Fatalf("CLIENT LIST:\n%s", list)
	}
	r.cmd("CONFIG", "GET", "synchronous_commit")
	r.expect("*2\r\n$18\r\nsynchronous_commit\r\n$2\r\non\r\n")
	r.cmd("CONFIG", "SET", "commit_delay", "10", "commit_siblings", "2")
	r.expect("+OK\r\n")
	r.cmd("CONFIG", "GET", "commit_*")
	if got := r.reply(); !strings.Contains(got, "$12\r\ncommit_delay\r\n$2\r\n10\r\n") {
		t.Fatalf("CONFIG GET commit_*: %q", got)
	}
	r.cmd("CONFIG", "SET", "nope", "1")
	r.expect("-ERR Unknown option or number of arguments for CONFIG SET - 'nope'\r\n")
	r.cmd("CONFIG", "SET", "appendonly", "no")
	r.expect("-ERR CONFIG SET failed (possibly related to argument 'appendonly') - argument must be 'yes' (the write-ahead log cannot be turned off)\r\n")
	r.cmd("CONFIG", "SET", "databases", "2")
	r.expect("-ERR CONFIG SET failed (possibly related to argument 'databases') - can't set immutable config\r\n")
	// A boolean setting's refusal names every spelling it takes.
	r.cmd("CONFIG", "SET", "zero_damaged_pages", "bogus")
	r.expect("-ERR CONFIG SET failed (possibly related to argument 'zero_damaged_pages') - want on, off, true, false, yes, no, 1 or 0 (in any case)\r\n")
	r.cmd("CONFIG", "SET", "zero_damaged_pages", "No")
	r.expect("+OK\r\n")
	// Spaces around a value are refused, as Redis and PostgreSQL refuse
	// them, not trimmed away; the refusal names the value.
	r.cmd("CONFIG", "SET", "zero_damaged_pages", " on")
	r.expect("-ERR CONFIG SET failed (possibly related to argument 'zero_damaged_pages') - want no spaces around the value \" on\"\r\n")
	r.cmd("CONFIG", "SET", "synchronous_commit", "off ")
	r.expect("-ERR CONFIG SET failed (possibly related to argument 'synchronous_commit') - want no spaces around the value \"off \"\r\n")
	r.cmd("CONFIG", "GET", "zero_damaged_pages")
	r.expect("*2\r\n$18\r\nzero_damaged_pages\r\n$3\r\noff\r\n")
	// A parameter twice in one call is refused, under another name of it
	// too (Redis's ziplist aliases; appendfsync sets synchronous_commit).
	r.cmd("CONFIG", "SET", "maxclients", "10", "maxclients", "11")
	r.expect("-ERR CONFIG SET failed (possibly related to argument 'maxclients') - duplicate parameter\r\n")
	r.cmd("CONFIG", "SET", "hash-max-ziplist-entries", "1", "hash-max-listpack-entries", "2")
	r.expect("-ERR CONFIG SET failed (possibly related to argument 'hash-max-listpack-entries') - duplicate parameter\r\n")
	r.cmd("CONFIG", "SET", "synchronous_commit", "on", "appendfsync", "no")
	r.expect("-ERR CONFIG SET failed (possibly related to argument 'appendfsync') - duplicate parameter\r\n")
	r.cmd("CONFIG", "GET", "hash-max-listpack-entries")
	r.expect("*2\r\n$25\r\nhash-max-listpack-entries\r\n$3\r\n128\r\n")
	r.cmd("CONFIG", "SET", "commit_delay", "-1")
	if got := r.reply(); !strings.HasPrefix(got, "-ERR CONFIG SET failed (possibly related to argument 'commit_delay')") {
		t.Fatalf("commit_delay -1: %q", got)
	}
	r.cmd("CONFIG", "SET", "commit_delay", "-5")
	if got := r.reply(); !strings.HasPrefix(got, "-ERR CONFIG SET failed (possibly related to argument 'commit_delay')") {
		t.Fatalf("bad commit_delay: %q", got)
	}
	r.cmd("CONFIG", "SET", "maxclients", "x")
	r.expect("-ERR CONFIG SET failed (possibly related to argument 'maxclients') - argument couldn't be parsed into an integer\r\n")
	r.cmd("CONFIG", "SET", "maxclients", "0")
	r.expect("-ERR CONFIG SET failed (possibly related to argument 'maxclients') - argument must be between 1 and 4294967295 inclusive\r\n")
	r.cmd("CONFIG", "SET", "proto-max-bulk-len", "2mb")
	r.expect("+OK\r\n")
	r.cmd("CONFIG", "GET", "proto-max-bulk-len")
	r.expect("*2\r\n$18\r\nproto-max-bulk-len\r\n$7\r\n2097152\r\n")
	// No higher than the engine's 1 GiB value limit, which is what a
	// longer argument would meet.
	r.cmd("CONFIG", "SET", "proto-max-bulk-len", "2gb")
	r.expect("-ERR CONFIG SET failed (possibly related to argument 'proto-max-bulk-len') - argument must be between 1048576 and 1073741824 inclusive\r\n")
	r.cmd("CONFIG", "SET", "proto-max-bulk-len", "1073741825")
	r.expect("-ERR CONFIG SET failed (possibly related to argument 'proto-max-bulk-len') - argument must be between 1048576 and 1073741824 inclusive\r\n")
	r.cmd("CONFIG", "GET", "proto-max-bulk-len")
	r.expect("*2\r\n$18\r\nproto-max-bulk-len\r\n$7\r\n2097152\r\n")
	r.cmd("CONFIG", "SET", "proto-max-bulk-len", "1gb")
	r.expect("+OK\r\n")
	r.cmd("CONFIG", "GET", "proto-max-bulk-len")
	r.expect("*2\r\n$18\r\nproto-max-bulk-len\r\n$10\r\n1073741824\r\n")
	r.cmd("CONFIG", "SET", "client-query-buffer-limit", "4gb")
	r.expect("+OK\r\n")
	r.cmd("AUTH", "a", "b", "c")
	r.expect("-ERR syntax error\r\n")
	r.cmd("AUTH", "someone", "pw")
	r.expect("-WRONGPASS invalid username-password pair or user is disabled.\r\n")
	r.cmd("AUTH", "default", "anything")
	r.expect("+OK\r\n")
	r.cmd("HELLO", "2", "AUTH", "default", "anything")
	if got := r.reply(); !strings.HasPrefix(got, "*14\r\n") {
		t.Fatalf("HELLO 2 AUTH default without requirepass: %q", got)
	}
	r.cmd("QUIT")
	r.expect("+OK\r\n")
	r.expectClosed()
}

// TestErrorReplies pins Redis's exact error texts and null types.
func TestErrorReplies(t *testing.T) {
	ts := startServer(t, Config{})
	r := ts.raw(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"GET"}, "-ERR wrong number of arguments for 'get' command\r\n"},
		{[]string{"get", "a", "b"}, "-ERR wrong number of arguments for 'get' command\r\n"},
		{[]string{"PING", "a", "b"}, "-ERR wrong number of arguments for 'ping' command\r\n"},
		{[]string{"FOO", "bar", "baz"}, "-ERR unknown command 'FOO', with args beginning with: 'bar' 'baz' \r\n"},
		{[]string{"FOO"}, "-ERR unknown command 'FOO', with args beginning with: \r\n"},
		{[]string{"GET", "missing"}, "$-1\r\n"},
		{[]string{"MGET", "missing"}, "*1\r\n$-1\r\n"},
		{[]string{"EXEC"}, "-ERR EXEC without MULTI\r\n"},
		{[]string{"DISCARD"}, "-ERR DISCARD without MULTI\r\n"},
		{[]string{"SET", "k", "v"}, "+OK\r\n"},
		{[]string{"INCR", "k"}, "-ERR value is not an integer or out of range\r\n"},
		{[]string{"AUTH", "x"}, "-ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?\r\n"},
		{[]string{"SCAN", "x"}, "-ERR invalid cursor\r\n"},
		{[]string{"SCAN", "0", "COUNT", "0"}, "-ERR syntax error\r\n"},
		{[]string{"VACUUM"}, "+OK\r\n"},
		{[]string{"VACUUM", "full"}, "-ERR wrong number of arguments for 'vacuum' command\r\n"},
		{[]string{"VACUUM", "extra", "args"}, "-ERR wrong number of arguments for 'vacuum' command\r\n"},
		{[]string{"CHECKPOINT", "now"}, "-ERR wrong number of arguments for 'checkpoint' command\r\n"},
	} {
		r.cmd(c.args...)
		if got := r.reply(); got != c.want {
			t.Errorf("%q: got %q, want %q", c.args, got, c.want)
		}
	}
	// Inline commands, as redis-cli and telnet send them.
	r.send("SET \"in line\" 'v 1'\r\n")
	r.expect("+OK\r\n")
	r.send("GET \"in\\x20line\"\n")
	r.expect("$3\r\nv 1\r\n")
	r.send("\r\n")
	r.send("PING\r\n")
	r.expect("+PONG\r\n")
}

func TestAuth(t *testing.T) {
	ts := startServer(t, Config{RequirePass: "s3cret"})
	r := ts.raw(t)
	r.cmd("GET", "k")
	r.expect("-NOAUTH Authentication required.\r\n")
	// As Redis 7: PING needs AUTH too, and arity comes first.
	r.cmd("PING")
	r.expect("-NOAUTH Authentication required.\r\n")
	r.cmd("GET")
	r.expect("-ERR wrong number of arguments for 'get' command\r\n")
	r.cmd("AUTH", "wrong")
	r.expect("-WRONGPASS invalid username-password pair or user is disabled.\r\n")
	r.cmd("AUTH", "s3cret")
	r.expect("+OK\r\n")
	r.cmd("GET", "k")
	r.expect("$-1\r\n")

	rdb := redis.NewClient(&redis.Options{Addr: ts.addr, Password: "s3cret"})
	defer rdb.Close()
	if err := rdb.Set(context.Background(), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	bad := redis.NewClient(&redis.Options{Addr: ts.addr, Password: "nope", MaxRetries: -1})
	defer bad.Close()
	if err := bad.Get(context.Background(), "k").Err(); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("wrong password: %v", err)
	}
}

// TestConfigSetRequirePass: CONFIG SET requirepass applies to the
// connections made afterwards, as in Redis; CONFIG GET shows it.
func TestConfigSetRequirePass(t *testing.T) {
	ts := startServer(t, Config{})
	old := ts.raw(t)
	old.cmd("CONFIG", "SET", "requirepass", "n3w")
	old.expect("+OK\r\n")
	old.cmd("CONFIG", "GET", "requirepass")
	old.expect("*2\r\n$11\r\nrequirepass\r\n$3\r\nn3w\r\n")
	old.cmd("GET", "k") // already in, stays in
	old.expect("$-1\r\n")
	r := ts.raw(t)
	r.cmd("GET", "k")
	r.expect("-NOAUTH Authentication required.\r\n")
	r.cmd("AUTH", "n3w")
	r.expect("+OK\r\n")
	old.cmd("CONFIG", "SET", "requirepass", "")
	old.expect("+OK\r\n")
	r = ts.raw(t)
	r.cmd("GET", "k")
	r.expect("$-1\r\n")
}

func TestMaxClients(t *testing.T) {
	ts := startServer(t, Config{MaxClients: 2})
	a, b := ts.raw(t), ts.raw(t)
	a.cmd("PING")
	a.expect("+PONG\r\n")
	b.cmd("PING")
	b.expect("+PONG\r\n")
	c := ts.raw(t)
	c.expect("-ERR max number of clients reached\r\n")
	c.expectClosed()
	// A client that sends its first request only after the server has
	// refused it still reads the reason, then the end of the connection.
	for range 3 {
		e := ts.raw(t)
		time.Sleep(50 * time.Millisecond) // the server refuses it meanwhile
		e.nc.Write([]byte("PING\r\n"))
		e.expect("-ERR max number of clients reached\r\n")
		e.expectClosed()
	}
	a.nc.Close()
	// Once a's goroutine has gone, a new client gets in.
	for {
		d := ts.raw(t)
		d.cmd("PING")
		if got := d.reply(); got == "+PONG\r\n" {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestIdleTimeout(t *testing.T) {
	ts := startServer(t, Config{Timeout: 200 * time.Millisecond})
	r := ts.raw(t)
	r.cmd("PING")
	r.expect("+PONG\r\n")
	r.expectClosed()
	// A client stalled inside a request is cut off as well.
	r2 := ts.raw(t)
	r2.send("*2\r\n$3\r\nGET\r\n$5\r\nab")
	r2.expectClosed()
}

func TestConcurrentIncr(t *testing.T) {
	ts := startServer(t, Config{})
	rdb := ts.client(t)
	ctx := context.Background()
	const clients, each = 8, 50
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := redis.NewClient(&redis.Options{Addr: ts.addr, PoolSize: 1})
			defer c.Close()
			for j := 0; j < each; j++ {
				if err := c.Incr(ctx, "ctr").Err(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if got := rdb.Get(ctx, "ctr").Val(); got != fmt.Sprint(clients*each) {
		t.Fatalf("counter %s, want %d", got, clients*each)
	}
}

// TestPipelineSameKey: a pipeline of increments of one key is applied and
// answered in order; each waits for the row lock of the one before, which
// is released only once that one's commit record is durable, so each
// commit asked for its own WAL flush.
func TestPipelineSameKey(t *testing.T) {
	ts := startServer(t, Config{})
	rdb := redis.NewClient(&redis.Options{Addr: ts.addr, PoolSize: 1})
	defer rdb.Close()
	ctx := context.Background()
	rdb.Ping(ctx)
	const n = 200
	before := ts.db.Stats()
	cmds, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := 0; i < n; i++ {
			p.Incr(ctx, "p")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cmds {
		if got := c.(*redis.IntCmd).Val(); got != int64(i+1) {
			t.Fatalf("reply %d = %d", i, got)
		}
	}
	d := ts.db.Stats().Sub(before)
	if d.Txn.Commits < n {
		t.Fatalf("%d commits for %d writes", d.Txn.Commits, n)
	}
	if d.WAL.FlushRequests < n {
		t.Fatalf("%d WAL flush requests for a pipeline of %d synchronous commits", d.WAL.FlushRequests, n)
	}
	if ts.s.OpenTransactions() != 0 {
		t.Fatalf("%d transactions left open", ts.s.OpenTransactions())
	}
}

// TestPipelineReadYourWrites: in a pipeline whose writes commit without
// waiting, every read, EXEC and WATCH still sees the connection's own
// earlier writes, and the replies come in order.
// With early lock release on, the reads run before the writes ahead of
// them are durable (readPipelined); with it off, they wait for them.
func TestPipelineReadYourWrites(t *testing.T) {
	for _, elr := range []bool{true, false} {
		t.Run(fmt.Sprintf("early_lock_release=%v", elr), func(t *testing.T) {
			testPipelineReadYourWrites(t, elr)
		})
	}
}

func testPipelineReadYourWrites(t *testing.T, elr bool) {
	ts := startServerOn(t, Config{}, engine.Options{EarlyLockRelease: &elr})
	r := ts.raw(t)
	var b strings.Builder
	for _, c := range [][]string{
		{"SET", "a", "1"}, {"GET", "a"}, {"INCR", "a"}, {"INCR", "b"}, {"GET", "a"},
		{"DEL", "a"}, {"EXISTS", "a", "b"}, {"MSET", "x", "1", "y", "2"}, {"MGET", "x", "y"},
		{"MULTI"}, {"INCRBY", "x", "5"}, {"SET", "z", "q"}, {"EXEC"}, {"GET", "x"},
		{"SET", "z", "r", "XX"}, {"DBSIZE"}, {"WATCH", "z"}, {"MULTI"}, {"GET", "z"}, {"EXEC"},
		// GETEX without options reads as GET does, though it is a
		// write command (which does not wait for the writes before it).
		{"SET", "g", "new"}, {"GETEX", "g"}, {"DEL", "g"}, {"GETEX", "g"},
	} {
		fmt.Fprintf(&b, "*%d\r\n", len(c))
		for _, a := range c {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
	}
	r.send(b.String())
	for _, want := range []string{
		"+OK\r\n", "$1\r\n1\r\n", ":2\r\n", ":1\r\n", "$1\r\n2\r\n",
		":1\r\n", ":1\r\n", "+OK\r\n", "*2\r\n$1\r\n1\r\n$1\r\n2\r\n",
		"+OK\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "*2\r\n:6\r\n+OK\r\n", "$1\r\n6\r\n",
		"+OK\r\n", ":4\r\n", "+OK\r\n", "+OK\r\n", "+QUEUED\r\n", "*1\r\n$1\r\nr\r\n",
		"+OK\r\n", "$3\r\nnew\r\n", ":1\r\n", "$-1\r\n",
	} {
		r.expect(want)
	}
	if n := ts.s.OpenTransactions(); n != 0 {
		t.Fatalf("%d transactions left open", n)
	}
}

// TestPipelineMixed: a pipeline mixing writes and reads is answered in
// order, each read seeing the writes before it; a write that changes
// nothing (SET NX of an existing key) is answered like any other.
func TestPipelineMixed(t *testing.T) {
	ts := startServer(t, Config{})
	r := ts.raw(t)
	r.send("*3\r\n$3\r\nSET\r\n$1\r\na\r\n$1\r\n1\r\n*3\r\n$3\r\nSET\r\n$1\r\nb\r\n$1\r\n2\r\n*2\r\n$3\r\nGET\r\n$1\r\na\r\n" +
		"*4\r\n$3\r\nSET\r\n$1\r\na\r\n$1\r\n9\r\n$2\r\nNX\r\n*2\r\n$3\r\nGET\r\n$1\r\na\r\nPING\r\n")
	r.expect("+OK\r\n")
	r.expect("+OK\r\n")
	r.expect("$1\r\n1\r\n")
	r.expect("$-1\r\n")
	r.expect("$1\r\n1\r\n")
	r.expect("+PONG\r\n")
}

func TestShutdownCommand(t *testing.T) {
	db, err := engine.Open(t.TempDir(), engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := New(db, Config{})
	done := make(chan error, 1)
	go func() { done <- s.Serve(context.Background(), ln) }()
	idle := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), PoolSize: 1})
	defer idle.Close()
	ctx := context.Background()
	if err := idle.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), MaxRetries: -1})
	defer rdb.Close()
	// Redis closes the connection without a reply; go-redis reports
	// that as success.
	if err := rdb.Shutdown(ctx).Err(); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("SHUTDOWN: %v", err)
	}
	if err := <-done; !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve: %v", err)
	}
	<-s.Done()
	if _, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		t.Fatal("still accepting connections")
	}
	tx, _ := db.Begin(ctx, engine.TxnOptions{})
	if v, err := tx.Get([]byte("k")); err != nil || string(v) != "v" {
		t.Fatalf("after shutdown: %q %v", v, err)
	}
	tx.Rollback()
}

// TestInfoKeyspace checks INFO's keyspace section against Redis 7's text:
// no db0 line while the database is empty, keys counting only live keys,
// expires those of them with a deadline, and the section placed after
// stats in the default, all and everything selections.
func TestInfoKeyspace(t *testing.T) {
	ts := startServer(t, Config{})
	r := ts.raw(t)
	info := func(args ...string) string {
		t.Helper()
		r.cmd(append([]string{"INFO"}, args...)...)
		got := r.reply()
		head, body, ok := strings.Cut(got, "\r\n")
		if !ok || !strings.HasPrefix(head, "$") {
			t.Fatalf("INFO %q: %q", args, got)
		}
		return body[:len(body)-2]
	}
	if got := info("keyspace"); got != "# Keyspace\r\n" {
		t.Fatalf("INFO keyspace, empty: %q", got)
	}
	for _, c := range [][]string{
		{"SET", "a", "1"},
		{"SET", "b", "2", "EX", "1000"},
		{"SET", "c", "3"},
		{"PEXPIRE", "c", "100000"},
		{"SET", "d", "4"},
		{"DEL", "d"},
		// Past its deadline already: gone, and not counted.
		{"SET", "e", "5", "PXAT", "1"},
	} {
		r.cmd(c...)
		r.reply()
	}
	// avg_ttl is the mean of b's 1,000,000 ms and c's 100,000 ms, less the
	// time since they were set.
	want := "# Keyspace\r\ndb0:keys=3,expires=2,avg_ttl="
	got := info("keyspace")
	ttl, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(got, want), "\r\n"))
	if !strings.HasPrefix(got, want) || err != nil || ttl > 550000 || ttl < 540000 {
		t.Fatalf("INFO keyspace: %q, want %q and an avg_ttl just under 550000", got, want)
	}
	for _, sel := range [][]string{nil, {"all"}, {"everything"}, {"default"}, {"KEYSPACE", "server"}} {
		got := info(sel...)
		i := strings.Index(got, want)
		if i < 0 {
			t.Fatalf("INFO %q lacks %q:\n%s", sel, want, got)
		}
		if j := strings.Index(got, "# Stats"); j > i {
			t.Errorf("INFO %q: keyspace before stats:\n%s", sel, got)
		}
		if j := strings.Index(got, "# Mvkv"); j >= 0 && j < i {
			t.Errorf("INFO %q: mvkv before keyspace:\n%s", sel, got)
		}
	}
	if got := info("stats"); strings.Contains(got, "Keyspace") {
		t.Errorf("INFO stats has the keyspace section:\n%s", got)
	}
}

// TestInfoIndexSource: INFO persistence says where the key index came
// from at open: nothing to load for a new database, the index file after
// a clean shutdown, a heap scan once the file is gone.
func TestInfoIndexSource(t *testing.T) {
	ctx := context.Background()
	// putAndClose writes one key into the database in dir and closes it
	// cleanly, so that the next open finds an index file.
	putAndClose := func(dir string) {
		t.Helper()
		db, err := engine.Open(dir, engine.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Update(ctx, func(tx *engine.Txn) error { return tx.Put([]byte("k"), []byte("v")) }); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	putAndClose(dir)
	info := func(ts *testServer) string {
		t.Helper()
		s, err := ts.client(t).Info(ctx, "persistence").Result()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if s := info(startServer(t, Config{})); !strings.Contains(s, "recovery_index:new\r\n") {
		t.Errorf("new database:\n%s", s)
	}
	if s := info(startServerIn(t, Config{}, engine.Options{}, dir)); !strings.Contains(s, "recovery_index:file\r\n") || !strings.Contains(s, "recovery_index_keys:1\r\n") {
		t.Errorf("after a clean shutdown:\n%s", s)
	}
	other := t.TempDir()
	putAndClose(other)
	if err := os.Remove(filepath.Join(other, "index")); err != nil {
		t.Fatal(err)
	}
	if s := info(startServerIn(t, Config{}, engine.Options{}, other)); !strings.Contains(s, "recovery_index:heap_scan\r\n") || !strings.Contains(s, "recovery_index_keys:1\r\n") {
		t.Errorf("index file removed:\n%s", s)
	}
}

// TestMetaCommandsOnLargeValues: the commands that need only a key's
// liveness, deadline or length (EXISTS, TYPE, STRLEN, TTL, PEXPIRETIME,
// DBSIZE, KEYS, SCAN) answer from the start of a large value as they do
// from the whole of it, for a value with a deadline, one without, and one
// whose first byte is the stored format's mark.
func TestMetaCommandsOnLargeValues(t *testing.T) {
	ts := startServer(t, Config{})
	rdb := redis.NewClient(&redis.Options{Addr: ts.addr})
	defer rdb.Close()
	ctx := context.Background()
	big := strings.Repeat("x", 1<<20+123)
	marked := "\xff\x01" + big
	if err := rdb.Set(ctx, "big", big, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, "marked", marked, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, "gone", big, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.PExpireAt(ctx, "gone", time.Now().Add(30*time.Millisecond)).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(60 * time.Millisecond)
	if n := rdb.StrLen(ctx, "big").Val(); n != int64(len(big)) {
		t.Errorf("STRLEN big = %d, want %d", n, len(big))
	}
	if n := rdb.StrLen(ctx, "marked").Val(); n != int64(len(marked)) {
		t.Errorf("STRLEN marked = %d, want %d", n, len(marked))
	}
	if n := rdb.StrLen(ctx, "gone").Val(); n != 0 {
		t.Errorf("STRLEN gone = %d", n)
	}
	if n := rdb.Exists(ctx, "big", "marked", "gone", "none").Val(); n != 2 {
		t.Errorf("EXISTS = %d, want 2", n)
	}
	if ty := rdb.Type(ctx, "marked").Val(); ty != "string" {
		t.Errorf("TYPE marked = %q", ty)
	}
	if ty := rdb.Type(ctx, "gone").Val(); ty != "none" {
		t.Errorf("TYPE gone = %q", ty)
	}
	if d := rdb.TTL(ctx, "big").Val(); d <= 59*time.Minute || d > time.Hour {
		t.Errorf("TTL big = %v", d)
	}
	if d := rdb.TTL(ctx, "marked").Val(); d != -1 {
		t.Errorf("TTL marked = %v, want -1", d)
	}
	if d := rdb.PExpireTime(ctx, "gone").Val(); d != -2 {
		t.Errorf("PEXPIRETIME gone = %v, want -2", d)
	}
	if n := rdb.DBSize(ctx).Val(); n != 2 {
		t.Errorf("DBSIZE = %d, want 2", n)
	}
	if keys := rdb.Keys(ctx, "*").Val(); len(keys) != 2 {
		t.Errorf("KEYS * = %q", keys)
	}
	if keys, _ := rdb.Scan(ctx, 0, "*", 100).Val(); len(keys) != 2 {
		t.Errorf("SCAN = %q", keys)
	}
	if v := rdb.Get(ctx, "marked").Val(); v != marked {
		t.Errorf("GET marked: %d bytes, want %d", len(v), len(marked))
	}
}

// TestInfoKeyspaceCountReuse: INFO's keyspace count is kept while it is
// exact (no commit since, no counted key expired), taken again at once
// when a short count is no longer exact, and a long one is reused for ten
// times its duration even then.
func TestInfoKeyspaceCountReuse(t *testing.T) {
	ts := startServer(t, Config{})
	r := ts.raw(t)
	keysLine := func() string {
		t.Helper()
		r.cmd("INFO", "keyspace")
		got := r.reply()
		_, line, _ := strings.Cut(got, "# Keyspace\r\n")
		k, _, _ := strings.Cut(line, ",")
		return k
	}
	do := func(args ...string) {
		t.Helper()
		r.cmd(args...)
		r.reply()
	}
	countAt := func() time.Time {
		ts.s.lockKeyspace()
		defer ts.s.unlockKeyspace()
		return ts.s.ks.at
	}
	do("SET", "a", "1")
	if got := keysLine(); got != "db0:keys=1" {
		t.Fatalf("after one SET: %q", got)
	}
	first := countAt()
	if got := keysLine(); got != "db0:keys=1" || countAt() != first {
		t.Fatalf("with nothing committed since: %q, count retaken: %v", got, countAt() != first)
	}
	do("GET", "a") // a read commits nothing
	if keysLine(); countAt() != first {
		t.Fatal("a GET made the count be retaken")
	}
	// b must still be live at the INFO right after its SET: 300 ms was
	// only a few times the stalls seen between two requests under -race
	// on a loaded 2-core machine (about 100 ms).
	bDeadline := time.Now().Add(time.Second)
	do("SET", "b", "2", "PXAT", strconv.FormatInt(bDeadline.UnixMilli(), 10))
	if got := keysLine(); got != "db0:keys=2" {
		t.Fatalf("after a second SET: %q", got)
	}
	time.Sleep(time.Until(bDeadline) + 20*time.Millisecond)
	if got := keysLine(); got != "db0:keys=1" {
		t.Fatalf("after b's deadline: %q", got)
	}
	// A count that took long is reused though writes committed since.
	ts.s.lockKeyspace()
	ts.s.ks.took = time.Second
	ts.s.ks.at = time.Now()
	ts.s.unlockKeyspace()
	do("SET", "c", "3")
	if got := keysLine(); got != "db0:keys=1" {
		t.Fatalf("a long count was not reused: %q", got)
	}
	r.cmd("INFO", "mvkv")
	if got := r.reply(); !strings.Contains(got, "keyspace_count_seconds:1.000\r\n") || !strings.Contains(got, "keyspace_count_age_seconds:0.") {
		t.Fatalf("INFO mvkv: %q", got)
	}
	ts.s.lockKeyspace()
	ts.s.ks.at = time.Now().Add(-11 * time.Second)
	ts.s.unlockKeyspace()
	if got := keysLine(); got != "db0:keys=2" {
		t.Fatalf("a long count was reused past ten times its duration: %q", got)
	}
}

// TestInfoStatsCounters: keyspace_hits and keyspace_misses count the keys
// read commands look up as Redis's lookupKeyRead does (writes other than
// GETSET, GETDEL and GETEX, and scans, count nothing), the net byte
// totals grow with the traffic, and instantaneous_ops_per_sec follows
// the commands of the last second or so.
func TestInfoStatsCounters(t *testing.T) {
	ts := startServer(t, Config{})
	r := ts.raw(t)
	stat := func(name string) float64 {
		t.Helper()
		v := r.info("stats", name)
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("INFO stats %s: %q is not a number", name, v)
		}
		return f
	}
	for _, c := range [][]string{
		{"SET", "a", "1"}, {"INCR", "b"}, {"SET", "gone", "x", "PX", "1"}, // writes: nothing
		{"GET", "a"}, {"GET", "nope"}, // a hit, a miss
		{"MGET", "a", "b", "c"},               // two hits, a miss
		{"EXISTS", "a", "zz"},                 // a hit, a miss
		{"GETSET", "a", "2"}, {"GETDEL", "x"}, // a hit, a miss
		{"STRLEN", "b"}, {"TTL", "gone"}, // a hit; expired: a miss
		{"SCAN", "0"}, {"KEYS", "*"}, {"DBSIZE"}, // nothing
		{"SET", "b", "3", "GET"}, {"SET", "nn", "1", "GET"}, // a hit, a miss
	} {
		r.cmd(c...)
		r.reply()
		if len(c) > 1 && c[0] == "SET" && c[1] == "gone" {
			// Past its 1 ms for certain before TTL reads it: the
			// commands between can take less on a fast machine.
			time.Sleep(5 * time.Millisecond)
		}
	}
	if h, m := stat("keyspace_hits"), stat("keyspace_misses"); h != 7 || m != 6 {
		t.Fatalf("keyspace_hits %v, keyspace_misses %v; want 7 and 6", h, m)
	}
	in, out := stat("total_net_input_bytes"), stat("total_net_output_bytes")
	r.cmd("SET", "k", strings.Repeat("v", 1000))
	r.expect("+OK\r\n")
	if in2, out2 := stat("total_net_input_bytes"), stat("total_net_output_bytes"); in2 < in+1000 || out2 <= out {
		t.Fatalf("net bytes in %v -> %v, out %v -> %v after a 1,000-byte SET", in, in2, out, out2)
	}
	deadline := time.Now().Add(20 * time.Second)
	for stat("instantaneous_ops_per_sec") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("instantaneous_ops_per_sec stayed 0 while INFO was asked in a loop")
		}
		for range 50 {
			r.cmd("PING")
			r.expect("+PONG\r\n")
		}
	}
}

// TestInfoPersistence: INFO persistence reports Redis's save fields from
// checkpoints: the commits since the last one's redo point, its time, a
// background one in progress and how it ended, and the WAL's write status.
func TestInfoPersistence(t *testing.T) {
	ts := startServer(t, Config{})
	r := ts.raw(t)
	field := func(name string) string {
		t.Helper()
		return r.info("persistence", name)
	}
	r.cmd("SAVE")
	r.expect("+OK\r\n")
	if v := field("rdb_changes_since_last_save"); v != "0" {
		t.Fatalf("rdb_changes_since_last_save %s right after SAVE; want 0", v)
	}
	saved, _ := strconv.ParseInt(field("rdb_last_save_time"), 10, 64)
	if now := time.Now().Unix(); saved < now-60 || saved > now+1 {
		t.Fatalf("rdb_last_save_time %d, now %d", saved, now)
	}
	for _, k := range []string{"a", "b", "c"} {
		r.cmd("SET", k, "1")
		r.expect("+OK\r\n")
	}
	r.cmd("GET", "a")
	r.reply()
	if v := field("rdb_changes_since_last_save"); v != "3" {
		t.Fatalf("rdb_changes_since_last_save %s after three SETs and a GET; want 3", v)
	}
	r.cmd("BGSAVE")
	r.expect("+Background saving started\r\n")
	deadline := time.Now().Add(20 * time.Second)
	for field("rdb_bgsave_in_progress") != "0" {
		if time.Now().After(deadline) {
			t.Fatal("rdb_bgsave_in_progress still 1 after 20 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for name, want := range map[string]string{
		"rdb_changes_since_last_save": "0", "rdb_last_bgsave_status": "ok",
		"aof_last_write_status": "ok", "aof_rewrite_in_progress": "0",
	} {
		if v := field(name); v != want {
			t.Errorf("%s %s after BGSAVE; want %s", name, v, want)
		}
	}
}

// TestDBSizeReusesExactCount: DBSIZE answers from the kept keyspace count
// while it is exact, and counts again after a write, so its answer is
// always current.
func TestDBSizeReusesExactCount(t *testing.T) {
	ts := startServer(t, Config{})
	r := ts.raw(t)
	countAt := func() time.Time {
		ts.s.lockKeyspace()
		defer ts.s.unlockKeyspace()
		if ts.s.ks == nil {
			return time.Time{}
		}
		return ts.s.ks.at
	}
	r.cmd("SET", "a", "1")
	r.expect("+OK\r\n")
	r.cmd("DBSIZE")
	r.expect(":1\r\n")
	first := countAt()
	r.cmd("DBSIZE")
	r.expect(":1\r\n")
	if countAt() != first {
		t.Fatal("DBSIZE counted again with nothing committed since")
	}
	// A long count is reused by INFO while stale, never by DBSIZE.
	ts.s.lockKeyspace()
	ts.s.ks.took = time.Second
	ts.s.unlockKeyspace()
	r.cmd("SET", "b", "1")
	r.expect("+OK\r\n")
	r.cmd("DBSIZE")
	r.expect(":2\r\n")
	r.cmd("MULTI")
	r.expect("+OK\r\n")
	r.cmd("SET", "c", "1")
	r.expect("+QUEUED\r\n")
	r.cmd("DBSIZE")
	r.expect("+QUEUED\r\n")
	r.cmd("EXEC")
	r.expect("*2\r\n+OK\r\n:3\r\n")
}

// TestSlowlog: commands slower than slowlog-log-slower-than are logged,
// newest first, with Redis's fields and its cuts of long arguments;
// passwords (AUTH's, CONFIG SET requirepass's) are redacted; slowlog-max-len keeps the
// newest; EXEC's commands are logged, not EXEC.
func TestSlowlog(t *testing.T) {
	ts := startServer(t, Config{})
	r := ts.raw(t)
	do := func(args ...string) string {
		t.Helper()
		r.cmd(args...)
		return r.reply()
	}
	do("CLIENT", "SETNAME", "slowpoke")
	if got := do("SLOWLOG", "LEN"); got != ":0\r\n" {
		t.Fatalf("SLOWLOG LEN at start: %q", got)
	}
	do("CONFIG", "SET", "slowlog-log-slower-than", "0")
	do("SET", "k", strings.Repeat("v", 200))
	do("CONFIG", "SET", "requirepass", "sekrit")
	do("AUTH", "sekrit")
	do("CONFIG", "SET", "requirepass", "")
	do("MULTI")
	do("INCR", "n")
	do("EXEC")
	args := []string{"MSET"}
	for i := range 20 {
		args = append(args, fmt.Sprintf("a%d", i), "1")
	}
	do(args...)
	got := do("SLOWLOG", "GET", "-1")
	for _, want := range []string{
		"$4\r\nMSET\r\n", "*32\r\n", "$23\r\n... (10 more arguments)\r\n",
		"$4\r\nINCR\r\n",
		"$11\r\nrequirepass\r\n$10\r\n(redacted)\r\n",
		"$147\r\n" + strings.Repeat("v", 128) + "... (72 more bytes)\r\n",
		"$8\r\nslowpoke\r\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("SLOWLOG GET lacks %q:\n%q", want, got)
		}
	}
	if !strings.Contains(got, "*2\r\n$4\r\nAUTH\r\n$10\r\n(redacted)\r\n") {
		t.Errorf("SLOWLOG GET lacks AUTH with its password redacted:\n%q", got)
	}
	for _, absent := range []string{"sekrit", "$4\r\nEXEC\r\n"} {
		if strings.Contains(got, absent) {
			t.Errorf("SLOWLOG GET has %q:\n%q", absent, got)
		}
	}
	// Newest first: the MSET, then the INCR.
	if i, j := strings.Index(got, "MSET"), strings.Index(got, "INCR"); i < 0 || j < i {
		t.Errorf("SLOWLOG GET not newest first:\n%q", got)
	}
	do("CONFIG", "SET", "slowlog-max-len", "2")
	do("PING")
	if got := do("SLOWLOG", "LEN"); got != ":2\r\n" {
		t.Fatalf("SLOWLOG LEN with slowlog-max-len 2: %q", got)
	}
	// The log now holds the PING and the SLOWLOG LEN.
	if got := do("SLOWLOG", "GET", "1"); !strings.HasPrefix(got, "*1\r\n*6\r\n") || !strings.Contains(got, "$3\r\nLEN\r\n") {
		t.Fatalf("SLOWLOG GET 1: %q", got)
	}
	if got := do("SLOWLOG", "GET"); !strings.HasPrefix(got, "*2\r\n*6\r\n") || strings.Contains(got, "CONFIG") {
		t.Fatalf("SLOWLOG GET with slowlog-max-len 2: %q", got)
	}
	do("CONFIG", "SET", "slowlog-log-slower-than", "-1")
	do("SLOWLOG", "RESET")
	do("PING")
	if got := do("SLOWLOG", "LEN"); got != ":0\r\n" {
		t.Fatalf("SLOWLOG LEN with the log off: %q", got)
	}
}

// TestPauseWriteRepliesFirst: during CLIENT PAUSE WRITE, a pipeline whose
// read comes before a write gets the read's reply at once, as Redis sends
// it; the write's comes when the pause ends.
func TestPauseWriteRepliesFirst(t *testing.T) {
	ts := startServer(t, Config{})
	a, b := ts.raw(t), ts.raw(t)
	a.cmd("SET", "a", "old")
	a.expect("+OK\r\n")
	b.cmd("CLIENT", "PAUSE", "60000", "WRITE")
	b.expect("+OK\r\n")
	a.send("*2\r\n$3\r\nGET\r\n$1\r\na\r\n*3\r\n$3\r\nSET\r\n$1\r\na\r\n$3\r\nnew\r\n")
	a.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	a.expect("$3\r\nold\r\n") // not held until the pause ends
	noReplyYet(t, a, "SET during CLIENT PAUSE WRITE")
	b.cmd("CLIENT", "UNPAUSE")
	b.expect("+OK\r\n")
	a.expect("+OK\r\n")

	// A write queued in MULTI is held too, as Redis holds it before it
	// queues; a read is queued at once.
	a.cmd("MULTI")
	a.expect("+OK\r\n")
	b.cmd("CLIENT", "PAUSE", "60000", "WRITE")
	b.expect("+OK\r\n")
	a.cmd("GET", "a")
	a.expect("+QUEUED\r\n")
	a.cmd("SET", "a", "newer")
	noReplyYet(t, a, "SET queued in MULTI during CLIENT PAUSE WRITE")
	b.cmd("CLIENT", "UNPAUSE")
	b.expect("+OK\r\n")
	a.expect("+QUEUED\r\n")
	a.cmd("EXEC")
	a.expect("*2\r\n$3\r\nnew\r\n+OK\r\n")
}

// TestShutdownNotHeldByStalledClient: a client that pipelines requests
// and never reads the replies does not hold a shutdown until its timeout.
func TestShutdownNotHeldByStalledClient(t *testing.T) {
	s, ts := serveBare(t, Config{ShutdownTimeout: time.Minute})
	nc, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// Replies far larger than the socket buffers: the server's write of
	// them blocks.
	big := strings.Repeat("v", 100_000)
	if _, err := fmt.Fprintf(nc, "*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n$%d\r\n%s\r\n", len(big), big); err != nil {
		t.Fatal(err)
	}
	go func() {
		req := strings.Repeat("*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n", 200)
		for range 50 {
			if _, err := io.WriteString(nc, req); err != nil {
				return
			}
		}
	}()
	time.Sleep(500 * time.Millisecond)
	// Without the bound on writes at shutdown, this ends at its deadline
	// with the connection still open.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown with a client not reading its replies: %v", err)
	}
}

// TestConfigLogLevel: CONFIG SET loglevel changes the level of the
// logger's handler the server was given, under Redis's names.
func TestConfigLogLevel(t *testing.T) {
	var lv slog.LevelVar
	var buf logBuffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: &lv}))
	ts := startServer(t, Config{Logger: log, LogLevel: &lv})
	r := ts.raw(t)
	r.cmd("CONFIG", "GET", "loglevel")
	r.expect("*2\r\n$8\r\nloglevel\r\n$6\r\nnotice\r\n")
	r.cmd("CONFIG", "SET", "loglevel", "WARNING")
	r.expect("+OK\r\n")
	if lv.Level() != slog.LevelWarn {
		t.Fatalf("level %v after CONFIG SET loglevel WARNING", lv.Level())
	}
	r.cmd("CONFIG", "GET", "loglevel")
	r.expect("*2\r\n$8\r\nloglevel\r\n$7\r\nwarning\r\n")
	r.cmd("CONFIG", "SET", "loglevel", "debug")
	r.expect("+OK\r\n")
	r.cmd("CONFIG", "SET", "loglevel", "loud")
	if got := r.reply(); !strings.HasPrefix(got, "-ERR CONFIG SET failed (possibly related to argument 'loglevel') - argument(s) must be one of") {
		t.Fatalf("CONFIG SET loglevel loud: %q", got)
	}
	if lv.Level() != slog.LevelDebug {
		t.Fatalf("level %v after a refused CONFIG SET", lv.Level())
	}
}

// TestShutdownEndsPause: a write held by CLIENT PAUSE WRITE does not hold
// a shutdown until its timeout.
func TestShutdownEndsPause(t *testing.T) {
	s, ts := serveBare(t, Config{ShutdownTimeout: time.Minute})
	a, b := ts.raw(t), ts.raw(t)
	a.cmd("CLIENT", "PAUSE", "60000", "WRITE")
	a.expect("+OK\r\n")
	b.cmd("SET", "x", "1")
	noReplyYet(t, b, "SET during CLIENT PAUSE WRITE")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown with a write held by CLIENT PAUSE: %v", err)
	}
}

// serveBare starts a server with cfg over a new database, without the
// test server's cleanup: the test shuts it down itself.
func serveBare(t *testing.T, cfg Config) (*Server, *testServer) {
	t.Helper()
	db, err := engine.Open(t.TempDir(), engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s := New(db, cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(context.Background(), ln)
	return s, &testServer{addr: ln.Addr().String()}
}

// TestWaitBlocks: WAIT for replicas (there are none) blocks as Redis's
// BLOCKED_WAIT: CLIENT LIST shows flag b and INFO blocked_clients counts
// it; CLIENT UNBLOCK ends it (TIMEOUT: WAIT answers 0; ERROR: an
// UNBLOCKED error) and answers 1, or 0 for a client not blocked; and a
// shutdown ends it rather than wait for it.
func TestWaitBlocks(t *testing.T) {
	s, ts := serveBare(t, Config{ShutdownTimeout: time.Minute})
	a, b := ts.raw(t), ts.raw(t)
	a.cmd("CLIENT", "ID")
	id := strings.TrimSuffix(strings.TrimPrefix(a.reply(), ":"), "\r\n")
	blocked := func() {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; {
			if b.info("clients", "blocked_clients") == "1" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("blocked_clients never reached 1 during WAIT")
			}
			time.Sleep(10 * time.Millisecond)
		}
		b.cmd("CLIENT", "LIST", "ID", id)
		if l := b.reply(); !strings.Contains(l, " flags=b ") {
			t.Fatalf("CLIENT LIST of a client in WAIT: %q; want flags=b", l)
		}
	}
	b.cmd("CLIENT", "UNBLOCK", id)
	b.expect(":0\r\n")
	for _, c := range []struct{ reason, reply string }{
		{"TIMEOUT", ":0\r\n"},
		{"ERROR", "-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n"},
	} {
		a.cmd("WAIT", "1", "0")
		blocked()
		b.cmd("CLIENT", "UNBLOCK", id, c.reason)
		b.expect(":1\r\n")
		a.expect(c.reply)
		if n := b.info("clients", "blocked_clients"); n != "0" {
			t.Fatalf("blocked_clients %s after CLIENT UNBLOCK", n)
		}
	}
	a.cmd("WAIT", "1", "0")
	blocked()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown with a client in WAIT 1 0: %v (after %v)", err, time.Since(start))
	}
}

// TestScanCursorOfAnotherServer: a SCAN cursor handed out by one server is
// invalid at another over the same database, as after a restart: the
// numbers used to start at 1 in every server, so an old cursor named a
// position of another scan, and the resumed scan skipped keys without an
// error.
func TestScanCursorOfAnotherServer(t *testing.T) {
	ctx := context.Background()
	a := startServer(t, Config{})
	ra := a.client(t)
	for i := range 30 {
		if err := ra.Set(ctx, fmt.Sprintf("k%02d", i), "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	_, cur, err := ra.Scan(ctx, 0, "", 10).Result()
	if err != nil || cur == 0 {
		t.Fatalf("SCAN 0: cursor %d, %v", cur, err)
	}
	// A second server over the same database, as a restart starts one,
	// with a scan of its own under way.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := New(a.db, Config{})
	done := make(chan error, 1)
	go func() { done <- b.Serve(ctx, ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		b.Shutdown(sctx)
		<-done
	}()
	rb := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), MaxRetries: -1})
	defer rb.Close()
	if _, _, err := rb.Scan(ctx, 0, "", 10).Result(); err != nil {
		t.Fatal(err)
	}
	if err := rb.Do(ctx, "SCAN", cur).Err(); err == nil || err.Error() != "ERR invalid cursor" {
		t.Fatalf("SCAN %d, a cursor of another server: %v; want ERR invalid cursor", cur, err)
	}
}

// TestAppendfsyncFollowsSynchronousCommit: appendfsync reports the
// commit mode in force, whichever of the two parameters set it last.
func TestAppendfsyncFollowsSynchronousCommit(t *testing.T) {
	ts := startServer(t, Config{})
	r := ts.raw(t)
	get := func(want string) {
		t.Helper()
		r.cmd("CONFIG", "GET", "appendfsync")
		r.expect(fmt.Sprintf("*2\r\n$11\r\nappendfsync\r\n$%d\r\n%s\r\n", len(want), want))
	}
	for _, c := range [][]string{
		{"appendfsync", "always", "always"},
		{"synchronous_commit", "off", "everysec"},
		{"synchronous_commit", "on", "always"},
		{"appendfsync", "no", "no"},
		{"synchronous_commit", "on", "always"},
		{"synchronous_commit", "off", "no"},
	} {
		r.cmd("CONFIG", "SET", c[0], c[1])
		r.expect("+OK\r\n")
		get(c[2])
	}
}

// TestInfoChunkCounters: INFO mvkv counts the out-of-line value chunks
// each kind of pruning freed (a writer's, a reader's: only those of
// aborted writes) and those vacuum freed: a deleted value of three chunks
// is three, after VACUUM, and no prune freed any.
func TestInfoChunkCounters(t *testing.T) {
	ts := startServer(t, Config{})
	r := ts.raw(t)
	r.cmd("SET", "big", strings.Repeat("v", 3*8128))
	r.expect("+OK\r\n")
	r.cmd("DEL", "big")
	r.expect(":1\r\n")
	r.cmd("VACUUM")
	r.expect("+OK\r\n")
	for name, want := range map[string]string{"vacuum_chunks_removed": "3", "vacuum_chunks_owed": "0", "chunks_pruned_by_update": "0", "chunks_pruned_by_read": "0"} {
		if got := r.info("mvkv", name); got != want {
			t.Errorf("INFO mvkv %s:%s, want %s", name, got, want)
		}
	}
}

// TestInfoDeadTuples: INFO mvkv shows the dead tuples autovacuum counts
// (an overwrite leaves one), and VACUUM pays them.
func TestInfoDeadTuples(t *testing.T) {
	ts := startServer(t, Config{})
	r := ts.raw(t)
	for _, v := range []string{"a", "b"} {
		r.cmd("SET", "k", v)
		r.expect("+OK\r\n")
	}
	if got := r.info("mvkv", "vacuum_dead_tuples"); got != "1" {
		t.Errorf("after an overwrite INFO mvkv vacuum_dead_tuples:%s, want 1", got)
	}
	r.cmd("VACUUM")
	r.expect("+OK\r\n")
	if got := r.info("mvkv", "vacuum_dead_tuples"); got != "0" {
		t.Errorf("after VACUUM INFO mvkv vacuum_dead_tuples:%s, want 0", got)
	}
}
