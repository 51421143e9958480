package tests

import (
	"context"
	"math"
	"slices"
	"testing"

	fn "github.com/fusednorm/fusednorm"
	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/reference"
	"github.com/fusednorm/fusednorm/shaders"
)

const addKernel = "ascend.AddLayerNorm"

// addInputs builds a case's inputs for one binding and variant.
func addInputs(c *caseJSON, ty typing, v variant) map[string]fn.Tensor {
	if v.gen == nil {
		return ty.explicit(c)
	}
	x1t, x2t, gt, outT := ty.of("x1T", nil), ty.of("x2T", nil), ty.of("gammaT", nil), ty.of("biasT", nil)
	in := map[string]fn.Tensor{}
	g := v.gen
	var shape []int
	for _, d := range g["shape"].([]any) {
		shape = append(shape, int(d.(float64)))
	}
	gr := intAttr(g, "gammaRank")
	r := rng(g["seed"].(float64))
	n, d := 1, 1
	for i, v := range shape {
		if i < len(shape)-gr {
			n *= v
		} else {
			d *= v
		}
	}
	gshape := shape[len(shape)-gr:]
	in["x1T"] = makeTensor(x1t, shape, uniform(r, n*d, -1.5, 2.5))
	in["x2T"] = makeTensor(x2t, shape, uniform(r, n*d, -1, 1))
	gamma := uniform(r, d, 0.5, 1.5)
	for i := range gamma {
		if r.IntN(4) == 0 {
			gamma[i] = -gamma[i]
		}
	}
	in["gammaT"] = makeTensor(gt, gshape, gamma)
	in["betaT"] = makeTensor(gt, gshape, uniform(r, d, -0.2, 0.2))
	switch strAttr(g, "bias") {
	case "gamma":
		in["biasT"] = makeTensor(outT, gshape, uniform(r, d, -0.3, 0.3))
	case "full":
		in["biasT"] = makeTensor(outT, shape, uniform(r, n*d, -0.3, 0.3))
	}
	return in
}

// addOps rebuilds the validated op struct (with fresh outputs) for the references.
func addOps(in map[string]fn.Tensor, attrs map[string]any, outT fn.DType) (*ops.AddLN, map[string]fn.Tensor) {
	x1, g := in["x1T"], in["gammaT"]
	d, n := g.Len(), x1.Len()/g.Len()
	a := &ops.AddLN{N: n, D: d, X1: bufOf(x1), X2: bufOf(in["x2T"]), Gamma: bufOf(g), Beta: bufOf(in["betaT"]), Epsilon: fn.DefaultAddEpsilon}
	if b, ok := in["biasT"]; ok {
		a.Bias, a.BiasFull = bufOf(b), b.Len() == n*d && n > 1
	}
	if e, ok := attrs["epsilon"].(float64); ok {
		a.Epsilon = float32(e)
	}
	y, _ := fn.NewTensor(outT, n, d)
	x, _ := fn.NewTensor(outT, n, d)
	mean, _ := fn.NewTensor(fn.Float32, n)
	rstd, _ := fn.NewTensor(fn.Float32, n)
	a.Y, a.X, a.Mean, a.Rstd = bufOf(y), bufOf(x), mean.Float32s(), rstd.Float32s()
	return a, map[string]fn.Tensor{"yT": y, "xT": x, "meanT": mean, "rstdT": rstd}
}

func (s *Suite) addCases(t *testing.T) {
	f, k := s.casesAndKernel(t, shaders.OpAddLayerNorm, addKernel)
	for i := range f.Cases {
		c := &f.Cases[i]
		for _, binding := range c.Types {
			ty := typing{k.Manifest(), binding}
			for _, v := range variants(c) {
				t.Run(c.Name+"/"+ty.label()+v.suffix, func(t *testing.T) { s.addCase(t, k, c, ty, v) })
			}
		}
	}
}

func (s *Suite) addCase(t *testing.T, k *fn.Kernel, c *caseJSON, ty typing, v variant) {
	s.addRun(t, k, c, addInputs(c, ty, v), v.attrs, ty.expectations)
}

