package bench

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestKeys(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{string(accountKey(1)), "a:0000000001"},
		{string(accountKey(10000000)), "a:0010000000"},
		{string(tellerKey(42)), "t:0000000042"},
		{string(branchKey(7)), "b:0000000007"},
		{string(historyKey(1700000000123456789, 3, 17)), "h:01700000000123456789-00003-0000000017"},
		{string(prefixEnd(prefixAccount)), "a;"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
	// Zero padding makes key order numeric order.
	if bytes.Compare(accountKey(9), accountKey(10)) >= 0 {
		t.Errorf("a:9 sorts after a:10")
	}
}

// The keys the tables write are rows; other keys under the same prefixes,
// which a RESP server may hold, are not.
func TestIsRowKey(t *testing.T) {
	for _, k := range [][]byte{accountKey(1), accountKey(9999999999), tellerKey(42), branchKey(7), historyKey(1700000000123456789, 3, 17)} {
		if p := string(k[:2]); !isRowKey(p, string(k)) {
			t.Errorf("%q is not a row key of %q", k, p)
		}
	}
	for _, c := range []struct{ prefix, key string }{
		{prefixAccount, "a:hello"}, {prefixAccount, "a:"}, {prefixAccount, "a:000000001"}, {prefixAccount, "a:00000000001"},
		{prefixAccount, "t:0000000001"}, {prefixTeller, "t:1"}, {prefixBranch, "b:x"}, {prefixBranch, "b:000000000x"},
		{prefixHistory, "h:note"}, {prefixHistory, "h:01700000000123456789_00003-0000000017"},
		{prefixHistory, "h:01700000000123456789-00003-000000001"}, {prefixHistory, "h:0170000000012345678x-00003-0000000017"},
	} {
		if isRowKey(c.prefix, c.key) {
			t.Errorf("%q taken for a row key of %q", c.key, c.prefix)
		}
	}
}

func TestValues(t *testing.T) {
	for _, tc := range []struct {
		v    []byte
		size int
	}{
		{accountValue(-12345, 3), accountValueSize},
		{tellerValue(-12345, 3), tellerValueSize},
		{branchValue(-12345), branchValueSize},
	} {
		if len(tc.v) != tc.size {
			t.Fatalf("value is %d bytes, want %d", len(tc.v), tc.size)
		}
		b, err := decodeBalance([]byte("k"), tc.v, tc.size)
		if err != nil || b != -12345 {
			t.Fatalf("decodeBalance = %d, %v; want -12345", b, err)
		}
		nv, nb, err := addBalance([]byte("k"), tc.v, tc.size, 5000)
		if err != nil || nb != -7345 {
			t.Fatalf("addBalance = %d, %v; want -7345", nb, err)
		}
		if !bytes.Equal(nv[8:], tc.v[8:]) {
			t.Errorf("addBalance changed bytes past the balance")
		}
		if _, err := decodeBalance([]byte("k"), tc.v[:tc.size-1], tc.size); !errors.Is(err, ErrBadValue) {
			t.Errorf("short value: err = %v, want ErrBadValue", err)
		}
	}
	if v := accountValue(0, 1); v[len(v)-1] != ' ' || v[12] != ' ' {
		t.Errorf("account filler is not blank-padded")
	}
	h := history{TID: 9, BID: 1, AID: 99999, Delta: -5000, MTime: 1700000000000000}
	got, err := decodeHistory([]byte("h"), h.encode())
	if err != nil || got != h {
		t.Fatalf("decodeHistory = %+v, %v; want %+v", got, err, h)
	}
	if _, err := decodeHistory([]byte("h"), make([]byte, 31)); !errors.Is(err, ErrBadValue) {
		t.Errorf("short history: err = %v, want ErrBadValue", err)
	}
}

// TestValuesNeverLookLikeServerHeaders: a value whose first byte would be
// 0xFF (a balance of 255 or -1, a teller id of 511, little-endian) is
// written behind 0xFF 0x00, the server's own header for such a value, so
// that mvkv serve on a bench directory reads every row as it is; values
// written before the escape, 0xFF first and unescaped, still decode.
func TestValuesNeverLookLikeServerHeaders(t *testing.T) {
	for _, bal := range []int64{255, -1, 511, -257, 0x1FF} {
		for _, tc := range []struct {
			v    []byte
			size int
		}{
			{accountValue(bal, 3), accountValueSize},
			{tellerValue(bal, 3), tellerValueSize},
			{branchValue(bal), branchValueSize},
		} {
			if len(tc.v) != tc.size+2 || tc.v[0] != 0xFF || tc.v[1] != 0x00 {
				t.Fatalf("balance %d: value %x..., %d bytes; want 0xFF 0x00 and %d bytes", bal, tc.v[:4], len(tc.v), tc.size+2)
			}
			if b, err := decodeBalance([]byte("k"), tc.v, tc.size); err != nil || b != bal {
				t.Fatalf("decodeBalance = %d, %v; want %d", b, err, bal)
			}
			// Unescaped, as written before the escape existed.
			if b, err := decodeBalance([]byte("k"), tc.v[2:], tc.size); err != nil || b != bal {
				t.Fatalf("unescaped: decodeBalance = %d, %v; want %d", b, err, bal)
			}
			// Away from 0xFF and back.
			nv, nb, err := addBalance([]byte("k"), tc.v, tc.size, 1)
			if err != nil || nb != bal+1 || len(nv) != tc.size {
				t.Fatalf("addBalance(+1) = %x..., %d, %v", nv[:4], nb, err)
			}
			back, nb, err := addBalance([]byte("k"), nv, tc.size, -1)
			if err != nil || nb != bal || !bytes.Equal(back, tc.v) {
				t.Fatalf("addBalance(-1) = %x..., %d, %v; want %x...", back[:4], nb, err, tc.v[:4])
			}
		}
	}
	h := history{TID: 511, BID: 52, AID: 5100000, Delta: 17, MTime: 1700000000000000}
	v := h.encode()
	if len(v) != historyValueSize+2 || v[0] != 0xFF || v[1] != 0x00 {
		t.Fatalf("history of teller 511: %x..., %d bytes", v[:4], len(v))
	}
	if got, err := decodeHistory([]byte("h"), v); err != nil || got != h {
		t.Fatalf("decodeHistory = %+v, %v", got, err)
	}
	if v := accountValue(254, 1); len(v) != accountValueSize || v[0] != 254 {
		t.Fatalf("a value not starting 0xFF is escaped: %x...", v[:4])
	}
}

func FuzzDecodeHistory(f *testing.F) {
	f.Add(history{TID: 1, BID: 1, AID: 1, Delta: 5, MTime: 1}.encode())
	f.Add(history{TID: 511, BID: 52, AID: 1, Delta: 5, MTime: 1}.encode())
	f.Add([]byte("\xff\x00" + strings.Repeat("0", historyValueSize)))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, v []byte) {
		h, err := decodeHistory([]byte("h"), v)
		if err != nil {
			if len(v) == historyValueSize {
				t.Fatalf("rejected a %d-byte value: %v", len(v), err)
			}
			return
		}
		// The same row back; the same bytes for a plain value that does
		// not start with 0xFF (one that does is now written escaped).
		enc := h.encode()
		if h2, err := decodeHistory([]byte("h"), enc); err != nil || h2 != h {
			t.Fatalf("round trip: %+v, %v; want %+v", h2, err, h)
		}
		if len(v) == historyValueSize && v[0] != 0xFF && !bytes.Equal(enc, v) {
			t.Fatalf("round trip changed the value")
		}
		if enc[0] == 0xFF && enc[1] != 0x00 {
			t.Fatalf("encoded value starts 0xFF %#x, which the server reads as a header", enc[1])
		}
	})
}

func FuzzDecodeBalance(f *testing.F) {
	f.Add(accountValue(7, 1), 5)
	f.Add(branchValue(-7), 0)
	f.Add([]byte("x"), 1)
	f.Fuzz(func(t *testing.T, v []byte, delta int) {
		b, err := decodeBalance([]byte("k"), v, accountValueSize)
		if err != nil {
			return
		}
		nv, nb, err := addBalance([]byte("k"), v, accountValueSize, int64(delta))
		if err != nil || nb != b+int64(delta) {
			t.Fatalf("addBalance = %d, %v; want %d", nb, err, b+int64(delta))
		}
		if got, _ := decodeBalance([]byte("k"), nv, accountValueSize); got != nb {
			t.Fatalf("re-decoded %d, want %d", got, nb)
		}
	})
}
