package tests

import (
	"os"
	"testing"

	fn "github.com/fusednorm/fusednorm"
)

// TestCPU runs the suite on the CPU backend at every kernel level this machine has: the
// pure-Go plan first, then each SIMD level, which must match it bit for bit.
func TestCPU(t *testing.T) {
	for _, level := range CPULevels() {
		t.Run(level, func(t *testing.T) {
			eng, err := fn.Open(fn.WithBackend(fn.BackendCPU), fn.WithCPULevel(level))
			if err != nil {
				t.Fatal(err)
			}
			defer eng.Close()
			Run(t, eng)
		})
	}
}

// TestDawn runs the suite on Dawn when it loads (lavapipe on GPU-less machines, the GPU
// elsewhere). It skips when Dawn is unavailable, unless FUSEDNORM_REQUIRE_DAWN=1 (set by
// make test and CI), where unavailability is a failure.
func TestDawn(t *testing.T) {
	eng, err := fn.Open(fn.WithBackend(fn.BackendDawn))
	if err != nil {
		if os.Getenv("FUSEDNORM_REQUIRE_DAWN") == "1" {
			t.Fatalf("Dawn is required here: %v", err)
		}
		t.Skipf("Dawn unavailable: %v", err)
	}
	defer eng.Close()
	Run(t, eng)
}
