package cpu

import (
	"github.com/fusednorm/fusednorm/internal/half"
	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/plan"
)

// The affine step on the plan's deviations, from t = e = f32(x − shift) (the second pass
// leaves it in the row's scratch): n = f32((t − meanD)·rstd), meanD the plan's m2, then
// y = f32(n·gamma) + beta, or fma(n, gamma, beta), stored as float32 or rounded to 16 bits.

// affineForm is the form of an affine step.
type affineForm struct {
	dt  ops.DType // y's format: F32, or the 16-bit format it is rounded to in the store
	fma bool      // fma(n, gamma, beta) (the profile's FuseAffine), else f32(n·gamma) + beta
	nt  bool      // non-temporal stores from y's first aligned address on (the caller fences): the same values
}

type (
	affineFn   func(y, t, gamma, beta []float32, meanD, rstd float32)
	affine16Fn func(y []uint16, t, gamma, beta []float32, meanD, rstd float32)
	affineHFn  func(y []uint16, t []float32, gamma, beta []uint16, meanD, rstd float32) // gamma and beta in y's format, widened as loaded
)

// affineStores are one output and weight format's affine kernels, for whole vectors of y;
// the NT ones need y aligned to the vector.
type affineStores[F any] struct{ plain, fma, plainNT, fmaNT F }

func (s *affineStores[F]) of(f affineForm) F {
	switch {
	case f.fma && f.nt:
		return s.fmaNT
	case f.fma:
		return s.fma
	case f.nt:
		return s.plainNT
	}
	return s.plain
}

// affineKernels are a width's affine kernels: y float32, or binary16 or bfloat16 with
// float32 weights, or with weights in y's format (H).
type affineKernels struct {
	f32         affineStores[affineFn]
	f16, bf16   affineStores[affine16Fn]
	f16H, bf16H affineStores[affineHFn]
}

// affineGo is the twin of the float32 affine step.
func affineGo(f affineForm, y, t, gamma, beta []float32, meanD, rstd float32) {
	t = t[:len(y)]
	gamma = gamma[:len(y)]
	beta = beta[:len(y)]
	for i, v := range t {
		n := float32((v - meanD) * rstd)
		if f.fma {
			y[i] = plan.FMA32(n, gamma[i], beta[i])
		} else {
			y[i] = float32(n*gamma[i]) + beta[i]
		}
	}
}

// affine16Go is the twin of the affine steps that round y to 16 bits: the float32 affine
// value, narrowed.
func affine16Go(f affineForm, y []uint16, t, gamma, beta []float32, meanD, rstd float32) {
	t, gamma, beta = t[:len(y)], gamma[:len(y)], beta[:len(y)]
	for i, v := range t {
		y[i] = affine16Value(f, v, gamma[i], beta[i], meanD, rstd)
	}
}

// affineHGo is affine16Go with gamma and beta in y's 16-bit format: bfloat16 widened by a
// shift, binary16 by the table (half.F16Table, fetched once, not per value).
func affineHGo(f affineForm, y []uint16, t []float32, gamma, beta []uint16, meanD, rstd float32) {
	t, gamma, beta = t[:len(y)], gamma[:len(y)], beta[:len(y)]
	if f.dt == ops.BF16 {
		for i, v := range t {
			y[i] = affine16Value(f, v, half.BF16ToF32(gamma[i]), half.BF16ToF32(beta[i]), meanD, rstd)
		}
		return
	}
	tab := half.F16Table()
	for i, v := range t {
		y[i] = affine16Value(f, v, tab[gamma[i]], tab[beta[i]], meanD, rstd)
	}
}

// affine16Value is one element of the 16-bit twins: the float32 affine value of v, rounded
// to y's format.
func affine16Value(f affineForm, v, gamma, beta, meanD, rstd float32) uint16 {
	n := float32((v - meanD) * rstd)
	var r float32
	if f.fma {
		r = plan.FMA32(n, gamma, beta)
	} else {
		r = float32(n*gamma) + beta
	}
	if f.dt == ops.BF16 {
		return half.F32ToBF16(r)
	}
	return half.F32ToF16(r)
}

// affine is the float32 affine step.
func (k *kernels) affine(f affineForm, y, t, gamma, beta []float32, meanD, rstd float32) {
	affineRows(k, f, y, t, gamma, beta, meanD, rstd, (*kernels).ntHead, affine32Of, affineGo)
}

// affine16 is the affine step rounded to y's 16-bit format, with float32 gamma and beta.
func (k *kernels) affine16(f affineForm, y []uint16, t, gamma, beta []float32, meanD, rstd float32) {
	affineRows(k, f, y, t, gamma, beta, meanD, rstd, (*kernels).nt16Head, affine16Of, affine16Go)
}

