package fusednorm

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/fusednorm/fusednorm/internal/ops"
)

const opAdd = "AddLayerNorm"

// AddLayerNormInputs are Ascend AddLayerNorm's inputs (spec §B.1). Bias is optional: gamma's
// shape (broadcast over rows) or x1's shape (full).
type AddLayerNormInputs struct {
	X1, X2      Tensor // rank 1–8, same shape
	Gamma, Beta Tensor // the trailing rank(gamma) dims of x1
	Bias        Tensor // optional
}

// AddLayerNormOutputs receives the results. A field the caller sets is checked and written
// in place (a set X counts as wanted). A zero field is allocated in host memory and set when
// the call succeeds (X only when AdditionalOutput is on), and then stays set: a struct reused
// for a call of another shape must be zeroed first. A zero field is allocated except where
// the call would then return host data the caller did not ask for:
//
//   - With NoStats, mean and rstd are neither computed nor allocated (their bandwidth is
//     saved too); Mean and Rstd must then be zero.
//   - When Y is a device tensor, zero Mean and Rstd are skipped as with NoStats (give device
//     tensors to have them), and X, when AdditionalOutput is on, must be given (a device
//     tensor, as a rule): a call on device tensors never allocates host outputs, so it never
//     waits for the device behind the caller's back.
type AddLayerNormOutputs struct {
	Y    Tensor // shape of x1, OutT
	Mean Tensor // float32, leading dims of x1 then rank(gamma) ones
	Rstd Tensor // float32, as Mean
	X    Tensor // x1 + x2 (+ bias) in OutT

	// NoStats skips mean and rstd: only y (and x) are computed.
	NoStats bool
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

// addDTypeWant says which gamma, beta and bias dtypes spec §B.2 allows with x1 and x2 of these
// dtypes, or which x1 and x2 it allows at all.
func addDTypeWant(x1, x2 DType) string {
	var gammas, biases []string
	for _, r := range ops.AddDTypeRows {
		if r[0] == x1 && r[1] == x2 {
			gammas = append(gammas, r[2].String())
			biases = append(biases, r[3].String())
		}
	}
	if len(gammas) == 0 {
		return "x1 and x2 must be float32, float16 or bfloat16, not float16 with bfloat16 (spec §B.2)"
	}
	// Every row of one x1, x2 pair has one bias dtype, OutT.
	return fmt.Sprintf("with x1 %v and x2 %v, gamma and beta must both be %s, and bias, when given, %s",
		x1, x2, strings.Join(gammas, " or "), biases[0])
}

// AddLayerNorm computes y = LayerNorm(x1 + x2 (+ bias)) over the trailing rank(gamma) dims,
// with per-row mean and rstd. Options: Epsilon (default 1e-5), AdditionalOutput (another
// op's option, WithMaskRule, is an *ArgError). A nil ctx is an error (*ArgError on "ctx").
// No output may share memory with an input or another output, not even exactly: y in place
// of x1 is refused.
//
// On error, out is as it was: the outputs the call allocated are dropped, and the fields
// are written only when the call succeeds. Output data the caller gave is untouched when
// the call fails before it computes (a broken rule, or ctx already done); when ctx ends or
// the device fails while the call computes, that data is unspecified (partly written),
// never the inputs.
func (e *Engine) AddLayerNorm(ctx context.Context, in AddLayerNormInputs, out *AddLayerNormOutputs, opts ...OpOption) error {
	if err := checkCall(opAdd, ctx, out == nil); err != nil {
		return err
	}
	if err := e.use(); err != nil {
		return err
	}
	defer e.done()
	c := newOpConfig(DefaultAddEpsilon, opts)
	if err := c.checkOptions(opAdd); err != nil {
		return err
	}
	return e.runAdd(ctx, &in, out, &c, nil, nil, nil)
}

// runAdd is one AddLayerNorm call, of the engine or of a prepared op (prep non-nil). With
// keys (a prepared op's call on device tensors), the call, once checked, is remembered in
// memo when it allocated nothing.
func (e *Engine) runAdd(ctx context.Context, in *AddLayerNormInputs, out *AddLayerNormOutputs, c *opConfig, prep ops.PreparedAddLN,
	memo *addMemo, keys *addKeys) error {
	// The backend call comes from a pool: its pointer escapes through the Backend
	// interface, and a call must not allocate.
	f := addFrames.Get().(*addFrame)
	err := checkAddLayerNorm(in, out, c, f)
	if err == nil {
		ts := addTensors(in, out)
		err = e.checkDevices(opAdd, addSpanNames[:], ts[:])
	}
	if err == nil {
		err = addOutputs(ctx, e, out, f)
	}
	if err == nil && keys != nil && f.alloc == [4]bool{} {
		memo.Store(keys, &f.a)
	}
	if err == nil {
		if prep != nil {
			err = prep.Run(ctx, &f.a)
		} else {
			err = e.be.AddLayerNorm(ctx, &f.a)
		}
		if err != nil {
			err = callErr(opAdd, err)
		}
	}
	if err == nil { // only now does the caller see the outputs the call allocated
		e.report(ctx)
		for i, t := range [...]*Tensor{&out.Y, &out.Mean, &out.Rstd, &out.X} {
			if !f.fresh[i].IsZero() {
				*t = f.fresh[i]
			}
		}
	}
	*f = addFrame{} // keep no reference to the caller's data
	addFrames.Put(f)
	return err
}

// addFrame is one AddLayerNorm call: the backend's view, and what the call allocates.
type addFrame struct {
	a        ops.AddLN
	outT     DType
	x1, stat []int   // the shapes of y and x, of mean and rstd
	statBuf  [8]int  // rank(x1) ≤ 8: the stat shape without an allocation
	alloc    [4]bool // y, mean, rstd, x: allocated by the call
	fresh    [4]Tensor
}

var addFrames = sync.Pool{New: func() any { return new(addFrame) }}

// addSpanNames names the tensors whose memory addOutputs compares: outputs, then inputs.
var addSpanNames = [...]string{"y", "mean", "rstd", "x", "x1", "x2", "gamma", "beta", "bias"}

// addTensors are a call's tensors in addSpanNames' order.
func addTensors(in *AddLayerNormInputs, out *AddLayerNormOutputs) [9]*Tensor {
	return [...]*Tensor{&out.Y, &out.Mean, &out.Rstd, &out.X, &in.X1, &in.X2, &in.Gamma, &in.Beta, &in.Bias}
}

// addOutputs checks the given outputs' memory against the inputs' and each other's, then
// allocates the missing ones into f.fresh, sized against the call's bound first.
func addOutputs(ctx context.Context, e *Engine, out *AddLayerNormOutputs, f *addFrame) error {
	a := &f.a
	spans := [...]span{spanOf(a.Y), spanF32(a.Mean, a.MeanDev), spanF32(a.Rstd, a.RstdDev), spanOf(a.X),
		spanOf(a.X1), spanOf(a.X2), spanOf(a.Gamma), spanOf(a.Beta), spanOf(a.Bias)}
	if err := checkOverlap(opAdd, addSpanNames[:], spans[:], 4); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return callErr(opAdd, err)
	}
	dts := [4]DType{f.outT, Float32, Float32, f.outT}
	shapes := [4][]int{f.x1, f.stat, f.stat, f.x1}
	budget := e.newOutputBudget()
	var ns [4]int
	for i := range ns {
		if f.alloc[i] {
			var err error
			if ns[i], err = budget.take(opAdd, addSpanNames[i], dts[i], shapes[i]); err != nil {
				return err
			}
		}
	}
	for i := range ns {
		if f.alloc[i] {
			f.fresh[i] = newOutput(dts[i], ns[i], shapes[i])
		}
	}
	if t := f.fresh[0]; !t.IsZero() {
		a.Y = t.buf
	}
	if t := f.fresh[1]; !t.IsZero() {
		a.Mean = t.buf.F32
	}
	if t := f.fresh[2]; !t.IsZero() {
		a.Rstd = t.buf.F32
	}
	if t := f.fresh[3]; !t.IsZero() {
		a.X = t.buf
	}
	return nil
}

