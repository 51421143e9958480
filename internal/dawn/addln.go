//go:build cgo

package dawn

import (
	"context"
	"fmt"

	"github.com/fusednorm/fusednorm/internal/dawnrt"
	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/plan"
	"github.com/fusednorm/fusednorm/shaders"
)

const opAdd = "AddLayerNorm"

var addB = shaders.AddLNBindings

// AddLayerNorm runs spec §B.4 in one dispatch, host and device tensors alike.
func (b *Backend) AddLayerNorm(ctx context.Context, a *ops.AddLN) error {
	leave, err := b.enter(opAdd)
	if err != nil {
		return err
	}
	defer leave()
	return b.addLayerNorm(ctx, a, nil, false)
}

// addPrep is an AddLayerNorm with gamma+beta (and the bias) resident.
type addPrep struct {
	prepared
	gamma    ops.Buf // the caller's, kept to upload again after a device loss
	beta     ops.Buf
	bias     ops.Buf
	biasFull bool

	gb, biasOwn, biasDev *dawnrt.Buffer
}

// PrepareAddLN uploads gamma and beta (joined) and the bias once; Run binds them. A bias
// that is a device tensor is bound where it is (it must stay open while the op is used).
func (b *Backend) PrepareAddLN(gamma, beta, bias ops.Buf, biasFull bool) (ops.PreparedAddLN, error) {
	leave, err := b.enter("PrepareAddLN")
	if err != nil {
		return nil, err
	}
	defer leave()
	p := &addPrep{prepared: prepared{b: b}, gamma: gamma, beta: beta, bias: bias, biasFull: biasFull}
	if err := p.upload(); err != nil {
		return nil, err
	}
	b.track(p)
	return p, nil
}

// upload makes the op's resident buffers; on failure none is left.
func (p *addPrep) upload() error {
	const op = "PrepareAddLN"
	b := p.b
	ctx := context.Background()
	g, err := b.hostBytes(ctx, op, "gamma", p.gamma)
	if err != nil {
		return err
	}
	bt, err := b.hostBytes(ctx, op, "beta", p.beta)
	if err != nil {
		return err
	}
	if p.gb, err = b.newBuffer(op, "gamma+beta", append(append(make([]byte, 0, len(g)+len(bt)), g...), bt...)); err != nil {
		return err
	}
	if p.bias.Present() {
		buf, host, err := b.operand(op, "bias", p.bias)
		if err == nil && buf == nil {
			p.biasOwn, err = b.newBuffer(op, "bias", host)
		}
		if err != nil {
			p.release()
			return err
		}
		p.biasDev = buf
	}
	return nil
}

func (p *addPrep) release() { releaseAll(&p.gb, &p.biasOwn) }

// Close releases the resident weights after the runs in flight.
func (p *addPrep) Close() error { return p.close(p) }

// Run computes one call with the resident weights; a.Gamma, a.Beta, a.Bias are ignored.
func (p *addPrep) Run(ctx context.Context, a *ops.AddLN) error {
	if err := p.enter(opAdd); err != nil {
		return err
	}
	defer p.leave()
	return p.b.addLayerNorm(ctx, a, p, false)
}

// addLayerNorm builds and runs one call: prep, when set, supplies the weights; reread
// forces the kernel variant that re-reads the row in each pass instead of keeping it in
// registers (calibration checks that both agree). The caller has entered the backend.
func (b *Backend) addLayerNorm(ctx context.Context, a *ops.AddLN, prep *addPrep, reread bool) error {
	N, D := a.N, a.D
	pl := b.Plan(D, a.Half())
	gammaT, biasT, biasFull := a.Gamma.DType, a.Bias.DType, a.Bias.Present() && a.BiasFull
	if prep != nil {
		gammaT, biasT, biasFull = prep.gamma.DType, prep.bias.DType, prep.bias.Present() && prep.biasFull && N > 1
	}
	stats := len(a.Mean) > 0 || len(a.Rstd) > 0 || a.MeanDev != nil || a.RstdDev != nil
	k := addKernel(pl, a, gammaT, biasT, biasFull, stats, b.fast16)
	if reread {
		k.Private = 0
		k.Vectorize(pl) // a kernel that re-reads its rows: not the pair kernel, which keeps them
	}
	pipe, err := pipeline(b, b.addPipe, k, k.Key, func() (string, error) { return shaders.RenderAddLN(k) })
	if err != nil {
		return err
	}
	groups, nx, err := b.grid(opAdd, N, k.RowsPer())
	if err != nil {
		return err
	}
	s := calls.Get().(*dawnrt.Call)
	defer calls.Put(s)
	s.Reset(opAdd)
	s.Kernel(pipe, groups)
	var u params
	addParams(&u, N, D, nx, pl.InvH, a.Epsilon)
	s.Params(addB.Params, u.bytes())

	rowBytes := func(dt ops.DType) uint64 { return align4(uint64(N) * uint64(D) * uint64(dt.Size())) }
	for i, x := range [2]ops.Buf{a.X1, a.X2} {
		name := [2]string{"x1", "x2"}[i]
		buf, host, err := b.operand(opAdd, name, x)
		if err != nil {
			return err
		}
		size := rowBytes(x.DType)
		if err := b.checkBinding(opAdd, name, size); err != nil {
			return err
		}
		s.Input([2]uint32{addB.X1, addB.X2}[i], name, buf, host, size)
	}
	if prep != nil {
		s.Bind(addB.GammaBeta, "gamma", prep.gb, prep.gb.Size(), false)
		if bb := orBuf(prep.biasOwn, prep.biasDev); bb != nil {
			s.Bind(addB.Bias, "bias", bb, bb.Size(), false)
		}
	} else if err := b.addWeights(s, a); err != nil {
		return err
	}
	outBytes := rowBytes(a.Y.DType)
	if err := b.checkBinding(opAdd, "y", outBytes); err != nil {
		return err
	}
	buf, host, err := b.operand(opAdd, "y", a.Y)
	if err != nil {
		return err
	}
	s.Output(addB.Y, "y", buf, host, outBytes)
	if k.WriteX {
		buf, host, err := b.operand(opAdd, "x", a.X)
		if err != nil {
			return err
		}
		s.Output(addB.X, "x", buf, host, outBytes)
	}
	if stats {
		for i, m := range [2]ops.DeviceMem{a.MeanDev, a.RstdDev} {
			name := [2]string{"mean", "rstd"}[i]
			buf, err := b.buffer(opAdd, name, m)
			if err != nil {
				return err
			}
			s.Output([2]uint32{addB.Mean, addB.Rstd}[i], name, buf, bytesOf([2][]float32{a.Mean, a.Rstd}[i]), uint64(N)*4)
		}
	}
	if err := s.CheckAliases(); err != nil {
		return err
	}
	return b.dev.Run(ctx, s)
}

