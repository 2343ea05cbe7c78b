package heap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"strings"
	"testing"
)

func newPage() []byte {
	p := make([]byte, PageSize)
	InitPage(p)
	return p
}

func mkTuple(i int, valLen int) []byte {
	key := []byte(fmt.Sprintf("key-%06d", i))
	val := bytes.Repeat([]byte{byte(i)}, valLen)
	return AppendTuple(nil, TupleHeader{Xmin: uint64(i + 1), Prev: InvalidTID}, key, val)
}

func TestTIDPackString(t *testing.T) {
	for _, tid := range []TID{{0, 0}, {1, 2}, {131072, 77}, {1<<32 - 2, 1<<16 - 2}, InvalidTID} {
		if got := UnpackTID(tid.Pack()); got != tid {
			t.Errorf("UnpackTID(Pack(%v)) = %v", tid, got)
		}
	}
	if InvalidTID.Valid() || !(TID{}).Valid() {
		t.Error("Valid is wrong")
	}
	if s := (TID{Block: 12, Slot: 3}).String(); s != "(12,3)" {
		t.Errorf("String = %q", s)
	}
}

func TestPageRoundTrip(t *testing.T) {
	p := newPage()
	if IsNew(p) || !IsNew(make([]byte, PageSize)) {
		t.Fatal("IsNew is wrong")
	}
	if NumSlots(p) != 0 || FreeSpace(p) != MaxTupleSize {
		t.Fatalf("empty page: %d slots, %d free, want 0, %d", NumSlots(p), FreeSpace(p), MaxTupleSize)
	}
	var tups [][]byte
	for i := 0; i < 10; i++ {
		tup := mkTuple(i, i*13)
		before := u16(p, offUpper) - u16(p, offLower)
		slot, err := AddTuple(p, tup)
		if err != nil || int(slot) != i {
			t.Fatalf("AddTuple %d: slot %d, %v", i, slot, err)
		}
		if used := int(before - (u16(p, offUpper) - u16(p, offLower))); used != alignUp(len(tup))+ItemIDSize {
			t.Errorf("tuple of %d bytes used %d bytes", len(tup), used)
		}
		tups = append(tups, tup)
	}
	SetPageLSN(p, 0xABCDEF)
	SetPageFlags(p, PDAllVisible)
	if PageLSN(p) != 0xABCDEF || PageFlags(p) != PDAllVisible {
		t.Fatal("LSN or flags not kept")
	}
	for i, want := range tups {
		got, err := Tuple(p, uint16(i))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("Tuple %d = %x, %v", i, got, err)
		}
		h, key, val, err := DecodeTuple(got)
		if err != nil || h.Xmin != uint64(i+1) || h.Prev != InvalidTID || string(key) != fmt.Sprintf("key-%06d", i) || len(val) != i*13 {
			t.Fatalf("DecodeTuple %d: %+v %q %d %v", i, h, key, len(val), err)
		}
	}
	if _, err := Tuple(p, 10); !errors.Is(err, ErrBadSlot) {
		t.Errorf("Tuple beyond end: %v", err)
	}
	SetChecksum(p, 7)
	if err := VerifyPage(p, 7); err != nil {
		t.Fatal(err)
	}
	if err := VerifyPage(p, 8); !errors.Is(err, ErrCorrupt) {
		t.Errorf("page verified at the wrong block: %v", err)
	}
}

func TestInPlaceSetters(t *testing.T) {
	p := newPage()
	slot, _ := AddTuple(p, mkTuple(1, 5))
	tup, _ := Tuple(p, slot)
	SetTupleXmax(tup, 99)
	SetTupleInfomask(tup, XminCommitted|Frozen)
	SetTuplePrev(tup, TID{3, 4})
	h, _, _, err := DecodeTuple(tup)
	if err != nil || h.Xmax != 99 || h.Infomask != XminCommitted|Frozen || h.Prev != (TID{3, 4}) {
		t.Fatalf("%+v %v", h, err)
	}
	if TupleXmax(tup) != 99 || TupleXmin(tup) != 2 || TupleInfomask(tup) != XminCommitted|Frozen || TuplePrev(tup) != (TID{3, 4}) {
		t.Fatal("getters disagree")
	}
	// Short slices are ignored, not a panic.
	SetTupleXmax(tup[:3], 1)
	if TupleXmax(tup[:3]) != 0 || TupleInfomask(nil) != 0 {
		t.Fatal("short slice")
	}
}

