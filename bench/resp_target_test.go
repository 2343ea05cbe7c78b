package bench

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"mvkv/engine"
	"mvkv/server"
)

// startRESP serves a fresh engine over RESP on a loopback port.
func startRESP(t *testing.T) string {
	t.Helper()
	return startRESPWith(t, server.Config{})
}

// startRESPWith is startRESP with the server configured by cfg.
func startRESPWith(t *testing.T, cfg server.Config) string {
	t.Helper()
	db, err := engine.Open(t.TempDir(), engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := server.New(db, cfg)
	done := make(chan error, 1)
	go func() { done <- s.Serve(context.Background(), ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		s.Shutdown(ctx)
		<-done
		db.Close()
	})
	return ln.Addr().String()
}

// TestRESPClientRefused: a run with more clients than the server's
// maxclients fails naming the server's reason, which the client library
// reports as the connection's end.
func TestRESPClientRefused(t *testing.T) {
	addr := startRESPWith(t, server.Config{MaxClients: 3})
	ctx := context.Background()
	tg, err := OpenTarget("resp="+addr, "", TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	var log bytes.Buffer
	if err := Load(ctx, tg, 1, testAccounts, &log); err != nil {
		t.Fatal(err)
	}
	_, err = Run(ctx, tg, RunConfig{Workload: SimpleUpdate, Scale: 1, Accounts: testAccounts, Clients: 8, Threads: 1, Transactions: 1, Log: &log, Seed: 1})
	if err == nil || !strings.Contains(err.Error(), "max number of clients reached") {
		t.Fatalf("8 clients against maxclients 3: %v, want the server's reason", err)
	}
}

func TestRESPWorkloads(t *testing.T) {
	for _, mode := range []string{RESPModeMulti, RESPModeWatch} {
		t.Run(mode, func(t *testing.T) {
			addr := startRESP(t)
			ctx := context.Background()
			tg, err := OpenTarget("resp="+addr, "", TargetOptions{RESPMode: mode})
			if err != nil {
				t.Fatal(err)
			}
			defer tg.Close()
			var log bytes.Buffer
			if err := Load(ctx, tg, 1, testAccounts, &log); err != nil {
				t.Fatal(err)
			}
			if n, err := tg.DetectScale(ctx); err != nil || n != 1 {
				t.Fatalf("DetectScale = %d, %v", n, err)
			}
			history := int64(0)
			for _, w := range []Workload{TPCB, SimpleUpdate, SelectOnly} {
				r, err := Run(ctx, tg, RunConfig{
					Workload: w, Scale: 1, Accounts: testAccounts,
					Clients: 4, Threads: 2, Transactions: 40, Log: &log, Seed: 1,
				})
				if err != nil {
					t.Fatal(err)
				}
				if r.Aborted != 0 || (mode == RESPModeMulti && r.Failed != 0) {
					t.Fatalf("%v: aborted %d, failed %d; log:\n%s", w, r.Aborted, r.Failed, log.String())
				}
				if w != SelectOnly {
					history += r.Processed
				}
				s, err := tg.Sums(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if inv := CheckInvariant(s); !inv.OK || s.HistoryRows != history {
					t.Fatalf("%v: sums %+v, want %d history rows", w, s, history)
				}
			}
		})
	}
}

func TestRESPBadMode(t *testing.T) {
	if _, err := OpenTarget("resp=127.0.0.1:1", "", TargetOptions{RESPMode: "fast"}); err == nil {
		t.Fatal("unknown mode accepted")
	}
	if _, err := OpenTarget("resp=127.0.0.1:1", "", TargetOptions{}); err == nil {
		t.Fatal("connected to nothing")
	}
	if _, err := OpenTarget("nope", "", TargetOptions{}); !errors.Is(err, ErrUnknownTarget) {
		t.Fatalf("unknown target: %v", err)
	}
}

// TestRESPInitializeReloads: -i against a loaded RESP server deletes
// pgbench's rows, history included, and loads the scale asked for, as
// pgbench -i does to PostgreSQL; other keys stay, those that share a
// table's prefix ("b:x") too, and neither the scale nor the sums count
// them.
func TestRESPInitializeReloads(t *testing.T) {
	addr := startRESP(t)
	ctx := context.Background()
	var out, log bytes.Buffer
	cfg := Config{Target: "resp=" + addr, Initialize: true, Scale: 1, Accounts: testAccounts}
	if err := Main(ctx, cfg, &out, &log); err != nil {
		t.Fatal(err)
	}
	tg, err := OpenTarget("resp="+addr, "", TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	if _, err := Run(ctx, tg, RunConfig{Workload: TPCB, Scale: 1, Accounts: testAccounts, Clients: 2, Threads: 1, Transactions: 20, Log: &log, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	rt := tg.(*respTarget)
	others := map[string]string{"other": "kept", "a:hello": "1000", "t:1": "7", "b:x": "3", "b:00000000012": "5", "h:note": "x"}
	for k, v := range others {
		if err := rt.admin.Set(ctx, k, v, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := tg.DetectScale(ctx); err != nil || n != 1 {
		t.Fatalf("with other keys under the prefixes: scale %d (%v), want 1", n, err)
	}
	if s, err := tg.Sums(ctx); err != nil || !CheckInvariant(s).OK {
		t.Fatalf("with other keys under the prefixes: sums %+v, %v", s, err)
	}
	if _, err := Run(ctx, tg, RunConfig{Workload: TPCB, Scale: 1, Accounts: testAccounts, Clients: 1, Threads: 1, Transactions: 5, Log: &log, Seed: 2}); err != nil {
		t.Fatalf("a run beside other keys under the prefixes: %v", err)
	}
	cfg.Scale = 2
	if err := Main(ctx, cfg, &out, &log); err != nil {
		t.Fatalf("second -i: %v", err)
	}
	s, err := tg.Sums(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := tg.DetectScale(ctx); err != nil || n != 2 || s.HistoryRows != 0 || !CheckInvariant(s).OK {
		t.Fatalf("after reloading at scale 2: scale %d (%v), sums %+v", n, err, s)
	}
	for k, want := range others {
		if v, err := rt.admin.Get(ctx, k).Result(); err != nil || v != want {
			t.Fatalf("%s = %q, %v; want %q", k, v, err, want)
		}
	}
}

// TestRESPIncompleteLoadNamesTheServer: a server whose load lacks its last
// account is refused naming the target and -i, which reloads it, not the
// unused temporary directory.
func TestRESPIncompleteLoadNamesTheServer(t *testing.T) {
	addr := startRESP(t)
	ctx := context.Background()
	var out, log bytes.Buffer
	cfg := Config{Target: "resp=" + addr, Dir: t.TempDir(), Initialize: true, Scale: 1, Accounts: testAccounts}
	if err := Main(ctx, cfg, &out, &log); err != nil {
		t.Fatal(err)
	}
	tg, err := OpenTarget("resp="+addr, "", TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	if err := tg.(*respTarget).admin.Del(ctx, string(accountKey(testAccounts))).Err(); err != nil {
		t.Fatal(err)
	}
	cfg.Initialize, cfg.Clients, cfg.Threads, cfg.Transactions = false, 1, 1, 1
	err = Main(ctx, cfg, &out, &log)
	if !errors.Is(err, ErrIncompleteLoad) || !strings.Contains(err.Error(), "resp="+addr) ||
		!strings.Contains(err.Error(), "-i") || strings.Contains(err.Error(), cfg.Dir) {
		t.Fatalf("run on a server lacking its last account: %v, want ErrIncompleteLoad naming resp=%s and -i", err, addr)
	}
}

// TestRESPPassword: a server with requirepass refuses a run without the
// password, naming why, and takes one with it.
func TestRESPPassword(t *testing.T) {
	addr := startRESPWith(t, server.Config{RequirePass: "s3cret"})
	if tg, err := OpenTarget("resp="+addr, "", TargetOptions{}); err == nil {
		tg.Close()
		t.Fatal("a server with requirepass took a run without the password")
	} else if !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("refused with %v, want the server's NOAUTH", err)
	}
	tg, err := OpenTarget("resp="+addr, "", TargetOptions{RESPPassword: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	var log bytes.Buffer
	if err := Load(context.Background(), tg, 1, testAccounts, &log); err != nil {
		t.Fatal(err)
	}
}
