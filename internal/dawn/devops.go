//go:build cgo

package dawn

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"sync"

	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/shaders"
)

// The two ops on the low-overhead path (exec.go): calls with device tensors, and prepared
// AddLayerNorms. The kernel variant and parameter block come from embed.go and addln.go
// (embedOp.kernel, embedOp.params, addParams), so both paths run the same kernels; device
// tensors are bound where they are, host tensors go through cached scratch.

// params is a little-endian parameter block built without allocating.
type params struct {
	b [paramsCap]byte
	n int
}

func (p *params) u32(v uint32)  { binary.LittleEndian.PutUint32(p.b[p.n:], v); p.n += 4 }
func (p *params) f32(v float32) { p.u32(math.Float32bits(v)) }
func (p *params) bytes() []byte { return p.b[:(p.n+15)&^15] }

// operand is where one tensor of a call lives: a device tensor's buffer, or host bytes.
type operand struct {
	buf  *buffer
	host []byte
}

// operandOf resolves a Buf (host or device) of this backend.
func (b *Backend) operandOf(op, name string, x ops.Buf) (operand, error) {
	if x.Dev == nil {
		return operand{host: x.Bytes()}, nil
	}
	db, err := b.own(op, name, x.Dev)
	if err != nil {
		return operand{}, err
	}
	return operand{buf: db.buf}, nil
}

func (b *Backend) devOperand(op, name string, m ops.DeviceMem) (*buffer, error) {
	if m == nil {
		return nil, nil
	}
	db, err := b.own(op, name, m)
	if err != nil {
		return nil, err
	}
	return db.buf, nil
}

// input binds an input tensor: a device buffer where it is, host bytes through scratch.
func (s *callSpec) input(binding uint32, o operand, size uint64) {
	if o.buf != nil {
		s.bind(bindRef{binding: binding, buf: o.buf, scratch: atBuffer, size: size})
		return
	}
	i := s.scratchFor(size, usageStorage|usageCopyDst)
	s.bind(bindRef{binding: binding, scratch: i, size: size})
	s.write(writeOp{scratch: i, data: o.host})
}

// output binds an output tensor: a device buffer where it is, else scratch read back.
func (s *callSpec) output(binding uint32, o operand, size uint64) {
	if o.buf != nil {
		s.bind(bindRef{binding: binding, buf: o.buf, scratch: atBuffer, size: size, write: true})
		return
	}
	i := s.scratchFor(size, usageStorage|usageCopySrc)
	s.bind(bindRef{binding: binding, scratch: i, size: size, write: true})
	s.read(readOp{scratch: i, dst: o.host})
}

// checkAliases refuses a call whose written device tensor is also bound elsewhere (WebGPU
// forbids a writable binding that aliases another in one dispatch).
func (s *callSpec) checkAliases() error {
	n := int(s.key.nbinds)
	for i := 0; i < n; i++ {
		a := s.key.binds[i]
		if !a.write || a.scratch != atBuffer {
			continue
		}
		for j := 0; j < n; j++ {
			if j != i && s.key.binds[j].buf == a.buf {
				return fmt.Errorf("dawn: %s: the device tensor written at binding %d is also bound at %d: %w",
					s.name, a.binding, s.key.binds[j].binding, ops.ErrInvalidArgument)
			}
		}
	}
	for i := 0; i < s.npre+s.npost; i++ {
		c := s.copies[i]
		if c.dst == nil {
			continue
		}
		for j := 0; j < n; j++ {
			if r := s.key.binds[j]; r.buf == c.dst {
				return fmt.Errorf("dawn: %s: an output device tensor is also bound at %d: %w", s.name, r.binding, ops.ErrInvalidArgument)
			}
		}
		for j := 0; j < s.npre+s.npost; j++ {
			if j != i && s.copies[j].dst == c.dst {
				return fmt.Errorf("dawn: %s: one device tensor receives two outputs: %w", s.name, ops.ErrInvalidArgument)
			}
		}
	}
	return nil
}

