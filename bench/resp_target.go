package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"mvkv/engine"
)

// RESP modes (TargetOptions.RESPMode).
const (
	// RESPModeMulti runs each pgbench transaction as one MULTI/EXEC block
	// of INCRBY, GET and SET: one engine transaction on `mvkv serve`.
	RESPModeMulti = "multi"
	// RESPModeWatch is the optimistic variant: WATCH the rows, read them,
	// then MULTI/SET/EXEC; an EXEC aborted by a concurrent write counts as
	// a failed transaction (a serialization failure), as pgbench counts
	// failures it does not retry.
	RESPModeWatch = "watch"
)

// respTarget runs the benchmark over the Redis protocol with go-redis,
// against `mvkv serve` (or any server speaking RESP2; the directory is
// unused). Balances are stored as decimal strings, which INCRBY needs,
// without pgbench's filler; history rows keep their binary form.
type respTarget struct {
	addr     string
	password string
	watch    bool
	admin    *redis.Client
}

func openRESP(addr string, o TargetOptions) (*respTarget, error) {
	t := &respTarget{addr: addr, password: o.RESPPassword}
	switch o.RESPMode {
	case "", RESPModeMulti:
	case RESPModeWatch:
		t.watch = true
	default:
		return nil, fmt.Errorf("bench: unknown RESP mode %q (want multi or watch)", o.RESPMode)
	}
	t.admin = redis.NewClient(t.options(2))
	if err := t.admin.Ping(context.Background()).Err(); err != nil {
		t.admin.Close()
		return nil, fmt.Errorf("bench: connect to %s: %w", addr, err)
	}
	return t, nil
}

func (t *respTarget) options(pool int) *redis.Options {
	return &redis.Options{Addr: t.addr, Password: t.password, PoolSize: pool, Protocol: 2, MaxRetries: -1, DisableIdentity: true}
}

func (t *respTarget) Name() string { return "resp" }

func (t *respTarget) Close() error { return t.admin.Close() }

// scanKeys calls fn with every batch of pgbench's keys under prefix that
// SCAN returns (up to about 1,000 at a time, never empty). Keys of other
// shapes under the prefix (isRowKey) are the server's other data: the
// reload leaves them, and neither the scale nor the sums count them.
func (t *respTarget) scanKeys(ctx context.Context, prefix string, fn func(keys []string) error) error {
	var cursor uint64
	for {
		all, next, err := t.admin.Scan(ctx, cursor, prefix+"*", 1000).Result()
		if err != nil {
			return err
		}
		keys := all[:0]
		for _, k := range all {
			if isRowKey(prefix, k) {
				keys = append(keys, k)
			}
		}
		if len(keys) > 0 {
			if err := fn(keys); err != nil {
				return err
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// scanPrefix calls fn with every key of pgbench's shape under prefix
// (scanKeys) and its value.
func (t *respTarget) scanPrefix(ctx context.Context, prefix string, fn func(k, v string) error) error {
	return t.scanKeys(ctx, prefix, func(keys []string) error {
		vals, err := t.admin.MGet(ctx, keys...).Result()
		if err != nil {
			return err
		}
		for i, v := range vals {
			s, ok := v.(string)
			if !ok {
				continue // deleted since the scan
			}
			if err := fn(keys[i], s); err != nil {
				return err
			}
		}
		return nil
	})
}

// CreateTables deletes pgbench's rows (the keys of their shape under the
// four table prefixes, isRowKey) from the server, so that -i reloads a
// loaded server as pgbench -i drops and creates its tables. Other keys,
// a:hello under a table's prefix too, are left alone.
func (t *respTarget) CreateTables(ctx context.Context) error {
	for _, prefix := range []string{prefixAccount, prefixTeller, prefixBranch, prefixHistory} {
		err := t.scanKeys(ctx, prefix, func(keys []string) error { return t.admin.Del(ctx, keys...).Err() })
		if err != nil {
			return respErr(err)
		}
	}
	return nil
}

func (t *respTarget) DetectScale(ctx context.Context) (int, error) {
	n := 0
	err := t.scanPrefix(ctx, prefixBranch, func(_, _ string) error { n++; return nil })
	return n, err
}

// respValue converts a row's value to what the RESP target stores.
func respValue(r KV) ([]byte, error) {
	size := 0
	switch {
	case strings.HasPrefix(string(r.Key), prefixAccount):
		size = accountValueSize
	case strings.HasPrefix(string(r.Key), prefixTeller):
		size = tellerValueSize
	case strings.HasPrefix(string(r.Key), prefixBranch):
		size = branchValueSize
	default:
		return r.Value, nil
	}
	b, err := decodeBalance(r.Key, r.Value, size)
	if err != nil {
		return nil, err
	}
	return strconv.AppendInt(nil, b, 10), nil
}

// LoadBatch writes the rows with one MSET inside MULTI/EXEC: one engine
// transaction. The server commits it durably whatever durable says.
func (t *respTarget) LoadBatch(ctx context.Context, rows []KV, durable bool) error {
	args := make([]any, 0, 2*len(rows))
	for _, r := range rows {
		v, err := respValue(r)
		if err != nil {
			return err
		}
		args = append(args, r.Key, v)
	}
	_, err := t.admin.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.MSet(ctx, args...)
		return nil
	})
	return respErr(err)
}

// FinishLoad checkpoints `mvkv serve`; a server without CHECKPOINT is fine.
func (t *respTarget) FinishLoad(ctx context.Context) error {
	err := t.admin.Do(ctx, "CHECKPOINT").Err()
	if err != nil && strings.Contains(err.Error(), "unknown command") {
		return nil
	}
	return err
}

// Sums reads the totals with SCAN and MGET; no clients run meanwhile, so
// the reads see one state.
func (t *respTarget) Sums(ctx context.Context) (Sums, error) {
	var s Sums
	for _, p := range []struct {
		prefix string
		dst    *int64
	}{{prefixAccount, &s.Accounts}, {prefixTeller, &s.Tellers}, {prefixBranch, &s.Branches}} {
		err := t.scanPrefix(ctx, p.prefix, func(k, v string) error {
			b, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return fmt.Errorf("%w: key %q: %q is not a balance", ErrBadValue, k, v)
			}
			*p.dst += b
			return nil
		})
		if err != nil {
			return s, err
		}
	}
	err := t.scanPrefix(ctx, prefixHistory, func(k, v string) error {
		h, err := decodeHistory([]byte(k), []byte(v))
		if err != nil {
			return err
		}
		s.History += h.Delta
		s.HistoryRows++
		return nil
	})
	return s, err
}

func (t *respTarget) NewClient(ctx context.Context) (Client, error) {
	c := redis.NewClient(t.options(1))
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		if why := t.refusal(); why != "" {
			return nil, fmt.Errorf("%w (the server answers a new connection with %q)", err, why)
		}
		return nil, err
	}
	return &respClient{c: c, watch: t.watch}, nil
}

