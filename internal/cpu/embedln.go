package cpu

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/plan"
)

// embedOp is an EmbedLayerNorm op bound to the CPU. It keeps references to the caller's
// tables and weights (no copy): the f16 affine step reads gamma and beta as they are.
type embedOp struct {
	be     *Backend
	k      *kernels
	w      ops.EmbedWeights
	plan   plan.Plan
	w16    weights16 // gamma and beta of the f16 affine step: widened once (tuning.wideBytes), or as given
	piece  int       // tuning.sumPieceOf(W): the piece of the f16 first pass
	closed atomic.Bool
	quit   chan struct{} // closed by Close: stops the huge-page collapse
	huge   *collapse     // the word table's huge-page collapse; nil when none was started
}

// PrepareEmbed binds the weights. The tables must not change while the op is in use. A
// word table of 16 MiB or more is moved onto huge pages (unless Options.NoHugePages) by
// a goroutine of its own, off the caller's path, which Close stops and waits for: its
// values and address stay, and a kernel that declines leaves it as it was.
func (b *Backend) PrepareEmbed(w *ops.EmbedWeights) (ops.PreparedEmbed, error) {
	if stopped(nil, b.pool.stop) {
		return nil, ops.ErrClosed
	}
	op := &embedOp{be: b, k: b.k, w: *w, plan: b.Plan(w.H, w.Half()), w16: weightsOf(w.Gamma, w.Beta), quit: make(chan struct{})}
	op.piece = b.tune.sumPieceOf(op.plan.W)
	if w.DType == ops.F16 && 8*w.H <= b.tune.wideBytes {
		op.w16 = widened(b.k, make([]float32, 2*w.H), w.Gamma, w.Beta)
	}
	if word := w.Word.Bytes(); !b.opts.NoHugePages && len(word) >= b.tune.hugeBytes {
		op.huge = b.pool.collapse(word, op.quit)
	}
	return op, nil
}

// Settling reports whether the op's word table is still being moved onto huge pages: its
// calls then run slower than they will (misses of the small pages' TLB, and the collapse's
// own copying), so a caller timing them (auto's router) does not take them as the op's cost.
func (op *embedOp) Settling() bool {
	if op.huge == nil {
		return false
	}
	select {
	case <-op.huge.done:
		return false
	default:
		return true
	}
}

// Close stops the op, and the huge-page collapse of its word table if that is still
// running, and waits for the collapse to end (one madvise of a huge page at most).
func (op *embedOp) Close() error {
	if !op.closed.Swap(true) {
		close(op.quit)
	}
	if op.huge != nil {
		<-op.huge.done
	}
	return nil
}

func (op *embedOp) Run(ctx context.Context, in *ops.EmbedInputs, out *ops.EmbedOutputs) error {
	if op.closed.Load() {
		return ops.ErrClosed
	}
	if err := op.be.admit(ctx); err != nil {
		return err
	}
	H := op.w.H
	tokens := in.B * in.S
	t := &op.be.tune
	c := embedCalls.Get().(*embedCall)
	c.op, c.in, c.out = op, *in, *out
	// Outputs past the caches are stored non-temporally, but for rows of at most
	// tuning.shortRow bytes.
	c.nt = tokens*H*4 >= t.bigBytes && H*op.w.DType.Size() > t.shortRow
	// The word rows are random reads from a table past the caches (big: gatherBytes):
	// short rows are prefetched a token ahead; rows of at least hwGatherRow bytes are read
	// in address order (inOrder), where the hardware prefetchers follow them: the float32
	// sum in one sequential pass, each 16-bit piece prefetched just before it is summed.
	big := op.w.V*H*op.w.DType.Size() >= t.gatherBytes
	c.prefetch = big && t.prefetchAhead > 0 && H*op.w.DType.Size() < t.hwGatherRow
	c.inOrder = big && !c.prefetch
	c.ahead = t.prefetchAhead
	c.lead = 0
	if c.inOrder {
		c.lead = t.rowLead
	}
	c.piece = t.prefetchPiece(H * op.w.DType.Size())
	c.short, c.fast = c.shortKernels()
	c.wholeRow = H*op.w.DType.Size() <= wholePrefetch
	c.lines = c.nt && op.k.tails && H*op.w.DType.Size()%64 != 0
	whole := op.be.pool.forRows(ctx, tokens, H, op.plan.W, op.be.opts.Threads, c, &c.join)
	c.reset()
	embedCalls.Put(c)
	if !whole {
		return op.be.cut(ctx)
	}
	if out.MaskIndex != nil {
		maskIndex(op.k, out.MaskIndex, in.Mask, in.B, in.S, op.w.Rule)
	}
	return nil
}

