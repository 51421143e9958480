//go:build cgo

package dawn

import (
	"context"
	"fmt"

	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/plan"
	"github.com/fusednorm/fusednorm/shaders"
)

// addlnParamsSize is the byte size of the kernel's Params struct.
const addlnParamsSize = 32

// AddLayerNorm runs SPEC §B.4 in one dispatch: inputs are uploaded to pooled buffers, and y,
// mean, rstd (and x when requested) are read back into the caller's slices.
func (b *Backend) AddLayerNorm(ctx context.Context, a *ops.AddLN) error {
	if addHasDevice(a) {
		return b.addDev(ctx, a, nil)
	}
	return b.addLayerNorm(ctx, a, false)
}

// addLayerNorm runs the op; reread forces the kernel variant that re-reads the row in each
// pass instead of keeping it in registers (calibration checks that both agree).
func (b *Backend) addLayerNorm(ctx context.Context, a *ops.AddLN, reread bool) error {
	const name = "AddLayerNorm"
	if err := ctx.Err(); err != nil {
		return err
	}
	leave, err := b.enter(name)
	if err != nil {
		return err
	}
	defer leave()
	if b.fallback != nil {
		return b.fallback.AddLayerNorm(ctx, a)
	}

	N, D := a.N, a.D
	p := b.Plan(D, a.Half())
	k := addKernel(p, a, a.Gamma.DType, a.Bias.DType, a.Bias.Present() && a.BiasFull, b.fast16)
	if reread {
		k.Private = 0
	}
	pipe, err := b.pipeline(k.Key(), func() (string, error) { return shaders.RenderAddLN(k) })
	if err != nil {
		return fmt.Errorf("dawn: %s: %w", name, err)
	}
	groups, nx, err := b.grid(name, N)
	if err != nil {
		return err
	}

	gb := concat(a.Gamma, a.Beta)
	type input struct {
		name  string
		data  []byte
		index uint32
	}
	inputs := []input{{"x1", a.X1.Bytes(), 1}, {"x2", a.X2.Bytes(), 2}, {"gamma+beta", gb, 3}}
	if a.Bias.Present() {
		inputs = append(inputs, input{"bias", a.Bias.Bytes(), 4})
	}
	outBytes := align4(uint64(N) * uint64(D) * uint64(a.Y.DType.Size()))
	statBytes := uint64(N) * 8
	for _, in := range inputs {
		if err := b.checkBinding(name, in.name, align4(uint64(len(in.data)))); err != nil {
			return err
		}
	}
	if err := b.checkBinding(name, "y", outBytes); err != nil {
		return err
	}
	if err := b.checkBinding(name, "mean+rstd", statBytes); err != nil {
		return err
	}

	var u params
	addParams(&u, N, D, nx, p.InvH, a.Epsilon)

	l := lease{p: &b.pool}
	defer l.done()
	params, err := l.get("fusednorm.addln.params", addlnParamsSize, usageUniform|usageCopyDst)
	if err != nil {
		return fmt.Errorf("dawn: %s: %w", name, err)
	}
	if err := b.write(params, 0, u.bytes()); err != nil {
		return fmt.Errorf("dawn: %s: %w", name, err)
	}
	binds := []binding{{Binding: 0, Buffer: params, Size: addlnParamsSize}}
	for _, in := range inputs {
		size := align4(uint64(len(in.data)))
		buf, err := l.get("fusednorm.addln."+in.name, size, usageStorage|usageCopyDst)
		if err != nil {
			return fmt.Errorf("dawn: %s: %w", name, err)
		}
		if err := b.write(buf, 0, in.data); err != nil {
			return fmt.Errorf("dawn: %s: %s: %w", name, in.name, err)
		}
		binds = append(binds, binding{Binding: in.index, Buffer: buf, Size: size})
	}
	yBuf, err := l.get("fusednorm.addln.y", outBytes, usageStorage|usageCopySrc)
	if err != nil {
		return fmt.Errorf("dawn: %s: %w", name, err)
	}
	statBuf, err := l.get("fusednorm.addln.stats", statBytes, usageStorage|usageCopySrc)
	if err != nil {
		return fmt.Errorf("dawn: %s: %w", name, err)
	}
	binds = append(binds,
		binding{Binding: 5, Buffer: yBuf, Size: outBytes},
		binding{Binding: 7, Buffer: statBuf, Size: statBytes})

	var rp readPlan
	rp.add(yBuf, 0, a.Y.Bytes())
	if k.WriteX {
		xBuf, err := l.get("fusednorm.addln.x", outBytes, usageStorage|usageCopySrc)
		if err != nil {
			return fmt.Errorf("dawn: %s: %w", name, err)
		}
		binds = append(binds, binding{Binding: 6, Buffer: xBuf, Size: outBytes})
		rp.add(xBuf, 0, a.X.Bytes())
	}
	rp.add(statBuf, 0, bytesOf(a.Mean))
	rp.add(statBuf, uint64(N)*4, bytesOf(a.Rstd))

	if err := b.run(ctx, pipe, binds, groups, rp.reads); err != nil {
		return fmt.Errorf("dawn: %s: %w", name, deviceErr(err))
	}
	return b.takePending()
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

// addKernel is the kernel variant of a call, for the host and device-tensor paths alike:
// gamma's and bias's dtypes and biasFull are given apart, since a prepared op holds them.
func addKernel(p plan.Plan, a *ops.AddLN, gamma, bias ops.DType, biasFull, fast16 bool) shaders.AddLN {
	k := shaders.AddLN{
		W:        p.W,
		Private:  privateFor(p),
		X1:       a.X1.DType,
		X2:       a.X2.DType,
		Gamma:    gamma,
		Bias:     bias,
		BiasFull: biasFull,
		Out:      a.Y.DType,
		WriteX:   a.X.Present(),
		OddD:     a.Y.DType.Is16() && a.D%2 == 1,
	}
	k.Fast16 = fast16 && k.HasF16()
	k.Vectorize(p)
	return k
}
