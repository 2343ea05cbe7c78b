package server

import (
	"bytes"
	"math"
	"math/big"
	"math/bits"
	"strconv"
	"strings"

	"github.com/tidwall/redcon"
)

// The string commands beyond GET, SET and the counters, each as Redis
// 7.0's t_string.c and bitops.c answer: the same arities, options,
// replies and error texts. A write that keeps a key's value but changes it
// (APPEND, SETRANGE, SETBIT, INCRBYFLOAT) keeps its expiry, as Redis's
// dbReplaceValue does; one that sets a new value (SETNX, SETEX, GETSET,
// MSETNX, BITOP) clears it, as Redis's setKey does.

// bulkOrNull appends v as a bulk string, or a null bulk when it is nil.
func (x *execCtx) bulkOrNull(v []byte) {
	if v == nil {
		x.null()
	} else {
		x.out = redcon.AppendBulk(x.out, v)
	}
}

// checkLength replies with Redis's error when a string of size bytes
// grown by add bytes (both not negative) would pass proto-max-bulk-len
// (checkStringLength), overflow included: SETRANGE's offset can be as
// large as an int64 goes. The engine refuses smaller ones beyond its own
// limit with its own error.
func (x *execCtx) checkLength(size, add int64) bool {
	limit := min(int64(x.c.s.limits().MaxBulkLen), MaxStoredValue)
	if size > limit || add > limit-size {
		x.errorf("ERR string exceeds maximum allowed size (proto-max-bulk-len)")
		return false
	}
	return true
}

func cmdAppend(x *execCtx, args [][]byte) error {
	key := args[1]
	if !x.checkKey(key) {
		return nil
	}
	var n int
	err := x.rmw(key, func(old []byte, d int64, live bool) (rmwResult, []byte, int64) {
		if !live {
			old, d = nil, 0
		}
		if !x.checkLength(int64(len(old)), int64(len(args[2]))) {
			return rmwKeep, nil, 0
		}
		nv := make([]byte, 0, len(old)+len(args[2]))
		nv = append(append(nv, old...), args[2]...)
		n = len(nv)
		return rmwPut, nv, d
	})
	if err != nil || x.failed {
		return x.writeErr(err)
	}
	x.wrote(key)
	x.out = redcon.AppendInt(x.out, int64(n))
	return nil
}

func cmdStrlen(x *execCtx, args [][]byte) error {
	n, _, _, err := x.meta(args[1])
	if err != nil {
		return err
	}
	x.out = redcon.AppendInt(x.out, int64(n))
	return nil
}

func cmdSetNX(x *execCtx, args [][]byte) error {
	key := args[1]
	if !x.checkKey(key) {
		return nil
	}
	set := false
	err := x.rmwMeta(key, false, func(_ int64, live bool) (rmwResult, []byte, int64) {
		if live {
			return rmwKeep, nil, 0
		}
		set = true
		return rmwPut, args[2], 0
	})
	if err != nil {
		return x.writeErr(err)
	}
	if set {
		x.wrote(key)
		x.out = redcon.AppendInt(x.out, 1)
	} else {
		x.out = redcon.AppendInt(x.out, 0)
	}
	return nil
}

// expireArg turns the relative or absolute time t (seconds when secs) of
// command name into a deadline in Unix milliseconds, as Redis's
// getExpireMillisecondsOrReply: not positive, or past the int64 range,
// is "invalid expire time".
func (x *execCtx) expireArg(name string, t []byte, secs, relative bool) (int64, bool) {
	n, ok := parseInt(t)
	if !ok {
		x.notInteger()
		return 0, false
	}
	if n <= 0 || (secs && n > math.MaxInt64/1000) {
		x.errorf("ERR invalid expire time in '%s' command", name)
		return 0, false
	}
	if secs {
		n *= 1000
	}
	if relative {
		if n > math.MaxInt64-x.now() {
			x.errorf("ERR invalid expire time in '%s' command", name)
			return 0, false
		}
		n += x.now()
	}
	return n, true
}

