package cpu

import (
	"context"
	"sync"

	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/plan"
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
	c := addCalls.Get().(*addCall)
	c.k, c.a, c.p = b.k, *a, b.Plan(D)
	// f32 weights are used in place; others are widened into the call's pooled buffers.
	c.gamma = widenTo(c.k, a.Gamma, &c.gammaBuf)
	c.beta = widenTo(c.k, a.Beta, &c.betaBuf)
	if a.Bias.Present() && !a.BiasFull {
		c.biasRow = widenTo(c.k, a.Bias, &c.biasBuf)
	}
	// Past the caches, the inputs are prefetched a row ahead and f32 outputs are stored
	// non-temporally.
	big := a.N*D*4 >= bigBytes
	c.prefetch = big && prefetchAhead > 0
	// Long rows spread the prefetch over chunks of the variance and affine passes (the
	// add pass streams from DRAM already).
	c.long = c.prefetch && D >= longRow
	c.piece = prefetchPiece(4 * D)
	if c.long {
		c.piece = max((4*D/chunkSteps(D, c.p.W)+63)&^63, 64)
	}
	c.ntY = big && a.Y.DType == ops.F32
	c.ntX = big && a.X.Present() && a.X.DType == ops.F32
	c.nt16 = big && a.Y.DType != ops.F32
	if a.Y.DType != ops.F32 && a.Gamma.DType == a.Y.DType {
		c.gammaH, c.betaH = a.Gamma.U16, a.Beta.U16
	}
	c.sum16 = a.X1.DType != ops.F32 && a.X2.DType == a.X1.DType && (!a.BiasFull || a.Bias.DType == a.X1.DType)
	c.pieces = a.X1.DType != ops.F32 || a.X2.DType != ops.F32 || (a.BiasFull && a.Bias.DType != ops.F32)
	forRows(a.N, D, c.p.W, b.opts.Threads, c, &c.wg)
	c.reset()
	addCalls.Put(c)
	return nil
}

// addCall is the state of one AddLayerNorm call, shared by its workers; pooled, so a call
// allocates nothing. It copies the caller's descriptor (not the data), and keeps the
// buffers that f16 and bf16 weights are widened into; reset drops every reference to the
// caller's memory before it goes back to the pool.
type addCall struct {
	k                          *kernelSet
	a                          ops.AddLN
	p                          plan.Plan
	gamma, beta, biasRow       []float32 // float32 weights: the caller's, or a buffer below
	gammaBuf, betaBuf, biasBuf []float32
	prefetch, long, ntY, ntX   bool
	pieces                     bool     // 16-bit inputs: the first pass runs a piece at a time (sumPieces)
	nt16                       bool     // 16-bit outputs stored non-temporally
	sum16                      bool     // x1, x2 (and a full bias) of one 16-bit format: addSum16
	gammaH, betaH              []uint16 // gamma and beta when in y's 16-bit format, read as they are
	piece                      int
	wg                         sync.WaitGroup
}

var addCalls = sync.Pool{New: func() any { return new(addCall) }}

func (c *addCall) reset() {
	c.k, c.a = nil, ops.AddLN{}
	c.gamma, c.beta, c.biasRow = nil, nil, nil
	c.gammaH, c.betaH = nil, nil
}

// widenTo returns a 1-D weight as float32: the slice itself for f32, else widened into
// *buf, which grows as needed.
func widenTo(k *kernelSet, b ops.Buf, buf *[]float32) []float32 {
	switch b.DType {
	case ops.F32:
		return b.F32
	case ops.F16:
		*buf = grow(*buf, len(b.U16))
		k.widenF16(*buf, b.U16)
		return *buf
	case ops.BF16:
		*buf = grow(*buf, len(b.U16))
		k.widenBF16(*buf, b.U16)
		return *buf
	}
	return nil
}

