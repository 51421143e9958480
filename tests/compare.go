package tests

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"testing"

	fn "github.com/fusednorm/fusednorm"
)

// ulpStats records the largest difference in units in the last place per output and dtype
// between a backend and the CPU plan; the suite logs it (SPEC §C.4 asks for it on every
// device, and the goal is 0).
type ulpStats struct {
	mu  sync.Mutex
	max map[string]int64
	n   map[string]int
}

func newULPStats() *ulpStats { return &ulpStats{max: map[string]int64{}, n: map[string]int{}} }

func (s *ulpStats) add(key string, d int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n[key]++
	if d > s.max[key] {
		s.max[key] = d
	}
}

func (s *ulpStats) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, 0, len(s.max)+len(s.n))
	for k := range s.n {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "  %-28s max ulp %d over %d runs\n", k, s.max[k], s.n[k])
	}
	return b.String()
}

// ordered maps a float's bits to an integer line where adjacent floats differ by one.
func ordered32(f float32) int64 {
	u := int64(math.Float32bits(f))
	if u&0x80000000 != 0 {
		return -(u & 0x7fffffff)
	}
	return u
}

func ordered16(h uint16) int64 {
	u := int64(h)
	if u&0x8000 != 0 {
		return -(u & 0x7fff)
	}
	return u
}

// ulpDiff is the largest ulp distance between two tensors of one dtype, skipping rows
// listed in skip (rows of rowLen elements); NaN against NaN counts as equal.
func ulpDiff(a, b fn.Tensor, rowLen int, skip map[int]bool) int64 {
	var worst int64
	n := a.Len()
	for i := 0; i < n; i++ {
		if skip[i/max(rowLen, 1)] {
			continue
		}
		var d int64
		switch a.DType() {
		case fn.Float32:
			x, y := a.Float32s()[i], b.Float32s()[i]
			if x != x && y != y {
				continue
			}
			d = ordered32(x) - ordered32(y)
		case fn.Float16, fn.BFloat16:
			x, y := a.Bits16()[i], b.Bits16()[i]
			if a.At(i) != a.At(i) && b.At(i) != b.At(i) {
				continue
			}
			d = ordered16(x) - ordered16(y)
		case fn.Int32:
			d = int64(a.Int32s()[i]) - int64(b.Int32s()[i])
		}
		if d < 0 {
			d = -d
		}
		worst = max(worst, d)
	}
	return worst
}

// ulpOf is the spacing of the dtype's values at |v|.
func ulpOf(dt fn.DType, v float64) float64 {
	v = math.Abs(v)
	switch dt {
	case fn.Float16:
		if v < 0x1p-14 {
			return 0x1p-24
		}
		return math.Pow(2, math.Floor(math.Log2(v))-10)
	case fn.BFloat16:
		if v < 0x1p-126 {
			return 0x1p-133
		}
		return math.Pow(2, math.Floor(math.Log2(v))-7)
	}
	if v < 0x1p-126 {
		return 0x1p-149
	}
	return math.Pow(2, math.Floor(math.Log2(v))-23)
}

// tol is SPEC §C.5's allowance for one normalized output element of dtype dt against a
// reference value ref. maxGamma is max|γ| of the row's gamma, h the row length.
func tol(dt fn.DType, ref, maxGamma float64, h int) float64 {
	rtol, atol := 1e-5, 1e-5*math.Max(1, maxGamma)
	if h > 4096 {
		rtol, atol = 2*rtol, 2*atol
	}
	f32 := atol + rtol*math.Abs(ref)
	switch dt {
	case fn.Float16:
		// one f16 ulp, plus one more near a rounding midpoint (SPEC §C.5), plus f32 slack
		return 2*ulpOf(fn.Float16, ref) + f32
	case fn.BFloat16:
		return 2*ulpOf(fn.BFloat16, ref) + 1e-2
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