// cmdSetEx is SETEX key seconds value and PSETEX key milliseconds value.
func cmdSetEx(x *execCtx, args [][]byte) error {
	name := lower(args[0])
	d, ok := x.expireArg(name, args[2], name == "setex", true)
	if !ok {
		return nil
	}
	key := args[1]
	if !x.checkKey(key) {
		return nil
	}
	if err := x.tx.Put(key, x.encode(args[3], d)); err != nil {
		return x.writeErr(err)
	}
	x.wrote(key)
	x.ok()
	return nil
}

func cmdGetSet(x *execCtx, args [][]byte) error {
	key := args[1]
	if !x.checkKey(key) {
		return nil
	}
	var old []byte
	err := x.rmw(key, func(o []byte, _ int64, live bool) (rmwResult, []byte, int64) {
		if live {
			old = o
		}
		return rmwPut, args[2], 0
	})
	if err != nil {
		return x.writeErr(err)
	}
	x.wrote(key)
	x.bulkOrNull(old)
	return nil
}

func cmdGetDel(x *execCtx, args [][]byte) error {
	key := args[1]
	if !storable(key) {
		x.null()
		return nil
	}
	var old []byte
	err := x.rmw(key, func(o []byte, _ int64, live bool) (rmwResult, []byte, int64) {
		if !live {
			return rmwKeep, nil, 0
		}
		old = o
		return rmwDelete, nil, 0
	})
	if err != nil {
		return err
	}
	if old != nil {
		x.wrote(key)
	}
	x.bulkOrNull(old)
	return nil
}

// cmdGetEx is GETEX key [EX s|PX ms|EXAT t|PXAT t|PERSIST]. As Redis's
// getexCommand, the options are checked for syntax first, then a missing
// key answers null before the time is parsed.
func cmdGetEx(x *execCtx, args [][]byte) error {
	var unit string
	var when []byte
	persist := false
	for i := 2; i < len(args); i++ {
		opt := strings.ToUpper(string(args[i]))
		switch {
		// As Redis's parseExtendedStringArgumentsOrReply: an option may
		// be repeated (the last time wins), but not mixed with another
		// kind of expiry.
		case (opt == "EX" || opt == "PX" || opt == "EXAT" || opt == "PXAT") && (unit == "" || unit == opt) && !persist && i+1 < len(args):
			unit, when = opt, args[i+1]
			i++
		case opt == "PERSIST" && unit == "":
			persist = true
		default:
			x.syntaxError()
			return nil
		}
	}
	key := args[1]
	if !storable(key) {
		x.null()
		return nil
	}
	// Also without options GETEX reads under the key's row lock: it is a
	// write command, so in a pipeline it does not wait for the
	// connection's earlier writes to complete as a read does, and the
	// lock is what orders it after them.
	var val []byte
	var bad, changed bool
	var d int64
	err := x.rmw(key, func(o []byte, cur int64, live bool) (rmwResult, []byte, int64) {
		val, bad, changed = nil, false, false
		if !live {
			return rmwKeep, nil, 0
		}
		val = o
		if unit == "" && !persist {
			return rmwKeep, nil, 0
		}
		if persist {
			if cur == 0 {
				// Nothing to remove: as Redis, no change, and a WATCH
				// of the key is not touched.
				return rmwKeep, nil, 0
			}
			changed = true
			return rmwPut, o, 0
		}
		var ok bool
		if d, ok = x.expireArg("getex", when, unit == "EX" || unit == "EXAT", unit == "EX" || unit == "PX"); !ok {
			bad = true
			return rmwKeep, nil, 0
		}
		changed = true
		return rmwPut, o, d
	})
	if err != nil {
		return x.writeErr(err)
	}
	if bad {
		return nil
	}
	if changed {
		x.wrote(key)
	}
	x.bulkOrNull(val)
	return nil
}

// clampRange turns Redis's inclusive start and end, negative counting
// from the end, into [start, end] within n, as GETRANGE and BITCOUNT do;
// ok is false for an empty range.
func clampRange(start, end, n int64) (int64, int64, bool) {
	if start < 0 && end < 0 && start > end {
		return 0, 0, false
	}
	if start < 0 {
		start += n
	}
	if end < 0 {
		end += n
	}
	start, end = max(start, 0), max(end, 0)
	if end >= n {
		end = n - 1
	}
	if start > end || n == 0 {
		return 0, 0, false
	}
	return start, end, true
}

