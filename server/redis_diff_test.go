package server

import (
	"bufio"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// redisDiffScript is a session sent to both mvkv and a real redis-server;
// every reply must be byte for byte the same. Left out on purpose: empty
// keys (the engine refuses them), SELECT of another database, CLIENT
// SETINFO (Redis 7.2; Debian's 7.0 lacks it), COMMAND INFO and DOCS (the
// tables differ), connection ids, and the engine's own CONFIG knobs.
var redisDiffScript = []string{
	"FLUSHALL", "PING", "PING a", "PING a b", "ECHO", "ECHO x y", "ECHO hi",
	"GET", "GET a b", "GET missing", "SET", "SET k", "SET k v", "GET k",
	"SET k v NX XX", "SET k v EX", "SET k v EX 0", "SET k v EX -1", "SET k v EX abc",
	"SET k v PX 0", "SET k v EXAT 0", "SET k v KEEPTTL EX 10", "SET k v EX 10 KEEPTTL",
	"SET k v FOO", "SET k w GET", "SET nx v NX GET", "SET nx w NX GET", "SET xx v XX GET",
	"SET k v EX 9223372036854775807", "SET k v PX 9223372036854775807",
	"INCR k", "INCRBY k 1", "INCRBY n x", "INCRBY n 1.5", "INCR n", "DECR n", "DECRBY n 10",
	"DECRBY n 9223372036854775808", "DECRBY n -9223372036854775808",
	"SET max 9223372036854775807", "INCR max", "SET min -9223372036854775808", "DECR min",
	"DEL", "DEL a b c", "EXISTS", "EXISTS a k k", "MGET", "MGET a k", "MSET", "MSET a",
	"MSET a 1 b", "MSET a 1 b 2", "MGET a b c", "TYPE a", "TYPE zz", "TYPE",
	"DBSIZE x", "SELECT", "SELECT 0", "SELECT x", "SELECT -1",
	"SCAN", "SCAN x", "SCAN 0 COUNT 0", "SCAN 0 COUNT -1", "SCAN 0 COUNT x", "SCAN 0 MATCH", "SCAN 0 FOO bar",
	"TTL", "TTL a", "TTL zz", "PTTL zz", "EXPIRE a", "EXPIRE a x", "EXPIRE a 10 FOO",
	"EXPIRE a 10 NX XX", "EXPIRE a 10 GT LT", "EXPIRE zz 10", "EXPIRE a 9223372036854775807",
	"PEXPIRE a 9223372036854775807", "EXPIREAT a 9223372036854775807", "EXPIRE a -9223372036854775808",
	"PERSIST", "PERSIST a", "PERSIST zz", "EXPIRE a 100", "TTL a", "EXPIRE a 100 NX", "EXPIRE a 50 GT",
	"EXPIRE a 200 GT", "TTL a", "PEXPIRE a 1000000 LT", "PERSIST a", "TTL a", "EXPIRE a -1", "EXISTS a",
	"SET t v EX 100", "INCR t", "SET c 5 EX 100", "INCR c", "TTL c", "SET c 6", "TTL c",
	"SET c 7 PX 100000 KEEPTTL", "SET c 7 EX 100", "SET c 8 KEEPTTL", "TTL c", "GET c",
	"MULTI", "MULTI", "EXEC", "MULTI", "FOO", "EXEC", "EXEC", "DISCARD", "MULTI", "WATCH a", "DISCARD",
	"WATCH", "UNWATCH x", "UNWATCH", "MULTI", "SET a 1", "GET a", "INCR a", "INCR b", "EXEC",
	"MULTI", "SET a", "EXEC", "WATCH a", "MULTI", "EXEC", "WATCH a", "SET a 2", "MULTI", "GET a", "EXEC",
	"CLIENT", "CLIENT FOO", "CLIENT SETNAME", "CLIENT SETNAME x y", "CLIENT SETNAME ok", "CLIENT GETNAME",
	"CLIENT GETNAME x", "CLIENT ID x", "CLIENT LIST ID x", "CLIENT LIST TYPE foo", "CLIENT LIST TYPE pubsub",
	"CLIENT LIST FOO",
	"CONFIG", "CONFIG FOO", "CONFIG GET", "CONFIG SET", "CONFIG SET maxclients", "CONFIG SET nosuch 1",
	"CONFIG SET maxclients x", "CONFIG SET maxclients 0", "CONFIG GET nosuch", "CONFIG SET maxclients 10000",
	"CONFIG GET maxclients", "CONFIG SET timeout 0", "CONFIG GET timeout", "CONFIG SET timeout -1",
	"CONFIG SET timeout x", "CONFIG SET maxclients 10000 timeout", "CONFIG RESETSTAT",
	"COMMAND FOO", "COMMAND COUNT x",
	"HELLO x", "HELLO 1", "HELLO 4", "HELLO 2 FOO", "HELLO 2 AUTH", "HELLO 2 SETNAME",
	"AUTH", "AUTH a", "AUTH a b", "AUTH a b c",
	"FLUSHALL x", "FLUSHALL SYNC", "FLUSHALL ASYNC x", "DBSIZE", "SHUTDOWN FOO", "SHUTDOWN ABORT",
	"SHUTDOWN NOSAVE SAVE", "SHUTDOWN NOW ABORT", "SHUTDOWN NOW FORCE ABORT",
	"EXEC a1", "MULTI", "SET q 1", "EXEC a1", "EXEC", "GET q", "WATCH q", "EXEC x", "MULTI", "EXEC",
	"CONFIG SET timeout 0 timeout 1", "CONFIG SET timeout 5 maxclients abc", "CONFIG GET timeout",
	"CONFIG GET MAXCLIENTS", "CONFIG GET maxclients MAXCLIENTS", "CONFIG HELP", "CONFIG HELP x",
	"COMMAND GETKEYS MSET a 1 b", "COMMAND GETKEYS GET", "COMMAND GETKEYS PING x", "COMMAND GETKEYS GET a b",
	"COMMAND GETKEYS SET a", "COMMAND GETKEYS DEL a b c", "COMMAND GETKEYS DBSIZE x", "COMMAND GETKEYS NOPE x",
	"COMMAND GETKEYS set k v EX 10", "CLIENT HELP x", "CLIENT INFO x",
	"COMMAND GETKEYS watch a b", "CONFIG SET timeout 5 TIMEOUT 6", "CONFIG RESETSTAT x",
}

// TestRepliesMatchRedis runs redisDiffScript against a real redis-server
// (skipped when none is installed) and against the server, and compares
// every reply.
func TestRepliesMatchRedis(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server not installed (apt-get install redis-server)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var nc net.Conn
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if nc, err = net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server did not start: %v", err)
		}
	}
	defer nc.Close()
	redis := &raw{t, nc, bufio.NewReader(nc)}
	ts := startServer(t, Config{})
	mvkv := ts.raw(t)
	for _, line := range redisDiffScript {
		args := strings.Fields(line)
		redis.cmd(args...)
		mvkv.cmd(args...)
		if want, got := redis.reply(), mvkv.reply(); got != want {
			t.Errorf("%s: got %q, Redis %q", line, got, want)
		}
	}
}

