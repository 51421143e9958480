package tests

// CPULevels lists the CPU kernel levels to test: "go" always, then the SIMD levels the
// processor and build offer.
func CPULevels() []string {
	return []string{"go"}
}
