//go:build !linux

package hugepage

// Advise does nothing where madvise's MADV_HUGEPAGE does not exist.
func Advise[T any](s []T) {}
