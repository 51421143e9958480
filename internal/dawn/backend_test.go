//go:build cgo

package dawn

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fusednorm/fusednorm/internal/cpu"
	"github.com/fusednorm/fusednorm/internal/dawnrt"
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
	i := b.dev.Info()
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

// TestEmbedBadIDOnDevice: ids in device tensors are checked by the kernel (spec §A.2a): an
// id out of range fails the call (or, for a call that does not wait, the next wait) wrapping
// ErrInvalidArgument and naming the tensor; the device stays usable. Host ids are the
// caller's to check before the call (the root package does).
func TestEmbedBadIDOnDevice(t *testing.T) {
	b := backend(t)
	w := ops.EmbedWeights{DType: ops.F16, H: 3, V: 2, P: 2, G: 2, Epsilon: 1e-12,
		Word: testkit.Float(ops.F16, make([]float32, 6)), Pos: testkit.Float(ops.F16, make([]float32, 6)),
		Seg:   testkit.Float(ops.F16, make([]float32, 6)),
		Gamma: testkit.Float(ops.F16, make([]float32, 3)), Beta: testkit.Float(ops.F16, make([]float32, 3))}
	op, err := b.PrepareEmbed(&w)
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	ctx := context.Background()
	dev := func(v []int32) ops.DeviceMem {
		m, err := b.NewDeviceMem(ops.I32, len(v))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.FreeDevice(m) })
		if err := b.WriteDevice(m, bytesOf(v)); err != nil {
			t.Fatal(err)
		}
		return m
	}
	good := []int32{1, 0}
	for _, tc := range []struct {
		ids, seg, pos []int32
		bad           string
	}{
		{ids: []int32{0, 2}, bad: "input_ids"},
		{ids: []int32{-1, 0}, bad: "input_ids"},
		{ids: []int32{1 << 30, 0}, bad: "input_ids"},
		{ids: good, seg: []int32{0, 2}, bad: "segment_ids"},
		{ids: good, pos: []int32{0, -3}, bad: "position_ids"},
		{ids: []int32{5, 0}, seg: []int32{7, 0}, bad: "input_ids and segment_ids"},
	} {
		in := ops.EmbedInputs{B: 1, S: 2, IDsDev: dev(tc.ids)}
		if tc.seg != nil {
			in.SegIDsDev = dev(tc.seg)
		}
		if tc.pos != nil {
			in.PosIDsDev, in.PosBatch = dev(tc.pos), 1
		}
		out := ops.EmbedOutputs{Out: testkit.Zeros(ops.F16, 6)}
		// An *ArgError on the first tensor at fault, its rule naming each one, in the report
		// that names the call.
		names := func(err error) bool {
			var ae *ops.ArgError
			if !errors.As(err, &ae) || ae.Tensor != strings.Fields(tc.bad)[0] || !strings.Contains(ae.Rule, "input index out of range") {
				return false
			}
			for _, n := range strings.Split(tc.bad, " and ") {
				if !strings.Contains(ae.Rule, "an id of "+n+" is outside") {
					return false
				}
			}
			return true
		}
		err := op.Run(ctx, &in, &out)
		if !errors.Is(err, ops.ErrInvalidArgument) || !names(err) || !strings.Contains(err.Error(), "EmbedLayerNorm (call ") {
			t.Errorf("ids %v, segment ids %v, position ids %v: err = %v, want an *ArgError naming %s", tc.ids, tc.seg, tc.pos, err, tc.bad)
		}
		// With a device output the call does not wait: the next wait reports it.
		out = ops.EmbedOutputs{Out: ops.Buf{DType: ops.F16, Dev: mustDevice(t, b, ops.F16, 6)}}
		if err := op.Run(ctx, &in, &out); err != nil {
			t.Errorf("a call that does not wait: %v", err)
		}
		if err := b.Sync(ctx); !errors.Is(err, ops.ErrInvalidArgument) || !names(err) {
			t.Errorf("Sync after bad device ids %v: %v", tc.ids, err)
		}
	}
	// The device stays usable, with device ids and host ones.
	out := ops.EmbedOutputs{Out: testkit.Zeros(ops.F16, 6)}
	if err := op.Run(ctx, &ops.EmbedInputs{B: 1, S: 2, IDsDev: dev(good)}, &out); err != nil {
		t.Fatal(err)
	}
	if err := op.Run(ctx, &ops.EmbedInputs{B: 1, S: 2, IDs: good}, &out); err != nil {
		t.Fatal(err)
	}
	if err := b.Sync(ctx); err != nil {
		t.Fatal(err)
	}
}

// mustDevice is a device tensor of n elements, freed when the test ends.
func mustDevice(t *testing.T, b *Backend, dt ops.DType, n int) ops.DeviceMem {
	t.Helper()
	m, err := b.NewDeviceMem(dt, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.FreeDevice(m) })
	return m
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
	fake := &Backend{limits: dawnrt.Limits{MaxStorageBufferBindingSize: 1 << 20, MaxBufferSize: 1 << 30}}
	err := fake.checkBinding("PrepareEmbed", "word_embedding", 1<<21)
	if !errors.Is(err, ops.ErrNotSupported) || !strings.Contains(err.Error(), "word_embedding") ||
		!strings.Contains(err.Error(), "maxStorageBufferBindingSize") {
		t.Fatalf("err = %v", err)
	}
	if err := fake.checkBinding("PrepareEmbed", "word_embedding", 1<<20); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkAddLN times one call (upload, dispatch, read-back) of a BERT-sized AddLayerNorm.
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
			gpu, ctx := timeGPU(bm)
			for bm.Loop() {
				if err := b.AddLayerNorm(ctx, a); err != nil {
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
			gpu, ctx := timeGPU(bm)
			for bm.Loop() {
				if err := op.Run(ctx, &in, &out); err != nil {
					bm.Fatal(err)
				}
				gpu.add()
			}
			gpu.report()
		})
	}
}

