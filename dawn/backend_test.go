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

	"github.com/fusednorm/fusednorm/cpu"
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
	if got := b.Plan(768); got.Profile != info.Profile || got.W != 256 {
		t.Errorf("Plan(768) = %v", got)
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

// ---- EmbedLayerNorm -------------------------------------------------------------------

type embedCase struct {
	name        string
	dt          ops.DType
	B, S, H     int
	V, P, G     int
	segIDs      bool
	mask        bool
	pos         int // 0: none, 1: (1,S), 2: (B,S)
	wantMaskIdx bool
	wantSum     bool
	rule        ops.MaskRule
}

func (c embedCase) String() string {
	return fmt.Sprintf("%s/%v/B%dS%dH%d/G%d-seg%v-mask%v-pos%d-mi%v-sum%v-rule%d",
		c.name, c.dt, c.B, c.S, c.H, c.G, c.segIDs, c.mask, c.pos, c.wantMaskIdx, c.wantSum, c.rule)
}

// halfBits encodes values as f16 bits (values chosen to stay normal and finite).
func halfBits(v []float32) []uint16 {
	out := make([]uint16, len(v))
	for i, x := range v {
		out[i] = f16Round(x)
	}
	return out
}

func randVals(r *rand.Rand, n int, scale, offset float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(offset + scale*r.NormFloat64())
	}
	return v
}

func floatBuf(dt ops.DType, v []float32) ops.Buf {
	switch dt {
	case ops.F32:
		return ops.Buf{DType: dt, F32: v}
	case ops.F16:
		return ops.Buf{DType: dt, U16: halfBits(v)}
	}
	out := make([]uint16, len(v))
	for i, x := range v {
		out[i] = half.F32ToBF16(x)
	}
	return ops.Buf{DType: dt, U16: out}
}

func newBuf(dt ops.DType, n int) ops.Buf {
	if dt == ops.F32 {
		return ops.Buf{DType: dt, F32: make([]float32, n)}
	}
	return ops.Buf{DType: dt, U16: make([]uint16, n)}
}

// poison fills an output with a recognizable pattern so unwritten elements show.
func poison(b ops.Buf) {
	for i := range b.F32 {
		b.F32[i] = float32(math.NaN())
	}
	for i := range b.U16 {
		b.U16[i] = 0x7e7e
	}
}

// ulpTracker keeps the largest ulp difference per output name, logged at the end.
type ulpTracker struct {
	mu  sync.Mutex
	max map[string]uint64
}

func (u *ulpTracker) note(name string, d uint64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.max == nil {
		u.max = map[string]uint64{}
	}
	if d >= u.max[name] {
		u.max[name] = d
	}
}

