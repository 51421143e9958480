//go:build cgo

package dawn

import (
	"context"
	"fmt"
	"strings"

	"github.com/fusednorm/fusednorm/internal/dawnrt"
	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/plan"
	"github.com/fusednorm/fusednorm/shaders"
)

const opEmbed = "EmbedLayerNorm"

var embB = shaders.EmbedBindings

// embedOp is an EmbedLayerNorm op whose tables, gamma and beta live on the device: uploaded
// from host tensors, or bound where they are when they are device tensors (which must then
// stay open while the op is used).
type embedOp struct {
	prepared
	// w keeps references to the caller's tensors (which the API forbids modifying while the
	// op lives), to upload them again after a device loss.
	w    ops.EmbedWeights
	plan plan.Plan

	word, pos, seg, gb *dawnrt.Buffer // each the op's own, or a device tensor's (own[i] false)
	own                [3]bool        // word, pos, seg uploaded by the op
}

// PrepareEmbed makes the tables, gamma and beta resident; runs then move only ids and outputs.
func (b *Backend) PrepareEmbed(w *ops.EmbedWeights) (ops.PreparedEmbed, error) {
	leave, err := b.enter("PrepareEmbed")
	if err != nil {
		return nil, err
	}
	defer leave()
	if w.DType != ops.F32 && w.DType != ops.F16 {
		return nil, fmt.Errorf("dawn: PrepareEmbed: dtype %v: %w", w.DType, ops.ErrNotSupported)
	}
	op := &embedOp{prepared: prepared{b: b}, w: *w, plan: b.Plan(w.H, w.Half())}
	if err := op.upload(); err != nil {
		return nil, err
	}
	b.track(op)
	return op, nil
}

// upload makes the op's resident buffers; on failure none is left.
func (op *embedOp) upload() error {
	const name = "PrepareEmbed"
	b, w := op.b, &op.w
	ctx := context.Background()
	g, err := b.hostBytes(ctx, name, "gamma", w.Gamma)
	if err != nil {
		return err
	}
	bt, err := b.hostBytes(ctx, name, "beta", w.Beta)
	if err != nil {
		return err
	}
	tables := [3]struct {
		name string
		x    ops.Buf
		dst  **dawnrt.Buffer
	}{{"word_embedding", w.Word, &op.word}, {"position_embedding", w.Pos, &op.pos}, {"segment_embedding", w.Seg, &op.seg}}
	for i, t := range tables {
		if !t.x.Present() {
			continue
		}
		buf, host, err := b.operand(name, t.name, t.x)
		if err == nil && buf != nil {
			err = b.checkBinding(name, t.name, buf.Size())
		}
		if err == nil && buf == nil {
			buf, err = b.newBuffer(name, t.name, host)
			op.own[i] = true
		}
		if err != nil {
			op.release()
			return err
		}
		*t.dst = buf
	}
	if op.gb, err = b.newBuffer(name, "gamma+beta", append(append(make([]byte, 0, len(g)+len(bt)), g...), bt...)); err != nil {
		op.release()
		return err
	}
	return nil
}

func (op *embedOp) release() {
	for i, p := range [3]**dawnrt.Buffer{&op.word, &op.pos, &op.seg} {
		if op.own[i] && *p != nil {
			(*p).Release()
		}
		*p, op.own[i] = nil, false
	}
	releaseAll(&op.gb)
}

// Close releases the resident weights after the runs in flight have finished.
func (op *embedOp) Close() error { return op.close(op) }

// kernel is the kernel variant a call runs.
func (op *embedOp) kernel(in *ops.EmbedInputs, out *ops.EmbedOutputs) shaders.Embed {
	w, H := &op.w, op.w.H
	mi := (out.MaskIndex != nil || out.MaskIndexDev != nil) && (in.Mask != nil || in.MaskDev != nil)
	k := shaders.Embed{
		W:         op.plan.W,
		Private:   privateFor(op.plan, w.DType),
		DType:     w.DType,
		Segment:   w.G > 0,
		SegIDs:    w.G > 0 && (in.SegIDs != nil || in.SegIDsDev != nil),
		PosIDs:    in.PosIDs != nil || in.PosIDsDev != nil,
		MaskIndex: mi,
		CountOnes: mi && w.Rule == ops.MaskCountOnes,
		Sum:       out.Sum.Present(),
		OddH:      w.DType == ops.F16 && H%2 == 1,
		Fast16:    op.b.fast16 && w.DType == ops.F16,
	}
	k.Vectorize(op.plan)
	// Device-resident int32 inputs get bindings of their own, so they are bound where they
	// are rather than copied into one buffer, where the device has the storage buffers.
	if in.IDsDev != nil || in.SegIDsDev != nil || in.MaskDev != nil || in.PosIDsDev != nil {
		split := k
		split.SplitInts = true
		if split.StorageBuffers() <= int(op.b.limits.MaxStorageBuffersPerShaderStage) {
			k = split
		}
	}
	return k
}

