package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/redcon"

	"mvkv/engine"
)

// Command flags.
const (
	flagRead     = 1 << iota // runs in a read-only engine transaction
	flagWrite                // runs in a read-write engine transaction
	flagNoAuth               // allowed before AUTH
	flagNoMulti              // refused inside MULTI
	flagMultiCtl             // MULTI, EXEC, DISCARD, WATCH, QUIT: run at once inside MULTI
	// flagPipeline marks a write that reads nothing but the keys it
	// locks: inside a pipeline it commits with CommitAsync, without
	// waiting for the connection's earlier commits (see conn.settle).
	flagPipeline
	// flagSnapshot marks a command that reads more than one key, or
	// reads keys it does not write: it runs at REPEATABLE READ, so that
	// all its reads see one snapshot, and a write locks the keys it
	// names first, so that the snapshot is taken after the locks (see
	// docs/SERVER.md, "Isolation").
	flagSnapshot
)

// command is one entry of the command table. arity is Redis's: n > 0
// exactly n arguments counting the name, n < 0 at least -n.
type command struct {
	name  string
	arity int
	flags int
	fn    func(x *execCtx, args [][]byte) error
}

// execCtx is what a command handler works with: the connection, the
// engine transaction (nil for commands that need none), and the reply
// being built. A handler appends its reply to out and returns an error
// only when the engine transaction failed (the caller rolls back and may
// retry); command errors are replies, and set failed.
type execCtx struct {
	c      *conn
	tx     *engine.Txn
	out    []byte
	failed bool // the reply is an error: a single command rolls back
	inExec bool
	// lookups: the command's key reads count in keyspace_hits and
	// keyspace_misses (see countsLookups).
	lookups bool
	nowMS   int64 // the command's clock (see now); 0 until read
}

func (x *execCtx) errorf(format string, a ...any) {
	x.out = redcon.AppendError(x.out, fmt.Sprintf(format, a...))
	x.failed = true
}

func (x *execCtx) ok() { x.out = append(x.out, "+OK\r\n"...) }

func (x *execCtx) null() { x.out = append(x.out, "$-1\r\n"...) }

func (x *execCtx) syntaxError() { x.errorf("ERR syntax error") }

func (x *execCtx) notInteger() { x.errorf("ERR value is not an integer or out of range") }

// parseInt32 parses arg as Redis's getIntFromObjectOrReply does: a 64-bit
// integer outside the range of an int is refused with the range in the
// error, anything else that is not an integer with notInteger's error.
func (x *execCtx) parseInt32(arg []byte) (int64, bool) {
	n, ok := parseInt(arg)
	switch {
	case !ok:
		x.notInteger()
	case n != int64(int32(n)):
		x.errorf("ERR value is out of range, value must between %d and %d", math.MinInt32, math.MaxInt32)
	default:
		return n, true
	}
	return 0, false
}

// wrote records a write of key: it bumps the key's watch version, before
// the commit, with the row lock held; a rollback undoes it, with the row
// lock still held. The engine releases a transaction's row locks as soon
// as an error aborts it, before the reply is written and the connection
// calls rollback, so the undo is registered with the transaction too
// (engine.Txn.OnAbort), to run before those locks go.
func (x *execCtx) wrote(key []byte) {
	if e := x.c.s.watch.touch(key); e != nil {
		if len(x.c.bumped) == 0 {
			x.tx.OnAbort(x.c.untouch)
		}
		x.c.bumped = append(x.c.bumped, e)
	}
}

// writeErr turns a write's error into a reply when it leaves the
// transaction usable (a key or value out of bounds) and returns nil, or
// returns the error that ended the transaction.
func (x *execCtx) writeErr(err error) error {
	if errors.Is(err, engine.ErrTooLarge) || errors.Is(err, engine.ErrEmptyKey) {
		x.out = appendEngineError(x.out, err)
		x.failed = true
		return nil
	}
	return err
}

// checkKey replies with an error for a key the engine cannot store.
func (x *execCtx) checkKey(k []byte) bool {
	if !storable(k) {
		x.out = appendEngineError(x.out, map[bool]error{true: engine.ErrEmptyKey, false: engine.ErrTooLarge}[len(k) == 0])
		x.failed = true
		return false
	}
	return true
}

// get returns key's value, nil if it has none: never set, deleted, or
// past its deadline (such a key is removed after the command, see
// reapExpired). A key the engine cannot store has none.
func (x *execCtx) get(k []byte) ([]byte, error) {
	v, _, _, err := x.getDeadline(k)
	return v, err
}

// getDeadline is get that also returns the key's deadline (Unix
// milliseconds, 0 for none) and whether it is live.
func (x *execCtx) getDeadline(k []byte) ([]byte, int64, bool, error) {
	if !storable(k) {
		x.lookedUp(false)
		return nil, 0, false, nil
	}
	raw, err := x.tx.Get(k)
	if errors.Is(err, engine.ErrNotFound) {
		x.lookedUp(false)
		return nil, 0, false, nil
	}
	if err != nil {
		return nil, 0, false, err
	}
	v, d, ok := x.live(raw, true)
	if !ok {
		x.noteExpired(k)
	}
	x.lookedUp(ok)
	return v, d, ok, nil
}

// countsLookups reports whether cmd's key reads count in keyspace_hits
// and keyspace_misses: as Redis's lookupKeyRead, those of the read
// commands and of the writes that reply with what they read (GETSET,
// GETDEL, GETEX), not those of other writes (lookupKeyWrite), nor the
// keys a scan or DBSIZE meets.
func countsLookups(cmd *command) bool {
	switch cmd.name {
	case "getset", "getdel", "getex":
		return true
	case "scan", "keys", "dbsize", "randomkey":
		return false
	}
	return cmd.flags&flagRead != 0
}

// lookedUp counts a key read as a hit (found live) or a miss.
func (x *execCtx) lookedUp(hit bool) {
	switch {
	case !x.lookups:
	case hit:
		x.c.s.keyspaceHits.Add(1)
	default:
		x.c.s.keyspaceMisses.Add(1)
	}
}

// meta is getDeadline without the value: the value's length, its
// deadline and whether the key is live, reading of a large value only its
// first bytes (engine's GetPrefix), for the commands that need no more
// (EXISTS, TYPE, STRLEN, TTL, EXPIRETIME).
func (x *execCtx) meta(k []byte) (length int, deadline int64, live bool, err error) {
	if !storable(k) {
		x.lookedUp(false)
		return 0, 0, false, nil
	}
	prefix, total, err := x.tx.GetPrefix(k, deadlineHdrSize)
	if errors.Is(err, engine.ErrNotFound) {
		x.lookedUp(false)
		return 0, 0, false, nil
	}
	if err != nil {
		return 0, 0, false, err
	}
	length, deadline = decodeMeta(prefix, total)
	if x.expiredAt(deadline) {
		x.noteExpired(k)
		x.lookedUp(false)
		return 0, 0, false, nil
	}
	x.lookedUp(true)
	return length, deadline, true, nil
}

// liveMeta says whether a key whose stored value begins with prefix (at
// least deadlineHdrSize bytes of it, or all of it) and is total bytes long
// is live at the command's time, as live does from the whole value.
func (x *execCtx) liveMeta(prefix []byte, total int) bool {
	_, d := decodeMeta(prefix, total)
	return !x.expiredAt(d)
}

// replyLimit bounds one reply (or one EXEC's replies) in bytes.
const replyLimit = 512 << 20

var commandTable map[string]*command