// cmdGetRange is GETRANGE and SUBSTR key start end.
func cmdGetRange(x *execCtx, args [][]byte) error {
	start, ok1 := parseInt(args[2])
	end, ok2 := parseInt(args[3])
	if !ok1 || !ok2 {
		x.notInteger()
		return nil
	}
	v, err := x.get(args[1])
	if err != nil {
		return err
	}
	s, e, ok := clampRange(start, end, int64(len(v)))
	if !ok {
		x.out = redcon.AppendBulk(x.out, nil)
		return nil
	}
	x.out = redcon.AppendBulk(x.out, v[s:e+1])
	return nil
}

func cmdSetRange(x *execCtx, args [][]byte) error {
	off, ok := parseInt(args[2])
	if !ok {
		x.notInteger()
		return nil
	}
	if off < 0 {
		x.errorf("ERR offset is out of range")
		return nil
	}
	key, val := args[1], args[3]
	if !storable(key) {
		if len(val) == 0 {
			x.out = redcon.AppendInt(x.out, 0)
			return nil
		}
		x.checkKey(key)
		return nil
	}
	var n int64
	changed := false
	err := x.rmw(key, func(old []byte, d int64, live bool) (rmwResult, []byte, int64) {
		if !live {
			old, d = nil, 0
		}
		if len(val) == 0 {
			n = int64(len(old))
			return rmwKeep, nil, 0
		}
		if !x.checkLength(off, int64(len(val))) {
			return rmwKeep, nil, 0
		}
		size := max(int64(len(old)), off+int64(len(val)))
		nv := make([]byte, size)
		copy(nv, old)
		copy(nv[off:], val)
		n, changed = size, true
		return rmwPut, nv, d
	})
	if err != nil || x.failed {
		return x.writeErr(err)
	}
	if changed {
		x.wrote(key)
	}
	x.out = redcon.AppendInt(x.out, n)
	return nil
}

// cmdMSetNX sets every key, or none if any of them exists: 1 or 0. It
// runs at REPEATABLE READ after locking all its keys (flagSnapshot).
func cmdMSetNX(x *execCtx, args [][]byte) error {
	if !x.checkPairs(args, "msetnx") {
		return nil
	}
	for i := 1; i < len(args); i += 2 {
		// Only whether the key is live: of a large value only its first
		// bytes are read, so a later chunk lost does not block it.
		_, _, live, err := x.meta(args[i])
		if err != nil {
			return err
		}
		if live {
			x.out = redcon.AppendInt(x.out, 0)
			return nil
		}
	}
	for _, i := range sortedPairs(args) {
		if err := x.tx.Put(args[i], encodeValue(args[i+1], 0)); err != nil {
			return err
		}
		x.wrote(args[i])
	}
	x.out = redcon.AppendInt(x.out, 1)
	return nil
}

// longDoublePrec is the mantissa of the x87 long double Redis computes
// INCRBYFLOAT in; big.Float at this precision rounds as it does, so the
// replies match (0.1 + 0.2 is "0.3", not float64's 0.30000000000000004).
const longDoublePrec = 64

// maxLongDoubleExp bounds the binary exponent of a finite long double.
const maxLongDoubleExp = 16384

// parseLongDouble parses a value as Redis's string2ld: no surrounding
// spaces, a decimal or hex float; false for anything else. Infinities
// are returned as such (the caller reports them); NaN is refused.
func parseLongDouble(b []byte) (*big.Float, bool) {
	if len(b) == 0 || len(b) > 5*1024 || b[0] == ' ' || b[0] == '\t' || b[0] == '\n' || b[0] == '\r' || b[0] == '\v' || b[0] == '\f' {
		return nil, false
	}
	s := string(b)
	unsigned := strings.ToLower(s)
	if len(unsigned) > 0 && (unsigned[0] == '+' || unsigned[0] == '-') {
		unsigned = unsigned[1:]
	}
	switch unsigned {
	case "inf", "infinity":
		return new(big.Float).SetInf(s[0] == '-'), true
	}
	// Go's syntax beyond strtold's: digit separators and binary or octal
	// prefixes ("1_0", "0b101", "0o17"), which Redis refuses.
	if strings.IndexByte(s, '_') >= 0 || strings.HasPrefix(unsigned, "0b") || strings.HasPrefix(unsigned, "0o") {
		return nil, false
	}
	f, _, err := new(big.Float).SetPrec(longDoublePrec).SetMode(big.ToNearestEven).Parse(s, 0)
	if err != nil || f.IsInf() {
		return nil, false
	}
	m := new(big.Float)
	exp := f.MantExp(m)
	if exp > maxLongDoubleExp {
		// strtold's overflow: HUGE_VALL with ERANGE, refused.
		return nil, false
	}
	if f.Sign() != 0 && (exp < underflowExp || exp == underflowExp && m.Abs(m).Cmp(big.NewFloat(0.5)) == 0) {
		// strtold's underflow to zero (ERANGE with 0, refused by
		// string2ld): at or below half the smallest subnormal, which
		// rounds to 0. Anything above it rounds to a subnormal, kept.
		return nil, false
	}
	return f, true
}

