//go:build !linux

package engine

// physicalMemory returns 0 (cannot be told) outside Linux, where Open then
// skips its check of shared_buffers against the machine's memory.
func physicalMemory() int64 { return 0 }
