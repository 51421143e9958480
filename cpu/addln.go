package cpu

import (
	"context"

	"github.com/fusednorm/fusednorm/internal/ops"
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
	// Past the caches, the inputs are prefetched a row ahead and f32 outputs are stored
	// non-temporally.
	big := a.N*D*4 >= bigBytes
	prefetch := big && prefetchAhead > 0
	// Long rows spread the prefetch over chunks of the variance and affine passes (the
	// add pass streams from DRAM already).
	long := prefetch && D >= longRow
	piece := prefetchPiece(4 * D)
	if long {
		piece = max((4*D/chunkSteps(D, p.W)+63)&^63, 64)
	}
	ntY := big && a.Y.DType == ops.F32
	ntX := big && a.X.Present() && a.X.DType == ops.F32
	forRows(a.N, D, p.W, b.opts.Threads, func(lo, hi int, sc *scratch) {
		for r := lo; r < hi; r++ {
			off := r * D
			var pf *rowPrefetch
			if prefetch && r+prefetchAhead < hi {
				next := newRowPrefetch(k, piece)
				ahead := off + prefetchAhead*D
				next.add(a.X1, ahead, D)
				next.add(a.X2, ahead, D)
				if a.BiasFull {
					next.add(a.Bias, ahead, D)
				}
				pf = &next
			}
			// s goes straight into an f32 x output (no copy), unless x is streamed out.
			s := sc.x[:D]
			direct := a.X.Present() && a.X.DType == ops.F32 && !ntX
			if direct {
				s = a.X.F32[off : off+D]
			}
			// x1 may live in sc.y and x2 in sc.t.
			x1 := rowF32(k, a.X1, off, D, sc.y)
			x2 := rowF32(k, a.X2, off, D, sc.t)
			var xs []float32 // the x output, streamed out by the first pass
			if ntX {
				xs = a.X.F32[off : off+D]
			}
			part := sc.part[:p.W]
			var mean, rstd float32
			if a.BiasFull && a.Bias.DType != ops.F32 {
				k.add2(s, x1, x2)
				k.addTo(s, rowF32(k, a.Bias, off, D, sc.t)) // x2 is used up: sc.t is free
				if ntX {
					k.copyNT(xs, s)
				}
				pf.step()
				mean, rstd = rowStats(k, &p, s, part, a.Epsilon, pf)
			} else {
				// s = (x1 + x2) + bias (x1 + x2 without one) and its partial sums in one pass.
				var bias []float32
				switch {
				case biasRow != nil:
					bias = biasRow
				case a.BiasFull:
					bias = a.Bias.F32[off : off+D]
				}
				k.addSum(part, s, xs, x1, x2, bias)
				if long {
					mean, rstd = rowStatsChunked(k, &p, s, part, a.Epsilon, pf)
				} else {
					pf.step()
					mean, rstd = rowStatsSummed(k, &p, s, part, a.Epsilon, pf)
				}
			}
			if a.X.Present() && !direct && !ntX {
				store(k, a.X, off, s)
			}
			a.Mean[r], a.Rstd[r] = mean, rstd
			switch {
			case a.Y.DType == ops.F32 && long:
				normalizeChunked(k, &p, a.Y.F32[off:off+D], s, gamma, beta, mean, rstd, ntY, pf)
			case a.Y.DType == ops.F32:
				normalize(k, &p, a.Y.F32[off:off+D], s, gamma, beta, mean, rstd, ntY)
			default:
				y := sc.y[:D]
				normalize(k, &p, y, s, gamma, beta, mean, rstd, false)
				store(k, a.Y, off, y)
			}
			pf.rest()
		}
		if ntX || ntY {
			k.fence()
		}
	})
	return nil
}