func (u *ulpTracker) log(t *testing.T) {
	u.mu.Lock()
	defer u.mu.Unlock()
	var lines []string
	for k, v := range u.max {
		lines = append(lines, fmt.Sprintf("%s: %d", k, v))
	}
	sortStrings(lines)
	t.Logf("largest ulp difference GPU vs CPU plan per output: %s", strings.Join(lines, ", "))
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// ordered maps float bits to integers whose order is the floats' order, for ulp distances.
func ordered(bits uint64, width uint) int64 {
	sign := uint64(1) << (width - 1)
	if bits&sign != 0 {
		return -int64(bits &^ sign)
	}
	return int64(bits)
}

// compareBuf checks got == want bit for bit and records the largest ulp distance.
func compareBuf(t *testing.T, u *ulpTracker, name string, got, want ops.Buf) {
	t.Helper()
	n := want.Len()
	var maxd uint64
	bad, first := 0, -1
	for i := 0; i < n; i++ {
		var g, w uint64
		var width uint = 32
		if want.DType == ops.F32 {
			g, w = uint64(math.Float32bits(got.F32[i])), uint64(math.Float32bits(want.F32[i]))
		} else {
			g, w, width = uint64(got.U16[i]), uint64(want.U16[i]), 16
		}
		if g == w {
			continue
		}
		d := ordered(g, width) - ordered(w, width)
		if d < 0 {
			d = -d
		}
		maxd = max(maxd, uint64(d))
		if first < 0 {
			first = i
		}
		bad++
	}
	u.note(name+" "+want.DType.String(), maxd)
	if bad > 0 {
		t.Errorf("%s: %d of %d elements differ (max %d ulp), first at %d: got %v want %v",
			name, bad, n, maxd, first, elem(got, first), elem(want, first))
	}
}

func elem(b ops.Buf, i int) string {
	if b.DType == ops.F32 {
		return fmt.Sprintf("%g(%#08x)", b.F32[i], math.Float32bits(b.F32[i]))
	}
	return fmt.Sprintf("%#04x", b.U16[i])
}

var embedULP, addlnULP ulpTracker

func runEmbedCase(t *testing.T, b *Backend, ref *cpu.Backend, c embedCase, seed uint64) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, uint64(c.H)))
	w := ops.EmbedWeights{
		DType: c.dt, H: c.H, V: c.V, P: c.P, G: c.G,
		Word:    floatBuf(c.dt, randVals(r, c.V*c.H, 1, 0.2)),
		Pos:     floatBuf(c.dt, randVals(r, c.P*c.H, 0.5, 0)),
		Gamma:   floatBuf(c.dt, randVals(r, c.H, 1, 0.5)),
		Beta:    floatBuf(c.dt, randVals(r, c.H, 0.3, 0)),
		Epsilon: 1e-12,
		Rule:    c.rule,
	}
	if c.G > 0 {
		w.Seg = floatBuf(c.dt, randVals(r, c.G*c.H, 0.25, 0))
	}
	n := c.B * c.S
	in := ops.EmbedInputs{B: c.B, S: c.S, IDs: make([]int32, n)}
	for i := range in.IDs {
		in.IDs[i] = int32(r.IntN(c.V))
	}
	if c.segIDs {
		in.SegIDs = make([]int32, n)
		for i := range in.SegIDs {
			in.SegIDs[i] = int32(r.IntN(c.G))
		}
	}
	if c.mask {
		in.Mask = make([]int32, n)
		for i := range in.Mask {
			in.Mask[i] = []int32{1, 1, 1, 0, 2, -1}[r.IntN(6)]
		}
	}
	if c.pos > 0 {
		in.PosBatch = 1
		if c.pos == 2 {
			in.PosBatch = c.B
		}
		in.PosIDs = make([]int32, in.PosBatch*c.S)
		for i := range in.PosIDs {
			in.PosIDs[i] = int32(r.IntN(c.P))
		}
	}
	outs := func() *ops.EmbedOutputs {
		o := &ops.EmbedOutputs{Out: newBuf(c.dt, n*c.H)}
		poison(o.Out)
		if c.wantMaskIdx {
			o.MaskIndex = make([]int32, c.B)
			for i := range o.MaskIndex {
				o.MaskIndex[i] = -7
			}
		}
		if c.wantSum {
			o.Sum = newBuf(c.dt, n*c.H)
			poison(o.Sum)
		}
		return o
	}
	got, want := outs(), outs()

	gop, err := b.PrepareEmbed(&w)
	if err != nil {
		t.Fatalf("%v: PrepareEmbed: %v", c, err)
	}
	defer gop.Close()
	if err := gop.Run(context.Background(), &in, got); err != nil {
		t.Fatalf("%v: Run: %v", c, err)
	}
	cop, err := ref.PrepareEmbed(&w)
	if err != nil {
		t.Fatal(err)
	}
	defer cop.Close()
	if err := cop.Run(context.Background(), &in, want); err != nil {
		t.Fatal(err)
	}
	compareBuf(t, &embedULP, "output", got.Out, want.Out)
	if c.wantSum {
		compareBuf(t, &embedULP, "embedding_sum", got.Sum, want.Sum)
	}
	for i := range want.MaskIndex {
		if got.MaskIndex[i] != want.MaskIndex[i] {
			t.Errorf("%v: mask_index[%d] = %d, want %d", c, i, got.MaskIndex[i], want.MaskIndex[i])
			break
		}
	}
	if t.Failed() {
		t.Fatalf("case %v", c)
	}
}