func TestFillUntilNoSpace(t *testing.T) {
	for _, size := range []int{TupleHeaderSize, 33, 100, 1000, MaxTupleSize} {
		p := newPage()
		n := 0
		for {
			free := FreeSpace(p)
			tup := make([]byte, size)
			tup[0] = byte(n)
			_, err := AddTuple(p, tup)
			if errors.Is(err, ErrNoSpace) {
				if free >= size {
					t.Fatalf("size %d: FreeSpace %d but ErrNoSpace", size, free)
				}
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if free < size {
				t.Fatalf("size %d: FreeSpace %d but tuple fit", size, free)
			}
			n++
		}
		want := (PageSize - PageHeaderSize) / (alignUp(size) + ItemIDSize)
		if n != want {
			t.Errorf("size %d: %d tuples fit, want %d", size, n, want)
		}
		SetChecksum(p, 1)
		if err := VerifyPage(p, 1); err != nil {
			t.Fatal(err)
		}
	}
	p := newPage()
	if _, err := AddTuple(p, make([]byte, MaxTupleSize+1)); !errors.Is(err, ErrNoSpace) {
		t.Errorf("oversized tuple: %v", err)
	}
	if _, err := AddTuple(p, nil); !errors.Is(err, ErrBadTuple) {
		t.Errorf("empty tuple: %v", err)
	}
	if _, err := AddTuple(make([]byte, PageSize), []byte("x")); !errors.Is(err, ErrUninitialized) {
		t.Errorf("new page: %v", err)
	}
}

// TestPutTupleAtMatchesAddTuple replays a random history of inserts and
// prunes with PutTupleAt and checks that each step gives the same bytes.
func TestPutTupleAtMatchesAddTuple(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 20; round++ {
		a, b := newPage(), newPage()
		for step := 0; step < 300; step++ {
			if rng.IntN(10) == 0 && NumSlots(a) > 0 {
				var dead, unused []uint16
				for s := 0; s < NumSlots(a); s++ {
					if SlotState(a, uint16(s)) == LPUnused || rng.IntN(3) != 0 {
						continue
					}
					if rng.IntN(2) == 0 {
						dead = append(dead, uint16(s))
					} else {
						unused = append(unused, uint16(s))
					}
				}
				if err := Prune(a, dead, unused); err != nil {
					t.Fatal(err)
				}
				if err := Prune(b, dead, unused); err != nil {
					t.Fatal(err)
				}
			} else {
				tup := mkTuple(step, rng.IntN(120))
				slot, err := AddTuple(a, tup)
				if errors.Is(err, ErrNoSpace) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if err := PutTupleAt(b, slot, tup); err != nil {
					t.Fatalf("step %d: PutTupleAt(%d): %v", step, slot, err)
				}
			}
			if !bytes.Equal(a, b) {
				t.Fatalf("round %d step %d: pages differ", round, step)
			}
			SetChecksum(a, 3)
			if err := VerifyPage(a, 3); err != nil {
				t.Fatalf("round %d step %d: %v", round, step, err)
			}
			SetChecksum(b, 3)
		}
	}
}

func TestPutTupleAtSlots(t *testing.T) {
	p := newPage()
	AddTuple(p, mkTuple(0, 1))
	AddTuple(p, mkTuple(1, 1))
	if err := PutTupleAt(p, 1, mkTuple(2, 1)); !errors.Is(err, ErrBadSlot) {
		t.Errorf("slot in use: %v", err)
	}
	if err := PutTupleAt(p, 3, mkTuple(2, 1)); !errors.Is(err, ErrBadSlot) {
		t.Errorf("slot beyond end: %v", err)
	}
	if err := PutTupleAt(p, 2, mkTuple(2, 1)); err != nil {
		t.Fatal(err)
	}
}

func TestPrune(t *testing.T) {
	p := newPage()
	var tups [][]byte
	for i := 0; i < 6; i++ {
		tup := mkTuple(i, 100*i)
		tups = append(tups, tup)
		AddTuple(p, tup)
	}
	free := FreeSpace(p)
	if err := Prune(p, []uint16{1}, []uint16{2, 5}); err != nil {
		t.Fatal(err)
	}
	// Slot 5 was trailing and unused, so the array shrinks to 5.
	if NumSlots(p) != 5 || SlotState(p, 1) != LPDead || SlotState(p, 2) != LPUnused {
		t.Fatalf("slots %d, states %d %d", NumSlots(p), SlotState(p, 1), SlotState(p, 2))
	}
	for _, s := range []int{0, 3, 4} {
		got, err := Tuple(p, uint16(s))
		if err != nil || !bytes.Equal(got, tups[s]) {
			t.Fatalf("slot %d after prune: %v", s, err)
		}
	}
	for _, s := range []uint16{1, 2} {
		if _, err := Tuple(p, s); !errors.Is(err, ErrBadSlot) {
			t.Errorf("slot %d: %v", s, err)
		}
	}
	if FreeSpace(p) <= free {
		t.Errorf("prune freed nothing: %d -> %d", free, FreeSpace(p))
	}
	// The unused slot is reused first; the dead one never.
	if slot, _ := AddTuple(p, mkTuple(9, 1)); slot != 2 {
		t.Errorf("reused slot %d, want 2", slot)
	}
	if slot, _ := AddTuple(p, mkTuple(10, 1)); slot != 5 {
		t.Errorf("next slot %d, want 5", slot)
	}
	if PageFlags(p)&PDHasFreeLines != 0 {
		t.Error("free-lines hint still set")
	}
	if err := Prune(p, []uint16{2}, nil); err != nil {
		t.Fatal(err)
	}
	if err := Prune(p, nil, []uint16{99}); !errors.Is(err, ErrBadSlot) {
		t.Errorf("prune of a bad slot: %v", err)
	}
	if err := Prune(p, nil, []uint16{}); err != nil {
		t.Fatal(err)
	}
	SetChecksum(p, 0)
	if err := VerifyPage(p, 0); err != nil {
		t.Fatal(err)
	}
}

func TestVerifyPageCatchesDamage(t *testing.T) {
	p := newPage()
	for i := 0; i < 20; i++ {
		AddTuple(p, mkTuple(i, 50))
	}
	SetChecksum(p, 42)
	if err := VerifyPage(p, 42); err != nil {
		t.Fatal(err)
	}
	if err := VerifyPage(make([]byte, PageSize), 42); err != nil {
		t.Fatalf("zero page: %v", err)
	}
	// Every single flipped bit is caught by the checksum.
	for off := 0; off < PageSize; off += 61 {
		q := bytes.Clone(p)
		q[off] ^= 1 << (off % 8)
		if err := VerifyPage(q, 42); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("flip at %d: %v", off, err)
		}
	}
	// A lying line pointer with a correct checksum is caught by the sanity
	// checks, and Tuple refuses it too.
	lies := map[string]func(q []byte){
		"past end":      func(q []byte) { setLP(q, 3, PageSize-8, 100, LPNormal) },
		"into header":   func(q []byte) { setLP(q, 3, 16, 40, LPNormal) },
		"overlap":       func(q []byte) { o, l, _ := getLP(q, 4); setLP(q, 3, o, l, LPNormal) },
		"bad state":     func(q []byte) { o, l, _ := getLP(q, 3); setLP(q, 3, o, l, 2) },
		"lower > upper": func(q []byte) { put16(q, offLower, PageSize-8) },
		"upper > page":  func(q []byte) { put16(q, offUpper, PageSize+8) },
	}
	for name, lie := range lies {
		q := bytes.Clone(p)
		lie(q)
		SetChecksum(q, 42)
		if err := VerifyPage(q, 42); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: VerifyPage = %v", name, err)
		}
	}
	q := bytes.Clone(p)
	setLP(q, 3, PageSize-8, 100, LPNormal)
	if _, err := Tuple(q, 3); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Tuple with lying pointer: %v", err)
	}
}

