package fusednorm

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"

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
	if err := e.use(); err != nil {
		return err
	}
	defer e.done()
	c := newOpConfig(DefaultAddEpsilon, opts)
	// The backend call comes from a pool: its pointer escapes through the Backend
	// interface, and a call must not allocate.
	a := addLNs.Get().(*ops.AddLN)
	err := checkAddLayerNorm(&in, out, &c, a)
	if err == nil {
		err = e.checkAddDevice(a)
	}
	if err == nil {
		if err = e.be.AddLayerNorm(ctx, a); err != nil {
			err = fmt.Errorf("fusednorm: %s: %w", opAdd, err)
		}
	}
	*a = ops.AddLN{} // keep no reference to the caller's data
	addLNs.Put(a)
	return err
}

var addLNs = sync.Pool{New: func() any { return new(ops.AddLN) }}

// checkAddLayerNorm applies SPEC B.3 in its order and builds the backend call in a.
func checkAddLayerNorm(in *AddLayerNormInputs, out *AddLayerNormOutputs, c *opConfig, a *ops.AddLN) error {
	// Names and tensors in separate arrays: escape analysis does not tell a struct's fields
	// apart, so a name that leaks into an error would take the tensor pointers (and the
	// caller's in, out and the shapes built here) to the heap with it.
	names := [...]string{"x1", "x2", "gamma", "beta", "bias"}
	tensors := [...]*Tensor{&in.X1, &in.X2, &in.Gamma, &in.Beta, &in.Bias}
	for i, t := range tensors[:4] {
		if t.IsZero() {
			return argErr(opAdd, names[i], "x1/x2/gamma/beta is required: %s is missing", names[i])
		}
	}
	for i, t := range tensors {
		if err := checkTensor(opAdd, names[i], t); err != nil {
			return err
		}
	}
	hasBias := !in.Bias.IsZero()
	outT, ok := addOutDType(in.X1.DType(), in.X2.DType(), in.Gamma.DType(), in.Beta.DType(), in.Bias.DType(), hasBias)
	if !ok {
		return argErr(opAdd, "x1", "unsupported dtype combination: x1 %v, x2 %v, gamma %v, beta %v, bias %v",
			in.X1.DType(), in.X2.DType(), in.Gamma.DType(), in.Beta.DType(), in.Bias.DType())
	}
	x1, g := in.X1.shape, in.Gamma.shape
	if len(x1) < 1 || len(x1) > 8 {
		return argErr(opAdd, "x1", "x1 rank must be in [1,8], got %d", len(x1))
	}
	if len(g) < 1 || len(g) > 8 {
		return argErr(opAdd, "gamma", "gamma rank must be in [1,8], got %d", len(g))
	}
	if len(x1) < len(g) {
		return argErr(opAdd, "gamma", "x1 rank must be >= gamma rank, got %d < %d", len(x1), len(g))
	}
	if !sameShape(in.X2.shape, x1) {
		return argErr(opAdd, "x2", "x1 and x2 must have the same shape, got %v and %v", x1, in.X2.shape)
	}
	if !sameShape(in.Beta.shape, g) {
		return argErr(opAdd, "beta", "gamma and beta must have the same shape, got %v and %v", g, in.Beta.shape)
	}
	lead := len(x1) - len(g)
	for i, d := range g {
		if d != x1[lead+i] {
			return argErr(opAdd, "gamma", "gamma dim %d must equal x1 dim %d, got %d and %d", i, lead+i, d, x1[lead+i])
		}
	}
	for _, d := range x1 {
		if d == 0 {
			return argErr(opAdd, "x1", "empty tensors are not supported: x1 shape %v", x1)
		}
	}
	N, _ := numel(x1[:lead])
	D, _ := numel(g)
	var statBuf [8]int // rank(x1) ≤ 8: the shape stays on the stack
	statShape := append(statBuf[:0], x1[:lead]...)
	for range g {
		statShape = append(statShape, 1)
	}
	biasFull := false
	if hasBias {
		switch {
		case sameShape(in.Bias.shape, g):
		case sameShape(in.Bias.shape, x1):
			biasFull = N > 1
		default:
			return argErr(opAdd, "bias", "bias shape must equal gamma or x1, got %v", in.Bias.shape)
		}
	}
	if e := c.eps; math.IsNaN(float64(e)) || math.IsInf(float64(e), 0) {
		return argErr(opAdd, "epsilon", "epsilon must be finite, got %g", e)
	}
	*a = ops.AddLN{N: N, D: D, X1: in.X1.buf, X2: in.X2.buf, Gamma: in.Gamma.buf, Beta: in.Beta.buf,
		Bias: in.Bias.buf, BiasFull: biasFull, Epsilon: c.eps}
	// Check every caller output before allocating any, so a failed call leaves out untouched.
	outNames := [...]string{"y", "mean", "rstd", "x"}
	outs := [...]*Tensor{&out.Y, &out.Mean, &out.Rstd, &out.X}
	outDTypes := [...]DType{outT, Float32, Float32, outT}
	outShapes := [...][]int{x1, statShape, statShape, x1}
	for i, t := range outs {
		if t.IsZero() {
			continue
		}
		if _, err := outputBuf(opAdd, outNames[i], t, outDTypes[i], outShapes[i], true); err != nil {
			if name := outNames[i]; name == "mean" || name == "rstd" {
				return argErr(opAdd, name, "mean/rstd must have shape %v float32, got %v", slices.Clone(statShape), t)
			}
			return err
		}
	}
	y, _ := outputBuf(opAdd, "y", &out.Y, outT, x1, true)
	mean, _ := outputBuf(opAdd, "mean", &out.Mean, Float32, statShape, true)
	rstd, _ := outputBuf(opAdd, "rstd", &out.Rstd, Float32, statShape, true)
	x, _ := outputBuf(opAdd, "x", &out.X, outT, x1, c.additional)
	a.Y, a.Mean, a.Rstd, a.X = y, mean.F32, rstd.F32, x
	a.MeanDev, a.RstdDev = mean.Dev, rstd.Dev
	return nil
}

func ones(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = 1
	}
	return s
}
