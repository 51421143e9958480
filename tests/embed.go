package tests

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	fn "github.com/fusednorm/fusednorm"
	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/reference"
	"github.com/fusednorm/fusednorm/internal/testkit"
	"github.com/fusednorm/fusednorm/shaders"
)

const embedKernel = "com.microsoft.EmbedLayerNormalization"

var idKeys = []string{"inputIdsT", "segmentIdsT", "maskT", "positionIdsT"}

// embedInputs builds a case's input tensors for one binding and variant.
func embedInputs(c *caseJSON, ty typing, v variant) map[string]fn.Tensor {
	if v.gen == nil {
		return ty.explicit(c)
	}
	in := map[string]fn.Tensor{}
	dt := ty.of("wordEmbeddingT", nil)
	g := v.gen
	B, S, H := intAttr(g, "B"), intAttr(g, "S"), intAttr(g, "H")
	V, P, G := intAttr(g, "V"), intAttr(g, "P"), intAttr(g, "G")
	r := rng(g["seed"].(float64))
	in["wordEmbeddingT"] = makeTensor(dt, []int{V, H}, uniform(r, V*H, -1, 1))
	in["positionEmbeddingT"] = makeTensor(dt, []int{P, H}, uniform(r, P*H, -1, 1))
	gamma := uniform(r, H, 0.5, 1.5)
	for i := range gamma {
		if r.IntN(4) == 0 {
			gamma[i] = -gamma[i]
		}
	}
	in["gammaT"] = makeTensor(dt, []int{H}, gamma)
	in["betaT"] = makeTensor(dt, []int{H}, uniform(r, H, -0.1, 0.1))
	ids := func(n, hi int) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = float64(r.IntN(hi))
		}
		return v
	}
	in["inputIdsT"] = makeTensor(fn.Int32, []int{B, S}, ids(B*S, V))
	if seg := strAttr(g, "segment"); seg != "none" && G > 0 {
		in["segmentEmbeddingT"] = makeTensor(dt, []int{G, H}, uniform(r, G*H, -1, 1))
		if seg == "pair" {
			in["segmentIdsT"] = makeTensor(fn.Int32, []int{B, S}, ids(B*S, G))
		}
	}
	switch strAttr(g, "mask") {
	case "rightpad":
		m := make([]float64, B*S)
		for b := 0; b < B; b++ {
			n := 1 + r.IntN(S)
			for s := 0; s < n; s++ {
				m[b*S+s] = 1
			}
		}
		in["maskT"] = makeTensor(fn.Int32, []int{B, S}, m)
	case "random":
		m := make([]float64, B*S)
		for i := range m {
			m[i] = float64(r.IntN(4) - 1)
		}
		in["maskT"] = makeTensor(fn.Int32, []int{B, S}, m)
	}
	switch strAttr(g, "positionIds") {
	case "bs":
		in["positionIdsT"] = makeTensor(fn.Int32, []int{B, S}, ids(B*S, min(P, S)))
	case "1s":
		in["positionIdsT"] = makeTensor(fn.Int32, []int{1, S}, ids(S, min(P, S)))
	case "bs_any":
		in["positionIdsT"] = makeTensor(fn.Int32, []int{B, S}, ids(B*S, P))
	}
	return in
}

func bufOf(t fn.Tensor) ops.Buf {
	switch t.DType() {
	case fn.Float32:
		return ops.Buf{DType: ops.F32, F32: t.Float32s()}
	case fn.Float16, fn.BFloat16:
		return ops.Buf{DType: t.DType(), U16: t.Bits16()}
	case fn.Int32:
		return ops.Buf{DType: ops.I32, I32: t.Int32s()}
	}
	return ops.Buf{}
}

