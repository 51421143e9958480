package cpu

import (
	"github.com/fusednorm/fusednorm/internal/half"
	"github.com/fusednorm/fusednorm/internal/plan"
)

// EmbedLayerNorm's binary16 sum, staged as the plan stages it: h = rnd16(rnd16(w + g) + p)
// with a segment row g, else rnd16(w + p), written as its bits and as float32, or fused
// with the row's first pass: t = f32(h), the row's staged values, and the partial sums
// of f32(t − x0). (The float32 sum is a first pass, sum.go.)

// embedForm is the form of a staged sum.
type embedForm struct {
	seg      bool // a segment row g is added first
	prefetch bool // w (a gathered word row, from DRAM) is prefetched in address order first
	acc      bool // embedShift: the partial sums are added onto part (a later piece), else start at +0
}

// embedKernels are a width's staged-sum kernels, for whole vectors of x, and the first
// passes fused with them, for whole chunks of W = len(part), W a multiple of the lanes.
type embedKernels struct {
	sum                   func(x []float32, bits []uint16, w, p []uint16)
	sumSeg                func(x []float32, bits []uint16, w, p, g []uint16)
	shift, shiftAcc       func(part, t []float32, bits []uint16, w, p []uint16, x0 float32)
	shiftSeg, shiftSegAcc func(part, t []float32, bits []uint16, w, p, g []uint16, x0 float32)
	// A short token's first pass, its tree and its shift in one kernel, from x0 = t[0] it
	// stages itself (embedShiftTreeGo; AVX-512 only, nil elsewhere): W = len(part) one of
	// the tree kernels' (treeW), len(t) a multiple of it.
	shiftTree    func(part, t []float32, bits []uint16, w, p []uint16, invH float32) (shift float32)
	shiftTreeSeg func(part, t []float32, bits []uint16, w, p, g []uint16, invH float32) (shift float32)
	// The same for float32 rows without the embedding_sum output (embedShiftTree32Go): t = w
	// + p or (w + p) + g.
	shiftTree32    func(part, t, w, p []float32, invH float32) (shift float32)
	shiftTree32Seg func(part, t, w, p, g []float32, invH float32) (shift float32)
}

// embedSumGo is the twin of embedSum.
func embedSumGo(f embedForm, x []float32, bits []uint16, w, p, g []uint16) {
	t := half.F16Table()
	w = w[:len(x)]
	p = p[:len(x)]
	bits = bits[:len(x)]
	if !f.seg {
		for i := range x {
			h := half.F32ToF16(t[w[i]] + t[p[i]])
			bits[i], x[i] = h, t[h]
		}
		return
	}
	g = g[:len(x)]
	for i := range x {
		h := half.F32ToF16(t[half.F32ToF16(t[w[i]]+t[g[i]])] + t[p[i]])
		bits[i], x[i] = h, t[h]
	}
}

// embedSum runs the staged sum: the width's kernel over the whole vectors of x, what is
// left narrower.
func (k *kernels) embedSum(f embedForm, x []float32, bits []uint16, w, p, g []uint16) {
	bits, w, p = bits[:len(x)], w[:len(x)], p[:len(x)]
	if f.seg {
		g = g[:len(x)]
	}
	if f.prefetch {
		k.prefetch(bytesOf(w))
		f.prefetch = false
	}
	if !k.simd() {
		embedSumGo(f, x, bits, w, p, g)
		return
	}
	n := k.reach(len(x))
	if n > 0 {
		if f.seg {
			k.embeds.sumSeg(x[:n], bits, w, p, g)
		} else {
			k.embeds.sum(x[:n], bits, w, p)
		}
	}
	if n < len(x) {
		k.narrower.embedSum(f, x[n:], bits[n:], w[n:], p[n:], from(g, n))
	}
}

// embedFirst is the staged sum of a row's first element as float32: the plan's first shift x0,
// known before the fused first pass (widened by the fields, not the table: one value).
func embedFirst(seg bool, w, p, g uint16) float32 {
	a := half.F16ToF32(w)
	if seg {
		a = half.F16ToF32(half.F32ToF16(a + half.F16ToF32(g)))
	}
	return half.F16ToF32(half.F32ToF16(a + half.F16ToF32(p)))
}

// embedShiftGo is the twin of embedShift: the staged sum into t, then the partial sums of
// f32(t − x0).
func embedShiftGo(f embedForm, part, t []float32, bits []uint16, w, p, g []uint16, x0 float32) {
	embedSumGo(f, t, bits, w, p, g)
	accumulateGo(sumForm{zero: !f.acc}, part, nil, t, x0)
}

