package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/redcon"

	"mvkv/engine"
)

// A knob is one CONFIG GET/SET parameter. Engine knobs take PostgreSQL's
// names, server limits Redis's.
type knob struct {
	get func(s *Server) string
	set func(s *Server, v string) error // nil: read-only
	// same names the parameter this one is another name of (Redis's
	// ziplist aliases of the listpack parameters), or that sets the same
	// state (appendfsync sets synchronous_commit); "" for none. CONFIG SET
	// refuses the two in one call as a duplicate parameter, as Redis
	// refuses a parameter and its alias.
	same string
}

// knobs are the CONFIG parameters: the server's own, and every engine
// setting (engine.Settings), which withEngineSettings adds.
var knobs = withEngineSettings(map[string]knob{
	// synchronous_commit is the server's own as well as the engine's:
	// the server begins its transactions with it, and appendfsync sets
	// it too.
	"synchronous_commit": {
		get: func(s *Server) string { return engine.SynchronousCommit(s.syncCommit.Load()).String() },
		set: func(s *Server, v string) error {
			sc, err := engine.ParseSynchronousCommit(v)
			if err != nil {
				return settingError(err)
			}
			s.syncCommit.Store(int32(sc))
			return s.db.SetSynchronousCommit(sc) // parsed: on or off
		},
	},
	"maxclients": {
		get: func(s *Server) string { return strconv.FormatInt(s.maxClients.Load(), 10) },
		set: func(s *Server, v string) error {
			n, err := ParseMaxClients(v)
			if err != nil {
				return err
			}
			s.maxClients.Store(int64(n))
			return nil
		},
	},
	// dir is Redis's working directory, where its files live: here the
	// data directory, fixed while the server runs.
	"dir": {get: func(s *Server) string {
		if d, err := filepath.Abs(s.db.Dir()); err == nil {
			return d
		}
		return s.db.Dir()
	}},
	"slowlog-log-slower-than": atomicIntKnob(func(s *Server) *atomic.Int64 { return &s.slowlog.slowerThan }, -1, math.MaxInt64),
	"slowlog-max-len":         atomicIntKnob(func(s *Server) *atomic.Int64 { return &s.slowlog.maxLen }, 0, math.MaxInt64),
	"loglevel": {
		get: func(s *Server) string {
			if s.cfg.LogLevel == nil {
				return "notice"
			}
			return LogLevelName(s.cfg.LogLevel.Level())
		},
		set: func(s *Server, v string) error {
			l, err := ParseLogLevel(v)
			if err != nil {
				return err
			}
			if s.cfg.LogLevel == nil {
				return errors.New("the server's logger has no level to change")
			}
			s.cfg.LogLevel.Set(l)
			return nil
		},
	},
	"hz": {
		get: func(s *Server) string { return strconv.FormatInt(s.hz.Load(), 10) },
		set: func(s *Server, v string) error {
			n, err := ParseHz(v)
			if err != nil {
				return err
			}
			s.hz.Store(int64(n))
			select {
			case s.hzChanged <- struct{}{}:
			default: // the cron has a change to pick up already
			}
			return nil
		},
	},
	"timeout": {
		get: func(s *Server) string { return strconv.FormatInt(s.timeout.Load()/int64(time.Second), 10) },
		set: func(s *Server, v string) error {
			d, err := ParseTimeout(v)
			if err != nil {
				return err
			}
			s.timeout.Store(int64(d))
			return nil
		},
	},
	// proto-max-bulk-len goes no higher than the engine's value limit:
	// a longer argument could never be stored, and is refused anyway.
	"proto-max-bulk-len":        limitKnob(func(l *Limits) *int64 { return &l.MaxBulkLen }, 1<<20, maxBulkLen),
	"client-query-buffer-limit": limitKnob(func(l *Limits) *int64 { return &l.QueryBufferLimit }, 1<<20, math.MaxInt64),
	// appendfsync maps onto synchronous_commit: always is on (every
	// acknowledged write is durable); everysec and no are off, whose WAL
	// writer makes a commit durable within about one wal_writer_delay
	// (200 ms by default) and the write and fdatasync that follow, inside
	// Redis's second for everysec.
	"appendfsync": {
		same: "synchronous_commit",
		get: func(s *Server) string {
			if engine.SynchronousCommit(s.syncCommit.Load()) == engine.SyncCommitOn {
				return "always"
			}
			return s.param("appendfsync", "everysec")
		},
		set: func(s *Server, v string) error {
			sc := engine.SyncCommitOff
			switch v = strings.ToLower(v); v {
			case "always":
				sc = engine.SyncCommitOn
			case "everysec", "no":
			default:
				return errors.New("argument(s) must be one of the following: everysec, always, no")
			}
			if sc == engine.SyncCommitOff {
				// Kept for the getter while commits are asynchronous,
				// whichever parameter turned them off.
				s.setParam("appendfsync", v)
			}
			s.syncCommit.Store(int32(sc))
			return s.db.SetSynchronousCommit(sc) // parsed: on or off
		},
	},
	// appendonly is always yes: the WAL is where every write goes first.
	"appendonly": {
		get: func(*Server) string { return "yes" },
		set: func(_ *Server, v string) error {
			switch strings.ToLower(v) {
			case "yes":
				return nil
			case "no":
				return errors.New("argument must be 'yes' (the write-ahead log cannot be turned off)")
			}
			return errors.New("argument must be 'yes' or 'no'")
		},
	},
	// save is accepted and reported; checkpoints (what a save is here)
	// follow checkpoint_timeout and max_wal_size instead of it.
	"save": {
		get: func(s *Server) string { return s.param("save", "") },
		set: func(s *Server, v string) error {
			f := strings.Fields(v)
			if len(f)%2 != 0 {
				return errInvalidSave
			}
			for _, n := range f {
				if _, err := strconv.ParseUint(n, 10, 63); err != nil {
					return errInvalidSave
				}
			}
			s.setParam("save", strings.Join(f, " "))
			return nil
		},
	},
	// maxmemory and maxmemory-policy are accepted and reported, and limit
	// nothing: the data lives on disk, memory is bounded by
	// shared_buffers, and no key is ever evicted.
	"maxmemory": {
		get: func(s *Server) string { return s.param("maxmemory", "0") },
		set: func(s *Server, v string) error {
			n, err := parseMemory(v)
			if err != nil {
				return err
			}
			s.setParam("maxmemory", strconv.FormatInt(n, 10))
			return nil
		},
	},
	"maxmemory-policy": {
		get: func(s *Server) string { return s.param("maxmemory-policy", "noeviction") },
		set: func(s *Server, v string) error {
			v = strings.ToLower(v)
			switch v {
			case "volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl", "allkeys-lru", "allkeys-lfu", "allkeys-random", "noeviction":
				s.setParam("maxmemory-policy", v)
				return nil
			}
			return errors.New("argument(s) must be one of the following: volatile-lru, volatile-lfu, volatile-random, volatile-ttl, allkeys-lru, allkeys-lfu, allkeys-random, noeviction")
		},
	},
	"databases": {get: func(*Server) string { return "1" }},
	"protected-mode": {
		get: func(s *Server) string { return map[bool]string{true: "yes", false: "no"}[s.protected.Load()] },
		set: func(s *Server, v string) error {
			switch strings.ToLower(v) {
			case "yes":
				s.protected.Store(true)
			case "no":
				s.protected.Store(false)
			default:
				return errors.New("argument must be 'yes' or 'no'")
			}
			return nil
		},
	},
	"daemonize": {get: func(*Server) string { return "no" }},
	// requirepass, shown and set as in Redis (CONFIG GET shows it in the
	// clear); a change applies to connections made afterwards.
	"requirepass": {
		get: func(s *Server) string { return s.requirePass() },
		set: func(s *Server, v string) error {
			s.pass.Store(&v)
			return nil
		},
	},
	// Who may run BACKUP (Config.BackupCommand), immutable as Redis's
	// enable-debug-command.
	"enable-backup-command": {get: func(s *Server) string { return s.cfg.BackupCommand }},
	// Where the server listens, as Redis reports it (immutable here).
	"port": {get: func(s *Server) string { return s.tcpPort() }},
	"bind": {get: func(s *Server) string { return s.tcpBind() }},
	"tls-port": {get: func(s *Server) string {
		if a := s.tcpAddr(true); a != nil {
			return strconv.Itoa(a.Port)
		}
		return "0"
	}},
	// The encoding knobs of Redis's other data types, accepted so that
	// tools that set them do not fail; they change nothing here.
	"hash-max-listpack-entries": encodingKnob("hash-max-listpack-entries", 128, intRange(0, math.MaxInt64)),
	"hash-max-ziplist-entries":  encodingKnob("hash-max-listpack-entries", 128, intRange(0, math.MaxInt64)),
	"hash-max-listpack-value":   encodingKnob("hash-max-listpack-value", 64, parseMemory),
	"hash-max-ziplist-value":    encodingKnob("hash-max-listpack-value", 64, parseMemory),
	"zset-max-listpack-entries": encodingKnob("zset-max-listpack-entries", 128, intRange(0, math.MaxInt64)),
	"zset-max-ziplist-entries":  encodingKnob("zset-max-listpack-entries", 128, intRange(0, math.MaxInt64)),
	"zset-max-listpack-value":   encodingKnob("zset-max-listpack-value", 64, parseMemory),
	"zset-max-ziplist-value":    encodingKnob("zset-max-listpack-value", 64, parseMemory),
	"set-max-intset-entries":    encodingKnob("set-max-intset-entries", 512, intRange(0, math.MaxInt64)),
	"list-max-listpack-size":    encodingKnob("list-max-listpack-size", -2, intRange(math.MinInt32, math.MaxInt32)),
	"list-max-ziplist-size":     encodingKnob("list-max-listpack-size", -2, intRange(math.MinInt32, math.MaxInt32)),
})

