package cpu

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/fusednorm/fusednorm/internal/half"
	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/plan"
)

// -cpu.off takes SIMD levels out of the tests (newBackend's default level is the widest left),
// e.g. -cpu.off=avx512 to test the AVX2 kernels as the default on an AVX-512 machine. Each level
// builds on the one below it (avx512fp16 is avx512 with a few kernels replaced, and both
// finish their tails with the avx2 kernels), so switching a level off switches off those
// above it too; -cpu.off=avx2 leaves the pure-Go path as what every other test in the
// package exercises.
var offLevels = flag.String("cpu.off", "", "comma-separated SIMD levels not to use or test (avx512fp16, avx512, avx2)")

// For a run under an emulator (scripts/avx512emu): -cpu.want fails the run unless the
// listed levels are present, so the emulated run cannot pass without testing them; and
// -cpu.simd tests only the listed SIMD levels (each against the pure-Go level).
var (
	wantLevels = flag.String("cpu.want", "", "comma-separated SIMD levels the run must have (fails without them)")
	onlySIMD   = flag.String("cpu.simd", "", "comma-separated SIMD levels to test (default: every one not switched off)")
)

func TestMain(m *testing.M) {
	flag.Parse()
	for _, want := range strings.Split(*wantLevels, ",") {
		if want != "" && !slices.Contains(testLevels(), want) {
			fmt.Fprintf(os.Stderr, "-cpu.want=%s: level %q is not available here (levels tested: %v)\n", *wantLevels, want, testLevels())
			os.Exit(1)
		}
	}
	fmt.Printf("cpu tests: SIMD levels %v against go\n", simdLevels())
	os.Exit(m.Run())
}

// switchedOff reports whether -cpu.off takes the level out.
func switchedOff(level string) bool {
	off := strings.Split(*offLevels, ",")
	if slices.Contains(off, "avx2") {
		off = append(off, "avx512")
	}
	if slices.Contains(off, "avx512") {
		off = append(off, "avx512fp16")
	}
	return slices.Contains(off, level)
}

// testLevels are the kernel levels to test, widest first: what the machine has, less those
// switched off.
func testLevels() []string {
	return slices.DeleteFunc(levelNames(), switchedOff)
}

// simdLevels are testLevels without "go" (the reference every level is compared with),
// only those -cpu.simd lists when it is set.
func simdLevels() []string {
	return slices.DeleteFunc(testLevels(), func(l string) bool {
		return l == "go" || *onlySIMD != "" && !slices.Contains(strings.Split(*onlySIMD, ","), l)
	})
}

func mustKernels(t testing.TB, name string) *kernels {
	k := kernelsOf(name)
	if k == nil {
		t.Fatalf("no level %q", name)
	}
	return k
}

var (
	// Sizes around both vector widths (8 and 16 lanes), their unrolled loops and the blocks
	// the reductions keep in registers (32 and 128 partials), and odd large ones.
	kernelSizes = []int{0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 255, 256, 257, 1000, 4099}
	planWidths  = []int{1, 2, 4, 8, 16, 32, 128, 256, 1024}
)

const guards = 9 // guard elements after every output slice

var (
	guard32 = math.Float32frombits(0x7fa5a5a5) // a signalling NaN no kernel produces
	guard16 = uint16(0xa5a5)
)

// out32 returns a slice of n elements whose backing array has guard values after it.
func out32(n int, fill func(i int) float32) []float32 {
	s := make([]float32, n+guards)
	for i := range s {
		if i < n && fill != nil {
			s[i] = fill(i)
		} else if i >= n {
			s[i] = guard32
		}
	}
	return s[:n]
}

func out16(n int) []uint16 {
	s := make([]uint16, n+guards)
	for i := n; i < len(s); i++ {
		s[i] = guard16
	}
	return s[:n]
}

func checkGuards32(t *testing.T, what string, s []float32) {
	t.Helper()
	for i, v := range s[len(s):cap(s)] {
		if math.Float32bits(v) != math.Float32bits(guard32) {
			t.Fatalf("%s: wrote past the end at +%d", what, i)
		}
	}
}

func checkGuards16(t *testing.T, what string, s []uint16) {
	t.Helper()
	for i, v := range s[len(s):cap(s)] {
		if v != guard16 {
			t.Fatalf("%s: wrote past the end at +%d", what, i)
		}
	}
}

