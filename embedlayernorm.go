package fusednorm

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/fusednorm/fusednorm/internal/ops"
)

const opEmbed = "EmbedLayerNorm"

// EmbedWeights are the bound tensors of an EmbedLayerNorm op (spec §A.1). All five share one
// dtype, Float32 or Float16. Segment is optional.
type EmbedWeights struct {
	Word     Tensor // word_embedding (V, H)
	Position Tensor // position_embedding (P, H)
	Segment  Tensor // segment_embedding (G, H), optional
	Gamma    Tensor // gamma (H)
	Beta     Tensor // beta (H)
}

// EmbedInputs are the per-call inputs; all int32. Only InputIDs is required.
type EmbedInputs struct {
	InputIDs    Tensor // input_ids (B, S)
	SegmentIDs  Tensor // segment_ids (B, S); needs a segment table
	Mask        Tensor // mask (B, S); any values
	PositionIDs Tensor // position_ids (B, S) or (1, S); default position s
}

// EmbedOutputs receives the results. A zero field is allocated when the output is wanted
// (Output always; MaskIndex and EmbeddingSum when their Want flag is set) and set when the
// call succeeds; a field the caller sets is checked against the contract and written in
// place, and counts as wanted. A field a call allocated stays set: a struct reused for a call
// of another batch or sequence length must be zeroed first (its Want flags set again).
type EmbedOutputs struct {
	Output       Tensor // output (B, S, H), the weights' dtype
	MaskIndex    Tensor // mask_index (B), int32
	EmbeddingSum Tensor // embedding_sum (B, S, H), the weights' dtype

	WantMaskIndex    bool
	WantEmbeddingSum bool
}

// EmbedLayerNorm is a prepared EmbedLayerNormalization op: weights bound once (resident on
// the device for GPU backends), run many times. Safe for concurrent use.
type EmbedLayerNorm struct {
	eng  *Engine
	w    ops.EmbedWeights
	wt   EmbedWeights // the weights as given: their device tensors are checked at each call
	prep ops.PreparedEmbed
	memo embedMemo // the last call on device tensors (callmemo.go)
	// closed is set by Close: later calls fail with ErrClosed on every backend.
	closed atomic.Bool
}

// NewEmbedLayerNorm validates and binds the weights. Options: Epsilon (default 1e-12) and
// WithMaskRule (AdditionalOutput, AddLayerNorm's, is an *ArgError). The weight tensors must
// not be modified while the op is in use.
func (e *Engine) NewEmbedLayerNorm(w EmbedWeights, opts ...OpOption) (*EmbedLayerNorm, error) {
	if err := e.use(); err != nil {
		return nil, err
	}
	defer e.done()
	c := newOpConfig(DefaultEmbedEpsilon, opts)
	if err := c.checkOptions(opEmbed); err != nil {
		return nil, err
	}
	ow, err := checkEmbedWeights(&w, &c)
	if err != nil {
		return nil, err
	}
	if err := e.checkDevices(opEmbed, embedSpanNames[7:], []*Tensor{&w.Word, &w.Position, &w.Segment, &w.Gamma, &w.Beta}); err != nil {
		return nil, err
	}
	prep, err := e.be.PrepareEmbed(ow)
	if err != nil {
		return nil, backendErr("fusednorm: "+opEmbed+": preparing the weights: ", opEmbed, err)
	}
	return &EmbedLayerNorm{eng: e, w: *ow, wt: w, prep: prep}, nil
}

// Close releases the op's device resources. Later calls of Run fail with an error wrapping
// ErrClosed, on every backend; Close again does nothing.
func (op *EmbedLayerNorm) Close() error {
	if op.closed.Swap(true) {
		return nil
	}
	return op.prep.Close()
}

// Run validates the inputs (shapes, then every id against its table) and computes the
// outputs. A nil ctx is an error (*ArgError on "ctx"). No output may share memory with an
// input, a weight or another output.
//
// On error, out is as it was: the outputs the call allocated are dropped, and the fields
// are written only when the call succeeds. Output data the caller gave is untouched when
// the call fails before it computes (a broken rule, or ctx already done); when ctx ends or
// the device fails while the call computes, that data is unspecified (partly written),
// never the inputs or weights.
func (op *EmbedLayerNorm) Run(ctx context.Context, in EmbedInputs, out *EmbedOutputs) error {
	if err := checkCall(opEmbed, ctx, out == nil); err != nil {
		return err
	}
	if op.closed.Load() {
		return fmt.Errorf("fusednorm: %s: prepared op: %w", opEmbed, ErrClosed)
	}
	if k, known, ok := op.memo.HoldLast(); ok {
		if k.match(&in, out) {
			ts := op.tensors(&in, out)
			err := checkOpen(opEmbed, embedSpanNames[:], ts[:])
			if err == nil {
				err = op.runKnown(ctx, known)
			}
			op.memo.Release()
			return err
		}
		op.memo.Release()
	}
	if err := checkEmbedInputShapes(&in); err != nil {
		return err
	}
	if keys, dev := embedKeysOf(&in, out); dev {
		return op.run(ctx, &in, out, &keys)
	}
	return op.run(ctx, &in, out, nil)
}