func init() {
	cmds := []*command{
		{"ping", -1, 0, cmdPing},
		{"echo", 2, 0, cmdEcho},
		{"hello", -1, flagNoAuth, cmdHello},
		{"auth", -2, flagNoAuth, cmdAuth},
		{"quit", -1, flagNoAuth | flagMultiCtl, ctl(func(c *conn, _ [][]byte) { c.out = append(c.out, "+OK\r\n"...); c.quit = true })},
		{"select", 2, 0, cmdSelect},
		{"client", -2, 0, cmdClient},
		{"command", -1, 0, cmdCommand},
		{"config", -2, 0, cmdConfig},
		{"info", -1, 0, cmdInfo},
		{"dbsize", 1, flagRead | flagSnapshot, cmdDBSize},
		{"flushall", -1, flagWrite, cmdFlushAll},
		{"type", 2, flagRead, cmdType},
		{"get", 2, flagRead, cmdGet},
		{"set", -3, flagWrite | flagPipeline, cmdSet},
		{"expire", -3, flagWrite | flagPipeline, cmdExpire},
		{"pexpire", -3, flagWrite | flagPipeline, cmdExpire},
		{"expireat", -3, flagWrite | flagPipeline, cmdExpire},
		{"pexpireat", -3, flagWrite | flagPipeline, cmdExpire},
		{"persist", 2, flagWrite | flagPipeline, cmdPersist},
		{"ttl", 2, flagRead, cmdTTL},
		{"pttl", 2, flagRead, cmdTTL},
		{"del", -2, flagWrite | flagPipeline, cmdDel},
		{"exists", -2, flagRead | flagSnapshot, cmdExists},
		{"incr", 2, flagWrite | flagPipeline, cmdIncrFamily},
		{"decr", 2, flagWrite | flagPipeline, cmdIncrFamily},
		{"incrby", 3, flagWrite | flagPipeline, cmdIncrFamily},
		{"decrby", 3, flagWrite | flagPipeline, cmdIncrFamily},
		{"mget", -2, flagRead | flagSnapshot, cmdMGet},
		{"mset", -3, flagWrite | flagPipeline, cmdMSet},
		{"scan", -2, flagRead | flagSnapshot, cmdScan},
		{"multi", 1, flagMultiCtl, ctl((*conn).multi)},
		{"exec", 1, flagMultiCtl, ctl(func(c *conn, _ [][]byte) { c.exec() })},
		{"discard", 1, flagMultiCtl, ctl((*conn).discard)},
		{"reset", 1, flagNoAuth | flagMultiCtl, ctl((*conn).reset)},
		{"watch", -2, flagMultiCtl, ctl((*conn).watch)},
		{"unwatch", 1, 0, ctl(func(c *conn, _ [][]byte) { c.unwatchAll(); c.out = append(c.out, "+OK\r\n"...) })},
		{"shutdown", -1, flagNoMulti, cmdShutdown},
		{"checkpoint", 1, flagNoMulti, cmdCheckpoint},
		{"vacuum", 1, flagNoMulti, cmdVacuum},
		{"backup", 2, flagNoMulti, cmdBackup},
		{"flushdb", -1, flagWrite, cmdFlushAll},
		{"append", 3, flagWrite | flagPipeline, cmdAppend},
		{"strlen", 2, flagRead, cmdStrlen},
		{"setnx", 3, flagWrite | flagPipeline, cmdSetNX},
		{"setex", 4, flagWrite | flagPipeline, cmdSetEx},
		{"psetex", 4, flagWrite | flagPipeline, cmdSetEx},
		{"getset", 3, flagWrite | flagPipeline, cmdGetSet},
		{"getdel", 2, flagWrite | flagPipeline, cmdGetDel},
		{"getex", -2, flagWrite | flagPipeline, cmdGetEx},
		{"getrange", 4, flagRead, cmdGetRange},
		{"substr", 4, flagRead, cmdGetRange},
		{"setrange", 4, flagWrite | flagPipeline, cmdSetRange},
		{"msetnx", -3, flagWrite | flagSnapshot, cmdMSetNX},
		{"incrbyfloat", 3, flagWrite | flagPipeline, cmdIncrByFloat},
		{"lcs", -3, flagRead | flagSnapshot, cmdLCS},
		{"setbit", 4, flagWrite | flagPipeline, cmdSetBit},
		{"getbit", 3, flagRead, cmdGetBit},
		{"bitcount", -2, flagRead, cmdBitCount},
		{"bitpos", -3, flagRead, cmdBitPos},
		{"bitop", -4, flagWrite | flagSnapshot, cmdBitOp},
		{"keys", 2, flagRead | flagSnapshot, cmdKeys},
		{"rename", 3, flagWrite | flagSnapshot, cmdRename},
		{"renamenx", 3, flagWrite | flagSnapshot, cmdRename},
		{"copy", -3, flagWrite | flagSnapshot, cmdCopy},
		{"unlink", -2, flagWrite | flagPipeline, cmdDel},
		{"touch", -2, flagRead | flagSnapshot, cmdTouch},
		{"randomkey", 1, flagRead | flagSnapshot, cmdRandomKey},
		{"expiretime", 2, flagRead, cmdExpireTime},
		{"pexpiretime", 2, flagRead, cmdExpireTime},
		{"object", -2, flagRead, cmdObject},
		{"memory", -2, flagRead, cmdMemory},
		{"time", 1, 0, cmdTime},
		{"lastsave", 1, 0, cmdLastSave},
		{"role", 1, 0, cmdRole},
		{"save", 1, flagNoMulti, cmdSave},
		{"bgsave", -1, 0, cmdBgSave},
		{"monitor", 1, 0, cmdMonitor},
		{"wait", 3, 0, cmdWait},
		{"slowlog", -2, 0, cmdSlowlog},
		{"acl", -2, 0, cmdACL},
		{"cluster", -2, 0, cmdCluster},
		{"readonly", 1, 0, cmdCluster},
		{"readwrite", 1, 0, cmdCluster},
		{"asking", 1, 0, cmdCluster},
		{"bgrewriteaof", 1, 0, cmdBgRewriteAOF},
	}
	commandTable = make(map[string]*command, len(cmds))
	for _, c := range cmds {
		commandTable[c.name] = c
	}
}

// ctl adapts a handler that works on the connection's state directly.
func ctl(f func(c *conn, args [][]byte)) func(x *execCtx, args [][]byte) error {
	return func(x *execCtx, args [][]byte) error {
		c := x.c
		c.out = x.out
		f(c, args)
		x.out = c.out
		return nil
	}
}

func cmdPing(x *execCtx, args [][]byte) error {
	switch len(args) {
	case 1:
		x.out = append(x.out, "+PONG\r\n"...)
	case 2:
		x.out = redcon.AppendBulk(x.out, args[1])
	default:
		x.errorf("ERR wrong number of arguments for 'ping' command")
	}
	return nil
}

func cmdEcho(x *execCtx, args [][]byte) error {
	x.out = redcon.AppendBulk(x.out, args[1])
	return nil
}

func cmdSelect(x *execCtx, args [][]byte) error {
	n, ok := x.parseInt32(args[1])
	switch {
	case !ok:
	case n != 0:
		x.errorf("ERR DB index is out of range")
	default:
		x.ok()
	}
	return nil
}