// TestHelpSubcommands: the error for an unknown subcommand says "Try
// CLIENT HELP" (and CONFIG, COMMAND), so HELP must answer, in Redis's
// form: a heading, the subcommands, and HELP itself last.
func TestHelpSubcommands(t *testing.T) {
	ts := startServer(t, Config{})
	r := ts.raw(t)
	for _, c := range []struct{ cmd, sub string }{{"CLIENT", "SETNAME <name>"}, {"CONFIG", "SET <directive> <value>"}, {"COMMAND", "GETKEYS <full-command>"}} {
		r.cmd(c.cmd, "HELP")
		got := r.reply()
		if !strings.HasPrefix(got, "*") || !strings.Contains(got, "+"+c.cmd+" <subcommand> [<arg> [value] [opt] ...]. Subcommands are:\r\n") ||
			!strings.Contains(got, "+"+c.sub+"\r\n") || !strings.HasSuffix(got, "+HELP\r\n+    Prints this help.\r\n") {
			t.Errorf("%s HELP: %q", c.cmd, got)
		}
	}
	r.cmd("CLIENT", "SETNAME", "me")
	r.expect("+OK\r\n")
	r.cmd("CLIENT", "INFO")
	if got := r.reply(); !strings.Contains(got, " name=me ") || strings.Count(got, "id=") != 1 {
		t.Errorf("CLIENT INFO: %q", got)
	}
}
