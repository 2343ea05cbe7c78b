package clog

import "time"

// groupMember is one SetStatus call waiting in the group-update list, as the
// clogGroup* fields of PostgreSQL's PGPROC. Everything but applied, err and
// next is fixed before the member is pushed; next is fixed once the push
// succeeds; applied and err are written by the leader before it closes done
// and read by the member only after done is closed.
type groupMember struct {
	xid, pageno, lsn uint64
	status           Status
	next             *groupMember
	applied          bool
	err              error
	done             chan struct{}
}

// groupUpdate is SetStatus after b's lock was found taken, as PostgreSQL
// 11's TransactionGroupUpdateXidStatus. The call pushes itself onto c.group
// with CompareAndSwap. The call that finds the list empty is the leader: it
// waits for the lock once, swaps the whole list out in one atomic step, sets
// the status of every member whose page is resident in a bank under the
// same lock (its own page it loads if need be), releases the lock and only
// then wakes the members, so none of them contends for the lock it just
// left. Members sleep on their done channel. It reports whether the status
// was set (with the error of doing so); when it was not (the member's page
// was in a bank under another lock, or not resident), the caller must take
// the plain path. Members never do I/O on the leader's behalf, and the
// leader never takes a second lock: no lock order to get wrong.
func (c *CLOG) groupUpdate(b *bank, pageno, xid uint64, s Status, lsn uint64) (bool, error) {
	start := time.Now()
	m := &groupMember{xid: xid, pageno: pageno, lsn: lsn, status: s, done: make(chan struct{})}
	for {
		head := c.group.Load()
		m.next = head
		if c.group.CompareAndSwap(head, m) {
			break
		}
	}
	if m.next != nil {
		<-m.done
		c.noteWait(start)
		return m.applied, m.err
	}

	c.lock(b)
	list := c.group.Swap(nil)
	var n uint64
	for p := list; p != nil; p = p.next {
		n++
		if p == m {
			m.err = c.setStatusLocked(b, pageno, xid, s, lsn)
			m.applied = true
			continue
		}
		pb := c.bankFor(p.pageno)
		if pb.mu != b.mu {
			continue
		}
		i, ok := pb.index[p.pageno]
		if !ok || pb.slots[i].state != slotValid {
			continue // loading is I/O; the member does it itself
		}
		c.stats.lookups.Add(1)
		c.stats.hits.Add(1)
		c.setSlotLocked(pb, i, p.xid, p.status, p.lsn)
		p.applied = true
	}
	b.mu.Unlock()
	c.stats.groupUpdates.Add(1)
	c.stats.groupMembers.Add(n)
	for p := list; p != nil; {
		next := p.next
		if p != m {
			close(p.done)
		}
		p = next
	}
	return true, m.err
}
