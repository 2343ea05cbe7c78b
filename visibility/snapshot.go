package visibility

import (
	"slices"
	"strconv"
	"strings"
)

// InvalidXid is the xid 0, never assigned to a transaction.
const InvalidXid uint64 = 0

// FrozenXid marks a tuple whose inserting transaction committed so long ago
// that every snapshot sees it, as PostgreSQL's FrozenTransactionId.
const FrozenXid uint64 = 2

// FirstNormalXid is the first xid handed to a transaction, as PostgreSQL's
// FirstNormalTransactionId.
const FirstNormalXid uint64 = 3

// Snapshot is an MVCC snapshot, as PostgreSQL's SnapshotData for an MVCC
// snapshot. A Snapshot is immutable once taken and safe to share between
// goroutines.
type Snapshot struct {
	// Xmin is the oldest xid that was running when the snapshot was taken;
	// all xids below it had finished.
	Xmin uint64
	// Xmax is the first xid not yet assigned when the snapshot was taken.
	Xmax uint64
	// Xip holds the xids in [Xmin, Xmax) that were running, sorted
	// ascending.
	Xip []uint64
}

// NewSnapshot builds a snapshot from the next unassigned xid and the running
// xids (in any order; the slice is sorted in place and kept).
func NewSnapshot(nextXid uint64, running []uint64) *Snapshot {
	slices.Sort(running)
	xmin := nextXid
	if len(running) > 0 && running[0] < xmin {
		xmin = running[0]
	}
	return &Snapshot{Xmin: xmin, Xmax: nextXid, Xip: running}
}

// XidInProgress reports whether xid counts as still running for this
// snapshot: assigned at or after Xmax, or listed in Xip. Like PostgreSQL's
// XidInMVCCSnapshot.
func (s *Snapshot) XidInProgress(xid uint64) bool {
	if xid >= s.Xmax {
		return true
	}
	if xid < s.Xmin {
		return false
	}
	_, found := slices.BinarySearch(s.Xip, xid)
	return found
}

// String renders the snapshot as PostgreSQL's pg_current_snapshot does:
// "xmin:xmax:xip1,xip2".
func (s *Snapshot) String() string {
	var b strings.Builder
	b.WriteString(strconv.FormatUint(s.Xmin, 10))
	b.WriteByte(':')
	b.WriteString(strconv.FormatUint(s.Xmax, 10))
	b.WriteByte(':')
	for i, x := range s.Xip {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatUint(x, 10))
	}
	return b.String()
}

// DidCommitFunc answers whether a finished transaction committed, normally
// from the CLOG. It is called only for xids the snapshot considers finished.
type DidCommitFunc func(xid uint64) (bool, error)

// XidVisible reports whether the effects of xid are visible to a reader
// running as transaction cur (0 if it has no xid) with snapshot s: its own
// writes are visible; otherwise xid must be finished for the snapshot and
// committed. FrozenXid is visible to everyone; InvalidXid to no one. The
// only error is didCommit's, returned as it is.
func (s *Snapshot) XidVisible(xid, cur uint64, didCommit DidCommitFunc) (bool, error) {
	switch {
	case xid == InvalidXid:
		return false, nil
	case xid == FrozenXid:
		return true, nil
	case cur != InvalidXid && xid == cur:
		return true, nil
	case s.XidInProgress(xid):
		return false, nil
	}
	return didCommit(xid)
}
