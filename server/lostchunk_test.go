package server

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"mvkv/engine"
)

// lostChunkPageSize is the engine's heap page size, which the test reads
// the heap file by.
const lostChunkPageSize = 8192

// chunkMarker is what fills the part of key's large value that the test
// damages: its first bytes (first) or bytes far past them, which lie in a
// later chunk.
func chunkMarker(key string, first bool) []byte {
	return []byte(fmt.Sprintf("<%s:%v>", key, first))
}

// lostChunkValue is a large value (about five heap pages, so five chunks)
// whose first 3,000 bytes repeat chunkMarker(key, true) and whose bytes
// from 20,000 to 30,000 repeat chunkMarker(key, false).
func lostChunkValue(key string) []byte {
	v := bytes.Repeat([]byte("."), 40000)
	fill := func(from, to int, m []byte) {
		for i := from; i+len(m) <= to; i += len(m) {
			copy(v[i:], m)
		}
	}
	fill(0, 3000, chunkMarker(key, true))
	fill(20000, 30000, chunkMarker(key, false))
	return v
}

// damageChunkPage flips a bit in the first heap page of dir that holds
// marker (three times over, as no page of another value does), and
// returns the file and offset it names in errors.
func damageChunkPage(t *testing.T, dir string, marker []byte) string {
	t.Helper()
	name := filepath.Join(dir, "heap", "00000000")
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.Repeat(marker, 3)
	var found []int
	for off := 0; off+lostChunkPageSize <= len(b); off += lostChunkPageSize {
		if bytes.Contains(b[off:off+lostChunkPageSize], want) {
			found = append(found, off)
		}
	}
	if len(found) == 0 {
		t.Fatalf("%q is on no heap page", marker)
	}
	off := found[0]
	b[off+4000] ^= 0x10
	if err := os.WriteFile(name, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%s at offset %d (block %d)", filepath.Join("heap", "00000000"), off, off/lostChunkPageSize)
}

// TestLostChunkKeys: keys whose large value lost a chunk to a damaged
// heap page (a bit flipped on disk, so the page fails its checksum), the
// first chunk or a later one, can be deleted (DEL, UNLINK, FLUSHALL, in
// MULTI too), overwritten (SET, SET XX) and watched over the server, where the
// read of the old value's deadline used to fail every such write: only
// the first bytes are read, and a value whose first bytes are lost counts
// as present. GET of one fails naming the damaged page's file and offset,
// and so does SET KEEPTTL of one whose deadline is lost. VACUUM fails on
// the damaged pages until zero_damaged_pages gives them up; then it frees
// what is left of the values, and Verify finds nothing.
func TestLostChunkKeys(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	firstLost := []string{"del-first", "unlink-first", "multi-first", "set-first", "setxx-first", "keepttl-first", "flush-first"}
	laterLost := []string{"del-later", "flush-later"}
	db, err := engine.Open(dir, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Hour).UnixMilli()
	err = db.Update(ctx, func(tx *engine.Txn) error {
		if err := tx.Put([]byte("small"), encodeValue([]byte("s"), 0)); err != nil {
			return err
		}
		for _, k := range append(append([]string(nil), firstLost...), laterLost...) {
			d := int64(0)
			if k == "del-later" || k == "keepttl-first" {
				d = deadline
			}
			if err := tx.Put([]byte(k), encodeValue(lostChunkValue(k), d)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	where := map[string]string{}
	for _, k := range firstLost {
		where[k] = damageChunkPage(t, dir, chunkMarker(k, true))
	}
	for _, k := range laterLost {
		where[k] = damageChunkPage(t, dir, chunkMarker(k, false))
	}

	ts := startServerIn(t, Config{}, engine.Options{}, dir)
	rdb := ts.client(t)
	for _, k := range []string{"del-first", "del-later"} {
		if err := rdb.Get(ctx, k).Err(); err == nil || !strings.Contains(err.Error(), "data corruption") || !strings.Contains(err.Error(), where[k]) {
			t.Fatalf("GET %s: %v; want data corruption naming %s", k, err, where[k])
		}
	}
	// A later chunk lost: the commands that read the first bytes answer.
	if n, err := rdb.Exists(ctx, "del-later").Result(); err != nil || n != 1 {
		t.Fatalf("EXISTS del-later: %d, %v", n, err)
	}
	if d, err := rdb.PTTL(ctx, "del-later").Result(); err != nil || d <= 0 {
		t.Fatalf("PTTL del-later: %v, %v", d, err)
	}
	if ok, err := rdb.MSetNX(ctx, "msetnx-new", "v", "del-later", "v").Result(); err != nil || ok {
		t.Fatalf("MSETNX over del-later: %v, %v; want false, nothing set", ok, err)
	}

	// WATCH reads the deadline of each key it watches.
	if err := rdb.Watch(ctx, func(*redis.Tx) error { return nil }, "del-first", "del-later"); err != nil {
		t.Fatalf("WATCH del-first del-later: %v", err)
	}

	if n, err := rdb.Del(ctx, "del-first", "del-later", "absent").Result(); err != nil || n != 2 {
		t.Fatalf("DEL of two keys whose values lost a chunk: %d, %v; want 2", n, err)
	}
	if n, err := rdb.Unlink(ctx, "unlink-first").Result(); err != nil || n != 1 {
		t.Fatalf("UNLINK unlink-first: %d, %v; want 1", n, err)
	}
	cmds, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, "multi-first")
		p.Set(ctx, "after", "a", 0)
		return nil
	})
	if err != nil || cmds[0].(*redis.IntCmd).Val() != 1 {
		t.Fatalf("MULTI DEL multi-first, SET after: %v, %v", cmds, err)
	}
	if err := rdb.Set(ctx, "set-first", "new", 0).Err(); err != nil {
		t.Fatalf("SET set-first: %v", err)
	}
	if ok, err := rdb.SetXX(ctx, "setxx-first", "newxx", 0).Result(); err != nil || !ok {
		t.Fatalf("SET setxx-first XX: %v, %v; want it set (the key is there)", ok, err)
	}
	err = rdb.SetArgs(ctx, "keepttl-first", "v", redis.SetArgs{KeepTTL: true}).Err()
	if err == nil || !strings.Contains(err.Error(), where["keepttl-first"]) {
		t.Fatalf("SET keepttl-first KEEPTTL, whose deadline is lost: %v; want data corruption naming %s", err, where["keepttl-first"])
	}
	for k, want := range map[string]string{"set-first": "new", "setxx-first": "newxx", "after": "a"} {
		if v, err := rdb.Get(ctx, k).Result(); err != nil || v != want {
			t.Fatalf("GET %s: %q, %v; want %q", k, v, err, want)
		}
	}
	for _, k := range []string{"del-first", "del-later", "unlink-first", "multi-first"} {
		if n, err := rdb.Exists(ctx, k).Result(); err != nil || n != 0 {
			t.Fatalf("EXISTS %s after its delete: %d, %v", k, n, err)
		}
	}
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatalf("FLUSHALL: %v", err)
	}
	if n, err := rdb.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("DBSIZE after FLUSHALL: %d, %v", n, err)
	}

	// The damaged pages are still there: vacuum reads them, and fails.
	if err := rdb.Do(ctx, "VACUUM").Err(); err == nil || !strings.Contains(err.Error(), "data corruption") {
		t.Fatalf("VACUUM over damaged pages: %v", err)
	}
	if err := rdb.ConfigSet(ctx, "zero_damaged_pages", "on").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Do(ctx, "VACUUM").Err(); err != nil {
		t.Fatalf("VACUUM with zero_damaged_pages on: %v", err)
	}
	rep, err := ts.db.Verify()
	if err != nil || !rep.OK() {
		t.Fatalf("Verify after VACUUM: %v\n%s", err, rep)
	}
}