func cmdHello(x *execCtx, args [][]byte) error {
	c := x.c
	if len(args) > 1 {
		v, ok := parseInt(args[1])
		if !ok {
			x.errorf("ERR Protocol version is not an integer or out of range")
			return nil
		}
		// RESP3 is not spoken: Redis's own answer for a version it
		// does not support, on which clients fall back to RESP2.
		if v != 2 {
			x.errorf("NOPROTO unsupported protocol version")
			return nil
		}
	}
	var name []byte
	setName := false
	for i := 2; i < len(args); i++ {
		opt := strings.ToLower(string(args[i]))
		switch {
		case opt == "auth" && i+2 < len(args):
			// As AUTH: the only user is "default", which takes any
			// password when requirepass is not set.
			if !bytes.Equal(args[i+1], []byte("default")) || (c.s.requirePass() != "" && !c.s.checkPassword(args[i+2])) {
				x.errorf("WRONGPASS invalid username-password pair or user is disabled.")
				return nil
			}
			c.authed = true
			i += 2
		case opt == "setname" && i+1 < len(args):
			name, setName = args[i+1], true
			i++
		default:
			x.errorf("ERR Syntax error in HELLO option '%s'", trunc(args[i], 128))
			return nil
		}
	}
	if c.authRequired() {
		x.errorf("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time")
		return nil
	}
	if setName {
		if !validClientName(name) {
			x.errorf("ERR Client names cannot contain spaces, newlines or special characters.")
			return nil
		}
		c.mu.Lock()
		c.name = string(name)
		c.mu.Unlock()
	}
	x.out = redcon.AppendArray(x.out, 14)
	x.out = redcon.AppendBulkString(x.out, "server")
	x.out = redcon.AppendBulkString(x.out, "redis")
	x.out = redcon.AppendBulkString(x.out, "version")
	x.out = redcon.AppendBulkString(x.out, redisVersion)
	x.out = redcon.AppendBulkString(x.out, "proto")
	x.out = redcon.AppendInt(x.out, 2)
	x.out = redcon.AppendBulkString(x.out, "id")
	x.out = redcon.AppendInt(x.out, int64(c.id))
	x.out = redcon.AppendBulkString(x.out, "mode")
	x.out = redcon.AppendBulkString(x.out, "standalone")
	x.out = redcon.AppendBulkString(x.out, "role")
	x.out = redcon.AppendBulkString(x.out, "master")
	x.out = redcon.AppendBulkString(x.out, "modules")
	x.out = redcon.AppendArray(x.out, 0)
	return nil
}

// redisVersion is the Redis version whose behaviour the server follows.
const redisVersion = "7.0.0"

func cmdAuth(x *execCtx, args [][]byte) error {
	c := x.c
	if len(args) > 3 {
		x.syntaxError()
		return nil
	}
	// The only user is "default"; without requirepass it takes any
	// password (Redis's nopass), and AUTH <password> alone is refused.
	if c.s.requirePass() == "" && len(args) == 2 {
		x.errorf("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")
		return nil
	}
	pass := args[len(args)-1]
	if (len(args) == 3 && !bytes.Equal(args[1], []byte("default"))) || (c.s.requirePass() != "" && !c.s.checkPassword(pass)) {
		x.errorf("WRONGPASS invalid username-password pair or user is disabled.")
		return nil
	}
	c.authed = true
	x.ok()
	return nil
}

// storable reports whether the engine can store key k: 1 to
// engine.MaxKeySize bytes.
func storable[K string | []byte](k K) bool { return len(k) > 0 && len(k) <= engine.MaxKeySize }

// arityOK reports whether n arguments, the command name included, fit
// arity in Redis's convention: exactly arity, or at least -arity when it is
// negative.
func arityOK(arity, n int) bool { return (arity > 0 && n == arity) || (arity < 0 && n >= -arity) }

// subcommandOK is subcommandError's check where a container command
// runs: an unknown subcommand or a wrong argument count gets Redis's error
// reply, and false. Requests that came through dispatch have passed it
// already; it keeps each command safe on its own.
func (x *execCtx) subcommandOK(args [][]byte) bool {
	if msg := subcommandError(lower(args[0]), args); msg != "" {
		x.errorf("%s", msg)
		return false
	}
	return true
}

// subcommandError returns Redis's error for a container command (CLIENT,
// CONFIG, OBJECT, ...) whose subcommand args[1] is not one the server
// knows or has the wrong number of arguments, and "" otherwise (or for
// any other command). The tables are the ones the commands themselves
// check against.
func subcommandError(name string, args [][]byte) string {
	if len(args) < 2 {
		return ""
	}
	// The table is chosen before args[1] is lowered, so that a command
	// without subcommands costs nothing here.
	var table map[string]int
	switch name {
	case "client":
		table = clientSubcommands
	case "object":
		table = objectSubcommands
	case "cluster":
		table = clusterSubcommands
	case "acl", "command", "config", "memory", "slowlog":
		// Looked up in redisMeta, as "name|sub", below.
	default:
		return ""
	}
	sub := lower(args[1])
	var arity int
	var known bool
	if table != nil {
		arity, known = table[sub]
	} else {
		var m commandMeta
		m, known = redisMeta[name+"|"+sub]
		arity = m.arity
	}
	if !known {
		return fmt.Sprintf("ERR unknown subcommand '%s'. Try %s HELP.", trunc(args[1], 128), strings.ToUpper(name))
	}
	if !arityOK(arity, len(args)) {
		return fmt.Sprintf("ERR wrong number of arguments for '%s|%s' command", name, sub)
	}
	return ""
}

// appendHelp appends a HELP reply in Redis's form (addReplyHelp): a
// heading, the given lines, and HELP's own entry, each a status string.
func appendHelp(out []byte, cmd string, lines ...string) []byte {
	out = redcon.AppendArray(out, len(lines)+3)
	out = redcon.AppendString(out, cmd+" <subcommand> [<arg> [value] [opt] ...]. Subcommands are:")
	for _, l := range lines {
		out = redcon.AppendString(out, l)
	}
	out = redcon.AppendString(out, "HELP")
	return redcon.AppendString(out, "    Prints this help.")
}

func validClientName(n []byte) bool {
	for _, b := range n {
		if b < '!' || b > '~' {
			return false
		}
	}
	return true
}

// clientSubcommands are CLIENT's subcommands and their arities (Redis's;
// its 7.0 command table lacks NO-TOUCH, so they are kept here).
var clientSubcommands = map[string]int{"id": 2, "getname": 2, "setname": 3, "setinfo": 4, "list": -2, "info": 2, "help": 2,
	"kill": -3, "reply": 3, "pause": -3, "unpause": 2, "no-evict": 3, "no-touch": 3,
	"unblock": -3, "getredir": 2, "trackinginfo": 2}