// embedCall is the state of one EmbedLayerNorm call, shared by its workers; pooled, so a
// call allocates nothing. It copies the caller's input and output descriptors (not the
// data), and reset drops them before it goes back to the pool.
type embedCall struct {
	op           *embedOp
	in           ops.EmbedInputs
	out          ops.EmbedOutputs
	nt, prefetch bool
	inOrder      bool // the word rows past the caches, not prefetched ahead: read in address order
	ahead        int  // tuning.prefetchAhead
	lead         int  // tuning.rowLead for inOrder rows, else 0
	piece        int  // tuning.prefetchPiece
	short        embedShort
	fast         bool // the tokens take shortToken
	wholeRow     bool // the word rows are prefetched whole, at once (wholePrefetch)
	lines        bool // outputs stored non-temporally by whole lines (lineSplit), rows off the lines: tailLines
	join         rowJoin
}

// wholePrefetch is the most bytes of a word row prefetched at once a token ahead, instead
// of a piece after each pass (rowPrefetch): a few lines do not fill a core's miss buffers,
// and a short token's passes take less time than building the pieces. At 512 (was 256)
// the fast calls' rows of 257-512 bytes go two at a time too (shortPair), two rows of 8
// lines prefetched a pair ahead: on the EPYC, one thread, BenchmarkStreamAB against 256,
// f16 H 256 0.82-0.86x the time, f32 H 128 0.79-0.83x (avx2 0.81-0.88x, 0.72-0.79x);
// the ragged f16 H 200 and f32 H 100, which keep the general path, 0.87-0.88x, 0.80-0.98x.
// Longer rows stay one at a time in pieces: the lat- f32 H 768 took 1.05x the time in
// pairs prefetched in pieces, 1.02x prefetched whole.
const wholePrefetch = 512

// embedShort is the kernels of a call whose tokens each take one kernel a step, chosen once
// for the call (as AddLayerNorm's shortRow): the first pass and the affine step; the tree
// and the second pass are planTree's and rowStatsOfSum's.
type embedShort struct {
	shift    func(part, t []float32, bits []uint16, w, p []uint16, x0 float32)    // f16, no segment
	shiftSeg func(part, t []float32, bits []uint16, w, p, g []uint16, x0 float32) // f16 with a segment
	// The f16 first pass with its tree and shift, where the width has them (embedKernels.shiftTree):
	// then shift and shiftSeg are not called.
	shiftTree    func(part, t []float32, bits []uint16, w, p []uint16, invH float32) float32
	shiftTreeSeg func(part, t []float32, bits []uint16, w, p, g []uint16, invH float32) float32
	// The same for f32 calls without the embedding_sum output (embedKernels.shiftTree32):
	// then firstPass and planTree are not called.
	shiftTree32    func(part, t, w, p []float32, invH float32) float32
	shiftTree32Seg func(part, t, w, p, g []float32, invH float32) float32
	aff            affine16Fn // f16, float32 gamma and beta
	affH           affineHFn  // f16, gamma and beta in f16
	af32           affineFn   // f32
}