// underflowExp is the binary exponent, in big.Float's form (a mantissa
// in [0.5, 1)), of half the smallest subnormal long double: 2^-16446 is
// 0.5 * 2^-16445.
const underflowExp = -16445

// formatLongDouble formats f as Redis's ld2string in LD_STR_HUMAN mode:
// "%.17Lf" with the trailing zeros (and a bare point) removed, "-0" as "0".
func formatLongDouble(f *big.Float) string {
	s := f.Text('f', 17)
	if strings.IndexByte(s, '.') >= 0 {
		s = strings.TrimRight(s, "0")
		s = strings.TrimSuffix(s, ".")
	}
	if s == "-0" {
		s = "0"
	}
	return s
}

func cmdIncrByFloat(x *execCtx, args [][]byte) error {
	key := args[1]
	incr, ok := parseLongDouble(args[2])
	if !ok {
		x.errorf("ERR value is not a valid float")
		return nil
	}
	if !x.checkKey(key) {
		return nil
	}
	var result string
	var fail string
	err := x.rmw(key, func(old []byte, d int64, live bool) (rmwResult, []byte, int64) {
		cur := new(big.Float).SetPrec(longDoublePrec)
		if live {
			v, ok := parseLongDouble(old)
			if !ok {
				fail = "ERR value is not a valid float"
				return rmwKeep, nil, 0
			}
			cur = v
		}
		if cur.IsInf() || incr.IsInf() {
			fail = "ERR increment would produce NaN or Infinity"
			return rmwKeep, nil, 0
		}
		sum := new(big.Float).SetPrec(longDoublePrec).SetMode(big.ToNearestEven).Add(cur, incr)
		if sum.MantExp(nil) > maxLongDoubleExp {
			fail = "ERR increment would produce NaN or Infinity"
			return rmwKeep, nil, 0
		}
		result = formatLongDouble(sum)
		return rmwPut, []byte(result), d
	})
	if err != nil {
		return x.writeErr(err)
	}
	if fail != "" {
		x.errorf("%s", fail)
		return nil
	}
	x.wrote(key)
	x.out = redcon.AppendBulkString(x.out, result)
	return nil
}

