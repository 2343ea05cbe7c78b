package crashtest

import (
	"context"
	"errors"
	"net"
	"strconv"

	"github.com/redis/go-redis/v9"

	"mvkv/engine"
	"mvkv/server"
)

// Target runs operations against the system under test. Do returns the new
// value of an Incr, the value and presence of a Get, and a nil error only
// when the operation was acknowledged.
type Target interface {
	Do(ctx context.Context, op Op) (n int64, val string, found bool, err error)
}

// EngineTarget runs operations as engine transactions (REPEATABLE READ,
// retried on serialization failures and deadlocks by DB.Update).
type EngineTarget struct{ DB *engine.DB }

// Do implements Target.
func (t EngineTarget) Do(ctx context.Context, op Op) (n int64, val string, found bool, err error) {
	db := t.DB
	switch op.Kind {
	case Set:
		err = db.Update(ctx, func(tx *engine.Txn) error { return tx.Put([]byte(op.Key), []byte(Expand(op.Tag))) })
	case Multi:
		v := []byte(Expand(op.Tag))
		err = db.Update(ctx, func(tx *engine.Txn) error {
			for _, k := range op.Keys {
				if err := tx.Put([]byte(k), v); err != nil {
					return err
				}
			}
			return nil
		})
	case Del:
		err = db.Update(ctx, func(tx *engine.Txn) error { return tx.Delete([]byte(op.Key)) })
	case Incr:
		err = db.Update(ctx, func(tx *engine.Txn) error {
			return tx.Update([]byte(op.Key), func(old []byte, ok bool) ([]byte, error) {
				n = 0
				if ok {
					var perr error
					if n, perr = strconv.ParseInt(string(old), 10, 64); perr != nil {
						return nil, perr
					}
				}
				n++
				return strconv.AppendInt(nil, n, 10), nil
			})
		})
	case Get:
		err = db.View(ctx, func(tx *engine.Txn) error {
			v, err := tx.Get([]byte(op.Key))
			if errors.Is(err, engine.ErrNotFound) {
				val, found = "", false
				return nil
			}
			val, found = string(v), err == nil
			return err
		})
	case Vacuum:
		_, err = db.Vacuum(ctx)
	case Checkpoint:
		err = db.Checkpoint()
	default:
		err = errors.New("crashtest: unknown operation")
	}
	return n, val, found, err
}

// RESPTarget runs operations over the Redis protocol: SET, INCR, a MULTI
// ... EXEC block of SETs, DEL, GET, and mvkv's VACUUM and CHECKPOINT.
type RESPTarget struct{ C *redis.Client }

// NewRESPClient returns a client of addr with one connection and no
// retries: a retried INCR whose first attempt committed would count twice.
func NewRESPClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1, MaxRetries: -1, DisableIdentity: true, Protocol: 2})
}

// Do implements Target.
func (t RESPTarget) Do(ctx context.Context, op Op) (n int64, val string, found bool, err error) {
	c := t.C
	switch op.Kind {
	case Set:
		err = c.Set(ctx, op.Key, Expand(op.Tag), 0).Err()
	case Multi:
		v := Expand(op.Tag)
		_, err = c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range op.Keys {
				p.Set(ctx, k, v, 0)
			}
			return nil
		})
	case Del:
		err = c.Del(ctx, op.Key).Err()
	case Incr:
		n, err = c.Incr(ctx, op.Key).Result()
	case Get:
		val, err = c.Get(ctx, op.Key).Result()
		found = err == nil
		if errors.Is(err, redis.Nil) {
			err = nil
		}
	case Vacuum:
		err = c.Do(ctx, "VACUUM").Err()
	case Checkpoint:
		err = c.Do(ctx, "CHECKPOINT").Err()
	default:
		err = errors.New("crashtest: unknown operation")
	}
	return n, val, found, err
}

// inProcessServer serves db over RESP on a loopback port in this process.
type inProcessServer struct {
	addr   string
	cancel context.CancelFunc
	done   chan struct{}
}

func startInProcessServer(db *engine.DB) (*inProcessServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &inProcessServer{addr: ln.Addr().String(), cancel: cancel, done: make(chan struct{})}
	srv := server.New(db, server.Config{})
	go func() {
		defer close(s.done)
		srv.Serve(ctx, ln)
	}()
	return s, nil
}

func (s *inProcessServer) stop() {
	s.cancel()
	<-s.done
}

// readState reads every key of a workload of clients clients through t.
func readState(ctx context.Context, t Target, clients int) (State, error) {
	st := State{}
	for _, k := range AllKeys(clients) {
		_, v, ok, err := t.Do(ctx, Op{Kind: Get, Key: k})
		if err != nil {
			return nil, err
		}
		if ok {
			st[k] = v
		}
	}
	return st, nil
}

// quietLogger drops go-redis's own log lines (failed dials after a kill are
// expected here and counted in the history instead).
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func init() { redis.SetLogger(quietLogger{}) }
