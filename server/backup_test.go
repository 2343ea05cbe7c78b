package server

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"mvkv/engine"
	"mvkv/vfs"
)

// TestBackupCommand takes a copy with BACKUP while a client writes, and
// opens it: every write acknowledged before BACKUP was sent is there. It
// also checks BACKUP's refusals: a relative path, one holding a NUL, one
// inside the data directory, an existing target, inside MULTI, and
// enable-backup-command no.
func TestBackupCommand(t *testing.T) {
	data := t.TempDir()
	ts := startServerIn(t, Config{}, engine.Options{}, data)
	rdb := ts.client(t)
	ctx := context.Background()
	for i := range 200 {
		if err := rdb.Set(ctx, "k"+strconv.Itoa(i), "v"+strconv.Itoa(i), 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// A writer beside the backup.
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if err := rdb.Incr(ctx, "counter").Err(); err != nil {
				done <- err
				return
			}
		}
	}()
	target := filepath.Join(t.TempDir(), "copy")
	if got := rdb.Do(ctx, "BACKUP", target).Val(); got != "OK" {
		t.Fatalf("BACKUP: %v (%v)", got, rdb.Do(ctx, "BACKUP", target).Err())
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := rdb.Do(ctx, "CONFIG", "GET", "enable-backup-command").String(); !strings.Contains(got, "local") {
		t.Fatalf("CONFIG GET enable-backup-command: %s", got)
	}
	for _, c := range []struct {
		args []any
		want string
	}{
		{[]any{"BACKUP", target}, "backup target already exists"},
		{[]any{"BACKUP", "relative/dir"}, "ERR BACKUP needs an absolute path"},
		{[]any{"BACKUP", target + "2\x00x"}, "ERR BACKUP needs an absolute path"},
		{[]any{"BACKUP", filepath.Join(data, "copy")}, "inside the data directory"},
		{[]any{"BACKUP", data + "/wal/../x"}, "inside the data directory"},
		{[]any{"BACKUP"}, "ERR wrong number of arguments for 'backup' command"},
		{[]any{"CONFIG", "SET", "enable-backup-command", "yes"}, "can't set immutable config"},
	} {
		if err := rdb.Do(ctx, c.args...).Err(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error holding %q", c.args, err, c.want)
		}
	}
	r := ts.raw(t)
	r.cmd("MULTI")
	r.reply()
	r.cmd("BACKUP", filepath.Join(t.TempDir(), "x"))
	if got := r.reply(); !strings.Contains(got, "not allowed") && !strings.Contains(got, "MULTI") {
		t.Errorf("BACKUP in MULTI: %q", got)
	}

	db, err := engine.Open(target, engine.Options{LockTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("open the copy: %v", err)
	}
	defer db.Close()
	if err := db.View(ctx, func(tx *engine.Txn) error {
		for i := range 200 {
			v, err := tx.Get([]byte("k" + strconv.Itoa(i)))
			if err != nil || string(v) != "v"+strconv.Itoa(i) {
				t.Errorf("k%d in the copy: %q, %v", i, v, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if rep, err := db.Verify(); err != nil || !rep.OK() {
		t.Fatalf("verify the copy: %v %v", err, rep.Problems)
	}

	off := startServer(t, Config{BackupCommand: "no"})
	err = off.client(t).Do(ctx, "BACKUP", filepath.Join(t.TempDir(), "y")).Err()
	if err == nil || !strings.Contains(err.Error(), "BACKUP command not allowed") {
		t.Fatalf("BACKUP with enable-backup-command no: %v", err)
	}
}

// TestIsLocal: who "local" lets run BACKUP (and protected mode admits).
func TestIsLocal(t *testing.T) {
	for _, c := range []struct {
		addr net.Addr
		want bool
	}{
		{&net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 5}, true},
		{&net.TCPAddr{IP: net.ParseIP("::1"), Port: 5}, true},
		{&net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 5}, false},
		{&net.UnixAddr{Name: "/tmp/s", Net: "unix"}, true},
	} {
		if got := isLocal(fakeConn{remote: c.addr}); got != c.want {
			t.Errorf("isLocal(%v) = %v, want %v", c.addr, got, c.want)
		}
	}
}

type fakeConn struct {
	net.Conn
	remote net.Addr
}

func (c fakeConn) RemoteAddr() net.Addr { return c.remote }

// TestShutdownClientWaitsForOnShutdown: the connection of the client that
// sent SHUTDOWN closes only after Config.OnShutdown has returned (mvkv
// serve closes the DB there), so that a script's next step after
// `redis-cli SHUTDOWN` finds the data directory closed.
func TestShutdownClientWaitsForOnShutdown(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	let := func() { once.Do(func() { close(release) }) }
	// On a failure below, the deferred call lets the hook return before
	// the test's cleanup shuts the server down, which would otherwise
	// wait for it for ever.
	defer let()
	ts := startServer(t, Config{OnShutdown: func() error {
		close(entered)
		<-release
		return nil
	}})
	r := ts.raw(t)
	r.cmd("SET", "k", "v")
	r.reply()
	r.cmd("SHUTDOWN")
	<-entered
	// The hook is running: the connection must still be open.
	if err := r.nc.SetReadDeadline(time.Now().Add(100 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	if n, err := r.nc.Read(b[:]); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("while OnShutdown runs, a read of the SHUTDOWN client's connection gave %d bytes, %v; want it still open", n, err)
	}
	let()
	if err := r.nc.SetReadDeadline(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if n, err := r.nc.Read(b[:]); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("after the shutdown, a read gave %d bytes, %v; want EOF", n, err)
	}
}

// renameGateFS is the OS whose Rename onto target signals entered and
// waits for release: a BACKUP held at its last step.
type renameGateFS struct {
	vfs.OS
	target           string
	entered, release chan struct{}
}

func (f renameGateFS) Rename(oldname, newname string) error {
	if newname == f.target {
		close(f.entered)
		<-f.release
	}
	return f.OS.Rename(oldname, newname)
}

// TestShutdownRepliesToLongBackup: a BACKUP still running more than
// shutdownWriteGrace after a SHUTDOWN from another client finishes and
// gets its OK; the grace for writing a reply starts when the reply is
// written, not when the shutdown began (the client read all along, yet
// lost the reply of a backup that completed).
func TestShutdownRepliesToLongBackup(t *testing.T) {
	target := filepath.Join(t.TempDir(), "bk")
	gate := renameGateFS{target: target, entered: make(chan struct{}), release: make(chan struct{})}
	var once sync.Once
	let := func() { once.Do(func() { close(gate.release) }) }
	defer let()
	ts := startServerOn(t, Config{}, engine.Options{FS: gate})
	r := ts.raw(t)
	r.cmd("SET", "k", "v")
	r.reply()
	r.cmd("BACKUP", target)
	<-gate.entered
	sd := ts.raw(t)
	sd.cmd("SHUTDOWN")
	time.Sleep(shutdownWriteGrace + 300*time.Millisecond)
	let()
	if err := r.nc.SetReadDeadline(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	line, err := r.br.ReadString('\n')
	if line != "+OK\r\n" {
		t.Fatalf("BACKUP finished after the shutdown's first %v: reply %q, %v; want +OK", shutdownWriteGrace, line, err)
	}
	if _, err := os.Stat(filepath.Join(target, "control")); err != nil {
		t.Fatal(err)
	}
}