// runKnown is a call the memo remembered (callmemo.go): the backend call checked when it
// was stored, used in place with the memo held.
func (op *EmbedLayerNorm) runKnown(ctx context.Context, known *embedCall) error {
	if err := op.eng.use(); err != nil {
		return err
	}
	defer op.eng.done()
	if err := ctx.Err(); err != nil {
		return callErr(opEmbed, err)
	}
	if err := op.prep.Run(ctx, &known.in, &known.out); err != nil {
		return callErr(opEmbed, err)
	}
	op.eng.report(ctx)
	return nil
}

// run is one call whose input shapes were checked: keys, when set, are the headers of a
// device-tensor call to remember once checked.
func (op *EmbedLayerNorm) run(ctx context.Context, in *EmbedInputs, out *EmbedOutputs, keys *embedKeys) error {
	if err := op.eng.use(); err != nil {
		return err
	}
	defer op.eng.done()
	// The backend's inputs and outputs come from a pool: their pointers escape through
	// the PreparedEmbed interface, and a call must not allocate.
	f := embedFrames.Get().(*embedFrame)
	err := checkEmbedInputs(in, &op.w, &f.in)
	if err == nil {
		ts := op.tensors(in, out)
		err = op.eng.checkDevices(opEmbed, embedSpanNames[:], ts[:])
	}
	if err == nil {
		err = embedOutputs(ctx, op.eng, out, &op.w, f)
	}
	if err == nil && keys != nil && f.fresh[0].IsZero() && f.fresh[1].IsZero() && f.fresh[2].IsZero() {
		op.memo.Store(keys, &embedCall{f.in, f.out})
	}
	if err == nil {
		if err = op.prep.Run(ctx, &f.in, &f.out); err != nil {
			err = callErr(opEmbed, err)
		}
	}
	if err == nil { // only now does the caller see the outputs the call allocated
		op.eng.report(ctx)
		for i, t := range [...]*Tensor{&out.Output, &out.MaskIndex, &out.EmbeddingSum} {
			if !f.fresh[i].IsZero() {
				*t = f.fresh[i]
			}
		}
	}
	*f = embedFrame{} // keep no reference to the caller's data
	embedFrames.Put(f)
	return err
}

// embedFrame is the backend's view of one EmbedLayerNorm call.
type embedFrame struct {
	in    ops.EmbedInputs
	out   ops.EmbedOutputs
	fresh [3]Tensor // the outputs this call allocated: output, mask_index, embedding_sum
}

var embedFrames = sync.Pool{New: func() any { return new(embedFrame) }}

// EmbedLayerNormOnce binds the weights, runs once and releases them: for one-off calls. It
// checks in spec §A.2's order (input shapes before weights). On error, out is as it was (see
// EmbedLayerNorm.Run).
func (e *Engine) EmbedLayerNormOnce(ctx context.Context, w EmbedWeights, in EmbedInputs, out *EmbedOutputs, opts ...OpOption) error {
	if err := checkCall(opEmbed, ctx, out == nil); err != nil {
		return err
	}
	if err := checkEmbedInputShapes(&in); err != nil {
		return err
	}
	op, err := e.NewEmbedLayerNorm(w, opts...)
	if err != nil {
		return err
	}
	defer op.Close()
	return op.run(ctx, &in, out, nil)
}

// embedInputNames names the tensors of EmbedInputs in field order.
var embedInputNames = [...]string{"input_ids", "segment_ids", "mask", "position_ids"}