// hostBytes returns x's bytes on the host, reading a device tensor back (prepare time only).
func (b *Backend) hostBytes(ctx context.Context, op, name string, x ops.Buf) ([]byte, error) {
	if x.Dev == nil {
		return x.Bytes(), nil
	}
	db, err := b.own(op, name, x.Dev)
	if err != nil {
		return nil, err
	}
	out := make([]byte, db.bytes)
	if err := b.ReadDevice(ctx, x.Dev, out); err != nil {
		return nil, err
	}
	return out, nil
}

// ---- EmbedLayerNorm -----------------------------------------------------------------------

func embedHasDevice(w *ops.EmbedWeights) bool {
	return w.Word.Dev != nil || w.Pos.Dev != nil || w.Seg.Dev != nil || w.Gamma.Dev != nil || w.Beta.Dev != nil
}

func embedCallHasDevice(in *ops.EmbedInputs, out *ops.EmbedOutputs) bool {
	return in.IDsDev != nil || in.SegIDsDev != nil || in.MaskDev != nil || in.PosIDsDev != nil ||
		out.Out.Dev != nil || out.Sum.Dev != nil || out.MaskIndexDev != nil
}

// prepareEmbedDev prepares an EmbedLayerNorm whose weights include device tensors: those
// tables are bound where they are (they must stay open while the op is used); host tables
// are uploaded; gamma and beta are joined into one resident buffer.
func (b *Backend) prepareEmbedDev(w *ops.EmbedWeights) (ops.PreparedEmbed, error) {
	const name = "PrepareEmbed"
	op := &embedOp{b: b, w: *w, plan: b.Plan(w.H, w.Half())}
	op.w.Word, op.w.Pos, op.w.Seg, op.w.Gamma, op.w.Beta = ops.Buf{}, ops.Buf{}, ops.Buf{}, ops.Buf{}, ops.Buf{}
	ctx := context.Background()
	g, err := b.hostBytes(ctx, name, "gamma", w.Gamma)
	if err != nil {
		return nil, err
	}
	bt, err := b.hostBytes(ctx, name, "beta", w.Beta)
	if err != nil {
		return nil, err
	}
	gb := append(append(make([]byte, 0, len(g)+len(bt)), g...), bt...)
	tables := []struct {
		name string
		x    ops.Buf
		own  **buffer
		dev  **buffer
	}{
		{"word_embedding", w.Word, &op.word, &op.wordDev},
		{"position_embedding", w.Pos, &op.pos, &op.posDev},
		{"segment_embedding", w.Seg, &op.seg, &op.segDev},
	}
	for _, t := range tables {
		if !t.x.Present() {
			continue
		}
		o, err := b.operandOf(name, t.name, t.x)
		if err != nil {
			op.release()
			return nil, err
		}
		if o.buf != nil {
			if err := b.checkBinding(name, t.name, o.buf.size); err != nil {
				op.release()
				return nil, err
			}
			*t.dev = o.buf
			continue
		}
		if err := b.checkBinding(name, t.name, align4(uint64(len(o.host)))); err != nil {
			op.release()
			return nil, err
		}
		buf, err := b.dev.createBuffer("fusednorm."+t.name, align4(uint64(len(o.host))), usageStorage|usageCopyDst)
		if err != nil {
			op.release()
			return nil, deviceErr(fmt.Errorf("dawn: %s: %s: %w", name, t.name, err))
		}
		*t.own = buf
		if err := b.write(buf, 0, o.host); err != nil {
			op.release()
			return nil, fmt.Errorf("dawn: %s: %s: %w", name, t.name, err)
		}
	}
	buf, err := b.dev.createBuffer("fusednorm.gamma+beta", align4(uint64(len(gb))), usageStorage|usageCopyDst)
	if err != nil {
		op.release()
		return nil, deviceErr(fmt.Errorf("dawn: %s: gamma+beta: %w", name, err))
	}
	op.gb = buf
	if err := b.write(buf, 0, gb); err != nil {
		op.release()
		return nil, fmt.Errorf("dawn: %s: gamma+beta: %w", name, err)
	}
	return op, nil
}

