package engine

import (
	"syscall"
	"unsafe"
)

// adviseHugePages asks the kernel to back the whole 2 MiB pages inside
// [p, p+n) with transparent huge pages (madvise MADV_HUGEPAGE).
func adviseHugePages(p unsafe.Pointer, n uintptr) {
	const huge = 2 << 20
	start := (uintptr(p) + huge - 1) &^ (huge - 1)
	end := (uintptr(p) + n) &^ (huge - 1)
	if end <= start {
		return
	}
	b := unsafe.Slice((*byte)(unsafe.Add(p, start-uintptr(p))), end-start)
	_ = syscall.Madvise(b, syscall.MADV_HUGEPAGE)
}