// shortKernels returns the call's embedShort and true where every token takes the same
// kernels in one piece: a row that the tree kernels take (treeRow) in whole vectors, its
// outputs stored through the caches (in the caches, or rows of at most tuning.shortRow
// bytes), and its word row not read in address order (inOrder).
func (c *embedCall) shortKernels() (embedShort, bool) {
	op := c.op
	k, p, H := op.k, &op.plan, op.w.H
	if !k.simd() || c.nt || c.inOrder || !treeRow(p, H) || p.W%k.lanes != 0 || k.whole(H) != H {
		return embedShort{}, false
	}
	var s embedShort
	af := affineForm{dt: op.w.DType, fma: p.Profile.FuseAffine}
	switch op.w.DType {
	case ops.F16:
		if H > op.piece {
			return embedShort{}, false
		}
		s.shift, s.shiftSeg = k.embeds.shift, k.embeds.shiftSeg
		s.shiftTree, s.shiftTreeSeg = k.embeds.shiftTree, k.embeds.shiftTreeSeg // treeRow: W is treeW
		if op.w16.gammaH != nil {
			s.affH = affineHOf(&k.affines, af).of(af)
		} else {
			s.aff = affine16Of(&k.affines, af).of(af)
		}
		return s, s.shift != nil && s.shiftSeg != nil && (s.aff != nil || s.affH != nil)
	case ops.F32:
		if !c.out.Sum.Present() {
			s.shiftTree32, s.shiftTree32Seg = k.embeds.shiftTree32, k.embeds.shiftTree32Seg // treeRow: W is treeW
		}
		s.af32 = affine32Of(&k.affines, af).of(af)
		return s, s.af32 != nil
	}
	return embedShort{}, false
}

// shortToken computes one output row of a fast call (token's steps, each one kernel of
// c.short); pf takes a step after each pass over the row. (The steps are shortShift's and
// shortAffine's, written out here in one function: shortToken as those two calls, on the
// EPYC, one thread, six rounds in a random order, ran EmbedLayerNorm f16 H 512 at 7.45
// against 8.07 GB/s (median) and f32 H 384 at 14.1 against 14.6.)
func (c *embedCall) shortToken(t int, sc *scratch, pf *rowPrefetch) {
	op, in, out, s := c.op, &c.in, &c.out, &c.short
	w, p := &op.w, &op.plan
	H := w.H
	wi, pi := int(in.IDs[t]), op.posRow(in, t)
	gi := op.segRow(in, t)
	tr, part := sc.x[:H], sc.part[:p.W]
	row := t * H
	var x0, shift float32
	tree := false // the first pass's kernel ran its tree and returned the shift
	if w.DType == ops.F16 {
		word, pos := w.Word.U16[wi*H:wi*H+H], w.Pos.U16[pi*H:pi*H+H]
		bits := sumBits(out, row, H, sc)
		switch {
		case s.shiftTree != nil && gi >= 0:
			shift, tree = s.shiftTreeSeg(part, tr, bits, word, pos, w.Seg.U16[gi*H:gi*H+H], p.InvH), true
		case s.shiftTree != nil:
			shift, tree = s.shiftTree(part, tr, bits, word, pos, p.InvH), true
		case gi >= 0:
			g := w.Seg.U16[gi*H : gi*H+H]
			x0 = embedFirst(true, word[0], pos[0], g[0])
			s.shiftSeg(part, tr, bits, word, pos, g, x0)
		default:
			x0 = embedFirst(false, word[0], pos[0], 0)
			s.shift(part, tr, bits, word, pos, x0)
		}
	} else {
		word, pos := w.Word.F32[wi*H:wi*H+H], w.Pos.F32[pi*H:pi*H+H]
		var g, xs []float32
		x0 = word[0] + pos[0] // as token
		if gi >= 0 {
			g = w.Seg.F32[gi*H : gi*H+H]
			x0 += g[0]
		}
		if out.Sum.Present() {
			xs = out.Sum.F32[row : row+H]
		}
		op.k.adds.run(addForm{dt: ops.F32, bias: gi >= 0, x: xs != nil}, part, tr, xs, word, pos, g, x0)
	}
	var st plan.Stats
	if tree {
		pf.step()
		st = rowStatsOfShift(op.k, p, tr, part, shift, w.Epsilon, pf)
	} else {
		sum := op.k.planTree(p, part)
		pf.step()
		st = rowStatsOfSum(op.k, p, tr, part, x0, sum, w.Epsilon, pf)
	}
	switch {
	case s.af32 != nil:
		s.af32(out.Out.F32[row:row+H], tr, w.Gamma.F32, w.Beta.F32, st.MeanD, st.Rstd)
	case s.affH != nil:
		s.affH(out.Out.U16[row:row+H], tr, op.w16.gammaH, op.w16.betaH, st.MeanD, st.Rstd)
	default:
		s.aff(out.Out.U16[row:row+H], tr, op.w16.gamma, op.w16.beta, st.MeanD, st.Rstd)
	}
	pf.step()
}