// same32 requires identical bits, except that any NaN matches any NaN: which operand's
// payload an arithmetic NaN carries is up to the compiler's operand order (it differs under
// -race), and neither IEEE 754 nor Go fixes it.
func same32(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if got[i] != got[i] && want[i] != want[i] {
			continue
		}
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: [%d] = %g (%#08x), Go twin %g (%#08x)", what, i,
				got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
	checkGuards32(t, what, got)
}

// same16 is same32 for binary16 patterns (NaN: all-ones exponent, non-zero mantissa).
func same16(t *testing.T, what string, got, want []uint16) {
	t.Helper()
	isNaN := func(h uint16) bool { return h&0x7c00 == 0x7c00 && h&0x3ff != 0 }
	for i := range want {
		if isNaN(got[i]) && isNaN(want[i]) {
			continue
		}
		if got[i] != want[i] {
			t.Fatalf("%s: [%d] = %#04x, Go twin %#04x", what, i, got[i], want[i])
		}
	}
	checkGuards16(t, what, got)
}

// values makes float32 test data: mostly values of moderate size and both signs, with
// large, small, subnormal, zero and (when special) infinite and NaN values mixed in.
func values(r *rand.Rand, n int, special bool) []float32 {
	s := make([]float32, n)
	for i := range s {
		var v float32
		switch k := r.IntN(20); {
		case k < 12:
			v = float32(r.NormFloat64())
		case k == 12:
			v = float32(r.NormFloat64() * 1e4)
		case k == 13:
			v = float32(r.NormFloat64() * 1e-4)
		case k == 14:
			v = float32(r.NormFloat64() * 1e30)
		case k == 15:
			v = math.Float32frombits(r.Uint32() & 0x807fffff) // subnormal
		case k == 16:
			v = math.Float32frombits(r.Uint32() & 0x80000000) // ±0
		case k == 17:
			v = float32(r.IntN(7) - 3) // exact small integers: ties in sums
		case k == 18 && special:
			v = float32(math.Inf(1 - 2*r.IntN(2)))
		case k == 19 && special:
			v = float32(math.NaN())
		default:
			v = float32(r.Float64())
		}
		s[i] = v
	}
	return s
}

// halves makes binary16 test data: random patterns of every class, weighted towards
// ordinary values so that sums round (often at exact midpoints) rather than overflow.
func halves(r *rand.Rand, n int) []uint16 {
	s := make([]uint16, n)
	for i := range s {
		switch k := r.IntN(10); {
		case k < 6: // |v| in [2^-6, 2^6): sums land on and near midpoints
			s[i] = uint16(r.IntN(2))<<15 | uint16(9+r.IntN(12))<<10 | uint16(r.IntN(1024))
		case k == 6: // subnormals and zeros
			s[i] = uint16(r.IntN(2))<<15 | uint16(r.IntN(1024))
		case k == 7: // near the top: sums overflow to Inf
			s[i] = uint16(r.IntN(2))<<15 | 0x7800 | uint16(r.IntN(0x400))
		default:
			s[i] = uint16(r.Uint32())
		}
	}
	return s
}

// narrowInputs makes float32 values that probe binary16 and bfloat16 rounding: exact
// midpoints between neighbours and one ulp either side, the overflow boundary, subnormal
// halves, random patterns, Inf and NaN.
func narrowInputs(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		u := r.Uint32()
		switch k := r.IntN(8); k {
		case 0: // binary16 midpoint (13 dropped bits = 1000…0), ±1 ulp
			h := uint32(r.IntN(0x7c00))
			f := math.Float32bits(half.F16ToF32(uint16(h))) + 1<<12
			if h < 0x400 { // subnormal halves: midpoint of the 2^-24 grid
				f = math.Float32bits(half.F16ToF32(uint16(h)) + 0x1p-25)
			}
			u = u&0x80000000 | (f + uint32(r.IntN(3)) - 1)
		case 1: // bfloat16 midpoint, ±1 ulp
			u = u&0xffff0000 | 0x8000 + uint32(r.IntN(3)) - 1
		case 2: // around 65504 … 65520 … 65536
			u = u&0x80000000 | (math.Float32bits(65504) + uint32(r.IntN(1<<14)))
		case 3:
			u = u&0x80000000 | 0x7f800000 | uint32(r.IntN(2))*(u&0x7fffff) // Inf or NaN
		case 4: // f32 subnormals and tiny values
			u &= 0x80ffffff
		}
		s[i] = math.Float32frombits(u)
	}
	return s
}

