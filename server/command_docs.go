package server

import (
	"sort"
	"strings"

	"github.com/tidwall/redcon"
)

// argDoc is one argument in COMMAND DOCS, as Redis's command JSON files
// describe it: redis-cli builds its help and its argument hints from them.
type argDoc struct {
	name, typ, token string
	optional         bool
	multiple         bool
	sub              []argDoc // for the types oneof and block
}

// cmdDoc is a command's COMMAND DOCS entry.
type cmdDoc struct {
	summary, since, group, complexity string
	args                              []argDoc
}

func key() argDoc                       { return argDoc{name: "key", typ: "key"} }
func str(name string) argDoc            { return argDoc{name: name, typ: "string"} }
func integer(name string) argDoc        { return argDoc{name: name, typ: "integer"} }
func tok(t string) argDoc               { return argDoc{name: strings.ToLower(t), typ: "pure-token", token: t} }
func tokArg(t, typ, name string) argDoc { return argDoc{name: name, typ: typ, token: t} }
func opt(a argDoc) argDoc               { a.optional = true; return a }
func many(a argDoc) argDoc              { a.multiple = true; return a }
func oneof(name string, alts ...argDoc) argDoc {
	return argDoc{name: name, typ: "oneof", sub: alts}
}
func block(name string, parts ...argDoc) argDoc {
	return argDoc{name: name, typ: "block", sub: parts}
}