// sumPieces is the first pass of a row with 16-bit inputs (or a 16-bit full bias): s =
// (x1 + x2) + bias in float32 and its partial sums, a piece of sumPiece elements (a
// multiple of W) at a time, so the widened inputs and the piece of s stay in L1; the x
// output is written from each piece while it is there (xs: streamed, f32).
func (c *addCall) sumPieces(s, xs, part []float32, off int, sc *scratch) {
	k, a := c.k, &c.a
	D := a.D
	n := sumPieceOf(len(part))
	for lo := 0; lo < D; lo += n {
		hi := min(lo+n, D)
		m := hi - lo
		if c.sum16 {
			// Both inputs (and a full bias) of one 16-bit format: widened in the kernel.
			// A bias row of the inputs' format is read as it is (widening is exact):
			// half the bytes of its widened copy.
			var bias []float32
			var biasHalf []uint16
			switch {
			case a.BiasFull:
				biasHalf = a.Bias.U16[off+lo : off+hi]
			case a.Bias.Present() && a.Bias.DType == a.X1.DType:
				biasHalf = a.Bias.U16[lo:hi]
			case c.biasRow != nil:
				bias = c.biasRow[lo:hi]
			}
			f := sum16{bf: a.X1.DType == ops.BF16, acc: lo > 0}
			k.addSum16(f, part, s[lo:hi], a.X1.U16[off+lo:off+hi], a.X2.U16[off+lo:off+hi], bias, biasHalf)
		} else {
			x1 := rowF32(k, a.X1, off+lo, m, sc.y)
			x2 := rowF32(k, a.X2, off+lo, m, sc.t)
			var bias []float32
			switch {
			case c.biasRow != nil:
				bias = c.biasRow[lo:hi]
			case a.BiasFull:
				bias = rowF32(k, a.Bias, off+lo, m, sc.u)
			}
			if lo == 0 {
				k.addSum(part, s[lo:hi], nil, x1, x2, bias)
			} else {
				k.addSumAcc(part, s[lo:hi], x1, x2, bias)
			}
		}
		switch {
		case xs != nil:
			k.copyNT(xs[lo:hi], s[lo:hi])
		case a.X.Present() && a.X.DType != ops.F32 && c.nt16:
			k.narrow16NT(a.X.DType == ops.BF16, a.X.U16[off+lo:off+hi], s[lo:hi])
		case a.X.Present() && a.X.DType != ops.F32:
			store(k, a.X, off+lo, s[lo:hi])
		}
	}
}

// rows computes rows [lo, hi).
func (c *addCall) rows(lo, hi int, sc *scratch) {
	k, a, p := c.k, &c.a, &c.p
	D := a.D
	prefetch, long, ntX, ntY := c.prefetch, c.long, c.ntX, c.ntY
	gamma, beta := c.gamma, c.beta
	for r := lo; r < hi; r++ {
		off := r * D
		var pf *rowPrefetch
		var next rowPrefetch
		if prefetch && r+prefetchAhead < hi {
			next = newRowPrefetch(k, c.piece)
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
		var xs []float32 // the x output, streamed out by the first pass
		if ntX {
			xs = a.X.F32[off : off+D]
		}
		part := sc.part[:p.W]
		var mean, rstd float32
		if c.pieces {
			c.sumPieces(s, xs, part, off, sc)
			if long {
				mean, rstd = rowStatsChunked(k, p, s, part, a.Epsilon, pf)
			} else {
				pf.step()
				mean, rstd = rowStatsSummed(k, p, s, part, a.Epsilon, pf)
			}
		} else {
			// s = (x1 + x2) + bias (x1 + x2 without one) and its partial sums in one pass.
			var bias []float32
			switch {
			case c.biasRow != nil:
				bias = c.biasRow
			case a.BiasFull:
				bias = a.Bias.F32[off : off+D]
			}
			k.addSum(part, s, xs, a.X1.F32[off:off+D], a.X2.F32[off:off+D], bias)
			if long {
				mean, rstd = rowStatsChunked(k, p, s, part, a.Epsilon, pf)
			} else {
				pf.step()
				mean, rstd = rowStatsSummed(k, p, s, part, a.Epsilon, pf)
			}
		}
		a.Mean[r], a.Rstd[r] = mean, rstd
		switch {
		case a.Y.DType == ops.F32 && long:
			normalizeChunked(k, p, a.Y.F32[off:off+D], s, gamma, beta, mean, rstd, ntY, pf)
		case a.Y.DType == ops.F32:
			normalize(k, p, a.Y.F32[off:off+D], s, gamma, beta, mean, rstd, ntY)
		case long:
			normalize16Chunked(k, p, a.Y, off, s, gamma, beta, c.gammaH, c.betaH, mean, rstd, c.nt16, pf)
		default:
			normalize16(k, p, a.Y, off, s, gamma, beta, c.gammaH, c.betaH, mean, rstd, c.nt16)
		}
		pf.rest()
	}
	if ntX || ntY || c.nt16 {
		k.fence()
	}
}
