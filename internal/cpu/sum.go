package cpu

import (
	"github.com/fusednorm/fusednorm/internal/plan"
)

// The plan's accumulations (internal/plan, plan v3), W = len(part) partials, each taking the
// chunks [c·W+k] in order, over a row's staged values t (the first pass writes t = x, the
// row's own values, into the row's scratch): the first pass's partial sums of f32(t − x0),
// and the second pass, which computes e = f32(t − shift) from t (from x itself, not from
// x − x0: plan v3's accuracy rests on it), writes t = e back in place for the affine step,
// and takes the partial sums of e and of e² as two partial sets; then the plan's tree over
// each set (plan.Plan.Tree: for a vector row, each quad folded first, then the halving).

// sumForm is the form of an accumulation.
type sumForm struct {
	dev  bool // the second pass: e = t − shift, t = e, part += e and part2 += e²; else part += t − shift
	fma  bool // dev with part2 = fma(e, e, part2) (the profile's FuseVariance), else part2 += f32(e·e)
	zero bool // the partials start at +0 (part and part2 are not read), else the sums are added onto them
}

// sumKernels are a width's accumulation kernels: whole chunks of W = len(part) (and of
// part2, its length), W a multiple of the lanes, with blocks of partials kept in registers
// across the chunks.
type sumKernels struct {
	sum, sumZero                     func(part, t []float32, shift float32)
	dev, devZero, devFMA, devFMAZero func(part, part2, t []float32, shift float32)
	tree                             func(part []float32) float32                   // W a power of two ≥ 8
	fold                             func(part []float32)                           // plan.FoldQuads, len(part) a multiple of 32
	foldTree                         func(part []float32) float32                   // a vector row's tree, part only read: W = 64·2^k ≤ 2048 (AVX-512; else nil)
	sumTree                          func(part, t []float32, shift float32) float32 // sumZero then foldTree in one kernel, len(t) a multiple of W; part scratch (AVX-512; else nil)
	// devZero (devFMAZero) then the plan's tree of each set in one kernel, as sumTree, for
	// treeRow's rows (every SIMD width).
	devTree, devFMATree func(part, part2, t []float32, shift float32) (sum, sumSq float32)
}

// run runs the form's kernel.
func (k *sumKernels) run(f sumForm, part, part2, t []float32, shift float32) {
	switch {
	case !f.dev && f.zero:
		k.sumZero(part, t, shift)
	case !f.dev:
		k.sum(part, t, shift)
	case f.fma && f.zero:
		k.devFMAZero(part, part2, t, shift)
	case f.fma:
		k.devFMA(part, part2, t, shift)
	case f.zero:
		k.devZero(part, part2, t, shift)
	default:
		k.dev(part, part2, t, shift)
	}
}

// accumulateGo is the twin of every accumulation; part2 is used by the dev form only (else
// nil).
func accumulateGo(f sumForm, part, part2, t []float32, shift float32) {
	if f.zero {
		clear(part)
		clear(part2)
	}
	w := len(part)
	for base := 0; base < len(t); base += w {
		c := t[base:min(base+w, len(t))]
		p := part[:len(c)]
		switch {
		case !f.dev:
			for k, v := range c {
				p[k] += v - shift
			}
		case f.fma:
			p2 := part2[:len(c)]
			for k, v := range c {
				e := v - shift
				c[k] = e
				p[k] += e
				p2[k] = plan.FMA32(e, e, p2[k])
			}
		default:
			p2 := part2[:len(c)]
			for k, v := range c {
				e := v - shift
				c[k] = e
				p[k] += e
				p2[k] += float32(e * e)
			}
		}
	}
}

// span is v[lo:hi], or nil for a nil v (part2 of the forms without it).
func span(v []float32, lo, hi int) []float32 {
	if v == nil {
		return nil
	}
	return v[lo:hi]
}