// withEngineSettings adds to m a parameter for every engine setting m does
// not define itself: CONFIG GET shows the database's value, and CONFIG SET
// changes the ones the engine can change on an open database (the others
// are immutable, as Redis's). A knob added to the engine's table appears
// here without a change to the server.
func withEngineSettings(m map[string]knob) map[string]knob {
	for _, st := range engine.Settings() {
		if _, ok := m[st.Name]; ok {
			continue
		}
		name := st.Name
		k := knob{get: func(s *Server) string {
			v, _ := s.db.CurrentSetting(name) // the name is the engine's
			return v
		}}
		if st.Runtime {
			k.set = func(s *Server, v string) error { return settingError(s.db.SetConfig(name, v)) }
		}
		m[name] = k
		for _, a := range st.Aliases {
			if _, ok := m[a]; !ok {
				m[a] = k // an older name of the same knob
			}
		}
	}
	return m
}

// settingError is an engine setting's error as CONFIG SET reports it:
// what the setting takes, or the error without the engine's prefix.
func settingError(err error) error {
	var se *engine.SettingError
	if errors.As(err, &se) {
		return errors.New(se.Want)
	}
	if err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "mvkv: "))
	}
	return nil
}

// errInvalidSave is Redis's text for a bad save parameter.
//
//lint:ignore ST1005 Redis's exact text, which clients may match
var errInvalidSave = errors.New("Invalid save parameters")

// encodingKnob is a no-op integer parameter read by parse (Redis's range
// or memory value for it), kept under key (aliases share it, as Redis's
// ziplist and listpack names do).
func encodingKnob(key string, def int64, parse func(v string) (int64, error)) knob {
	return knob{
		same: key,
		get:  func(s *Server) string { return s.param(key, strconv.FormatInt(def, 10)) },
		set: func(s *Server, v string) error {
			n, err := parse(v)
			if err != nil {
				return err
			}
			s.setParam(key, strconv.FormatInt(n, 10))
			return nil
		},
	}
}

