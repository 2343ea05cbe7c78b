package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"mvkv/engine"
)

// ErrBadValue is returned when a stored value does not have the shape of
// its table (wrong length); the error names the key.
var ErrBadValue = errors.New("bench: malformed value")

// Key prefixes, one per pgbench table. See the package doc for the layout.
const (
	prefixAccount = "a:"
	prefixTeller  = "t:"
	prefixBranch  = "b:"
	prefixHistory = "h:"
)

// Value sizes in bytes; part of the format; do not change.
const (
	accountValueSize = 96 // balance 8, bid 4, filler 84
	tellerValueSize  = 96 // balance 8, bid 4, filler 84
	branchValueSize  = 96 // balance 8, filler 88
	historyValueSize = 32 // tid 4, bid 4, aid 8, delta 8, mtime 8

	// Rows per scale unit, as pgbench's naccounts, ntellers, nbranches.
	defaultAccounts = 100000
	tellersPerScale = 10
	idDigits        = 10
)

// filler is pgbench's blank-padded char(n).
var filler = [88]byte{
	' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ',
	' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ',
	' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ',
	' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ',
	' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ',
	' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ',
}

// appendID appends prefix and id zero-padded to idDigits digits.
func appendID(dst []byte, prefix string, id int64) []byte {
	dst = append(dst, prefix...)
	var buf [20]byte
	s := strconv.AppendInt(buf[:0], id, 10)
	for i := len(s); i < idDigits; i++ {
		dst = append(dst, '0')
	}
	return append(dst, s...)
}

func accountKey(aid int64) []byte { return appendID(make([]byte, 0, 12), prefixAccount, aid) }
func tellerKey(tid int64) []byte  { return appendID(make([]byte, 0, 12), prefixTeller, tid) }
func branchKey(bid int64) []byte  { return appendID(make([]byte, 0, 12), prefixBranch, bid) }

// historyKey is "h:" + run start ns (20 digits) + "-" + client (5) + "-" + seq (10).
func historyKey(runStart int64, client int, seq int64) []byte {
	k := make([]byte, 0, 2+20+1+5+1+10)
	k = append(k, prefixHistory...)
	k = appendPadded(k, uint64(runStart), 20)
	k = append(k, '-')
	k = appendPadded(k, uint64(client), 5)
	k = append(k, '-')
	return appendPadded(k, uint64(seq), 10)
}

func appendPadded(dst []byte, v uint64, width int) []byte {
	var buf [20]byte
	s := strconv.AppendUint(buf[:0], v, 10)
	for i := len(s); i < width; i++ {
		dst = append(dst, '0')
	}
	return append(dst, s...)
}

// isRowKey reports whether key, found under one of the table prefixes, has
// the shape of that table's keys above: prefix and 10 digits, or for history
// "h:", 20 digits, "-", 5 digits, "-", 10 digits. On a RESP server other keys
// can share a prefix ("a:hello"); they are not rows.
func isRowKey(prefix, key string) bool {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return false
	}
	if prefix != prefixHistory {
		return len(rest) == idDigits && allDigits(rest)
	}
	return len(rest) == 20+1+5+1+10 && rest[20] == '-' && rest[26] == '-' &&
		allDigits(rest[:20]) && allDigits(rest[21:26]) && allDigits(rest[27:])
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// prefixEnd returns the smallest key greater than every key with prefix p.
func prefixEnd(p string) []byte { return engine.PrefixEnd([]byte(p)) }

func accountValue(balance int64, bid int64) []byte {
	v := make([]byte, accountValueSize)
	binary.LittleEndian.PutUint64(v[0:8], uint64(balance))
	binary.LittleEndian.PutUint32(v[8:12], uint32(bid))
	copy(v[12:], filler[:84])
	return escapeMark(v)
}

