// Package testkit is what the test code of every package shares (issue 14): the "Dawn
// required" rule, typed buffers of random values, and comparison in units in the last place.
// It imports neither the root package nor a backend, so the root package's own tests, dawn's
// and the conformance suite in tests/ can all use it.
package testkit

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/fusednorm/fusednorm/internal/half"
	"github.com/fusednorm/fusednorm/internal/ops"
)

// EnvRequireDawn names the variable that makes Dawn's absence a failure: with it set to 1
// (make test-dawn, CI) a test that cannot open Dawn fails instead of skipping, so a run
// cannot pass by skipping the GPU backend.
const EnvRequireDawn = "FUSEDNORM_REQUIRE_DAWN"

// DawnRequired reports whether Dawn must run here (EnvRequireDawn=1).
func DawnRequired() bool { return os.Getenv(EnvRequireDawn) == "1" }

// SkipWithoutDawn skips t, Dawn being unavailable (why), or fails it where Dawn is required.
func SkipWithoutDawn(t testing.TB, why any) {
	t.Helper()
	if DawnRequired() {
		t.Fatalf("Dawn is required here (%s=1): %v", EnvRequireDawn, why)
	}
	t.Skipf("Dawn unavailable: %v", why)
}

// NoteWithoutDawn is SkipWithoutDawn for a test that goes on without Dawn: it logs why, or
// fails t where Dawn is required.
func NoteWithoutDawn(t testing.TB, why any) {
	t.Helper()
	if DawnRequired() {
		t.Fatalf("Dawn is required here (%s=1): %v", EnvRequireDawn, why)
	}
	t.Logf("Dawn unavailable: %v", why)
}

// Normal returns n values offset + scale·N(0, 1).
func Normal(r *rand.Rand, n int, scale, offset float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(offset + scale*r.NormFloat64())
	}
	return v
}

// Float builds a buffer of dtype dt (F32, F16 or BF16) from v, rounding to nearest even.
func Float(dt ops.DType, v []float32) ops.Buf {
	switch dt {
	case ops.F32:
		return ops.Buf{DType: dt, F32: v}
	case ops.F16, ops.BF16:
		out := make([]uint16, len(v))
		for i, x := range v {
			if dt == ops.F16 {
				out[i] = half.F32ToF16(x)
			} else {
				out[i] = half.F32ToBF16(x)
			}
		}
		return ops.Buf{DType: dt, U16: out}
	}
	panic("testkit: Float of " + dt.String())
}

// Zeros is a buffer of n zero elements of dt.
func Zeros(dt ops.DType, n int) ops.Buf {
	switch dt {
	case ops.F32:
		return ops.Buf{DType: dt, F32: make([]float32, n)}
	case ops.I32:
		return ops.Buf{DType: dt, I32: make([]int32, n)}
	}
	return ops.Buf{DType: dt, U16: make([]uint16, n)}
}

// PoisonBits are the 16-bit pattern Poison writes (a NaN in binary16 and bfloat16 alike).
const PoisonBits = 0x7e7e

// Poison fills an output with a recognizable pattern so elements a kernel leaves unwritten
// show: NaN in F32, PoisonBits in F16 and BF16, -7 in I32.
func Poison(b ops.Buf) {
	for i := range b.F32 {
		b.F32[i] = float32(math.NaN())
	}
	for i := range b.U16 {
		b.U16[i] = PoisonBits
	}
	for i := range b.I32 {
		b.I32[i] = -7
	}
}

// Ordered32 maps a float32 to an integer line on which adjacent floats differ by one (±0
// meet at 0), so the distance of two floats in ulp is the difference of their images.
func Ordered32(f float32) int64 {
	u := int64(math.Float32bits(f))
	if u&0x80000000 != 0 {
		return -(u & 0x7fffffff)
	}
	return u
}

