package server

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"

	"github.com/tidwall/redcon"

	"mvkv/engine"
)

// The keyspace commands beyond DEL, EXISTS, TYPE, SCAN and the expiry
// family, as Redis 7.0's db.c and object.c answer them.

// cmdKeys is KEYS pattern, from one snapshot (flagSnapshot), in key order.
func cmdKeys(x *execCtx, args [][]byte) error {
	var keys [][]byte
	size := 0
	// KEYS reads every key: it stops if its client goes away meanwhile.
	if !x.inExec {
		defer x.c.watchClose().stop()
	}
	visited := 0
	gone := false
	err := x.tx.ScanPrefix(nil, nil, deadlineHdrSize, func(k, prefix []byte, total int) bool {
		if gone = x.goneEvery(visited); gone {
			return false
		}
		visited++
		if !x.liveMeta(prefix, total) {
			x.noteExpired(k)
			return true
		}
		if globMatch(args[1], k) {
			keys = append(keys, k)
			size += len(k) + 16
		}
		return size <= replyLimit
	})
	if err != nil {
		return err
	}
	if gone {
		return errClientGone
	}
	if size > replyLimit {
		x.errorf("ERR reply exceeds %d bytes", replyLimit)
		return nil
	}
	x.out = redcon.AppendArray(x.out, len(keys))
	for _, k := range keys {
		x.out = redcon.AppendBulk(x.out, k)
	}
	return nil
}

// cmdRename is RENAME and RENAMENX key newkey. Both keys are locked
// before the snapshot (flagSnapshot); the value moves with its expiry.
func cmdRename(x *execCtx, args [][]byte) error {
	nx := lower(args[0]) == "renamenx"
	src, dst := args[1], args[2]
	v, d, ok, err := x.getDeadline(src)
	if err != nil {
		return err
	}
	if !ok {
		x.errorf("ERR no such key")
		return nil
	}
	if bytes.Equal(src, dst) {
		if nx {
			x.out = redcon.AppendInt(x.out, 0)
		} else {
			x.ok()
		}
		return nil
	}
	if !x.checkKey(dst) {
		return nil
	}
	if put, err := x.putValue(dst, v, d, nx); !put || err != nil {
		return err
	}
	if err := x.tx.Delete(src); err != nil {
		return err
	}
	x.wrote(src)
	x.wrote(dst)
	if nx {
		x.out = redcon.AppendInt(x.out, 1)
	} else {
		x.ok()
	}
	return nil
}

// cmdCopy is COPY source destination [DB destination-db] [REPLACE]. Only
// database 0 exists.
func cmdCopy(x *execCtx, args [][]byte) error {
	replace := false
	db := int64(0)
	for i := 3; i < len(args); i++ {
		switch opt := strings.ToLower(string(args[i])); {
		case opt == "replace":
			replace = true
		case opt == "db" && i+1 < len(args):
			n, ok := x.parseInt32(args[i+1])
			if !ok {
				return nil
			}
			if n < 0 || n >= 16 {
				// Outside Redis's 16 databases: refused at once, before
				// the options after it, as Redis's selectDb check.
				x.errorf("ERR DB index is out of range")
				return nil
			}
			db = n
			i++
		default:
			x.syntaxError()
			return nil
		}
	}
	if db != 0 {
		x.errorf("ERR DB index is out of range")
		return nil
	}
	src, dst := args[1], args[2]
	if bytes.Equal(src, dst) {
		x.errorf("ERR source and destination objects are the same")
		return nil
	}
	v, d, ok, err := x.getDeadline(src)
	if err != nil {
		return err
	}
	if !ok {
		x.out = redcon.AppendInt(x.out, 0)
		return nil
	}
	if !x.checkKey(dst) {
		return nil
	}
	if put, err := x.putValue(dst, v, d, !replace); !put || err != nil {
		return err
	}
	x.wrote(dst)
	x.out = redcon.AppendInt(x.out, 1)
	return nil
}

// cmdTouch counts the keys that exist, as EXISTS does, each named key
// once per time it is named. The server keeps no access times, so there
// is nothing else to touch.
func cmdTouch(x *execCtx, args [][]byte) error { return cmdExists(x, args) }

// cmdRandomKey answers a live key chosen at random, or null when there is
// none: the engine's random pick (about uniform over the keys, as Redis's
// random bucket), passing over keys found expired (and deleting them, as
// Redis's dbRandomKey does) up to 100 times, then the first live key from a
// random point of the key space.
func cmdRandomKey(x *execCtx, _ [][]byte) error {
	for range 100 {
		k, prefix, total, err := x.tx.RandomKey(deadlineHdrSize)
		if isNotFound(err) {
			x.null()
			return nil
		}
		if err != nil {
			return err
		}
		if x.liveMeta(prefix, total) {
			x.bulkOrNull(k)
			return nil
		}
		x.noteExpired(k)
	}
	var start [8]byte
	for i := range start {
		start[i] = byte(rand.N(256))
	}
	var found []byte
	visit := func(k, prefix []byte, total int) bool {
		if x.liveMeta(prefix, total) {
			found = k
			return false
		}
		x.noteExpired(k)
		return true
	}
	if err := x.tx.ScanPrefix(start[:], nil, deadlineHdrSize, visit); err != nil {
		return err
	}
	if found == nil {
		if err := x.tx.ScanPrefix(nil, start[:], deadlineHdrSize, visit); err != nil {
			return err
		}
	}
	x.bulkOrNull(found)
	return nil
}

