//go:build race

package server

// raceOn: the race detector makes copying large values several times
// slower, so the large-value tests use smaller ones under it.
const raceOn = true
