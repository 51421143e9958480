package cpu

import (
	"github.com/fusednorm/fusednorm/internal/half"
	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/plan"
)

// The twins of the plan's passes (internal/plan, plan v2): the sum of x − x0, the squared
// deviations d = (x − x0) − meanD, and the affine step on the same d.

func accumulateGo(part, x []float32, x0 float32) {
	w := len(part)
	for base := 0; base < len(x); base += w {
		c := x[base:min(base+w, len(x))]
		p := part[:len(c)]
		for k, v := range c {
			p[k] += v - x0
		}
	}
}

func accumulateSqDevGo(part, x []float32, x0, meanD float32) {
	w := len(part)
	for base := 0; base < len(x); base += w {
		c := x[base:min(base+w, len(x))]
		p := part[:len(c)]
		for k, v := range c {
			d := (v - x0) - meanD
			p[k] += float32(d * d)
		}
	}
}

func accumulateSqDevFMAGo(part, x []float32, x0, meanD float32) {
	w := len(part)
	for base := 0; base < len(x); base += w {
		c := x[base:min(base+w, len(x))]
		p := part[:len(c)]
		for k, v := range c {
			d := (v - x0) - meanD
			p[k] = plan.FMA32(d, d, p[k])
		}
	}
}

func affineGo(y, x, gamma, beta []float32, x0, meanD, rstd float32) {
	x = x[:len(y)]
	gamma = gamma[:len(y)]
	beta = beta[:len(y)]
	for i, v := range x {
		n := float32(((v - x0) - meanD) * rstd)
		y[i] = float32(n*gamma[i]) + beta[i]
	}
}

func affineFMAGo(y, x, gamma, beta []float32, x0, meanD, rstd float32) {
	x = x[:len(y)]
	gamma = gamma[:len(y)]
	beta = beta[:len(y)]
	for i, v := range x {
		n := float32(((v - x0) - meanD) * rstd)
		y[i] = plan.FMA32(n, gamma[i], beta[i])
	}
}

// affine16Go is the twin of the affine steps that round y to 16 bits: the float32 affine
// value, narrowed.
func affine16Go(f form16, y []uint16, x, gamma, beta []float32, x0, meanD, rstd float32) {
	affine16Twin(f, y, x, gamma, beta, x0, meanD, rstd, func(v float32) float32 { return v })
}

// affine16HGo is affine16Go with gamma and beta in y's 16-bit format.
func affine16HGo(f form16, y []uint16, x []float32, gamma, beta []uint16, x0, meanD, rstd float32) {
	widen := half.F16ToF32
	if f.bf {
		widen = half.BF16ToF32
	}
	affine16Twin(f, y, x, gamma, beta, x0, meanD, rstd, widen)
}

func affine16Twin[G float32 | uint16](f form16, y []uint16, x []float32, gamma, beta []G, x0, meanD, rstd float32, widen func(G) float32) {
	x = x[:len(y)]
	gamma = gamma[:len(y)]
	beta = beta[:len(y)]
	for i, v := range x {
		n := float32(((v - x0) - meanD) * rstd)
		var r float32
		if f.fused {
			r = plan.FMA32(n, widen(gamma[i]), widen(beta[i]))
		} else {
			r = float32(n*widen(gamma[i])) + widen(beta[i])
		}
		if f.bf {
			y[i] = half.F32ToBF16(r)
		} else {
			y[i] = half.F32ToF16(r)
		}
	}
}

// sumZeroGo, sqDevZeroGo and sqDevFMAZeroGo clear the partials, then accumulate.
func sumZeroGo(part, x []float32, x0 float32) {
	clear(part)
	accumulateGo(part, x, x0)
}

func sqDevZeroGo(part, x []float32, x0, meanD float32) {
	clear(part)
	accumulateSqDevGo(part, x, x0, meanD)
}

func sqDevFMAZeroGo(part, x []float32, x0, meanD float32) {
	clear(part)
	accumulateSqDevFMAGo(part, x, x0, meanD)
}

// addSumGo is the twin of addSum: s = a + b, or (a + b) + c when c is not nil; x = s when
// x is not nil (the SIMD kernels store x non-temporally: the caller fences); then part =
// the plan's partial sums of s − x0, from zero (len(part) = W).
func addSumGo(part, s, x, a, b, c []float32, x0 float32) {
	if c == nil {
		add2Go(s, a, b)
	} else {
		add3Go(s, a, b, c)
	}
	if x != nil {
		copy(x[:len(s)], s)
	}
	sumZeroGo(part, s, x0)
}

// addSumAccGo is the twin of addSumAcc: s = a + b, or (a + b) + c, then the partial sums
// of s − x0 added onto part (a later piece of a row summed a piece at a time).
func addSumAccGo(part, s, a, b, c []float32, x0 float32) {
	if c == nil {
		add2Go(s, a, b)
	} else {
		add3Go(s, a, b, c)
	}
	accumulateGo(part, s, x0)
}

