package server

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/redcon"
)

// The slow log, as Redis's slowlog.c: the last slowlog-max-len commands
// that took longer than slowlog-log-slower-than microseconds, newest
// first, each with an id, its Unix time, its duration, its arguments
// (at most 32, each cut to 128 bytes, as Redis), and the client's address
// and name. A command's time runs from when the server began it to when
// its reply is ready, so a write's includes its wait for the WAL flush
// that makes it durable (with synchronous_commit on): a slow fsync shows
// here as slow SETs. A pipelined write's reply is ready before its flush,
// and its time does not include it. Passwords are shown as "(redacted)",
// as Redis redacts them: AUTH's arguments, HELLO's AUTH username and
// password, CONFIG SET requirepass's value.

const (
	slowlogMaxArgc   = 32  // Redis's SLOWLOG_ENTRY_MAX_ARGC
	slowlogMaxString = 128 // Redis's SLOWLOG_ENTRY_MAX_STRING
)

// slowlog holds the entries and the two knobs.
type slowlog struct {
	slowerThan atomic.Int64 // microseconds; negative: log nothing
	maxLen     atomic.Int64

	mu      sync.Mutex
	nextID  int64       // guarded by mu
	entries []slowEntry // guarded by mu; oldest first
}

type slowEntry struct {
	id, at, micros int64
	args           [][]byte
	addr, name     string
}

// add logs a command that took d if it was slow enough.
func (l *slowlog) add(c *conn, args [][]byte, d time.Duration) {
	limit := l.slowerThan.Load()
	micros := d.Microseconds()
	if limit < 0 || micros < limit {
		return
	}
	e := slowEntry{at: time.Now().Unix(), micros: micros, args: slowlogArgs(args), addr: c.nc.RemoteAddr().String()}
	c.mu.Lock()
	e.name = c.name
	c.mu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	e.id = l.nextID
	l.nextID++
	l.entries = append(l.entries, e)
	l.trim()
}

// trim drops the oldest entries beyond slowlog-max-len. Caller holds mu.
func (l *slowlog) trim() {
	if n := len(l.entries) - int(l.maxLen.Load()); n > 0 {
		l.entries = append(l.entries[:0], l.entries[n:]...)
	}
}

// slowlogArgs copies a command's arguments as Redis's slowlogCreateEntry
// keeps them: at most 32, the last then saying how many more there were,
// each at most 128 bytes, a longer one saying how many bytes more; a
// password set with CONFIG SET is redacted.
func slowlogArgs(args [][]byte) [][]byte {
	n := min(len(args), slowlogMaxArgc)
	out := make([][]byte, n)
	for i := range n {
		if i == slowlogMaxArgc-1 && len(args) > slowlogMaxArgc {
			out[i] = fmt.Appendf(nil, "... (%d more arguments)", len(args)-slowlogMaxArgc+1)
			break
		}
		a := args[i]
		if redacted(args, i) {
			out[i] = []byte("(redacted)")
			continue
		}
		if len(a) > slowlogMaxString {
			out[i] = fmt.Appendf(append([]byte(nil), a[:slowlogMaxString]...), "... (%d more bytes)", len(a)-slowlogMaxString)
			continue
		}
		out[i] = append([]byte(nil), a...)
	}
	return out
}

// redacted reports whether args[i] is a password, which the slow log does
// not show, as Redis's redactClientCommandArgument.
func redacted(args [][]byte, i int) bool {
	name := lower(args[0])
	switch {
	case name == "auth":
		return i >= 1
	case name == "hello":
		// HELLO [protover [AUTH username password] [SETNAME name]]
		for j := 2; j+2 < len(args); j++ {
			if strings.EqualFold(string(args[j]), "auth") {
				return i == j+1 || i == j+2
			}
		}
	case name == "config" && i >= 3 && i%2 == 1:
		return strings.EqualFold(string(args[1]), "set") && strings.EqualFold(string(args[i-1]), "requirepass")
	}
	return false
}

// cmdSlowlog is SLOWLOG GET [count] | LEN | RESET | HELP.
func cmdSlowlog(x *execCtx, args [][]byte) error {
	l := &x.c.s.slowlog
	sub := strings.ToLower(string(args[1]))
	switch {
	case sub == "help" && len(args) == 2:
		x.out = appendHelp(x.out, "SLOWLOG",
			"GET [<count>]",
			"    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
			"    Entries are made of:",
			"    id, timestamp, time in microseconds, arguments array, client IP and port,",
			"    client name",
			"LEN",
			"    Return the length of the slowlog.",
			"RESET",
			"    Reset the slowlog.")
	case sub == "len" && len(args) == 2:
		l.mu.Lock()
		n := len(l.entries)
		l.mu.Unlock()
		x.out = redcon.AppendInt(x.out, int64(n))
	case sub == "reset" && len(args) == 2:
		l.mu.Lock()
		l.entries = nil
		l.mu.Unlock()
		x.ok()
	case sub == "get" && len(args) <= 3:
		count := int64(10)
		if len(args) == 3 {
			n, ok := parseInt(args[2])
			if !ok || n < -1 {
				x.errorf("ERR count should be greater than or equal to -1")
				return nil
			}
			count = n
		}
		l.mu.Lock()
		n := len(l.entries)
		if count >= 0 && count < int64(n) {
			n = int(count)
		}
		x.out = redcon.AppendArray(x.out, n)
		for i := range n {
			e := &l.entries[len(l.entries)-1-i]
			x.out = redcon.AppendArray(x.out, 6)
			x.out = redcon.AppendInt(x.out, e.id)
			x.out = redcon.AppendInt(x.out, e.at)
			x.out = redcon.AppendInt(x.out, e.micros)
			x.out = redcon.AppendArray(x.out, len(e.args))
			for _, a := range e.args {
				x.out = redcon.AppendBulk(x.out, a)
			}
			x.out = redcon.AppendBulkString(x.out, e.addr)
			x.out = redcon.AppendBulkString(x.out, e.name)
		}
		l.mu.Unlock()
	case sub == "get":
		x.errorf("ERR unknown subcommand or wrong number of arguments for '%s'. Try SLOWLOG HELP.", trunc(args[1], 128))
	case sub == "len" || sub == "reset" || sub == "help":
		x.errorf("ERR wrong number of arguments for 'slowlog|%s' command", sub)
	default:
		x.errorf("ERR unknown subcommand '%s'. Try SLOWLOG HELP.", trunc(args[1], 128))
	}
	return nil
}
