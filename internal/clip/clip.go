// Package clip shortens bytes that come from users or files before they are
// quoted in an error message or a log line, so that a 512 MiB argument or a
// damaged 1 KiB key does not end up whole in a reply or a log.
//
// It is one function because the engine and the server both quote what
// they were given: the engine a key in a deadlock or corruption report, the
// server a client's argument in a Redis error reply.
package clip

// Prefix returns s cut to its first n bytes, or s itself if it is no longer
// than n. It does not copy: the result shares s's memory. A cut may fall
// inside a UTF-8 sequence; callers quote the result with %q, which shows
// such bytes escaped. n must not be negative.
func Prefix[T ~string | ~[]byte](s T, n int) T {
	if len(s) > n {
		return s[:n]
	}
	return s
}