// checkAddLayerNorm applies spec §B.3 in its order and builds the backend call in f: the
// inputs and the given outputs; addOutputs allocates the others.
func checkAddLayerNorm(in *AddLayerNormInputs, out *AddLayerNormOutputs, c *opConfig, f *addFrame) error {
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
		bias := "absent"
		if hasBias {
			bias = in.Bias.DType().String()
		}
		return argErr(opAdd, "x1", "unsupported dtype combination: x1 %v, x2 %v, gamma %v, beta %v, bias %s; %s",
			in.X1.DType(), in.X2.DType(), in.Gamma.DType(), in.Beta.DType(), bias, addDTypeWant(in.X1.DType(), in.X2.DType()))
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
	// gamma against x1 before beta against gamma: a gamma that is wrong is named, not the
	// beta that disagrees with it.
	lead := len(x1) - len(g)
	for i, d := range g {
		if d != x1[lead+i] {
			return argErr(opAdd, "gamma", "gamma dim %d must equal x1 dim %d, got %d and %d", i, lead+i, d, x1[lead+i])
		}
	}
	if !sameShape(in.Beta.shape, g) {
		return argErr(opAdd, "beta", "gamma and beta must have the same shape, got %v and %v", g, in.Beta.shape)
	}
	for _, d := range x1 {
		if d == 0 {
			return argErr(opAdd, "x1", "empty tensors are not supported: x1 shape %v", x1)
		}
	}
	N, _ := numel(x1[:lead])
	D, _ := numel(g)
	statShape := append(f.statBuf[:0], x1[:lead]...)
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
	f.a = ops.AddLN{N: N, D: D, X1: in.X1.buf, X2: in.X2.buf, Gamma: in.Gamma.buf, Beta: in.Beta.buf,
		Bias: in.Bias.buf, BiasFull: biasFull, Epsilon: c.eps}
	f.outT, f.x1, f.stat = outT, x1, statShape
	// Check every caller output before allocating any, so a failed call leaves out untouched.
	outNames := [...]string{"y", "mean", "rstd", "x"}
	outs := [...]*Tensor{&out.Y, &out.Mean, &out.Rstd, &out.X}
	outDTypes := [...]DType{outT, Float32, Float32, outT}
	outShapes := [...][]int{x1, statShape, statShape, x1}
	var bufs [4]ops.Buf
	for i, t := range outs {
		var err error
		if bufs[i], err = givenOutput(opAdd, outNames[i], t, outDTypes[i], outShapes[i]); err != nil {
			if name := outNames[i]; name == "mean" || name == "rstd" {
				return argErr(opAdd, name, "mean/rstd must have shape %v float32, got %v%s", slices.Clone(statShape), t, madeHint(name, t))
			}
			return err
		}
		f.alloc[i] = t.IsZero() && (i < 3 || c.additional) // a given x counts as wanted
	}
	yDev := bufs[0].Dev != nil
	if out.NoStats || yDev {
		for i, t := range outs[1:3] {
			if out.NoStats && !t.IsZero() {
				return argErr(opAdd, outNames[1+i], "%s is given with NoStats set: leave it zero, or unset NoStats", outNames[1+i])
			}
			f.alloc[1+i] = false
		}
	}
	if yDev && f.alloc[3] {
		return argErr(opAdd, "x", "AdditionalOutput with y on the device needs x given (a device tensor): a call on device tensors allocates no host output")
	}
	f.a.Y, f.a.Mean, f.a.Rstd, f.a.X = bufs[0], bufs[1].F32, bufs[2].F32, bufs[3]
	f.a.MeanDev, f.a.RstdDev = bufs[1].Dev, bufs[2].Dev
	return nil
}

