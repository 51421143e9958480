package cpu

import (
	"github.com/fusednorm/fusednorm/internal/plan"
)

// The plan's accumulations (internal/plan, plan v2), W = len(part) partials, each taking the
// chunks [c·W+k] in order: the shift, which writes a row's shifted values t = x − x0 (the
// row's scratch, or x itself) and their partial sums, and the partial sums of the squared
// deviations d = t − meanD, read from t: the later passes take the shift's values instead of
// subtracting x0 again; then the plan's tree over the partials (plan.Plan.Tree: for a vector
// row, each quad folded first, then the halving).

// sumForm is the form of an accumulation.
type sumForm struct {
	sq      bool // the squared deviations f32(d·d) of t, else the shift: t = x − x0 and its sums
	shifted bool // not sq: t already holds the shifted row (shiftRow's), only its sums (x unused)
	fma     bool // sq as fma(d, d, part[k]) (the profile's FuseVariance)
	zero    bool // the partials start at +0 (part is not read), else the sums are added onto them
}

// sumKernels are a width's accumulation kernels: whole chunks of W = len(part), W a multiple
// of the lanes, with blocks of partials kept in registers across the chunks.
type sumKernels struct {
	sum, sumZero                       func(part, t []float32)
	shift, shiftZero                   func(part, t, x []float32, x0 float32)
	sqDev, sqDevZero, sqFMA, sqFMAZero func(part, t []float32, meanD float32)
	tree                               func(part []float32) float32                   // W a power of two ≥ 8
	fold                               func(part []float32)                           // plan.FoldQuads, len(part) a multiple of 32
	foldTree                           func(part []float32) float32                   // a vector row's tree, part only read: W = 64·2^k ≤ 2048 (AVX-512; else nil)
	sumTree                            func(part, t []float32) float32                // sumZero then foldTree in one kernel, len(t) a multiple of W; part scratch (AVX-512; else nil)
	sqTree, sqFMATree                  func(part, t []float32, meanD float32) float32 // sqDevZero (sqFMAZero) then foldTree, the same
}

// run runs the form's kernel.
func (k *sumKernels) run(f sumForm, part, t, x []float32, x0, meanD float32) {
	switch {
	case f.shifted && f.zero:
		k.sumZero(part, t)
	case f.shifted:
		k.sum(part, t)
	case !f.sq && f.zero:
		k.shiftZero(part, t, x, x0)
	case !f.sq:
		k.shift(part, t, x, x0)
	case f.fma && f.zero:
		k.sqFMAZero(part, t, meanD)
	case f.fma:
		k.sqFMA(part, t, meanD)
	case f.zero:
		k.sqDevZero(part, t, meanD)
	default:
		k.sqDev(part, t, meanD)
	}
}

// accumulateGo is the twin of every accumulation; x is read by the shift only (else nil).
func accumulateGo(f sumForm, part, t, x []float32, x0, meanD float32) {
	if f.zero {
		clear(part)
	}
	w := len(part)
	for base := 0; base < len(t); base += w {
		c := t[base:min(base+w, len(t))]
		p := part[:len(c)]
		switch {
		case f.shifted:
			addToGo(p, c)
		case !f.sq:
			for k, v := range x[base : base+len(c)] {
				c[k] = v - x0
				p[k] += c[k]
			}
		case f.fma:
			for k, v := range c {
				d := v - meanD
				p[k] = plan.FMA32(d, d, p[k])
			}
		default:
			for k, v := range c {
				d := v - meanD
				p[k] += float32(d * d)
			}
		}
	}
}