// embedShiftTreeGo is the twin of embedKernels.shiftTree and shiftTreeSeg (g nil: no
// segment row): the staged sum of the row into t and its bits, the first pass from x0 =
// t[0], its tree under plan p, and the plan's second shift x0 + f32(sum·InvH) (plan.Plan.Stats).
func embedShiftTreeGo(p *plan.Plan, part, t []float32, bits []uint16, w, p16, g []uint16) float32 {
	f := embedForm{seg: g != nil}
	embedSumGo(f, t, bits, w, p16, g)
	x0 := t[0]
	accumulateGo(sumForm{zero: true}, part[:p.W], nil, t, x0)
	m1 := float32(p.Tree(part[:p.W]) * p.InvH)
	return x0 + m1
}

// embedShiftTree32Go is the twin of embedKernels.shiftTree32 (g nil) and shiftTree32Seg: the
// Go path's first pass (addGo's s, x0 = t[0]), its tree and the shift, as embedShiftTreeGo.
func embedShiftTree32Go(p *plan.Plan, part, t, w, p32, g []float32) float32 {
	for i := range t {
		s := w[i] + p32[i]
		if g != nil {
			s += g[i]
		}
		t[i] = s
	}
	x0 := t[0]
	accumulateGo(sumForm{zero: true}, part[:p.W], nil, t, x0)
	m1 := float32(p.Tree(part[:p.W]) * p.InvH)
	return x0 + m1
}

// embedShift runs a row's first pass fused with the staged sum: h as bits, t = f32(h), and
// the partial sums of f32(t − x0); the kernel over the whole chunks of W, then the shorter
// last chunk (embedShiftChunk); a W the width does not divide goes to the narrower width.
// A row shorter than W from +0 clears the partials first and adds onto them (as addSum16).
func (k *kernels) embedShift(f embedForm, part, t []float32, bits []uint16, w, p, g []uint16, x0 float32) {
	n := len(t)
	bits, w, p = bits[:n], w[:n], p[:n]
	if f.seg {
		g = g[:n]
	}
	if f.prefetch {
		k.prefetch(bytesOf(w))
		f.prefetch = false
	}
	if !k.simd() {
		embedShiftGo(f, part, t, bits, w, p, g, x0)
		return
	}
	W := len(part)
	if W%k.lanes != 0 {
		k.narrower.embedShift(f, part, t, bits, w, p, g, x0)
		return
	}
	if k.tails { // the kernel walks the ragged row: the whole of it
		k.embeds.run(f, part, t, bits, w, p, g, x0)
		return
	}
	full := n - n%W
	if full > 0 {
		k.embeds.run(f, part, t[:full], bits, w, p, g, x0)
	} else if !f.acc {
		clear(part)
	}
	if full < n {
		f.acc = true
		k.embedShiftChunk(f, part[:n-full], t[full:], bits[full:], w[full:], p[full:], from(g, full), x0)
	}
}

// embedShiftChunk is embedShift onto part over one chunk of len(part) = len(t) partials
// (the shorter last chunk of a row): the width's kernel over its whole vectors, what is
// left narrower, the twin last.
func (k *kernels) embedShiftChunk(f embedForm, part, t []float32, bits []uint16, w, p, g []uint16, x0 float32) {
	if !k.simd() {
		embedShiftGo(f, part, t, bits, w, p, g, x0)
		return
	}
	m := k.whole(len(t))
	if m > 0 {
		k.embeds.run(f, part[:m], t[:m], bits, w, p, g, x0)
	}
	if m < len(t) {
		k.narrower.embedShiftChunk(f, part[m:], t[m:], bits[m:], w[m:], p[m:], from(g, m), x0)
	}
}

// run runs the form's fused staged-sum kernel over whole chunks of W = len(part).
func (e *embedKernels) run(f embedForm, part, t []float32, bits []uint16, w, p, g []uint16, x0 float32) {
	switch {
	case f.seg && f.acc:
		e.shiftSegAcc(part, t, bits, w, p, g, x0)
	case f.seg:
		e.shiftSeg(part, t, bits, w, p, g, x0)
	case f.acc:
		e.shiftAcc(part, t, bits, w, p, x0)
	default:
		e.shift(part, t, bits, w, p, x0)
	}
}
