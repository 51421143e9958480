package tests

import (
	"flag"
	"slices"
	"strings"
	"testing"
)

// -tests.cpu-level restricts TestCPU to the listed levels, e.g. avx512,avx512fp16 under the
// emulator (scripts/avx512emu): each SIMD level is still compared with the pure-Go plan. A
// level missing here fails the test, so such a run can not pass without testing it.
var onlyCPULevels = flag.String("tests.cpu-level", "", "comma-separated CPU levels for TestCPU (default: every one here); fails without them")

// testCPULevels is CPULevels, less the levels -tests.cpu-level leaves out.
func testCPULevels(t *testing.T) []string {
	all := CPULevels()
	if *onlyCPULevels == "" {
		return all
	}
	var l []string
	for _, want := range strings.Split(*onlyCPULevels, ",") {
		if !slices.Contains(all, want) {
			t.Fatalf("-tests.cpu-level=%s: level %q is not available here (levels: %v)", *onlyCPULevels, want, all)
		}
		l = append(l, want)
	}
	return l
}
