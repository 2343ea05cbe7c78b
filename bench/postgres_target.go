package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// connectTimeout bounds opening a connection to the PostgreSQL target.
const connectTimeout = 10 * time.Second

// postgresTarget runs pgbench's builtin scripts as SQL on a PostgreSQL
// server, statement by statement as pgbench -M simple sends them, so mvkv,
// pebble and PostgreSQL can be measured by the same client code. The tables
// are pgbench's own (pgbench_accounts, _branches, _tellers, _history), so a
// database loaded here can be run by the real pgbench and vice versa.
type postgresTarget struct {
	cfg   *pgx.ConnConfig // per-session settings from TargetOptions
	admin *pgx.Conn       // loads, scale detection and sums; never used by clients
}

// openPostgres connects to url (a libpq URL or key=value string, e.g.
// "postgres://user@/db?host=/tmp"). Synchronous commit off, commit_delay and
// commit_siblings become session settings; the disk model and WAL flusher
// do not apply to a server.
func openPostgres(url string, o TargetOptions) (*postgresTarget, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("bench: postgres URL: %w", err)
	}
	// Client-side interpolation and one simple-protocol message per
	// statement: pgbench's default -M simple.
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	if !o.SynchronousCommit {
		cfg.RuntimeParams["synchronous_commit"] = "off"
	}
	if o.CommitDelay > 0 {
		// A superuser-only setting; the server says so if we are not.
		cfg.RuntimeParams["commit_delay"] = strconv.Itoa(o.CommitDelay)
		cfg.RuntimeParams["commit_siblings"] = strconv.Itoa(o.CommitSiblings)
	} else if o.CommitDelay < 0 {
		return nil, fmt.Errorf("bench: postgres target: commit_delay=auto is an engine setting")
	}
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	admin, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("bench: connect to postgres: %w", err)
	}
	return &postgresTarget{cfg: cfg, admin: admin}, nil
}

func (t *postgresTarget) Name() string { return "postgres" }

func (t *postgresTarget) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	return t.admin.Close(ctx)
}

// pgCode returns err's SQLSTATE, or "" when err did not come from the server.
func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// DetectScale counts pgbench_branches, as pgbench does; a database without
// the table has scale 0.
func (t *postgresTarget) DetectScale(ctx context.Context) (int, error) {
	var n int
	err := t.admin.QueryRow(ctx, "select count(*) from pgbench_branches").Scan(&n)
	if pgCode(err) == "42P01" { // undefined_table
		return 0, nil
	}
	return n, err
}

// pgbenchTables is pgbench -i's schema (pgbench 15, default fillfactor 100,
// no partitions), created in this order after dropping the old tables.
var pgbenchTables = []string{
	"create table pgbench_history(tid int,bid int,aid int,delta int,mtime timestamp,filler char(22))",
	"create table pgbench_tellers(tid int not null,bid int,tbalance int,filler char(84)) with (fillfactor=100)",
	"create table pgbench_accounts(aid int not null,bid int,abalance int,filler char(84)) with (fillfactor=100)",
	"create table pgbench_branches(bid int not null,bbalance int,filler char(88)) with (fillfactor=100)",
}

// CreateTables is pgbench -i's "dropping old tables..." and "creating
// tables..." steps. Load calls it before the first batch.
func (t *postgresTarget) CreateTables(ctx context.Context) error {
	if _, err := t.admin.Exec(ctx, "drop table if exists pgbench_accounts, pgbench_branches, pgbench_history, pgbench_tellers"); err != nil {
		return fmt.Errorf("bench: postgres: drop tables: %w", err)
	}
	for _, q := range pgbenchTables {
		if _, err := t.admin.Exec(ctx, q); err != nil {
			return fmt.Errorf("bench: postgres: %s: %w", q, err)
		}
	}
	return nil
}

// LoadBatch turns the key-value rows Load generates back into pgbench rows
// and COPYs them in one transaction. Every commit is durable on a server
// with synchronous_commit on, so durable is not needed.
func (t *postgresTarget) LoadBatch(ctx context.Context, rows []KV, durable bool) error {
	var accounts, tellers, branches [][]any
	for _, r := range rows {
		if len(r.Key) < 2 {
			return fmt.Errorf("%w: key %q", ErrBadValue, r.Key)
		}
		id, err := strconv.ParseInt(string(r.Key[2:]), 10, 64)
		if err != nil {
			return fmt.Errorf("%w: key %q: %v", ErrBadValue, r.Key, err)
		}
		switch string(r.Key[:2]) {
		case prefixAccount:
			bal, err := decodeBalance(r.Key, r.Value, accountValueSize)
			if err != nil {
				return err
			}
			bid := binary.LittleEndian.Uint32(r.Value[8:12])
			accounts = append(accounts, []any{id, int64(bid), bal, ""})
		case prefixTeller:
			bal, err := decodeBalance(r.Key, r.Value, tellerValueSize)
			if err != nil {
				return err
			}
			bid := binary.LittleEndian.Uint32(r.Value[8:12])
			tellers = append(tellers, []any{id, int64(bid), bal, nil})
		case prefixBranch:
			bal, err := decodeBalance(r.Key, r.Value, branchValueSize)
			if err != nil {
				return err
			}
			branches = append(branches, []any{id, bal, nil})
		default:
			return fmt.Errorf("%w: key %q: not a pgbench table", ErrBadValue, r.Key)
		}
	}
	tx, err := t.admin.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	for _, c := range []struct {
		table string
		cols  []string
		rows  [][]any
	}{
		{"pgbench_branches", []string{"bid", "bbalance", "filler"}, branches},
		{"pgbench_tellers", []string{"tid", "bid", "tbalance", "filler"}, tellers},
		{"pgbench_accounts", []string{"aid", "bid", "abalance", "filler"}, accounts},
	} {
		if len(c.rows) == 0 {
			continue
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{c.table}, c.cols, pgx.CopyFromRows(c.rows)); err != nil {
			return fmt.Errorf("bench: postgres: copy %s: %w", c.table, err)
		}
	}
	return tx.Commit(ctx)
}