// checkEmbedInputShapes is spec §A.2 rules 1–4: the input-side shape rules that ORT checks
// before the weights.
func checkEmbedInputShapes(in *EmbedInputs) error {
	// Names and tensors in separate arrays, as in checkAddLayerNorm: keeps in on the stack.
	for i, t := range [...]*Tensor{&in.InputIDs, &in.SegmentIDs, &in.Mask, &in.PositionIDs} {
		if err := checkTensor(opEmbed, embedInputNames[i], t); err != nil {
			return err
		}
	}
	if in.InputIDs.IsZero() {
		return argErr(opEmbed, "input_ids", "input_ids is required")
	}
	ids := in.InputIDs.shape
	if p := in.PositionIDs; !p.IsZero() {
		if len(p.shape) != 2 {
			return argErr(opEmbed, "position_ids", "position_ids is expected to have 2 dimensions, got %d", len(p.shape))
		}
		if len(ids) == 2 { // else rule 4 reports input_ids
			if p.shape[1] != ids[1] {
				return argErr(opEmbed, "position_ids", "input_ids and position_ids shall have same sequence_length")
			}
			if p.shape[0] != 1 && p.shape[0] != ids[0] {
				return argErr(opEmbed, "position_ids", "position_ids's first dimension shall be 1 or batch_size")
			}
		}
	}
	// Rules 2 and 3 compare with input_ids only when its rank is right; otherwise rule 4
	// names input_ids, the tensor that is wrong.
	if s := in.SegmentIDs; !s.IsZero() && len(ids) == 2 && !sameShape(s.shape, ids) {
		return argErr(opEmbed, "segment_ids", "Input 0 and 1 shall have same shape: input_ids %v, segment_ids %v",
			slices.Clone(ids), slices.Clone(s.shape))
	}
	if m := in.Mask; !m.IsZero() && len(ids) == 2 && !sameShape(m.shape, ids) {
		return argErr(opEmbed, "mask", "Input 0 and 7 (mask) shall have same shape: input_ids %v, mask %v",
			slices.Clone(ids), slices.Clone(m.shape))
	}
	if len(ids) != 2 {
		return argErr(opEmbed, "input_ids", "input_ids is expected to have 2 dimensions, got %d", len(ids))
	}
	return nil
}

// checkEmbedWeights is spec §A.2 rules 5–12 (the weight side) and the dtype rules of 11.
func checkEmbedWeights(w *EmbedWeights, c *opConfig) (*ops.EmbedWeights, error) {
	for _, t := range []struct {
		name string
		t    *Tensor
	}{{"word_embedding", &w.Word}, {"position_embedding", &w.Position}, {"segment_embedding", &w.Segment}, {"gamma", &w.Gamma}, {"beta", &w.Beta}} {
		if t.t.IsZero() && t.name != "segment_embedding" {
			return nil, argErr(opEmbed, t.name, "%s is required", t.name)
		}
		if err := checkTensor(opEmbed, t.name, t.t); err != nil {
			return nil, err
		}
	}
	if r := len(w.Word.shape); r != 2 {
		return nil, argErr(opEmbed, "word_embedding", "word_embedding is expected to have 2 dimensions, got %d", r)
	}
	if r := len(w.Position.shape); r != 2 {
		return nil, argErr(opEmbed, "position_embedding", "position_embedding is expected to have 2 dimensions, got %d", r)
	}
	H := w.Word.shape[1]
	if s := w.Segment; !s.IsZero() {
		if len(s.shape) != 2 {
			return nil, argErr(opEmbed, "segment_embedding", "segment_embedding is expected to have 2 dimensions, got %d", len(s.shape))
		}
		if s.shape[1] != H {
			return nil, argErr(opEmbed, "segment_embedding", "word_embedding and segment_embedding shall have same dimension 1")
		}
	}
	if w.Position.shape[1] != H {
		return nil, argErr(opEmbed, "position_embedding", "word_embedding and position_embedding shall have same dimension 1")
	}
	for _, g := range []struct {
		name string
		t    *Tensor
	}{{"gamma", &w.Gamma}, {"beta", &w.Beta}} {
		if r := len(g.t.shape); r != 1 {
			return nil, argErr(opEmbed, g.name, "%s is expected to have 1 dimensions, got %d", g.name, r)
		}
		if n := g.t.shape[0]; n != H {
			return nil, argErr(opEmbed, g.name, "%s is expected to have size of H, got %d", g.name, n)
		}
	}
	if H == 0 {
		return nil, argErr(opEmbed, "word_embedding", "word_embedding hidden size must be > 0")
	}
	if w.Word.shape[0] == 0 {
		return nil, argErr(opEmbed, "word_embedding", "word_embedding table is empty")
	}
	if w.Position.shape[0] == 0 {
		return nil, argErr(opEmbed, "position_embedding", "position_embedding table is empty")
	}
	if err := checkEmbedDTypes(w); err != nil {
		return nil, err
	}
	dt := w.Word.DType()
	if e := c.eps; e < 0 || math.IsNaN(float64(e)) || math.IsInf(float64(e), 0) {
		return nil, argErr(opEmbed, "epsilon", "epsilon must be >= 0 and finite, got %g", e)
	}
	if c.rule != MaskFirstZero && c.rule != MaskIndexCountOnes {
		return nil, argErr(opEmbed, "mask_index_rule", "mask_index_rule must be MaskFirstZero or MaskIndexCountOnes, got MaskRule(%d)", c.rule)
	}
	ow := &ops.EmbedWeights{
		DType: dt, H: H, V: w.Word.shape[0], P: w.Position.shape[0],
		Word: w.Word.buf, Pos: w.Position.buf, Gamma: w.Gamma.buf, Beta: w.Beta.buf,
		Epsilon: c.eps, Rule: c.rule,
	}
	if !w.Segment.IsZero() {
		ow.G, ow.Seg = w.Segment.shape[0], w.Segment.buf
	}
	return ow, nil
}