// commandDocs holds the entries COMMAND DOCS returns, by command name.
var commandDocs = map[string]cmdDoc{
	"ping":         {"Returns the server's liveliness response.", "1.0.0", "connection", "O(1)", []argDoc{opt(str("message"))}},
	"echo":         {"Returns the given string.", "1.0.0", "connection", "O(1)", []argDoc{str("message")}},
	"hello":        {"Handshakes with the server (RESP2 only).", "6.0.0", "connection", "O(1)", []argDoc{opt(block("arguments", integer("protover"), opt(block("auth", tokArg("AUTH", "string", "username"), str("password"))), opt(tokArg("SETNAME", "string", "clientname"))))}},
	"auth":         {"Authenticates the connection.", "1.0.0", "connection", "O(N) where N is the number of passwords defined for the user", []argDoc{opt(str("username")), str("password")}},
	"quit":         {"Closes the connection.", "1.0.0", "connection", "O(1)", nil},
	"select":       {"Changes the selected database (only 0 exists).", "1.0.0", "connection", "O(1)", []argDoc{integer("index")}},
	"client":       {"A container for client connection commands: ID, INFO, GETNAME, SETNAME, SETINFO, LIST, HELP.", "2.4.0", "connection", "Depends on subcommand.", nil},
	"slowlog":      {"A container for slow log commands: GET, LEN, RESET, HELP.", "2.2.12", "server", "Depends on subcommand.", nil},
	"acl":          {"A container for ACL commands: WHOAMI, USERS, LIST, HELP (one user, default).", "6.0.0", "server", "Depends on subcommand.", nil},
	"cluster":      {"A container for cluster commands: this server has no cluster support.", "3.0.0", "cluster", "Depends on subcommand.", nil},
	"asking":       {"Signals that a cluster client is following an -ASK redirect (no cluster support here).", "3.0.0", "cluster", "O(1)", nil},
	"readonly":     {"Enables read-only queries for a connection to a cluster replica node (no cluster support here).", "3.0.0", "cluster", "O(1)", nil},
	"readwrite":    {"Enables read-write queries for a connection to a cluster replica node (no cluster support here).", "3.0.0", "cluster", "O(1)", nil},
	"bgrewriteaof": {"Starts a checkpoint in the background, after which the WAL before it is recycled (the WAL's rewrite).", "1.0.0", "server", "O(1)", nil},
	"command":      {"Returns detailed information about all commands.", "2.8.13", "server", "O(N) where N is the total number of commands", nil},
	"config":       {"A container for CONFIG GET and CONFIG SET; engine knobs take PostgreSQL's names.", "2.0.0", "server", "Depends on subcommand.", nil},
	"info":         {"Returns information and statistics about the server and the engine.", "1.0.0", "server", "O(1)", []argDoc{opt(many(str("section")))}},
	"dbsize":       {"Returns the number of keys in the database.", "1.0.0", "server", "O(N) where N is the number of keys", nil},
	"flushall":     {"Removes all keys.", "1.0.0", "server", "O(N) where N is the number of keys", []argDoc{opt(oneof("flush-type", tok("ASYNC"), tok("SYNC")))}},
	"type":         {"Determines the type of value stored at a key.", "1.0.0", "generic", "O(1)", []argDoc{key()}},
	"get":          {"Returns the string value of a key.", "1.0.0", "string", "O(1)", []argDoc{key()}},
	"set": {"Sets the string value of a key, ignoring its type. The key is created if it doesn't exist.", "1.0.0", "string", "O(1)", []argDoc{
		key(), str("value"),
		opt(oneof("condition", tok("NX"), tok("XX"))),
		opt(tok("GET")),
		opt(oneof("expiration", tokArg("EX", "integer", "seconds"), tokArg("PX", "integer", "milliseconds"),
			tokArg("EXAT", "unix-time", "unix-time-seconds"), tokArg("PXAT", "unix-time", "unix-time-milliseconds"), tok("KEEPTTL"))),
	}},
	"del":        {"Deletes one or more keys.", "1.0.0", "generic", "O(N) where N is the number of keys", []argDoc{many(key())}},
	"exists":     {"Determines whether one or more keys exist.", "3.0.3", "generic", "O(N) where N is the number of keys", []argDoc{many(key())}},
	"incr":       {"Increments the integer value of a key by one. Uses 0 as initial value if the key doesn't exist.", "1.0.0", "string", "O(1)", []argDoc{key()}},
	"decr":       {"Decrements the integer value of a key by one. Uses 0 as initial value if the key doesn't exist.", "1.0.0", "string", "O(1)", []argDoc{key()}},
	"incrby":     {"Increments the integer value of a key by a number. Uses 0 as initial value if the key doesn't exist.", "1.0.0", "string", "O(1)", []argDoc{key(), integer("increment")}},
	"decrby":     {"Decrements a number from the integer value of a key. Uses 0 as initial value if the key doesn't exist.", "1.0.0", "string", "O(1)", []argDoc{key(), integer("decrement")}},
	"mget":       {"Atomically returns the string values of one or more keys.", "1.0.0", "string", "O(N) where N is the number of keys", []argDoc{many(key())}},
	"mset":       {"Atomically creates or modifies the string values of one or more keys.", "1.0.1", "string", "O(N) where N is the number of keys", []argDoc{many(block("data", key(), str("value")))}},
	"scan":       {"Iterates over the key names in the database, in key order.", "2.8.0", "generic", "O(1) for every call. O(N) for a complete iteration", []argDoc{integer("cursor"), opt(tokArg("MATCH", "pattern", "pattern")), opt(tokArg("COUNT", "integer", "count")), opt(tokArg("TYPE", "string", "type"))}},
	"expire":     {"Sets the expiration time of a key in seconds.", "1.0.0", "generic", "O(1)", expireArgs("seconds", "integer")},
	"pexpire":    {"Sets the expiration time of a key in milliseconds.", "2.6.0", "generic", "O(1)", expireArgs("milliseconds", "integer")},
	"expireat":   {"Sets the expiration time of a key to a Unix timestamp.", "1.2.0", "generic", "O(1)", expireArgs("unix-time-seconds", "unix-time")},
	"pexpireat":  {"Sets the expiration time of a key to a Unix milliseconds timestamp.", "2.6.0", "generic", "O(1)", expireArgs("unix-time-milliseconds", "unix-time")},
	"persist":    {"Removes the expiration time of a key.", "2.2.0", "generic", "O(1)", []argDoc{key()}},
	"ttl":        {"Returns the expiration time in seconds of a key.", "1.0.0", "generic", "O(1)", []argDoc{key()}},
	"pttl":       {"Returns the expiration time in milliseconds of a key.", "2.6.0", "generic", "O(1)", []argDoc{key()}},
	"multi":      {"Starts a transaction (one engine transaction at EXEC).", "1.2.0", "transactions", "O(1)", nil},
	"exec":       {"Executes all commands in a transaction with one commit.", "1.2.0", "transactions", "Depends on commands in the transaction", nil},
	"discard":    {"Discards a transaction.", "2.0.0", "transactions", "O(N), when N is the number of queued commands", nil},
	"watch":      {"Monitors changes to keys to determine the execution of a transaction.", "2.2.0", "transactions", "O(1) for every key.", []argDoc{many(key())}},
	"unwatch":    {"Forgets about watched keys of a transaction.", "2.2.0", "transactions", "O(1)", nil},
	"shutdown":   {"Stops the server: finishes running commands, takes a checkpoint (none with NOSAVE).", "1.0.0", "server", "O(1)", []argDoc{opt(oneof("save-selector", tok("NOSAVE"), tok("SAVE"))), opt(tok("NOW")), opt(tok("FORCE")), opt(tok("ABORT"))}},
	"checkpoint": {"Takes a checkpoint, as PostgreSQL's CHECKPOINT.", "0.1.0", "server", "O(N) where N is the number of dirty pages", nil},
	"vacuum":     {"Runs vacuum, as PostgreSQL's VACUUM.", "0.1.0", "server", "O(N) where N is the number of heap pages", nil},
	"backup":     {"Writes a copy of the database, taken while clients keep writing, into a new directory on the server's host, as PostgreSQL's pg_basebackup.", "0.1.0", "server", "O(N) where N is the size of the database", []argDoc{str("directory")}},
}

