package server

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"mvkv/engine"
)

// Limits bound what one client may make the server hold while it reads a
// request. Every length a client declares is checked against them before
// any memory is set aside for it, and memory for a bulk argument grows only
// as its bytes arrive, so a client that declares a large length and stalls
// holds no more than what it actually sent. Before a client has
// authenticated to a server with a password, Redis 7's smaller limits
// apply instead, whatever is configured: 10 arguments of at most 16 KiB
// each, and lines of at most 64 KiB.
type Limits struct {
	// MaxBulkLen is Redis's proto-max-bulk-len (default 512 MiB): a
	// declared bulk length above it is a protocol error that closes the
	// connection. It is at most 1 GiB, the engine's value limit (a
	// larger value is taken as 1 GiB), since no longer argument could be
	// stored.
	MaxBulkLen int64
	// MaxArgLen is the longest argument kept (default MaxStoredValue, what
	// the engine can store with an expiry beside it; above MaxBulkLen's
	// default, so that proto-max-bulk-len is the limit clients meet). A
	// longer one, up to MaxBulkLen, is read and thrown away, and the
	// command is answered with an error; the connection stays usable.
	MaxArgLen int
	// MaxMultibulkLen is the most arguments one request may declare
	// (default 2^31-1, Redis 7's INT_MAX); more is a protocol error. The
	// count only bounds the reading loop: what a request holds is bounded
	// by QueryBufferLimit.
	MaxMultibulkLen int
	// MaxInlineLen is Redis's PROTO_INLINE_MAX_SIZE (64 KiB): the longest
	// inline request line and the longest "*N" or "$N" line.
	MaxInlineLen int
	// QueryBufferLimit is Redis's client-query-buffer-limit (default
	// 1 GiB): the most bytes one request may hold, its arguments plus 32
	// bytes of bookkeeping each. Exceeding it closes the connection
	// without a reply, as Redis does.
	QueryBufferLimit int64
}

// DefaultLimits are Redis's defaults where Redis has the limit, and the
// engine's value size for MaxArgLen.
var DefaultLimits = Limits{
	MaxBulkLen:       512 << 20,
	MaxArgLen:        MaxStoredValue,
	MaxMultibulkLen:  math.MaxInt32,
	MaxInlineLen:     64 << 10,
	QueryBufferLimit: 1 << 30,
}

// maxBulkLen is the highest proto-max-bulk-len (Limits.MaxBulkLen).
const maxBulkLen = engine.MaxValueSize

// MaxStoredValue is the longest string value the server stores, in bytes:
// the engine's value limit less the 10-byte header of a value stored with
// an expiry (0xFF, a format byte and the deadline), so that EXPIRE never
// fails on a value the server took.
const MaxStoredValue = engine.MaxValueSize - 10

// The header MaxStoredValue leaves room for.
var _ = [1]struct{}{}[MaxStoredValue+deadlineHdrSize-engine.MaxValueSize]

// argOverhead is what the reader charges against QueryBufferLimit for each
// argument besides its bytes: the slice header and allocation rounding.
const argOverhead = 32

// growStep is the first piece of memory a bulk argument gets before its
// bytes arrive, and the most that is ever set aside ahead of them beyond
// what has already arrived (readBulk).
const growStep = 64 << 10

// Before a connection has authenticated, when the server asks for a
// password, a request may declare at most unauthMultibulkLen arguments of
// at most unauthBulkLen bytes each, and its request lines are bounded by
// unauthInlineLen, as in Redis 7. A client that does not know the password
// can then make the server hold no more than about 160 KiB for it, however
// large the configured limits, while AUTH and HELLO ... AUTH still fit.
const (
	unauthMultibulkLen = 10
	unauthBulkLen      = 16 << 10
	unauthInlineLen    = 64 << 10
)