// cmdExpireTime is EXPIRETIME and PEXPIRETIME: the deadline in Unix
// seconds (rounded to the nearest, as Redis's (ms+500)/1000) or
// milliseconds, -1 for a key without one, -2 for
// a missing key.
func cmdExpireTime(x *execCtx, args [][]byte) error {
	_, d, ok, err := x.meta(args[1])
	if err != nil {
		return err
	}
	switch {
	case !ok:
		d = -2
	case d == 0:
		d = -1
	case lower(args[0]) == "expiretime":
		d = d/1000 + (d%1000+500)/1000 // (d+500)/1000 without overflow
	}
	x.out = redcon.AppendInt(x.out, d)
	return nil
}

// sharedIntegers is Redis's OBJ_SHARED_INTEGERS: values 0 to 9999 are
// shared objects, whose OBJECT REFCOUNT is INT_MAX.
const sharedIntegers = 10000

// objectSubcommands are OBJECT's subcommands and their arities.
var objectSubcommands = map[string]int{"encoding": 3, "refcount": 3, "idletime": 3, "freq": 3, "help": 2}

func cmdObject(x *execCtx, args [][]byte) error {
	sub := strings.ToLower(string(args[1]))
	if !x.subcommandOK(args) {
		return nil
	}
	if sub == "help" {
		x.out = appendHelp(x.out, "OBJECT",
			"ENCODING <key>",
			"    Return the kind of internal representation used in order to store the value",
			"    associated with a <key>.",
			"FREQ <key>",
			"    Return the access frequency index of the <key>. The returned integer is",
			"    proportional to the logarithm of the recent access frequency of the key.",
			"IDLETIME <key>",
			"    Return the idle time of the <key>, that is the approximated number of",
			"    seconds elapsed since the last access to the key.",
			"REFCOUNT <key>",
			"    Return the number of references of the value associated with the specified",
			"    <key>.")
		return nil
	}
	v, err := x.get(args[2])
	if err != nil {
		return err
	}
	if v == nil {
		x.null()
		return nil
	}
	switch sub {
	case "encoding":
		x.out = redcon.AppendBulkString(x.out, objectEncoding(v))
	case "refcount":
		n := int64(1)
		if objectEncoding(v) == "int" {
			if i, _ := parseInt(v); i >= 0 && i < sharedIntegers {
				n = 1<<31 - 1
			}
		}
		x.out = redcon.AppendInt(x.out, n)
	case "idletime":
		// No access times are kept (they would turn every read into a
		// write); 0 is what Redis answers for a key just read.
		x.out = redcon.AppendInt(x.out, 0)
	case "freq":
		// As Redis under any maxmemory-policy but the LFU ones, which
		// are the only ones here.
		x.errorf("ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.")
	}
	return nil
}

// tupleOverhead is what one stored version costs besides its key and
// value: the heap tuple header and line pointer, and the key's index
// entry, in bytes.
const tupleOverhead = 64

func cmdMemory(x *execCtx, args [][]byte) error {
	sub := strings.ToLower(string(args[1]))
	switch sub {
	case "help":
		if len(args) != 2 {
			x.errorf("ERR wrong number of arguments for 'memory|help' command")
			return nil
		}
		x.out = appendHelp(x.out, "MEMORY",
			"USAGE <key> [SAMPLES <count>]",
			"    Return memory in bytes used by <key> and its value. Nested values are",
			"    sampled up to <count> times (default: 5, 0 means sample all).")
		return nil
	case "doctor":
		if len(args) != 2 {
			x.errorf("ERR wrong number of arguments for 'memory|doctor' command")
			return nil
		}
		// Redis's answer when it finds nothing to report; the engine's
		// memory is the buffer pool and the index, which INFO reports.
		x.out = redcon.AppendBulkString(x.out, "Hi Sam, I can't find any memory issue in your instance. I can only account for what occurs on this base.")
		return nil
	case "usage":
		if len(args) < 3 {
			x.errorf("ERR wrong number of arguments for 'memory|usage' command")
			return nil
		}
		for i := 3; i < len(args); i++ {
			if strings.EqualFold(string(args[i]), "samples") && i+1 < len(args) {
				n, ok := parseInt(args[i+1])
				if !ok {
					x.notInteger()
					return nil
				}
				if n < 0 { // Redis's memoryCommand
					x.syntaxError()
					return nil
				}
				i++
				continue
			}
			x.syntaxError()
			return nil
		}
		if !storable(args[2]) {
			x.null()
			return nil
		}
		raw, err := x.tx.Get(args[2])
		if err != nil {
			if isNotFound(err) {
				x.null()
				return nil
			}
			return err
		}
		if _, _, ok := x.live(raw, true); !ok {
			x.noteExpired(args[2])
			x.null()
			return nil
		}
		// The bytes the newest version takes in the heap.
		x.out = redcon.AppendInt(x.out, int64(len(args[2])+len(raw)+tupleOverhead))
		return nil
	}
	x.errorf("ERR unknown subcommand '%s'. Try MEMORY HELP.", trunc(args[1], 128))
	return nil
}

func isNotFound(err error) bool { return errors.Is(err, engine.ErrNotFound) }

// putValue writes v with deadline d to dst for RENAME and COPY. With
// ifAbsent it first reads dst, and if it exists writes nothing and
// replies 0. It reports whether it wrote; a failed write has its error
// reply written already, and err is for failures that end the command.
func (x *execCtx) putValue(dst, v []byte, d int64, ifAbsent bool) (bool, error) {
	if ifAbsent {
		cur, err := x.get(dst)
		if err != nil {
			return false, err
		}
		if cur != nil {
			x.out = redcon.AppendInt(x.out, 0)
			return false, nil
		}
	}
	if err := x.tx.Put(dst, x.encode(v, d)); err != nil {
		return false, x.writeErr(err)
	}
	return true, nil
}
