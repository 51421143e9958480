package cpu

import (
	"context"
	"sync"
	"unsafe"

	"github.com/fusednorm/fusednorm/internal/half"
	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/plan"
)

// AddLayerNorm runs spec §B.4 under the plan: s = (x1 + x2) + bias in f32, statistics of s,
// y = affine(s), optional x = s rounded to OutT.
func (b *Backend) AddLayerNorm(ctx context.Context, a *ops.AddLN) error {
	if err := b.admit(ctx); err != nil {
		return err
	}
	D := a.D
	t := &b.tune
	c := addCalls.Get().(*addCall)
	c.k, c.a, c.p = b.k, *a, b.Plan(D, a.Half())
	// Past the caches (but for rows of at most shortRow bytes), outputs are stored
	// non-temporally. Rows too short for the hardware prefetchers (hwStreamRow) are
	// prefetched a row ahead, and are in the caches when the fused first pass reads them.
	// Longer rows are left to the hardware prefetchers, and the first pass reads them in
	// address order: float32 rows in one sequential pass (addForm.stream), the pieces of
	// 16-bit rows prefetched in order just before addSum16 walks them (touch:
	// addForm.prefetch), or, for rows of a few chunks a page or more apart, the whole row
	// walked down its chunks as streams the hardware follows (tuning.pageChunks).
	past := a.N*D*4 >= t.bigBytes
	big := past && D*a.Y.DType.Size() > t.shortRow
	c.prefetch = big && t.prefetchAhead > 0 && D*max(a.X1.DType.Size(), a.X2.DType.Size()) < t.hwStreamRow
	c.stream = big && !c.prefetch
	c.ahead = t.prefetchAhead
	c.lead = 0
	if c.stream {
		c.lead = t.rowLead
	}
	c.piece = t.prefetchPiece(4 * D)
	c.sumPiece = t.sumPieceOf(c.p.W)
	c.ntY = big && a.Y.DType == ops.F32
	c.ntX = big && a.X.Present() && a.X.DType == ops.F32
	c.nt16 = big && a.Y.DType != ops.F32
	c.sum16 = a.X1.DType != ops.F32 && a.X2.DType == a.X1.DType
	c.touch = c.stream && c.sum16
	if c.touch && t.wholeRow(c.p.W, D, a.X1.DType.Size()) {
		c.sumPiece, c.touch = D, false
	}
	c.x16 = c.sum16 && a.X.Present() // spec §B.2 gives x the inputs' format
	c.pieces = a.X1.DType != ops.F32 || a.X2.DType != ops.F32
	c.w16 = weightsOf(a.Gamma, a.Beta)
	if c.w16.gammaH != nil && 8*D <= t.wideBytes {
		if cap(c.wide) < 2*D {
			c.wide = make([]float32, 2*D)
		}
		c.w16 = widened(c.k, c.wide, a.Gamma, a.Beta)
	}
	c.short, c.fast = c.shortKernels(!big, past)
	c.lines = c.k.tails && (c.nt16 || c.ntY || c.ntX) && D*a.Y.DType.Size()%64 != 0
	whole := b.pool.forRows(ctx, a.N, D, c.p.W, b.opts.Threads, c, &c.join)
	c.reset()
	addCalls.Put(c)
	if !whole {
		return b.cut(ctx)
	}
	return nil
}