// embedOps rebuilds the validated op structs from the tensors, for the references.
func embedOps(in map[string]fn.Tensor, attrs map[string]any) (*ops.EmbedWeights, *ops.EmbedInputs) {
	word := in["wordEmbeddingT"]
	w := &ops.EmbedWeights{DType: word.DType(), H: word.Shape()[1], V: word.Shape()[0], P: in["positionEmbeddingT"].Shape()[0],
		Word: bufOf(word), Pos: bufOf(in["positionEmbeddingT"]), Gamma: bufOf(in["gammaT"]), Beta: bufOf(in["betaT"]),
		Epsilon: fn.DefaultEmbedEpsilon}
	if s, ok := in["segmentEmbeddingT"]; ok {
		w.G, w.Seg = s.Shape()[0], bufOf(s)
	}
	if e, ok := attrs["epsilon"].(float64); ok {
		w.Epsilon = float32(e)
	}
	if attrs["mask_index_rule"] == "count_ones" {
		w.Rule = ops.MaskCountOnes
	}
	ids := in["inputIdsT"]
	x := &ops.EmbedInputs{B: ids.Shape()[0], S: ids.Shape()[1], IDs: ids.Int32s()}
	if t, ok := in["segmentIdsT"]; ok {
		x.SegIDs = t.Int32s()
	}
	if t, ok := in["maskT"]; ok {
		x.Mask = t.Int32s()
	}
	if t, ok := in["positionIdsT"]; ok {
		x.PosIDs, x.PosBatch = t.Int32s(), t.Shape()[0]
	}
	return w, x
}

func (s *Suite) embedCases(t *testing.T) {
	f, k := s.casesAndKernel(t, shaders.OpEmbedLayerNorm, embedKernel)
	for i := range f.Cases {
		c := &f.Cases[i]
		for _, binding := range c.Types {
			ty := typing{k.Manifest(), binding}
			for _, v := range variants(c) {
				t.Run(c.Name+"/"+ty.label()+v.suffix, func(t *testing.T) {
					s.embedCase(t, k, c, ty, v)
				})
			}
		}
	}
}

func (s *Suite) embedCase(t *testing.T, k *fn.Kernel, c *caseJSON, ty typing, v variant) {
	s.embedRun(t, k, c, embedInputs(c, ty, v), v.attrs, ty.expectations)
}

// embedRun runs one call of case c with inputs in and attrs through every entry and checks
// it (expect, when not nil, gives the case's golden values).
func (s *Suite) embedRun(t *testing.T, k *fn.Kernel, c *caseJSON, in map[string]fn.Tensor, attrs map[string]any,
	expect func(*caseJSON) ([]expectation, error)) {
	ctx := context.Background()
	want := wantOf(attrs)
	dt := in["wordEmbeddingT"].DType()
	got, err := k.Run(ctx, in, attrs)
	if c.Error != nil {
		checkArgError(t, err, c.Error.Tensor, c.Error.Rule)
		if !s.BindKeyOnly {
			s.embedErrorLeavesOutputs(t, c, in, attrs)
		}
		return
	}
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	s.embedOnDevice(t, in, attrs, got)
	for _, key := range []string{"maskIndexT", "embeddingSumT"} {
		if _, ok := got[key]; ok != slices.Contains(want, key) {
			t.Errorf("output %s present = %v, wanted = %v", key, ok, slices.Contains(want, key))
		}
	}
	checkCaseOutputs(t, c, got)
	w, x := embedOps(in, attrs)
	H := w.H
	skip := map[int]bool{}
	for _, r := range c.OverflowRows {
		skip[r] = true
	}
	skipEl := func(i int) bool { return skip[i/H] }

	// The sequential reference (ORT-exact form) and a float64 one.
	refOut, _ := fn.NewTensor(dt, x.B, x.S, H)
	refSum, _ := fn.NewTensor(dt, x.B, x.S, H)
	refMI, _ := fn.NewTensor(fn.Int32, x.B)
	reference.Embed(w, x, &ops.EmbedOutputs{Out: bufOf(refOut), Sum: bufOf(refSum), MaskIndex: refMI.Int32s()})
	y64 := make([]float64, x.B*x.S*H)
	for tok := 0; tok < x.B*x.S; tok++ {
		row := reference.EmbedRow(w, x, tok)
		_, _, y := reference.Stats64(row, w.Epsilon, func(i int) float32 { return reference.At(w.Gamma, i) }, func(i int) float32 { return reference.At(w.Beta, i) })
		copy(y64[tok*H:], y)
	}
	gmax := maxAbs(in["gammaT"])
	allow := func(_ int, ref float64) float64 { return tol(dt, ref, gmax, H) }

	out := got["outputT"]
	checkClose(t, "output vs float64 reference", out, y64, allow, skipEl)
	checkClose(t, "output vs sequential reference", out, values(refOut), allow, skipEl)
	if mi, ok := got["maskIndexT"]; ok {
		checkExact(t, "mask_index", mi, values(refMI))
	}
	if sum, ok := got["embeddingSumT"]; ok {
		if len(skip) == 0 {
			checkExact(t, "embedding_sum", sum, values(refSum))
		} else {
			checkClose(t, "embedding_sum", sum, values(refSum), func(int, float64) float64 { return 0 }, skipEl)
		}
	}
	if len(c.OverflowRows) > 0 && s.Engine.Info().Backend == "cpu" {
		for _, r := range c.OverflowRows {
			for i := r * H; i < (r+1)*H; i++ {
				if v := out.At(i); !math.IsNaN(v) && !math.IsInf(v, 0) {
					t.Errorf("overflow row %d: output[%d] = %g, want non-finite (IEEE on the CPU)", r, i, v)
					break
				}
			}
		}
	}

	// Golden values of test.json.
	var exps []expectation
	if expect != nil {
		if exps, err = expect(c); err != nil {
			t.Fatal(err)
		}
	}
	if len(exps) > 0 {
		refs := map[string]fn.Tensor{"outputT": refOut, "embeddingSumT": refSum, "maskIndexT": refMI}
		for _, e := range exps {
			g, ok := got[e.key]
			if !ok {
				t.Errorf("expected output %s is absent", e.key)
				continue
			}
			g, ref := slice(g, e.lo, e.hi), slice(refs[e.key], e.lo, e.hi)
			if e.key == "outputT" {
				checkClose(t, "output vs test.json", g, e.vals, allow, nil)
				if dt == fn.Float32 {
					checkExact(t, "sequential reference vs test.json", ref, e.vals)
				}
			} else {
				checkExact(t, e.key+" vs test.json", g, e.vals)
			}
		}
	}

	s.crossCheck(t, "EmbedLayerNorm", dt, got, H, skip, func(e *fn.Engine) (map[string]fn.Tensor, error) {
		rk, err := e.GetKernel(embedKernel, 1)
		if err != nil {
			return nil, err
		}
		return rk.Run(ctx, in, attrs)
	})
	if x.B*x.S*H <= 1<<16 && !s.BindKeyOnly {
		s.embedPrepared(t, in, attrs, want, got)
	}
}