func cmdClient(x *execCtx, args [][]byte) error {
	c := x.c
	sub := strings.ToLower(string(args[1]))
	if !x.subcommandOK(args) {
		return nil
	}
	switch sub {
	case "help":
		x.out = appendHelp(x.out, "CLIENT",
			"GETNAME",
			"    Return the name of the current connection.",
			"ID",
			"    Return the ID of the current connection.",
			"INFO",
			"    Return information about the current client connection.",
			"LIST [options ...]",
			"    Return information about client connections. Options:",
			"    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
			"      Return clients of specified type.",
			"    * ID <client-id> [<client-id> ...]",
			"      Return clients with the specified IDs.",
			"SETINFO <option> <value>",
			"    Set client meta attr. Options are:",
			"    * LIB-NAME: the client lib name.",
			"    * LIB-VER: the client lib version.",
			"SETNAME <name>",
			"    Assign the name <name> to the current connection.",
			"KILL <ip:port>",
			"    Kill connection made from <ip:port>.",
			"KILL <option> <value> [<option> <value> [...]]",
			"    Kill connections. Options are:",
			"    * ADDR (<ip:port>|<unixsocket>:0)",
			"      Kill connections made from the specified address",
			"    * LADDR (<ip:port>|<unixsocket>:0)",
			"      Kill connections made to specified local address",
			"    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
			"      Kill connections by type.",
			"    * USER <username>",
			"      Kill connections authenticated by <username>.",
			"    * SKIPME (YES|NO)",
			"      Skip killing current connection (default: yes).",
			"    * ID <client-id>",
			"      Kill connections by client id.",
			"NO-EVICT (ON|OFF)",
			"    Protect current client connection from eviction.",
			"NO-TOUCH (ON|OFF)",
			"    Will not touch LRU/LFU stats when this mode is on.",
			"PAUSE <timeout> [WRITE|ALL]",
			"    Suspend all, or just write, clients for <timeout> milliseconds.",
			"REPLY (ON|OFF|SKIP)",
			"    Control the replies sent to the current connection.",
			"UNPAUSE",
			"    Stop the current client pause, resuming traffic.")
	case "info":
		x.out = redcon.AppendBulkString(x.out, c.s.clientList(map[uint64]bool{c.id: true}))
	case "id":
		x.out = redcon.AppendInt(x.out, int64(c.id))
	case "getname":
		c.mu.Lock()
		name := c.name
		c.mu.Unlock()
		if name == "" {
			x.null()
		} else {
			x.out = redcon.AppendBulkString(x.out, name)
		}
	case "setname":
		if !validClientName(args[2]) {
			x.errorf("ERR Client names cannot contain spaces, newlines or special characters.")
			return nil
		}
		c.mu.Lock()
		c.name = string(args[2])
		c.mu.Unlock()
		x.ok()
	case "setinfo":
		// As Redis 7.2's clientSetinfoCommand.
		attr := strings.ToLower(string(args[2]))
		if attr != "lib-name" && attr != "lib-ver" {
			x.errorf("ERR Unrecognized option '%s'", trunc(args[2], 128))
			return nil
		}
		if !validClientName(args[3]) {
			x.errorf("ERR %s cannot contain spaces, newlines or special characters.", attr)
			return nil
		}
		c.mu.Lock()
		if attr == "lib-name" {
			c.libName = string(trunc(args[3], 128))
		} else {
			c.libVer = string(trunc(args[3], 128))
		}
		c.mu.Unlock()
		x.ok()
	case "list":
		ids, ok := parseClientListArgs(x, args[2:])
		if ok {
			x.out = redcon.AppendBulkString(x.out, c.s.clientList(ids))
		}
	case "kill":
		clientKill(x, args)
	case "reply":
		switch strings.ToLower(string(args[2])) {
		case "on":
			c.replyOff, c.skipNext, c.replyOn = false, false, true
			x.ok()
		case "off":
			c.replyOff = true
		case "skip":
			if !c.replyOff {
				c.skipNext = true
			}
		default:
			x.syntaxError()
		}
	case "pause":
		ms, ok := parseInt(args[2])
		if !ok {
			x.errorf("ERR timeout is not an integer or out of range")
			return nil
		}
		if ms < 0 {
			x.errorf("ERR timeout is negative")
			return nil
		}
		all := true
		if len(args) == 4 {
			switch strings.ToUpper(string(args[3])) {
			case "WRITE":
				all = false
			case "ALL":
			default:
				x.errorf("ERR CLIENT PAUSE mode must be WRITE or ALL")
				return nil
			}
		} else if len(args) > 4 {
			x.errorf("ERR unknown subcommand or wrong number of arguments for 'PAUSE'. Try CLIENT HELP.")
			return nil
		}
		c.s.setPause(time.Now().Add(time.Duration(min(ms, math.MaxInt64/int64(time.Millisecond)))*time.Millisecond), all)
		x.ok()
	case "unpause":
		c.s.unpause()
		x.ok()
	case "unblock":
		// The one command that blocks here is WAIT for replicas (there
		// are none, so it waits out its timeout): 1 if the client was
		// in it, 0 otherwise, as Redis.
		id, ok := parseInt(args[2])
		if !ok {
			x.notInteger()
			return nil
		}
		if len(args) > 4 {
			x.errorf("ERR unknown subcommand or wrong number of arguments for '%s'. Try CLIENT HELP.", trunc(args[1], 128))
			return nil
		}
		reason := "timeout"
		if len(args) == 4 {
			if reason = strings.ToLower(string(args[3])); reason != "timeout" && reason != "error" {
				x.errorf("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR")
				return nil
			}
		}
		x.out = redcon.AppendInt(x.out, c.s.unblockClient(id, reason))
	case "getredir":
		x.out = redcon.AppendInt(x.out, -1) // tracking is off
	case "trackinginfo":
		x.out = append(x.out, "*6\r\n$5\r\nflags\r\n*1\r\n$3\r\noff\r\n$8\r\nredirect\r\n:-1\r\n$8\r\nprefixes\r\n*0\r\n"...)
	case "no-evict", "no-touch":
		on, ok := clientOnOff(x, args[2])
		if !ok {
			return nil
		}
		c.mu.Lock()
		if sub == "no-evict" {
			c.noEvict = on
		} else {
			c.noTouch = on
		}
		c.mu.Unlock()
		x.ok()
	}
	return nil
}

// parseClientListArgs parses CLIENT LIST's [TYPE normal|master|replica|
// pubsub] [ID id ...]: the ids to list (nil for all), or false after
// replying with an error. Every client here is of type normal.
func parseClientListArgs(x *execCtx, args [][]byte) (map[uint64]bool, bool) {
	var ids map[uint64]bool
	for i := 0; i < len(args); i++ {
		switch strings.ToLower(string(args[i])) {
		case "type":
			if i+1 >= len(args) {
				x.syntaxError()
				return nil, false
			}
			switch t := strings.ToLower(string(args[i+1])); t {
			case "normal":
			case "master", "replica", "slave", "pubsub":
				ids = map[uint64]bool{}
			default:
				x.errorf("ERR Unknown client type '%s'", trunc(args[i+1], 128))
				return nil, false
			}
			i++
		case "id":
			if i+1 >= len(args) {
				x.syntaxError()
				return nil, false
			}
			ids = map[uint64]bool{}
			for i++; i < len(args); i++ {
				n, ok := parseInt(args[i])
				if !ok || n < 0 {
					x.errorf("ERR Invalid client ID")
					return nil, false
				}
				ids[uint64(n)] = true
			}
		default:
			x.syntaxError()
			return nil, false
		}
	}
	return ids, true
}

