// Package hugepage asks the kernel to back large allocations that are
// about to be filled with transparent huge pages.
//
// Why. Opening ten million keys fills a 256 MiB hash table in random order
// and carves 240 MiB of entries out of fresh memory; redo after a crash
// first touches every frame of the buffer pool. With 4 KiB pages each
// first touch is a page fault, and each random access into the table a
// TLB miss; measured under a virtual machine, the faults alone cost about
// as much as decoding the keys. On Linux with transparent huge pages in
// "madvise" mode (a common default), memory is backed by 2 MiB pages only
// where madvise(MADV_HUGEPAGE) asked for them, and the Go runtime does not
// ask. Advise does, for the whole 2 MiB pages inside a slice.
//
// The cost: advised memory becomes resident 2 MiB at a time, so a buffer
// pool of which a small database uses a few frames holds a few MiB instead
// of a few pages.
//
// Rejected: turning huge pages on for the whole heap (the runtime's and
// the kernel's business, and costly for small, short-lived objects), and
// memory from mmap outside the Go heap (pointers there are invisible to
// the garbage collector).
package hugepage