// accumulate runs an accumulation over t (the shift: from x, into t): whole chunks of W go
// to the width's kernel; the shorter last chunk is one more call with W narrowed to its
// whole vectors, and what is left of it goes to the narrower width. A W that is not a
// multiple of the lanes (short rows) goes to the narrower width whole; so does a zero-start
// row shorter than W, except at the narrowest width, which clears the partials and adds
// onto them.
func (k *kernels) accumulate(f sumForm, part, t, x []float32, x0, meanD float32) {
	if !f.sq && !f.shifted {
		x = x[:len(t)]
	}
	if !k.simd() {
		accumulateGo(f, part, t, x, x0, meanD)
		return
	}
	w := len(part)
	if w%k.lanes != 0 || f.zero && len(t) < w {
		if f.zero && w%k.lanes == 0 && !k.narrower.simd() {
			clear(part)
			f.zero = false
			k.accumulate(f, part, t, x, x0, meanD)
			return
		}
		k.narrower.accumulate(f, part, t, x, x0, meanD)
		return
	}
	full := len(t) - len(t)%w
	if full > 0 {
		k.sums.run(f, part, t[:full], x, x0, meanD)
	}
	// The zero-start kernel has written every partial: the last chunk adds onto them.
	f.zero = false
	tail := t[full:]
	m := k.whole(len(tail))
	if m > 0 {
		k.sums.run(f, part[:m], tail[:m], from(x, full), x0, meanD)
	}
	if m < len(tail) {
		k.narrower.accumulate(f, part[m:len(tail)], tail[m:], from(x, full+m), x0, meanD)
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
// (plan.Plan.Vec), then the halving steps; it leaves part as scratch (foldTree does not
// write it).
func (k *kernels) planTree(p *plan.Plan, part []float32) float32 {
	part = part[:p.W]
	if w := p.W; p.Vec() && k.sums.foldTree != nil && w >= 64 && w <= 2048 && w&(w-1) == 0 {
		return k.sums.foldTree(part)
	}
	if p.Vec() {
		k.foldQuads(part)
		part = part[:p.W/plan.VecLanes]
	}
	return k.tree(part)
}

// rowStats returns the statistics of x under plan p; t (len(x)) and part (p.W) are scratch.
// pf (nil for none) takes a step after each pass over the row.
func rowStats(k *kernels, p *plan.Plan, x, t, part []float32, eps float32, pf *rowPrefetch) plan.Stats {
	x0 := x[0]
	k.accumulate(sumForm{zero: true}, part[:p.W], t[:len(x)], x, x0, 0)
	pf.step()
	return rowStatsSummed(k, p, t[:len(x)], part, x0, eps, pf)
}

// rowStatsSummed is rowStats after the first pass: t holds the row shifted by x0, and
// part[:p.W] the partial sums of t (from the shift, or a fused first pass).
func rowStatsSummed(k *kernels, p *plan.Plan, t, part []float32, x0, eps float32, pf *rowPrefetch) plan.Stats {
	return rowStatsOfSum(k, p, t, part, x0, k.planTree(p, part[:p.W]), eps, pf)
}

// rowStatsOfSum is rowStatsSummed after the tree of the first pass: sum is the plan's sum
// of t, and part[:p.W] is scratch.
func rowStatsOfSum(k *kernels, p *plan.Plan, t, part []float32, x0, sum, eps float32, pf *rowPrefetch) plan.Stats {
	meanD := float32(sum * p.InvH) // no fused multiply-add on arm64: plan.Stats
	variance := float32(k.sqDevSum(p, part, t, meanD) * p.InvH)
	pf.step()
	return plan.Stats{X0: x0, MeanD: meanD, Rstd: plan.Rstd(variance + eps)}
}

// sqDevSum is the plan's sum of the squared deviations of t from meanD (the variance pass
// and its tree): in one kernel where the width has it (foldTree's rows, whole chunks of
// W), else the accumulation and then planTree. part[:p.W] is scratch.
func (k *kernels) sqDevSum(p *plan.Plan, part, t []float32, meanD float32) float32 {
	part = part[:p.W]
	if k.sums.sqTree != nil && treeRow(p, len(t)) {
		if p.Profile.FuseVariance {
			return k.sums.sqFMATree(part, t, meanD)
		}
		return k.sums.sqTree(part, t, meanD)
	}
	k.accumulate(sumForm{sq: true, fma: p.Profile.FuseVariance, zero: true}, part, t, nil, 0, meanD)
	return k.planTree(p, part)
}

// treeRow reports whether a row of n elements under plan p fits the kernels that end in
// the plan's tree (sumKernels.sumTree and the like): a vector row, W = 64·2^k ≤ 2048 (as
// foldTree), n a multiple of W.
func treeRow(p *plan.Plan, n int) bool {
	w := p.W
	return p.Vec() && w >= 64 && w <= 2048 && w&(w-1) == 0 && n%w == 0
}

// roundUp is n rounded up to a multiple of w.
func roundUp(n, w int) int { return (n + w - 1) / w * w }
