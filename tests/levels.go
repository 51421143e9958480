package tests

import (
	"slices"

	"github.com/fusednorm/fusednorm/internal/cpuhook"
)

// CPULevels lists the CPU kernel levels to test: "go" (the plan's reference) first, then
// each SIMD level the processor and build offer.
func CPULevels() []string {
	l := slices.Clone(cpuhook.Levels())
	slices.Reverse(l)
	return l
}