// addRun runs one call of case c with inputs in and attrs through every entry and checks it
// (expect, when not nil, gives the case's golden values).
func (s *Suite) addRun(t *testing.T, k *fn.Kernel, c *caseJSON, in map[string]fn.Tensor, attrs map[string]any,
	expect func(*caseJSON) ([]expectation, error)) {
	ctx := context.Background()
	if c.Outputs != nil && s.BindKeyOnly {
		// The bind-key entry allocates its outputs, with the manifest's shapes: the call
		// the typed API refuses for the caller's wrong shapes succeeds here.
		got, err := k.Run(ctx, in, attrs)
		if err != nil {
			t.Fatalf("run: %v", err)
		}
		for key, shape := range c.Outputs {
			if g, ok := got[key]; !ok || slices.Equal(g.Shape(), shape) {
				t.Errorf("output %s: got %v, not the manifest's shape", key, g)
			}
		}
		return
	}
	if c.Outputs != nil { // caller-allocated outputs of the wrong shape: the typed API
		var out fn.AddLayerNormOutputs
		for key, shape := range c.Outputs {
			tt, _ := fn.NewTensor(fn.Float32, shape...)
			switch key {
			case "yT":
				out.Y = tt
			case "meanT":
				out.Mean = tt
			case "rstdT":
				out.Rstd = tt
			}
		}
		before := map[string]fn.Tensor{"y": clone(out.Y), "mean": clone(out.Mean), "rstd": clone(out.Rstd)}
		err := s.Engine.AddLayerNorm(ctx, fn.AddLayerNormInputs{X1: in["x1T"], X2: in["x2T"], Gamma: in["gammaT"], Beta: in["betaT"], Bias: in["biasT"]}, &out)
		checkArgError(t, err, c.Error.Tensor, c.Error.Rule)
		for name, o := range map[string]fn.Tensor{"y": out.Y, "mean": out.Mean, "rstd": out.Rstd} {
			if !o.IsZero() && ulpDiff(o, before[name], 1, nil) != 0 {
				t.Errorf("failed call wrote %s", name)
			}
		}
		return
	}
	got, err := k.Run(ctx, in, attrs)
	if c.Error != nil {
		checkArgError(t, err, c.Error.Tensor, c.Error.Rule)
		return
	}
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	s.addOnDevice(t, in, attrs, got)
	additional, _ := attrs["additional_output"].(bool)
	if _, ok := got["xT"]; ok != additional {
		t.Errorf("x present = %v, additional_output = %v", ok, additional)
	}
	checkCaseOutputs(t, c, got)
	y := got["yT"]
	outT := y.DType()
	a, ref := addOps(in, attrs, outT)
	reference.AddLayerNorm(a)
	D := a.D
	if !slices.Equal(got["meanT"].Shape(), got["rstdT"].Shape()) {
		t.Errorf("mean shape %v, rstd shape %v", got["meanT"].Shape(), got["rstdT"].Shape())
	}
	gmax := maxAbs(in["gammaT"])
	allowY := func(_ int, r float64) float64 { return tol(outT, r, gmax, D) }
	allowStat := func(_ int, r float64) float64 { return 1e-6 + 2e-5*math.Abs(r) }
	// Golden values of test.json.
	var exps []expectation
	if expect != nil {
		if exps, err = expect(c); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range exps {
		g, ok := got[e.key]
		if !ok {
			t.Errorf("expected output %s is absent", e.key)
			continue
		}
		g, r := slice(g, e.lo, e.hi), slice(ref[e.key], e.lo, e.hi)
		switch e.key {
		case "yT":
			checkClose(t, "y vs test.json", g, e.vals, allowY, nil)
		case "xT":
			checkExact(t, "x vs test.json", g, e.vals)
		default:
			checkClose(t, e.key+" vs test.json", g, e.vals, allowStat, nil)
		}
		checkExact(t, "sequential reference "+e.key+" vs test.json", r, e.vals)
	}
	if len(c.Finite) > 0 { // overflowing sums: the references' statistics do not apply
		return
	}
	// float64 reference over the same f32 sums.
	y64 := make([]float64, a.N*D)
	m64 := make([]float64, a.N)
	r64 := make([]float64, a.N)
	for r := 0; r < a.N; r++ {
		sum := reference.AddRow(a, r)
		m, rs, yr := reference.Stats64(sum, a.Epsilon, func(i int) float32 { return reference.At(a.Gamma, i) }, func(i int) float32 { return reference.At(a.Beta, i) })
		m64[r], r64[r] = m, rs
		copy(y64[r*D:], yr)
	}
	checkClose(t, "y vs float64 reference", y, y64, allowY, nil)
	checkClose(t, "y vs sequential reference", y, values(ref["yT"]), allowY, nil)
	checkClose(t, "mean vs float64 reference", got["meanT"], m64, allowStat, nil)
	checkClose(t, "rstd vs float64 reference", got["rstdT"], r64, allowStat, nil)
	if x, ok := got["xT"]; ok {
		checkExact(t, "x", x, values(ref["xT"]))
	}
	s.crossCheck(t, "AddLayerNorm", outT, got, D, nil, func(e *fn.Engine) (map[string]fn.Tensor, error) {
		rk, err := e.GetKernel(addKernel, 1)
		if err != nil {
			return nil, err
		}
		return rk.Run(ctx, in, attrs)
	})
}
