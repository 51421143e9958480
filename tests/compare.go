package tests

import (
	"math"
	"testing"

	fn "github.com/fusednorm/fusednorm"
	"github.com/fusednorm/fusednorm/internal/testkit"
)

// ulpDiff is the largest ulp distance between two tensors of one dtype, skipping rows
// listed in skip (rows of rowLen elements); NaN against NaN counts as equal.
func ulpDiff(a, b fn.Tensor, rowLen int, skip map[int]bool) int64 {
	return testkit.Compare(bufOf(a), bufOf(b), rowLen, skip).MaxULP
}

// tol is spec §C.5's allowance for one normalized output element of dtype dt against a
// reference value ref. maxGamma is max|γ| of the row's gamma, h the row length.
func tol(dt fn.DType, ref, maxGamma float64, h int) float64 {
	rtol, atol := 1e-5, 1e-5*math.Max(1, maxGamma)
	if h > 4096 {
		rtol, atol = 2*rtol, 2*atol
	}
	f32 := atol + rtol*math.Abs(ref)
	switch dt {
	case fn.Float16:
		// one f16 ulp, plus one more near a rounding midpoint (spec §C.5), plus f32 slack
		return 2*testkit.ULPOf(fn.Float16, ref) + f32
	case fn.BFloat16:
		return 2*testkit.ULPOf(fn.BFloat16, ref) + 1e-2
	}
	return f32
}

// checkClose compares got with want element-wise under tol; it reports the first few
// mismatches.
func checkClose(t *testing.T, what string, got fn.Tensor, want []float64, allow func(i int, ref float64) float64, skipRow func(i int) bool) {
	t.Helper()
	if got.Len() != len(want) {
		t.Errorf("%s: %d elements, want %d", what, got.Len(), len(want))
		return
	}
	bad := 0
	for i, w := range want {
		if skipRow != nil && skipRow(i) {
			continue
		}
		g := got.At(i)
		if math.IsNaN(w) && math.IsNaN(g) {
			continue
		}
		if d := math.Abs(g - w); !(d <= allow(i, w)) {
			if bad < 5 {
				t.Errorf("%s[%d] = %.9g, want %.9g (|d| %.3g > %.3g)", what, i, g, w, d, allow(i, w))
			}
			bad++
		}
	}
	if bad > 5 {
		t.Errorf("%s: %d elements out of tolerance", what, bad)
	}
}

// checkExact compares element-wise for bit equality (as float32 / int32 values).
func checkExact(t *testing.T, what string, got fn.Tensor, want []float64) {
	t.Helper()
	if got.Len() != len(want) {
		t.Errorf("%s: %d elements, want %d", what, got.Len(), len(want))
		return
	}
	bad := 0
	for i, w := range want {
		g := got.At(i)
		same := g == w || (math.IsNaN(g) && math.IsNaN(w))
		if got.DType() == fn.Float32 {
			same = math.Float32bits(float32(g)) == math.Float32bits(float32(w)) || same && g != 0
		}
		if !same {
			if bad < 5 {
				t.Errorf("%s[%d] = %.9g, want exactly %.9g", what, i, g, w)
			}
			bad++
		}
	}
	if bad > 5 {
		t.Errorf("%s: %d elements differ", what, bad)
	}
}

func values(t fn.Tensor) []float64 {
	v := make([]float64, t.Len())
	for i := range v {
		v[i] = t.At(i)
	}
	return v
}

func maxAbs(t fn.Tensor) float64 {
	m := 0.0
	for i := 0; i < t.Len(); i++ {
		m = math.Max(m, math.Abs(t.At(i)))
	}
	return m
}
