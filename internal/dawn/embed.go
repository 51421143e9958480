//go:build cgo

package dawn

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/plan"
	"github.com/fusednorm/fusednorm/shaders"
)

// embedOp is an EmbedLayerNorm op whose tables, gamma and beta live on the device.
type embedOp struct {
	b *Backend
	// w keeps references to the caller's host tensors (which the API forbids modifying while
	// the op lives), to upload them again after a device loss.
	w    ops.EmbedWeights
	plan plan.Plan

	word, pos, seg, gb *buffer
	cpu                ops.PreparedEmbed // set when the backend fell back to the CPU
	// Tables that are device tensors, bound where they are (devops.go); not released here.
	wordDev, posDev, segDev *buffer

	life   sync.RWMutex
	closed bool

	memo specMemo[embedKey] // the last call on device tensors (specmemo.go)
}

// PrepareEmbed uploads the tables, gamma and beta once; runs then move only ids and outputs.
func (b *Backend) PrepareEmbed(w *ops.EmbedWeights) (ops.PreparedEmbed, error) {
	leave, err := b.enter("PrepareEmbed")
	if err != nil {
		return nil, err
	}
	defer leave()
	if w.DType != ops.F32 && w.DType != ops.F16 {
		return nil, fmt.Errorf("dawn: PrepareEmbed: dtype %v: %w", w.DType, ops.ErrNotSupported)
	}
	if b.fallback != nil {
		return b.fallback.PrepareEmbed(w)
	}
	if embedHasDevice(w) {
		return b.prepareEmbedDev(w)
	}
	op := &embedOp{b: b, w: *w, plan: b.Plan(w.H, w.Half())}
	if err := op.upload(); err != nil {
		return nil, err
	}
	b.track(op)
	return op, nil
}

// upload creates the op's device buffers and writes the weights; on failure none is left.
func (op *embedOp) upload() error {
	b, w := op.b, &op.w
	gb := concat(w.Gamma, w.Beta)
	tensors := []struct {
		name string
		data []byte
		dst  **buffer
	}{
		{"word_embedding", w.Word.Bytes(), &op.word},
		{"position_embedding", w.Pos.Bytes(), &op.pos},
		{"segment_embedding", w.Seg.Bytes(), &op.seg},
		{"gamma+beta", gb, &op.gb},
	}
	for _, t := range tensors {
		if t.data == nil {
			continue
		}
		if err := b.checkBinding("PrepareEmbed", t.name, align4(uint64(len(t.data)))); err != nil {
			op.release()
			return err
		}
	}
	for _, t := range tensors {
		if t.data == nil {
			continue
		}
		buf, err := b.dev.createBuffer("fusednorm."+t.name, align4(uint64(len(t.data))), usageStorage|usageCopyDst)
		if err != nil {
			op.release()
			return deviceErr(fmt.Errorf("dawn: PrepareEmbed: %s: %w", t.name, err))
		}
		*t.dst = buf
		if err := b.write(buf, 0, t.data); err != nil {
			op.release()
			return fmt.Errorf("dawn: PrepareEmbed: %s: %w", t.name, err)
		}
	}
	return nil
}

// concat joins gamma and beta (same dtype) into one buffer's bytes: beta starts at element H.
func concat(gamma, beta ops.Buf) []byte {
	g, bt := gamma.Bytes(), beta.Bytes()
	out := make([]byte, 0, len(g)+len(bt))
	return append(append(out, g...), bt...)
}

func (op *embedOp) release() { releaseAll(&op.word, &op.pos, &op.seg, &op.gb) }

// releaseAll releases the buffers that ps point to and clears them; nil ones are skipped.
func releaseAll(ps ...**buffer) {
	for _, p := range ps {
		if *p != nil {
			(*p).release()
			*p = nil
		}
	}
}

// Close releases the resident weights after the runs in flight have finished.
func (op *embedOp) Close() error {
	op.life.Lock()
	defer op.life.Unlock()
	if !op.closed {
		op.closed = true
		op.b.life.RLock() // no recovery re-uploads the weights meanwhile
		op.b.untrack(op)
		op.b.forgetBuffers(op.word, op.pos, op.seg, op.gb)
		op.release()
		if op.cpu != nil {
			op.cpu.Close()
		}
		op.b.life.RUnlock()
	}
	return nil
}

