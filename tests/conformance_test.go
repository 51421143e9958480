package tests

import (
	"fmt"
	"strconv"
	"testing"

	fn "github.com/fusednorm/fusednorm"
	"github.com/fusednorm/fusednorm/internal/plan"
	"github.com/fusednorm/fusednorm/internal/testkit"
)

// TestCPU runs the suite on the CPU backend at every kernel level this machine has — the
// pure-Go plan first, then each SIMD level, which must match it bit for bit — under the
// unfused profile (no GPU, lavapipe) and the fully fused one (the H200's). -tests.cpu-level
// picks levels (levels_test.go).
func TestCPU(t *testing.T) {
	for _, prof := range []plan.Contraction{{}, {FuseVariance: true, FuseAffine: true}} {
		for _, level := range testCPULevels(t) {
			t.Run(prof.String()+"/"+level, func(t *testing.T) {
				eng, err := fn.Open(fn.WithBackend(fn.BackendCPU), fn.WithCPULevel(level), fn.WithContraction(prof))
				if err != nil {
					t.Fatal(err)
				}
				defer eng.Close()
				Run(t, eng)
			})
		}
	}
}

// TestDawn runs the suite on Dawn when it loads (lavapipe on GPU-less machines, the GPU
// elsewhere): on each hardware adapter Adapters lists when there are several (one engine per
// GPU, a subtest per adapter named by its index and name), else on the default adapter. It
// skips when Dawn is unavailable, unless FUSEDNORM_REQUIRE_DAWN=1 (set by make test and CI),
// where unavailability is a failure.
func TestDawn(t *testing.T) {
	list, err := fn.Adapters()
	if err != nil {
		t.Logf("no adapter list (%v): the default adapter", err) // Open below says whether Dawn loads
	}
	var hw []fn.AdapterInfo
	for _, a := range list {
		if !a.Software {
			hw = append(hw, a)
		}
	}
	if len(hw) < 2 {
		eng, err := fn.Open(fn.WithBackend(fn.BackendDawn))
		if err != nil {
			testkit.SkipWithoutDawn(t, err)
		}
		defer eng.Close()
		Run(t, eng)
		return
	}
	for _, a := range hw {
		t.Run(fmt.Sprintf("%d-%s", a.Index, a.Name), func(t *testing.T) {
			eng, err := fn.Open(fn.WithBackend(fn.BackendDawn), fn.WithAdapter(strconv.Itoa(a.Index)))
			if err != nil {
				t.Fatalf("adapter %d (%s): %v", a.Index, a.Name, err)
			}
			defer eng.Close()
			Run(t, eng)
		})
	}
}