// gpuTimer sums the kernel times of a benchmark's calls (ops.KernelClock: timestamp queries
// around the dispatch), reported as gpu-µs/op next to the round-trip time; nothing where the
// device has no timestamp queries.
type gpuTimer struct {
	bm    *testing.B
	clock ops.KernelClock
	total time.Duration
	n     int
}

// timeGPU returns the timer and the context that times each call into it.
func timeGPU(bm *testing.B) (*gpuTimer, context.Context) {
	g := &gpuTimer{bm: bm, clock: ops.KernelClock{Repeat: 1}}
	return g, ops.WithKernelClock(context.Background(), &g.clock)
}

func (g *gpuTimer) add() {
	if g.clock.PerCall > 0 {
		g.total += g.clock.PerCall
		g.n++
	}
	g.clock.PerCall = 0
}

func (g *gpuTimer) report() {
	if g.n > 0 {
		g.bm.ReportMetric(float64(g.total.Nanoseconds())/float64(g.n)/1e3, "gpu-µs/op")
	}
}

// TestKernelClock times both ops with ops.KernelClock: PerCall is set where the device has
// timestamp queries (zero elsewhere), and a kernel dispatched Repeat times in the timed pass
// gives the bits of one untimed call.
func TestKernelClock(t *testing.T) {
	b := backend(t)
	timestamps := b.dev.HasFeature("TimestampQuery")
	c := testkit.AddLNCase{Row: ops.AddDTypeRows[3], N: 9, D: 301, Bias: 1, WriteX: true, Seed: 41}
	want, got := c.Problem(), c.Problem()
	if err := b.AddLayerNorm(context.Background(), want); err != nil {
		t.Fatal(err)
	}
	clock := ops.KernelClock{Repeat: 4}
	if err := b.AddLayerNorm(ops.WithKernelClock(context.Background(), &clock), got); err != nil {
		t.Fatal(err)
	}
	t.Logf("AddLayerNorm %v: %v per call (TimestampQuery %v)", c, clock.PerCall, timestamps)
	if timestamps != (clock.PerCall > 0) {
		t.Errorf("TimestampQuery %v, PerCall %v", timestamps, clock.PerCall)
	}
	testkit.CompareBufs(t, nil, "y", got.Y, want.Y)
	testkit.CompareBufs(t, nil, "x", got.X, want.X)
	testkit.CompareBufs(t, nil, "mean", testkit.Float(ops.F32, got.Mean), testkit.Float(ops.F32, want.Mean))

	e := testkit.EmbedCase{Name: "clock", DType: ops.F16, B: 2, S: 5, H: 37, V: 11, P: 5, G: 2, SegIDs: true,
		Mask: true, WantMaskIndex: true, WantSum: true, Seed: 3}
	w, in := e.Problem()
	op, err := b.PrepareEmbed(w)
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	wantE, gotE := e.Outputs(), e.Outputs()
	if err := op.Run(context.Background(), in, wantE); err != nil {
		t.Fatal(err)
	}
	clock = ops.KernelClock{Repeat: 3}
	if err := op.Run(ops.WithKernelClock(context.Background(), &clock), in, gotE); err != nil {
		t.Fatal(err)
	}
	if timestamps != (clock.PerCall > 0) {
		t.Errorf("EmbedLayerNorm: TimestampQuery %v, PerCall %v", timestamps, clock.PerCall)
	}
	testkit.CompareBufs(t, nil, "output", gotE.Out, wantE.Out)
	testkit.CompareBufs(t, nil, "embedding_sum", gotE.Sum, wantE.Sum)
	testkit.CompareBufs(t, nil, "mask_index", ops.Buf{DType: ops.I32, I32: gotE.MaskIndex}, ops.Buf{DType: ops.I32, I32: wantE.MaskIndex})
}

// TestConfigLibraryAndAdapter: New takes the library and adapter it is given, and says so
// when they are not there; dawn's ListAdapters is the runtime's list.
func TestConfigLibraryAndAdapter(t *testing.T) {
	b := backend(t)
	list, err := ListAdapters("")
	if err != nil {
		t.Fatal(err)
	}
	rt, err := dawnrt.ListAdapters("")
	if err != nil || len(rt) != len(list) || len(list) == 0 || list[0] != rt[0] {
		t.Fatalf("ListAdapters: %v, the runtime's %v (%v)", list, rt, err)
	}
	if info := b.Info(); info.Device != list[0].String() {
		t.Errorf("the default backend runs on %s, the first adapter listed is %s", info.Device, list[0])
	}
	if _, err := New(Config{Adapter: len(list) + 1}); !errors.Is(err, ops.ErrUnavailable) ||
		!strings.Contains(err.Error(), fmt.Sprintf("lists %d Vulkan adapter", len(list))) {
		t.Errorf("an adapter past the list: %v", err)
	}
	if _, err := New(Config{Library: "/nonexistent/libwebgpu_dawn.so"}); !errors.Is(err, ops.ErrUnavailable) ||
		!strings.Contains(err.Error(), "/nonexistent/libwebgpu_dawn.so") {
		t.Errorf("a missing library: %v", err)
	}
	if lib := b.Info().Library; !strings.HasPrefix(lib, "/") || lib != b.dev.Library() {
		t.Errorf("Info().Library = %q", lib)
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