// shortPair is shortToken for tokens t and t+1 (no rowPrefetch: their word rows are
// prefetched whole), each step of t then the same step of t+1: a short token's steps are
// one chain of dependent latencies (the staged sum, the trees, the square root and the
// division before the affine step), which the core overlaps with the other token's
// where the two come a kernel apart, and not where a whole token's lie between them.
func (c *embedCall) shortPair(t int, sc *scratch) {
	op := c.op
	p, H, W := &op.plan, op.w.H, op.plan.W
	trA, partA := sc.x[:H], sc.part[:W]
	trB, partB := sc.y[:H], sc.part[2*W:3*W] // sc.part holds 4·W (scratch.size): B's second set from 3·W
	shiftA := c.shortShift(t, trA, partA, sc)
	shiftB := c.shortShift(t+1, trB, partB, sc)
	stA := rowStatsOfShift(op.k, p, trA, partA, shiftA, op.w.Epsilon, nil)
	stB := rowStatsOfShift(op.k, p, trB, partB, shiftB, op.w.Epsilon, nil)
	c.shortAffine(t, trA, stA)
	c.shortAffine(t+1, trB, stB)
}

// shortShift is a fast call's first pass over token t: its row staged into tr, and the
// plan's second shift x0 + f32(sum·InvH) (plan.Plan.Stats) from the partial sums in part.
func (c *embedCall) shortShift(t int, tr, part []float32, sc *scratch) float32 {
	op, in, s := c.op, &c.in, &c.short
	w, p := &op.w, &op.plan
	H := w.H
	wi, pi := int(in.IDs[t]), op.posRow(in, t)
	gi := op.segRow(in, t)
	if w.DType == ops.F16 && s.shiftTree != nil {
		// x0, the first pass, its tree and the shift in one kernel (embedShiftTreeGo).
		word, pos := w.Word.U16[wi*H:wi*H+H], w.Pos.U16[pi*H:pi*H+H]
		bits := sumBits(&c.out, t*H, H, sc)
		if gi >= 0 {
			return s.shiftTreeSeg(part, tr, bits, word, pos, w.Seg.U16[gi*H:gi*H+H], p.InvH)
		}
		return s.shiftTree(part, tr, bits, word, pos, p.InvH)
	}
	if s.shiftTree32 != nil {
		// The same for f32 (embedShiftTree32Go).
		word, pos := w.Word.F32[wi*H:wi*H+H], w.Pos.F32[pi*H:pi*H+H]
		if gi >= 0 {
			return s.shiftTree32Seg(part, tr, word, pos, w.Seg.F32[gi*H:gi*H+H], p.InvH)
		}
		return s.shiftTree32(part, tr, word, pos, p.InvH)
	}
	x0 := c.firstPass(t, wi, pi, gi, tr, part, sc)
	m1 := float32(op.k.planTree(p, part) * p.InvH) // as rowStatsOfSum
	return x0 + m1
}

// shortAffine is a fast call's affine step of token t from its e = f32(x − shift) in tr.
func (c *embedCall) shortAffine(t int, tr []float32, st plan.Stats) {
	op, out, s := c.op, &c.out, &c.short
	w := &op.w
	H := w.H
	row := t * H
	switch {
	case s.af32 != nil:
		s.af32(out.Out.F32[row:row+H], tr, w.Gamma.F32, w.Beta.F32, st.MeanD, st.Rstd)
	case s.affH != nil:
		s.affH(out.Out.U16[row:row+H], tr, op.w16.gammaH, op.w16.betaH, st.MeanD, st.Rstd)
	default:
		s.aff(out.Out.U16[row:row+H], tr, op.w16.gamma, op.w16.beta, st.MeanD, st.Rstd)
	}
}

