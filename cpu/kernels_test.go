package cpu

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/fusednorm/fusednorm/internal/cpuhook"
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
	if hooked := cpuhook.Levels(); !slices.Equal(hooked, ls) {
		t.Fatalf("cpuhook.Levels() = %v, want %v", hooked, ls)
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

func TestElementwiseKernels(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	g := &goKernels
	for _, name := range simdLevels() {
		k := mustKernels(t, name)
		for _, n := range kernelSizes {
			tag := func(op string) string { return fmt.Sprintf("%s/%s/n=%d", name, op, n) }
			a, b, c := values(r, n, true), values(r, n, false), values(r, n, false)

			got, want := out32(n, nil), out32(n, nil)
			k.add2(got, a, b)
			g.add2(want, a, b)
			same32(t, tag("add2"), got, want)

			k.add3(got, a, b, c)
			g.add3(want, a, b, c)
			same32(t, tag("add3"), got, want)

			got, want = out32(n, func(i int) float32 { return a[i] }), out32(n, func(i int) float32 { return a[i] })
			k.addTo(got, b)
			g.addTo(want, b)
			same32(t, tag("addTo"), got, want)

			mean, rstd := float32(r.NormFloat64()), float32(math.Exp(r.NormFloat64()*3))
			x0 := float32(r.NormFloat64()) // the plan's shift
			for _, fma := range []bool{false, true} {
				f := affineForm{dt: ops.F32, fma: fma}
				k.affine(f, got, a, b, c, x0, mean, rstd)
				g.affine(f, want, a, b, c, x0, mean, rstd)
				same32(t, tag(fmt.Sprintf("affine%+v", f)), got, want)
			}

			// The affine steps that round y to 16 bits; rstd large enough that values land
			// on rounding boundaries, overflow and underflow.
			want16 := out16(n)
			var forms []affineForm
			for _, dt := range []ops.DType{ops.F16, ops.BF16} {
				for _, fma := range []bool{false, true} {
					for _, nt := range []bool{false, true} {
						forms = append(forms, affineForm{dt: dt, fma: fma, nt: nt})
					}
				}
			}
			for _, f := range forms {
				for _, off := range []int{0, 1, 3, 8} { // y's start within a vector of halves
					y := out16(n + off)[off:]
					k.affine16(f, y, a, b, c, x0, mean, rstd)
					k.fence()
					g.affine16(f, want16, a, b, c, x0, mean, rstd)
					same16(t, tag(fmt.Sprintf("affine16%+v/off=%d", f, off)), y, want16)
				}
				// gamma and beta in y's format, against their widened copies.
				gh, bh := halves(r, n), halves(r, n)
				if f.dt == ops.BF16 {
					narrowBF16Go(gh, b)
					narrowBF16Go(bh, c)
				}
				gw, bw := make([]float32, n), make([]float32, n)
				g.widen(convForm{dt: f.dt}, gw, gh)
				g.widen(convForm{dt: f.dt}, bw, bh)
				for _, off := range []int{0, 1, 3, 8} {
					y := out16(n + off)[off:]
					k.affineH(f, y, a, gh, bh, x0, mean, rstd)
					k.fence()
					g.affine16(f, want16, a, gw, bw, x0, mean, rstd)
					same16(t, tag(fmt.Sprintf("affineH%+v/off=%d", f, off)), y, want16)
				}
			}
		}
	}
}

func TestConversionKernels(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	g := &goKernels
	all := make([]uint16, 1<<16)
	for i := range all {
		all[i] = uint16(i)
	}
	for _, name := range simdLevels() {
		k := mustKernels(t, name)
		// Every 16-bit pattern, widened.
		got, want := out32(len(all), nil), out32(len(all), nil)
		k.widen(convForm{dt: ops.F16}, got, all)
		g.widen(convForm{dt: ops.F16}, want, all)
		same32(t, name+"/widenF16/all", got, want)
		k.widen(convForm{dt: ops.BF16}, got, all)
		g.widen(convForm{dt: ops.BF16}, want, all)
		same32(t, name+"/widenBF16/all", got, want)

		for _, n := range append(kernelSizes, 1<<16) {
			tag := func(op string) string { return fmt.Sprintf("%s/%s/n=%d", name, op, n) }
			src16 := halves(r, n)
			got, want := out32(n, nil), out32(n, nil)
			k.widen(convForm{dt: ops.F16}, got, src16)
			g.widen(convForm{dt: ops.F16}, want, src16)
			same32(t, tag("widenF16"), got, want)
			k.widen(convForm{dt: ops.BF16}, got, src16)
			g.widen(convForm{dt: ops.BF16}, want, src16)
			same32(t, tag("widenBF16"), got, want)

			src := narrowInputs(r, n)
			got16, want16 := out16(n), out16(n)
			k.narrow(convForm{dt: ops.F16}, got16, src)
			g.narrow(convForm{dt: ops.F16}, want16, src)
			same16(t, tag("narrowF16"), got16, want16)
			k.narrow(convForm{dt: ops.BF16}, got16, src)
			g.narrow(convForm{dt: ops.BF16}, want16, src)
			same16(t, tag("narrowBF16"), got16, want16)
		}
	}
}

func TestEmbedSumF16Kernel(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	g := &goKernels
	for _, name := range simdLevels() {
		k := mustKernels(t, name)
		for _, n := range append(kernelSizes, 1<<16) {
			w, p, s := halves(r, n), halves(r, n), halves(r, n)
			for _, seg := range [][]uint16{nil, s} {
				tag := fmt.Sprintf("%s/embedSumF16/n=%d/seg=%v", name, n, seg != nil)
				gotX, wantX := out32(n, nil), out32(n, nil)
				gotB, wantB := out16(n), out16(n)
				f := embedForm{seg: seg != nil}
				k.embedSum(f, gotX, gotB, w, p, seg)
				g.embedSum(f, wantX, wantB, w, p, seg)
				same32(t, tag+"/x", gotX, wantX)
				same16(t, tag+"/bits", gotB, wantB)
			}
		}
	}
}

// TestMaskKernels checks the mask_index rules' kernels against their twins: masks of 0s,
// 1s and other values (which neither rule may take for a 1 or a 0), the first 0 at every
// place, and guard elements after each mask that would change the answer if read.
func TestMaskKernels(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	g := &goKernels
	others := []int32{2, -1, 3, math.MaxInt32, math.MinInt32, 1 << 16, 0x10001}
	for _, name := range simdLevels() {
		k := mustKernels(t, name)
		for _, n := range append(kernelSizes, 1<<16) {
			buf := make([]int32, n+guards)
			m := buf[:n]
			for i := range buf[n:] {
				buf[n+i] = int32(i % 2) // a 0 and a 1 right after the mask
			}
			check := func(what string) {
				t.Helper()
				if got, want := k.mask(ops.MaskCountOnes, m), g.mask(ops.MaskCountOnes, m); got != want {
					t.Errorf("%s/maskCountOnes/n=%d/%s: %d, want %d", name, n, what, got, want)
				}
				if got, want := k.mask(ops.MaskFirstZero, m), g.mask(ops.MaskFirstZero, m); got != want {
					t.Errorf("%s/maskFirstZero/n=%d/%s: %d, want %d", name, n, what, got, want)
				}
			}
			// Random 0s, 1s and others.
			for i := range m {
				switch c := r.IntN(8); {
				case c < 3:
					m[i] = 1
				case c == 3:
					m[i] = 0
				default:
					m[i] = others[r.IntN(len(others))]
				}
			}
			check("mixed")
			// No 0: 1s and others; then a single 0 at each place (every place up to 300,
			// a sample beyond).
			for i := range m {
				m[i] = 1
				if r.IntN(3) == 0 {
					m[i] = others[r.IntN(len(others))]
				}
			}
			check("no zero")
			for at := 0; at < n; at++ {
				if at > 300 && r.IntN(64) != 0 {
					continue
				}
				old := m[at]
				m[at] = 0
				check(fmt.Sprintf("zero at %d", at))
				m[at] = old
			}
		}
	}
}

func TestAccumulateKernels(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	g := &goKernels
	for _, name := range simdLevels() {
		k := mustKernels(t, name)
		for _, w := range planWidths {
			for _, n := range kernelSizes {
				for _, special := range []bool{false, true} {
					tag := func(op string) string {
						return fmt.Sprintf("%s/%s/W=%d/n=%d/special=%v", name, op, w, n, special)
					}
					x := values(r, n, special)
					init := values(r, w, false)
					start := func(i int) float32 { return init[i] }
					mean := float32(r.NormFloat64())
					x0 := float32(r.NormFloat64()) // the plan's shift

					for _, f := range []sumForm{{}, {sq: true}, {sq: true, fma: true},
						{zero: true}, {sq: true, zero: true}, {sq: true, fma: true, zero: true}} {
						got, want := out32(w, start), out32(w, start)
						k.accumulate(f, got, x, x0, mean)
						g.accumulate(f, want, x, x0, mean)
						same32(t, tag(fmt.Sprintf("%+v", f)), got, want)
						if f.zero { // the zero-start forms ignore what part held
							clear(want)
							g.accumulate(sumForm{sq: f.sq, fma: f.fma}, want, x, x0, mean)
							same32(t, tag(fmt.Sprintf("%+v/cleared", f)), got, want)
						}
					}
				}
			}
		}
	}
}

// The accumulation kernels must also follow the plan itself, not only their twins.
func TestAccumulateFollowsPlan(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, name := range testLevels() {
		for _, h := range []int{1, 7, 8, 9, 255, 256, 257, 768, 1000, 4099} {
			for _, prof := range []plan.Contraction{{}, {FuseVariance: true, FuseAffine: true}} {
				p := plan.For(h, prof)
				x := values(r, h, false)
				part := make([]float32, p.W)
				got := rowStats(kernelsOf(name), &p, x, part, 1e-5, nil)
				want := p.Stats(x, 1e-5, make([]float32, p.W))
				if got != want {
					t.Fatalf("%s: H=%d %v: rowStats = %+v, plan.Stats = %+v", name, h, prof, got, want)
				}
			}
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

// TestAddLayerNormLevels runs whole AddLayerNorm calls at every level and compares each
// output with the pure-Go level, bit for bit.
func TestAddLayerNormLevels(t *testing.T) { addLayerNormLevels(t, defaultTuning()) }

// addLayerNormLevels is TestAddLayerNormLevels on backends of the tuning.
func addLayerNormLevels(t *testing.T, tune tuning) {
	// The reference runs the first pass over whole rows (TestNonTemporalLevels runs it in
	// pieces too).
	ref := tune
	ref.sumPiece = 1 << 30
	r := rand.New(rand.NewPCG(11, 12))
	type combo struct{ x1, x2, gb, out ops.DType }
	// Every dtype row of SPEC B.2: the backend reads the weights as they come, in the
	// formats those rows allow.
	var combos []combo
	for _, row := range ops.AddDTypeRows {
		combos = append(combos, combo{row[0], row[1], row[2], row[3]})
	}
	for _, name := range simdLevels() {
		for _, prof := range profiles {
			for _, cb := range combos {
				for _, d := range []int{1, 7, 8, 9, 255, 256, 257, 768, 1000} {
					for bias := range 3 { // none, row, full
						n := 5
						mk := func(dt ops.DType, len int) ops.Buf { return buf(dt, values(r, len, false)) }
						a := ops.AddLN{N: n, D: d, X1: mk(cb.x1, n*d), X2: mk(cb.x2, n*d),
							Gamma: mk(cb.gb, d), Beta: mk(cb.gb, d), Epsilon: 1e-5}
						switch bias {
						case 1:
							a.Bias = mk(cb.out, d)
						case 2:
							a.Bias, a.BiasFull = mk(cb.out, n*d), true
						}
						run := func(level string, tune tuning) ops.AddLN {
							c := a
							c.Y, c.X = emptyBuf(cb.out, n*d), emptyBuf(cb.out, n*d)
							c.Mean, c.Rstd = make([]float32, n), make([]float32, n)
							be := newTunedBackend(t, Options{Profile: prof, Threads: 1, Level: level}, tune)
							if err := be.AddLayerNorm(context.Background(), &c); err != nil {
								t.Fatal(err)
							}
							return c
						}
						got, want := run(name, tune), run("go", ref)
						tag := fmt.Sprintf("%s/%v/%v/D=%d/bias=%d", name, prof, cb, d, bias)
						sameBuf(t, tag+"/y", got.Y, want.Y)
						sameBuf(t, tag+"/x", got.X, want.X)
						same32(t, tag+"/mean", got.Mean, want.Mean)
						same32(t, tag+"/rstd", got.Rstd, want.Rstd)
					}
				}
			}
		}
	}
}

// TestEmbedLayerNormLevels does the same for EmbedLayerNorm, f32 and f16, with and without
// the segment table and the embedding_sum output.
func TestEmbedLayerNormLevels(t *testing.T) { embedLayerNormLevels(t, defaultTuning()) }

// embedLayerNormLevels is TestEmbedLayerNormLevels on backends of the tuning.
func embedLayerNormLevels(t *testing.T, tune tuning) {
	ref := tune
	ref.sumPiece = 1 << 30 // the reference sums whole rows
	r := rand.New(rand.NewPCG(13, 14))
	for _, name := range simdLevels() {
		for _, prof := range profiles {
			for _, dt := range []ops.DType{ops.F32, ops.F16} {
				for _, h := range []int{1, 7, 8, 9, 255, 256, 257, 768, 1000} {
					for _, segs := range []int{0, 2} {
						const B, S, V, P = 2, 6, 11, 8
						mk := func(len int) ops.Buf { return buf(dt, values(r, len, false)) }
						w := ops.EmbedWeights{DType: dt, H: h, V: V, P: P, G: segs,
							Word: mk(V * h), Pos: mk(P * h), Gamma: mk(h), Beta: mk(h), Epsilon: 1e-12}
						if segs > 0 {
							w.Seg = mk(segs * h)
						}
						in := ops.EmbedInputs{B: B, S: S, IDs: make([]int32, B*S)}
						for i := range in.IDs {
							in.IDs[i] = int32(r.IntN(V))
						}
						if segs > 0 {
							in.SegIDs = make([]int32, B*S)
							for i := range in.SegIDs {
								in.SegIDs[i] = int32(r.IntN(segs))
							}
						}
						run := func(level string, tune tuning) ops.EmbedOutputs {
							out := ops.EmbedOutputs{Out: emptyBuf(dt, B*S*h), Sum: emptyBuf(dt, B*S*h)}
							op, err := newTunedBackend(t, Options{Profile: prof, Threads: 1, Level: level}, tune).PrepareEmbed(&w)
							if err != nil {
								t.Fatal(err)
							}
							if err := op.Run(context.Background(), &in, &out); err != nil {
								t.Fatal(err)
							}
							return out
						}
						got, want := run(name, tune), run("go", ref)
						tag := fmt.Sprintf("%s/%v/%v/H=%d/segs=%d", name, prof, dt, h, segs)
						sameBuf(t, tag+"/out", got.Out, want.Out)
						sameBuf(t, tag+"/sum", got.Sum, want.Sum)
					}
				}
			}
		}
	}
}

func TestTreeKernel(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	for _, name := range testLevels() {
		k := mustKernels(t, name)
		for _, w := range []int{1, 2, 4, 8, 16, 32, 64, 128, 256} {
			for _, special := range []bool{false, true} {
				init := values(r, w, special)
				got, want := out32(w, func(i int) float32 { return init[i] }), slices.Clone(init)
				sum := k.tree(got)
				wantSum := plan.For(w, plan.Contraction{}).Tree(want)
				tag := fmt.Sprintf("%s/tree/W=%d/special=%v", name, w, special)
				same32(t, tag, []float32{sum}, []float32{wantSum})
				same32(t, tag+"/part", got, want)
			}
		}
		// Lengths outside the plan's widths follow treeGo too (powers of two past MaxW run
		// the one-kernel tree, the others the step-by-step path).
		for _, w := range []int{3, 12, 24, 48, 200, 512, 1024} {
			init := values(r, w, true)
			got, want := out32(w, func(i int) float32 { return init[i] }), slices.Clone(init)
			sum, wantSum := k.tree(got), treeGo(want)
			tag := fmt.Sprintf("%s/tree/len=%d", name, w)
			same32(t, tag, []float32{sum}, []float32{wantSum})
			same32(t, tag+"/part", got, want)
		}
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
				x0 := float32(r.NormFloat64()) // the plan's shift
				for _, fma := range []bool{false, true} {
					f := affineForm{dt: ops.F32, fma: fma, nt: true}
					k.affine(f, got, a, b, c, x0, mean, rstd)
					g.affine(f, want, a, b, c, x0, mean, rstd)
					k.fence()
					same32(t, tag(fmt.Sprintf("affine%+v", f)), got, want)
					g.affine(affineForm{dt: ops.F32, fma: fma}, want, a, b, c, x0, mean, rstd)
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

// TestNonTemporalLevels reruns the whole-op comparisons on backends tuned to take the
// non-temporal stores, the streamed first passes and deeper prefetching at every size.
func TestNonTemporalLevels(t *testing.T) {
	tune := defaultTuning()
	tune.bigBytes, tune.prefetchAhead, tune.hwStreamRow, tune.hwGatherRow = 0, 3, 1<<62, 1<<62
	levels := func(name string, tune tuning) {
		t.Run("AddLayerNorm"+name, func(t *testing.T) { addLayerNormLevels(t, tune) })
		t.Run("EmbedLayerNorm"+name, func(t *testing.T) { embedLayerNormLevels(t, tune) })
	}
	levels("", tune)
	// Every row left to the hardware prefetchers (16-bit pieces prefetched just before use).
	hardware := tune
	hardware.hwStreamRow, hardware.hwGatherRow = 1, 1
	levels("HardwareStream", hardware)
	// 16-bit gamma and beta widened at every width, and at none.
	tune.wideBytes = 1 << 62
	levels("WideWeights", tune)
	tune.wideBytes = 0
	levels("NarrowWeights", tune)
	// The 16-bit first passes in pieces of one W.
	tune.sumPiece = 1
	levels("Pieces", tune)
}

// TestAddSumKernel checks the fused first pass (s, the optional streamed copy x, and the
// partial sums) against its twin for every plan width, with and without the third addend
// and x, x at every start alignment.
func TestAddSumKernel(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 20))
	g := &goKernels
	for _, name := range simdLevels() {
		k := mustKernels(t, name)
		for _, w := range append(planWidths, 32, 64, 128) {
			for _, n := range append(kernelSizes, 768, 3*w, 3*w+5) {
				for _, special := range []bool{false, true} {
					a, b, c := values(r, n, special), values(r, n, false), values(r, n, special)
					init := values(r, w, false)
					x0 := float32(r.NormFloat64()) // the plan's shift
					for _, three := range []bool{false, true} {
						cc := c
						if !three {
							cc = nil
						}
						for off := range 17 { // off = 16: no x
							tag := fmt.Sprintf("%s/addSum/W=%d/n=%d/special=%v/three=%v/off=%d", name, w, n, special, three, off)
							start := func(i int) float32 { return init[i] }
							gotP, wantP := out32(w, start), out32(w, start)
							gotS, wantS := out32(n, nil), out32(n, nil)
							var gotX, wantX []float32
							if off < 16 {
								gotX, wantX = out32(n+off, nil)[off:], out32(n+off, nil)[off:]
							}
							f := addForm{dt: ops.F32, bias: three, x: off < 16}
							g.addSum(f, wantP, wantS, wantX, a, b, cc, x0)
							// The fused pass, and the two-pass form for streamed inputs: the
							// same bits.
							for _, stream := range []bool{false, true} {
								f.stream = stream
								form := fmt.Sprintf("/stream=%v", stream)
								gotP, gotS = out32(w, start), out32(n, nil)
								if off < 16 {
									gotX = out32(n+off, nil)[off:]
								}
								k.addSum(f, gotP, gotS, gotX, a, b, cc, x0)
								k.fence()
								same32(t, tag+form+"/s", gotS, wantS)
								same32(t, tag+form+"/part", gotP, wantP)
								if off < 16 {
									same32(t, tag+form+"/x", gotX, wantX)
								}
							}
							if off != 16 {
								continue
							}
							// The same row summed a piece at a time: pieces of a few W onto
							// the partials, as the 16-bit paths of the ops run it.
							tag = fmt.Sprintf("%s/addSumAcc/W=%d/n=%d/special=%v/three=%v", name, w, n, special, three)
							// With x too (every piece's x from the separate passes).
							for _, withX := range []bool{false, true} {
								tag := fmt.Sprintf("%s/x=%v", tag, withX)
								gotP, wantP = out32(w, start), out32(w, start)
								gotS, wantS = out32(n, nil), out32(n, nil)
								gotX = out32(n, nil)
								step := w * (1 + r.IntN(3))
								for lo := 0; lo < n; lo += step {
									hi := min(lo+step, n)
									var cp, xp []float32
									if three {
										cp = cc[lo:hi]
									}
									if withX {
										xp = gotX[lo:hi]
									}
									k.addSum(addForm{dt: ops.F32, bias: three, x: withX, acc: true}, gotP, gotS[lo:hi], xp, a[lo:hi], b[lo:hi], cp, x0)
								}
								k.fence()
								g.addSum(addForm{dt: ops.F32, bias: three, acc: true}, wantP, wantS, nil, a, b, cc, x0)
								same32(t, tag+"/s", gotS, wantS)
								same32(t, tag+"/part", gotP, wantP)
								if withX {
									same32(t, tag+"/x", gotX, wantS)
								}
							}

							// The 16-bit first pass against widening first, then the float32
							// pass: binary16 and bfloat16, without a bias and with a 16-bit one.
							h1, h2, h3 := halves(r, n), halves(r, n), halves(r, n)
							for _, dt := range []ops.DType{ops.F16, ops.BF16} {
								w1, w2, w3 := make([]float32, n), make([]float32, n), make([]float32, n)
								g.widen(convForm{dt: dt}, w1, h1)
								g.widen(convForm{dt: dt}, w2, h2)
								g.widen(convForm{dt: dt}, w3, h3)
								for bias := range 2 {
									for _, acc := range []bool{false, true} {
										var wc []float32
										var half []uint16
										if bias == 1 {
											half, wc = h3, w3
										}
										wantP, wantS = out32(w, start), out32(n, nil)
										g.addSum(addForm{dt: ops.F32, bias: bias == 1, acc: acc}, wantP, wantS, nil, w1, w2, wc, x0)
										wantX := out16(n)
										g.narrow(convForm{dt: dt}, wantX, wantS)
										for _, off := range []int{-1, 0, 1, 5, 8} { // x's start within a vector of halves; -1: no x
											tag := fmt.Sprintf("%s/addSum16/W=%d/n=%d/%v/bias=%d/acc=%v/off=%d", name, w, n, dt, bias, acc, off)
											gotP, gotS = out32(w, start), out32(n, nil)
											var gotX []uint16
											if off >= 0 {
												gotX = out16(n + off)[off:]
											}
											f := addForm{dt: dt, bias: bias == 1, x: off >= 0, acc: acc}
											k.addSum16(f, gotP, gotS, gotX, h1, h2, half, x0)
											k.fence()
											same32(t, tag+"/s", gotS, wantS)
											same32(t, tag+"/part", gotP, wantP)
											if off >= 0 {
												same16(t, tag+"/x", gotX, wantX)
											}
										}
									}
								}
							}
						}
					}
				}
			}
		}
	}
}
