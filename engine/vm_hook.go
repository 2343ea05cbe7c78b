// Replaced by the visibility map.

package engine

import "mvkv/internal/bufpool"

// setPageAllVisible marks buf's page all-visible (and all-frozen) in the
// visibility map, WAL-logged with cutoffXid. The caller holds buf's content
// lock exclusively and ckptInterlock shared. This version records nothing.
func (db *DB) setPageAllVisible(buf *bufpool.Buffer, allFrozen bool, cutoffXid uint64) error {
	return nil
}

// pageAllVisible reports the visibility map bits of heap block blk. This
// version knows no page to be all-visible.
func (db *DB) pageAllVisible(blk uint32) (allVisible, allFrozen bool) {
	return false, false
}
