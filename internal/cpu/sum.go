package cpu

import (
	"github.com/fusednorm/fusednorm/internal/half"
	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/plan"
)

// The plan's sums, two kernel families: the accumulations and the tree (sumForm, family
// sum), then a row's first pass, the elementwise adds fused with the first sums (addForm,
// family addsum).

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

// span is v[lo:hi], or nil for a nil v (an operand a form leaves out: part2, a bias, x).
func span[E float32 | uint16](v []E, lo, hi int) []E {
	if v == nil {
		return nil
	}
	return v[lo:hi]
}

// accumulate runs an accumulation over t: whole chunks of W go to the width's kernel; the
// shorter last chunk is one more call with W narrowed to its whole vectors, and what is
// left of it goes to the narrower width. A W that is not a multiple of the lanes (short
// rows) goes to the narrower width whole; so does a zero-start row shorter than W, except
// at the narrowest width, which clears the partials and adds onto them. A width whose
// kernels walk ragged rows (tails) takes the whole row in one call.
func (k *kernels) accumulate(f sumForm, part, part2, t []float32, shift float32) {
	if f.dev {
		part2 = part2[:len(part)]
	}
	if !k.simd() {
		accumulateGo(f, part, part2, t, shift)
		return
	}
	w := len(part)
	if k.tails && w%k.lanes == 0 {
		k.sums.run(f, part, part2, t, shift)
		return
	}
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
	if p.Vec() && k.sums.foldTree != nil && treeW(p.W) {
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

// rowStatsOfShift is rowStatsOfSum after the second shift (shift = x0 + m1, plan.Plan.Stats).
func rowStatsOfShift(k *kernels, p *plan.Plan, t, part []float32, shift, eps float32, pf *rowPrefetch) plan.Stats {
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
	if k.sums.devTree != nil && k.treeRow(p, len(t)) {
		if p.Profile.FuseVariance {
			return k.sums.devFMATree(part, part2, t, shift)
		}
		return k.sums.devTree(part, part2, t, shift)
	}
	k.accumulate(sumForm{dev: true, fma: p.Profile.FuseVariance, zero: true}, part, part2, t, shift)
	return k.planTree(p, part), k.planTree(p, part2)
}

// treeRow reports whether a row of n elements under plan p fits the kernels that end in
// the plan's tree (sumKernels.sumTree and the like) at every width: a vector row, W =
// 64·2^k ≤ 2048 (as foldTree), n a multiple of W.
func treeRow(p *plan.Plan, n int) bool {
	return p.Vec() && treeW(p.W) && n%p.W == 0
}

// treeRow is the package's treeRow for this width: one whose kernels walk ragged rows
// (tails) takes any n, the last chunk short (rows of D 1000 at W 256).
func (k *kernels) treeRow(p *plan.Plan, n int) bool {
	return treeRow(p, n) || k.tails && p.Vec() && treeW(p.W)
}

// treeW reports whether W = 64·2^k ≤ 2048, the widths of foldTree and the tree kernels.
func treeW(w int) bool { return w >= 64 && w <= 2048 && w&(w-1) == 0 }

// roundUp is n rounded up to a multiple of w.
func roundUp(n, w int) int { return (n + w - 1) / w * w }

// A row's first pass: s = a + b, or (a + b) + c, staged into the row's scratch t = s (which
// the second pass reads) and fused with the plan's first sums, the partial sums of
// f32(s − x0), optionally writing s to the x output too; and the elementwise adds it is
// made of.

// addForm is the form of a first pass.
type addForm struct {
	dt   ops.DType // the format of a, b and c: F32, or a 16-bit format, widened as loaded
	bias bool      // c is added: s = (a + b) + c
	x    bool      // s is written to x too (16-bit: rounded to dt)
	nt   bool      // x with non-temporal stores where x is aligned (the caller fences)
	acc  bool      // the partial sums are added onto part (a later piece of a row), else start at +0
	// stream and prefetch are for rows from DRAM, which the fused pass would stride through
	// W elements at a time, leaving the hardware prefetchers behind.
	stream   bool // float32: s into t (and x) in one sequential pass (addRow), then the partial sums
	prefetch bool // 16-bit: a and b prefetched in address order first, then the fused pass
}

// addKernels are a width's elementwise first passes (row: t = s, x = s, whole vectors) and
// fused first passes (whole chunks of W = len(part), W a multiple of the lanes); their X
// and NT forms write x with plain or non-temporal stores (x aligned to the vector); and
// addTo, the tree's vector step.
type addKernels struct {
	addTo         func(s, b []float32)
	row2          func(t, a, b []float32)
	row3          func(t, a, b, d []float32)
	row2X, row2NT func(t, x, a, b []float32)
	row3X, row3NT func(t, x, a, b, d []float32)

	sum2, sum2Acc func(part, t, a, b []float32, x0 float32)
	sum3, sum3Acc func(part, t, a, b, d []float32, x0 float32)
	sum2X, sum2NT func(part, t, x, a, b []float32, x0 float32)
	sum3X, sum3NT func(part, t, x, a, b, d []float32, x0 float32)
	f16, bf16     sum16Kernels
}

// sum16Kernels are the fused first passes for 16-bit inputs of one format; the X and NT
// kernels also write x, s rounded to that format, with plain or non-temporal stores (NT: x
// aligned to a vector of 16-bit values).
type sum16Kernels struct {
	two, twoAcc       func(part, t []float32, a, b []uint16, x0 float32)
	full, fullAcc     func(part, t []float32, a, b, d []uint16, x0 float32)
	twoX, twoAccX     func(part, t []float32, x, a, b []uint16, x0 float32)
	fullX, fullAccX   func(part, t []float32, x, a, b, d []uint16, x0 float32)
	twoNT, twoAccNT   func(part, t []float32, x, a, b []uint16, x0 float32)
	fullNT, fullAccNT func(part, t []float32, x, a, b, d []uint16, x0 float32)
	trees, accTrees   sum16Trees // AVX-512 only, else nil
}

// sum16Trees are fused first passes of sum16Kernels that end in the plan's tree of a
// vector row and return its sum (x and d are read only by the forms that have them), from
// +0 (trees: a row summed in one piece) or onto part (accTrees: the last of a row's pieces
// of whole chunks): W = len(part) = 64·2^k ≤ maxTree16W, len(t) a multiple of W; part is
// scratch after.
type sum16Trees struct {
	two, full, twoX, fullX, twoNT, fullNT sum16TreeFn
}

type sum16TreeFn func(part, t []float32, x, a, b, d []uint16, x0 float32) float32

// maxTree16W is the widest W of the sum16Trees kernels (internal/cmd/asmgen's): planTree's
// (treeRow).
const maxTree16W = 2048

// pick is the form's tree kernel, nil where the level has none.
func (s *sum16Trees) pick(f addForm) sum16TreeFn {
	switch {
	case f.x && f.nt && f.bias:
		return s.fullNT
	case f.x && f.nt:
		return s.twoNT
	case f.x && f.bias:
		return s.fullX
	case f.x:
		return s.twoX
	case f.bias:
		return s.full
	}
	return s.two
}

// run runs the form's fused kernel (one with x has no acc form: addSum takes the separate
// passes).
func (k *addKernels) run(f addForm, part, t, x, a, b, c []float32, x0 float32) {
	switch {
	case f.acc && f.bias:
		k.sum3Acc(part, t, a, b, c, x0)
	case f.acc:
		k.sum2Acc(part, t, a, b, x0)
	case f.bias && f.x && f.nt:
		k.sum3NT(part, t, x, a, b, c, x0)
	case f.bias && f.x:
		k.sum3X(part, t, x, a, b, c, x0)
	case f.bias:
		k.sum3(part, t, a, b, c, x0)
	case f.x && f.nt:
		k.sum2NT(part, t, x, a, b, x0)
	case f.x:
		k.sum2X(part, t, x, a, b, x0)
	default:
		k.sum2(part, t, a, b, x0)
	}
}

// addSum16Tree is addSum16 over the last piece of a vector row, whole chunks of p.W (the
// whole row, or with f.acc the rest after earlier pieces), followed by the plan's tree of
// its partials (planTree), in one kernel: it returns the sum of t, or ok false (nothing
// done) where the level has no such kernel or the piece does not fit it. part[:p.W] is
// left as scratch.
func (k *kernels) addSum16Tree(f addForm, p *plan.Plan, part, t []float32, x, a, b, c []uint16, x0 float32) (sum float32, ok bool) {
	fm := &k.adds.f16
	if f.dt == ops.BF16 {
		fm = &k.adds.bf16
	}
	n := len(t)
	if p.W > maxTree16W || len(part) < p.W || !k.treeRow(p, n) {
		return 0, false
	}
	if f.x && f.nt && k.nt16Head(x) != 0 {
		f.nt = false
	}
	trees := &fm.trees
	if f.acc {
		trees = &fm.accTrees
	}
	run := trees.pick(f)
	if run == nil {
		return 0, false
	}
	x, a, b, c = clip(f, n, x, a, b, c)
	if f.prefetch {
		k.prefetch(bytesOf(a))
		k.prefetch(bytesOf(b))
	}
	return run(part[:p.W], t, x, a, b, c, x0), true
}

// addSumTree is addSum from +0 (f.acc false) over a row under plan p followed by the
// plan's tree of its partials: it returns the sum of t. The streamed form (f.stream) of a
// row that fits (treeRow) sums f32(t − x0) in the kernel that ends in the tree
// (sumKernels.sumTree). part[:p.W] is left as scratch.
func (k *kernels) addSumTree(f addForm, p *plan.Plan, part, t, x, a, b, c []float32, x0 float32) float32 {
	part = part[:p.W]
	if f.stream && k.sums.sumTree != nil && k.treeRow(p, len(t)) {
		x, a, b, c = clip(f, len(t), x, a, b, c)
		k.addRow(f, t, x, a, b, c)
		return k.sums.sumTree(part, t, x0)
	}
	k.addSum(f, part, t, x, a, b, c, x0)
	return k.planTree(p, part)
}

// clip cuts a first pass's operands to the row's n elements: a and b, c with a bias, x with
// an x output (the others may be nil).
func clip[T float32 | uint16](f addForm, n int, x, a, b, c []T) (xc, ac, bc, cc []T) {
	if f.bias {
		c = c[:n]
	}
	if f.x {
		x = x[:n]
	}
	return x, a[:n], b[:n], c
}

// run16 runs the form's 16-bit fused kernel.
func (k *addKernels) run16(f addForm, part, t []float32, x, a, b, c []uint16, x0 float32) {
	fm := &k.f16
	if f.dt == ops.BF16 {
		fm = &k.bf16
	}
	type pick struct{ x, nt, bias, acc bool }
	switch (pick{f.x, f.x && f.nt, f.bias, f.acc}) {
	case pick{true, true, true, true}:
		fm.fullAccNT(part, t, x, a, b, c, x0)
	case pick{true, true, true, false}:
		fm.fullNT(part, t, x, a, b, c, x0)
	case pick{true, true, false, true}:
		fm.twoAccNT(part, t, x, a, b, x0)
	case pick{true, true, false, false}:
		fm.twoNT(part, t, x, a, b, x0)
	case pick{true, false, true, true}:
		fm.fullAccX(part, t, x, a, b, c, x0)
	case pick{true, false, true, false}:
		fm.fullX(part, t, x, a, b, c, x0)
	case pick{true, false, false, true}:
		fm.twoAccX(part, t, x, a, b, x0)
	case pick{true, false, false, false}:
		fm.twoX(part, t, x, a, b, x0)
	case pick{false, false, true, true}:
		fm.fullAcc(part, t, a, b, c, x0)
	case pick{false, false, true, false}:
		fm.full(part, t, a, b, c, x0)
	case pick{false, false, false, true}:
		fm.twoAcc(part, t, a, b, x0)
	default:
		fm.two(part, t, a, b, x0)
	}
}

func addToGo(s, b []float32) {
	b = b[:len(s)]
	for i := range s {
		s[i] += b[i]
	}
}

// addSumGo is the twin of addSum: addRowGo, then the partial sums of f32(t − x0) from +0
// or onto part (len(part) = W).
func addSumGo(f addForm, part, t, x, a, b, c []float32, x0 float32) {
	addRowGo(f, t, x, a, b, c)
	accumulateGo(sumForm{zero: !f.acc}, part, nil, t, x0)
}

// addSum16Go is the twin of addSum16: the inputs widened, summed into t as addSumGo sums
// them, x narrowed from s, then the partial sums of f32(t − x0).
func addSum16Go(f addForm, part, t []float32, x, a, b, c []uint16, x0 float32) {
	a, b = a[:len(t)], b[:len(t)]
	if f.bias {
		c = c[:len(t)]
	}
	if f.dt == ops.BF16 {
		for i := range t {
			v := half.BF16ToF32(a[i]) + half.BF16ToF32(b[i])
			if f.bias {
				v += half.BF16ToF32(c[i])
			}
			t[i] = v
		}
	} else {
		tab := half.F16Table()
		for i := range t {
			v := tab[a[i]] + tab[b[i]]
			if f.bias {
				v += tab[c[i]]
			}
			t[i] = v
		}
	}
	if f.x {
		narrowGo(convForm{dt: f.dt}, x[:len(t)], t)
	}
	accumulateGo(sumForm{zero: !f.acc}, part, nil, t, x0)
}

func (k *kernels) addTo(s, b []float32) {
	b = b[:len(s)]
	if !k.simd() {
		addToGo(s, b)
		return
	}
	n := k.whole(len(s))
	if n > 0 {
		k.adds.addTo(s[:n], b)
	}
	if n < len(s) {
		k.narrower.addTo(s[n:], b[n:])
	}
}

// addRowGo is the twin of addRow: s = a + b, or (a + b) + c; t = s; x = s.
func addRowGo(f addForm, t, x, a, b, c []float32) {
	a, b = a[:len(t)], b[:len(t)]
	if f.bias {
		c = c[:len(t)]
	}
	if f.x {
		x = x[:len(t)]
	}
	for i := range t {
		s := a[i] + b[i]
		if f.bias {
			s += c[i]
		}
		if f.x {
			x[i] = s
		}
		t[i] = s
	}
}

// addRow is the first pass without the partial sums (streamed rows, tails): t = s, and
// x = s (non-temporally from x's first aligned element on with f.nt); the width's kernel
// over the whole vectors, what is left narrower.
func (k *kernels) addRow(f addForm, t, x, a, b, c []float32) {
	if !k.simd() {
		addRowGo(f, t, x, a, b, c)
		return
	}
	plain := f
	plain.nt = false
	if f.x && f.nt {
		if h := k.ntHead(x[:len(t)]); h > 0 {
			k.addRow(plain, t[:h], x, a, b, c)
			t, x, a, b, c = t[h:], x[h:], a[h:], b[h:], from(c, h)
		}
	}
	n := k.reach(len(t))
	if n > 0 {
		ad := &k.adds
		type pick struct{ x, nt, bias bool }
		switch (pick{f.x, f.x && f.nt, f.bias}) {
		case pick{true, true, true}:
			ad.row3NT(t[:n], x, a, b, c)
		case pick{true, true, false}:
			ad.row2NT(t[:n], x, a, b)
		case pick{true, false, true}:
			ad.row3X(t[:n], x, a, b, c)
		case pick{true, false, false}:
			ad.row2X(t[:n], x, a, b)
		case pick{false, false, true}:
			ad.row3(t[:n], a, b, c)
		default:
			ad.row2(t[:n], a, b)
		}
	}
	if n < len(t) {
		k.narrower.addRow(plain, t[n:], from(x, n), a[n:], b[n:], from(c, n))
	}
}

// addSum runs the first pass of float32 inputs into t: the fused kernel over the whole
// chunks and the separate passes (addRow, then the sums of f32(t − x0)) over the shorter
// last chunk (which the plan adds last). Shapes the kernel does not take (W not a
// multiple of the lanes, no whole chunk, a non-temporal x that does not start on a vector
// boundary, x with acc) go to the narrower width, or run the separate passes at the
// narrowest.
func (k *kernels) addSum(f addForm, part, t, x, a, b, c []float32, x0 float32) {
	n := len(t)
	x, a, b, c = clip(f, n, x, a, b, c)
	if !k.simd() {
		addSumGo(f, part, t, x, a, b, c, x0)
		return
	}
	if f.stream {
		k.addRow(f, t, x, a, b, c)
		k.accumulate(sumForm{zero: !f.acc}, part, nil, t, x0)
		return
	}
	w := len(part)
	full := n - n%w
	ragged := k.tails && w%k.lanes == 0 // the kernel takes the whole row
	if ragged {
		full = n
	}
	if w%k.lanes != 0 || full == 0 || f.x && (f.acc || f.nt && k.ntHead(x) != 0) {
		if k.narrower.simd() && !ragged {
			k.narrower.addSum(f, part, t, x, a, b, c, x0)
			return
		}
		k.addRow(f, t, x, a, b, c)
		k.accumulate(sumForm{zero: !f.acc}, part, nil, t, x0)
		return
	}
	k.adds.run(f, part, t[:full], x, a, b, c, x0)
	if full < n {
		k.addRow(f, t[full:], from(x, full), a[full:], b[full:], from(c, full))
		k.accumulate(sumForm{}, part, nil, t[full:], x0)
	}
}

// addSum16 runs the first pass of 16-bit inputs into t: the kernel over the whole chunks,
// then the shorter last chunk (addSum16Chunk); a W the width does not divide goes to the
// narrower width. A row shorter than W (no whole chunk) from +0 clears the partials first
// (those past its end stay +0, as the twin leaves them) and adds onto them. A non-temporal
// x that does not start on a vector boundary takes plain stores.
func (k *kernels) addSum16(f addForm, part, t []float32, x, a, b, c []uint16, x0 float32) {
	n := len(t)
	x, a, b, c = clip(f, n, x, a, b, c)
	if f.prefetch {
		k.prefetch(bytesOf(a))
		k.prefetch(bytesOf(b))
		f.prefetch = false
	}
	if !k.simd() {
		addSum16Go(f, part, t, x, a, b, c, x0)
		return
	}
	if f.x && f.nt && k.nt16Head(x) != 0 {
		f.nt = false
	}
	w := len(part)
	if w%k.lanes != 0 {
		k.narrower.addSum16(f, part, t, x, a, b, c, x0)
		return
	}
	if k.tails { // the kernel walks the ragged row: the whole of it, from +0 or onto part
		k.adds.run16(f, part, t, x, a, b, c, x0)
		return
	}
	full := n - n%w
	if full > 0 {
		k.adds.run16(f, part, t[:full], x, a, b, c, x0)
	} else if !f.acc {
		clear(part)
	}
	if full < n {
		f.acc = true
		k.addSum16Chunk(f, part[:n-full], t[full:], from(x, full), a[full:], b[full:], from(c, full), x0)
	}
}

// addSum16Chunk is addSum16 onto part over one chunk of len(part) = len(t) partials (the
// shorter last chunk of a row): each partial takes one element, so the width's kernel runs
// it as a chunk of its whole vectors, and what is left goes narrower (x in plain stores, as
// the affine step stores its last few), the twin last.
func (k *kernels) addSum16Chunk(f addForm, part, t []float32, x, a, b, c []uint16, x0 float32) {
	if !k.simd() {
		addSum16Go(f, part, t, x, a, b, c, x0)
		return
	}
	if f.x && f.nt && k.nt16Head(x) != 0 {
		f.nt = false
	}
	m := k.whole(len(t))
	if m > 0 {
		k.adds.run16(f, part[:m], t[:m], x, a, b, c, x0)
	}
	if m < len(t) {
		f.nt = false
		k.narrower.addSum16Chunk(f, part[m:], t[m:], from(x, m), a[m:], b[m:], from(c, m), x0)
	}
}