// kernel is the kernel variant a call runs, for host and device tensors alike (the Dev
// fields are nil on the host path).
func (op *embedOp) kernel(in *ops.EmbedInputs, out *ops.EmbedOutputs) shaders.Embed {
	w, H := &op.w, op.w.H
	mi := (out.MaskIndex != nil || out.MaskIndexDev != nil) && (in.Mask != nil || in.MaskDev != nil)
	k := shaders.Embed{
		W:         op.plan.W,
		Private:   privateFor(op.plan),
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
// of ids, segment ids, mask and position ids in the int32 binding.
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

// embedParamsSize is the byte size of the kernel's Params struct.
const embedParamsSize = 64

// Run computes one batch in one dispatch and reads back the requested outputs.
func (op *embedOp) Run(ctx context.Context, in *ops.EmbedInputs, out *ops.EmbedOutputs) error {
	const name = "EmbedLayerNorm"
	if err := ctx.Err(); err != nil {
		return err
	}
	op.life.RLock()
	defer op.life.RUnlock()
	if op.closed {
		return fmt.Errorf("dawn: %s: %w", name, ops.ErrClosed)
	}
	if op.word == nil || op.pos == nil || embedCallHasDevice(in, out) {
		return op.runDev(ctx, in, out)
	}
	b := op.b
	leave, err := b.enter(name)
	if err != nil {
		return err
	}
	defer leave()
	if op.cpu != nil {
		return op.cpu.Run(ctx, in, out)
	}

	w := &op.w
	H, rows := w.H, in.B*in.S
	es := uint64(w.DType.Size())
	outBytes := align4(uint64(rows) * uint64(H) * es)
	if err := b.checkBinding(name, "output", outBytes); err != nil {
		return err
	}
	groups, nx, err := b.grid(name, rows)
	if err != nil {
		return err
	}
	k := op.kernel(in, out)
	pipe, err := b.pipeline(k.Key(), func() (string, error) { return shaders.RenderEmbed(k) })
	if err != nil {
		return fmt.Errorf("dawn: %s: %w", name, err)
	}

	// int32 inputs share one buffer: ids | segment ids | mask | position ids.
	type section struct {
		data []int32
		off  uint32
	}
	secs := []*section{{data: in.IDs}, {data: in.SegIDs}, {data: in.Mask}, {data: in.PosIDs}}
	if !k.SegIDs {
		secs[1].data = nil
	}
	if !k.MaskIndex {
		secs[2].data = nil
	}
	var nInts uint32
	for _, s := range secs {
		s.off = nInts
		nInts += uint32(len(s.data))
	}
	if err := b.checkBinding(name, "int32 inputs", uint64(nInts)*4); err != nil {
		return err
	}

	var u params
	op.params(&u, in, nx, [4]uint32{secs[0].off, secs[1].off, secs[2].off, secs[3].off})

	l := lease{p: &b.pool}
	defer l.done()
	params, err := l.get("fusednorm.embed.params", embedParamsSize, usageUniform|usageCopyDst)
	if err != nil {
		return fmt.Errorf("dawn: %s: %w", name, err)
	}
	ints, err := l.get("fusednorm.embed.ints", uint64(nInts)*4, usageStorage|usageCopyDst)
	if err != nil {
		return fmt.Errorf("dawn: %s: %w", name, err)
	}
	outBuf, err := l.get("fusednorm.embed.output", outBytes, usageStorage|usageCopySrc)
	if err != nil {
		return fmt.Errorf("dawn: %s: %w", name, err)
	}
	var sumBuf *buffer
	if k.Sum {
		if sumBuf, err = l.get("fusednorm.embed.sum", outBytes, usageStorage|usageCopySrc); err != nil {
			return fmt.Errorf("dawn: %s: %w", name, err)
		}
	}
	auxBytes := uint64(1+in.B) * 4
	aux, err := l.get("fusednorm.embed.aux", auxBytes, usageStorage|usageCopySrc|usageCopyDst)
	if err != nil {
		return fmt.Errorf("dawn: %s: %w", name, err)
	}

	if err := b.write(params, 0, u.bytes()); err != nil {
		return fmt.Errorf("dawn: %s: %w", name, err)
	}
	for _, s := range secs {
		if len(s.data) > 0 {
			if err := b.write(ints, uint64(s.off)*4, bytesOf(s.data)); err != nil {
				return fmt.Errorf("dawn: %s: %w", name, err)
			}
		}
	}
	if err := b.write(aux, 0, make([]byte, 4)); err != nil {
		return fmt.Errorf("dawn: %s: %w", name, err)
	}

	binds := []binding{
		{Binding: 0, Buffer: params, Size: embedParamsSize},
		{Binding: 1, Buffer: ints, Size: align4(uint64(max(nInts, 1)) * 4)},
		{Binding: 2, Buffer: op.word, Size: op.word.size},
		{Binding: 3, Buffer: op.pos, Size: op.pos.size},
		{Binding: 5, Buffer: op.gb, Size: op.gb.size},
		{Binding: 6, Buffer: outBuf, Size: outBytes},
		{Binding: 8, Buffer: aux, Size: auxBytes},
	}
	if k.Segment {
		binds = append(binds, binding{Binding: 4, Buffer: op.seg, Size: op.seg.size})
	}
	if k.Sum {
		binds = append(binds, binding{Binding: 7, Buffer: sumBuf, Size: outBytes})
	}

	var status [4]byte
	var rp readPlan
	rp.add(outBuf, 0, out.Out.Bytes())
	if k.Sum {
		rp.add(sumBuf, 0, out.Sum.Bytes())
	}
	rp.add(aux, 0, status[:])
	if k.MaskIndex {
		rp.add(aux, 4, bytesOf(out.MaskIndex))
	}
	if err := b.run(ctx, pipe, binds, groups, rp.reads); err != nil {
		return fmt.Errorf("dawn: %s: %w", name, deviceErr(err))
	}
	if err := b.takePending(); err != nil {
		return err
	}
	if out.MaskIndex != nil && !k.MaskIndex {
		clear(out.MaskIndex) // no mask: mask_index is all zeros (SPEC A.4)
	}
	if binary.LittleEndian.Uint32(status[:]) != 0 {
		return fmt.Errorf("dawn: %s: input index out of range (detected on the device): %w",
			name, ops.ErrInvalidArgument)
	}
	return nil
}
