package cpu

import (
	"context"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// Element-wise adds of AddLayerNorm's first stage; SIMD builds replace them.
var (
	// add2 writes s = a + b.
	add2 = add2Go
	// add3 writes s = (a + b) + c: one pass for x1 + x2 + bias.
	add3 = add3Go
	// addTo writes s += b.
	addTo = addToGo
)

func add2Go(s, a, b []float32) {
	a = a[:len(s)]
	b = b[:len(s)]
	for i := range s {
		s[i] = a[i] + b[i]
	}
}

func add3Go(s, a, b, c []float32) {
	a = a[:len(s)]
	b = b[:len(s)]
	c = c[:len(s)]
	for i := range s {
		s[i] = (a[i] + b[i]) + c[i]
	}
}

func addToGo(s, b []float32) {
	b = b[:len(s)]
	for i := range s {
		s[i] += b[i]
	}
}

// rowF32 returns elements [off, off+n) of src as float32: the slice itself for f32 data,
// else widened into tmp.
func rowF32(k *kernelSet, src ops.Buf, off, n int, tmp []float32) []float32 {
	switch src.DType {
	case ops.F32:
		return src.F32[off : off+n]
	case ops.F16:
		k.widenF16(tmp[:n], src.U16[off:off+n])
	case ops.BF16:
		k.widenBF16(tmp[:n], src.U16[off:off+n])
	}
	return tmp[:n]
}

// store writes float32 values into dst at off, rounding to dst's dtype.
func store(k *kernelSet, dst ops.Buf, off int, v []float32) {
	switch dst.DType {
	case ops.F32:
		copy(dst.F32[off:off+len(v)], v)
	case ops.F16:
		k.narrowF16(dst.U16[off:off+len(v)], v)
	case ops.BF16:
		k.narrowBF16(dst.U16[off:off+len(v)], v)
	}
}

// AddLayerNorm runs SPEC §B.4 under the plan: s = (x1 + x2) + bias in f32, statistics of s,
// y = affine(s), optional x = s rounded to OutT.
func (b *Backend) AddLayerNorm(ctx context.Context, a *ops.AddLN) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	D := a.D
	p := b.Plan(D)
	k := b.k
	gamma, beta := widen(k, a.Gamma), widen(k, a.Beta)
	var biasRow []float32
	if a.Bias.Present() && !a.BiasFull {
		biasRow = widen(k, a.Bias)
	}
	forRows(a.N, D, p.W, b.opts.Threads, func(lo, hi int, sc *scratch) {
		s := sc.x[:D]
		for r := lo; r < hi; r++ {
			off := r * D
			// x1 may live in sc.y and x2 in sc.t; s = (x1 + x2) + bias in one pass when
			// the bias needs no widening into scratch.
			x1 := rowF32(k, a.X1, off, D, sc.y)
			x2 := rowF32(k, a.X2, off, D, sc.t)
			switch {
			case biasRow != nil:
				k.add3(s, x1, x2, biasRow)
			case a.BiasFull && a.Bias.DType == ops.F32:
				k.add3(s, x1, x2, a.Bias.F32[off:off+D])
			default:
				k.add2(s, x1, x2)
				if a.BiasFull {
					k.addTo(s, rowF32(k, a.Bias, off, D, sc.t)) // x2 is used up: sc.t is free
				}
			}
			if a.X.Present() {
				store(k, a.X, off, s)
			}
			mean, rstd := rowStats(k, &p, s, sc.part, a.Epsilon)
			a.Mean[r], a.Rstd[r] = mean, rstd
			if a.Y.DType == ops.F32 {
				normalize(k, &p, a.Y.F32[off:off+D], s, gamma, beta, mean, rstd)
			} else {
				y := sc.y[:D]
				normalize(k, &p, y, s, gamma, beta, mean, rstd)
				store(k, a.Y, off, y)
			}
		}
	})
	return nil
}