// affineH is affine16 with gamma and beta in y's 16-bit format.
func (k *kernels) affineH(f affineForm, y []uint16, t []float32, gamma, beta []uint16, meanD, rstd float32) {
	affineRows(k, f, y, t, gamma, beta, meanD, rstd, (*kernels).nt16Head, affineHOf, affineHGo)
}

func affine32Of(t *affineKernels, _ affineForm) *affineStores[affineFn] { return &t.f32 }

func affine16Of(t *affineKernels, f affineForm) *affineStores[affine16Fn] {
	if f.dt == ops.BF16 {
		return &t.bf16
	}
	return &t.f16
}

func affineHOf(t *affineKernels, f affineForm) *affineStores[affineHFn] {
	if f.dt == ops.BF16 {
		return &t.bf16H
	}
	return &t.f16H
}

// affineRows is the three: the width's kernel (stores picks the format's) over the whole
// vectors, from the first aligned element on with f.nt (head counts the elements before
// it), what is left narrower, the go level the twin.
func affineRows[Y, G float32 | uint16, K ~func([]Y, []float32, []G, []G, float32, float32)](
	k *kernels, f affineForm, y []Y, t []float32, gamma, beta []G, meanD, rstd float32,
	head func(*kernels, []Y) int, stores func(*affineKernels, affineForm) *affineStores[K],
	twin func(affineForm, []Y, []float32, []G, []G, float32, float32)) {
	t, gamma, beta = t[:len(y)], gamma[:len(y)], beta[:len(y)]
	if !k.simd() {
		twin(f, y, t, gamma, beta, meanD, rstd)
		return
	}
	plain := f
	plain.nt = false
	// A float32 y keeps the whole vectors here and its ends narrower: its vector is a line,
	// so nt's head is lineSplit's, and its ends through the masked tail ran slower
	// (EmbedLayerNorm f32 H 1023, one thread, 0.86x the GB/s).
	tails := k.tails && f.dt != ops.F32
	if f.nt && tails {
		// Whole cache lines non-temporally, the partial lines at the ends (shared with the
		// rows beside) through the cache: see lineSplit.
		h, n := lineSplit(y)
		run := stores(&k.affines, plain).of(plain)
		if h > 0 {
			run(y[:h], t, gamma, beta, meanD, rstd)
		}
		if n > 0 {
			stores(&k.affines, f).of(f)(y[h:h+n], t[h:], gamma[h:], beta[h:], meanD, rstd)
		}
		if h+n < len(y) {
			run(y[h+n:], t[h+n:], gamma[h+n:], beta[h+n:], meanD, rstd)
		}
		return
	}
	if f.nt {
		if h := head(k, y); h > 0 {
			affineRows(k, plain, y[:h], t[:h], gamma[:h], beta[:h], meanD, rstd, head, stores, twin)
			y, t, gamma, beta = y[h:], t[h:], gamma[h:], beta[h:]
		}
	}
	n := k.whole(len(y))
	if tails {
		n = len(y)
	}
	if n > 0 {
		stores(&k.affines, f).of(f)(y[:n], t, gamma, beta, meanD, rstd)
	}
	if n < len(y) {
		affineRows(k.narrower, plain, y[n:], t[n:], gamma[n:], beta[n:], meanD, rstd, head, stores, twin)
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
func widened(k *kernels, buf []float32, gamma, beta ops.Buf) weights16 {
	n := gamma.Len()
	g, b := buf[:n], buf[n:2*n]
	f := convForm{dt: gamma.DType}
	k.widen(f, g, gamma.U16)
	k.widen(f, b, beta.U16)
	return weights16{gamma: g, beta: b}
}

// normalize writes the affine step of the row's deviations t (e, the second pass's) under the plan's profile; nt
// stores y non-temporally (the caller fences).
func normalize(k *kernels, p *plan.Plan, y, t, gamma, beta []float32, st plan.Stats, nt bool) {
	k.affine(affineForm{dt: ops.F32, fma: p.Profile.FuseAffine, nt: nt}, y, t, gamma, beta, st.MeanD, st.Rstd)
}

// normalize16 writes the affine step of the row's deviations t into elements [off, off+len(t))
// of a 16-bit y, rounding in the kernel's store.
func normalize16(k *kernels, p *plan.Plan, y ops.Buf, off int, t []float32, w weights16, st plan.Stats, nt bool) {
	f := affineForm{dt: y.DType, fma: p.Profile.FuseAffine, nt: nt}
	if w.gammaH != nil {
		k.affineH(f, y.U16[off:off+len(t)], t, w.gammaH, w.betaH, st.MeanD, st.Rstd)
		return
	}
	k.affine16(f, y.U16[off:off+len(t)], t, w.gamma, w.beta, st.MeanD, st.Rstd)
}