// addCall is the state of one AddLayerNorm call, shared by its workers; pooled, so a call
// allocates nothing. It copies the caller's descriptor (not the data); reset drops every
// reference to the caller's memory before it goes back to the pool.
//
// The weights are read as the caller gave them, never widened into copies: in the dtype
// rows of spec §B.2 (ops.AddDTypeRows), gamma and beta are float32 or in y's 16-bit format
// (weights16), and the bias (OutT) is float32 or in the 16-bit format of x1 and x2, whose
// first pass then widens it in its loads (addSum16).
type addCall struct {
	k                  *kernels
	a                  ops.AddLN
	p                  plan.Plan
	prefetch, ntY, ntX bool
	stream             bool      // inputs past the caches, not prefetched ahead: float32 rows through addForm.stream
	touch              bool      // stream for 16-bit rows: each piece prefetched before addSum16 (addForm.prefetch)
	pieces             bool      // 16-bit inputs: the first pass runs a piece at a time (sumPieces)
	sum16              bool      // x1 and x2 (and the bias) of one 16-bit format: addSum16
	nt16               bool      // 16-bit outputs stored non-temporally
	x16                bool      // addSum16 writes x too (non-temporally with nt16): every x of 16-bit inputs (spec §B.2 gives it their format)
	ahead              int       // tuning.prefetchAhead
	lead               int       // tuning.rowLead for stream rows, else 0
	piece              int       // tuning.prefetchPiece
	sumPiece           int       // tuning.sumPieceOf(W): the piece of sumPieces
	w16                weights16 // gamma and beta for a 16-bit y: as given, or widened into wide
	wide               []float32 // scratch kept with the pooled call: gamma and beta widened (tuning.wideBytes)
	short              shortRow  // the kernels of every row, where fast
	fast               bool      // the rows take shortRows
	lines              bool      // outputs stored non-temporally by whole lines (lineSplit), rows off the lines: tailLines
	join               rowJoin
}

// shortRow is the kernels of a call whose rows each take one kernel a step, chosen once for
// the call (shortKernels) instead of per row: the first pass (ending in the plan's tree for
// 16-bit inputs at AVX-512, else followed by the tree) and the affine step; the second pass
// is rowStatsOfSum's. A row of D 64 f16 spent about 100 of its 150 ns (in the caches, one
// thread, AVX-512) choosing them; the kernels are the same either way.
type shortRow struct {
	sum  sum16TreeFn // 16-bit inputs, where the level has the kernel ending in the tree
	add  addForm     // else the first pass's form (addKernels.run16 or run), then planTree
	aff  affine16Fn  // 16-bit y, float32 gamma and beta
	affH affineHFn   // 16-bit y, gamma and beta in its format
	af32 affineFn    // float32 y (and inputs)
	x    bool        // the first pass writes x
	nt   bool        // y and x are stored non-temporally: shortRows fences after its rows
}

// shortKernels returns the call's shortRow and true where every row takes the same kernels
// in one piece each: x1, x2 (and bias) of one format, 16-bit or float32, and y of that
// format, a row that the tree kernels take (treeRow; 16-bit: in one piece) and whole vectors
// of y, cached: not prefetched (in the caches, or rows of at most tuning.shortRow bytes).
// Rows of calls past the caches (past) store y and x non-temporally where every row of both
// starts on a cache line (nt): one thread, at the sweep's size (BenchmarkStreamAB, N 1048576,
// D 64 f32), 0.70-0.75x the time of stores through the caches, whose every line is read
// before it is written. Longer rows stored non-temporally keep the general path: on the
// EPYC they ran 1.0-1.4x slower this way (D 64 to 1024 f16, in the caches), though the same
// kernels run.
func (c *addCall) shortKernels(cached, past bool) (shortRow, bool) {
	k, a, p := c.k, &c.a, &c.p
	D := a.D
	if !cached || !k.simd() || !treeRow(p, D) || k.whole(D) != D {
		return shortRow{}, false
	}
	nt := past && lineRows(a.Y, D) && (!a.X.Present() || lineRows(a.X, D))
	s := shortRow{nt: nt}
	af := affineForm{dt: a.Y.DType, fma: p.Profile.FuseAffine, nt: nt}
	switch {
	case c.sum16 && a.Y.DType != ops.F32 && D <= c.sumPiece && p.W <= maxTree16W:
		f := addForm{dt: a.X1.DType, bias: a.Bias.Present(), x: c.x16, nt: nt && c.x16}
		fm := &k.adds.f16
		if f.dt == ops.BF16 {
			fm = &k.adds.bf16
		}
		s.sum, s.add, s.x = fm.trees.pick(f), f, c.x16
		if c.w16.gammaH != nil {
			s.affH = affineHOf(&k.affines, af).of(af)
		} else {
			s.aff = affine16Of(&k.affines, af).of(af)
		}
	case !c.pieces && a.Y.DType == ops.F32 && a.Gamma.DType == ops.F32 && p.W%k.lanes == 0:
		s.x = a.X.Present()
		s.add = addForm{dt: ops.F32, bias: a.Bias.Present(), x: s.x, nt: nt && s.x}
		s.af32 = affine32Of(&k.affines, af).of(af)
	default:
		return shortRow{}, false
	}
	ok := (s.sum != nil || p.W%k.lanes == 0) && (s.aff != nil || s.affH != nil || s.af32 != nil)
	return s, ok
}