// protocolError is a malformed or over-limit request. Its text is Redis's,
// after "ERR Protocol error: "; the server replies with it and closes the
// connection, as Redis does.
type protocolError struct{ Msg string }

// Error returns Redis's text for the error, "Protocol error: ...".
func (e *protocolError) Error() string { return "Protocol error: " + e.Msg }

// errQueryBufferLimit is returned by the reader when one request would hold
// more than Limits.QueryBufferLimit bytes. Redis closes such a client
// without a reply; so does the server.
var errQueryBufferLimit = errors.New("server: client query buffer limit reached")

// request is one command as read from the wire.
type request struct {
	args [][]byte
	// oversize is the length of the first argument longer than
	// Limits.MaxArgLen, which was skipped (its place in args is nil);
	// 0 if there is none.
	oversize int64
	// size is the bytes the request holds, as charged against
	// QueryBufferLimit.
	size int64
}

// reader reads RESP2 requests: multibulk ("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n")
// and inline ("GET k\r\n") as Redis's processMultibulkBuffer and
// processInlineBuffer accept them. It is not safe for concurrent use.
type reader struct {
	br  *bufio.Reader
	lim func() Limits
	// preAuth reports whether the connection has yet to authenticate,
	// so that the smaller limits above apply; nil means it never has to.
	preAuth func() bool

	// bytes and slots are the unused ends of the last blocks small
	// arguments and argument lists were cut from (carve, carveArgs):
	// a request of a few short arguments, the common one, so costs no
	// allocation of its own most of the time. A block is never reused:
	// each piece belongs to its request for good. A MULTI queue keeps a
	// copy (queuedArgs); a piece kept otherwise (a key held by a
	// command) keeps its whole block alive: carveBlock bytes, or for an
	// argument list carveSlots slots and the short arguments of the
	// other requests they point to (a list holding a longer one is moved
	// out of the block, ownList), at most carveSlots*carveMax bytes in a
	// few blocks.
	bytes []byte
	slots [][]byte
}

// Sizes of the blocks small arguments are cut from: an argument of up to
// carveMax bytes, a list of up to carveMaxArgs arguments.
const (
	carveBlock   = 512
	carveMax     = 64
	carveSlots   = 32
	carveMaxArgs = 8
)

// carve returns a new slice of n bytes (n <= carveMax), cut from the
// current block. Its capacity is n, so an append to it cannot reach the
// next argument.
func (r *reader) carve(n int) []byte {
	if len(r.bytes) < n {
		r.bytes = make([]byte, carveBlock)
	}
	a := r.bytes[:n:n]
	r.bytes = r.bytes[n:]
	return a
}

// carveArgs returns an empty argument list with room for n arguments,
// cut from the current block when n is at most carveMaxArgs.
func (r *reader) carveArgs(n int) [][]byte {
	if n > carveMaxArgs {
		return make([][]byte, 0, min(n, 16))
	}
	if len(r.slots) < n {
		r.slots = make([][]byte, carveSlots)
	}
	a := r.slots[:0:n]
	r.slots = r.slots[n:]
	return a
}

func newReader(r io.Reader, size int, lim func() Limits) *reader {
	return &reader{br: bufio.NewReaderSize(r, size), lim: lim}
}

// read returns the next non-empty request. Errors: a *protocolError for
// malformed input, errQueryBufferLimit, or the underlying reader's error
// (io.EOF between requests, io.ErrUnexpectedEOF inside one).
func (r *reader) read() (request, error) {
	for {
		b, err := r.br.Peek(1)
		if err != nil {
			return request{}, err
		}
		// The limits are those in force when the request's first byte
		// has arrived, not when the wait for it began: a CONFIG SET or
		// a cleared password on another connection applies to it.
		lim := r.lim()
		unauth := r.preAuth != nil && r.preAuth()
		if unauth {
			lim.MaxInlineLen = min(lim.MaxInlineLen, unauthInlineLen)
		}
		var req request
		if b[0] == '*' {
			req, err = r.readMultibulk(lim, unauth)
		} else {
			req, err = r.readInline(lim)
		}
		if err != nil {
			return request{}, err
		}
		if len(req.args) > 0 {
			return req, nil
		}
	}
}