// Ordered16 is Ordered32 for the bits of a binary16 or bfloat16.
func Ordered16(h uint16) int64 {
	u := int64(h)
	if u&0x8000 != 0 {
		return -(u & 0x7fff)
	}
	return u
}

// Diff is how two buffers of one dtype differ.
type Diff struct {
	N      int   // elements compared (skipped rows left out)
	Count  int   // elements that differ
	MaxULP int64 // the largest distance in ulp (in value for I32)
	First  int   // the first element that differs; -1 when none
}

// Compare compares got with want element by element: bits, except that NaN against NaN
// counts as equal whatever the payloads. Rows of rowLen elements listed in skip are left out
// (rowLen < 1 counts as 1). Buffers of different lengths or dtypes panic: that is a bug in
// the test, not in the code under test.
func Compare(got, want ops.Buf, rowLen int, skip map[int]bool) Diff {
	if got.DType != want.DType || got.Len() != want.Len() {
		panic(fmt.Sprintf("testkit: Compare of %v[%d] with %v[%d]", got.DType, got.Len(), want.DType, want.Len()))
	}
	d := Diff{First: -1}
	rowLen = max(rowLen, 1)
	for i := range want.Len() {
		if skip[i/rowLen] {
			continue
		}
		d.N++
		var u int64
		switch want.DType {
		case ops.F32:
			g, w := got.F32[i], want.F32[i]
			if g != g && w != w {
				continue
			}
			u = Ordered32(g) - Ordered32(w)
		case ops.F16, ops.BF16:
			g, w := got.U16[i], want.U16[i]
			if isNaN16(want.DType, g) && isNaN16(want.DType, w) {
				continue
			}
			u = Ordered16(g) - Ordered16(w)
		case ops.I32:
			u = int64(got.I32[i]) - int64(want.I32[i])
		}
		if u == 0 {
			continue
		}
		if d.First < 0 {
			d.First = i
		}
		d.Count++
		d.MaxULP = max(d.MaxULP, u, -u)
	}
	return d
}

func isNaN16(dt ops.DType, h uint16) bool {
	if dt == ops.BF16 {
		return h&0x7f80 == 0x7f80 && h&0x7f != 0
	}
	return h&0x7c00 == 0x7c00 && h&0x3ff != 0
}

// Elem formats element i of b for a message: the value and its bits.
func Elem(b ops.Buf, i int) string {
	switch b.DType {
	case ops.F32:
		return fmt.Sprintf("%g (%#08x)", b.F32[i], math.Float32bits(b.F32[i]))
	case ops.F16:
		return fmt.Sprintf("%g (%#04x)", half.F16ToF32(b.U16[i]), b.U16[i])
	case ops.BF16:
		return fmt.Sprintf("%g (%#04x)", half.BF16ToF32(b.U16[i]), b.U16[i])
	case ops.I32:
		return fmt.Sprint(b.I32[i])
	}
	return "?"
}

// ULPOf is the spacing of dtype dt's values at |v| (float32 for any dtype but F16 and BF16).
func ULPOf(dt ops.DType, v float64) float64 {
	v = math.Abs(v)
	switch dt {
	case ops.F16:
		if v < 0x1p-14 {
			return 0x1p-24
		}
		return math.Pow(2, math.Floor(math.Log2(v))-10)
	case ops.BF16:
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

// ULPStats records the largest ulp difference per key (output and dtype, say) over many
// comparisons, for a test to log: spec §C.4 asks for it on every device, and the goal is 0.
// Safe for concurrent use; the zero value is ready.
type ULPStats struct {
	mu  sync.Mutex
	max map[string]int64
	n   map[string]int
}

// Add records one comparison's largest difference d under key.
func (s *ULPStats) Add(key string, d int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.max == nil {
		s.max, s.n = map[string]int64{}, map[string]int{}
	}
	s.n[key]++
	s.max[key] = max(s.max[key], d)
}

// String lists every key with its largest difference and count, one a line, sorted.
func (s *ULPStats) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, 0, len(s.n))
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