// lineRows reports whether every row of D elements of t starts on a 64-byte cache line.
func lineRows(t ops.Buf, D int) bool {
	b := t.Bytes()
	return len(b) > 0 && D*t.DType.Size()%64 == 0 && uintptr(unsafe.Pointer(&b[0]))%64 == 0
}

// shortRows computes rows [lo, hi) of a fast call, each step one kernel of c.short.
func (c *addCall) shortRows(lo, hi int, sc *scratch) {
	if c.short.af32 != nil {
		c.shortRows32(lo, hi, sc)
	} else {
		c.shortRows16(lo, hi, sc)
	}
	if c.short.nt {
		c.k.fence()
	}
}

// shortRows16 is shortRows for 16-bit rows.
func (c *addCall) shortRows16(lo, hi int, sc *scratch) {
	k, a, p, s := c.k, &c.a, &c.p, &c.short
	D, W := a.D, p.W
	t, part := sc.x[:D], sc.part[:W]
	bias, step, x := c.shortOperands()
	w16 := c.w16
	for r := lo; r < hi; r++ {
		off := r * D
		x0 := c.first(off)
		xr, x1, x2, br := span(x.U16, off, off+D), a.X1.U16[off:off+D], a.X2.U16[off:off+D], span(bias.U16, r*step, r*step+D)
		var sum float32
		if s.sum != nil {
			sum = s.sum(part, t, xr, x1, x2, br, x0)
		} else {
			k.adds.run16(s.add, part, t, xr, x1, x2, br, x0)
			sum = k.planTree(p, part)
		}
		st := c.shortStats(r, t, part, x0, sum)
		y := a.Y.U16[off : off+D]
		if s.affH != nil {
			s.affH(y, t, w16.gammaH, w16.betaH, st.MeanD, st.Rstd)
		} else {
			s.aff(y, t, w16.gamma, w16.beta, st.MeanD, st.Rstd)
		}
	}
}

// shortRows32 is shortRows for float32 rows.
func (c *addCall) shortRows32(lo, hi int, sc *scratch) {
	a, p, s := &c.a, &c.p, &c.short
	D, W := a.D, p.W
	t, part := sc.x[:D], sc.part[:W]
	bias, step, x := c.shortOperands()
	adds := &c.k.adds
	for r := lo; r < hi; r++ {
		off := r * D
		x0 := c.first(off)
		adds.run(s.add, part, t, span(x.F32, off, off+D), a.X1.F32[off:off+D], a.X2.F32[off:off+D], span(bias.F32, r*step, r*step+D), x0)
		st := c.shortStats(r, t, part, x0, c.k.planTree(p, part))
		s.af32(a.Y.F32[off:off+D], t, a.Gamma.F32, a.Beta.F32, st.MeanD, st.Rstd)
	}
}

// shortOperands is where the short rows' bias and x lie: row r's bias is D elements of bias
// from r·step (a full bias steps a row, a bias row does not; no bias: empty), and x is
// empty unless the first pass writes it.
func (c *addCall) shortOperands() (bias ops.Buf, step int, x ops.Buf) {
	a := &c.a
	if a.BiasFull {
		step = a.D
	}
	if c.short.x {
		x = a.X
	}
	return a.Bias, step, x
}

// shortStats finishes row r's statistics from its first pass's sum (rowStatsOfSum; part is
// W partials with 2·W of room) and stores its mean and rstd where wanted.
func (c *addCall) shortStats(r int, t, part []float32, x0, sum float32) plan.Stats {
	a := &c.a
	st := rowStatsOfSum(c.k, &c.p, t, part, x0, sum, a.Epsilon, nil)
	if a.Mean != nil {
		a.Mean[r], a.Rstd[r] = st.Mean(), st.Rstd
	}
	return st
}

var addCalls = sync.Pool{New: func() any { return new(addCall) }}

