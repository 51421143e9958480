package cpu

import (
	"math"

	"github.com/fusednorm/fusednorm/internal/half"
	"github.com/fusednorm/fusednorm/internal/ops"
)

// Conversions between float32 and the 16-bit formats: widening is exact, narrowing rounds
// as internal/half does (binary16 nearest-even; bfloat16 as F32ToBF16).

// convForm is the form of a conversion.
type convForm struct {
	dt ops.DType // the 16-bit format: F16 or BF16
	nt bool      // narrowing with non-temporal stores from dst's first aligned address on (the caller fences)
}

type (
	widenFn  func(dst []float32, src []uint16)
	narrowFn func(dst []uint16, src []float32)
)

// convFormat is one 16-bit format's conversion kernels, for whole vectors of dst; narrowNT
// needs dst aligned to a vector of 16-bit values.
type convFormat struct {
	widen            widenFn
	narrow, narrowNT narrowFn
}

// convKernels are a width's conversion kernels.
type convKernels struct{ f16, bf16 convFormat }

func (t *convKernels) of(f convForm) *convFormat {
	if f.dt == ops.BF16 {
		return &t.bf16
	}
	return &t.f16
}

func widenF16Go(dst []float32, src []uint16) {
	t := half.F16Table()
	src = src[:len(dst)]
	for i, h := range src {
		dst[i] = t[h]
	}
}

func widenBF16Go(dst []float32, src []uint16) {
	src = src[:len(dst)]
	for i, b := range src {
		dst[i] = math.Float32frombits(uint32(b) << 16)
	}
}

func narrowF16Go(dst []uint16, src []float32) {
	src = src[:len(dst)]
	for i, f := range src {
		dst[i] = half.F32ToF16(f)
	}
}

func narrowBF16Go(dst []uint16, src []float32) {
	src = src[:len(dst)]
	for i, f := range src {
		dst[i] = half.F32ToBF16(f)
	}
}

// widenGo is the twin of widen.
func widenGo(f convForm, dst []float32, src []uint16) {
	if f.dt == ops.BF16 {
		widenBF16Go(dst, src)
		return
	}
	widenF16Go(dst, src)
}

// narrowGo is the twin of narrow.
func narrowGo(f convForm, dst []uint16, src []float32) {
	if f.dt == ops.BF16 {
		narrowBF16Go(dst, src)
		return
	}
	narrowF16Go(dst, src)
}

// widen converts src to float32: the width's kernel over the whole vectors of dst, the
// narrower width's over what is left, the twin over the last few.
func (k *kernels) widen(f convForm, dst []float32, src []uint16) {
	src = src[:len(dst)]
	if !k.simd() {
		widenGo(f, dst, src)
		return
	}
	n := k.reach(len(dst))
	if n > 0 {
		k.convs.of(f).widen(dst[:n], src)
	}
	if n < len(dst) {
		k.narrower.widen(f, dst[n:], src[n:])
	}
}

// narrow rounds src to the 16-bit format, as widen walks the row; with f.nt, the whole
// vectors from dst's first aligned address on are stored non-temporally.
func (k *kernels) narrow(f convForm, dst []uint16, src []float32) {
	src = src[:len(dst)]
	if !k.simd() {
		narrowGo(f, dst, src)
		return
	}
	if f.nt && k.tails { // as affineRows: whole lines non-temporally (lineSplit)
		h, n := lineSplit(dst)
		fm := k.convs.of(f)
		if h > 0 {
			fm.narrow(dst[:h], src)
		}
		if n > 0 {
			fm.narrowNT(dst[h:h+n], src[h:])
		}
		if h+n < len(dst) {
			fm.narrow(dst[h+n:], src[h+n:])
		}
		return
	}
	if f.nt {
		plain := f
		plain.nt = false
		h := k.nt16Head(dst)
		k.narrow(plain, dst[:h], src[:h])
		dst, src = dst[h:], src[h:]
		n := k.reach(len(dst))
		if n > 0 {
			k.convs.of(f).narrowNT(dst[:n], src)
		}
		k.narrow(plain, dst[n:], src[n:])
		return
	}
	n := k.reach(len(dst))
	if n > 0 {
		k.convs.of(f).narrow(dst[:n], src)
	}
	if n < len(dst) {
		k.narrower.narrow(f, dst[n:], src[n:])
	}
}

// rowF32 returns elements [off, off+n) of src as float32: the slice itself for f32 data,
// else widened into tmp.
func rowF32(k *kernels, src ops.Buf, off, n int, tmp []float32) []float32 {
	if src.DType == ops.F32 {
		return src.F32[off : off+n]
	}
	k.widen(convForm{dt: src.DType}, tmp[:n], src.U16[off:off+n])
	return tmp[:n]
}

// store writes float32 values into dst at off, rounding to dst's dtype.
func store(k *kernels, dst ops.Buf, off int, v []float32) {
	if dst.DType == ops.F32 {
		copy(dst.F32[off:off+len(v)], v)
		return
	}
	k.narrow(convForm{dt: dst.DType}, dst.U16[off:off+len(v)], v)
}