// checkEmbedDTypes is rule 11's type rule over the weights: all five share float32 or
// float16. The dtype most of them have (word_embedding's on a tie) is taken as meant, so
// the error names the odd one out: an f16 word table among f32 weights is the word table.
func checkEmbedDTypes(w *EmbedWeights) error {
	names := [...]string{"word_embedding", "position_embedding", "segment_embedding", "gamma", "beta"}
	ts := [...]*Tensor{&w.Word, &w.Position, &w.Segment, &w.Gamma, &w.Beta}
	var f32, f16 int
	for _, t := range ts {
		switch t.DType() {
		case Float32:
			f32++
		case Float16:
			f16++
		}
	}
	want := w.Word.DType()
	switch {
	case f32 > f16, f32 == f16 && want != Float16:
		want = Float32
	default:
		want = Float16
	}
	for i, t := range ts {
		switch dt := t.DType(); {
		case t.IsZero() || dt == want:
		case dt != Float32 && dt != Float16:
			return argErr(opEmbed, names[i], "type error: %s has dtype %v, not float32 or float16", names[i], dt)
		default:
			return argErr(opEmbed, names[i], "type error: %s has dtype %v, the other weights %v", names[i], dt, want)
		}
	}
	return nil
}

// checkEmbedInputs is the rest of spec §A.2 once weights are bound: rule 11's input parts
// (segment pairing, empty batch/sequence, int32 ids) and the data-dependent rules 13–16.
// It fills oin.
func checkEmbedInputs(in *EmbedInputs, w *ops.EmbedWeights, oin *ops.EmbedInputs) error {
	if !in.SegmentIDs.IsZero() && !w.Seg.Present() {
		return argErr(opEmbed, "segment_ids", "segment_ids requires segment_embedding")
	}
	B, S := in.InputIDs.shape[0], in.InputIDs.shape[1]
	if B == 0 || S == 0 {
		return argErr(opEmbed, "input_ids", "batch and sequence dimensions must be non-empty, got (%d, %d)", B, S)
	}
	for i, t := range [...]*Tensor{&in.InputIDs, &in.SegmentIDs, &in.Mask, &in.PositionIDs} {
		if name := embedInputNames[i]; !t.IsZero() && t.DType() != Int32 {
			return argErr(opEmbed, name, "type error: %s must be int32, got %v", name, t.DType())
		}
	}
	*oin = ops.EmbedInputs{B: B, S: S, IDs: in.InputIDs.buf.I32, IDsDev: in.InputIDs.buf.Dev}
	if err := idsInRange(in.InputIDs.buf.I32, w.V, "input_ids", "word_embedding"); err != nil {
		return err
	}
	if p := in.PositionIDs; !p.IsZero() {
		oin.PosIDs, oin.PosBatch, oin.PosIDsDev = p.buf.I32, p.shape[0], p.buf.Dev
		if err := idsInRange(p.buf.I32, w.P, "position_ids", "position_embedding"); err != nil {
			return err
		}
	} else if S > w.P {
		return argErr(opEmbed, "position_ids", "input index out of range: position_ids is absent and sequence length %d exceeds position_embedding rows %d", S, w.P)
	}
	if s := in.SegmentIDs; !s.IsZero() {
		oin.SegIDs, oin.SegIDsDev = s.buf.I32, s.buf.Dev
		if err := idsInRange(s.buf.I32, w.G, "segment_ids", "segment_embedding"); err != nil {
			return err
		}
	} else if w.Seg.Present() && w.G == 0 {
		return argErr(opEmbed, "segment_embedding", "segment_embedding has no rows; row 0 is used when segment_ids is absent")
	}
	if m := in.Mask; !m.IsZero() {
		oin.Mask, oin.MaskDev = m.buf.I32, m.buf.Dev
	}
	return nil
}