func (c *addCall) reset() { c.k, c.a, c.w16, c.short = nil, ops.AddLN{}, weights16{}, shortRow{} }

// biasSpan is where the bias of elements [lo, hi) of the row at element off lies in the
// bias tensor: the row's own elements of a full bias, or [lo, hi) of a bias row; ok is
// false without a bias.
func (c *addCall) biasSpan(off, lo, hi int) (start, end int, ok bool) {
	switch {
	case c.a.BiasFull:
		return off + lo, off + hi, true
	case c.a.Bias.Present():
		return lo, hi, true
	}
	return 0, 0, false
}

// first is s[0] of the row at element off, (x1 + x2) + bias as the first pass computes it:
// the plan's first shift x0, known before that pass.
func (c *addCall) first(off int) float32 {
	a := &c.a
	if c.sum16 && a.X1.DType == ops.F16 { // the bias, if any, is binary16 too (spec §B.2)
		x0 := half.F16ToF32(a.X1.U16[off]) + half.F16ToF32(a.X2.U16[off])
		if b0, _, ok := c.biasSpan(off, 0, 1); ok {
			x0 += half.F16ToF32(a.Bias.U16[b0])
		}
		return x0
	}
	x0 := elemF32(&a.X1, off) + elemF32(&a.X2, off)
	if b0, _, ok := c.biasSpan(off, 0, 1); ok {
		x0 += elemF32(&a.Bias, b0)
	}
	return x0
}

// leadRow prefetches the first c.lead bytes of x1, x2 and a full bias of the row at
// element off (tuning.rowLead).
func (c *addCall) leadRow(off int) {
	a, k := &c.a, c.k
	k.prefetchLead(&a.X1, off, c.lead)
	k.prefetchLead(&a.X2, off, c.lead)
	if a.BiasFull {
		k.prefetchLead(&a.Bias, off, c.lead)
	}
}

// elemF32 is element i of b as float32 (16-bit values widened exactly, without a table).
func elemF32(b *ops.Buf, i int) float32 {
	switch b.DType {
	case ops.F16:
		return half.F16ToF32(b.U16[i])
	case ops.BF16:
		return half.BF16ToF32(b.U16[i])
	}
	return b.F32[i]
}

// sumPieces is the first pass of a row with 16-bit inputs: s = (x1 + x2) + bias in float32,
// staged into t, and the partial sums of f32(t − x0), a piece of c.sumPiece elements (whole chunks
// of W) at a time, so the inputs (widened in addSum16's loads, or into scratch for mixed
// rows) and the piece of t stay in L1; the x output is written from each piece (x32: a
// float32 x, the mixed rows'). It returns the plan's sum of f32(t − x0): the last piece takes the
// first pass that ends in the tree where there is one (addSum16Tree), other rows planTree
// after their last piece.
func (c *addCall) sumPieces(t, x32, part []float32, off int, x0 float32, sc *scratch) float32 {
	k, a := c.k, &c.a
	D := a.D
	n := c.sumPiece
	for lo := 0; lo < D; lo += n {
		hi := min(lo+n, D)
		m := hi - lo
		acc := lo > 0 // the first piece sets the partials, the later ones add on
		var bias16 []uint16
		var bias32 []float32
		b0, b1, hasBias := c.biasSpan(off, lo, hi)
		if c.sum16 {
			var x []uint16
			if c.x16 {
				x = a.X.U16[off+lo : off+hi]
			}
			// An x that does not start on a vector's boundary cannot be stored non-temporally
			// by the first pass, whose vectors start at the row's. Where the elements before
			// the boundary are whole vectors of the next narrower width (rows of D 1000
			// alternate), the first pass leaves x out and x is rounded from the piece of t
			// after it, non-temporally from the boundary on: storing x through the cache cost a
			// row of D 1024 a fifth of its speed. Other heads stay in the first pass (D 1023
			// lost 3-5% when they went to the twin).
			// With rows off the cache lines (c.lines), x is always rounded after the first
			// pass, whole lines non-temporally (lineSplit).
			var later []uint16
			if c.nt16 && (c.lines || k.narrowHead16(x)) {
				later, x = x, nil
			}
			f := addForm{dt: a.X1.DType, bias: hasBias, x: x != nil, nt: c.nt16, acc: acc, prefetch: c.touch}
			if hasBias {
				bias16 = a.Bias.U16[b0:b1]
			}
			x1, x2 := a.X1.U16[off+lo:off+hi], a.X2.U16[off+lo:off+hi]
			var sum float32
			tree := false
			if hi == D {
				sum, tree = k.addSum16Tree(f, &c.p, part, t[lo:hi], x, x1, x2, bias16, x0)
			}
			if !tree {
				k.addSum16(f, part, t[lo:hi], x, x1, x2, bias16, x0)
			}
			if later != nil {
				k.narrow(convForm{dt: a.X.DType, nt: true}, later, t[lo:hi])
			}
			if tree {
				return sum
			}
			continue
		}
		x1 := rowF32(k, a.X1, off+lo, m, sc.y)
		x2 := rowF32(k, a.X2, off+lo, m, sc.t)
		if hasBias {
			bias32 = a.Bias.F32[b0:b1]
		}
		f := addForm{dt: ops.F32, bias: hasBias, x: x32 != nil, nt: c.ntX, acc: acc}
		k.addSum(f, part, t[lo:hi], from(x32, lo), x1, x2, bias32, x0)
	}
	return k.planTree(&c.p, part)
}