// cmdLCS is LCS key1 key2 [LEN] [IDX] [MINMATCHLEN n] [WITHMATCHLEN], by
// Redis's dynamic programming over an (len1+1) x (len2+1) table of
// uint32, refused as Redis refuses it when the table would exceed
// proto-max-bulk-len. It runs at REPEATABLE READ: both keys are read from
// one snapshot.
func cmdLCS(x *execCtx, args [][]byte) error {
	var getLen, getIdx, withMatchLen bool
	var minMatch int64
	for i := 3; i < len(args); i++ {
		opt := strings.ToUpper(string(args[i]))
		switch {
		case opt == "IDX":
			getIdx = true
		case opt == "LEN":
			getLen = true
		case opt == "WITHMATCHLEN":
			withMatchLen = true
		case opt == "MINMATCHLEN" && i+1 < len(args):
			n, ok := parseInt(args[i+1])
			if !ok {
				x.notInteger()
				return nil
			}
			minMatch = max(n, 0)
			i++
		default:
			x.syntaxError()
			return nil
		}
	}
	a, err := x.get(args[1])
	if err != nil {
		return err
	}
	b, err := x.get(args[2])
	if err != nil {
		return err
	}
	if getIdx && getLen {
		x.errorf("ERR If you want both the length and indexes, please just use IDX.")
		return nil
	}
	alen, blen := len(a), len(b)
	cells := uint64(alen+1) * uint64(blen+1)
	if cells*4 > uint64(x.c.s.limits().MaxBulkLen) {
		x.errorf("ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len")
		return nil
	}
	dp := make([]uint32, cells)
	at := func(i, j int) *uint32 { return &dp[j+i*(blen+1)] }
	for i := 1; i <= alen; i++ {
		for j := 1; j <= blen; j++ {
			if a[i-1] == b[j-1] {
				*at(i, j) = *at(i-1, j-1) + 1
			} else {
				*at(i, j) = max(*at(i-1, j), *at(i, j-1))
			}
		}
	}
	idx := *at(alen, blen)
	computeLCS := getIdx || !getLen
	var result []byte
	if computeLCS {
		result = make([]byte, idx)
	}
	// The walk back from the end, emitting the matched ranges as
	// Redis's lcsCommand does, last match first.
	var ranges []byte
	nranges := 0
	aStart, aEnd, bStart, bEnd := alen, 0, 0, 0 // aStart == alen: no range open
	i, j := alen, blen
	for computeLCS && i > 0 && j > 0 {
		emit := false
		if a[i-1] == b[j-1] {
			result[idx-1] = a[i-1]
			if aStart == alen {
				aStart, aEnd, bStart, bEnd = i-1, i-1, j-1, j-1
			} else if aStart == i && bStart == j {
				aStart--
				bStart--
			} else {
				emit = true
			}
			if aStart == 0 || bStart == 0 {
				emit = true
			}
			idx--
			i--
			j--
		} else {
			if *at(i-1, j) > *at(i, j-1) {
				i--
			} else {
				j--
			}
			if aStart != alen {
				emit = true
			}
		}
		matchLen := aEnd - aStart + 1
		if emit {
			if getIdx && (minMatch == 0 || int64(matchLen) >= minMatch) {
				n := 2
				if withMatchLen {
					n = 3
				}
				ranges = redcon.AppendArray(ranges, n)
				ranges = redcon.AppendArray(ranges, 2)
				ranges = redcon.AppendInt(ranges, int64(aStart))
				ranges = redcon.AppendInt(ranges, int64(aEnd))
				ranges = redcon.AppendArray(ranges, 2)
				ranges = redcon.AppendInt(ranges, int64(bStart))
				ranges = redcon.AppendInt(ranges, int64(bEnd))
				if withMatchLen {
					ranges = redcon.AppendInt(ranges, int64(matchLen))
				}
				nranges++
			}
			aStart = alen
		}
	}
	switch {
	case getIdx:
		x.out = redcon.AppendArray(x.out, 4)
		x.out = redcon.AppendBulkString(x.out, "matches")
		x.out = redcon.AppendArray(x.out, nranges)
		x.out = append(x.out, ranges...)
		x.out = redcon.AppendBulkString(x.out, "len")
		x.out = redcon.AppendInt(x.out, int64(*at(alen, blen)))
	case getLen:
		x.out = redcon.AppendInt(x.out, int64(*at(alen, blen)))
	default:
		x.out = redcon.AppendBulk(x.out, result)
	}
	return nil
}

// bitOffset parses the bit offset of SETBIT and GETBIT; one that is not an
// integer, is negative, or lies past Redis's bound (proto-max-bulk-len
// bytes) gets Redis's error reply, and bitOffset reports false.
func (x *execCtx) bitOffset(b []byte) (int64, bool) {
	n, ok := parseInt(b)
	if !ok || n < 0 || n>>3 >= int64(x.c.s.limits().MaxBulkLen) {
		x.errorf("ERR bit offset is not an integer or out of range")
		return 0, false
	}
	return n, true
}