var sweepH = []int{1, 3, 4, 5, 63, 64, 65, 255, 256, 257, 768, 1024, 4096, 16384}

func TestEmbedSizes(t *testing.T) {
	b := backend(t)
	ref := reference(t, b)
	for _, dt := range []ops.DType{ops.F32, ops.F16} {
		for i, h := range sweepH {
			c := embedCase{name: "sizes", dt: dt, B: 2, S: 3, H: h, V: 7, P: 5, G: 2,
				segIDs: true, mask: true, pos: 2, wantMaskIdx: true, wantSum: true, rule: ops.MaskRule(i % 2)}
			if h >= 4096 {
				c.B, c.S = 1, 2
			}
			runEmbedCase(t, b, ref, c, uint64(i))
		}
	}
	embedULP.log(t)
}

// TestEmbedOptionalInputs covers every segment × position_ids combination, with mask,
// mask_index and embedding_sum rotating so each of their on/off pairings appears (each flag
// set is a separate kernel, and lavapipe compiles each for about a second).
func TestEmbedOptionalInputs(t *testing.T) {
	b := backend(t)
	ref := reference(t, b)
	for _, dt := range []ops.DType{ops.F32, ops.F16} {
		for seg := 0; seg < 3; seg++ {
			for pos := 0; pos < 3; pos++ {
				i := seg*3 + pos
				c := embedCase{name: "optional", dt: dt, B: 3, S: 4, H: 5, V: 9, P: 6,
					segIDs: seg == 2, mask: i%2 == 0, pos: pos, wantMaskIdx: (i/2)%2 == 0 || i == 8,
					wantSum: i%3 != 1, rule: ops.MaskRule((i / 4) % 2)}
				if seg > 0 {
					c.G = 3
				}
				runEmbedCase(t, b, ref, c, uint64(100+i))
			}
		}
	}
	embedULP.log(t)
}

// TestEmbedMaskIndex checks both rules on the SPEC A.7 masks, and a batch larger than H.
func TestEmbedMaskIndex(t *testing.T) {
	b := backend(t)
	masks := [][]int32{{1, 1, 0, 0}, {1, 0, 1, 0}, {0, 1, 1, 1}, {2, 2, 2, 0}, {1, 1, 1, 1}, {0, 0, 0, 0}, {1, -1, 1, 0}}
	want := map[ops.MaskRule][]int32{
		ops.MaskFirstZero: {2, 1, 0, 3, 4, 0, 3},
		ops.MaskCountOnes: {2, 2, 3, 0, 4, 0, 2},
	}
	B, S, H := len(masks), 4, 4
	for rule, exp := range want {
		w := ops.EmbedWeights{DType: ops.F32, H: H, V: 2, P: S, Rule: rule, Epsilon: 1e-12,
			Word: floatBuf(ops.F32, make([]float32, 2*H)), Pos: floatBuf(ops.F32, make([]float32, S*H)),
			Gamma: floatBuf(ops.F32, make([]float32, H)), Beta: floatBuf(ops.F32, make([]float32, H))}
		in := ops.EmbedInputs{B: B, S: S, IDs: make([]int32, B*S)}
		for _, m := range masks {
			in.Mask = append(in.Mask, m...)
		}
		op, err := b.PrepareEmbed(&w)
		if err != nil {
			t.Fatal(err)
		}
		out := ops.EmbedOutputs{Out: newBuf(ops.F32, B*S*H), MaskIndex: make([]int32, B)}
		if err := op.Run(context.Background(), &in, &out); err != nil {
			t.Fatal(err)
		}
		op.Close()
		for i := range exp {
			if out.MaskIndex[i] != exp[i] {
				t.Errorf("rule %d: mask_index = %v, want %v", rule, out.MaskIndex, exp)
				break
			}
		}
	}
}