// embedPrepared runs the case again through the prepared API with caller-allocated outputs
// and expects the generic entry's bits.
func (s *Suite) embedPrepared(t *testing.T, in map[string]fn.Tensor, attrs map[string]any, want []string, got map[string]fn.Tensor) {
	var opts []fn.OpOption
	if e, ok := attrs["epsilon"].(float64); ok {
		opts = append(opts, fn.Epsilon(float32(e)))
	}
	if attrs["mask_index_rule"] == "count_ones" {
		opts = append(opts, fn.WithMaskRule(fn.MaskIndexCountOnes))
	}
	op, err := s.Engine.NewEmbedLayerNorm(fn.EmbedWeights{Word: in["wordEmbeddingT"], Position: in["positionEmbeddingT"],
		Segment: in["segmentEmbeddingT"], Gamma: in["gammaT"], Beta: in["betaT"]}, opts...)
	if err != nil {
		t.Fatalf("prepared: %v", err)
	}
	defer op.Close()
	out := fn.EmbedOutputs{Output: poisonedLike(got["outputT"])}
	if slices.Contains(want, "maskIndexT") {
		out.MaskIndex = poisonedLike(got["maskIndexT"])
	}
	if slices.Contains(want, "embeddingSumT") {
		out.EmbeddingSum = poisonedLike(got["embeddingSumT"])
	}
	err = op.Run(context.Background(), fn.EmbedInputs{InputIDs: in["inputIdsT"], SegmentIDs: in["segmentIdsT"], Mask: in["maskT"], PositionIDs: in["positionIdsT"]}, &out)
	if err != nil {
		t.Fatalf("prepared run: %v", err)
	}
	for key, o := range map[string]fn.Tensor{"outputT": out.Output, "maskIndexT": out.MaskIndex, "embeddingSumT": out.EmbeddingSum} {
		if o.IsZero() {
			continue
		}
		if d := ulpDiff(o, got[key], 1, nil); d != 0 {
			t.Errorf("prepared %s differs from the generic entry by %d ulp", key, d)
		}
	}
}