func cmdSetBit(x *execCtx, args [][]byte) error {
	off, ok := x.bitOffset(args[2])
	if !ok {
		return nil
	}
	on, ok := parseInt(args[3])
	if !ok || on&^1 != 0 {
		x.errorf("ERR bit is not an integer or out of range")
		return nil
	}
	key := args[1]
	if !x.checkKey(key) {
		return nil
	}
	var old int64
	changed := false
	err := x.rmw(key, func(v []byte, d int64, live bool) (rmwResult, []byte, int64) {
		old, changed = 0, false
		if !live {
			v, d = nil, 0
		}
		byteAt := off >> 3
		size := max(int64(len(v)), byteAt+1)
		if !x.checkLength(size, 0) {
			// proto-max-bulk-len raised past what can be stored.
			return rmwKeep, nil, 0
		}
		mask := byte(1) << (7 - uint(off&7))
		if byteAt < int64(len(v)) && v[byteAt]&mask != 0 {
			old = 1
		}
		if live && size == int64(len(v)) && old == on {
			// As Redis's setbitCommand: a bit set to what it was, in
			// a string that does not grow, changes nothing (no new
			// version, and a WATCH of the key is not touched).
			return rmwKeep, nil, 0
		}
		changed = true
		nv := make([]byte, size)
		copy(nv, v)
		if on == 1 {
			nv[byteAt] |= mask
		} else {
			nv[byteAt] &^= mask
		}
		return rmwPut, nv, d
	})
	if err != nil {
		return x.writeErr(err)
	}
	if x.failed {
		return nil
	}
	if changed {
		x.wrote(key)
	}
	x.out = redcon.AppendInt(x.out, old)
	return nil
}

func cmdGetBit(x *execCtx, args [][]byte) error {
	off, ok := x.bitOffset(args[2])
	if !ok {
		return nil
	}
	v, err := x.get(args[1])
	if err != nil {
		return err
	}
	bit := int64(0)
	if i := off >> 3; i < int64(len(v)) && v[i]&(1<<(7-uint(off&7))) != 0 {
		bit = 1
	}
	x.out = redcon.AppendInt(x.out, bit)
	return nil
}

// bitAt reports bit i (0 the most significant of the first byte) of v.
func bitAt(v []byte, i int64) bool { return v[i>>3]&(1<<(7-uint(i&7))) != 0 }

// cmdBitCount is BITCOUNT key [start end [BYTE|BIT]]. As Redis 7.0's
// bitcountCommand, a missing key answers 0 before the arguments are
// parsed.
func cmdBitCount(x *execCtx, args [][]byte) error {
	v, err := x.get(args[1])
	if err != nil {
		return err
	}
	if v == nil {
		x.out = redcon.AppendInt(x.out, 0)
		return nil
	}
	var start, end int64
	isBit, ranged := false, false
	switch len(args) {
	case 2:
	case 4, 5:
		var ok1, ok2 bool
		start, ok1 = parseInt(args[2])
		end, ok2 = parseInt(args[3])
		if !ok1 || !ok2 {
			x.notInteger()
			return nil
		}
		if start < 0 && end < 0 && start > end {
			// Redis 7.0 answers this empty range before it reads the
			// unit, so even a bad one gives 0.
			x.out = redcon.AppendInt(x.out, 0)
			return nil
		}
		if len(args) == 5 {
			switch strings.ToUpper(string(args[4])) {
			case "BIT":
				isBit = true
			case "BYTE":
			default:
				x.syntaxError()
				return nil
			}
		}
		ranged = true
	default:
		x.syntaxError()
		return nil
	}
	total := int64(len(v))
	if isBit {
		total *= 8
	}
	if !ranged {
		start, end = 0, total-1
	}
	s, e, ok := clampRange(start, end, total)
	if !ok {
		x.out = redcon.AppendInt(x.out, 0)
		return nil
	}
	n := 0
	if isBit {
		for i := s; i <= e; i++ {
			if bitAt(v, i) {
				n++
			}
		}
	} else {
		for _, c := range v[s : e+1] {
			n += bits.OnesCount8(c)
		}
	}
	x.out = redcon.AppendInt(x.out, int64(n))
	return nil
}