func tellerValue(balance int64, bid int64) []byte {
	v := make([]byte, tellerValueSize)
	binary.LittleEndian.PutUint64(v[0:8], uint64(balance))
	binary.LittleEndian.PutUint32(v[8:12], uint32(bid))
	copy(v[12:], filler[:84])
	return escapeMark(v)
}

func branchValue(balance int64) []byte {
	v := make([]byte, branchValueSize)
	binary.LittleEndian.PutUint64(v[0:8], uint64(balance))
	copy(v[8:], filler[:88])
	return escapeMark(v)
}

// history is one pgbench_history row.
type history struct {
	TID, BID   uint32
	AID, Delta int64
	MTime      int64 // Unix microseconds
}

func (h history) encode() []byte {
	v := make([]byte, historyValueSize)
	binary.LittleEndian.PutUint32(v[0:4], h.TID)
	binary.LittleEndian.PutUint32(v[4:8], h.BID)
	binary.LittleEndian.PutUint64(v[8:16], uint64(h.AID))
	binary.LittleEndian.PutUint64(v[16:24], uint64(h.Delta))
	binary.LittleEndian.PutUint64(v[24:32], uint64(h.MTime))
	return escapeMark(v)
}

// valueMark is the first byte by which mvkv's server marks a value that
// carries a header (an expiry, or the escape below); a value it did not
// write that starts with it is read as one that does.
const valueMark = 0xFF

// escapeMark returns v, or v behind the two bytes 0xFF 0x00 when v starts
// with 0xFF, the bytes the server itself stores before such a value (its
// "no expiry" header), so that a directory the bench loaded or ran on can
// be served by mvkv serve without a balance of, say, 255 or -1 (whose
// little-endian first byte is 0xFF) being read as an expiry or cut short.
// Rows so written are 2 bytes longer than the sizes above.
func escapeMark(v []byte) []byte {
	if len(v) == 0 || v[0] != valueMark {
		return v
	}
	return append([]byte{valueMark, 0x00}, v...)
}

// unescapeMark undoes escapeMark for a value of the given size. Only a
// value exactly 2 bytes too long is unescaped: one of the right length
// starting 0xFF 0x00 was written before the escape existed and is taken
// as it is.
func unescapeMark(v []byte, size int) []byte {
	if len(v) == size+2 && v[0] == valueMark && v[1] == 0x00 {
		return v[2:]
	}
	return v
}

func decodeHistory(key, v []byte) (history, error) {
	v = unescapeMark(v, historyValueSize)
	if len(v) != historyValueSize {
		return history{}, fmt.Errorf("%w: key %q: history value is %d bytes, want %d", ErrBadValue, key, len(v), historyValueSize)
	}
	return history{
		TID:   binary.LittleEndian.Uint32(v[0:4]),
		BID:   binary.LittleEndian.Uint32(v[4:8]),
		AID:   int64(binary.LittleEndian.Uint64(v[8:16])),
		Delta: int64(binary.LittleEndian.Uint64(v[16:24])),
		MTime: int64(binary.LittleEndian.Uint64(v[24:32])),
	}, nil
}

// decodeBalance reads the balance of an account, teller or branch value,
// checking the value's length against want.
func decodeBalance(key, v []byte, want int) (int64, error) {
	v = unescapeMark(v, want)
	if len(v) != want {
		return 0, fmt.Errorf("%w: key %q: value is %d bytes, want %d", ErrBadValue, key, len(v), want)
	}
	return int64(binary.LittleEndian.Uint64(v[0:8])), nil
}

// addBalance returns a copy of v with delta added to its balance, and the new
// balance. v's length is checked against want.
func addBalance(key, v []byte, want int, delta int64) ([]byte, int64, error) {
	bal, err := decodeBalance(key, v, want)
	if err != nil {
		return nil, 0, err
	}
	bal += delta
	v = unescapeMark(v, want)
	nv := make([]byte, len(v))
	copy(nv, v)
	binary.LittleEndian.PutUint64(nv[0:8], uint64(bal))
	return escapeMark(nv), bal, nil
}