// clientList renders CLIENT LIST in Redis 7.2's format, one line per
// connection, with the fields that mean something here (Redis's memory
// and buffer fields are left out). ids, if not nil, selects connections.
func (s *Server) clientList(ids map[uint64]bool) string {
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		if ids == nil || ids[c.id] {
			conns = append(conns, c)
		}
	}
	s.mu.Unlock()
	sort.Slice(conns, func(i, j int) bool { return conns[i].id < conns[j].id })
	var b strings.Builder
	now := time.Now()
	for _, c := range conns {
		c.mu.Lock()
		flags := "N"
		if c.queuedN >= 0 {
			flags = "x"
		}
		if c.unblock != nil {
			flags = "b"
		}
		if c.noEvict {
			flags += "e"
		}
		if c.noTouch {
			flags += "T"
		}
		// The buffers as Redis counts them: qbuf the unparsed request
		// bytes of the read buffer (rbs, fixed here, so rbp equals it),
		// argv-mem the last request's arguments, multi-mem the queued
		// MULTI commands, obl the replies collected, omem the reply
		// buffer's size (there is no reply list: oll is 0).
		rbs := int64(c.s.cfg.ReadBufferSize)
		qbuf, argv, multi := c.qbuf.Load(), c.argvMem.Load(), c.multiMem.Load()
		obl, omem := c.outLen.Load(), c.outCap.Load()
		fmt.Fprintf(&b, "id=%d addr=%s laddr=%s fd=%d name=%s age=%d idle=%d flags=%s db=0 sub=0 psub=0 ssub=0 multi=%d "+
			"qbuf=%d qbuf-free=%d argv-mem=%d multi-mem=%d rbs=%d rbp=%d obl=%d oll=0 omem=%d tot-mem=%d "+
			"events=r cmd=%s user=default redir=-1 resp=2 lib-name=%s lib-ver=%s\n",
			c.id, c.nc.RemoteAddr(), c.nc.LocalAddr(), c.fd, c.name,
			int(now.Sub(c.created).Seconds()), int(now.Sub(c.active).Seconds()), flags, c.queuedN,
			qbuf, rbs-qbuf, argv, multi, rbs, rbs, obl, omem, rbs+argv+multi+omem,
			c.lastCmd, c.libName, c.libVer)
		c.mu.Unlock()
	}
	return b.String()
}

func cmdCommand(x *execCtx, args [][]byte) error {
	all := func() []string {
		names := make([]string, 0, len(commandTable))
		for n := range commandTable {
			names = append(names, n)
		}
		sort.Strings(names)
		return names
	}
	if len(args) == 1 {
		names := all()
		x.out = redcon.AppendArray(x.out, len(names))
		for _, n := range names {
			x.out = appendCommandInfo(x.out, commandTable[n])
		}
		return nil
	}
	sub := strings.ToLower(string(args[1]))
	arity := map[string]int{"count": 2, "docs": -2, "info": -2, "list": -2, "getkeys": -4, "getkeysandflags": -4, "help": 2}
	want, known := arity[sub]
	if !known {
		x.errorf("ERR unknown subcommand '%s'. Try COMMAND HELP.", trunc(args[1], 128))
		return nil
	}
	if !arityOK(want, len(args)) {
		x.errorf("ERR wrong number of arguments for 'command|%s' command", sub)
		return nil
	}
	var names []string
	for _, a := range args[2:] {
		names = append(names, lower(a))
	}
	switch sub {
	case "help":
		x.out = appendHelp(x.out, "COMMAND",
			"(no subcommand)",
			"    Return details about all Redis commands.",
			"COUNT",
			"    Return the total number of commands in this Redis server.",
			"LIST",
			"    Return a list of all commands in this Redis server.",
			"INFO [<command-name> ...]",
			"    Return details about multiple Redis commands.",
			"    If no command names are given, documentation details for all",
			"    commands are returned.",
			"DOCS [<command-name> ...]",
			"    Return documentation details about multiple Redis commands.",
			"    If no command names are given, documentation details for all",
			"    commands are returned.",
			"GETKEYS <full-command>",
			"    Return the keys from a full Redis command.",
			"GETKEYSANDFLAGS <full-command>",
			"    Return the keys and the access flags from a full Redis command.")
	case "getkeys", "getkeysandflags":
		// As Redis's getKeysSubcommand, with its error texts.
		cmd := commandTable[lower(args[2])]
		full := args[2:]
		if cmd == nil {
			x.errorf("ERR Invalid command specified")
		} else if first, _, _ := keySpec(cmd); first == 0 {
			x.errorf("ERR The command has no key arguments")
		} else if !arityOK(cmd.arity, len(full)) {
			x.errorf("ERR Invalid number of arguments specified for command")
		} else {
			ks := commandKeys(cmd, full)
			x.out = redcon.AppendArray(x.out, len(ks))
			for i, k := range ks {
				if sub == "getkeys" {
					x.out = redcon.AppendBulk(x.out, k)
					continue
				}
				x.out = redcon.AppendArray(x.out, 2)
				x.out = redcon.AppendBulk(x.out, k)
				fl := keyFlags(cmd, full, i)
				x.out = redcon.AppendArray(x.out, len(fl))
				for _, f := range fl {
					x.out = redcon.AppendString(x.out, f)
				}
			}
		}
	case "count":
		x.out = redcon.AppendInt(x.out, int64(len(commandTable)))
	case "docs":
		x.out = appendCommandDocs(x.out, names)
	case "list":
		// Commands and their subcommands ("client|list"), as Redis 7.
		names = all()
		for n := range redisMeta {
			if i := strings.IndexByte(n, '|'); i > 0 && commandTable[n[:i]] != nil {
				names = append(names, n)
			}
		}
		sort.Strings(names)
		if len(args) > 2 {
			// FILTERBY MODULE name | ACLCAT category | PATTERN glob.
			if len(args) != 5 || !strings.EqualFold(string(args[2]), "filterby") {
				x.syntaxError()
				return nil
			}
			by, v := strings.ToLower(string(args[3])), args[4]
			kept := names[:0]
			for _, n := range names {
				var keep bool
				switch by {
				case "module":
					keep = false // no modules
				case "aclcat":
					keep = slices.ContainsFunc(redisMeta[n].acl, func(c string) bool {
						return strings.EqualFold(strings.TrimPrefix(c, "@"), string(v))
					})
				case "pattern":
					keep = globMatch(bytes.ToLower(v), []byte(n))
				default:
					x.syntaxError()
					return nil
				}
				if keep {
					kept = append(kept, n)
				}
			}
			names = kept
		}
		x.out = redcon.AppendArray(x.out, len(names))
		for _, n := range names {
			x.out = redcon.AppendBulkString(x.out, n)
		}
	case "info":
		if names == nil {
			names = all()
		}
		x.out = redcon.AppendArray(x.out, len(names))
		for _, n := range names {
			if cmd := commandTable[n]; cmd != nil {
				x.out = appendCommandInfo(x.out, cmd)
			} else {
				x.out = append(x.out, "$-1\r\n"...) // Redis's addReplyNull
			}
		}
	}
	return nil
}

// appendCommandInfo appends a COMMAND INFO entry as Redis 7: name, arity,
// flags, first key, last key, key step, then ACL categories, tips, key
// specifications and subcommands, all four empty here.
func appendCommandInfo(out []byte, cmd *command) []byte {
	out = redcon.AppendArray(out, 10)
	out = redcon.AppendBulkString(out, cmd.name)
	out = redcon.AppendInt(out, int64(cmd.arity))
	var flags []string
	if cmd.flags&flagWrite != 0 {
		flags = append(flags, "write")
	}
	if cmd.flags&flagRead != 0 {
		flags = append(flags, "readonly")
	}
	out = redcon.AppendArray(out, len(flags))
	for _, f := range flags {
		out = redcon.AppendString(out, f)
	}
	first, last, step := keySpec(cmd)
	out = redcon.AppendInt(out, int64(first))
	out = redcon.AppendInt(out, int64(last))
	out = redcon.AppendInt(out, int64(step))
	for range 4 {
		out = redcon.AppendArray(out, 0)
	}
	return out
}

func cmdGet(x *execCtx, args [][]byte) error {
	v, err := x.get(args[1])
	if err != nil {
		return err
	}
	if v == nil {
		x.null()
	} else {
		x.out = redcon.AppendBulk(x.out, v)
	}
	return nil
}

func cmdType(x *execCtx, args [][]byte) error {
	_, _, live, err := x.meta(args[1])
	if err != nil {
		return err
	}
	if !live {
		x.out = append(x.out, "+none\r\n"...)
	} else {
		x.out = append(x.out, "+string\r\n"...)
	}
	return nil
}