// cmdBitPos is BITPOS key bit [start [end [BYTE|BIT]]], with Redis's
// answers at the edges: a missing key is all zeros (0 for a clear bit,
// -1 for a set one); without an end, a clear bit past the string is
// found just after it.
func cmdBitPos(x *execCtx, args [][]byte) error {
	bit, ok := parseInt(args[2])
	if !ok {
		x.notInteger()
		return nil
	}
	if bit != 0 && bit != 1 {
		x.errorf("ERR The bit argument must be 1 or 0.")
		return nil
	}
	v, err := x.get(args[1])
	if err != nil {
		return err
	}
	if v == nil {
		x.out = redcon.AppendInt(x.out, -bit)
		return nil
	}
	isBit, endGiven := false, false
	total := int64(len(v))
	var start, end int64
	switch len(args) {
	case 3:
		start, end = 0, total-1
	case 4, 5, 6:
		if start, ok = parseInt(args[3]); !ok {
			x.notInteger()
			return nil
		}
		if len(args) == 6 {
			switch strings.ToUpper(string(args[5])) {
			case "BIT":
				isBit = true
				total *= 8
			case "BYTE":
			default:
				x.syntaxError()
				return nil
			}
		}
		if len(args) >= 5 {
			if end, ok = parseInt(args[4]); !ok {
				x.notInteger()
				return nil
			}
			endGiven = true
		} else {
			end = total - 1
		}
		if start < 0 {
			start += total
		}
		if end < 0 {
			end += total
		}
		start, end = max(start, 0), max(end, 0)
		if end >= total {
			end = total - 1
		}
	default:
		x.syntaxError()
		return nil
	}
	if start > end {
		x.out = redcon.AppendInt(x.out, -1)
		return nil
	}
	if !isBit {
		start, end = start*8, end*8+7
	}
	want := bit == 1
	for i := start; i <= end; i++ {
		if bitAt(v, i) == want {
			x.out = redcon.AppendInt(x.out, i)
			return nil
		}
	}
	if !want && !endGiven {
		x.out = redcon.AppendInt(x.out, end+1)
		return nil
	}
	x.out = redcon.AppendInt(x.out, -1)
	return nil
}

// cmdBitOp is BITOP AND|OR|XOR|NOT destkey key [key ...]. It runs at
// REPEATABLE READ after locking its keys (flagSnapshot); a result of no
// bytes deletes destkey, as Redis's.
func cmdBitOp(x *execCtx, args [][]byte) error {
	op := strings.ToUpper(string(args[1]))
	switch op {
	case "AND", "OR", "XOR", "NOT":
	default:
		x.syntaxError()
		return nil
	}
	if op == "NOT" && len(args) != 4 {
		x.errorf("ERR BITOP NOT must be called with a single source key.")
		return nil
	}
	dest := args[2]
	if !x.checkKey(dest) {
		return nil
	}
	srcs := make([][]byte, 0, len(args)-3)
	maxLen := 0
	for _, k := range args[3:] {
		v, err := x.get(k)
		if err != nil {
			return err
		}
		srcs = append(srcs, v)
		maxLen = max(maxLen, len(v))
	}
	res := make([]byte, maxLen)
	for i := range res {
		var r byte
		for n, v := range srcs {
			var c byte
			if i < len(v) {
				c = v[i]
			}
			switch {
			case op == "NOT":
				r = ^c
			case n == 0:
				r = c
			case op == "AND":
				r &= c
			case op == "OR":
				r |= c
			case op == "XOR":
				r ^= c
			}
		}
		res[i] = r
	}
	if maxLen == 0 {
		var live bool
		err := x.rmwMeta(dest, false, func(_ int64, ok bool) (rmwResult, []byte, int64) {
			live = ok
			return rmwDelete, nil, 0
		})
		if err != nil {
			return err
		}
		if live {
			x.wrote(dest)
		}
	} else {
		if err := x.tx.Put(dest, encodeValue(res, 0)); err != nil {
			return x.writeErr(err)
		}
		x.wrote(dest)
	}
	x.out = redcon.AppendInt(x.out, int64(maxLen))
	return nil
}

// objectEncoding is the encoding Redis would report for a string value
// set by SET: "int" for a decimal integer of a long, "embstr" up to 44
// bytes, "raw" beyond.
func objectEncoding(v []byte) string {
	if len(v) <= 20 {
		if n, ok := parseInt(v); ok && bytes.Equal(strconv.AppendInt(nil, n, 10), v) {
			return "int"
		}
	}
	if len(v) <= 44 {
		return "embstr"
	}
	return "raw"
}