// TestEmbedGrid2D has more token rows than one dispatch dimension allows.
func TestEmbedGrid2D(t *testing.T) {
	b := backend(t)
	ref := reference(t, b)
	runEmbedCase(t, b, ref, embedCase{name: "grid2d", dt: ops.F16, B: 33000, S: 2, H: 3, V: 50, P: 2, G: 2,
		segIDs: true, mask: true, wantMaskIdx: true, wantSum: true, rule: ops.MaskCountOnes}, 9)
	embedULP.log(t)
}

func TestEmbedBadIDOnDevice(t *testing.T) {
	b := backend(t)
	w := ops.EmbedWeights{DType: ops.F16, H: 3, V: 2, P: 2, Epsilon: 1e-12,
		Word: floatBuf(ops.F16, make([]float32, 6)), Pos: floatBuf(ops.F16, make([]float32, 6)),
		Gamma: floatBuf(ops.F16, make([]float32, 3)), Beta: floatBuf(ops.F16, make([]float32, 3))}
	op, err := b.PrepareEmbed(&w)
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	for _, ids := range [][]int32{{0, 2}, {-1, 0}, {1 << 30, 0}} {
		in := ops.EmbedInputs{B: 1, S: 2, IDs: ids}
		out := ops.EmbedOutputs{Out: newBuf(ops.F16, 6)}
		err := op.Run(context.Background(), &in, &out)
		if !errors.Is(err, ops.ErrInvalidArgument) {
			t.Errorf("ids %v: err = %v, want ErrInvalidArgument", ids, err)
		}
	}
	// The device stays usable.
	out := ops.EmbedOutputs{Out: newBuf(ops.F16, 6)}
	if err := op.Run(context.Background(), &ops.EmbedInputs{B: 1, S: 2, IDs: []int32{1, 0}}, &out); err != nil {
		t.Fatal(err)
	}
}

