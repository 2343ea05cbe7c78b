package server

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"mvkv/engine"
	"mvkv/vfs"
)

// TestEarlyLockReleaseEveryReadReply holds the WAL sync of another
// client's SET that creates a key, visible early, while clients send each
// command that reads it, counts it or lists it (EXISTS, MGET, TYPE,
// STRLEN, TTL, KEYS, SCAN, DBSIZE, RANDOMKEY, INFO keyspace, a MULTI block
// reading it): none is answered before the SET is durable. Once the sync
// is let through each is answered with the key in; when the sync fails
// instead, none tells of the key: each gets an error (INFO, a
// keyspace_error line).
func TestEarlyLockReleaseEveryReadReply(t *testing.T) {
	for _, fail := range []bool{false, true} {
		name := "sync succeeds"
		if fail {
			name = "sync fails"
		}
		t.Run(name, func(t *testing.T) { everyReadReply(t, fail) })
	}
}

// startGatedELRServer starts a server with cfg over a database with early
// lock release on whose WAL syncs the returned gate can hold and whose
// faults ffs can inject; the gate opens and the server and database close
// when the test ends (after a failed sync the shutdown checkpoint and Close
// report it).
func startGatedELRServer(t *testing.T, cfg Config) (ts *testServer, g *gateFS, ffs *vfs.FaultFS) {
	ffs = vfs.NewFaultFS(vfs.OS{})
	g = &gateFS{FS: ffs, blocked: make(chan struct{}, 64)}
	on := true
	db, err := engine.Open(t.TempDir(), engine.Options{FS: g, WALWriterDelay: time.Hour, EarlyLockRelease: &on, LockTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts = &testServer{s: New(db, cfg), db: db, addr: ln.Addr().String()}
	go ts.s.Serve(context.Background(), ln)
	t.Cleanup(func() {
		g.open()
		ts.s.Shutdown(context.Background())
		db.Close()
	})
	return ts, g, ffs
}

func everyReadReply(t *testing.T, fail bool) {
	ts, g, ffs := startGatedELRServer(t, Config{})
	db := ts.db
	a := ts.raw(t)
	a.cmd("SET", "k", "old")
	a.expect("+OK\r\n")
	// INFO keeps its count of the keys while no commit changes it: one
	// now, which the SET below must not leave in use.
	a.cmd("INFO", "keyspace")
	if got := a.reply(); !strings.Contains(got, "db0:keys=1,") {
		t.Fatalf("INFO keyspace = %q; want one key", got)
	}
	m := ts.raw(t)
	m.cmd("MULTI")
	m.expect("+OK\r\n")
	m.cmd("GET", "n")
	m.expect("+QUEUED\r\n")
	m.cmd("EXISTS", "n")
	m.expect("+QUEUED\r\n")

	setInFlight(t, ts, g, a, "n", "new")
	type read struct {
		args []string
		want string // in the reply once the SET is durable
	}
	reads := []read{
		{[]string{"EXISTS", "n"}, ":1\r\n"},
		{[]string{"MGET", "k", "n"}, "$3\r\nnew\r\n"},
		{[]string{"TYPE", "n"}, "+string\r\n"},
		{[]string{"STRLEN", "n"}, ":3\r\n"},
		{[]string{"TTL", "n"}, ":-1\r\n"},
		{[]string{"KEYS", "*"}, "$1\r\nn\r\n"},
		{[]string{"SCAN", "0"}, "$1\r\nn\r\n"},
		{[]string{"DBSIZE"}, ":2\r\n"},
		{[]string{"RANDOMKEY"}, "$1\r\n"},
		{[]string{"INFO", "keyspace"}, "db0:keys=2,"},
		{[]string{"EXEC"}, "*2\r\n$3\r\nnew\r\n:1\r\n"},
	}
	waits := db.Stats().Txn.DependencyWaits
	clients := make([]*raw, len(reads))
	for i, rd := range reads {
		if rd.args[0] == "EXEC" {
			clients[i] = m
		} else {
			clients[i] = ts.raw(t)
		}
		clients[i].cmd(rd.args...)
	}
	// Every read waits for the SET's flush before the sync is let
	// through (one that came after it would read a durable key and
	// prove nothing), but one of DBSIZE and INFO, which share one count
	// of the keys: it waits for the lock the other holds while it counts.
	for deadline := time.Now().Add(time.Minute); db.Stats().Txn.DependencyWaits < waits+uint64(len(reads)-1); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d reads wait for the SET's flush after a minute", db.Stats().Txn.DependencyWaits-waits, len(reads)-1)
		}
	}
	noReplyYet(t, a, "SET")
	for i, rd := range reads {
		noReplyYet(t, clients[i], strings.Join(rd.args, " ")+" of an undurable write")
	}
	if fail {
		ffs.Inject(vfs.Rule{Kinds: vfs.Ops(vfs.OpDatasync), Contains: "/wal/"})
	}
	g.open()
	if got := a.reply(); fail != strings.HasPrefix(got, "-") {
		t.Fatalf("SET replied %q (sync fails: %v)", got, fail)
	}
	for i, rd := range reads {
		got := clients[i].reply()
		what := strings.Join(rd.args, " ")
		switch {
		case !fail && !strings.Contains(got, rd.want):
			t.Errorf("%s = %q; want %q in it", what, got, rd.want)
		case fail && rd.args[0] == "INFO":
			if !strings.Contains(got, "keyspace_error:") || strings.Contains(got, "db0:") {
				t.Errorf("%s after the SET's sync failed = %q; want a keyspace_error line and no count", what, got)
			}
		case fail && !strings.HasPrefix(got, "-"):
			t.Errorf("%s after the SET's sync failed = %q; want an error", what, got)
		}
	}
}

