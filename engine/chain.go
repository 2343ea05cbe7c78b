package engine

import (
	"errors"
	"fmt"
	"slices"

	"mvkv/internal/heap"
	"mvkv/visibility"
)

// Version chains: how a key's versions are linked, and the one walk that
// every reader and writer uses.
//
// Each version names its predecessor with Prev. A writer links a new
// version only to the newest version whose inserter committed (or to that
// version's own predecessor when the writer replaces a version it made
// itself), never to an aborted one: the reachable chain is the index head,
// which may be aborted or still in progress, then committed versions only.
// Two kinds of link result:
//
//   - an update link: the predecessor's xmax is the new version's xmin
//     and its Updated flag is set (the writer set both in the same record);
//   - a link past a delete: the predecessor was deleted (xmax set, no
//     Updated flag) and the key written again later.
//
// Pruning frees a version in place on its own page without touching the
// version that links to it (pruneheap.go), so a Prev may lead to a free
// slot or, once the slot is reused, to any tuple. A walk therefore checks
// each link before trusting it:
//
//   - a slot that holds no version of the key ends the chain: the
//     predecessor is gone, and it went only because no snapshot could see
//     it. A walk reaches that link only from a version it could not see;
//     for an update link that cannot happen (the updater committed below
//     the horizon is visible to everyone), and for a link past a delete the
//     delete committed below the horizon, so "not found" is the answer.
//   - an update link whose target still has the linking version's xmin as
//     its Updated xmax is the true predecessor: a tuple placed later in a
//     reused slot cannot carry an xmax from a transaction that had ended
//     before it was placed.
//   - any other version of the key (a link past a delete, or a
//     predecessor whose aborted xmax vacuum cleared) is followed but
//     remembered: a reused slot can only hold a newer version of the key,
//     whose own chain leads back to the linking version. A walk that comes
//     back to a version it left by such a link has met nothing its
//     snapshot sees (every version newer than one it cannot see is
//     invisible to it too), so it ends with "not found".
//
// The index head is different: it is read without the row lock, and a
// version is freed while it is the head only by vacuum holding the row
// lock, which moves the head first. A head that vanished under a walk
// therefore means the head moved: the walk starts again from the new one.
// PostgreSQL's HOT chains keep redirect line pointers instead, because its
// indexes point at the chain's root; mvkv's index points at the newest
// version, so a stub to keep the old end of a chain reachable is not needed.

// strictLink reports whether pred is the version that an update by
// next's inserter replaced: the link cannot lead into a reused slot.
func strictLink(next, pred *heap.TupleHeader) bool {
	return pred.Infomask&heap.Updated != 0 && pred.Xmax == next.Xmin
}

// maxChainRestarts bounds how often one walk starts again after
// errVanished; each restart needs a concurrent vacuum to have removed a
// version of this very key, so reaching the bound means a broken chain.
const maxChainRestarts = 1000

// walkChain calls visit for the versions of e's key from the newest down,
// until visit reports done, the chain ends, or an error. It restarts from
// the current head when the head it read vanished (see above). wantVal
// copies each version's value. Every reader and writer of a chain walks it
// here.
func (db *DB) walkChain(e *indexEntry, wantVal bool, visit func(v *version) (done bool, err error)) error {
	for restarts := 0; ; restarts++ {
		head := e.headTID()
		err := db.walkChainOnce(e, wantVal, visit)
		if !errors.Is(err, errVanished) {
			return err
		}
		if e.headTID() == head && db.zeroedOutPage(head.Block) {
			// zero_damaged_pages emptied the head's page: its versions
			// are gone for good, and the key has none to see. (A head
			// that moved meanwhile is walked again, as usual.)
			return nil
		}
		if restarts == maxChainRestarts {
			head := e.headTID()
			return fmt.Errorf("%w: version chain of key %q leads to a slot that holds no version of it: slot %d of the page in %s, where the index places its newest version (a page lost or cut from its file, or a damaged index)",
				ErrCorruption, truncKey([]byte(e.key())), head.Slot, db.heapBlockName(head.Block))
		}
	}
}