func TestDecodeTupleRejects(t *testing.T) {
	good := mkTuple(1, 10)
	for _, b := range [][]byte{nil, good[:31], good[:len(good)-1], append(bytes.Clone(good), 0)} {
		if _, _, _, err := DecodeTuple(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("DecodeTuple(%d bytes) = %v", len(b), err)
		}
	}
}

func FuzzVerifyPageTuple(f *testing.F) {
	p := newPage()
	for i := 0; i < 5; i++ {
		AddTuple(p, mkTuple(i, 20))
	}
	SetChecksum(p, 0)
	f.Add(p, uint32(0))
	f.Add(make([]byte, PageSize), uint32(1))
	f.Add([]byte{1, 2, 3}, uint32(0))
	f.Fuzz(func(t *testing.T, page []byte, block uint32) {
		// Most fuzz inputs fail the checksum; stamping one lets the
		// fuzzer explore the structural checks too.
		for _, stamp := range []bool{false, true} {
			q := bytes.Clone(page)
			if stamp {
				SetChecksum(q, block)
			}
			err := VerifyPage(q, block)
			for s := 0; s < NumSlots(q)+1; s++ {
				tup, terr := Tuple(q, uint16(s))
				if terr == nil {
					DecodeTuple(tup)
					SetTupleXmax(tup, 1)
				} else if err == nil && !errors.Is(terr, ErrBadSlot) {
					t.Fatalf("verified page, but Tuple(%d): %v", s, terr)
				}
			}
			if err == nil && len(q) == PageSize && !IsNew(q) {
				FreeSpace(q)
				AddTuple(q, []byte("abc"))
				if perr := Prune(q, nil, nil); perr != nil {
					t.Fatalf("verified page, but Prune: %v", perr)
				}
			}
		}
	})
}