func TestEmbedClosed(t *testing.T) {
	b := backend(t)
	w := ops.EmbedWeights{DType: ops.F32, H: 1, V: 1, P: 1, Epsilon: 1e-12,
		Word: floatBuf(ops.F32, []float32{1}), Pos: floatBuf(ops.F32, []float32{1}),
		Gamma: floatBuf(ops.F32, []float32{1}), Beta: floatBuf(ops.F32, []float32{1})}
	op, err := b.PrepareEmbed(&w)
	if err != nil {
		t.Fatal(err)
	}
	op.Close()
	out := ops.EmbedOutputs{Out: newBuf(ops.F32, 1)}
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

// ---- AddLayerNorm -----------------------------------------------------------------------

// addlnRows are SPEC §B.2's dtype rows: x1, x2, gamma(=beta), OutT (= bias dtype).
var addlnRows = ops.AddDTypeRows

type addlnCase struct {
	row    [4]ops.DType
	N, D   int
	bias   int // 0 none, 1 (D), 2 (N,D)
	writeX bool
}

func (c addlnCase) String() string {
	return fmt.Sprintf("%v+%v,g%v->%v/N%dD%d/bias%d/x%v", c.row[0], c.row[1], c.row[2], c.row[3], c.N, c.D, c.bias, c.writeX)
}

func runAddLNCase(t *testing.T, b *Backend, ref *cpu.Backend, c addlnCase, seed uint64) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, uint64(c.D)))
	n := c.N * c.D
	mk := func() *ops.AddLN {
		a := &ops.AddLN{N: c.N, D: c.D, Epsilon: 1e-5, Y: newBuf(c.row[3], n),
			Mean: make([]float32, c.N), Rstd: make([]float32, c.N)}
		poison(a.Y)
		if c.writeX {
			a.X = newBuf(c.row[3], n)
			poison(a.X)
		}
		return a
	}
	got, want := mk(), mk()
	x1 := floatBuf(c.row[0], randVals(r, n, 2, 1))
	x2 := floatBuf(c.row[1], randVals(r, n, 1, -0.5))
	gamma := floatBuf(c.row[2], randVals(r, c.D, 1, 0.5))
	beta := floatBuf(c.row[2], randVals(r, c.D, 0.5, 0))
	var bias ops.Buf
	switch c.bias {
	case 1:
		bias = floatBuf(c.row[3], randVals(r, c.D, 0.3, 0.1))
	case 2:
		bias = floatBuf(c.row[3], randVals(r, n, 0.3, 0.1))
	}
	for _, a := range []*ops.AddLN{got, want} {
		a.X1, a.X2, a.Gamma, a.Beta, a.Bias, a.BiasFull = x1, x2, gamma, beta, bias, c.bias == 2
	}
	if err := b.AddLayerNorm(context.Background(), got); err != nil {
		t.Fatalf("%v: %v", c, err)
	}
	if err := ref.AddLayerNorm(context.Background(), want); err != nil {
		t.Fatal(err)
	}
	compareBuf(t, &addlnULP, "y", got.Y, want.Y)
	compareBuf(t, &addlnULP, "mean", ops.Buf{DType: ops.F32, F32: got.Mean}, ops.Buf{DType: ops.F32, F32: want.Mean})
	compareBuf(t, &addlnULP, "rstd", ops.Buf{DType: ops.F32, F32: got.Rstd}, ops.Buf{DType: ops.F32, F32: want.Rstd})
	if c.writeX {
		compareBuf(t, &addlnULP, "x", got.X, want.X)
	}
	if t.Failed() {
		t.Fatalf("case %v", c)
	}
}

// TestAddLNSizes sweeps D with two of the nine dtype rows per size, rotating, so every row
// meets several sizes without compiling all 126 kernels on lavapipe.
func TestAddLNSizes(t *testing.T) {
	b := backend(t)
	ref := reference(t, b)
	for i, d := range sweepH {
		for _, j := range []int{(2 * i) % 9, (2*i + 1) % 9} {
			c := addlnCase{row: addlnRows[j], N: 3, D: d, bias: (i + j) % 3, writeX: (i+j)%4 != 3}
			if d >= 4096 {
				c.N = 2
			}
			runAddLNCase(t, b, ref, c, uint64(100*i+j))
		}
	}
	addlnULP.log(t)
}

// optionCases are the bias/x combinations per dtype row at an odd D (16-bit rows share words).
func optionCases() []addlnCase {
	var cs []addlnCase
	for j, row := range addlnRows {
		cs = append(cs, addlnCase{row: row, N: 5, D: 7, bias: j % 3, writeX: true},
			addlnCase{row: row, N: 5, D: 7, bias: (j + 1) % 3, writeX: false})
	}
	return cs
}

func TestAddLNOptions(t *testing.T) {
	b := backend(t)
	ref := reference(t, b)
	for i, c := range optionCases() {
		runAddLNCase(t, b, ref, c, uint64(i))
	}
	addlnULP.log(t)
}

func TestAddLNGrid2D(t *testing.T) {
	b := backend(t)
	ref := reference(t, b)
	runAddLNCase(t, b, ref, addlnCase{row: addlnRows[1], N: 70000, D: 3, bias: 2, writeX: true}, 5)
	runAddLNCase(t, b, ref, addlnCase{row: addlnRows[0], N: 66000, D: 1, bias: 1, writeX: true}, 6)
	addlnULP.log(t)
}