func orBuf(own, dev *buffer) *buffer {
	if dev != nil {
		return dev
	}
	return own
}

// runDev is Run for calls with device tensors or device-resident tables.
func (op *embedOp) runDev(ctx context.Context, in *ops.EmbedInputs, out *ops.EmbedOutputs) error {
	const name = "EmbedLayerNorm"
	b := op.b
	b.life.RLock()
	defer b.life.RUnlock()
	if b.closed {
		return fmt.Errorf("dawn: %s: %w", name, ops.ErrClosed)
	}
	key, remember := embedKeyOf(in, out)
	if remember {
		if ran, err := runRemembered(ctx, b, name, &op.memo, &key); ran {
			return err
		}
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
	pipe, err := b.embedPipeline(k)
	if err != nil {
		return fmt.Errorf("dawn: %s: %w", name, err)
	}
	s := specs.Get().(*callSpec)
	defer specs.Put(s)
	s.reset(name)
	s.key.pipe = pipe
	s.groups = groups

	// The int32 inputs (ids, segment ids, mask, position ids): a device tensor is bound where
	// it is when the kernel gives each its own binding (SplitInts, see embedOp.kernel), else
	// copied into the one int32 buffer; host ones share one scratch buffer, told apart by
	// their offsets in params.
	n := uint32(rows)
	var offs [4]uint32
	var devs [4]*buffer
	lens := [4]uint32{n, 0, 0, 0}
	hosts := [4][]int32{in.IDs, in.SegIDs, in.Mask, in.PosIDs}
	for i, m := range [4]ops.DeviceMem{in.IDsDev, in.SegIDsDev, in.MaskDev, in.PosIDsDev} {
		if devs[i], err = b.devOperand(name, embedIDNames[i], m); err != nil {
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
	if err := b.checkBinding(name, "int32 inputs", uint64(nInts)*4); err != nil {
		return err
	}
	var p params
	op.params(&p, in, nx, offs)
	s.setParams(p.bytes())
	s.bind(bindRef{binding: 0, scratch: atParams, size: embedParamsSize})
	ints := atNowhere
	if nInts > 0 || !k.SplitInts {
		ints = s.scratchFor(uint64(max(nInts, 1))*4, usageStorage|usageCopyDst)
	}
	if !k.SplitInts {
		s.bind(bindRef{binding: 1, scratch: ints, size: align4(uint64(max(nInts, 1)) * 4)})
	}
	for i := range lens {
		switch {
		case lens[i] == 0:
		case devs[i] != nil && k.SplitInts:
			s.bind(bindRef{binding: shaders.IntBindings[i], buf: devs[i], scratch: atBuffer, size: devs[i].size})
		case devs[i] != nil:
			s.pre(copyOp{src: devs[i], srcScratch: atBuffer, dstScratch: ints, dstOff: uint64(offs[i]) * 4, size: uint64(lens[i]) * 4})
		default:
			if k.SplitInts {
				s.bind(bindRef{binding: shaders.IntBindings[i], scratch: ints, size: uint64(nInts) * 4})
			}
			s.write(writeOp{scratch: ints, off: uint64(offs[i]) * 4, data: bytesOf(hosts[i])})
		}
		if lens[i] > 0 && devs[i] != nil && i != 2 { // the mask is never validated
			s.idCheck = true
		}
	}
	word, pos, seg := orBuf(op.word, op.wordDev), orBuf(op.pos, op.posDev), orBuf(op.seg, op.segDev)
	s.bind(bindRef{binding: 2, buf: word, scratch: atBuffer, size: word.size})
	s.bind(bindRef{binding: 3, buf: pos, scratch: atBuffer, size: pos.size})
	if k.Segment {
		s.bind(bindRef{binding: 4, buf: seg, scratch: atBuffer, size: seg.size})
	}
	s.bind(bindRef{binding: 5, buf: op.gb, scratch: atBuffer, size: op.gb.size})
	o, err := b.operandOf(name, "output", out.Out)
	if err != nil {
		return err
	}
	s.output(6, o, outBytes)
	if k.Sum {
		o, err := b.operandOf(name, "embedding_sum", out.Sum)
		if err != nil {
			return err
		}
		s.output(7, o, outBytes)
	}
	auxBytes := uint64(1+in.B) * 4
	aux := s.scratchFor(auxBytes, usageStorage|usageCopySrc|usageCopyDst)
	s.bind(bindRef{binding: 8, scratch: aux, size: auxBytes, write: true})
	s.pre(copyOp{srcZero: true, srcScratch: atNowhere, dstScratch: aux, size: 4})
	s.zeroBytes = max(s.zeroBytes, 4)
	if s.idCheck {
		s.post(copyOp{srcScratch: aux, dstIDStatus: true, dstScratch: atNowhere, size: 4})
	}
	miDev, err := b.devOperand(name, "mask_index", out.MaskIndexDev)
	if err != nil {
		return err
	}
	switch {
	case k.MaskIndex && miDev != nil:
		s.post(copyOp{srcScratch: aux, srcOff: 4, dst: miDev, dstScratch: atBuffer, size: uint64(in.B) * 4})
	case k.MaskIndex:
		s.read(readOp{scratch: aux, off: 4, dst: bytesOf(out.MaskIndex)})
	case miDev != nil: // no mask: mask_index is all zeros (SPEC A.4)
		s.post(copyOp{srcZero: true, srcScratch: atNowhere, dst: miDev, dstScratch: atBuffer, size: uint64(in.B) * 4})
		s.zeroBytes = max(s.zeroBytes, uint64(in.B)*4)
	}
	if err := s.checkAliases(); err != nil {
		return err
	}
	if err := b.exec(ctx, s); err != nil {
		return fmt.Errorf("dawn: %s: %w", name, deviceErr(err))
	}
	if remember {
		op.memo.Store(&key, s)
	}
	if out.MaskIndex != nil && !k.MaskIndex {
		clear(out.MaskIndex)
	}
	return nil
}

var embedIDNames = [4]string{"input_ids", "segment_ids", "mask", "position_ids"}

// ---- AddLayerNorm -------------------------------------------------------------------------

func addHasDevice(a *ops.AddLN) bool {
	return a.X1.Dev != nil || a.X2.Dev != nil || a.Gamma.Dev != nil || a.Beta.Dev != nil || a.Bias.Dev != nil ||
		a.Y.Dev != nil || a.X.Dev != nil || a.MeanDev != nil || a.RstdDev != nil
}

// addPrep is an AddLayerNorm with gamma+beta (and bias) resident.
type addPrep struct {
	b        *Backend
	gamma    ops.DType
	bias     ops.DType // Invalid: none
	biasFull bool
	d        int
	gb       *buffer
	biasOwn  *buffer
	biasDev  *buffer

	life   sync.RWMutex
	closed bool

	memo specMemo[addKey] // the last call on device tensors (specmemo.go)
}

// PrepareAddLN uploads gamma and beta (joined) and the bias once; Run binds them.
func (b *Backend) PrepareAddLN(gamma, beta, bias ops.Buf, biasFull bool) (ops.PreparedAddLN, error) {
	const name = "PrepareAddLN"
	b.life.RLock()
	defer b.life.RUnlock()
	if b.closed {
		return nil, fmt.Errorf("dawn: %s: %w", name, ops.ErrClosed)
	}
	ctx := context.Background()
	g, err := b.hostBytes(ctx, name, "gamma", gamma)
	if err != nil {
		return nil, err
	}
	bt, err := b.hostBytes(ctx, name, "beta", beta)
	if err != nil {
		return nil, err
	}
	gb := append(append(make([]byte, 0, len(g)+len(bt)), g...), bt...)
	if err := b.checkBinding(name, "gamma+beta", align4(uint64(len(gb)))); err != nil {
		return nil, err
	}
	p := &addPrep{b: b, gamma: gamma.DType, bias: bias.DType, biasFull: biasFull, d: gamma.Len()}
	if p.gb, err = b.dev.createBuffer("fusednorm.addln.gamma+beta", align4(uint64(len(gb))), usageStorage|usageCopyDst); err != nil {
		return nil, deviceErr(fmt.Errorf("dawn: %s: %w", name, err))
	}
	if err := b.write(p.gb, 0, gb); err != nil {
		p.release()
		return nil, fmt.Errorf("dawn: %s: %w", name, err)
	}
	if bias.Present() {
		o, err := b.operandOf(name, "bias", bias)
		if err != nil {
			p.release()
			return nil, err
		}
		if o.buf != nil {
			p.biasDev = o.buf
		} else {
			if p.biasOwn, err = b.dev.createBuffer("fusednorm.addln.bias", align4(uint64(len(o.host))), usageStorage|usageCopyDst); err != nil {
				p.release()
				return nil, deviceErr(fmt.Errorf("dawn: %s: %w", name, err))
			}
			if err := b.write(p.biasOwn, 0, o.host); err != nil {
				p.release()
				return nil, fmt.Errorf("dawn: %s: %w", name, err)
			}
		}
	}
	return p, nil
}

func (p *addPrep) release() { releaseAll(&p.gb, &p.biasOwn) }

// Close releases the resident weights after the runs in flight.
func (p *addPrep) Close() error {
	p.life.Lock()
	defer p.life.Unlock()
	if !p.closed {
		p.closed = true
		p.b.forgetBuffers(p.gb, p.biasOwn)
		p.release()
	}
	return nil
}

// Run computes one call with the resident weights; a.Gamma, a.Beta, a.Bias are ignored.
func (p *addPrep) Run(ctx context.Context, a *ops.AddLN) error {
	p.life.RLock()
	defer p.life.RUnlock()
	if p.closed {
		return fmt.Errorf("dawn: AddLayerNorm: %w", ops.ErrClosed)
	}
	return p.b.addDev(ctx, a, p)
}

// addDev runs AddLayerNorm on the low-overhead path; prep, when set, supplies the weights.
func (b *Backend) addDev(ctx context.Context, a *ops.AddLN, prep *addPrep) error {
	const name = "AddLayerNorm"
	b.life.RLock()
	defer b.life.RUnlock()
	if b.closed {
		return fmt.Errorf("dawn: %s: %w", name, ops.ErrClosed)
	}
	var key addKey
	remember := false
	if prep != nil {
		if key, remember = addKeyOf(a); remember {
			if ran, err := runRemembered(ctx, b, name, &prep.memo, &key); ran {
				return err
			}
		}
	}
	N, D := a.N, a.D
	pl := b.Plan(D, a.Half())
	gammaT, biasT, biasFull := a.Gamma.DType, a.Bias.DType, a.Bias.Present() && a.BiasFull
	if prep != nil {
		gammaT, biasT, biasFull = prep.gamma, prep.bias, prep.bias != ops.Invalid && prep.biasFull && N > 1
	}
	k := addKernel(pl, a, gammaT, biasT, biasFull, b.fast16)
	pipe, err := b.addPipeline(k)
	if err != nil {
		return fmt.Errorf("dawn: %s: %w", name, err)
	}
	groups, nx, err := b.grid(name, N)
	if err != nil {
		return err
	}
	outBytes := align4(uint64(N) * uint64(D) * uint64(a.Y.DType.Size()))
	statBytes := uint64(N) * 8
	s := specs.Get().(*callSpec)
	defer specs.Put(s)
	s.reset(name)
	s.key.pipe = pipe
	s.groups = groups
	var p params
	addParams(&p, N, D, nx, pl.InvH, a.Epsilon)
	s.setParams(p.bytes())
	s.bind(bindRef{binding: 0, scratch: atParams, size: addlnParamsSize})

	for i, x := range [2]ops.Buf{a.X1, a.X2} {
		nm := [2]string{"x1", "x2"}[i]
		o, err := b.operandOf(name, nm, x)
		if err != nil {
			return err
		}
		size := align4(uint64(N) * uint64(D) * uint64(x.DType.Size()))
		if err := b.checkBinding(name, nm, size); err != nil {
			return err
		}
		s.input(uint32(1+i), o, size)
	}
	if prep != nil {
		s.bind(bindRef{binding: 3, buf: prep.gb, scratch: atBuffer, size: prep.gb.size})
		if biasT != ops.Invalid {
			bb := orBuf(prep.biasOwn, prep.biasDev)
			s.bind(bindRef{binding: 4, buf: bb, scratch: atBuffer, size: bb.size})
		}
	} else {
		gbBytes := uint64(D) * uint64(a.Gamma.DType.Size())
		size := align4(2 * gbBytes)
		gbs := s.scratchFor(size, usageStorage|usageCopyDst)
		s.bind(bindRef{binding: 3, scratch: gbs, size: size})
		g, err := b.operandOf(name, "gamma", a.Gamma)
		if err != nil {
			return err
		}
		bt, err := b.operandOf(name, "beta", a.Beta)
		if err != nil {
			return err
		}
		switch {
		case g.buf == nil && bt.buf == nil:
			s.write(writeOp{scratch: gbs, data: g.host, data2: bt.host})
		case gbBytes%4 != 0:
			return fmt.Errorf("dawn: %s: gamma and beta on the device with an odd %v row: prepare the op (NewAddLayerNorm): %w",
				name, a.Gamma.DType, ops.ErrNotSupported)
		default:
			for i, o := range [2]operand{g, bt} {
				if o.buf != nil {
					s.pre(copyOp{src: o.buf, srcScratch: atBuffer, dstScratch: gbs, dstOff: uint64(i) * gbBytes, size: gbBytes})
				} else {
					s.write(writeOp{scratch: gbs, off: uint64(i) * gbBytes, data: o.host})
				}
			}
		}
		if a.Bias.Present() {
			o, err := b.operandOf(name, "bias", a.Bias)
			if err != nil {
				return err
			}
			s.input(4, o, align4(uint64(a.Bias.Len())*uint64(a.Bias.DType.Size())))
		}
	}
	if err := b.checkBinding(name, "y", outBytes); err != nil {
		return err
	}
	if err := b.checkBinding(name, "mean+rstd", statBytes); err != nil {
		return err
	}
	o, err := b.operandOf(name, "y", a.Y)
	if err != nil {
		return err
	}
	s.output(5, o, outBytes)
	if k.WriteX {
		o, err := b.operandOf(name, "x", a.X)
		if err != nil {
			return err
		}
		s.output(6, o, outBytes)
	}
	stats := s.scratchFor(statBytes, usageStorage|usageCopySrc)
	s.bind(bindRef{binding: 7, scratch: stats, size: statBytes, write: true})
	for i, m := range [2]ops.DeviceMem{a.MeanDev, a.RstdDev} {
		off := uint64(i) * uint64(N) * 4
		if m != nil {
			buf, err := b.devOperand(name, [2]string{"mean", "rstd"}[i], m)
			if err != nil {
				return err
			}
			s.post(copyOp{srcScratch: stats, srcOff: off, dst: buf, dstScratch: atBuffer, size: uint64(N) * 4})
		} else {
			s.read(readOp{scratch: stats, off: off, dst: bytesOf([2][]float32{a.Mean, a.Rstd}[i])})
		}
	}
	if err := s.checkAliases(); err != nil {
		return err
	}
	if err := b.exec(ctx, s); err != nil {
		return fmt.Errorf("dawn: %s: %w", name, deviceErr(err))
	}
	if remember {
		prep.memo.Store(&key, s)
	}
	return nil
}