func (db *DB) walkChainOnce(e *indexEntry, wantVal bool, visit func(v *version) (bool, error)) error {
	head := e.headTID()
	var looseBuf [4]heap.TID
	loose := looseBuf[:0] // versions left by a link that is not an update link
	var prev version
	for n, tid := 0, head; tid.Valid(); n++ {
		if n > maxChainLength {
			return fmt.Errorf("%w: version chain from %s does not end", ErrCorruption, head)
		}
		if len(loose) > 0 && slices.Contains(loose, tid) {
			return nil
		}
		v, err := db.readVersion(tid, e.key(), wantVal)
		if errors.Is(err, errVanished) && n > 0 {
			return nil // the predecessor was pruned
		}
		if err != nil {
			return err
		}
		if n > 0 && !strictLink(&prev.hdr, &v.hdr) {
			loose = append(loose, prev.tid)
		}
		done, err := visit(&v)
		if done || err != nil {
			return err
		}
		prev = v
		if v.hdr.Prev == tid {
			// A version naming its own slot: its predecessor was freed
			// before it was placed there (older builds could write
			// that), so nothing lies below it.
			break
		}
		tid = v.hdr.Prev
	}
	return nil
}

// visibleVersion returns the newest version of e's key whose xmin the
// snapshot sees, unless the snapshot sees its xmax too (found is false: the
// key is deleted for it). wantVal copies the version's inline value or
// external pointer.
func (db *DB) visibleVersion(e *indexEntry, snap *visibility.Snapshot, me uint64, wantVal bool) (cur version, found bool, err error) {
	err = db.walkChain(e, wantVal, func(v *version) (bool, error) {
		ok, err := snap.XidVisible(v.hdr.Xmin, me, func(uint64) (bool, error) { return db.xminCommitted(v) })
		if err != nil {
			return true, err
		}
		if !ok {
			db.setHintBits(v)
			return false, nil
		}
		gone, err := snap.XidVisible(v.hdr.Xmax, me, func(uint64) (bool, error) { return db.xmaxCommitted(v) })
		db.setHintBits(v)
		if err == nil && !gone {
			cur, found = *v, true
		}
		return true, err
	})
	return cur, found, err
}

// fetchVisible returns the value of the version visibleVersion finds.
func (db *DB) fetchVisible(e *indexEntry, snap *visibility.Snapshot, me uint64) (val []byte, found bool, err error) {
	val, _, found, err = db.fetchVisiblePrefix(e, snap, me, -1)
	return val, found, err
}

// fetchVisiblePrefix is fetchVisible that returns at most n bytes of the
// value (n < 0: all of it) and the value's whole length.
func (db *DB) fetchVisiblePrefix(e *indexEntry, snap *visibility.Snapshot, me uint64, n int) (val []byte, length int, found bool, err error) {
	v, found, err := db.visibleVersion(e, snap, me, true)
	if !found || err != nil {
		return nil, 0, false, err
	}
	val, length, err = db.valuePrefix(v, e.key(), n)
	return val, length, err == nil, err
}

// latest finds, for a writer holding the key's row lock, the newest version
// whose inserter committed (or is the writer itself). Every other writer of
// the key has ended, so each xmin in the chain is final. deleted reports
// whether that version's xmax committed (or is the writer's).
func (db *DB) latest(e *indexEntry, me uint64, wantVal bool) (cur version, found, deleted bool, err error) {
	err = db.walkChain(e, wantVal, func(v *version) (bool, error) {
		ok := me != 0 && v.hdr.Xmin == me
		if !ok {
			var err error
			if ok, err = db.xminCommitted(v); err != nil {
				return true, err
			}
		}
		if !ok {
			db.setHintBits(v)
			return false, nil
		}
		if x := v.hdr.Xmax; x != 0 {
			if x == me {
				deleted = true
			} else {
				var err error
				if deleted, err = db.xmaxCommitted(v); err != nil {
					return true, err
				}
			}
		}
		db.setHintBits(v)
		cur, found = *v, true
		return true, nil
	})
	if err != nil {
		return version{}, false, false, err
	}
	return cur, found, deleted, nil
}