// atomicIntKnob is an integer parameter from lo to hi kept in the atomic
// field returns.
func atomicIntKnob(field func(s *Server) *atomic.Int64, lo, hi int64) knob {
	return knob{
		get: func(s *Server) string { return strconv.FormatInt(field(s).Load(), 10) },
		set: func(s *Server, v string) error {
			n, err := parseKnobInt(v, lo, hi)
			if err != nil {
				return err
			}
			field(s).Store(n)
			return nil
		},
	}
}

// intRange is parseKnobInt for the range lo to hi.
func intRange(lo, hi int64) func(v string) (int64, error) {
	return func(v string) (int64, error) { return parseKnobInt(v, lo, hi) }
}

// param returns a parameter that only CONFIG keeps, or def.
func (s *Server) param(key, def string) string {
	if v, ok := s.params.Load(key); ok {
		return v.(string)
	}
	return def
}

func (s *Server) setParam(key, v string) { s.params.Store(key, v) }

// levelVerbose is Redis's verbose log level as a slog level.
const levelVerbose = slog.LevelDebug + 2

// Redis 7.0's log levels as slog levels: debug and verbose below slog's
// Info (verbose between Debug and Info), notice at Info (Redis's
// default), warning at Warn.
var logLevels = []struct {
	name  string
	level slog.Level
}{
	{"debug", slog.LevelDebug}, {"verbose", levelVerbose}, {"notice", slog.LevelInfo},
	{"warning", slog.LevelWarn},
}

// ParseLogLevel parses Redis's loglevel (debug, verbose, notice or
// warning, any case) into the slog level a handler should filter with.
// The error's text is Redis's CONFIG SET error for a bad enum value.
func ParseLogLevel(v string) (slog.Level, error) {
	for _, l := range logLevels {
		if strings.EqualFold(v, l.name) {
			return l.level, nil
		}
	}
	return 0, errors.New("argument(s) must be one of the following: debug, verbose, notice, warning")
}

// LogLevelName is the Redis loglevel that ParseLogLevel maps to l, or the
// nearest one below it.
func LogLevelName(l slog.Level) string {
	name := logLevels[0].name
	for _, e := range logLevels {
		if l >= e.level {
			name = e.name
		}
	}
	return name
}

// ParseMaxClients parses a maxclients value as CONFIG SET maxclients does
// (and as Config.MaxClients may be set): a decimal integer from 1 to
// 4294967295. The error's text is Redis's, such as "argument must be
// between 1 and 4294967295 inclusive".
func ParseMaxClients(v string) (int, error) {
	n, err := parseKnobInt(v, 1, math.MaxUint32)
	return int(n), err
}

// ParseTimeout parses a timeout value as CONFIG SET timeout does (and as
// Config.Timeout may be set): whole seconds, a decimal integer from 0
// (never close idle clients) to 2147483647. The error's text is Redis's.
func ParseTimeout(v string) (time.Duration, error) {
	n, err := parseKnobInt(v, 0, math.MaxInt32)
	return time.Duration(n) * time.Second, err
}

// parseKnobInt parses an integer knob with Redis's CONFIG SET error texts.
// The integer is written as Redis's string2ll takes it: no sign but a
// leading minus, no leading zeros, no "-0" (strconv.ParseInt would take
// "+5", "05" and "-0").
func parseKnobInt(v string, lo, hi int64) (int64, error) {
	n, ok := parseInt([]byte(v))
	if !ok {
		return 0, errors.New("argument couldn't be parsed into an integer")
	}
	if n < lo || n > hi {
		return 0, fmt.Errorf("argument must be between %d and %d inclusive", lo, hi)
	}
	return n, nil
}

// Hz bounds: Redis's CONFIG_MIN_HZ and CONFIG_MAX_HZ, and its default.
const (
	minHz     = 1
	maxHz     = 500
	defaultHz = 10
)

// ParseHz parses hz as Redis's CONFIG SET does: an integer from 0 to
// 2147483647, clamped to 1 to 500 (a value over 100 is seldom useful: the
// cron wakes the server that much more often while it is idle). It returns an
// error naming the range for anything else.
func ParseHz(v string) (int, error) {
	n, err := parseKnobInt(v, 0, math.MaxInt32)
	if err != nil {
		return 0, err
	}
	return clampHz(n), nil
}

// clampHz clamps hz to minHz..maxHz.
func clampHz(n int64) int { return int(min(max(n, minHz), maxHz)) }

// parseMemory parses a memory knob as Redis's memtoull: bytes, or a number
// with k, kb, m, mb, g or gb (k = 1000, kb = 1024).
func parseMemory(v string) (int64, error) {
	bad := errors.New("argument must be a memory value")
	l := strings.ToLower(v)
	mul := int64(1)
	for _, u := range []struct {
		suffix string
		mul    int64
	}{{"kb", 1 << 10}, {"mb", 1 << 20}, {"gb", 1 << 30}, {"k", 1000}, {"m", 1000 * 1000}, {"g", 1000 * 1000 * 1000}, {"b", 1}} {
		if strings.HasSuffix(l, u.suffix) {
			l, mul = strings.TrimSuffix(l, u.suffix), u.mul
			break
		}
	}
	// Digits only, as memtoull takes them: no sign ("+5", "-0").
	if l == "" || strings.Trim(l, "0123456789") != "" {
		return 0, bad
	}
	n, err := strconv.ParseInt(l, 10, 64)
	if err != nil || n > math.MaxInt64/mul {
		return 0, bad
	}
	return n * mul, nil
}