// addSum16Go is the twin of addSum16: the inputs widened, summed as addSumGo/addSumAccGo
// sum them, then x (if any) narrowed from s.
func addSum16Go(f sum16, part, s []float32, x, a, b, c []uint16, x0 float32) {
	widen := half.F16ToF32
	if f.bf {
		widen = half.BF16ToF32
	}
	a, b = a[:len(s)], b[:len(s)]
	if !f.acc {
		clear(part)
	}
	for i := range s {
		v := widen(a[i]) + widen(b[i])
		if c != nil {
			v += widen(c[i])
		}
		s[i] = v
	}
	accumulateGo(part, s, x0)
	if x != nil {
		narrow16Go(f.bf, x[:len(s)], s)
	}
}

// rowStats returns the statistics of x under plan p; part is scratch of p.W elements. pf
// (nil for none) takes a step after each pass over x.
func rowStats(k *kernelSet, p *plan.Plan, x, part []float32, eps float32, pf *rowPrefetch) plan.Stats {
	part = part[:p.W]
	k.sumZero(part, x, x[0])
	pf.step()
	return rowStatsSummed(k, p, x, part, x[0], eps, pf)
}

// rowStatsSummed is rowStats after the first accumulation: part[:p.W] holds the partial
// sums of x − x0 (from addSum), x0 = x[0].
func rowStatsSummed(k *kernelSet, p *plan.Plan, x, part []float32, x0, eps float32, pf *rowPrefetch) plan.Stats {
	part = part[:p.W]
	meanD := k.tree(part) * p.InvH
	if p.Profile.FuseVariance {
		k.sqDevFMAZero(part, x, x0, meanD)
	} else {
		k.sqDevZero(part, x, x0, meanD)
	}
	pf.step()
	variance := k.tree(part) * p.InvH
	return plan.Stats{X0: x0, MeanD: meanD, Rstd: plan.Rstd(variance + eps)}
}

// normalize writes the affine step under the plan's profile; nt stores y non-temporally
// (the caller fences).
func normalize(k *kernelSet, p *plan.Plan, y, x, gamma, beta []float32, st plan.Stats, nt bool) {
	switch {
	case nt && p.Profile.FuseAffine:
		k.affineFMANT(y, x, gamma, beta, st.X0, st.MeanD, st.Rstd)
	case nt:
		k.affineNT(y, x, gamma, beta, st.X0, st.MeanD, st.Rstd)
	case p.Profile.FuseAffine:
		k.affineFMA(y, x, gamma, beta, st.X0, st.MeanD, st.Rstd)
	default:
		k.affine(y, x, gamma, beta, st.X0, st.MeanD, st.Rstd)
	}
}

// weights16 are gamma and beta of a 16-bit affine step: float32 (as the caller gave them,
// or widened), or in y's 16-bit format (gammaH and betaH: read as they are, widened in the
// kernel's loads).
type weights16 struct {
	gamma, beta   []float32
	gammaH, betaH []uint16
}

// weightsOf is gamma and beta as weights16 (either float32, or of the format of a 16-bit y).
func weightsOf(gamma, beta ops.Buf) weights16 {
	if gamma.DType == ops.F32 {
		return weights16{gamma: gamma.F32, beta: beta.F32}
	}
	return weights16{gammaH: gamma.U16, betaH: beta.U16}
}

// widened is 16-bit gamma and beta widened into buf (twice their length): exact, so the
// affine step gives the same bits from either form.
func widened(k *kernelSet, buf []float32, gamma, beta ops.Buf) weights16 {
	n := gamma.Len()
	g, b := buf[:n], buf[n:2*n]
	widen := k.widenF16
	if gamma.DType == ops.BF16 {
		widen = k.widenBF16
	}
	widen(g, gamma.U16)
	widen(b, beta.U16)
	return weights16{gamma: g, beta: b}
}

// normalize16 writes the affine step into elements [off, off+len(x)) of a 16-bit y,
// rounding in the kernel's store.
func normalize16(k *kernelSet, p *plan.Plan, y ops.Buf, off int, x []float32, w weights16, st plan.Stats, nt bool) {
	f := form16{bf: y.DType == ops.BF16, fused: p.Profile.FuseAffine, nt: nt}
	if w.gammaH != nil {
		k.affine16H(f, y.U16[off:off+len(x)], x, w.gammaH, w.betaH, st.X0, st.MeanD, st.Rstd)
		return
	}
	k.affine16(f, y.U16[off:off+len(x)], x, w.gamma, w.beta, st.X0, st.MeanD, st.Rstd)
}

// roundUp is n rounded up to a multiple of w.
func roundUp(n, w int) int { return (n + w - 1) / w * w }