// TestAddLNSpecA5 is the Ascend sample of SPEC B.7: constant rows give y = beta exactly.
func TestAddLNSpecA5(t *testing.T) {
	b := backend(t)
	x1 := make([]float32, 16)
	x2 := make([]float32, 16)
	for i := 0; i < 8; i++ {
		x1[i], x2[i], x1[8+i], x2[8+i] = 1, 4, 2, -3
	}
	fill := func(v float32) []float32 {
		s := make([]float32, 8)
		for i := range s {
			s[i] = v
		}
		return s
	}
	a := ops.AddLN{N: 2, D: 8, X1: floatBuf(ops.F32, x1), X2: floatBuf(ops.F32, x2),
		Gamma: floatBuf(ops.F32, fill(2)), Beta: floatBuf(ops.F32, fill(0.1)), Bias: floatBuf(ops.F32, fill(0.5)),
		Epsilon: 1e-6, Y: newBuf(ops.F32, 16), Mean: make([]float32, 2), Rstd: make([]float32, 2)}
	if err := b.AddLayerNorm(context.Background(), &a); err != nil {
		t.Fatal(err)
	}
	if a.Mean[0] != 5.5 || a.Mean[1] != -0.5 || math.Float32bits(a.Rstd[0]) != 0x4479ffff || a.Rstd[1] != a.Rstd[0] {
		t.Errorf("mean %v rstd %v (%#08x)", a.Mean, a.Rstd, math.Float32bits(a.Rstd[0]))
	}
	for _, y := range a.Y.F32 {
		if y != float32(0.1) {
			t.Fatalf("y = %v, want 0.1 everywhere", a.Y.F32)
		}
	}
}

// TestConcurrentCalls runs AddLayerNorm and EmbedLayerNorm from parallel subtests.
func TestConcurrentCalls(t *testing.T) {
	b := backend(t)
	ref := reference(t, b)
	t.Run("group", func(t *testing.T) {
		for g := 0; g < 4; g++ {
			t.Run(fmt.Sprint(g), func(t *testing.T) {
				t.Parallel()
				cs := optionCases() // kernels compiled by TestAddLNOptions already
				for i := 0; i < 4; i++ {
					runAddLNCase(t, b, ref, cs[(g*4+i)%len(cs)], uint64(1000+g*10+i))
					runEmbedCase(t, b, ref, embedCase{name: "concurrent", dt: ops.F16, B: 2, S: 3, H: 33,
						V: 5, P: 3, G: 2, segIDs: true, mask: true, wantMaskIdx: true, wantSum: true}, uint64(g*10+i))
				}
			})
		}
	})
}

// BenchmarkAddLN times one call (upload, dispatch, readback) of a BERT-sized AddLayerNorm.
func BenchmarkAddLN(bm *testing.B) {
	for _, dt := range []ops.DType{ops.F32, ops.F16} {
		bm.Run(dt.String(), func(bm *testing.B) {
			b := backend(bm)
			N, D := 4096, 768
			r := rand.New(rand.NewPCG(1, 1))
			a := &ops.AddLN{N: N, D: D, Epsilon: 1e-5,
				X1: floatBuf(dt, randVals(r, N*D, 1, 0)), X2: floatBuf(dt, randVals(r, N*D, 1, 0)),
				Gamma: floatBuf(dt, randVals(r, D, 1, 0)), Beta: floatBuf(dt, randVals(r, D, 1, 0)),
				Y: newBuf(dt, N*D), Mean: make([]float32, N), Rstd: make([]float32, N)}
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
				Word: floatBuf(dt, randVals(r, V*H, 1, 0)), Pos: floatBuf(dt, randVals(r, 512*H, 1, 0)),
				Seg: floatBuf(dt, randVals(r, 2*H, 1, 0)), Gamma: floatBuf(dt, randVals(r, H, 1, 0)),
				Beta: floatBuf(dt, randVals(r, H, 1, 0))}
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
			out := ops.EmbedOutputs{Out: newBuf(dt, B*S*H), MaskIndex: make([]int32, B)}
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