// FinishLoad is pgbench -i's "vacuuming..." and "creating primary keys..."
// steps, in that order.
func (t *postgresTarget) FinishLoad(ctx context.Context) error {
	for _, q := range []string{
		"vacuum analyze pgbench_branches",
		"vacuum analyze pgbench_tellers",
		"vacuum analyze pgbench_accounts",
		"vacuum analyze pgbench_history",
		"alter table pgbench_branches add primary key (bid)",
		"alter table pgbench_tellers add primary key (tid)",
		"alter table pgbench_accounts add primary key (aid)",
	} {
		if _, err := t.admin.Exec(ctx, q); err != nil {
			return fmt.Errorf("bench: postgres: %s: %w", q, err)
		}
	}
	return nil
}

// Sums reads the four totals in one statement, hence from one snapshot.
func (t *postgresTarget) Sums(ctx context.Context) (Sums, error) {
	var s Sums
	err := t.admin.QueryRow(ctx, `select
		(select coalesce(sum(abalance), 0) from pgbench_accounts),
		(select coalesce(sum(tbalance), 0) from pgbench_tellers),
		(select coalesce(sum(bbalance), 0) from pgbench_branches),
		(select coalesce(sum(delta), 0) from pgbench_history),
		(select count(*) from pgbench_history)`).Scan(&s.Accounts, &s.Tellers, &s.Branches, &s.History, &s.HistoryRows)
	if err != nil {
		return s, fmt.Errorf("bench: postgres: sums: %w", err)
	}
	return s, nil
}

func (t *postgresTarget) NewClient(ctx context.Context) (Client, error) {
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	c, err := pgx.ConnectConfig(ctx, t.cfg)
	if err != nil {
		return nil, err
	}
	return &postgresClient{c: c}, nil
}

// postgresClient is one connection, like one pgbench client.
type postgresClient struct {
	c *pgx.Conn
}

func (c *postgresClient) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	return c.c.Close(ctx)
}

// update runs one of the script's UPDATEs; a row that is not there aborts
// the client, as a missing key does on the other targets.
func (c *postgresClient) update(ctx context.Context, sql string, delta, id int64) error {
	tag, err := c.c.Exec(ctx, sql, delta, id)
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("%w: %s with id %d updated %d rows", errMissingRow, sql, id, tag.RowsAffected())
	}
	return nil
}

// TPCB sends pgbench's tpcb-like or simple-update script, one statement
// per round trip. After an error the transaction is rolled back, so the
// session can go on.
func (c *postgresClient) TPCB(ctx context.Context, p *TxnParams, simple bool) (err error) {
	if _, err := c.c.Exec(ctx, "BEGIN"); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			if _, rerr := c.c.Exec(context.WithoutCancel(ctx), "ROLLBACK"); rerr != nil {
				err = errors.Join(err, rerr)
			}
		}
	}()
	if err := c.update(ctx, "UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2", p.Delta, p.AID); err != nil {
		return err
	}
	var bal int64
	if err := c.c.QueryRow(ctx, "SELECT abalance FROM pgbench_accounts WHERE aid = $1", p.AID).Scan(&bal); err != nil {
		return err
	}
	if !simple {
		if err := c.update(ctx, "UPDATE pgbench_tellers SET tbalance = tbalance + $1 WHERE tid = $2", p.Delta, p.TID); err != nil {
			return err
		}
		if err := c.update(ctx, "UPDATE pgbench_branches SET bbalance = bbalance + $1 WHERE bid = $2", p.Delta, p.BID); err != nil {
			return err
		}
	}
	if _, err := c.c.Exec(ctx, "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES ($1, $2, $3, $4, CURRENT_TIMESTAMP)",
		p.TID, p.BID, p.AID, p.Delta); err != nil {
		return err
	}
	_, err = c.c.Exec(ctx, "END")
	return err
}

// SelectOnly is pgbench's select-only script: one statement, autocommit.
func (c *postgresClient) SelectOnly(ctx context.Context, aid int64) error {
	var bal int64
	err := c.c.QueryRow(ctx, "SELECT abalance FROM pgbench_accounts WHERE aid = $1", aid).Scan(&bal)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: account %d", errMissingRow, aid)
	}
	return err
}
