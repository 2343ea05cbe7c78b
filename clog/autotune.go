package clog

// AutotuneBuffers returns the default number of CLOG buffer slots for a heap
// buffer pool of sharedBufferPages 8 KiB pages, as PostgreSQL 17's
// transaction_buffers = 0 (SimpleLruAutotuneBuffers(512, 1024)): one slot
// per 512 shared buffers, rounded down to a multiple of BankSize and clamped
// to 16..1024. 128 MiB of shared_buffers (16384 pages) gives 32 slots; the
// 1024 cap (8 MiB of CLOG, 33 million xids) is reached at 4 GiB.
func AutotuneBuffers(sharedBufferPages int) int {
	n := sharedBufferPages / 512
	n -= n % BankSize
	return min(1024, max(BankSize, n))
}