func FuzzDecodeTuple(f *testing.F) {
	f.Add(mkTuple(1, 10))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, key, val, err := DecodeTuple(b)
		if err != nil {
			return
		}
		again := AppendTuple(nil, h, key, val)
		if !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs:\n%x\n%x", b, again)
		}
	})
}

// TestPruneLaysOutInSlotOrder checks compaction against its contract over
// pages whose slots were reused, so that offsets are not in slot order:
// every kept tuple keeps its bytes and slot, the kept tuples end up packed
// against the end of the page in slot order (lower slots at higher
// offsets), and the page verifies.
func TestPruneLaysOutInSlotOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	p := newPage()
	want := map[uint16][]byte{}
	for round := 0; round < 300; round++ {
		for {
			tup := mkTuple(round*100+len(want), rng.IntN(300))
			s, err := AddTuple(p, tup)
			if err != nil {
				break
			}
			want[s] = tup
		}
		var dead, unused []uint16
		for s := range want {
			switch rng.IntN(4) {
			case 0:
				unused = append(unused, s)
				delete(want, s)
			case 1:
				if rng.IntN(8) == 0 {
					dead = append(dead, s)
					delete(want, s)
				}
			}
		}
		if err := Prune(p, dead, unused); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		total := 0
		for s, tup := range want {
			got, err := Tuple(p, s)
			if err != nil || !bytes.Equal(got, tup) {
				t.Fatalf("round %d: slot %d changed: %v", round, s, err)
			}
			total += alignUp(len(tup))
			for s2 := range want {
				o1, _, _ := getLP(p, int(s))
				o2, _, _ := getLP(p, int(s2))
				if (s < s2) != (o1 > o2) && s != s2 {
					t.Fatalf("round %d: slots %d and %d out of slot order (offsets %d, %d)", round, s, s2, o1, o2)
				}
			}
		}
		if _, upper, _ := header(p); upper != PageSize-total {
			t.Fatalf("round %d: upper %d, want %d (tuples not packed)", round, upper, PageSize-total)
		}
		SetChecksum(p, 0)
		if err := VerifyPage(p, 0); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
}

// reusedSlotsPage returns a full page of tuples with valLen-byte values
// whose even slots were freed and refilled, so that offsets are out of
// slot order, as on a page of updated keys after vacuum.
func reusedSlotsPage(b *testing.B, valLen int) []byte {
	p := newPage()
	fill := func(from int) {
		for i := from; ; i++ {
			if _, err := AddTuple(p, mkTuple(i, valLen)); err != nil {
				return
			}
		}
	}
	fill(0)
	var evens []uint16
	for s := 0; s < NumSlots(p); s += 2 {
		evens = append(evens, uint16(s))
	}
	if err := Prune(p, nil, evens); err != nil {
		b.Fatal(err)
	}
	fill(1000)
	return p
}