// firstPass is shortToken's first pass where no kernel takes it with its tree: token t's
// row staged into tr and the partial sums of f32(tr − x0) into part; it returns x0.
func (c *embedCall) firstPass(t, wi, pi, gi int, tr, part []float32, sc *scratch) (x0 float32) {
	op, out, s := c.op, &c.out, &c.short
	w := &op.w
	H := w.H
	row := t * H
	if w.DType == ops.F16 {
		word, pos := w.Word.U16[wi*H:wi*H+H], w.Pos.U16[pi*H:pi*H+H]
		bits := sumBits(out, row, H, sc)
		if gi >= 0 {
			g := w.Seg.U16[gi*H : gi*H+H]
			x0 = embedFirst(true, word[0], pos[0], g[0])
			s.shiftSeg(part, tr, bits, word, pos, g, x0)
		} else {
			x0 = embedFirst(false, word[0], pos[0], 0)
			s.shift(part, tr, bits, word, pos, x0)
		}
	} else {
		word, pos := w.Word.F32[wi*H:wi*H+H], w.Pos.F32[pi*H:pi*H+H]
		var g, xs []float32
		x0 = word[0] + pos[0] // as token
		if gi >= 0 {
			g = w.Seg.F32[gi*H : gi*H+H]
			x0 += g[0]
		}
		if out.Sum.Present() {
			xs = out.Sum.F32[row : row+H]
		}
		op.k.adds.run(addForm{dt: ops.F32, bias: gi >= 0, x: xs != nil}, part, tr, xs, word, pos, g, x0)
	}
	return x0
}

var embedCalls = sync.Pool{New: func() any { return new(embedCall) }}

func (c *embedCall) reset() {
	c.op, c.in, c.out, c.short = nil, ops.EmbedInputs{}, ops.EmbedOutputs{}, embedShort{}
}

// rows computes tokens [lo, hi).
func (c *embedCall) rows(lo, hi int, sc *scratch) {
	op, in, out := c.op, &c.in, &c.out
	for t := lo; c.prefetch && t < min(lo+2*c.ahead, hi); t++ {
		op.prefetchWord(in, t)
	}
	if c.lead > 0 && lo < hi {
		c.leadRow(lo)
	}
	// Short tokens whose word rows are prefetched whole, or not at all, go two at a time
	// (shortPair), each pair's rows a pair ahead.
	pairs := c.fast && (c.wholeRow || !c.prefetch)
	for t := lo; pairs && t+1 < hi; t += 2 {
		for a := t + 2*c.ahead; c.prefetch && a < min(t+2*c.ahead+2, hi); a++ {
			op.prefetchWord(in, a)
		}
		c.shortPair(t, sc)
		lo = t + 2
	}
	for t := lo; t < hi; t++ {
		var next *rowPrefetch
		var pf rowPrefetch
		if c.prefetch && t+c.ahead < hi {
			if c.wholeRow {
				op.prefetchWord(in, t+c.ahead)
			} else {
				pf = op.wordRow(in, t+c.ahead, c.piece)
				next = &pf
			}
		}
		if c.lead > 0 && t+1 < hi {
			c.leadRow(t + 1)
		}
		if c.fast {
			c.shortToken(t, sc, next)
		} else {
			if c.lines {
				op.k.tailLines((t+1)*op.w.H-1, &out.Out, &out.Sum)
			}
			op.token(t, in, out, sc, c.nt, c.inOrder, next)
		}
		next.rest()
	}
	if c.nt {
		op.k.fence()
	}
}

// leadRow prefetches the first c.lead bytes of the word and position rows of token t
// (tuning.rowLead).
func (c *embedCall) leadRow(t int) {
	op, in := c.op, &c.in
	H := op.w.H
	if wi := int(in.IDs[t]); wi >= 0 && wi < op.w.V {
		op.k.prefetchLead(&op.w.Word, wi*H, c.lead)
	}
	op.k.prefetchLead(&op.w.Pos, op.posRow(in, t)*H, c.lead)
}

// prefetchWord prefetches the whole word row of token t (none for an id out of range).
func (op *embedOp) prefetchWord(in *ops.EmbedInputs, t int) {
	w := &op.w
	if wi := int(in.IDs[t]); wi >= 0 && wi < w.V {
		op.k.prefetch(bufBytes(&w.Word, wi*w.H, w.H))
	}
}

// wordRow returns the prefetch of the word row of token t (empty for an id out of range:
// token reports those).
func (op *embedOp) wordRow(in *ops.EmbedInputs, t, piece int) rowPrefetch {
	w := &op.w
	H := w.H
	pf := newRowPrefetch(op.k, piece)
	if wi := int(in.IDs[t]); wi >= 0 && wi < w.V {
		pf.add(w.Word, wi*H, H)
	}
	return pf
}

