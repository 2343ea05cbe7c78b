package hugepage

import (
	"syscall"
	"unsafe"
)

// Advise asks the kernel to back the whole 2 MiB pages inside s's memory
// with transparent huge pages (madvise MADV_HUGEPAGE). It is a hint: the
// kernel may decline, and errors are ignored. Call it before the memory is
// first written; pages already faulted in stay small until the kernel's
// background collapse, if any.
func Advise[T any](s []T) {
	const huge = 2 << 20
	var zero T
	p := unsafe.Pointer(unsafe.SliceData(s))
	n := uintptr(len(s)) * unsafe.Sizeof(zero)
	start := (uintptr(p) + huge - 1) &^ (huge - 1)
	end := (uintptr(p) + n) &^ (huge - 1)
	if n < huge || end <= start {
		return
	}
	b := unsafe.Slice((*byte)(unsafe.Add(p, start-uintptr(p))), end-start)
	_ = syscall.Madvise(b, syscall.MADV_HUGEPAGE)
}