func TestLevels(t *testing.T) {
	ls := levelNames()
	if ls[len(ls)-1] != "go" {
		t.Fatalf("levelNames() = %v: go must be last", ls)
	}
	if got := newBackend(t, Options{}).Info().Level; got != testLevels()[0] {
		t.Fatalf("a test backend's default level is %q, want %q, the widest of %v not switched off", got, testLevels()[0], ls)
	}
	b, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Info().Level; got != ls[0] {
		t.Fatalf("New(Options{}) runs level %q, want %q, the widest of %v", got, ls[0], ls)
	}
	b.Close()
	if _, err := New(Options{Level: "avx1024"}); !errors.Is(err, ops.ErrUnavailable) {
		t.Fatalf("New(Level: avx1024) = %v, want ErrUnavailable", err)
	}
	for _, name := range ls {
		b := newBackend(t, Options{Level: name})
		if b.Info().Level != name || b.k != kernelsOf(name) {
			t.Fatalf("New(Level: %q) runs level %q", name, b.Info().Level)
		}
	}
}

var profiles = []plan.Contraction{{}, {FuseVariance: true, FuseAffine: true}, {FuseVariance: true}, {FuseAffine: true}}

// newBackend is New, at the widest level under test unless opts names one.
func newBackend(t testing.TB, opts Options) *Backend {
	t.Helper()
	return newTunedBackend(t, opts, defaultTuning())
}

// newTunedBackend is newBackend with another tuning.
func newTunedBackend(t testing.TB, opts Options, tune tuning) *Backend {
	t.Helper()
	if opts.Level == "" {
		opts.Level = testLevels()[0]
	}
	b, err := newTuned(opts, tune)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// buf makes a tensor of n elements of dtype dt from float32 values.
func buf(dt ops.DType, v []float32) ops.Buf {
	switch dt {
	case ops.F16:
		u := make([]uint16, len(v))
		narrowF16Go(u, v)
		return ops.Buf{DType: dt, U16: u}
	case ops.BF16:
		u := make([]uint16, len(v))
		narrowBF16Go(u, v)
		return ops.Buf{DType: dt, U16: u}
	}
	return ops.Buf{DType: dt, F32: slices.Clone(v)}
}

func emptyBuf(dt ops.DType, n int) ops.Buf {
	if dt == ops.F32 {
		return ops.Buf{DType: dt, F32: make([]float32, n)}
	}
	return ops.Buf{DType: dt, U16: make([]uint16, n)}
}

func sameBuf(t *testing.T, what string, got, want ops.Buf) {
	t.Helper()
	if got.DType == ops.F32 {
		same32(t, what, got.F32, want.F32)
	} else {
		same16(t, what, got.U16, want.U16)
	}
}

// TestMemoryKernels checks the non-temporal kernels against their twins at every start
// alignment (the NT stores need addresses aligned to the vector, 32 bytes for avx2 and 64
// for avx512: the dispatch hands the head and tail to narrower kernels and the twins), and
// that the prefetches and the fence change nothing.
func TestMemoryKernels(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	g := &goKernels
	for _, name := range simdLevels() {
		k := mustKernels(t, name)
		for _, n := range kernelSizes {
			for off := range 16 {
				tag := func(op string) string { return fmt.Sprintf("%s/%s/n=%d/off=%d", name, op, n, off) }
				a, b, c := values(r, n, true), values(r, n, false), values(r, n, false)
				// off elements before the output: its start moves through the 64-byte grid.
				shifted := func() []float32 { return out32(n+off, nil)[off:] }
				got, want := shifted(), shifted()

				mean, rstd := float32(r.NormFloat64()), float32(math.Exp(r.NormFloat64()*3))
				for _, fma := range []bool{false, true} {
					f := affineForm{dt: ops.F32, fma: fma, nt: true}
					k.affine(f, got, a, b, c, mean, rstd)
					g.affine(f, want, a, b, c, mean, rstd)
					k.fence()
					same32(t, tag(fmt.Sprintf("affine%+v", f)), got, want)
					g.affine(affineForm{dt: ops.F32, fma: fma}, want, a, b, c, mean, rstd)
					same32(t, tag(fmt.Sprintf("affine%+v/stored", f)), got, want)
				}

				// The non-temporal narrowings, against the ordinary ones.
				for _, dt := range []ops.DType{ops.F16, ops.BF16} {
					got16, want16 := out16(n + off)[off:], out16(n)
					k.narrow(convForm{dt: dt, nt: true}, got16, a)
					k.fence()
					g.narrow(convForm{dt: dt}, want16, a)
					same16(t, tag(fmt.Sprintf("narrow%v/nt", dt)), got16, want16)
				}

				got = shifted()
				k.copyNT(got, a)
				k.fence()
				same32(t, tag("copyNT"), got, a)

				// The prefetches change nothing, whatever the start and length.
				before := slices.Clone(a)
				k.prefetch(bytesOf(a[off%max(1, n):]))
				k.prefetch(bytesOf(a)[min(off, 4*n):])
				k.prefetch(nil)
				same32(t, tag("prefetch"), a, before)
			}
		}
	}
}