// accumulate runs an accumulation over t: whole chunks of W go to the width's kernel; the
// shorter last chunk is one more call with W narrowed to its whole vectors, and what is
// left of it goes to the narrower width. A W that is not a multiple of the lanes (short
// rows) goes to the narrower width whole; so does a zero-start row shorter than W, except
// at the narrowest width, which clears the partials and adds onto them.
func (k *kernels) accumulate(f sumForm, part, part2, t []float32, shift float32) {
	if f.dev {
		part2 = part2[:len(part)]
	}
	if !k.simd() {
		accumulateGo(f, part, part2, t, shift)
		return
	}
	w := len(part)
	if w%k.lanes != 0 || f.zero && len(t) < w {
		if f.zero && w%k.lanes == 0 && !k.narrower.simd() {
			clear(part)
			clear(part2)
			f.zero = false
			k.accumulate(f, part, part2, t, shift)
			return
		}
		k.narrower.accumulate(f, part, part2, t, shift)
		return
	}
	full := len(t) - len(t)%w
	if full > 0 {
		k.sums.run(f, part, part2, t[:full], shift)
	}
	// The zero-start kernel has written every partial: the last chunk adds onto them.
	f.zero = false
	tail := t[full:]
	m := k.whole(len(tail))
	if m > 0 {
		k.sums.run(f, part[:m], span(part2, 0, m), tail[:m], shift)
	}
	if m < len(tail) {
		k.narrower.accumulate(f, part[m:len(tail)], span(part2, m, len(tail)), tail[m:], shift)
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

// rowStats returns the statistics of x under plan p; t (len(x)) and part (2·p.W) are
// scratch, and t ends holding e = f32(x − Shift) (what the affine step reads). pf (nil for
// none) takes a step after each pass over the row.
func rowStats(k *kernels, p *plan.Plan, x, t, part []float32, eps float32, pf *rowPrefetch) plan.Stats {
	t = t[:len(x)]
	copy(t, x)
	x0 := x[0]
	k.accumulate(sumForm{zero: true}, part[:p.W], nil, t, x0)
	pf.step()
	return rowStatsSummed(k, p, t, part, x0, eps, pf)
}

// rowStatsSummed is rowStats after the first pass: t holds the row's values, and
// part[:p.W] the partial sums of f32(t − x0) (a first pass's).
func rowStatsSummed(k *kernels, p *plan.Plan, t, part []float32, x0, eps float32, pf *rowPrefetch) plan.Stats {
	return rowStatsOfSum(k, p, t, part, x0, k.planTree(p, part[:p.W]), eps, pf)
}

// rowStatsOfSum is rowStatsSummed after the tree of the first pass: sum is the plan's sum
// of f32(t − x0), and part[:2·p.W] is scratch. It runs the second pass (devSums), which
// leaves e = f32(t − shift) in t, and finishes the statistics as plan.Stats does.
func rowStatsOfSum(k *kernels, p *plan.Plan, t, part []float32, x0, sum, eps float32, pf *rowPrefetch) plan.Stats {
	m1 := float32(sum * p.InvH) // no fused multiply-add on arm64: plan.Stats
	shift := x0 + m1
	sumE, sumSq := k.devSums(p, part, t, shift)
	pf.step()
	return p.StatsOf(shift, sumE, sumSq, eps)
}

// devSums is the plan's second pass and its trees (plan.Plan.SumDev): e = f32(t − shift)
// written back into t, and the plan's sums of e and of e², the partial sets in
// part[:p.W] and part[p.W:2·p.W] (scratch): in one kernel where the width has it
// (foldTree's rows, whole chunks of W), else the accumulation, then planTree of each set.
func (k *kernels) devSums(p *plan.Plan, part, t []float32, shift float32) (sum, sumSq float32) {
	w := p.W
	part, part2 := part[:w], part[w:2*w]
	if k.sums.devTree != nil && treeRow(p, len(t)) {
		if p.Profile.FuseVariance {
			return k.sums.devFMATree(part, part2, t, shift)
		}
		return k.sums.devTree(part, part2, t, shift)
	}
	k.accumulate(sumForm{dev: true, fma: p.Profile.FuseVariance, zero: true}, part, part2, t, shift)
	return k.planTree(p, part), k.planTree(p, part2)
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
