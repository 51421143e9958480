package tests

import (
	"slices"

	"github.com/fusednorm/fusednorm/cpu"
)

// CPULevels lists the CPU kernel levels to test: "go" (the plan's reference) first, then
// each SIMD level the processor and build offer.
func CPULevels() []string {
	l := slices.Clone(cpu.Levels())
	slices.Reverse(l)
	return l
}