// token computes one output row; nt stores the f32 outputs non-temporally (the caller
// fences); inOrder reads the word row in address order (float32: addForm.stream; 16-bit:
// each piece prefetched just before it is summed); pf takes a step after each pass over
// the row.
func (op *embedOp) token(t int, in *ops.EmbedInputs, out *ops.EmbedOutputs, sc *scratch, nt, inOrder bool, pf *rowPrefetch) {
	w := &op.w
	H := w.H
	wi := int(in.IDs[t])
	pi := op.posRow(in, t)
	gi := op.segRow(in, t)
	tr := sc.x[:H] // the staged row, which the second pass turns into e = x − shift
	row := t * H
	switch w.DType {
	case ops.F32:
		var g []float32
		if gi >= 0 {
			g = w.Seg.F32[gi*H : gi*H+H]
		}
		// The sum into tr and the partial sums of f32(sum − x0) in one pass, the sum also into
		// embedding_sum when wanted (streamed out when nt).
		var xs []float32
		if out.Sum.Present() {
			xs = out.Sum.F32[row : row+H]
		}
		part := sc.part[:op.plan.W]
		word, pos := w.Word.F32[wi*H:wi*H+H], w.Pos.F32[pi*H:pi*H+H]
		x0 := word[0] + pos[0] // the plan's first shift: x[0], as the sum computes it
		if g != nil {
			x0 += g[0]
		}
		sum := op.k.addSumTree(addForm{dt: ops.F32, bias: gi >= 0, x: xs != nil, nt: nt, stream: inOrder}, &op.plan, part, tr, xs, word, pos, g, x0)
		pf.step()
		st := rowStatsOfSum(op.k, &op.plan, tr, part, x0, sum, w.Epsilon, pf)
		normalize(op.k, &op.plan, out.Out.F32[row:row+H], tr, w.Gamma.F32, w.Beta.F32, st, nt)
		pf.step()
	case ops.F16:
		var g []uint16
		if gi >= 0 {
			g = w.Seg.U16[gi*H : gi*H+H]
		}
		bits := sumBits(out, row, H, sc)
		word, pos := w.Word.U16[wi*H:wi*H+H], w.Pos.U16[pi*H:pi*H+H]
		// The staged sum into tr and the partial sums of f32(sum − x0) in one pass, a piece at a time
		// (16-bit inputs: the piece of t stays in L1 while the next is computed).
		part := sc.part[:op.plan.W]
		n := op.piece
		var g0 uint16
		if g != nil {
			g0 = g[0]
		}
		x0 := embedFirst(g != nil, word[0], pos[0], g0) // the plan's first shift: x[0]
		for lo := 0; lo < H; lo += n {
			hi := min(lo+n, H)
			var gp []uint16
			if g != nil {
				gp = g[lo:hi]
			}
			op.k.embedShift(embedForm{seg: gi >= 0, prefetch: inOrder, acc: lo > 0}, part, tr[lo:hi], bits[lo:hi], word[lo:hi], pos[lo:hi], gp, x0)
		}
		pf.step()
		st := rowStatsSummed(op.k, &op.plan, tr, part, x0, w.Epsilon, pf)
		normalize16(op.k, &op.plan, out.Out, row, tr, op.w16, st, nt)
		pf.step()
	}
}

// segRow is the segment row of token t (validated: in range), -1 without segments.
func (op *embedOp) segRow(in *ops.EmbedInputs, t int) int {
	switch {
	case op.w.G == 0:
		return -1
	case in.SegIDs == nil:
		return 0
	}
	return int(in.SegIDs[t])
}

// posRow is the position row of token t (validated: in range).
func (op *embedOp) posRow(in *ops.EmbedInputs, t int) int {
	s := t % in.S
	if in.PosIDs == nil {
		return s
	}
	if in.PosBatch == 1 {
		return int(in.PosIDs[s])
	}
	return int(in.PosIDs[t])
}

// sumBits is where the f16 sum of a row goes: the embedding_sum output when wanted, else
// scratch (the kernel writes the bits either way).
func sumBits(out *ops.EmbedOutputs, row, h int, sc *scratch) []uint16 {
	if out.Sum.Present() {
		return out.Sum.U16[row : row+h]
	}
	if cap(sc.bits) < h {
		sc.bits = make([]uint16, h)
	}
	return sc.bits[:h]
}