// cmdSet is SET key value [NX|XX] [GET] [EX s|PX ms|EXAT t|PXAT t|KEEPTTL],
// as Redis's setGenericCommand. A deadline already past (EXAT, PXAT)
// deletes the key, which then reads as absent as Redis's would.
func cmdSet(x *execCtx, args [][]byte) error {
	key, val := args[1], args[2]
	var nx, xx, get, keepTTL bool
	expiry := ""
	var expiryArg []byte
	// The options first, as Redis's parseExtendedStringArgumentsOrReply:
	// a syntax error anywhere wins over a bad number, and an expiry may
	// be repeated (the last one counts, and only it is parsed) but not
	// mixed with another kind or with KEEPTTL.
	for i := 3; i < len(args); i++ {
		opt := strings.ToUpper(string(args[i]))
		switch {
		case opt == "NX" && !xx:
			nx = true
		case opt == "XX" && !nx:
			xx = true
		case opt == "GET":
			get = true
		case opt == "KEEPTTL" && expiry == "":
			keepTTL = true
		case (opt == "EX" || opt == "PX" || opt == "EXAT" || opt == "PXAT") && (expiry == "" || expiry == opt) && !keepTTL && i+1 < len(args):
			expiry, expiryArg = opt, args[i+1]
			i++
		default:
			x.syntaxError()
			return nil
		}
	}
	var deadline int64
	if expiry != "" {
		n, ok := parseInt(expiryArg)
		if !ok {
			x.notInteger()
			return nil
		}
		if n <= 0 || (expiry == "EX" || expiry == "EXAT") && n > math.MaxInt64/1000 {
			x.errorf("ERR invalid expire time in 'set' command")
			return nil
		}
		if expiry == "EX" || expiry == "EXAT" {
			n *= 1000
		}
		if expiry == "EX" || expiry == "PX" {
			if n > math.MaxInt64-x.now() {
				x.errorf("ERR invalid expire time in 'set' command")
				return nil
			}
			n += x.now()
		}
		deadline = n
	}
	if !x.checkKey(key) {
		return nil
	}
	// SET ... GET reads the key as GET does (Redis counts its lookup in
	// keyspace_hits and misses).
	x.lookups = get
	if !nx && !xx && !get && !keepTTL && !x.expiredAt(deadline) {
		if err := x.tx.Put(key, x.encode(val, deadline)); err != nil {
			return x.writeErr(err)
		}
		x.wrote(key)
		x.ok()
		return nil
	}
	var old []byte
	var found, applied bool
	decide := func(o []byte, cur int64, live bool) (rmwResult, []byte, int64) {
		old, found = o, live
		if (nx && live) || (xx && !live) {
			return rmwKeep, nil, 0
		}
		applied = true
		d := deadline
		if keepTTL && live {
			d = cur
		}
		return rmwPut, val, d
	}
	var err error
	if get {
		err = x.rmw(key, decide)
	} else {
		// Without GET the old value is not needed, only its deadline:
		// a key whose value lost a chunk is replaced, as by a plain
		// SET (KEEPTTL needs the deadline to be readable).
		err = x.rmwMeta(key, keepTTL, func(cur int64, live bool) (rmwResult, []byte, int64) { return decide(nil, cur, live) })
	}
	if err != nil {
		return x.writeErr(err)
	}
	if applied {
		x.wrote(key)
	}
	switch {
	case get && found:
		x.out = redcon.AppendBulk(x.out, old)
	case get, !applied:
		x.null()
	default:
		x.ok()
	}
	return nil
}

// keySpec is where a command's keys are among its arguments, as Redis's
// legacy (first, last, step) key specification: arguments first to last
// (-1: the last argument), every step-th; all 0 for a command without
// keys. COMMAND INFO and COMMAND GETKEYS show it, and lockOrder uses it.
func keySpec(cmd *command) (first, last, step int) {
	switch cmd.name {
	case "dbsize", "flushall", "flushdb", "scan", "keys", "randomkey":
		return 0, 0, 0
	case "del", "exists", "mget", "watch", "unlink", "touch":
		return 1, -1, 1
	case "mset", "msetnx":
		return 1, -1, 2
	case "rename", "renamenx", "copy", "lcs":
		return 1, 2, 1
	case "bitop":
		return 2, -1, 1
	case "object", "memory":
		return 2, 2, 1
	}
	if cmd.flags&(flagRead|flagWrite) == 0 {
		return 0, 0, 0
	}
	return 1, 1, 1
}

// keyFlags returns the key-spec flags of the i-th key of a command, as
// COMMAND GETKEYSANDFLAGS answers them: Redis 7.0's, with SET's variable
// flags resolved as Redis's setGetKeys does (RW access update with GET,
// OW update without).
func keyFlags(cmd *command, args [][]byte, i int) []string {
	name := cmd.name
	if (name == "object" || name == "memory") && len(args) > 1 {
		name += "|" + lower(args[1])
	}
	if name == "set" {
		for _, a := range args[3:] {
			if strings.EqualFold(string(a), "get") {
				return []string{"RW", "access", "update"}
			}
		}
		return []string{"OW", "update"}
	}
	specs := redisMeta[name].keyFlags
	if len(specs) == 0 {
		return nil
	}
	fl := specs[min(i, len(specs)-1)]
	return slices.DeleteFunc(slices.Clone(fl), func(f string) bool { return f == "variable_flags" })
}

// commandKeys returns the keys args name, by keySpec.
func commandKeys(cmd *command, args [][]byte) [][]byte {
	first, last, step := keySpec(cmd)
	if first == 0 {
		return nil
	}
	if last < 0 {
		last += len(args)
	}
	var ks [][]byte
	for i := first; i <= last && i < len(args); i += step {
		ks = append(ks, args[i])
	}
	return ks
}

// writeKeys returns the keys a write command's arguments name that it
// may lock, for lockOrder; keys the engine cannot store are left out (the
// command refuses them itself). FLUSHALL, which locks every key, names
// none.
func writeKeys(args [][]byte) [][]byte {
	cmd := commandTable[lower(args[0])]
	if cmd == nil || cmd.flags&flagWrite == 0 {
		return nil
	}
	var out [][]byte
	for _, k := range commandKeys(cmd, args) {
		if storable(k) {
			out = append(out, k)
		}
	}
	return out
}

// sortedKeyStrings is sortedKeys as strings, for lockKeys.
func sortedKeyStrings(keys [][]byte) []string {
	out := make([]string, 0, len(keys))
	for _, k := range sortedKeys(keys) {
		out = append(out, string(k))
	}
	return out
}

// sortedKeys returns keys in byte order without repeats: the order in
// which a multi-key write takes its row locks, so that two such writes of
// the same keys never wait for each other in a cycle (see lockOrder).
func sortedKeys(keys [][]byte) [][]byte {
	if len(keys) < 2 {
		return keys
	}
	ks := slices.Clone(keys)
	slices.SortFunc(ks, bytes.Compare)
	return slices.CompactFunc(ks, bytes.Equal)
}

func cmdDel(x *execCtx, args [][]byte) error {
	n := 0
	// In key order (sortedKeys); a key named twice is deleted once and
	// counted once, as in Redis.
	for _, k := range sortedKeys(args[1:]) {
		if !storable(k) {
			continue
		}
		// Lock the key and learn whether it is live, then delete it:
		// the count is exact even with concurrent writers. An expired
		// key is deleted too, but not counted; one whose value cannot
		// be read (a chunk lost) is live.
		var live bool
		err := x.rmwMeta(k, false, func(_ int64, ok bool) (rmwResult, []byte, int64) {
			live = ok
			if ok {
				return rmwDelete, nil, 0
			}
			return rmwKeep, nil, 0
		})
		if err != nil {
			return err
		}
		if live {
			x.wrote(k)
			n++
		}
	}
	x.out = redcon.AppendInt(x.out, int64(n))
	return nil
}

