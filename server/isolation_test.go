package server

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"mvkv/engine"
)

// respConn is a minimal RESP2 client for goroutines other than the test's
// own: it returns errors instead of failing the test.
type respConn struct {
	nc net.Conn
	br *bufio.Reader
	bw *bufio.Writer
}

func dialRESP(addr string) (*respConn, error) {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &respConn{nc: nc, br: bufio.NewReader(nc), bw: bufio.NewWriter(nc)}, nil
}

func (r *respConn) write(args ...string) {
	fmt.Fprintf(r.bw, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(r.bw, "$%d\r\n%s\r\n", len(a), a)
	}
}

// read returns one reply: a string for a status or bulk string, nil for a
// null, an int64, a []any for an array, or an error value for an error
// reply; the error result is for the connection.
func (r *respConn) read() (any, error) {
	line, err := r.br.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 {
		return nil, fmt.Errorf("short line %q", line)
	}
	body := line[1 : len(line)-2]
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		return errors.New(body), nil
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return nil, err
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(r.br, b); err != nil {
			return nil, err
		}
		return string(b[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return nil, err
		}
		a := make([]any, n)
		for i := range a {
			if a[i], err = r.read(); err != nil {
				return nil, err
			}
		}
		return a, nil
	}
	return nil, fmt.Errorf("bad reply line %q", line)
}

// TestNoTornReads: writers set two keys together, in an EXEC block (pa,
// pb) or with MSET (ma, mb), always to one value per write; readers read
// both with MGET or in an EXEC block. Every read must return the two keys
// from one write. With a snapshot per key (READ COMMITTED) about one read
// in 200 mixes two writes; Redis, and every command here, reads from one
// snapshot. At least 200,000 reads (50,000 under the race detector, which
// a broken snapshot would tear about 250 of), pipelined so that the test
// stays short; with synchronous_commit off so that commits land as often
// as the CPU allows, which makes a torn read as likely as it can be.
func TestNoTornReads(t *testing.T) {
	ts := startServerOn(t, Config{SynchronousCommit: engine.SyncCommitOff}, engine.Options{})
	wantReads := int64(200_000)
	if raceOn {
		wantReads = 50_000
	}
	const batch = 50
	var reads, torn, writes atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	errc := make(chan error, 16)
	fail := func(err error) {
		select {
		case errc <- err:
		default:
		}
		stop.Store(true)
	}
	// Writers.
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rc, err := dialRESP(ts.addr)
			if err != nil {
				fail(err)
				return
			}
			defer rc.nc.Close()
			for seq := 0; !stop.Load(); seq++ {
				for i := range batch / 10 {
					v := fmt.Sprintf("w%d-%d-%d", w, seq, i)
					if w == 2 {
						rc.write("MSET", "ma", v, "mb", v)
					} else {
						rc.write("MULTI")
						rc.write("SET", "pa", v)
						rc.write("SET", "pb", v)
						rc.write("EXEC")
					}
				}
				if err := rc.bw.Flush(); err != nil {
					fail(err)
					return
				}
				n := batch / 10
				if w != 2 {
					n *= 4
				}
				for range n {
					v, err := rc.read()
					if err == nil {
						if e, ok := v.(error); ok {
							err = e
						}
					}
					if err != nil {
						fail(fmt.Errorf("writer: %w", err))
						return
					}
				}
				writes.Add(int64(batch / 10))
			}
		}()
	}
	// Readers: MGET pa pb, MGET ma mb, and MULTI GET pa GET pb EXEC.
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rc, err := dialRESP(ts.addr)
			if err != nil {
				fail(err)
				return
			}
			defer rc.nc.Close()
			for !stop.Load() {
				for range batch {
					switch r {
					case 0:
						rc.write("MGET", "pa", "pb")
					case 1:
						rc.write("MGET", "ma", "mb")
					case 2:
						rc.write("MULTI")
						rc.write("GET", "pa")
						rc.write("GET", "pb")
						rc.write("EXEC")
					}
				}
				if err := rc.bw.Flush(); err != nil {
					fail(err)
					return
				}
				for range batch {
					if r == 2 {
						for range 3 { // +OK, +QUEUED, +QUEUED
							if _, err := rc.read(); err != nil {
								fail(err)
								return
							}
						}
					}
					v, err := rc.read()
					if err != nil {
						fail(fmt.Errorf("reader: %w", err))
						return
					}
					a, ok := v.([]any)
					if !ok || len(a) != 2 {
						fail(fmt.Errorf("reader %d: reply %v", r, v))
						return
					}
					if a[0] != a[1] {
						if torn.Add(1) <= 5 {
							t.Logf("torn read by reader %d: %v", r, a)
						}
					}
					if reads.Add(1) >= wantReads {
						stop.Store(true)
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	t.Logf("%d reads, %d writes, %d torn", reads.Load(), writes.Load(), torn.Load())
	if reads.Load() < wantReads {
		t.Fatalf("only %d reads", reads.Load())
	}
	if n := torn.Load(); n != 0 {
		t.Fatalf("%d of %d reads mixed two writes", n, reads.Load())
	}
	if writes.Load() < 1000 {
		t.Fatalf("only %d writes ran beside the reads", writes.Load())
	}
}
