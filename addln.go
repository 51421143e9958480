package fusednorm

import (
	"context"
	"fmt"
	"math"

	"github.com/fusednorm/fusednorm/internal/ops"
)

const opAdd = "AddLayerNorm"

// AddLayerNormInputs are Ascend AddLayerNorm's inputs (SPEC B.1). Bias is optional: gamma's
// shape (broadcast over rows) or x1's shape (full).
type AddLayerNormInputs struct {
	X1, X2      Tensor // rank 1–8, same shape
	Gamma, Beta Tensor // the trailing rank(gamma) dims of x1
	Bias        Tensor // optional
}

// AddLayerNormOutputs receives the results. A zero field is allocated (X only when
// AdditionalOutput is on); a field the caller sets is checked and written in place (a set X
// counts as wanted).
type AddLayerNormOutputs struct {
	Y    Tensor // shape of x1, OutT
	Mean Tensor // float32, leading dims of x1 then rank(gamma) ones
	Rstd Tensor // float32, as Mean
	X    Tensor // x1 + x2 (+ bias) in OutT
}

// addOutDType returns OutT for a dtype combination, or false when B.2 does not allow it.
func addOutDType(x1, x2, gamma, beta, bias DType, hasBias bool) (DType, bool) {
	if gamma != beta {
		return 0, false
	}
	for _, r := range ops.AddDTypeRows {
		if r[0] == x1 && r[1] == x2 && r[2] == gamma && (!hasBias || r[3] == bias) {
			return r[3], true
		}
	}
	return 0, false
}

// AddLayerNorm computes y = LayerNorm(x1 + x2 (+ bias)) over the trailing rank(gamma) dims,
// with per-row mean and rstd. Options: Epsilon (default 1e-5), AdditionalOutput. On error no
// output has been written.
func (e *Engine) AddLayerNorm(ctx context.Context, in AddLayerNormInputs, out *AddLayerNormOutputs, opts ...OpOption) error {
	if out == nil {
		return &ArgError{Op: opAdd, Tensor: "outputs", Rule: "outputs must not be nil"}
	}
	release, err := e.use()
	if err != nil {
		return err
	}
	defer release()
	c := newOpConfig(DefaultAddEpsilon, opts)
	a, err := checkAddLayerNorm(&in, out, &c)
	if err != nil {
		return err
	}
	if err := e.be.AddLayerNorm(ctx, a); err != nil {
		return fmt.Errorf("fusednorm: %s: %w", opAdd, err)
	}
	return nil
}

// checkAddLayerNorm applies SPEC B.3 in its order and builds the backend call.
func checkAddLayerNorm(in *AddLayerNormInputs, out *AddLayerNormOutputs, c *opConfig) (*ops.AddLN, error) {
	named := []struct {
		name string
		t    *Tensor
	}{{"x1", &in.X1}, {"x2", &in.X2}, {"gamma", &in.Gamma}, {"beta", &in.Beta}}
	for _, t := range named {
		if t.t.IsZero() {
			return nil, argErr(opAdd, t.name, "x1/x2/gamma/beta is required: %s is missing", t.name)
		}
	}
	for _, t := range append(named, struct {
		name string
		t    *Tensor
	}{"bias", &in.Bias}) {
		if err := checkTensor(opAdd, t.name, t.t); err != nil {
			return nil, err
		}
	}
	hasBias := !in.Bias.IsZero()
	outT, ok := addOutDType(in.X1.DType(), in.X2.DType(), in.Gamma.DType(), in.Beta.DType(), in.Bias.DType(), hasBias)
	if !ok {
		return nil, argErr(opAdd, "x1", "unsupported dtype combination: x1 %v, x2 %v, gamma %v, beta %v, bias %v",
			in.X1.DType(), in.X2.DType(), in.Gamma.DType(), in.Beta.DType(), in.Bias.DType())
	}
	x1, g := in.X1.shape, in.Gamma.shape
	if len(x1) < 1 || len(x1) > 8 {
		return nil, argErr(opAdd, "x1", "x1 rank must be in [1,8], got %d", len(x1))
	}
	if len(g) < 1 || len(g) > 8 {
		return nil, argErr(opAdd, "gamma", "gamma rank must be in [1,8], got %d", len(g))
	}
	if len(x1) < len(g) {
		return nil, argErr(opAdd, "gamma", "x1 rank must be >= gamma rank, got %d < %d", len(x1), len(g))
	}
	if !sameShape(in.X2.shape, x1) {
		return nil, argErr(opAdd, "x2", "x1 and x2 must have the same shape, got %v and %v", x1, in.X2.shape)
	}
	if !sameShape(in.Beta.shape, g) {
		return nil, argErr(opAdd, "beta", "gamma and beta must have the same shape, got %v and %v", g, in.Beta.shape)
	}
	lead := len(x1) - len(g)
	for i, d := range g {
		if d != x1[lead+i] {
			return nil, argErr(opAdd, "gamma", "gamma dim %d must equal x1 dim %d, got %d and %d", i, lead+i, d, x1[lead+i])
		}
	}
	for _, d := range x1 {
		if d == 0 {
			return nil, argErr(opAdd, "x1", "empty tensors are not supported: x1 shape %v", x1)
		}
	}
	N, _ := numel(x1[:lead])
	D, _ := numel(g)
	statShape := append(append([]int(nil), x1[:lead]...), ones(len(g))...)
	biasFull := false
	if hasBias {
		switch {
		case sameShape(in.Bias.shape, g):
		case sameShape(in.Bias.shape, x1):
			biasFull = N > 1
		default:
			return nil, argErr(opAdd, "bias", "bias shape must equal gamma or x1, got %v", in.Bias.shape)
		}
	}
	if e := c.eps; math.IsNaN(float64(e)) || math.IsInf(float64(e), 0) {
		return nil, argErr(opAdd, "epsilon", "epsilon must be finite, got %g", e)
	}
	a := &ops.AddLN{N: N, D: D, X1: in.X1.buf, X2: in.X2.buf, Gamma: in.Gamma.buf, Beta: in.Beta.buf,
		Bias: in.Bias.buf, BiasFull: biasFull, Epsilon: c.eps}
	// Check every caller output before allocating any, so a failed call leaves out untouched.
	for _, o := range []struct {
		name  string
		t     *Tensor
		dt    DType
		shape []int
	}{{"y", &out.Y, outT, x1}, {"mean", &out.Mean, Float32, statShape}, {"rstd", &out.Rstd, Float32, statShape}, {"x", &out.X, outT, x1}} {
		if o.t.IsZero() {
			continue
		}
		if _, err := outputBuf(opAdd, o.name, o.t, o.dt, o.shape, true); err != nil {
			if o.name == "mean" || o.name == "rstd" {
				return nil, argErr(opAdd, o.name, "mean/rstd must have shape %v float32, got %v", statShape, o.t)
			}
			return nil, err
		}
	}
	y, _ := outputBuf(opAdd, "y", &out.Y, outT, x1, true)
	mean, _ := outputBuf(opAdd, "mean", &out.Mean, Float32, statShape, true)
	rstd, _ := outputBuf(opAdd, "rstd", &out.Rstd, Float32, statShape, true)
	x, _ := outputBuf(opAdd, "x", &out.X, outT, x1, c.additional)
	a.Y, a.Mean, a.Rstd, a.X = y, mean.F32, rstd.F32, x
	return a, nil
}

func ones(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = 1
	}
	return s
}
