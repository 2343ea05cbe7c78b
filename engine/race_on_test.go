//go:build race

package engine

// raceEnabled: the race detector slows MemFS crash copies about tenfold, so
// the crash ladder samples fewer points under it.
const raceEnabled = true
