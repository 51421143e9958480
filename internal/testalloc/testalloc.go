// Package testalloc is the allocation check that the fusednorm and cpu tests share: a call
// in steady state allocates nothing.
package testalloc

import "testing"

// None warms fn up (pools filled, workers started), then requires that a call allocates
// nothing.
func None(t *testing.T, what string, fn func()) {
	t.Helper()
	for range 5 {
		fn()
	}
	if n := testing.AllocsPerRun(50, fn); n != 0 {
		t.Errorf("%s: %v allocations per call, want 0", what, n)
	}
}

// SkipUnderRace skips the test when the race detector is on: sync.Pool drops items at
// random under it, so allocation counts mean nothing.
func SkipUnderRace(t *testing.T) {
	t.Helper()
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
}