// params writes the kernel's Params block: nx workgroups a grid row, offs the word offsets
// of ids, segment ids, mask and position ids in their binding.
func (op *embedOp) params(p *params, in *ops.EmbedInputs, nx uint32, offs [4]uint32) {
	w := &op.w
	for _, v := range [...]uint32{uint32(in.B * in.S), uint32(w.H), nx, uint32(in.S), uint32(w.V), uint32(w.P),
		uint32(w.G), uint32(max(in.PosBatch, 1)), offs[0], offs[1], offs[2], offs[3]} {
		p.u32(v)
	}
	p.f32(op.plan.InvH)
	p.f32(w.Epsilon)
	p.u32(0) // zero: the opaque() operand that keeps the compiler from contracting
	p.u32(uint32(in.B))
}

var embedIDNames = [4]string{"input_ids", "segment_ids", "mask", "position_ids"}

// Run computes one batch in one dispatch: host tensors through the call's scratch, device
// tensors where they are.
func (op *embedOp) Run(ctx context.Context, in *ops.EmbedInputs, out *ops.EmbedOutputs) error {
	if err := op.enter(opEmbed); err != nil {
		return err
	}
	defer op.leave()
	return op.run(ctx, in, out)
}

// run is Run once the backend is entered.
func (op *embedOp) run(ctx context.Context, in *ops.EmbedInputs, out *ops.EmbedOutputs) error {
	b := op.b
	w := &op.w
	H, rows := w.H, in.B*in.S
	outBytes := align4(uint64(rows) * uint64(H) * uint64(w.DType.Size()))
	if err := b.checkBinding(opEmbed, "output", outBytes); err != nil {
		return err
	}
	k := op.kernel(in, out)
	groups, nx, err := b.grid(opEmbed, rows, k.RowsPer())
	if err != nil {
		return err
	}
	pipe, err := pipeline(b, b.embedPipe, k, k.Key, func() (string, error) { return shaders.RenderEmbed(k) })
	if err != nil {
		return err
	}
	s := calls.Get().(*dawnrt.Call)
	defer calls.Put(s)
	s.Reset(opEmbed)
	s.Kernel(pipe, groups)

	// The int32 inputs (ids, segment ids, mask, position ids): a device tensor is bound where
	// it is when the kernel gives each its own binding (SplitInts), else copied into the one
	// int32 buffer; host ones share one scratch buffer, told apart by their offsets.
	n := uint32(rows)
	var offs [4]uint32
	var devs [4]*dawnrt.Buffer
	lens := [4]uint32{n, 0, 0, 0}
	hosts := [4][]int32{in.IDs, in.SegIDs, in.Mask, in.PosIDs}
	for i, m := range [4]ops.DeviceMem{in.IDsDev, in.SegIDsDev, in.MaskDev, in.PosIDsDev} {
		if devs[i], err = b.buffer(opEmbed, embedIDNames[i], m); err != nil {
			return err
		}
	}
	if k.SegIDs {
		lens[1] = n
	}
	if k.MaskIndex {
		lens[2] = n
	}
	if k.PosIDs {
		lens[3] = uint32(max(in.PosBatch, 1) * in.S)
	}
	var nInts uint32
	for i := range offs {
		if lens[i] > 0 && (devs[i] == nil || !k.SplitInts) {
			offs[i] = nInts
			nInts += lens[i]
		}
	}
	if err := b.checkBinding(opEmbed, "int32 inputs", uint64(nInts)*4); err != nil {
		return err
	}
	var p params
	op.params(&p, in, nx, offs)
	s.Params(embB.Params, p.bytes())
	ints := dawnrt.Nowhere
	intsBytes := uint64(max(nInts, 1)) * 4
	if nInts > 0 || !k.SplitInts {
		ints = s.Scratch(intsBytes, dawnrt.UsageStorage|dawnrt.UsageCopyDst)
	}
	if !k.SplitInts {
		s.BindScratch(embB.Ints, "input_ids", ints, intsBytes, false)
	}
	check := false
	for i := range lens {
		switch {
		case lens[i] == 0:
		case devs[i] != nil && k.SplitInts:
			s.Bind(shaders.IntBindings[i], embedIDNames[i], devs[i], devs[i].Size(), false)
		case devs[i] != nil:
			s.Pre(dawnrt.Copy{Src: devs[i], SrcSlot: dawnrt.AtBuffer, SrcName: embedIDNames[i], DstSlot: ints,
				DstOff: uint64(offs[i]) * 4, Size: uint64(lens[i]) * 4})
		default:
			if k.SplitInts {
				s.BindScratch(shaders.IntBindings[i], embedIDNames[i], ints, intsBytes, false)
			}
			s.Write(ints, uint64(offs[i])*4, bytesOf(hosts[i]), nil)
		}
		if lens[i] > 0 && devs[i] != nil && i != 2 { // the mask is never validated
			check = true
		}
	}
	s.Bind(embB.Word, "word_embedding", op.word, op.word.Size(), false)
	s.Bind(embB.Pos, "position_embedding", op.pos, op.pos.Size(), false)
	if k.Segment {
		s.Bind(embB.Seg, "segment_embedding", op.seg, op.seg.Size(), false)
	}
	s.Bind(embB.GammaBeta, "gamma", op.gb, op.gb.Size(), false)
	buf, host, err := b.operand(opEmbed, "output", out.Out)
	if err != nil {
		return err
	}
	s.Output(embB.Out, "output", buf, host, outBytes)
	if k.Sum {
		buf, host, err := b.operand(opEmbed, "embedding_sum", out.Sum)
		if err != nil {
			return err
		}
		s.Output(embB.Sum, "embedding_sum", buf, host, outBytes)
	}
	// aux: the id-check flags (zeroed before the dispatch) and mask_index. Host ids were
	// checked before the call; device ids are checked by the kernel (spec §A.2a).
	auxBytes := uint64(1+in.B) * 4
	aux := s.Scratch(auxBytes, dawnrt.UsageStorage|dawnrt.UsageCopySrc|dawnrt.UsageCopyDst)
	s.BindScratch(embB.Aux, "mask_index", aux, auxBytes, true)
	s.Pre(dawnrt.Copy{SrcZero: true, SrcSlot: dawnrt.Nowhere, DstSlot: aux, Size: 4})
	if check {
		s.Post(dawnrt.Copy{SrcSlot: aux, DstIDCheck: true, DstSlot: dawnrt.Nowhere, Size: 4})
		s.CheckIDs(idReport)
	}
	miDev, err := b.buffer(opEmbed, "mask_index", out.MaskIndexDev)
	if err != nil {
		return err
	}
	switch {
	case k.MaskIndex && miDev != nil:
		s.Post(dawnrt.Copy{SrcSlot: aux, SrcOff: 4, Dst: miDev, DstSlot: dawnrt.AtBuffer, DstName: "mask_index", Size: uint64(in.B) * 4})
	case k.MaskIndex:
		s.Read(nil, aux, 4, bytesOf(out.MaskIndex))
	case miDev != nil: // no mask: mask_index is all zeros (spec §A.4)
		s.Post(dawnrt.Copy{SrcZero: true, SrcSlot: dawnrt.Nowhere, Dst: miDev, DstSlot: dawnrt.AtBuffer, DstName: "mask_index", Size: uint64(in.B) * 4})
	}
	if err := s.CheckAliases(); err != nil {
		return err
	}
	if err := b.dev.Run(ctx, s); err != nil {
		return err
	}
	if out.MaskIndex != nil && !k.MaskIndex {
		clear(out.MaskIndex)
	}
	return nil
}

// idReport turns the kernel's id-check flags into an error on the first tensor that held an
// id out of range (the order of spec §A.2's checks); its rule names every such tensor.
func idReport(flags uint32) error {
	tables := [3]string{"word_embedding", "segment_embedding", "position_embedding"}
	var bad []string
	first := ""
	for i, name := range [3]string{"input_ids", "segment_ids", "position_ids"} {
		if flags&(1<<i) != 0 {
			if first == "" {
				first = name
			}
			bad = append(bad, fmt.Sprintf("an id of %s is outside %s's rows", name, tables[i]))
		}
	}
	if first == "" {
		return &ops.ArgError{Op: opEmbed, Tensor: "input_ids", Rule: fmt.Sprintf("input index out of range: id check word %#x", flags)}
	}
	return &ops.ArgError{Op: opEmbed, Tensor: first,
		Rule: "input index out of range: " + strings.Join(bad, ", and ") + " (found by the device's check)"}
}
