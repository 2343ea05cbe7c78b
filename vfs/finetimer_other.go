//go:build !linux

package vfs

import "errors"

// newFineTimer reports that there is no sub-millisecond timer here, so the
// disk model sleeps coarsely and checks the clock for the last millisecond.
func newFineTimer() (fineTimer, error) {
	return nil, errors.New("vfs: no sub-millisecond timer on this platform")
}