// BenchmarkPrune compacts a full page of 100-byte tuples whose slots were
// reused (offsets out of slot order), freeing a quarter of them, as vacuum
// does to a page of updated keys.
func BenchmarkPrune(b *testing.B) {
	base := reusedSlotsPage(b, 60)
	var quarter []uint16
	for s := 0; s < NumSlots(base); s += 4 {
		quarter = append(quarter, uint16(s))
	}
	p := make([]byte, PageSize)
	b.ReportAllocs()
	for b.Loop() {
		copy(p, base)
		if err := Prune(p, nil, quarter); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSetUnusedThenCompact checks that freeing slots without moving tuples
// and compacting later gives the same page, byte for byte, as Prune doing
// both at once, and that HoleBytes counts exactly the storage in between.
func TestSetUnusedThenCompact(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	p := newPage()
	live := map[uint16]int{}
	for round := 0; round < 200; round++ {
		for {
			tup := mkTuple(round*100+len(live), rng.IntN(200))
			s, err := AddTuple(p, tup)
			if err != nil {
				break
			}
			live[s] = len(tup)
		}
		var unused []uint16
		freed := 0
		for s, n := range live {
			if rng.IntN(3) == 0 {
				unused = append(unused, s)
				freed += alignUp(n)
				delete(live, s)
			}
		}
		want := bytes.Clone(p)
		if err := Prune(want, nil, unused); err != nil {
			t.Fatal(err)
		}
		if HoleBytes(p) != 0 || MayHaveHoles(p) {
			t.Fatalf("round %d: %d hole bytes (hint %v) before freeing", round, HoleBytes(p), MayHaveHoles(p))
		}
		free := FreeSpace(p)
		if err := SetUnused(p, unused); err != nil {
			t.Fatal(err)
		}
		if got := HoleBytes(p); got != freed {
			t.Fatalf("round %d: HoleBytes %d, want %d", round, got, freed)
		}
		if MayHaveHoles(p) != (freed > 0) {
			t.Fatalf("round %d: PDHasHoles %v with %d bytes freed in place", round, MayHaveHoles(p), freed)
		}
		if FreeSpace(p) < free || FreeSpace(p) >= free+freed && freed > 0 {
			t.Fatalf("round %d: free space %d -> %d with %d bytes freed in place", round, free, FreeSpace(p), freed)
		}
		SetChecksum(p, 0)
		if err := VerifyPage(p, 0); err != nil {
			t.Fatalf("round %d: page with holes: %v", round, err)
		}
		if err := Prune(p, nil, nil); err != nil {
			t.Fatal(err)
		}
		if MayHaveHoles(p) {
			t.Fatalf("round %d: PDHasHoles still set after compaction", round)
		}
		SetChecksum(p, 0)
		SetChecksum(want, 0)
		if !bytes.Equal(p, want) {
			t.Fatalf("round %d: SetUnused then Prune differs from Prune", round)
		}
	}
	if err := SetUnused(p, []uint16{uint16(NumSlots(p))}); !errors.Is(err, ErrBadSlot) {
		t.Errorf("SetUnused beyond the line pointers: %v", err)
	}
}

// BenchmarkSetUnused frees four slots of a full page of reused slots, as
// one of vacuum's pruning batches does to a page it names.
func BenchmarkSetUnused(b *testing.B) {
	base := reusedSlotsPage(b, 60)
	four := []uint16{3, 17, 31, 45}
	p := make([]byte, PageSize)
	b.ReportAllocs()
	for b.Loop() {
		copy(p, base)
		if err := SetUnused(p, four); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyPage checks a full page whose slots were reused (offsets
// out of slot order), as the buffer pool does on every page it reads: the
// line pointers must be proved not to overlap without the descending-order
// shortcut.
func BenchmarkVerifyPage(b *testing.B) {
	p := reusedSlotsPage(b, 20)
	SetChecksum(p, 7)
	b.ReportAllocs()
	for b.Loop() {
		if err := VerifyPage(p, 7); err != nil {
			b.Fatal(err)
		}
	}
}

// overlapsNaively is the pairwise definition checkLinePointers must agree
// with: two normal line pointers whose byte ranges intersect.
func overlapsNaively(p []byte) bool {
	n := NumSlots(p)
	for i := 0; i < n; i++ {
		oi, li, si := getLP(p, i)
		for j := i + 1; j < n; j++ {
			oj, lj, sj := getLP(p, j)
			if si == LPNormal && sj == LPNormal && oi < oj+lj && oj < oi+li {
				return true
			}
		}
	}
	return false
}

// TestCheckLinePointersFindsEveryOverlap builds pages of random line
// pointers, aligned and in bounds, with and without overlaps and in any
// slot order, and compares the check with the pairwise definition.
func TestCheckLinePointersFindsEveryOverlap(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 13))
	found := 0
	for round := 0; round < 20000; round++ {
		p := newPage()
		n := 1 + rng.IntN(40)
		lower := PageHeaderSize + n*ItemIDSize
		upper := alignUp(lower) + rng.IntN(64)*tupleAlign
		if upper >= PageSize {
			upper = PageSize - 256
		}
		put16(p, offLower, uint16(lower))
		put16(p, offUpper, uint16(upper))
		for s := 0; s < n; s++ {
			if rng.IntN(8) == 0 {
				continue // LPUnused
			}
			off := upper + rng.IntN((PageSize-upper)/tupleAlign)*tupleAlign
			length := 1 + rng.IntN(min(300, PageSize-off))
			setLP(p, s, off, length, LPNormal)
		}
		err := checkLinePointers(p, lower, upper)
		if want := overlapsNaively(p); want != (err != nil) {
			t.Fatalf("round %d: checkLinePointers = %v, pairwise overlap %v", round, err, want)
		}
		if err != nil {
			found++
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "overlap") {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
	if found < 1000 || found > 19000 {
		t.Fatalf("%d of 20000 pages overlapped; the test needs both kinds", found)
	}
}

// TestCRC32Uint32 checks the checksum's byte-at-a-time step against
// crc32.Update over the same four bytes.
func TestCRC32Uint32(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 10000 {
		c, v := r.Uint32(), r.Uint32()
		if i == 0 {
			c, v = 0, 0
		}
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], v)
		if got, want := crc32Uint32(c, v), crc32.Update(c, castagnoli, b[:]); got != want {
			t.Fatalf("crc32Uint32(%#x, %#x) = %#x, crc32.Update gives %#x", c, v, got, want)
		}
	}
}

// TestFitsAgreesWithFreeSpace: Fits(p, n) is FreeSpace(p) >= n, on pages
// with and without free line pointers, at every tuple size around the
// boundary.
func TestFitsAgreesWithFreeSpace(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 8))
	for round := 0; round < 3000; round++ {
		p := newPage()
		InitPage(p)
		var slots []uint16
		for {
			s, err := AddTuple(p, bytes.Repeat([]byte{'t'}, 1+rng.IntN(400)))
			if err != nil {
				break
			}
			slots = append(slots, s)
			if rng.IntN(60) == 0 {
				break
			}
		}
		var unused []uint16
		for _, s := range slots {
			if rng.IntN(4) == 0 {
				unused = append(unused, s)
			}
		}
		if len(unused) > 0 {
			if err := SetUnused(p, unused); err != nil {
				t.Fatal(err)
			}
		}
		free := FreeSpace(p)
		for n := free - 40; n <= free+40; n++ {
			if got, want := Fits(p, n), free >= n; got != want {
				t.Fatalf("round %d: Fits(p, %d) = %v, FreeSpace = %d (%d slots set unused)", round, n, got, free, len(unused))
			}
		}
	}
	// A new page, and one whose header is malformed.
	bad := newPage()
	put16(bad, offLower, PageSize)
	put16(bad, offUpper, PageHeaderSize)
	for _, p := range [][]byte{newPage(), bad} {
		free := FreeSpace(p)
		for n := -2; n <= 2; n++ {
			if got, want := Fits(p, n), free >= n; got != want {
				t.Fatalf("Fits(%d) = %v on a page with FreeSpace %d", n, got, free)
			}
		}
	}
}

func TestHoldsNothing(t *testing.T) {
	p := make([]byte, PageSize)
	if !HoldsNothing(p) {
		t.Fatal("a new page holds something")
	}
	InitPage(p)
	if !HoldsNothing(p) {
		t.Fatal("an empty page holds something")
	}
	s, err := AddTuple(p, make([]byte, 40))
	if err != nil {
		t.Fatal(err)
	}
	if HoldsNothing(p) {
		t.Fatal("a page with a tuple holds nothing")
	}
	if err := SetUnused(p, []uint16{s}); err != nil {
		t.Fatal(err)
	}
	if !HoldsNothing(p) {
		t.Fatal("a page whose only slot is unused holds something")
	}
}
