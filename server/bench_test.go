package server

import (
	"bufio"
	"net"
	"strconv"
	"sync"
	"testing"

	"mvkv/engine"
)

// benchClients runs b.N requests over loopback from clients connections,
// each sending req and reading its one-line reply, which must be want or,
// when want is empty, an integer reply. The clients allocate nothing per
// request, so -benchmem counts the server's allocations a request (plus
// the WAL flusher's and other background work, spread over b.N).
func benchClients(b *testing.B, ts *testServer, clients int, req []byte, want string) {
	b.Helper()
	conns := make([]net.Conn, clients)
	for i := range conns {
		nc, err := net.Dial("tcp", ts.addr)
		if err != nil {
			b.Fatal(err)
		}
		defer nc.Close()
		conns[i] = nc
	}
	var next sync.WaitGroup
	per := b.N / clients
	b.ReportAllocs()
	b.ResetTimer()
	errs := make(chan error, clients)
	for i, nc := range conns {
		n := per
		if i == 0 {
			n += b.N % clients
		}
		next.Add(1)
		go func() {
			defer next.Done()
			br := bufio.NewReaderSize(nc, 512)
			for range n {
				if _, err := nc.Write(req); err != nil {
					errs <- err
					return
				}
				line, err := br.ReadSlice('\n')
				if err != nil {
					errs <- err
					return
				}
				if want != "" && string(line) != want || want == "" && line[0] != ':' {
					errs <- &replyError{string(line)}
					return
				}
			}
		}()
	}
	next.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

type replyError struct{ got string }

func (e *replyError) Error() string { return "unexpected reply " + strconv.Quote(e.got) }

// BenchmarkSetOneKey is redis-benchmark's SET on one key over loopback:
// 32 clients, every reply after its commit is durable (synchronous_commit
// on, early lock release on, the server's defaults).
func BenchmarkSetOneKey(b *testing.B) {
	ts := startServerOn(b, Config{}, engine.Options{})
	benchClients(b, ts, 32, []byte("*3\r\n$3\r\nSET\r\n$16\r\nkey:__rand_int__\r\n$3\r\nxxx\r\n"), "+OK\r\n")
}

// BenchmarkIncrOneKey is redis-benchmark's INCR on one key, as
// BenchmarkSetOneKey.
func BenchmarkIncrOneKey(b *testing.B) {
	ts := startServerOn(b, Config{}, engine.Options{})
	benchClients(b, ts, 32, []byte("*2\r\n$4\r\nINCR\r\n$20\r\ncounter:__rand_int__\r\n"), "")
}

// BenchmarkSetOneKeyAsync is BenchmarkSetOneKey with synchronous_commit
// off: no reply waits for a WAL sync, so the server's own CPU a request
// shows without the disk's.
func BenchmarkSetOneKeyAsync(b *testing.B) {
	ts := startServerOn(b, Config{SynchronousCommit: engine.SyncCommitOff}, engine.Options{})
	benchClients(b, ts, 32, []byte("*3\r\n$3\r\nSET\r\n$16\r\nkey:__rand_int__\r\n$3\r\nxxx\r\n"), "+OK\r\n")
}
