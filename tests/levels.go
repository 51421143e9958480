package tests

import (
	"slices"

	fn "github.com/fusednorm/fusednorm"
)

// CPULevels lists the CPU kernel levels to test: "go" (the plan's reference) first, then
// each SIMD level the processor and build offer.
func CPULevels() []string {
	l := slices.Clone(fn.CPULevels())
	slices.Reverse(l)
	return l
}
