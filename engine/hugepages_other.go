//go:build !linux

package engine

import "unsafe"

// adviseHugePages does nothing where madvise's MADV_HUGEPAGE does not exist.
func adviseHugePages(p unsafe.Pointer, n uintptr) {}