// addWeights binds the weights of an unprepared call: gamma and beta joined into one scratch
// buffer (written from the host, or copied from device tensors), and the bias.
func (b *Backend) addWeights(s *dawnrt.Call, a *ops.AddLN) error {
	gbBytes := uint64(a.D) * uint64(a.Gamma.DType.Size())
	size := align4(2 * gbBytes)
	gbs := s.Scratch(size, dawnrt.UsageStorage|dawnrt.UsageCopyDst)
	s.BindScratch(addB.GammaBeta, "gamma", gbs, size, false)
	gBuf, gHost, err := b.operand(opAdd, "gamma", a.Gamma)
	if err != nil {
		return err
	}
	bBuf, bHost, err := b.operand(opAdd, "beta", a.Beta)
	if err != nil {
		return err
	}
	switch {
	case gBuf == nil && bBuf == nil:
		s.Write(gbs, 0, gHost, bHost)
	case gbBytes%4 != 0:
		return fmt.Errorf("dawn: %s: gamma and beta on the device with an odd %v row: prepare the op (NewAddLayerNorm): %w",
			opAdd, a.Gamma.DType, ops.ErrNotSupported)
	default:
		for i, o := range [2]struct {
			buf  *dawnrt.Buffer
			host []byte
		}{{gBuf, gHost}, {bBuf, bHost}} {
			if o.buf != nil {
				s.Pre(dawnrt.Copy{Src: o.buf, SrcSlot: dawnrt.AtBuffer, SrcName: [2]string{"gamma", "beta"}[i],
					DstSlot: gbs, DstOff: uint64(i) * gbBytes, Size: gbBytes})
			} else {
				s.Write(gbs, uint64(i)*gbBytes, o.host, nil)
			}
		}
	}
	if a.Bias.Present() {
		buf, host, err := b.operand(opAdd, "bias", a.Bias)
		if err != nil {
			return err
		}
		s.Input(addB.Bias, "bias", buf, host, align4(uint64(a.Bias.Len())*uint64(a.Bias.DType.Size())))
	}
	return nil
}

// addParams writes the kernel's Params block: rows, row length, workgroups a grid row, the
// zero that keeps the compiler from contracting, 1/D and epsilon.
func addParams(p *params, N, D int, nx uint32, invD, eps float32) {
	p.u32(uint32(N))
	p.u32(uint32(D))
	p.u32(nx)
	p.u32(0)
	p.f32(invD)
	p.f32(eps)
}

// addKernel is the kernel variant of a call: gamma's and bias's dtypes and biasFull are given
// apart, since a prepared op holds them.
func addKernel(p plan.Plan, a *ops.AddLN, gamma, bias ops.DType, biasFull, stats, fast16 bool) shaders.AddLN {
	k := shaders.AddLN{
		W:        p.W,
		Private:  privateFor(p, a.Y.DType),
		X1:       a.X1.DType,
		X2:       a.X2.DType,
		Gamma:    gamma,
		Bias:     bias,
		BiasFull: biasFull,
		Out:      a.Y.DType,
		WriteX:   a.X.Present(),
		Stats:    stats,
		OddD:     a.Y.DType.Is16() && a.D%2 == 1,
	}
	k.Fast16 = fast16 && k.HasF16()
	k.Vectorize(p)
	return k
}