func limitKnob(field func(*Limits) *int64, minimum, maximum int64) knob {
	return knob{
		get: func(s *Server) string { l := s.limits(); return strconv.FormatInt(*field(&l), 10) },
		set: func(s *Server, v string) error {
			n, err := parseMemory(v)
			if err != nil {
				return err
			}
			if n < minimum || n > maximum {
				return fmt.Errorf("argument must be between %d and %d inclusive", minimum, maximum)
			}
			s.limMu.Lock()
			defer s.limMu.Unlock()
			l := s.limits()
			*field(&l) = n
			s.lim.Store(&l)
			return nil
		},
	}
}

func cmdConfig(x *execCtx, args [][]byte) error {
	s := x.c.s
	sub := strings.ToLower(string(args[1]))
	switch sub {
	case "get":
		if len(args) < 3 {
			x.errorf("ERR wrong number of arguments for 'config|get' command")
			return nil
		}
		// As Redis 7's configGetCommand: a name without glob characters
		// is answered under the spelling it was asked by, a pattern
		// under the parameters' own names, each parameter once.
		var pairs []string
		seen := map[string]bool{}
		names := make([]string, 0, len(knobs))
		for name := range knobs {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, p := range args[2:] {
			pat := strings.ToLower(string(p))
			if !strings.ContainsAny(pat, "[*?") {
				if k, ok := knobs[pat]; ok && !seen[pat] {
					seen[pat] = true
					pairs = append(pairs, string(p), k.get(s))
				}
				continue
			}
			for _, name := range names {
				if !seen[name] && globMatch([]byte(pat), []byte(name)) {
					seen[name] = true
					pairs = append(pairs, name, knobs[name].get(s))
				}
			}
		}
		x.out = redcon.AppendArray(x.out, len(pairs))
		for _, p := range pairs {
			x.out = redcon.AppendBulkString(x.out, p)
		}
	case "set":
		if len(args) < 4 {
			x.errorf("ERR wrong number of arguments for 'config|set' command")
			return nil
		}
		if len(args)%2 != 0 {
			x.syntaxError()
			return nil
		}
		// As Redis 7's configSetCommand: every name is checked before
		// anything changes, and a value that fails undoes the ones set
		// before it, so the command applies all or nothing.
		seen := map[string]bool{}
		for i := 2; i < len(args); i += 2 {
			name := strings.ToLower(string(args[i]))
			k, ok := knobs[name]
			if !ok {
				x.errorf("ERR Unknown option or number of arguments for CONFIG SET - '%s'", trunc(args[i], 128))
				return nil
			}
			// Redis names the parameter as the client spelled it.
			if k.set == nil {
				x.errorf("ERR CONFIG SET failed (possibly related to argument '%s') - can't set immutable config", trunc(args[i], 128))
				return nil
			}
			id := name
			if k.same != "" {
				id = k.same
			}
			if seen[id] {
				x.errorf("ERR CONFIG SET failed (possibly related to argument '%s') - duplicate parameter", trunc(args[i], 128))
				return nil
			}
			seen[id] = true
		}
		var undo []func()
		for i := 2; i < len(args); i += 2 {
			name := strings.ToLower(string(args[i]))
			k := knobs[name]
			old := k.get(s)
			if err := k.set(s, string(args[i+1])); err != nil {
				for j := len(undo) - 1; j >= 0; j-- {
					undo[j]()
				}
				x.errorf("ERR CONFIG SET failed (possibly related to argument '%s') - %v", name, err)
				return nil
			}
			undo = append(undo, func() { k.set(s, old) })
		}
		x.ok()
	case "resetstat":
		if len(args) != 2 {
			x.errorf("ERR wrong number of arguments for 'config|resetstat' command")
			return nil
		}
		// As Redis's resetServerStats: the counters INFO stats,
		// commandstats and errorstats report.
		s.stats.reset()
		s.commands.Store(0)
		s.connsRecv.Store(0)
		s.rejected.Store(0)
		// A reset before the counter's: a transaction counting a key
		// between the two then holds a count it need not take back,
		// never one the reset already took (see uncountExpired).
		s.expiredResets.Add(1)
		s.expiredKeys.Store(0)
		s.expiry.cpu.Store(0)
		s.keyspaceHits.Store(0)
		s.keyspaceMisses.Store(0)
		s.netIn.Store(0)
		s.netOut.Store(0)
		s.stats.peakMem.Store(0)
		x.ok()
	case "help":
		if len(args) != 2 {
			x.errorf("ERR wrong number of arguments for 'config|help' command")
			return nil
		}
		x.out = appendHelp(x.out, "CONFIG",
			"GET <pattern>",
			"    Return parameters matching the glob-like <pattern> and their values.",
			"SET <directive> <value>",
			"    Set the configuration <directive> to <value>.",
			"RESETSTAT",
			"    Reset statistics reported by the INFO command.",
			"REWRITE",
			"    Rewrite the configuration file.")
	case "rewrite":
		x.errorf("ERR The server is running without a config file")
	default:
		x.errorf("ERR unknown subcommand '%s'. Try CONFIG HELP.", trunc(args[1], 128))
	}
	return nil
}

func cmdInfo(x *execCtx, args [][]byte) error {
	// The keyspace section may count every key: the count stops if the
	// client goes away meanwhile.
	stop := func() {}
	if !x.inExec {
		stop = x.c.watchClose().stop
	}
	info, err := x.c.s.info(x.c.gone, args[1:])
	stop()
	if x.c.clientGone() {
		// Nobody reads it; it counts the call as failed.
		x.out = appendEngineError(x.out, errClientGone)
		return nil
	}
	if err != nil {
		x.out = appendEngineError(x.out, err)
		return nil
	}
	x.out = redcon.AppendBulkString(x.out, info)
	return nil
}

// info renders INFO's sections in Redis's order: server, clients,
// persistence, stats, ..., cluster, keyspace, then mvkv (WAL, group commit, CLOG, buffer
// pool, checkpoints), placed last as Redis places modules' sections.
// Only the keyspace section reads the keys; when that fails (a damaged
// heap page), it holds keyspace_error with the error instead of db0.
func (s *Server) info(ctx context.Context, want [][]byte) (string, error) {
	sel := map[string]bool{}
	for _, w := range want {
		sel[strings.ToLower(string(w))] = true
	}
	all := len(sel) == 0 || sel["all"] || sel["everything"] || sel["default"]
	var b strings.Builder
	wanted := func(name string) bool { return all || sel[name] }
	section := func(name string, lines ...string) {
		if !wanted(name) {
			return
		}
		if b.Len() > 0 {
			b.WriteString("\r\n")
		}
		title := strings.ToUpper(name[:1]) + name[1:]
		if name == "cpu" {
			title = "CPU" // Redis's spelling
		}
		fmt.Fprintf(&b, "# %s\r\n", title)
		for _, l := range lines {
			b.WriteString(l)
			b.WriteString("\r\n")
		}
	}
	up := time.Since(s.start)
	st := s.db.Stats()
	rec := s.db.Recovery()
	perSync := 0.0
	if st.WAL.Syncs > 0 {
		perSync = float64(st.Txn.Commits) / float64(st.WAL.Syncs)
	}
	avgSync := 0.0
	if st.WAL.Syncs > 0 {
		avgSync = float64(st.WAL.SyncNanos) / float64(st.WAL.Syncs) / 1e3
	}
	section("server",
		"redis_version:"+redisVersion,
		"redis_mode:standalone",
		"mvkv_engine:mvkv",
		"os:"+runtime.GOOS+" "+runtime.GOARCH,
		"arch_bits:64",
		"process_id:"+strconv.Itoa(os.Getpid()),
		"tcp_port:"+s.tcpPort(),
		fmt.Sprintf("hz:%d", s.hz.Load()),
		fmt.Sprintf("configured_hz:%d", s.hz.Load()),
		fmt.Sprintf("uptime_in_seconds:%d", int64(up.Seconds())),
		fmt.Sprintf("uptime_in_days:%d", int64(up.Hours()/24)))
	section("clients",
		fmt.Sprintf("connected_clients:%d", s.clients.Load()),
		fmt.Sprintf("maxclients:%d", s.maxClients.Load()),
		fmt.Sprintf("blocked_clients:%d", s.blocked.Load()),
		fmt.Sprintf("open_transactions:%d", s.openTxns.Load()))
	if wanted("memory") {
		section("memory", s.memoryLines()...)
	}
	dmg := s.db.Damage()
	// Redis's fields as monitoring reads them: a save is a checkpoint,
	// the append-only file the WAL, its writes' status the engine's
	// (Failure: writes stopped after a failed fsync or write).
	saving := map[bool]int{false: 0, true: 1}[s.bgsave.Load()]
	section("persistence",
		"loading:0",
		fmt.Sprintf("rdb_changes_since_last_save:%d", st.Txn.Commits-min(st.Checkpoint.CommitsAtRedo, st.Txn.Commits)),
		fmt.Sprintf("rdb_bgsave_in_progress:%d", saving),
		fmt.Sprintf("rdb_last_save_time:%d", s.db.LastCheckpoint().Unix()),
		"rdb_last_bgsave_status:"+map[bool]string{false: "ok", true: "err"}[s.saveFailed.Load()],
		"aof_enabled:1",
		fmt.Sprintf("aof_rewrite_in_progress:%d", saving),
		"aof_last_write_status:"+map[bool]string{false: "ok", true: "err"}[s.db.Failure() != nil],
		"synchronous_commit:"+knobs["synchronous_commit"].get(s),
		"early_lock_release:"+knobs["early_lock_release"].get(s),
		fmt.Sprintf("recovery_redo_lsn:%d", rec.RedoLSN),
		fmt.Sprintf("recovery_end_lsn:%d", rec.EndLSN),
		fmt.Sprintf("recovery_records:%d", rec.Records),
		fmt.Sprintf("recovery_seconds:%.3f", rec.Duration.Seconds()),
		fmt.Sprintf("recovery_redo_seconds:%.3f", (rec.ScanTime+rec.RedoTime).Seconds()),
		"recovery_index:"+indexSource(rec),
		fmt.Sprintf("recovery_index_keys:%d", rec.IndexKeys),
		fmt.Sprintf("recovery_index_seconds:%.3f", rec.IndexTime.Seconds()),
		fmt.Sprintf("checkpoints:%d", st.Checkpoint.Count),
		// Damage met since start: the background check of the written
		// heap pages (zeros, checksum, header), pages whose reads failed
		// their checks, and map bits found set on pages not all-visible.
		fmt.Sprintf("damage_check_in_progress:%d", map[bool]int{false: 0, true: 1}[dmg.ScanRunning]),
		fmt.Sprintf("damaged_heap_pages:%d", dmg.DamagedPages),
		fmt.Sprintf("damaged_keys_lost:%d", dmg.KeysLost),
		fmt.Sprintf("damaged_page_read_errors:%d", dmg.FailedReads),
		fmt.Sprintf("damaged_vm_pages_cleared:%d", dmg.MapBitsCleared),
		fmt.Sprintf("damaged_pages_zeroed_out:%d", dmg.PagesZeroedOut))
	section("stats",
		fmt.Sprintf("total_connections_received:%d", s.connsRecv.Load()),
		fmt.Sprintf("total_commands_processed:%d", s.commands.Load()),
		fmt.Sprintf("instantaneous_ops_per_sec:%d", int64(s.opsRate.rate())),
		fmt.Sprintf("total_net_input_bytes:%d", s.netIn.Load()),
		fmt.Sprintf("total_net_output_bytes:%d", s.netOut.Load()),
		fmt.Sprintf("instantaneous_input_kbps:%.2f", s.inRate.rate()/1024),
		fmt.Sprintf("instantaneous_output_kbps:%.2f", s.outRate.rate()/1024),
		fmt.Sprintf("rejected_connections:%d", s.rejected.Load()),
		fmt.Sprintf("expired_keys:%d", s.expiredKeys.Load()),
		fmt.Sprintf("expire_cycle_cpu_milliseconds:%d", s.expiry.cpu.Load()/1e6),
		"evicted_keys:0",
		fmt.Sprintf("keyspace_hits:%d", s.keyspaceHits.Load()),
		fmt.Sprintf("keyspace_misses:%d", s.keyspaceMisses.Load()),
		fmt.Sprintf("total_error_replies:%d", s.stats.errorReplies.Load()),
		fmt.Sprintf("rejected_calls:%d", s.stats.rejectedCalls.Load()))
	if wanted("replication") {
		section("replication", s.replicationLines(st.WAL.Bytes)...)
	}
	if wanted("cpu") {
		section("cpu", cpuLines()...)
	}
	// As Redis, commandstats only when asked for or with "all".
	if len(sel) > 0 && (sel["all"] || sel["everything"] || sel["commandstats"]) {
		section("commandstats", s.stats.commandLines()...)
	}
	if wanted("errorstats") {
		section("errorstats", s.stats.errorLines()...)
	}
	// As a Redis server not in cluster mode: clients and tools look here
	// to tell a cluster node from a standalone server.
	section("cluster", "cluster_enabled:0")
	if wanted("keyspace") {
		keys, expires, avgTTL, err := s.keyspace(ctx)
		switch {
		case err != nil && ctx.Err() != nil:
			return "", err
		case err != nil:
			// A damaged heap page fails the count; the other sections,
			// which monitoring reads, are still answered, and this says
			// why the keyspace is missing.
			section("keyspace", "keyspace_error:"+strings.ReplaceAll(err.Error(), "\n", " "))
		case keys == 0:
			section("keyspace") // as Redis: no db0 line for an empty database
		default:
			section("keyspace", fmt.Sprintf("db0:keys=%d,expires=%d,avg_ttl=%d", keys, expires, avgTTL))
		}
	}
	ksAge, ksTook := s.keyspaceAge()
	section("mvkv",
		// The keyspace section's count: how old, how long it took (see
		// keyspace).
		fmt.Sprintf("keyspace_count_age_seconds:%.3f", ksAge.Seconds()),
		fmt.Sprintf("keyspace_count_seconds:%.3f", ksTook.Seconds()),
		fmt.Sprintf("commits:%d", st.Txn.Commits),
		fmt.Sprintf("early_commits:%d", st.Txn.EarlyCommits),
		fmt.Sprintf("dependency_waits:%d", st.Txn.DependencyWaits),
		fmt.Sprintf("aborts:%d", st.Txn.Aborts),
		fmt.Sprintf("wal_records:%d", st.WAL.Records),
		fmt.Sprintf("wal_bytes:%d", st.WAL.Bytes),
		fmt.Sprintf("wal_writes:%d", st.WAL.Writes),
		fmt.Sprintf("wal_syncs:%d", st.WAL.Syncs),
		fmt.Sprintf("wal_flush_requests:%d", st.WAL.FlushRequests),
		fmt.Sprintf("wal_sync_avg_us:%.1f", avgSync),
		fmt.Sprintf("commits_per_sync:%.2f", perSync),
		fmt.Sprintf("wal_flushes:%d", st.WAL.Flushes),
		fmt.Sprintf("wal_sync_p50_us:%.1f", float64(st.WAL.SyncLatency.Quantile(0.5))/1e3),
		fmt.Sprintf("wal_sync_p99_us:%.1f", float64(st.WAL.SyncLatency.Quantile(0.99))/1e3),
		fmt.Sprintf("commit_wait_total_us:%d", st.WAL.CommitWaitNanos/1e3),
		fmt.Sprintf("full_page_images:%d", st.Checkpoint.FullPageImages),
		"commit_delay:"+knobs["commit_delay"].get(s),
		"commit_siblings:"+knobs["commit_siblings"].get(s),
		fmt.Sprintf("clog_lookups:%d", st.CLOG.Lookups),
		fmt.Sprintf("clog_hits:%d", st.CLOG.Hits),
		fmt.Sprintf("clog_misses:%d", st.CLOG.Misses),
		fmt.Sprintf("clog_page_reads:%d", st.CLOG.PageReads),
		fmt.Sprintf("clog_page_writes:%d", st.CLOG.PageWrites),
		fmt.Sprintf("prunes_by_update:%d", st.Heap.PrunesByUpdate),
		fmt.Sprintf("pruned_by_update:%d", st.Heap.PrunedByUpdate),
		fmt.Sprintf("prunes_by_read:%d", st.Heap.PrunesByRead),
		fmt.Sprintf("pruned_by_read:%d", st.Heap.PrunedByRead),
		fmt.Sprintf("chunks_pruned_by_update:%d", st.Heap.ChunksPrunedByUpdate),
		fmt.Sprintf("chunks_pruned_by_read:%d", st.Heap.ChunksPrunedByRead),
		fmt.Sprintf("hint_bits_set:%d", st.Heap.HintBitsSet),
		fmt.Sprintf("hint_bit_hits:%d", st.Heap.HintHits),
		fmt.Sprintf("deadlocks:%d", st.Txn.Deadlocks),
		fmt.Sprintf("lock_waits:%d", st.Txn.LockWaits),
		fmt.Sprintf("vm_bits_set:%d", st.VisibilityMap.BitsSet),
		fmt.Sprintf("vm_bits_cleared:%d", st.VisibilityMap.BitsCleared),
		fmt.Sprintf("index_only_visible:%d", st.Index.AllVisible),
		fmt.Sprintf("index_only_heap_fetches:%d", st.Index.HeapFetches),
		fmt.Sprintf("vacuum_runs:%d", st.Vacuum.Runs),
		fmt.Sprintf("autovacuum_runs:%d", st.Vacuum.AutovacuumRuns),
		fmt.Sprintf("autovacuum_failures:%d", st.Vacuum.AutovacuumFailures),
		fmt.Sprintf("vacuum_pages_scanned:%d", st.Vacuum.PagesScanned),
		fmt.Sprintf("vacuum_pages_skipped:%d", st.Vacuum.PagesSkipped),
		fmt.Sprintf("vacuum_pages_pruned:%d", st.Vacuum.PagesPruned),
		fmt.Sprintf("vacuum_pages_read:%d", st.Vacuum.PagesRead),
		fmt.Sprintf("vacuum_ring_buffers_swept:%d", st.Vacuum.RingSwept),
		fmt.Sprintf("vacuum_pages_truncated:%d", st.Vacuum.PagesTruncated),
		fmt.Sprintf("vacuum_tuples_removed:%d", st.Vacuum.TuplesRemoved),
		fmt.Sprintf("vacuum_chunks_removed:%d", st.Vacuum.ChunksRemoved),
		fmt.Sprintf("vacuum_chunks_owed:%d", st.Vacuum.ChunksOwed),
		fmt.Sprintf("vacuum_dead_tuples:%d", st.Vacuum.DeadTuples),
		fmt.Sprintf("vacuum_tuples_frozen:%d", st.Vacuum.TuplesFrozen),
		fmt.Sprintf("buffer_hits:%d", st.Buffers.Hits),
		fmt.Sprintf("buffer_misses:%d", st.Buffers.Misses),
		fmt.Sprintf("buffer_reads:%d", st.Buffers.Reads),
		fmt.Sprintf("buffer_writes:%d", st.Buffers.Writes),
		fmt.Sprintf("buffer_evictions:%d", st.Buffers.Evictions),
		fmt.Sprintf("index_keys:%d", st.Index.Keys))
	return b.String(), nil
}

// keyspace counts the live keys and, among them, those with an expiry, for
// INFO's keyspace section. Redis keeps both as counters; mvkv has neither
// (the index also holds deleted keys, and deadlines live in the values),
// so a count is one read-only scan of every key and its value: O(N) in
// keys, the cost of DBSIZE. Keys past their deadline but not yet reaped
// count as gone, as DBSIZE counts them. avgTTL is the mean time to live of
// the keys with an expiry, in milliseconds, exact where Redis samples it
// (0 when no key has one, as Redis).
//
// Monitoring polls INFO every few seconds, so a count is kept and reused
// while it is exact: no write has committed since its snapshot and no
// key it counted has reached its deadline. Otherwise a count that took
// less than keyspaceRecountBelow is taken again; a longer one is reused
// until keyspaceStaleFactor times its duration has passed, so that
// counting the keys costs at most about a tenth of a core however often
// INFO is asked (a count of ten million keys, some ten seconds, is then
// up to about two minutes old). INFO's mvkv section says how old the
// count is and how long it took.
func (s *Server) keyspace(ctx context.Context) (keys, expires, avgTTL int64, err error) {
	c, err := s.keyspaceCount(ctx, false)
	if err != nil {
		return 0, 0, 0, err
	}
	if c.expires > 0 {
		avgTTL = max(0, int64(c.deadlineSum/float64(c.expires))-time.Now().UnixMilli())
	}
	return c.keys, c.expires, avgTTL, nil
}

// Reuse of a keyspace count that is no longer exact (see keyspace).
const (
	keyspaceRecountBelow = 100 * time.Millisecond
	keyspaceStaleFactor  = 10
)

// keyspaceCount is one count of the keyspace (see keyspace).
type keyspaceCount struct {
	keys, expires int64
	deadlineSum   float64 // the counted keys' deadlines, Unix ms, summed
	nextDeadline  int64   // the earliest of them; 0 when none has one
	commits       uint64  // the engine's commits, read before the count's snapshot
	at            time.Time
	took          time.Duration
}

// exact reports whether c still counts what a new count would.
func (c *keyspaceCount) exact(commits uint64, now time.Time) bool {
	return commits == c.commits && (c.nextDeadline == 0 || now.UnixMilli() < c.nextDeadline)
}

// keyspaceCount returns a count of the keyspace, the last one if it may be
// reused (see keyspace); with exact, only if it is exact. Callers that ask
// while a count is being taken wait for it, or until ctx ends.
func (s *Server) keyspaceCount(ctx context.Context, exact bool) (keyspaceCount, error) {
	select {
	case s.ksSem <- struct{}{}:
	case <-ctx.Done():
		return keyspaceCount{}, ctx.Err()
	}
	defer s.unlockKeyspace()
	commits := s.db.Stats().Txn.Commits
	now := time.Now()
	if c := s.ks; c != nil && (c.exact(commits, now) || (!exact && c.took >= keyspaceRecountBelow && now.Sub(c.at) < keyspaceStaleFactor*c.took)) {
		return *c, nil
	}
	c := keyspaceCount{commits: commits}
	stopped := false
	err := s.db.View(ctx, func(tx *engine.Txn) error {
		c = keyspaceCount{commits: commits}
		nowMS := time.Now().UnixMilli()
		n := 0
		return tx.ScanPrefix(nil, nil, deadlineHdrSize, func(_, prefix []byte, total int) bool {
			// A count whose caller's context ended (its client went
			// away) stops; a waiting caller counts again.
			if stopped = s.endedEvery(ctx, n); stopped {
				return false
			}
			n++
			if _, deadline := decodeMeta(prefix, total); deadline == 0 {
				c.keys++
			} else if deadline > nowMS {
				c.keys++
				c.expires++
				c.deadlineSum += float64(deadline)
				if c.nextDeadline == 0 || deadline < c.nextDeadline {
					c.nextDeadline = deadline
				}
			}
			return true
		})
	})
	if err == nil && stopped {
		err = ctx.Err()
	}
	if err != nil {
		return keyspaceCount{}, err
	}
	c.at = time.Now()
	c.took = c.at.Sub(now)
	s.ks = &c
	return c, nil
}

// lockKeyspace and unlockKeyspace take and give back ksSem.
func (s *Server) lockKeyspace()   { s.ksSem <- struct{}{} }
func (s *Server) unlockKeyspace() { <-s.ksSem }

// keyspaceAge returns how old the last count of the keyspace is and how
// long it took, for INFO's mvkv section; zeros before the first.
func (s *Server) keyspaceAge() (age, took time.Duration) {
	s.lockKeyspace()
	defer s.unlockKeyspace()
	if s.ks == nil {
		return 0, 0
	}
	return time.Since(s.ks.at), s.ks.took
}

// cursorTable maps SCAN cursors to the key the scan resumes from. Redis
// encodes its position in the cursor itself; keys ordered by bytes cannot
// be, and clients (go-redis among them) want a number. The table keeps the
// newest maxCursors; an older cursor gets "ERR invalid cursor". Its numbers
// start at a random point in each server (cursorBase), so that a cursor
// handed out before a restart is invalid too, rather than the number of
// another scan's position, which would skip keys without an error.
type cursorTable struct {
	mu    sync.Mutex
	next  uint64            // guarded by mu
	m     map[uint64][]byte // guarded by mu
	order []uint64          // guarded by mu; insertion order, for eviction
}

const maxCursors = 4096

// cursorBase is where a server's cursor numbers start: random, between
// 2^32 and 2^62, so that two servers' (a restart's) ranges do not meet in
// practice, and every cursor stays a positive number that clients parsing
// it as a signed 64-bit integer accept.
func cursorBase() uint64 {
	return 1<<32 + rand.Uint64N(1<<62-1<<33)
}

func (t *cursorTable) put(k []byte) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.next++
	id := t.next
	t.m[id] = k
	t.order = append(t.order, id)
	if len(t.order) > maxCursors {
		delete(t.m, t.order[0])
		t.order = t.order[1:]
	}
	return id
}

