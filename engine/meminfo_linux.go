package engine

import "golang.org/x/sys/unix"

// physicalMemory returns the machine's physical memory in bytes, or 0 when
// it cannot be told.
func physicalMemory() int64 {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return 0
	}
	total := uint64(si.Totalram) * uint64(si.Unit)
	if total > 1<<62 {
		return 1 << 62
	}
	return int64(total)
}
