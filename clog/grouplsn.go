package clog

// Group LSNs: the asynchronous-commit interlock, as PostgreSQL's clog.c keeps
// CLOG_LSNS_PER_PAGE entries per buffer (CLOG_XACTS_PER_LSN_GROUP xids each).
//
// A transaction that commits with synchronous_commit off is marked committed
// here before its commit record is durable. Two things must not get ahead of
// that record: the CLOG page itself (the slot's page LSN, flushed before the
// write, covers it) and a hint bit a reader sets on a heap tuple, which
// reaches disk with its heap page, whose LSN says nothing about the commit.
// So for each group of 32 consecutive xids the slot remembers the highest
// LSN passed to SetStatus, and StatusLSN hands it to the reader, which sets
// the committed hint only once the WAL is flushed past it (SetHintBits and
// XLogNeedsFlush in PostgreSQL). One LSN per group rather than per xid keeps
// the memory small at the price of sometimes waiting for a neighbour's
// commit record.
//
// A page read from disk has every group LSN 0: it was written only after
// the WAL up to its page LSN was durable, so every commit on it is.

// XidsPerLSNGroup is how many consecutive xids share one group LSN, as
// PostgreSQL's CLOG_XACTS_PER_LSN_GROUP.
const XidsPerLSNGroup = 32

// lsnGroupsPerPage is the number of group LSNs a page has.
const lsnGroupsPerPage = (XidsPerPage + XidsPerLSNGroup - 1) / XidsPerLSNGroup

// groupIndex returns the index of xid's group within its page.
func groupIndex(xid uint64) int { return int(xid%XidsPerPage) / XidsPerLSNGroup }

// slotKey is the slot's position in c.groupLSNs: the bank that holds pageno,
// then the slot within it.
func (c *CLOG) slotKey(pageno uint64, i int) int {
	return int(pageno%uint64(len(c.banks)))*BankSize + i
}

// noteGroupLSNLocked raises the group LSN of xid's group in slot i to lsn.
// The caller holds the bank's mu exclusively. The array is allocated at the
// first LSN, so slots that only serve lookups of old pages cost nothing.
func (c *CLOG) noteGroupLSNLocked(pageno uint64, i int, xid, lsn uint64) {
	if lsn == 0 {
		return
	}
	k := c.slotKey(pageno, i)
	g := c.groupLSNs[k]
	if g == nil {
		g = make([]uint64, lsnGroupsPerPage)
		c.groupLSNs[k] = g
	}
	if gi := groupIndex(xid); lsn > g[gi] {
		g[gi] = lsn
	}
}

// resetGroupLSNsLocked forgets the group LSNs of slot i, which is being
// loaded with pageno from disk. The caller holds the bank's mu exclusively.
func (c *CLOG) resetGroupLSNsLocked(pageno uint64, i int) {
	if g := c.groupLSNs[c.slotKey(pageno, i)]; g != nil {
		clear(g)
	}
}

// groupLSNLocked returns the group LSN of xid in slot i (0 if none was
// noted). The caller holds the bank's mu, shared or exclusive.
func (c *CLOG) groupLSNLocked(pageno uint64, i int, xid uint64) uint64 {
	if g := c.groupLSNs[c.slotKey(pageno, i)]; g != nil {
		return g[groupIndex(xid)]
	}
	return 0
}

// StatusLSN returns the status of xid, as Status does, together with its
// group LSN: the highest commit or abort record LSN passed to SetStatus for
// any xid of its group of XidsPerLSNGroup while the page has been cached, or
// 0 if the status came from disk (it is durable). A caller that caches a
// committed status outside the CLOG (a hint bit on a tuple) must first make
// sure the WAL is durable up to that LSN. Errors as Status. Safe for
// concurrent use.
func (c *CLOG) StatusLSN(xid uint64) (Status, uint64, error) {
	if c.closed.Load() {
		return 0, 0, ErrClosed
	}
	if err := c.truncatedErr(xid); err != nil {
		return 0, 0, err
	}
	pageno := xidPage(xid)
	c.stats.lookups.Add(1)
	b := c.bankFor(pageno)

	c.rlock(b)
	if i, ok := b.index[pageno]; ok && b.slots[i].state == slotValid {
		sl := &b.slots[i]
		st, lsn := getStatus(sl.buf[:], xid), c.groupLSNLocked(pageno, i, xid)
		sl.lastUse.Store(b.clock.Add(1))
		b.mu.RUnlock()
		c.stats.hits.Add(1)
		return st, lsn, nil
	}
	b.mu.RUnlock()

	c.lock(b)
	defer b.mu.Unlock()
	i, hit, err := c.slotForLocked(b, pageno)
	if err != nil {
		return 0, 0, err
	}
	if hit {
		c.stats.hits.Add(1)
	} else {
		c.stats.misses.Add(1)
	}
	sl := &b.slots[i]
	sl.lastUse.Store(b.clock.Add(1))
	return getStatus(sl.buf[:], xid), c.groupLSNLocked(pageno, i, xid), nil
}