func expireArgs(name, typ string) []argDoc {
	return []argDoc{key(), argDoc{name: name, typ: typ}, opt(oneof("condition", tok("NX"), tok("XX"), tok("GT"), tok("LT")))}
}

// appendCommandDocs appends COMMAND DOCS [name ...]: a map (a flat array
// in RESP2) from each known name to its documentation; unknown names are
// left out, as Redis does.
func appendCommandDocs(out []byte, names []string) []byte {
	if names == nil {
		for n := range commandTable {
			names = append(names, n)
		}
		sort.Strings(names)
	}
	var known []string
	for _, n := range names {
		if _, ok := commandTable[n]; ok {
			known = append(known, n)
		}
	}
	out = redcon.AppendArray(out, 2*len(known))
	for _, n := range known {
		d := commandDocs[n]
		out = redcon.AppendBulkString(out, n)
		fields := 8
		if len(d.args) > 0 {
			fields += 2
		}
		out = redcon.AppendArray(out, fields)
		for _, kv := range [][2]string{{"summary", d.summary}, {"since", d.since}, {"group", d.group}, {"complexity", d.complexity}} {
			out = redcon.AppendBulkString(out, kv[0])
			out = redcon.AppendBulkString(out, kv[1])
		}
		if len(d.args) > 0 {
			out = redcon.AppendBulkString(out, "arguments")
			out = appendArgDocs(out, d.args)
		}
	}
	return out
}

func appendArgDocs(out []byte, args []argDoc) []byte {
	out = redcon.AppendArray(out, len(args))
	for _, a := range args {
		var flags []string
		if a.optional {
			flags = append(flags, "optional")
		}
		if a.multiple {
			flags = append(flags, "multiple")
		}
		n := 4
		if a.token != "" {
			n += 2
		}
		if len(flags) > 0 {
			n += 2
		}
		if len(a.sub) > 0 {
			n += 2
		}
		out = redcon.AppendArray(out, n)
		out = redcon.AppendBulkString(out, "name")
		out = redcon.AppendBulkString(out, a.name)
		out = redcon.AppendBulkString(out, "type")
		out = redcon.AppendBulkString(out, a.typ)
		if a.token != "" {
			out = redcon.AppendBulkString(out, "token")
			out = redcon.AppendBulkString(out, a.token)
		}
		if len(flags) > 0 {
			out = redcon.AppendBulkString(out, "flags")
			out = redcon.AppendArray(out, len(flags))
			for _, f := range flags {
				out = redcon.AppendString(out, f)
			}
		}
		if len(a.sub) > 0 {
			out = redcon.AppendBulkString(out, "arguments")
			out = appendArgDocs(out, a.sub)
		}
	}
	return out
}