// TestEarlyLockReleaseLastSerializationFailureWaits holds the WAL sync of
// another client's SET, visible early, while a command and an EXEC block
// read the key it wrote and then fail with a serialization failure on
// their last run: the error says that a write changed what they read, so,
// as a result would be, it is held until the SET is durable, and becomes
// the sync's error when the sync fails. No command of the server's own
// reaches this on demand (only FLUSHALL can, on a key created between its
// locks and its snapshot), so the test adds one for its duration.
func TestEarlyLockReleaseLastSerializationFailureWaits(t *testing.T) {
	const name = "x-read-then-fail"
	commandTable[name] = &command{name, 2, flagRead, func(x *execCtx, args [][]byte) error {
		if _, err := x.get(args[1]); err != nil {
			return err
		}
		return fmt.Errorf("a write changed %q: %w", args[1], engine.ErrSerializationFailure)
	}}
	t.Cleanup(func() { delete(commandTable, name) })
	for _, fail := range []bool{false, true} {
		what := "sync succeeds"
		if fail {
			what = "sync fails"
		}
		t.Run(what, func(t *testing.T) { lastSerializationFailure(t, name, fail) })
	}
}

func lastSerializationFailure(t *testing.T, name string, fail bool) {
	ts, g, ffs := startGatedELRServer(t, Config{MaxRetries: 1})
	db := ts.db
	a := ts.raw(t)
	single := ts.raw(t)
	block := ts.raw(t)
	block.cmd("MULTI")
	block.expect("+OK\r\n")
	block.cmd(name, "n")
	block.expect("+QUEUED\r\n")

	setInFlight(t, ts, g, a, "n", "new")
	waits := db.Stats().Txn.DependencyWaits
	single.cmd(name, "n")
	block.cmd("EXEC")
	// Both wait for the SET's flush, and neither replies meanwhile (a
	// reply sent at once fails here, before the waits are looked for
	// any longer).
	for deadline := time.Now().Add(time.Minute); ; {
		noReplyYet(t, single, "a serialization failure caused by an undurable write")
		noReplyYet(t, block, "EXEC's serialization failure caused by an undurable write")
		if db.Stats().Txn.DependencyWaits >= waits+2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 2 failed runs wait for the SET's flush after a minute", db.Stats().Txn.DependencyWaits-waits)
		}
	}
	if fail {
		ffs.Inject(vfs.Rule{Kinds: vfs.Ops(vfs.OpDatasync), Contains: "/wal/"})
	}
	g.open()
	if got := a.reply(); fail != strings.HasPrefix(got, "-") {
		t.Fatalf("SET replied %q (sync fails: %v)", got, fail)
	}
	for _, r := range []*raw{single, block} {
		got := r.reply()
		switch {
		case !fail && !strings.Contains(got, "a write changed"):
			t.Errorf("reply %q; want the serialization failure", got)
		case fail && (!strings.HasPrefix(got, "-MISCONF") || strings.Contains(got, "a write changed")):
			t.Errorf("reply after the SET's sync failed = %q; want the WAL's error, not the serialization failure", got)
		}
	}
}