func (t *cursorTable) get(id uint64) ([]byte, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k, ok := t.m[id]
	return k, ok
}

// globMatch is Redis's stringmatchlen: * ? [abc] [^a-z] and \ escapes.
// It backtracks only to the last '*' (the classic greedy algorithm), so it
// takes O(len(p) x len(s)) time whatever the pattern.
func globMatch(p, s []byte) bool {
	pi, si := 0, 0
	starP, starS := -1, 0
	for si < len(s) {
		if pi < len(p) && p[pi] == '*' {
			starP, starS = pi, si
			pi++
			continue
		}
		if pi < len(p) {
			if n, ok := matchOne(p[pi:], s[si]); ok {
				pi += n
				si++
				continue
			}
		}
		if starP < 0 {
			return false
		}
		starS++
		pi, si = starP+1, starS
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

// matchOne matches c against the pattern element at the start of p and
// returns the element's width in bytes.
func matchOne(p []byte, c byte) (int, bool) {
	switch p[0] {
	case '?':
		return 1, true
	case '\\':
		if len(p) >= 2 {
			return 2, p[1] == c
		}
		return 1, c == '\\'
	case '[':
		i := 1
		not := i < len(p) && p[i] == '^'
		if not {
			i++
		}
		match := false
		for i < len(p) && p[i] != ']' {
			switch {
			case p[i] == '\\' && i+1 < len(p):
				match = match || p[i+1] == c
				i += 2
			case i+2 < len(p) && p[i+1] == '-':
				lo, hi := p[i], p[i+2]
				if lo > hi {
					lo, hi = hi, lo
				}
				match = match || (c >= lo && c <= hi)
				i += 3
			default:
				match = match || p[i] == c
				i++
			}
		}
		if i < len(p) {
			i++ // the ']'
		}
		return i, match != not
	}
	return 1, p[0] == c
}

// tcpAddr is the address of a TCP listener of Serve (isTLS false) or
// ServeTLS (true), or nil when there is none.
func (s *Server) tcpAddr(isTLS bool) *net.TCPAddr {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ln, t := range s.listeners {
		if a, ok := ln.Addr().(*net.TCPAddr); ok && t == isTLS {
			return a
		}
	}
	return nil
}

// tcpPort is the port Serve listens on, for INFO and CONFIG GET port, or
// "0".
func (s *Server) tcpPort() string {
	if a := s.tcpAddr(false); a != nil {
		return strconv.Itoa(a.Port)
	}
	return "0"
}

// tcpBind is the address Serve listens on (ServeTLS's when there is no
// plain listener), for CONFIG GET bind, or "" when there is none.
func (s *Server) tcpBind() string {
	a := s.tcpAddr(false)
	if a == nil {
		a = s.tcpAddr(true)
	}
	switch {
	case a == nil:
		return ""
	case a.IP.IsUnspecified() && a.IP.To4() != nil:
		return "*" // Redis's name for every IPv4 address
	case a.IP.IsUnspecified():
		return "::*"
	}
	return a.IP.String()
}

// indexSource says where Open took the key index from, for INFO: "file"
// (the last checkpoint's index file), "heap_scan" (rebuilt by reading the
// heap; the log says why) or "new" (a new database: no checkpoint, nothing
// to redo).
func indexSource(rec engine.RecoveryInfo) string {
	switch {
	case rec.IndexFromFile:
		return "file"
	case rec.RedoLSN == 0 && rec.Records == 0:
		return "new"
	}
	return "heap_scan"
}
