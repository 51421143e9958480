package cpu

import (
	"context"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// Element-wise adds of AddLayerNorm's first stage; SIMD builds replace them.
var (
	// add2 writes s = a + b.
	add2 = add2Go
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

func addToGo(s, b []float32) {
	b = b[:len(s)]
	for i := range s {
		s[i] += b[i]
	}
}

// rowF32 returns elements [off, off+n) of src as float32: the slice itself for f32 data,
// else widened into tmp.
func rowF32(src ops.Buf, off, n int, tmp []float32) []float32 {
	switch src.DType {
	case ops.F32:
		return src.F32[off : off+n]
	case ops.F16:
		widenF16(tmp[:n], src.U16[off:off+n])
	case ops.BF16:
		widenBF16(tmp[:n], src.U16[off:off+n])
	}
	return tmp[:n]
}

// store writes float32 values into dst at off, rounding to dst's dtype.
func store(dst ops.Buf, off int, v []float32) {
	switch dst.DType {
	case ops.F32:
		copy(dst.F32[off:off+len(v)], v)
	case ops.F16:
		narrowF16(dst.U16[off:off+len(v)], v)
	case ops.BF16:
		narrowBF16(dst.U16[off:off+len(v)], v)
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
	gamma, beta := widen(a.Gamma), widen(a.Beta)
	var biasRow []float32
	if a.Bias.Present() && !a.BiasFull {
		biasRow = widen(a.Bias)
	}
	forRows(a.N, D, p.W, b.opts.Threads, func(lo, hi int, sc *scratch) {
		s := sc.x[:D]
		for r := lo; r < hi; r++ {
			off := r * D
			x1 := rowF32(a.X1, off, D, sc.y)
			if a.X2.DType == ops.F32 {
				add2(s, x1, a.X2.F32[off:off+D])
			} else {
				// x1 may live in sc.y; widen x2 into sc.t.
				add2(s, x1, rowF32(a.X2, off, D, sc.t))
			}
			switch {
			case a.BiasFull:
				addTo(s, rowF32(a.Bias, off, D, sc.t))
			case biasRow != nil:
				addTo(s, biasRow)
			}
			if a.X.Present() {
				store(a.X, off, s)
			}
			mean, rstd := rowStats(&p, s, sc.part, a.Epsilon)
			a.Mean[r], a.Rstd[r] = mean, rstd
			if a.Y.DType == ops.F32 {
				normalize(&p, a.Y.F32[off:off+D], s, gamma, beta, mean, rstd)
			} else {
				y := sc.y[:D]
				normalize(&p, y, s, gamma, beta, mean, rstd)
				store(a.Y, off, y)
			}
		}
	})
	return nil
}