// embedErrorLeavesOutputs checks a failing call through the prepared API leaves caller
// outputs as they were.
func (s *Suite) embedErrorLeavesOutputs(t *testing.T, c *caseJSON, in map[string]fn.Tensor, attrs map[string]any) {
	ids, ok := in["inputIdsT"]
	w, wok := in["wordEmbeddingT"]
	if !ok || !wok || len(ids.Shape()) != 2 || len(w.Shape()) != 2 || ids.DType() != fn.Int32 {
		return
	}
	B, S, H := ids.Shape()[0], ids.Shape()[1], w.Shape()[1]
	if B*S*H == 0 || w.DType() != fn.Float32 && w.DType() != fn.Float16 {
		return
	}
	poison := func(dt fn.DType, shape ...int) fn.Tensor {
		tt, _ := fn.NewTensor(dt, shape...)
		for i := range tt.Float32s() {
			tt.Float32s()[i] = 1234.5
		}
		for i := range tt.Bits16() {
			tt.Bits16()[i] = 0x7bff
		}
		for i := range tt.Int32s() {
			tt.Int32s()[i] = -77
		}
		return tt
	}
	out := fn.EmbedOutputs{Output: poison(w.DType(), B, S, H), MaskIndex: poison(fn.Int32, B), EmbeddingSum: poison(w.DType(), B, S, H)}
	before := []fn.Tensor{clone(out.Output), clone(out.MaskIndex), clone(out.EmbeddingSum)}
	var opts []fn.OpOption
	if e, ok := attrs["epsilon"].(float64); ok {
		opts = append(opts, fn.Epsilon(float32(e)))
	}
	err := s.Engine.EmbedLayerNormOnce(context.Background(), fn.EmbedWeights{Word: w, Position: in["positionEmbeddingT"],
		Segment: in["segmentEmbeddingT"], Gamma: in["gammaT"], Beta: in["betaT"]},
		fn.EmbedInputs{InputIDs: ids, SegmentIDs: in["segmentIdsT"], Mask: in["maskT"], PositionIDs: in["positionIdsT"]}, &out, opts...)
	if err == nil {
		t.Errorf("typed API accepted what the generic entry refused")
		return
	}
	for i, o := range []fn.Tensor{out.Output, out.MaskIndex, out.EmbeddingSum} {
		if d := ulpDiff(o, before[i], 1, nil); d != 0 {
			t.Errorf("failed call wrote output %d", i)
		}
	}
}

// checkArgError checks err is an ArgError for tensor whose rule contains want.
func checkArgError(t *testing.T, err error, tensor, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want %s: %q", tensor, want)
	}
	if !errors.Is(err, fn.ErrInvalidArgument) {
		t.Errorf("error %q does not wrap ErrInvalidArgument", err)
	}
	var ae *fn.ArgError
	if !errors.As(err, &ae) {
		t.Fatalf("error %q is not an *ArgError", err)
	}
	if ae.Tensor != tensor || !strings.Contains(ae.Rule, want) {
		t.Errorf("error = %q (tensor %q), want tensor %q and rule containing %q", err, ae.Tensor, tensor, want)
	}
}

func zerosLike(t fn.Tensor) fn.Tensor {
	z, _ := fn.NewTensor(t.DType(), t.Shape()...)
	return z
}

// poisonedLike is a tensor like t holding testkit.Poison's pattern, so that an element a
// kernel leaves unwritten shows.
func poisonedLike(t fn.Tensor) fn.Tensor {
	p := zerosLike(t)
	testkit.Poison(bufOf(p))
	return p
}

func clone(t fn.Tensor) fn.Tensor {
	c := zerosLike(t)
	copy(c.Float32s(), t.Float32s())
	copy(c.Bits16(), t.Bits16())
	copy(c.Int32s(), t.Int32s())
	return c
}

func slice(t fn.Tensor, lo, hi int) fn.Tensor {
	if hi < 0 {
		return t
	}
	switch t.DType() {
	case fn.Float32:
		return fn.FromFloat32(t.Float32s()[lo:hi], hi-lo)
	case fn.Float16:
		return fn.FromFloat16Bits(t.Bits16()[lo:hi], hi-lo)
	case fn.BFloat16:
		return fn.FromBFloat16Bits(t.Bits16()[lo:hi], hi-lo)
	}
	return fn.FromInt32(t.Int32s()[lo:hi], hi-lo)
}