func ones(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = 1
	}
	return s
}

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
	// closed is set by Close: later calls fail with ErrClosed on every backend, the CPU's
	// and an auto engine's routed calls included, whatever the backend's op would do.
	closed atomic.Bool
}

// NewAddLayerNorm validates and binds the weights. Options: Epsilon (default 1e-5) and
// AdditionalOutput (WithMaskRule, EmbedLayerNorm's, is an *ArgError). The weight tensors must
// not be modified, nor closed, while the op is in use. The rules that involve x1 are checked
// by Run.
func (e *Engine) NewAddLayerNorm(w AddLayerNormWeights, opts ...OpOption) (*AddLayerNorm, error) {
	if err := e.use(); err != nil {
		return nil, err
	}
	defer e.done()
	c := newOpConfig(DefaultAddEpsilon, opts)
	if err := c.checkOptions(opAdd); err != nil {
		return nil, err
	}
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
	if err := e.checkDevices(opAdd, addSpanNames[6:], []*Tensor{&w.Gamma, &w.Beta, &w.Bias}); err != nil {
		return nil, err
	}
	op := &AddLayerNorm{eng: e, w: w, c: c}
	if p, ok := e.be.(ops.AddPreparer); ok {
		biasFull := !w.Bias.IsZero() && !sameShape(w.Bias.shape, w.Gamma.shape)
		prep, err := p.PrepareAddLN(w.Gamma.buf, w.Beta.buf, w.Bias.buf, biasFull)
		if err != nil {
			return nil, backendErr("fusednorm: "+opAdd+": preparing the weights: ", opAdd, err)
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
	if op.closed.Load() {
		return fmt.Errorf("fusednorm: %s: prepared op: %w", opAdd, ErrClosed)
	}
	in := AddLayerNormInputs{X1: x1, X2: x2, Gamma: op.w.Gamma, Beta: op.w.Beta, Bias: op.w.Bias}
	if op.prep != nil { // a backend without prepared weights (the CPU) builds nothing to remember
		if k, known, ok := op.memo.HoldLast(); ok {
			if k.match(&x1, &x2, out) {
				ts := addTensors(&in, out)
				err := checkOpen(opAdd, addSpanNames[:], ts[:])
				if err == nil {
					err = op.runKnown(ctx, known)
				}
				op.memo.Release()
				return err
			}
			op.memo.Release()
		}
	}
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
		return callErr(opAdd, err)
	}
	if err := op.prep.Run(ctx, known); err != nil {
		return callErr(opAdd, err)
	}
	op.eng.report(ctx)
	return nil
}

// Close releases the op's device resources. Later calls of Run fail with an error wrapping
// ErrClosed, on every backend; Close again does nothing.
func (op *AddLayerNorm) Close() error {
	if op.closed.Swap(true) || op.prep == nil {
		return nil
	}
	return op.prep.Close()
}