func idsInRange(ids []int32, n int, name, table string) error {
	for i, id := range ids {
		if id < 0 || int(id) >= n {
			return argErr(opEmbed, name, "input index out of range: %s[%d] = %d, %s has %d rows", name, i, id, table, n)
		}
	}
	return nil
}

// embedSpanNames names the tensors whose memory embedOutputs compares: the outputs, then
// the inputs, then the weights.
var embedSpanNames = [...]string{"output", "mask_index", "embedding_sum",
	"input_ids", "segment_ids", "mask", "position_ids",
	"word_embedding", "position_embedding", "segment_embedding", "gamma", "beta"}

// tensors are a call's tensors and the op's weights in embedSpanNames' order.
func (op *EmbedLayerNorm) tensors(in *EmbedInputs, out *EmbedOutputs) [12]*Tensor {
	w := &op.wt
	return [...]*Tensor{&out.Output, &out.MaskIndex, &out.EmbeddingSum, &in.InputIDs, &in.SegmentIDs, &in.Mask, &in.PositionIDs,
		&w.Word, &w.Position, &w.Segment, &w.Gamma, &w.Beta}
}

// embedOutputs checks the caller's outputs against the contract and against the memory of
// the inputs, weights and each other, then allocates the missing wanted ones into
// f.fresh (not into out: a failed call leaves out as it was), sized against the call's
// bound before any is allocated. It fills f.out.
func embedOutputs(ctx context.Context, e *Engine, out *EmbedOutputs, w *ops.EmbedWeights, f *embedFrame) error {
	in, o := &f.in, &f.out
	full, batch := [3]int{in.B, in.S, w.H}, [1]int{in.B}
	var err error
	if o.Out, err = givenOutput(opEmbed, "output", &out.Output, w.DType, full[:]); err != nil {
		return err
	}
	var mi ops.Buf
	if mi, err = givenOutput(opEmbed, "mask_index", &out.MaskIndex, Int32, batch[:]); err != nil {
		return err
	}
	o.MaskIndex, o.MaskIndexDev = mi.I32, mi.Dev
	if o.Sum, err = givenOutput(opEmbed, "embedding_sum", &out.EmbeddingSum, w.DType, full[:]); err != nil {
		return err
	}
	spans := [...]span{spanOf(o.Out), spanI32(o.MaskIndex, o.MaskIndexDev), spanOf(o.Sum),
		spanI32(in.IDs, in.IDsDev), spanI32(in.SegIDs, in.SegIDsDev), spanI32(in.Mask, in.MaskDev), spanI32(in.PosIDs, in.PosIDsDev),
		spanOf(w.Word), spanOf(w.Pos), spanOf(w.Seg), spanOf(w.Gamma), spanOf(w.Beta)}
	if err := checkOverlap(opEmbed, embedSpanNames[:], spans[:], 3); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return callErr(opEmbed, err)
	}
	dts := [3]DType{w.DType, Int32, w.DType}
	shapes := [3][]int{full[:], batch[:], full[:]}
	alloc := [3]bool{!o.Out.Present(), !mi.Present() && out.WantMaskIndex, !o.Sum.Present() && out.WantEmbeddingSum}
	budget := e.newOutputBudget()
	var ns [3]int
	for i := range ns {
		if alloc[i] {
			if ns[i], err = budget.take(opEmbed, embedSpanNames[i], dts[i], shapes[i]); err != nil {
				return err
			}
		}
	}
	for i := range ns {
		if alloc[i] {
			f.fresh[i] = newOutput(dts[i], ns[i], shapes[i])
		}
	}
	if t := f.fresh[0]; !t.IsZero() {
		o.Out = t.buf
	}
	if t := f.fresh[1]; !t.IsZero() {
		o.MaskIndex = t.buf.I32
	}
	if t := f.fresh[2]; !t.IsZero() {
		o.Sum = t.buf
	}
	return nil
}