// readLine returns the next line without its "\n" (and a "\r" before it),
// failing with tooBig as soon as more than max bytes have arrived without a
// newline (checked after every read of the socket, as Redis checks its
// query buffer). The slice is valid until the next read.
func (r *reader) readLine(max int, tooBig string) ([]byte, error) {
	return r.readLineTo('\n', max, tooBig)
}

// readCount reads the number of a "*N" or "$N" line after its first byte,
// as Redis's processMultibulkBuffer does: the line ends at the first "\r",
// and the byte after that is skipped whatever it is, so that "*1\n$4\r\n"
// is a count of "1\n$4", which is invalid (ok false), not a count of 1.
func (r *reader) readCount(max int, tooBig string) (n int64, ok bool, err error) {
	line, err := r.readLineTo('\r', max, tooBig)
	if err != nil {
		return 0, false, err
	}
	// Parsed before the next read, which may reuse line's bytes.
	n, ok = parseInt(line)
	if _, err := r.br.ReadByte(); err != nil {
		return 0, false, unexpected(err)
	}
	return n, ok, nil
}

// readLineTo is readLine with the line ending at the byte end; a "\r"
// before a "\n" end is dropped. The slice is valid until the next read.
func (r *reader) readLineTo(end byte, max int, tooBig string) ([]byte, error) {
	var acc []byte
	for {
		if n := r.br.Buffered(); n > 0 {
			b, _ := r.br.Peek(n)
			if i := bytes.IndexByte(b, end); i >= 0 {
				if len(acc)+i > max {
					return nil, &protocolError{tooBig}
				}
				line := b[:i]
				if acc != nil {
					line = append(acc, line...)
				}
				r.br.Discard(i + 1)
				if n := len(line); end == '\n' && n > 0 && line[n-1] == '\r' {
					line = line[:n-1]
				}
				return line, nil
			}
			if len(acc)+n > max {
				return nil, &protocolError{tooBig}
			}
			acc = append(acc, b...)
			r.br.Discard(n)
		}
		if _, err := r.br.Peek(1); err != nil {
			if err == io.EOF && acc != nil {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
}

func (r *reader) readMultibulk(lim Limits, unauth bool) (request, error) {
	// The '*' read() saw.
	r.br.Discard(1)
	n, ok, err := r.readCount(lim.MaxInlineLen-1, "too big mbulk count string")
	if err != nil {
		return request{}, err
	}
	if !ok || n > int64(lim.MaxMultibulkLen) {
		return request{}, &protocolError{"invalid multibulk length"}
	}
	if unauth && n > unauthMultibulkLen {
		return request{}, &protocolError{"unauthenticated multibulk length"}
	}
	if n <= 0 {
		return request{}, nil
	}
	// The declared count only bounds the loop: the slice grows as
	// arguments arrive.
	req := request{args: r.carveArgs(int(n))}
	for i := int64(0); i < n; i++ {
		b, err := r.br.ReadByte()
		if err != nil {
			return request{}, unexpected(err)
		}
		if b != '$' {
			return request{}, &protocolError{fmt.Sprintf("expected '$', got '%c'", b)}
		}
		blen, ok, err := r.readCount(lim.MaxInlineLen-1, "too big bulk count string")
		if err != nil {
			return request{}, unexpected(err)
		}
		if !ok || blen < 0 || blen > lim.MaxBulkLen {
			return request{}, &protocolError{"invalid bulk length"}
		}
		// Asked again at each argument, as Redis does: a password
		// cleared meanwhile lifts the limit for the rest of the request.
		if unauth && blen > unauthBulkLen && r.preAuth() {
			return request{}, &protocolError{"unauthenticated bulk length"}
		}
		if blen > int64(lim.MaxArgLen) {
			// Too long to keep but within the protocol: skip it
			// without storing it and answer the command with an error.
			if _, err := r.br.Discard(int(blen) + 2); err != nil {
				return request{}, unexpected(err)
			}
			if req.oversize == 0 {
				req.oversize = blen
			}
			req.args = append(req.args, nil)
			continue
		}
		req.size += blen + argOverhead
		if req.size > lim.QueryBufferLimit {
			return request{}, errQueryBufferLimit
		}
		arg, err := r.readBulk(int(blen))
		if err != nil {
			return request{}, unexpected(err)
		}
		req.args = append(req.args, arg)
	}
	if n <= carveMaxArgs {
		req.args = ownList(req.args)
	}
	return req, nil
}

// queuedArgs returns a copy of args for a MULTI queue: a list of its own,
// and the arguments of up to carveMax bytes copied into one buffer, each
// with its length as its capacity. The pieces the reader cut from its
// shared blocks would keep those blocks alive until EXEC, and with them
// the arguments of other requests (commands refused while queuing) that
// the queue does not count against its limit. Longer arguments are their
// request's own allocations and are kept as they are.
func queuedArgs(args [][]byte) [][]byte {
	n := 0
	for _, a := range args {
		if len(a) <= carveMax {
			n += len(a)
		}
	}
	buf := make([]byte, 0, n)
	own := make([][]byte, len(args))
	for i, a := range args {
		if a == nil || len(a) > carveMax {
			own[i] = a
			continue
		}
		at := len(buf)
		buf = append(buf, a...)
		own[i] = buf[at:len(buf):len(buf)]
	}
	return own
}

// ownList returns args, a list cut from the reader's current block, in a
// slice of its own when it holds an argument longer than carveMax, and
// clears its slots in the block: the reader keeps the block to cut the
// next lists from (and a list cut from it may be kept with it), so a long
// argument left in it would stay alive long after its request is done,
// an idle connection holding the last large values it sent. A list of
// short arguments stays in the block, which then points only at other
// short arguments.
func ownList(args [][]byte) [][]byte {
	for _, a := range args {
		if len(a) > carveMax {
			own := slices.Clone(args)
			clear(args)
			return own
		}
	}
	return args
}

// readBulk reads n bytes and the two bytes after them (Redis does not check
// that they are "\r\n", and neither do we) into one buffer of n bytes.
// Memory is set aside only as bytes arrive: until half of the argument is
// in, it goes into pieces of doubling size, each no larger than what has
// arrived (and at least growStep); then the n-byte buffer is allocated,
// the pieces copied into it and dropped, and the rest read in place. So a
// client that declares 512 MiB and sends 10 bytes holds growStep, nothing
// is allocated more than what has arrived ahead of the bytes, and a large
// argument peaks at 1.5 times its size, once (growing one buffer by
// doubling would copy it about twice over and peak higher).
func (r *reader) readBulk(n int) ([]byte, error) {
	if n <= carveMax {
		arg := r.carve(n)
		if _, err := io.ReadFull(r.br, arg); err != nil {
			return nil, err
		}
		if _, err := r.br.Discard(2); err != nil {
			return nil, err
		}
		return arg, nil
	}
	var pieces [][]byte
	got := 0
	half := n - n/2
	for got < half && n > growStep {
		p := make([]byte, min(max(growStep, got), max(growStep, half-got), n-got))
		if _, err := io.ReadFull(r.br, p); err != nil {
			return nil, err
		}
		pieces = append(pieces, p)
		got += len(p)
	}
	var arg []byte
	if len(pieces) == 1 && got == n {
		arg = pieces[0]
	} else {
		arg = make([]byte, n)
		off := 0
		for _, p := range pieces {
			off += copy(arg[off:], p)
		}
		if _, err := io.ReadFull(r.br, arg[got:]); err != nil {
			return nil, err
		}
	}
	if _, err := r.br.Discard(2); err != nil {
		return nil, err
	}
	return arg, nil
}

func (r *reader) readInline(lim Limits) (request, error) {
	line, err := r.readLine(lim.MaxInlineLen, "too big inline request")
	if err != nil {
		return request{}, err
	}
	args, ok := splitArgs(line)
	if !ok {
		return request{}, &protocolError{"unbalanced quotes in request"}
	}
	req := request{args: args}
	for _, a := range args {
		req.size += int64(len(a)) + argOverhead
	}
	return req, nil
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// parseInt parses a decimal int64 as Redis's string2ll: an optional '-',
// no leading zeros (except "0" itself), no '+', no spaces, no overflow.
func parseInt(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	if len(b) == 1 && b[0] == '0' {
		return 0, true
	}
	neg := false
	if b[0] == '-' {
		neg = true
		b = b[1:]
		if len(b) == 0 {
			return 0, false
		}
	}
	if b[0] < '1' || b[0] > '9' {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (1<<64-1-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	if neg {
		if v > 1<<63 {
			return 0, false
		}
		return -int64(v), true
	}
	if v > 1<<63-1 {
		return 0, false
	}
	return int64(v), true
}

// splitArgs splits an inline request as Redis's sdssplitargs: arguments
// separated by spaces; "double quotes" with \n \r \t \b \a \\ \" and \xHH
// escapes; 'single quotes' with only \'; a closing quote must be followed
// by a space or the end. It reports false for unbalanced quotes. As in
// sdssplitargs, the spaces skipped between arguments and after a closing
// quote are C's isspace (vertical tab and form feed too), but only a
// space, tab, CR or LF ends an unquoted argument: "a\vb" is one argument.
func splitArgs(line []byte) ([][]byte, bool) {
	var args [][]byte
	i := 0
	isSpace := func(c byte) bool { return c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == '\v' || c == '\f' }
	for {
		for i < len(line) && isSpace(line[i]) {
			i++
		}
		if i == len(line) {
			return args, true
		}
		var cur []byte
		inq, insq := false, false
		for done := false; !done; {
			if i == len(line) {
				if inq || insq {
					return nil, false
				}
				break
			}
			c := line[i]
			switch {
			case inq:
				if c == '\\' && i+3 < len(line) && line[i+1] == 'x' && isHex(line[i+2]) && isHex(line[i+3]) {
					cur = append(cur, hexVal(line[i+2])<<4|hexVal(line[i+3]))
					i += 3
				} else if c == '\\' && i+1 < len(line) {
					i++
					switch line[i] {
					case 'n':
						cur = append(cur, '\n')
					case 'r':
						cur = append(cur, '\r')
					case 't':
						cur = append(cur, '\t')
					case 'b':
						cur = append(cur, '\b')
					case 'a':
						cur = append(cur, '\a')
					default:
						cur = append(cur, line[i])
					}
				} else if c == '"' {
					if i+1 < len(line) && !isSpace(line[i+1]) {
						return nil, false
					}
					done = true
				} else {
					cur = append(cur, c)
				}
			case insq:
				if c == '\\' && i+1 < len(line) && line[i+1] == '\'' {
					i++
					cur = append(cur, '\'')
				} else if c == '\'' {
					if i+1 < len(line) && !isSpace(line[i+1]) {
						return nil, false
					}
					done = true
				} else {
					cur = append(cur, c)
				}
			default:
				switch {
				case c == ' ' || c == '\n' || c == '\r' || c == '\t':
					done = true
				case c == '"':
					inq = true
				case c == '\'':
					insq = true
				default:
					cur = append(cur, c)
				}
			}
			if i < len(line) {
				i++
			}
		}
		if cur == nil {
			cur = []byte{}
		}
		args = append(args, cur)
	}
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func hexVal(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}
