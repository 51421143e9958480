//go:build cgo

package dawn

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/fusednorm/fusednorm/internal/cpu"
	"github.com/fusednorm/fusednorm/internal/half"
	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/plan"
	"github.com/fusednorm/fusednorm/internal/testkit"
	"github.com/fusednorm/fusednorm/shaders"
)

var (
	sharedOnce sync.Once
	shared     *Backend
	sharedErr  error
)

// backend opens one Backend for the whole package (device open and calibration are slow on
// lavapipe). Without Dawn the test is skipped, or fails under FUSEDNORM_REQUIRE_DAWN=1.
func backend(t testing.TB) *Backend {
	t.Helper()
	sharedOnce.Do(func() { shared, sharedErr = New(Config{}) })
	if sharedErr != nil {
		testkit.SkipWithoutDawn(t, sharedErr)
	}
	return shared
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		shared.Close()
	}
	os.Exit(code)
}

// reference is the CPU backend mirroring the device's detected profile.
func reference(t *testing.T, b *Backend) *cpu.Backend {
	ref, err := cpu.New(cpu.Options{Profile: b.Info().Profile})
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

// onLavapipe reports whether the device is Mesa's CPU Vulkan driver.
func onLavapipe(b *Backend) bool {
	i := b.dev.info
	return strings.Contains(strings.ToLower(i.Device+i.Vendor), "llvmpipe") || strings.EqualFold(i.Vendor, "mesa")
}

func TestCalibration(t *testing.T) {
	b := backend(t)
	info := b.Info()
	t.Logf("device: %s", info.Device)
	t.Logf("detail: %s", info.Detail)
	t.Logf("calibration: %s", b.calibration)
	if strings.Contains(info.Detail, "undetermined") {
		t.Errorf("no contraction profile reproduced the calibration kernels: %s", b.calibration)
	}
	if onLavapipe(b) && info.Profile != (plan.Contraction{}) {
		t.Errorf("lavapipe profile = %s, want unfused", info.Profile)
	}
	if got, want := b.Plan(768, true), plan.For(768, true, info.Profile); got != want {
		t.Errorf("Plan(768) = %v, want %v", got, want)
	}
}

// probe runs the shaders' probe kernel (its integer 16-bit form) in one mode over src and
// returns the output words.
func probe(t *testing.T, b *Backend, mode uint32, src []uint32) []uint32 {
	t.Helper()
	dst, err := b.runProbe(context.Background(), false, mode, src)
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// rstdInputs are the values the exact rstd is checked on: edge cases, then random normals
// spread over the whole exponent range and concentrated where variances live.
func rstdInputs() []float32 {
	var v []float32
	for e := -126; e <= 127; e++ {
		p := float32(math.Ldexp(1, e))
		v = append(v, p, math.Nextafter32(p, 0), math.Nextafter32(p, float32(math.Inf(1))))
	}
	for _, c := range []float32{1e-12, 1e-5, 1e-6, 1, 2, 3, 0.5, 0.1, 65504, 1e30, 3.4e38, math.MaxFloat32,
		math.SmallestNonzeroFloat32 * (1 << 23), 1 + 0x1p-23, 2 - 0x1p-22, 4 - 0x1p-21} {
		for d := int32(-64); d <= 64; d++ {
			x := math.Float32frombits(uint32(int32(math.Float32bits(c)) + d))
			if x > 0 && !math.IsInf(float64(x), 0) {
				v = append(v, x)
			}
		}
	}
	r := rand.New(rand.NewPCG(7, 7))
	for d := uint32(1); d < 0x00800000; d = d*3 + 1 { // subnormals
		v = append(v, math.Float32frombits(d), math.Float32frombits(0x00800000-d))
	}
	for len(v) < 160000 {
		switch len(v) % 3 {
		case 0: // any positive normal
			v = append(v, math.Float32frombits(0x00800000+r.Uint32N(0x7f000000)))
		case 1: // variance-like values plus epsilons
			v = append(v, float32(r.ExpFloat64())*1e-3+1e-12)
		default:
			v = append(v, float32(r.Float64()*4)+1e-5)
		}
	}
	return v
}

func TestRstdExact(t *testing.T) {
	b := backend(t)
	in := rstdInputs()
	src := make([]uint32, len(in))
	for i, v := range in {
		src[i] = math.Float32bits(v)
	}
	got := probe(t, b, shaders.ProbeRstd, src)
	bad := 0
	for i, v := range in {
		if want := math.Float32bits(plan.Rstd(v)); got[i] != want {
			if bad < 10 {
				t.Errorf("rstd(%g = %#08x) = %#08x, want %#08x", v, src[i], got[i], want)
			}
			bad++
		}
	}
	t.Logf("exact rstd: %d values, %d mismatches", len(in), bad)
}

// f16Round is the reference f32 → f16 rounding (nearest-even), independent of the kernels.
func f16Round(f float32) uint16 { return half.F32ToF16(f) }

func TestHalfConversions(t *testing.T) {
	b := backend(t)
	// f16 → f32 over every pattern (NaN payloads aside).
	all := make([]uint32, 1<<16)
	for i := range all {
		all[i] = uint32(i)
	}
	got := probe(t, b, shaders.ProbeFromF16, all)
	for i, g := range got {
		want := half.F16ToF32(uint16(i))
		if math.IsNaN(float64(want)) {
			if !math.IsNaN(float64(math.Float32frombits(g))) {
				t.Errorf("f16_to_f32(%#04x) = %#08x, want NaN", i, g)
			}
			continue
		}
		if g != math.Float32bits(want) {
			t.Fatalf("f16_to_f32(%#04x) = %#08x, want %#08x", i, g, math.Float32bits(want))
		}
	}
	// f32 → f16 and → bf16: random values, midpoints, overflow and subnormal boundaries.
	var vals []uint32
	r := rand.New(rand.NewPCG(3, 4))
	for h := uint32(0); h < 0x7c00; h += 7 {
		f := half.F16ToF32(uint16(h))
		n := half.F16ToF32(uint16(h + 1))
		mid := float32((float64(f) + float64(n)) / 2)
		for _, x := range []float32{f, mid, math.Nextafter32(mid, 0), math.Nextafter32(mid, 1e9)} {
			vals = append(vals, math.Float32bits(x), math.Float32bits(-x))
		}
	}
	for i := 0; i < 50000; i++ {
		vals = append(vals, r.Uint32())
	}
	for _, x := range []float32{65504, 65519.99, 65520, 65536, 1e9, 0x1p-24, 0x1p-25, 0x1.000002p-25, 0x1p-26} {
		vals = append(vals, math.Float32bits(x), math.Float32bits(-x))
	}
	to16 := probe(t, b, shaders.ProbeToF16, vals)
	pack := probe(t, b, shaders.ProbePackF16, vals)
	tobf := probe(t, b, shaders.ProbeToBF16, vals)
	packDiff, subDiff := 0, 0
	for i, v := range vals {
		f := math.Float32frombits(v)
		if math.IsNaN(float64(f)) {
			continue
		}
		want := uint32(f16Round(f))
		if to16[i] != want {
			t.Fatalf("f32_to_f16(%g = %#08x) = %#04x, want %#04x", f, v, to16[i], want)
		}
		if pack[i] != want {
			if want&0x7c00 == 0 || math.Abs(float64(f)) >= 65520 {
				subDiff++ // subnormal or overflow: builtin may flush or clamp
			} else {
				packDiff++
			}
		}
		if wantbf := uint32(half.F32ToBF16(f)); tobf[i] != wantbf {
			t.Fatalf("f32_to_bf16(%g = %#08x) = %#04x, want %#04x", f, v, tobf[i], wantbf)
		}
	}
	// The kernels round in integer arithmetic; the builtin is only reported.
	t.Logf("builtin pack2x16float vs RNE: %d normal-range differences, %d subnormal/overflow differences (of %d)",
		packDiff, subDiff, len(vals))
}

// The size, option and grid sweeps of both ops run in the conformance suite (tests/, issue
// 14), on every backend and CPU level; what stays here is what only this backend has: the
// probe kernels, calibration, ids checked on the device, closed ops, binding limits.

func TestEmbedBadIDOnDevice(t *testing.T) {
	b := backend(t)
	w := ops.EmbedWeights{DType: ops.F16, H: 3, V: 2, P: 2, Epsilon: 1e-12,
		Word: testkit.Float(ops.F16, make([]float32, 6)), Pos: testkit.Float(ops.F16, make([]float32, 6)),
		Gamma: testkit.Float(ops.F16, make([]float32, 3)), Beta: testkit.Float(ops.F16, make([]float32, 3))}
	op, err := b.PrepareEmbed(&w)
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	for _, ids := range [][]int32{{0, 2}, {-1, 0}, {1 << 30, 0}} {
		in := ops.EmbedInputs{B: 1, S: 2, IDs: ids}
		out := ops.EmbedOutputs{Out: testkit.Zeros(ops.F16, 6)}
		err := op.Run(context.Background(), &in, &out)
		if !errors.Is(err, ops.ErrInvalidArgument) {
			t.Errorf("ids %v: err = %v, want ErrInvalidArgument", ids, err)
		}
	}
	// The device stays usable.
	out := ops.EmbedOutputs{Out: testkit.Zeros(ops.F16, 6)}
	if err := op.Run(context.Background(), &ops.EmbedInputs{B: 1, S: 2, IDs: []int32{1, 0}}, &out); err != nil {
		t.Fatal(err)
	}
}

func TestEmbedClosed(t *testing.T) {
	b := backend(t)
	w := ops.EmbedWeights{DType: ops.F32, H: 1, V: 1, P: 1, Epsilon: 1e-12,
		Word: testkit.Float(ops.F32, []float32{1}), Pos: testkit.Float(ops.F32, []float32{1}),
		Gamma: testkit.Float(ops.F32, []float32{1}), Beta: testkit.Float(ops.F32, []float32{1})}
	op, err := b.PrepareEmbed(&w)
	if err != nil {
		t.Fatal(err)
	}
	op.Close()
	out := ops.EmbedOutputs{Out: testkit.Zeros(ops.F32, 1)}
	if err := op.Run(context.Background(), &ops.EmbedInputs{B: 1, S: 1, IDs: []int32{0}}, &out); !errors.Is(err, ops.ErrClosed) {
		t.Fatalf("Run after Close: %v", err)
	}
}

func TestBindingLimit(t *testing.T) {
	fake := &Backend{limits: deviceLimits{MaxStorageBufferBindingSize: 1 << 20, MaxBufferSize: 1 << 30}}
	err := fake.checkBinding("PrepareEmbed", "word_embedding", 1<<21)
	if !errors.Is(err, ops.ErrNotSupported) || !strings.Contains(err.Error(), "word_embedding") ||
		!strings.Contains(err.Error(), "maxStorageBufferBindingSize") {
		t.Fatalf("err = %v", err)
	}
	if err := fake.checkBinding("PrepareEmbed", "word_embedding", 1<<20); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkAddLN times one call (upload, dispatch, readback) of a BERT-sized AddLayerNorm.
func BenchmarkAddLN(bm *testing.B) {
	for _, dt := range []ops.DType{ops.F32, ops.F16} {
		bm.Run(dt.String(), func(bm *testing.B) {
			b := backend(bm)
			N, D := 4096, 768
			r := rand.New(rand.NewPCG(1, 1))
			a := &ops.AddLN{N: N, D: D, Epsilon: 1e-5,
				X1: testkit.Float(dt, testkit.Normal(r, N*D, 1, 0)), X2: testkit.Float(dt, testkit.Normal(r, N*D, 1, 0)),
				Gamma: testkit.Float(dt, testkit.Normal(r, D, 1, 0)), Beta: testkit.Float(dt, testkit.Normal(r, D, 1, 0)),
				Y: testkit.Zeros(dt, N*D), Mean: make([]float32, N), Rstd: make([]float32, N)}
			bm.SetBytes(int64(N * D * dt.Size() * 3))
			gpu := timeGPU(b, bm)
			for bm.Loop() {
				if err := b.AddLayerNorm(context.Background(), a); err != nil {
					bm.Fatal(err)
				}
				gpu.add()
			}
			gpu.report()
		})
	}
}

// BenchmarkEmbed times one Run of a BERT-base-sized EmbedLayerNorm (weights resident).
func BenchmarkEmbed(bm *testing.B) {
	for _, dt := range []ops.DType{ops.F32, ops.F16} {
		bm.Run(dt.String(), func(bm *testing.B) {
			b := backend(bm)
			B, S, H, V := 32, 128, 768, 30522
			r := rand.New(rand.NewPCG(2, 2))
			w := ops.EmbedWeights{DType: dt, H: H, V: V, P: 512, G: 2, Epsilon: 1e-12,
				Word: testkit.Float(dt, testkit.Normal(r, V*H, 1, 0)), Pos: testkit.Float(dt, testkit.Normal(r, 512*H, 1, 0)),
				Seg: testkit.Float(dt, testkit.Normal(r, 2*H, 1, 0)), Gamma: testkit.Float(dt, testkit.Normal(r, H, 1, 0)),
				Beta: testkit.Float(dt, testkit.Normal(r, H, 1, 0))}
			op, err := b.PrepareEmbed(&w)
			if err != nil {
				bm.Fatal(err)
			}
			defer op.Close()
			in := ops.EmbedInputs{B: B, S: S, IDs: make([]int32, B*S), SegIDs: make([]int32, B*S), Mask: make([]int32, B*S)}
			for i := range in.IDs {
				in.IDs[i] = int32(r.IntN(V))
				in.Mask[i] = 1
			}
			out := ops.EmbedOutputs{Out: testkit.Zeros(dt, B*S*H), MaskIndex: make([]int32, B)}
			bm.SetBytes(int64(B * S * H * dt.Size() * 4))
			gpu := timeGPU(b, bm)
			for bm.Loop() {
				if err := op.Run(context.Background(), &in, &out); err != nil {
					bm.Fatal(err)
				}
				gpu.add()
			}
			gpu.report()
		})
	}
}

// gpuTimer sums the compute-pass times of a benchmark's calls (timestamp queries), reported
// as gpu-µs/op next to the round-trip time.
type gpuTimer struct {
	b     *Backend
	bm    *testing.B
	total int64
	n     int
}

func timeGPU(b *Backend, bm *testing.B) *gpuTimer {
	if !b.dev.hasFeature("TimestampQuery") {
		return &gpuTimer{bm: bm}
	}
	b.timed.Store(true)
	bm.Cleanup(func() { b.timed.Store(false) })
	return &gpuTimer{b: b, bm: bm}
}

func (g *gpuTimer) add() {
	if g.b != nil {
		g.total += g.b.gpuTime.Load()
		g.n++
	}
}

func (g *gpuTimer) report() {
	if g.n > 0 {
		g.bm.ReportMetric(float64(g.total)/float64(g.n)/1e3, "gpu-µs/op")
	}
}

// TestHalfFastPaths checks the kernels' shortcuts for 16-bit data against the CPU: round16
// (rounding in place where the result is a normal binary16) and f16x2_to_f32 (the builtin
// for two normal halves), on every binary16 pattern and on values around each rounding.
func TestHalfFastPaths(t *testing.T) {
	b := backend(t)
	var words []uint32
	for _, hi := range []uint32{0x3c00, 0x0001, 0x7c00, 0x8400} { // normal, subnormal, Inf, -normal
		for i := uint32(0); i < 1<<16; i++ {
			words = append(words, i|hi<<16, hi|i<<16)
		}
	}
	lo, hi := probe(t, b, shaders.ProbeF16x2Lo, words), probe(t, b, shaders.ProbeF16x2Hi, words)
	for i, w := range words {
		for k, g := range []uint32{lo[i], hi[i]} {
			want := half.F16ToF32(uint16(w >> (16 * k)))
			if math.IsNaN(float64(want)) {
				continue
			}
			if g != math.Float32bits(want) {
				t.Fatalf("f16x2_to_f32(%#08x) half %d = %#08x, want %#08x", w, k, g, math.Float32bits(want))
			}
		}
	}
	var vals []uint32
	r := rand.New(rand.NewPCG(5, 6))
	for h := uint32(0); h < 0x7c00; h += 3 {
		f := half.F16ToF32(uint16(h))
		mid := float32((float64(f) + float64(half.F16ToF32(uint16(h+1)))) / 2)
		for _, x := range []float32{f, mid, math.Nextafter32(mid, 0), math.Nextafter32(mid, 1e9)} {
			vals = append(vals, math.Float32bits(x), math.Float32bits(-x))
		}
	}
	for i := 0; i < 50000; i++ {
		vals = append(vals, r.Uint32())
	}
	got := probe(t, b, shaders.ProbeRound16, vals)
	for i, v := range vals {
		f := math.Float32frombits(v)
		if math.IsNaN(float64(f)) {
			continue
		}
		if want := math.Float32bits(half.F16ToF32(half.F32ToF16(f))); got[i] != want {
			t.Fatalf("round16(%g = %#08x) = %#08x, want %#08x", f, v, got[i], want)
		}
	}
}