// rows computes rows [lo, hi).
func (c *addCall) rows(lo, hi int, sc *scratch) {
	if c.fast {
		c.shortRows(lo, hi, sc)
		return
	}
	k, a, p := c.k, &c.a, &c.p
	D := a.D
	prefetch, ntX, ntY := c.prefetch, c.ntX, c.ntY
	w16 := c.w16
	if c.lead > 0 && lo < hi {
		c.leadRow(lo * D)
	}
	for r := lo; r < hi; r++ {
		off := r * D
		if c.lead > 0 && r+1 < hi {
			c.leadRow(off + D)
		}
		var pf *rowPrefetch
		var next rowPrefetch
		if prefetch && r+c.ahead < hi {
			next = newRowPrefetch(k, c.piece)
			ahead := off + c.ahead*D
			next.add(a.X1, ahead, D)
			next.add(a.X2, ahead, D)
			if a.BiasFull {
				next.add(a.Bias, ahead, D)
			}
			pf = &next
		}
		if c.lines {
			c.k.tailLines(off+D-1, &a.Y, &a.X)
		}
		t := sc.x[:D]     // the staged row s, which the second pass turns into e = s − shift
		var x32 []float32 // a float32 x output, written by the first pass
		if a.X.Present() && a.X.DType == ops.F32 {
			x32 = a.X.F32[off : off+D]
		}
		part := sc.part[:p.W]
		x0 := c.first(off)
		var sum float32 // the plan's sum of f32(t − x0)
		if c.pieces {
			sum = c.sumPieces(t, x32, part, off, x0, sc)
		} else {
			// s = (x1 + x2) + bias (x1 + x2 without one) into t, and the partial sums of
			// f32(s − x0), in one pass.
			f := addForm{dt: ops.F32, x: x32 != nil, nt: ntX, stream: c.stream}
			var bias []float32
			if b0, b1, ok := c.biasSpan(off, 0, D); ok {
				bias, f.bias = a.Bias.F32[b0:b1], true
			}
			sum = k.addSumTree(f, p, part, t, x32, a.X1.F32[off:off+D], a.X2.F32[off:off+D], bias, x0)
		}
		pf.step()
		st := rowStatsOfSum(k, p, t, part, x0, sum, a.Epsilon, pf)
		if a.Mean != nil { // nil: the caller wants only y (AddLayerNormOutputs.NoStats)
			a.Mean[r], a.Rstd[r] = st.Mean(), st.Rstd
		}
		if a.Y.DType == ops.F32 {
			normalize(k, p, a.Y.F32[off:off+D], t, a.Gamma.F32, a.Beta.F32, st, ntY)
		} else {
			normalize16(k, p, a.Y, off, t, w16, st, c.nt16)
		}
		pf.rest()
	}
	if ntX || ntY || c.nt16 {
		k.fence()
	}
}
