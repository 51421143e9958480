package tests

import (
	"fmt"
	"testing"

	fn "github.com/fusednorm/fusednorm"
	"github.com/fusednorm/fusednorm/internal/testkit"
)

// Suite runs the conformance cases on one engine.
type Suite struct {
	// Engine is the backend under test.
	Engine *fn.Engine
	// Plan is a pure-Go CPU engine with the Engine's contraction profile: every output of the
	// Engine must equal its bits (spec §C.4). Nil skips that comparison (when Engine is it).
	Plan *fn.Engine
	// BindKeyOnly runs the cases through GetKernel and Kernel.Run alone, as a kernel-hub
	// loader would: the kernel by the file's op and version, attrs as test.json decodes
	// them; the typed API's cross-checks are left out.
	BindKeyOnly bool

	ulps *testkit.ULPStats
}

// Run runs the whole suite on eng: both ops' test.json cases, the ONNX Runtime golden data,
// the hard rows, the outlier rows and the sweeps (sweeps.go), and logs the largest ulp difference per output
// and dtype against the CPU plan.
func Run(t *testing.T, eng *fn.Engine) {
	s := &Suite{Engine: eng, ulps: &testkit.ULPStats{}}
	info := eng.Info()
	t.Logf("engine: %s", info)
	if !(info.Backend == "cpu" && PureGo(eng)) {
		p, err := fn.Open(fn.WithBackend(fn.BackendCPU), fn.WithContraction(info.Profile), fn.WithCPULevel("go"))
		if err != nil {
			t.Fatalf("plan engine: %v", err)
		}
		defer p.Close()
		s.Plan = p
	}
	t.Run("EmbedLayerNorm", s.embedCases)
	t.Run("AddLayerNorm", s.addCases)
	t.Run("ORT", s.ortCases)
	t.Run("HardRows", s.hardRows)
	t.Run("Outliers", s.outliers)
	t.Run("Sweeps", s.sweeps)
	if s.Plan != nil {
		t.Logf("largest ulp difference against the CPU plan (profile %s):\n%s", info.Profile, s.ulps)
	}
}

// PureGo reports whether a CPU engine runs the pure-Go kernels (its own plan reference).
func PureGo(eng *fn.Engine) bool { return eng.Info().Level == "go" }

// RunBindKey runs both ops' test.json cases on eng through the bind-key entry alone
// (Suite.BindKeyOnly), comparing as Run does.
func RunBindKey(t *testing.T, eng *fn.Engine) {
	s := &Suite{Engine: eng, BindKeyOnly: true, ulps: &testkit.ULPStats{}}
	t.Run("EmbedLayerNorm", s.embedCases)
	t.Run("AddLayerNorm", s.addCases)
}

// casesAndKernel loads an op's test.json and the engine's kernel for it: the kernel the
// file names, at the version it names.
func (s *Suite) casesAndKernel(t *testing.T, op, kernel string) (*fileJSON, *fn.Kernel) {
	t.Helper()
	f, err := loadCases(op)
	if err != nil {
		t.Fatal(err)
	}
	if f.Op != kernel {
		t.Fatalf("%s/test.json is for %s, not %s", op, f.Op, kernel)
	}
	k, err := s.Engine.GetKernel(f.Op, f.Version)
	if err != nil {
		t.Fatal(err)
	}
	return f, k
}

// crossCheck runs the same call on the plan engine and requires identical bits for every
// output, skipping rows in skip (non-finite rows, whose GPU results are indeterminate).
func (s *Suite) crossCheck(t *testing.T, op string, dt fn.DType, got map[string]fn.Tensor, rowLen int, skip map[int]bool,
	run func(e *fn.Engine) (map[string]fn.Tensor, error)) {
	t.Helper()
	if s.Plan == nil {
		return
	}
	want, err := run(s.Plan)
	if err != nil {
		t.Fatalf("CPU plan: %v", err)
	}
	for key, g := range want {
		o, ok := got[key]
		if !ok {
			t.Errorf("output %s: the CPU plan has it, the engine does not", key)
			continue
		}
		n := rowLen
		if key == "maskIndexT" || key == "meanT" || key == "rstdT" {
			n = 1
		}
		d := ulpDiff(o, g, n, skip)
		s.ulps.Add(fmt.Sprintf("%s/%s/%s", op, key, dt), d)
		if d != 0 {
			t.Errorf("output %s differs from the CPU plan by up to %d ulp (spec §C.4 requires identical bits)", key, d)
		}
	}
}