// respClient is one connection.
type respClient struct {
	c     *redis.Client
	watch bool
}

func (c *respClient) Close() error { return c.c.Close() }

// respErr maps the server's error replies for deadlocks and serialization
// failures to the engine's sentinels, so the driver counts them as failed
// transactions.
func respErr(err error) error {
	if err == nil {
		return nil
	}
	switch msg := err.Error(); {
	case strings.Contains(msg, "deadlock detected"):
		return fmt.Errorf("%w: %v", engine.ErrDeadlock, err)
	case strings.Contains(msg, "could not serialize"):
		return fmt.Errorf("%w: %v", engine.ErrSerializationFailure, err)
	}
	return err
}

func (c *respClient) TPCB(ctx context.Context, p *TxnParams, simple bool) error {
	ak := string(accountKey(p.AID))
	if c.watch {
		return c.tpcbWatch(ctx, p, ak, simple)
	}
	var incr *redis.IntCmd
	var get *redis.StringCmd
	_, err := c.c.TxPipelined(ctx, func(pl redis.Pipeliner) error {
		incr = pl.IncrBy(ctx, ak, p.Delta)
		get = pl.Get(ctx, ak)
		if !simple {
			pl.IncrBy(ctx, string(tellerKey(p.TID)), p.Delta)
			pl.IncrBy(ctx, string(branchKey(p.BID)), p.Delta)
		}
		pl.Set(ctx, string(p.HistoryKey), p.historyValue(), 0)
		return nil
	})
	if err != nil {
		return respErr(err)
	}
	if got, _ := strconv.ParseInt(get.Val(), 10, 64); got != incr.Val() {
		return fmt.Errorf("%w: %q wrote %d, read %q", errReadMismatch, ak, incr.Val(), get.Val())
	}
	return nil
}

// tpcbWatch: WATCH the rows, read them, write the new balances in
// MULTI/EXEC. A null EXEC (a watched row changed) is a serialization
// failure.
func (c *respClient) tpcbWatch(ctx context.Context, p *TxnParams, ak string, simple bool) error {
	keys := []string{ak}
	if !simple {
		keys = append(keys, string(tellerKey(p.TID)), string(branchKey(p.BID)))
	}
	err := c.c.Watch(ctx, func(tx *redis.Tx) error {
		vals, err := tx.MGet(ctx, keys...).Result()
		if err != nil {
			return err
		}
		nv := make([]int64, len(vals))
		for i, v := range vals {
			s, ok := v.(string)
			if !ok {
				return fmt.Errorf("%w: %q", errMissingRow, keys[i])
			}
			b, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return fmt.Errorf("%w: key %q: %q is not a balance", ErrBadValue, keys[i], s)
			}
			nv[i] = b + p.Delta
		}
		_, err = tx.TxPipelined(ctx, func(pl redis.Pipeliner) error {
			for i, k := range keys {
				pl.Set(ctx, k, nv[i], 0)
			}
			pl.Set(ctx, string(p.HistoryKey), p.historyValue(), 0)
			return nil
		})
		return err
	}, keys...)
	if errors.Is(err, redis.TxFailedErr) {
		return fmt.Errorf("%w: a watched row changed before EXEC", engine.ErrSerializationFailure)
	}
	return respErr(err)
}

func (c *respClient) SelectOnly(ctx context.Context, aid int64) error {
	ak := string(accountKey(aid))
	err := c.c.Get(ctx, ak).Err()
	if errors.Is(err, redis.Nil) {
		return fmt.Errorf("%w: %q", errMissingRow, ak)
	}
	return err
}

// refusal returns the error line a server sends unasked to a new
// connection it refuses (Redis's "-ERR max number of clients reached", or
// protected mode's "-DENIED ..."), or "". The client library reports such
// a refusal as the connection's end ("EOF", "connection reset by peer"),
// which does not say why.
func (t *respTarget) refusal() string {
	nc, err := net.DialTimeout("tcp", t.addr, time.Second)
	if err != nil {
		return ""
	}
	defer nc.Close()
	nc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	line, err := bufio.NewReaderSize(io.LimitReader(nc, 512), 512).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "-") {
		return ""
	}
	return strings.TrimSpace(line[1:])
}
