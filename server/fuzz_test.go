package server

import (
	"strings"
	"testing"
)

// Pieces the fuzz target builds commands from: three keys, so that
// commands collide on them, and values and numbers at the edges.
var (
	fuzzKeys   = []string{"a", "b", "c"}
	fuzzValues = []string{"", "0", "1", "-1", "10", "abc", "x", "9223372036854775807", "1.5", "\xff\x00", "3.0e3", " 1"}
	fuzzInts   = []string{"0", "1", "-1", "3", "100", "x", "-100", "7", "9223372036854775807", "-9223372036854775808", "9223372036854775800", "4294967296"}
)

// fuzzOps are the commands the fuzz target sends: each takes the next
// bytes of the input to pick its arguments. Commands whose replies depend
// on time, on memory layout or on Redis's hash order are left out.
var fuzzOps = []func(next func(n int) int) []string{
	func(n func(int) int) []string { return []string{"GET", k(n)} },
	func(n func(int) int) []string { return []string{"SET", k(n), v(n)} },
	func(n func(int) int) []string {
		return []string{"SET", k(n), v(n), []string{"NX", "XX", "GET", "KEEPTTL"}[n(4)]}
	},
	func(n func(int) int) []string { return []string{"DEL", k(n), k(n)} },
	func(n func(int) int) []string { return []string{"EXISTS", k(n), k(n), k(n)} },
	func(n func(int) int) []string { return []string{"INCR", k(n)} },
	func(n func(int) int) []string { return []string{"INCRBY", k(n), i(n)} },
	func(n func(int) int) []string { return []string{"DECR", k(n)} },
	func(n func(int) int) []string { return []string{"APPEND", k(n), v(n)} },
	func(n func(int) int) []string { return []string{"STRLEN", k(n)} },
	func(n func(int) int) []string { return []string{"SETNX", k(n), v(n)} },
	func(n func(int) int) []string { return []string{"GETSET", k(n), v(n)} },
	func(n func(int) int) []string { return []string{"GETDEL", k(n)} },
	func(n func(int) int) []string { return []string{"GETRANGE", k(n), i(n), i(n)} },
	func(n func(int) int) []string { return []string{"SETRANGE", k(n), i(n), v(n)} },
	func(n func(int) int) []string { return []string{"MSET", k(n), v(n), k(n), v(n)} },
	func(n func(int) int) []string { return []string{"MGET", k(n), k(n), k(n)} },
	func(n func(int) int) []string { return []string{"MSETNX", k(n), v(n), k(n), v(n)} },
	func(n func(int) int) []string { return []string{"INCRBYFLOAT", k(n), v(n)} },
	func(n func(int) int) []string { return []string{"SETBIT", k(n), i(n), []string{"0", "1", "2"}[n(3)]} },
	func(n func(int) int) []string { return []string{"GETBIT", k(n), i(n)} },
	func(n func(int) int) []string { return []string{"BITCOUNT", k(n), i(n), i(n)} },
	func(n func(int) int) []string { return []string{"BITPOS", k(n), []string{"0", "1"}[n(2)], i(n)} },
	func(n func(int) int) []string {
		return []string{"BITOP", []string{"AND", "OR", "XOR", "NOT"}[n(4)], k(n), k(n)}
	},
	func(n func(int) int) []string {
		return []string{"LCS", k(n), k(n), []string{"LEN", "IDX", "WITHMATCHLEN"}[n(3)]}
	},
	func(n func(int) int) []string { return []string{"RENAME", k(n), k(n)} },
	func(n func(int) int) []string { return []string{"RENAMENX", k(n), k(n)} },
	func(n func(int) int) []string { return []string{"COPY", k(n), k(n), []string{"REPLACE", "X"}[n(2)]} },
	func(n func(int) int) []string { return []string{"UNLINK", k(n)} },
	func(n func(int) int) []string { return []string{"TOUCH", k(n), k(n)} },
	func(n func(int) int) []string { return []string{"TYPE", k(n)} },
	func(n func(int) int) []string {
		return []string{"EXPIRE", k(n), "100000", []string{"NX", "XX", "GT", "LT"}[n(4)]}
	},
	func(n func(int) int) []string { return []string{"PERSIST", k(n)} },
	func(n func(int) int) []string { return []string{"GETEX", k(n), []string{"PERSIST", "EX", "FOO"}[n(3)]} },
	func(n func(int) int) []string { return []string{"MULTI"} },
	func(n func(int) int) []string { return []string{"EXEC"} },
	func(n func(int) int) []string { return []string{"DISCARD"} },
	func(n func(int) int) []string { return []string{"WATCH", k(n)} },
	func(n func(int) int) []string { return []string{"DBSIZE"} },
	func(n func(int) int) []string { return []string{"FLUSHDB"} },
}

func k(n func(int) int) string { return fuzzKeys[n(len(fuzzKeys))] }
func v(n func(int) int) string { return fuzzValues[n(len(fuzzValues))] }
func i(n func(int) int) string { return fuzzInts[n(len(fuzzInts))] }

// FuzzRepliesMatchRedis sends random command sequences built from data to
// mvkv and to a real redis-server (skipped without one) and compares every
// reply byte for byte. The seed corpus runs in the default test run;
// `go test -fuzz FuzzRepliesMatchRedis ./server` explores further.
func FuzzRepliesMatchRedis(f *testing.F) {
	for _, seed := range []string{
		"\x01\x00\x02\x05\x00\x10\x01\x11\x02\x12",
		"\x22\x01\x00\x03\x05\x02\x01\x04\x23",
		"\x12\x00\x01\x13\x00\x02\x18\x00\x01\x01\x19\x01\x02\x00",
		"\x25\x00\x22\x01\x01\x04\x23\x00\x00\x01\x27",
		"\x1a\x00\x01\x1b\x01\x00\x1c\x00\x02\x00\x1d\x00",
	} {
		f.Add([]byte(seed))
	}
	redis := startRedis(f)
	ts := startServer(f, Config{})
	mvkv := ts.raw(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 512 {
			return
		}
		rd, mv := &raw{t, redis.nc, redis.br}, &raw{t, mvkv.nc, mvkv.br}
		var log []string
		send := func(args ...string) {
			rd.cmd(args...)
			mv.cmd(args...)
			want, got := rd.reply(), mv.reply()
			log = append(log, strings.Join(args, " "))
			if got != want {
				t.Fatalf("after %q:\ngot   %q\nRedis %q", log, got, want)
			}
		}
		send("DISCARD") // leave a MULTI of the last input
		send("UNWATCH")
		send("FLUSHALL")
		pos := 0
		next := func(n int) int {
			if pos >= len(data) {
				return 0
			}
			b := int(data[pos])
			pos++
			return b % n
		}
		for pos < len(data) {
			send(fuzzOps[next(len(fuzzOps))](next)...)
		}
	})
}
