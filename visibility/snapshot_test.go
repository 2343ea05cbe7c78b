package visibility

import (
	"errors"
	"testing"
)

func TestSnapshotInProgress(t *testing.T) {
	s := NewSnapshot(20, []uint64{17, 12, 15})
	if s.Xmin != 12 || s.Xmax != 20 {
		t.Fatalf("got %s", s)
	}
	if got := s.String(); got != "12:20:12,15,17" {
		t.Fatalf("String = %q", got)
	}
	cases := map[uint64]bool{3: false, 11: false, 12: true, 13: false, 15: true, 17: true, 19: false, 20: true, 99: true}
	for xid, want := range cases {
		if got := s.XidInProgress(xid); got != want {
			t.Errorf("XidInProgress(%d) = %v, want %v", xid, got, want)
		}
	}
}

func TestXidVisible(t *testing.T) {
	s := NewSnapshot(20, []uint64{15})
	committed := map[uint64]bool{10: true, 16: true}
	did := func(x uint64) (bool, error) { return committed[x], nil }
	cases := []struct {
		xid, cur uint64
		want     bool
	}{
		{10, 0, true},  // committed before the snapshot
		{11, 0, false}, // aborted or crashed
		{15, 0, false}, // running at snapshot time, even if it commits later
		{15, 15, true}, // own writes
		{16, 0, true},  // committed, not in xip
		{25, 0, false}, // not yet assigned
		{FrozenXid, 0, true},
		{InvalidXid, 0, false},
	}
	for _, c := range cases {
		got, err := s.XidVisible(c.xid, c.cur, did)
		if err != nil || got != c.want {
			t.Errorf("XidVisible(%d, cur=%d) = %v, %v; want %v", c.xid, c.cur, got, err, c.want)
		}
	}
	boom := errors.New("boom")
	if _, err := s.XidVisible(10, 0, func(uint64) (bool, error) { return false, boom }); !errors.Is(err, boom) {
		t.Fatalf("error not passed through: %v", err)
	}
}