func cmdExists(x *execCtx, args [][]byte) error {
	n := 0
	for _, k := range args[1:] {
		_, _, live, err := x.meta(k)
		if err != nil {
			return err
		}
		if live {
			n++
		}
	}
	x.out = redcon.AppendInt(x.out, int64(n))
	return nil
}

var (
	errNotInteger = errors.New("ERR value is not an integer or out of range")
	errOverflow   = errors.New("ERR increment or decrement would overflow")
)

// cmdIncrFamily is INCR, DECR, INCRBY and DECRBY: one read-modify-write
// (engine Update), so concurrent increments are never lost.
func cmdIncrFamily(x *execCtx, args [][]byte) error {
	name := lower(args[0])
	delta := int64(1)
	switch name {
	case "decr":
		delta = -1
	case "incrby", "decrby":
		d, ok := parseInt(args[2])
		if !ok {
			x.notInteger()
			return nil
		}
		if name == "decrby" {
			if d == math.MinInt64 {
				x.errorf("ERR decrement would overflow")
				return nil
			}
			d = -d
		}
		delta = d
	}
	key := args[1]
	if !x.checkKey(key) {
		return nil
	}
	// An increment keeps the key's expiry, as Redis's does; an expired
	// key counts as absent and the new one has none.
	var result int64
	var fail error
	err := x.rmw(key, func(old []byte, deadline int64, live bool) (rmwResult, []byte, int64) {
		var cur int64
		if live {
			v, ok := parseInt(old)
			if !ok {
				fail = errNotInteger
				return rmwKeep, nil, 0
			}
			cur = v
		}
		if (delta < 0 && cur < math.MinInt64-delta) || (delta > 0 && cur > math.MaxInt64-delta) {
			fail = errOverflow
			return rmwKeep, nil, 0
		}
		result = cur + delta
		return rmwPut, strconv.AppendInt(nil, result, 10), deadline
	})
	if err != nil {
		return x.writeErr(err)
	}
	if fail != nil {
		x.errorf("%s", fail.Error())
		return nil
	}
	x.wrote(key)
	x.out = redcon.AppendInt(x.out, result)
	return nil
}

func cmdMGet(x *execCtx, args [][]byte) error {
	start := len(x.out)
	x.out = redcon.AppendArray(x.out, len(args)-1)
	for _, k := range args[1:] {
		v, err := x.get(k)
		if err != nil {
			return err
		}
		if v == nil {
			x.null()
		} else {
			x.out = redcon.AppendBulk(x.out, v)
		}
		if len(x.out)-start > replyLimit {
			x.out = x.out[:start]
			x.errorf("ERR reply exceeds %d bytes", replyLimit)
			return nil
		}
	}
	return nil
}

func cmdMSet(x *execCtx, args [][]byte) error {
	if !x.checkPairs(args, "mset") {
		return nil
	}
	for _, i := range sortedPairs(args) {
		if err := x.tx.Put(args[i], encodeValue(args[i+1], 0)); err != nil {
			return err
		}
		x.wrote(args[i])
	}
	x.ok()
	return nil
}

// sortedPairs returns the argument positions of MSET's keys in key order,
// each key once, at its last position: as in Redis, the last value given
// for a key is the one set, and the ones before it are not written at all
// (they would only be versions for vacuum to remove). Key order is the lock
// order of lockOrder.
func sortedPairs(args [][]byte) []int {
	idx := make([]int, 0, len(args)/2)
	for i := 1; i+1 < len(args); i += 2 {
		idx = append(idx, i)
	}
	if len(idx) < 2 {
		return idx
	}
	slices.SortStableFunc(idx, func(a, b int) int { return bytes.Compare(args[a], args[b]) })
	out := idx[:0]
	for j, i := range idx {
		if j+1 < len(idx) && bytes.Equal(args[i], args[idx[j+1]]) {
			continue // a later value for the same key follows
		}
		out = append(out, i)
	}
	return out
}

func cmdDBSize(x *execCtx, _ [][]byte) error {
	if !x.inExec {
		// On its own, DBSIZE answers the keyspace count INFO keeps
		// while it is exact, without reading every key again.
		stop := x.c.watchClose().stop
		c, err := x.c.s.keyspaceCount(x.c.gone, true)
		stop()
		if err != nil {
			if x.c.clientGone() {
				return errClientGone
			}
			return err
		}
		x.out = redcon.AppendInt(x.out, c.keys)
		return nil
	}
	n := int64(0)
	err := x.tx.ScanPrefix(nil, nil, deadlineHdrSize, func(k, prefix []byte, total int) bool {
		if x.liveMeta(prefix, total) {
			n++
		} else {
			x.noteExpired(k)
		}
		return true
	})
	if err != nil {
		return err
	}
	x.out = redcon.AppendInt(x.out, n)
	return nil
}

func cmdFlushAll(x *execCtx, args [][]byte) error {
	if len(args) > 2 {
		x.syntaxError()
		return nil
	}
	if len(args) == 2 {
		if m := strings.ToUpper(string(args[1])); m != "SYNC" && m != "ASYNC" {
			x.syntaxError()
			return nil
		}
	}
	// The engine deletes every key the command's snapshot sees, in the
	// order of the heap pages holding them (DeleteRange), each under its
	// row lock as DEL does. As Redis's touchAllWatchedKeysInDb, only a
	// watched key that existed aborts its watcher's EXEC, and removing one
	// that had already expired does not. Only the deadline of each value
	// is read (of a large one, its first bytes); a key whose first bytes
	// cannot be read (a chunk lost) is deleted as one that existed.
	_, err := x.tx.DeleteRangePrefix(nil, nil, deadlineHdrSize, func(k, prefix []byte, total int, unreadable error) {
		if unreadable != nil || x.liveMeta(prefix, total) {
			x.wrote(k)
			return
		}
		x.expired()
	})
	if err != nil {
		return err
	}
	x.ok()
	return nil
}

// scanWatchCount is the least SCAN COUNT for which SCAN watches for its
// client going away (conn.watchClose): below it a SCAN is short, and the
// watch would cost more than the scan.
const scanWatchCount = 1000

// goneCheckEvery is how many keys a scan that stops when its client goes
// away visits between two looks at conn.gone.
const goneCheckEvery = 1024

// goneEvery reports, when n is a multiple of goneCheckEvery, whether the
// client went away (conn.gone), for a scan that stops then; n counts the
// keys visited so far. A client that went away is closed after the
// command. In an EXEC block it reports false: a command that stopped
// there would roll back the block's writes, which are carried out
// whether or not the client stays for the reply.
func (x *execCtx) goneEvery(n int) bool {
	return x.c.s.endedEvery(x.c.gone, n) && !x.inExec && x.c.clientGone()
}

// endedEvery reports, when n is a multiple of goneCheckEvery, whether ctx
// ended, for a scan of the keys that stops then; n counts the keys visited
// so far. It runs testGoneCheck, if set, at each look.
func (s *Server) endedEvery(ctx context.Context, n int) bool {
	if n%goneCheckEvery != goneCheckEvery-1 {
		return false
	}
	if f := s.testGoneCheck.Load(); f != nil {
		(*f)()
	}
	return ctx.Err() != nil
}

