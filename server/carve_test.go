package server

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
	"weak"
)

// readLongArg reads one request whose last argument is longer than
// carveMax from rd and returns a weak pointer to that argument's bytes, so
// that the caller's frame holds no reference of its own.
func readLongArg(t *testing.T, rd *reader) weak.Pointer[byte] {
	t.Helper()
	req, err := rd.read()
	if err != nil {
		t.Fatal(err)
	}
	long := req.args[len(req.args)-1]
	if len(long) <= carveMax {
		t.Fatalf("the last argument has %d bytes; the test needs more than %d", len(long), carveMax)
	}
	return weak.Make(&long[0])
}

// A request with a long argument that is done with is not kept alive by
// the reader: the block its argument list was cut from, which the reader
// goes on cutting the next lists from, points only at short arguments, so
// a connection that sent a large value and went idle holds no copy of it.
func TestReaderKeepsNoLongArgument(t *testing.T) {
	val := strings.Repeat("v", 100_000)
	data := "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100000\r\n" + val + "\r\n"
	rd := newReader(bytes.NewReader([]byte(data)), 16<<10, func() Limits { return DefaultLimits })
	w := readLongArg(t, rd)
	runtime.GC()
	if w.Value() != nil {
		t.Fatal("the reader keeps a 100,000-byte argument alive after its request")
	}
	runtime.KeepAlive(rd)
}
