package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// postgresURL returns the server the PostgreSQL tests use, from
// MVKV_TEST_POSTGRES_URL (bench/testdata/start-postgres.sh starts one and
// prints its URL), or skips the test. The tests drop and recreate pgbench's
// tables in that database.
func postgresURL(t *testing.T) string {
	t.Helper()
	url := os.Getenv("MVKV_TEST_POSTGRES_URL")
	if url == "" {
		t.Skip("no PostgreSQL server: set MVKV_TEST_POSTGRES_URL (bench/testdata/start-postgres.sh prints one)")
	}
	return url
}

func TestIsFailurePostgres(t *testing.T) {
	for code, want := range map[string]bool{"40001": true, "40P01": true, "23505": false, "42P01": false} {
		err := fmt.Errorf("client: %w", &pgconn.PgError{Code: code})
		if got := IsFailure(err); got != want {
			t.Errorf("IsFailure(SQLSTATE %s) = %v, want %v", code, got, want)
		}
	}
	if IsFailure(errors.New("connection reset")) {
		t.Error("IsFailure(a plain error) = true")
	}
}

// TestPostgresTarget loads pgbench's tables with -i, runs the three
// scripts, checks the invariant and runs a sweep next to the engine.
func TestPostgresTarget(t *testing.T) {
	url := postgresURL(t)
	ctx := context.Background()
	target := "postgres=" + url
	// Leave no small test tables behind for a later real run to mistake
	// for a loaded database (pgbench only counts branches).
	t.Cleanup(func() {
		tg, err := OpenTarget(target, "", TargetOptions{})
		if err != nil {
			t.Error(err)
			return
		}
		defer tg.Close()
		if _, err := tg.(*postgresTarget).admin.Exec(ctx, "drop table if exists pgbench_accounts, pgbench_branches, pgbench_history, pgbench_tellers"); err != nil {
			t.Error(err)
		}
	})
	cfg := Config{
		Target: target, Options: TargetOptions{SynchronousCommit: true, CommitSiblings: 5},
		Initialize: true, Scale: 2, Accounts: testAccounts, Clients: 4, Threads: 2, Transactions: 50, Seed: 5,
	}
	var out, log bytes.Buffer
	if err := Main(ctx, cfg, &out, &log); err != nil {
		t.Fatalf("-i: %v\n%s", err, log.String())
	}
	// -i again reloads, as pgbench -i does, rather than refusing.
	if err := Main(ctx, cfg, &out, &log); err != nil {
		t.Fatalf("second -i: %v\n%s", err, log.String())
	}
	if !strings.Contains(log.String(), "creating tables...") || !strings.Contains(log.String(), "4000 of 4000 tuples (100%) done") {
		t.Errorf("load log:\n%s", log.String())
	}
	tg, err := OpenTarget(target, "", cfg.Options)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := tg.DetectScale(ctx); err != nil || s != 2 {
		t.Errorf("DetectScale = %d, %v; want 2", s, err)
	}
	tg.Close()

	cfg.Initialize = false
	for _, w := range []Workload{TPCB, SimpleUpdate, SelectOnly} {
		out.Reset()
		log.Reset()
		cfg.Workload = w
		if err := Main(ctx, cfg, &out, &log); err != nil {
			t.Fatalf("%s: %v\n%s", w.Builtin(), err, log.String())
		}
		inv := "invariant: ok"
		if w == SelectOnly {
			inv = "invariant: not checked"
		}
		for _, want := range []string{"target: postgres\n", "processed: 200/200\n", inv} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%s: report lacks %q:\n%s", w.Builtin(), want, out.String())
			}
		}
	}

	out.Reset()
	log.Reset()
	cfg.Workload = SimpleUpdate
	cfg.Target = "engine"
	cfg.Dir = t.TempDir()
	cfg.Transactions = 10
	cfg.Sweep = []Axis{{Name: "target", Values: []string{target, "engine"}}, {Name: "clients", Values: []string{"1", "3"}}}
	if err := Main(ctx, cfg, &out, &log); err != nil {
		t.Fatalf("sweep: %v\n%s", err, log.String())
	}
	rows := tableRows(t, out.String())
	if len(rows) != 4 || rows[0][0] != "postgres" || rows[0][2] == "" || rows[0][5] != "" || rows[3][0] != "engine" {
		t.Errorf("rows %q:\n%s", rows, out.String())
	}
	if strings.Contains(out.String(), url) {
		t.Errorf("the table shows the URL:\n%s", out.String())
	}
	for _, want := range []string{"invariant (postgres): ok", "invariant (engine): ok"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q:\n%s", want, out.String())
		}
	}
}
