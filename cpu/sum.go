package cpu

import (
	"github.com/fusednorm/fusednorm/internal/plan"
)

// The plan's accumulations (internal/plan, plan v2): the partial sums of x − x0 and of the
// squared deviations d = (x − x0) − meanD, W = len(part) partials, each taking the chunks
// x[c·W+k] in order; then the plan's tree over the partials (plan.Plan.Tree: for a vector row,
// each quad folded first, then the halving).

// sumForm is the form of an accumulation.
type sumForm struct {
	sq   bool // the squared deviations f32(d·d), else x − x0
	fma  bool // sq as fma(d, d, part[k]) (the profile's FuseVariance)
	zero bool // the partials start at +0 (part is not read), else the sums are added onto them
}

// sumKernels are a width's accumulation kernels: whole chunks of W = len(part), W a multiple
// of the lanes, with blocks of partials kept in registers across the chunks.
type sumKernels struct {
	sum, sumZero                       func(part, x []float32, x0 float32)
	sqDev, sqDevZero, sqFMA, sqFMAZero func(part, x []float32, x0, meanD float32)
	tree                               func(part []float32) float32 // W a power of two ≥ 8
	fold                               func(part []float32)         // plan.FoldQuads, len(part) a multiple of 32
}

// run runs the form's kernel.
func (t *sumKernels) run(f sumForm, part, x []float32, x0, meanD float32) {
	switch {
	case !f.sq && f.zero:
		t.sumZero(part, x, x0)
	case !f.sq:
		t.sum(part, x, x0)
	case f.fma && f.zero:
		t.sqFMAZero(part, x, x0, meanD)
	case f.fma:
		t.sqFMA(part, x, x0, meanD)
	case f.zero:
		t.sqDevZero(part, x, x0, meanD)
	default:
		t.sqDev(part, x, x0, meanD)
	}
}

// accumulateGo is the twin of every accumulation.
func accumulateGo(f sumForm, part, x []float32, x0, meanD float32) {
	if f.zero {
		clear(part)
	}
	w := len(part)
	for base := 0; base < len(x); base += w {
		c := x[base:min(base+w, len(x))]
		p := part[:len(c)]
		switch {
		case !f.sq:
			for k, v := range c {
				p[k] += v - x0
			}
		case f.fma:
			for k, v := range c {
				d := (v - x0) - meanD
				p[k] = plan.FMA32(d, d, p[k])
			}
		default:
			for k, v := range c {
				d := (v - x0) - meanD
				p[k] += float32(d * d)
			}
		}
	}
}

// accumulate runs an accumulation: whole chunks of W go to the width's kernel; the shorter
// last chunk is one more call with W narrowed to its whole vectors, and what is left of it
// goes to the narrower width. A W that is not a multiple of the lanes (short rows) goes to
// the narrower width whole; so does a zero-start row shorter than W, except at the
// narrowest width, which clears the partials and adds onto them.
func (k *kernels) accumulate(f sumForm, part, x []float32, x0, meanD float32) {
	if !k.simd() {
		accumulateGo(f, part, x, x0, meanD)
		return
	}
	w := len(part)
	if w%k.lanes != 0 || f.zero && len(x) < w {
		if f.zero && w%k.lanes == 0 && !k.narrower.simd() {
			clear(part)
			f.zero = false
			k.accumulate(f, part, x, x0, meanD)
			return
		}
		k.narrower.accumulate(f, part, x, x0, meanD)
		return
	}
	full := len(x) - len(x)%w
	if full > 0 {
		k.sums.run(f, part, x[:full], x0, meanD)
	}
	// The zero-start kernel has written every partial: the last chunk adds onto them.
	f.zero = false
	tail := x[full:]
	m := k.whole(len(tail))
	if m > 0 {
		k.sums.run(f, part[:m], tail[:m], x0, meanD)
	}
	if m < len(tail) {
		k.narrower.accumulate(f, part[m:len(tail)], tail[m:], x0, meanD)
	}
}

// treeGo is plan.Plan.Tree for W = len(part): part[k] += part[k+off], off = W/2 … 1.
func treeGo(part []float32) float32 {
	for off := len(part) / 2; off >= 1; off /= 2 {
		lo, hi := part[:off], part[off:2*off]
		for k := range lo {
			lo[k] += hi[k]
		}
	}
	return part[0]
}

// tree runs the whole tree in one kernel for the plan's widths (powers of two ≥ 8); other
// lengths run the halving steps with off ≥ 8 as vector adds (each step is addTo of the upper
// half onto the lower half: the same adds in the same order) and the rest in Go.
func (k *kernels) tree(part []float32) float32 {
	if !k.simd() {
		return treeGo(part)
	}
	if n := len(part); n >= 8 && n&(n-1) == 0 {
		return k.sums.tree(part)
	}
	off := len(part) / 2
	for ; off >= 8; off /= 2 {
		k.addTo(part[:off], part[off:2*off])
	}
	return treeGo(part[:2*off+len(part)%2])
}

// foldQuads is plan.FoldQuads: whole blocks of 32 partials in one kernel, the rest in Go
// (their quads lie past every block, which the kernel only writes below).
func (k *kernels) foldQuads(part []float32) {
	if !k.simd() {
		plan.FoldQuads(part)
		return
	}
	n := len(part) &^ 31
	k.sums.fold(part[:n])
	plan.FoldQuadsFrom(part, n/4)
}

// planTree is the plan's tree over part[:p.W]: the quads folded first for a vector row
// (plan.Plan.Vec), then the halving steps.
func (k *kernels) planTree(p *plan.Plan, part []float32) float32 {
	part = part[:p.W]
	if p.Vec() {
		k.foldQuads(part)
		part = part[:p.W/plan.VecLanes]
	}
	return k.tree(part)
}

// rowStats returns the statistics of x under plan p; part is scratch of p.W elements. pf
// (nil for none) takes a step after each pass over x.
func rowStats(k *kernels, p *plan.Plan, x, part []float32, eps float32, pf *rowPrefetch) plan.Stats {
	part = part[:p.W]
	k.accumulate(sumForm{zero: true}, part, x, x[0], 0)
	pf.step()
	return rowStatsSummed(k, p, x, part, x[0], eps, pf)
}

// rowStatsSummed is rowStats after the first accumulation: part[:p.W] holds the partial
// sums of x − x0 (from addSum), x0 = x[0].
func rowStatsSummed(k *kernels, p *plan.Plan, x, part []float32, x0, eps float32, pf *rowPrefetch) plan.Stats {
	part = part[:p.W]
	meanD := k.planTree(p, part) * p.InvH
	k.accumulate(sumForm{sq: true, fma: p.Profile.FuseVariance, zero: true}, part, x, x0, meanD)
	pf.step()
	variance := k.planTree(p, part) * p.InvH
	return plan.Stats{X0: x0, MeanD: meanD, Rstd: plan.Rstd(variance + eps)}
}

// roundUp is n rounded up to a multiple of w.
func roundUp(n, w int) int { return (n + w - 1) / w * w }
