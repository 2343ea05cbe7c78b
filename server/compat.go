package server

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/tidwall/redcon"
)

// Commands that clients, libraries and monitoring tools send to learn what
// kind of server they talk to, answered as a Redis 7.0 with its defaults
// would be: one user (default, whose password is requirepass), cluster
// support disabled, no tracking, no blocked clients.

// cmdACL is ACL WHOAMI | USERS | LIST | HELP. The only user is default,
// with every permission; the rest of ACL (SETUSER and the other
// subcommands that define users) is not supported.
func cmdACL(x *execCtx, args [][]byte) error {
	sub := strings.ToLower(string(args[1]))
	// The subcommands and their arities are Redis's, from redisMeta.
	if !x.subcommandOK(args) {
		return nil
	}
	switch sub {
	case "help":
		x.out = appendHelp(x.out, "ACL",
			"LIST",
			"    Show users details in config file format.",
			"USERS",
			"    List all the registered usernames.",
			"WHOAMI",
			"    Return the current connection username.")
	case "whoami":
		x.out = redcon.AppendBulkString(x.out, "default")
	case "users":
		x.out = redcon.AppendArray(x.out, 1)
		x.out = redcon.AppendBulkString(x.out, "default")
	case "list":
		pass := "nopass"
		if p := x.c.s.requirePass(); p != "" {
			sum := sha256.Sum256([]byte(p))
			pass = "#" + hex.EncodeToString(sum[:])
		}
		x.out = redcon.AppendArray(x.out, 1)
		x.out = redcon.AppendBulkString(x.out, "user default on "+pass+" ~* &* +@all")
	}
	return nil
}

// clusterSubcommands are Redis 7.0's CLUSTER subcommands with their
// arities, each answered with Redis's error for a server without cluster
// support once its arity is right.
var clusterSubcommands = map[string]int{
	"addslots": -3, "addslotsrange": -4, "bumpepoch": 2, "count-failure-reports": 3,
	"countkeysinslot": 3, "delslots": -3, "delslotsrange": -4, "failover": -2,
	"flushslots": 2, "forget": 3, "getkeysinslot": 4, "help": 2, "info": 2,
	"keyslot": 3, "links": 2, "meet": -4, "myid": 2, "nodes": 2, "replicas": 3,
	"replicate": 3, "reset": -2, "saveconfig": 2, "set-config-epoch": 3,
	"setslot": -4, "shards": 2, "slaves": 3, "slots": 2,
}

// cmdCluster is CLUSTER, READONLY, READWRITE and ASKING: clients
// (go-redis's cluster client, redis-cli -c) send them to find out whether
// the server is a cluster node, and this one is not.
func cmdCluster(x *execCtx, args [][]byte) error {
	if lower(args[0]) == "cluster" {
		if !x.subcommandOK(args) {
			return nil
		}
	}
	x.errorf("ERR This instance has cluster support disabled")
	return nil
}

// cmdBgRewriteAOF is BGREWRITEAOF. Redis rewrites its append-only file
// so that it stops growing; the WAL's equivalent is a checkpoint, after
// which the segments before its redo point are recycled, so BGREWRITEAOF
// starts one in the background, as BGSAVE does.
func cmdBgRewriteAOF(x *execCtx, args [][]byte) error {
	s := x.c.s
	if !s.bgsave.CompareAndSwap(false, true) {
		x.out = append(x.out, "+Background append only file rewriting scheduled\r\n"...)
		return nil
	}
	go s.backgroundCheckpoint("BGREWRITEAOF")
	x.out = append(x.out, "+Background append only file rewriting started\r\n"...)
	return nil
}
