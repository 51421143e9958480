package fusednorm

import (
	"context"
	"fmt"
	"math"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// AddLayerNormWeights are the tensors a prepared AddLayerNorm binds once: gamma, beta and
// the optional bias (gamma's shape, or x1's full shape).
type AddLayerNormWeights struct {
	Gamma, Beta Tensor
	Bias        Tensor // optional
}

// AddLayerNorm is a prepared AddLayerNorm op: gamma, beta and bias bound once (resident on
// the device for GPU backends, so a call moves only x1, x2 and the outputs), run many
// times. Safe for concurrent use.
type AddLayerNorm struct {
	eng  *Engine
	w    AddLayerNormWeights
	c    opConfig
	prep ops.PreparedAddLN // nil: the backend takes the weights with each call (the CPU)
	memo addMemo           // the last call on device tensors (callmemo.go)
}

// NewAddLayerNorm validates and binds the weights. Options: Epsilon (default 1e-5) and
// AdditionalOutput. The weight tensors must not be modified, nor closed, while the op is
// in use. The rules that involve x1 are checked by Run.
func (e *Engine) NewAddLayerNorm(w AddLayerNormWeights, opts ...OpOption) (*AddLayerNorm, error) {
	if err := e.use(); err != nil {
		return nil, err
	}
	defer e.done()
	c := newOpConfig(DefaultAddEpsilon, opts)
	names := [...]string{"gamma", "beta", "bias"}
	for i, t := range [...]*Tensor{&w.Gamma, &w.Beta, &w.Bias} {
		if t.IsZero() && i < 2 {
			return nil, argErr(opAdd, names[i], "x1/x2/gamma/beta is required: %s is missing", names[i])
		}
		if err := checkTensor(opAdd, names[i], t); err != nil {
			return nil, err
		}
	}
	if g := len(w.Gamma.shape); g < 1 || g > 8 {
		return nil, argErr(opAdd, "gamma", "gamma rank must be in [1,8], got %d", g)
	}
	if !sameShape(w.Beta.shape, w.Gamma.shape) {
		return nil, argErr(opAdd, "beta", "gamma and beta must have the same shape, got %v and %v", w.Gamma.shape, w.Beta.shape)
	}
	if w.Gamma.DType() != w.Beta.DType() {
		return nil, argErr(opAdd, "beta", "unsupported dtype combination: gamma %v, beta %v", w.Gamma.DType(), w.Beta.DType())
	}
	if eps := c.eps; math.IsNaN(float64(eps)) || math.IsInf(float64(eps), 0) {
		return nil, argErr(opAdd, "epsilon", "epsilon must be finite, got %g", eps)
	}
	if err := e.foreignDevice(opAdd, &w.Gamma.buf, &w.Beta.buf, &w.Bias.buf); err != nil {
		return nil, err
	}
	op := &AddLayerNorm{eng: e, w: w, c: c}
	if p, ok := e.be.(ops.AddPreparer); ok {
		biasFull := !w.Bias.IsZero() && !sameShape(w.Bias.shape, w.Gamma.shape)
		prep, err := p.PrepareAddLN(w.Gamma.buf, w.Beta.buf, w.Bias.buf, biasFull)
		if err != nil {
			return nil, fmt.Errorf("fusednorm: %s: prepare on %s: %w", opAdd, e.be.Info().Name, err)
		}
		op.prep = prep
	}
	return op, nil
}

// Run computes y = LayerNorm(x1 + x2 (+ bias)) with the bound weights, under the same rules
// and output conventions as Engine.AddLayerNorm. On error no host output has been written.
func (op *AddLayerNorm) Run(ctx context.Context, x1, x2 Tensor, out *AddLayerNormOutputs) error {
	if err := checkCall(opAdd, ctx, out == nil); err != nil {
		return err
	}
	e := op.eng
	if err := e.use(); err != nil {
		return err
	}
	defer e.done()
	if op.prep != nil { // a backend without prepared weights (the CPU) builds nothing to remember
		if k, known, ok := op.memo.HoldLast(); ok {
			if k.match(&x1, &x2, out) {
				err := op.runKnown(ctx, known)
				op.memo.Release()
				return err
			}
			op.memo.Release()
		}
	}
	in := AddLayerNormInputs{X1: x1, X2: x2, Gamma: op.w.Gamma, Beta: op.w.Beta, Bias: op.w.Bias}
	if op.prep != nil {
		if keys, ok := addKeysOf(&x1, &x2, out); ok {
			return e.runAdd(ctx, &in, out, &op.c, op.prep, &op.memo, &keys)
		}
	}
	return e.runAdd(ctx, &in, out, &op.c, op.prep, nil, nil)
}

// runKnown is a call the memo remembered (callmemo.go): the backend call checked when it
// was stored, used in place with the memo held.
func (op *AddLayerNorm) runKnown(ctx context.Context, known *ops.AddLN) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("fusednorm: %s: %w", opAdd, err)
	}
	if err := op.prep.Run(ctx, known); err != nil {
		return fmt.Errorf("fusednorm: %s: %w", opAdd, err)
	}
	op.eng.report(ctx)
	return nil
}

// Close releases the op's device resources.
func (op *AddLayerNorm) Close() error {
	if op.prep == nil {
		return nil
	}
	return op.prep.Close()
}