// cmdScan is SCAN cursor [MATCH pattern] [COUNT n] [TYPE t]. Keys are
// visited in key order; a cursor names the key to resume from in the
// server's cursor table (see cursorTable).
func cmdScan(x *execCtx, args [][]byte) error {
	cur, err := strconv.ParseUint(string(args[1]), 10, 64)
	if err != nil {
		x.errorf("ERR invalid cursor")
		return nil
	}
	count := 10
	var pattern []byte
	typeOK := true
	for i := 2; i < len(args); i++ {
		opt := strings.ToUpper(string(args[i]))
		if i+1 >= len(args) {
			x.syntaxError()
			return nil
		}
		switch opt {
		case "MATCH":
			pattern = args[i+1]
		case "COUNT":
			n, ok := parseInt(args[i+1])
			if !ok {
				x.notInteger()
				return nil
			}
			if n < 1 {
				x.syntaxError()
				return nil
			}
			count = int(min(n, 1<<20))
		case "TYPE":
			typeOK = strings.EqualFold(string(args[i+1]), "string")
		default:
			x.syntaxError()
			return nil
		}
		i++
	}
	var start []byte
	if cur != 0 {
		var ok bool
		if start, ok = x.c.s.cursor.get(cur); !ok {
			x.errorf("ERR invalid cursor")
			return nil
		}
	}
	var matched [][]byte
	var last []byte
	visited := 0
	if count >= scanWatchCount && !x.inExec {
		defer x.c.watchClose().stop()
	}
	gone := false
	err = x.tx.ScanPrefix(start, nil, deadlineHdrSize, func(k, prefix []byte, total int) bool {
		if gone = x.goneEvery(visited); gone {
			return false
		}
		visited++
		last = k
		if !x.liveMeta(prefix, total) {
			x.noteExpired(k)
		} else if typeOK && (pattern == nil || globMatch(pattern, k)) {
			matched = append(matched, k)
		}
		return visited < count
	})
	if err != nil {
		return err
	}
	if gone {
		return errClientGone
	}
	next := uint64(0)
	if visited == count {
		next = x.c.s.cursor.put(append(last, 0))
	}
	x.out = redcon.AppendArray(x.out, 2)
	x.out = redcon.AppendBulkString(x.out, strconv.FormatUint(next, 10))
	x.out = redcon.AppendArray(x.out, len(matched))
	for _, k := range matched {
		x.out = redcon.AppendBulk(x.out, k)
	}
	return nil
}

func (c *conn) multi(_ [][]byte) {
	if c.inMulti {
		c.out = redcon.AppendError(c.out, "ERR MULTI calls can not be nested")
		return
	}
	c.inMulti = true
	c.out = append(c.out, "+OK\r\n"...)
}

// reset is RESET, Redis 6.2's clearClientConnectionState: out of MULTI,
// every key unwatched, out of MONITOR, replies on, no name, no NO-EVICT or
// NO-TOUCH, and authenticated again only if no password is asked for. It
// answers +RESET even after CLIENT REPLY OFF.
func (c *conn) reset(_ [][]byte) {
	if c.inMulti {
		c.resetMulti()
	}
	c.unwatchAll()
	c.s.stopMonitor(c)
	c.replyOff, c.skipNext, c.replyOn = false, false, true
	c.authed = false
	c.mu.Lock()
	c.name = ""
	c.noEvict, c.noTouch = false, false
	c.mu.Unlock()
	c.out = append(c.out, "+RESET\r\n"...)
}

func (c *conn) discard(_ [][]byte) {
	if !c.inMulti {
		c.out = redcon.AppendError(c.out, "ERR DISCARD without MULTI")
		return
	}
	c.resetMulti()
	c.unwatchAll()
	c.out = append(c.out, "+OK\r\n"...)
}

func (c *conn) watch(args [][]byte) {
	if c.inMulti {
		c.out = redcon.AppendError(c.out, "ERR WATCH inside MULTI is not allowed")
		return
	}
	if err := c.watchKeys(args[1:]); err != nil {
		c.out = appendEngineError(c.out, err)
		return
	}
	c.out = append(c.out, "+OK\r\n"...)
}

// cmdShutdown parses the options as Redis 7's shutdownCommand: any of
// NOSAVE, SAVE, NOW, FORCE and ABORT, but not NOSAVE with SAVE, nor ABORT
// with any other (a syntax error). The shutdown itself is always the
// graceful one (there is no save to force past, nor to skip waiting for).
// Plain SHUTDOWN and SAVE end it with a checkpoint; NOSAVE, Redis's "do
// not persist on the way out", without one: every write is in the WAL,
// which the DB's Close makes durable to its end, so what it skips is the
// checkpoint's writes, and the next start replays the WAL since the last
// checkpoint (Server.Shutdown).
func cmdShutdown(x *execCtx, args [][]byte) error {
	var nosave, save, abort, other bool
	for _, a := range args[1:] {
		switch strings.ToUpper(string(a)) {
		case "NOSAVE":
			nosave = true
		case "SAVE":
			save = true
		case "NOW", "FORCE":
			other = true
		case "ABORT":
			abort = true
		default:
			x.syntaxError()
			return nil
		}
	}
	if (nosave && save) || (abort && (nosave || save || other)) {
		x.syntaxError()
		return nil
	}
	if abort {
		x.errorf("ERR No shutdown in progress.")
		return nil
	}
	// As Redis: no reply on success, the connection just closes, once
	// the shutdown is done (Config.OnShutdown).
	x.c.quit = true
	x.c.holdOpen = true
	x.c.s.log.Info("SHUTDOWN requested", "client", x.c.id, "nosave", nosave)
	if nosave {
		x.c.s.nosave.Store(true)
	}
	x.c.s.shutdownAsync()
	return nil
}

func cmdCheckpoint(x *execCtx, _ [][]byte) error {
	err := x.c.s.db.Checkpoint()
	x.c.s.saveFailed.Store(err != nil)
	if err != nil {
		x.out = appendEngineError(x.out, err)
		return nil
	}
	x.ok()
	return nil
}

// cmdVacuum runs a vacuum (engine DB.Vacuum) and replies +OK when it is
// done; the counters it moved show in INFO mvkv and the metrics.
func cmdVacuum(x *execCtx, _ [][]byte) error {
	// As BACKUP, a vacuum whose client goes away stops at its next page
	// (what it did so far stays done; the next vacuum goes on from there).
	stop := x.c.watchClose().stop
	_, err := x.c.s.db.Vacuum(x.c.gone)
	stop()
	if err != nil && x.c.clientGone() {
		x.c.s.log.Info("VACUUM stopped: its client went away", "id", x.c.id, "addr", x.c.nc.RemoteAddr().String(), "err", err)
		return errClientGone
	}
	if err != nil {
		x.out = appendEngineError(x.out, err)
		return nil
	}
	x.ok()
	return nil
}

// checkPairs checks the key-value pairs of MSET or MSETNX (args[0] is the
// command name) before anything is written, since inside EXEC there is no
// rolling back part of a command: an odd count is Redis's arity error, a
// bad key or a value over the engine's limit its own error. It reports
// whether the command may go on; when not, the error reply is written.
func (x *execCtx) checkPairs(args [][]byte, name string) bool {
	if len(args)%2 != 1 {
		x.errorf("ERR wrong number of arguments for '%s' command", name)
		return false
	}
	for i := 1; i < len(args); i += 2 {
		if !x.checkKey(args[i]) {
			return false
		}
		if len(args[i+1]) > MaxStoredValue {
			x.out = appendEngineError(x.out, engine.ErrTooLarge)
			x.failed = true
			return false
		}
	}
	return true
}
