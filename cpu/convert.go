package cpu

import (
	"math"
	"sync"

	"github.com/x448/float16"
)

// f16Table maps every binary16 pattern to its float32 value: a table lookup is the fastest
// exact widening in pure Go (the SIMD paths use F16C instead).
var f16Table = sync.OnceValue(func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = float16.Frombits(uint16(i)).Float32()
	}
	return &t
})

// F16ToF32 widens a binary16 pattern.
func F16ToF32(h uint16) float32 { return f16Table()[h] }

// F32ToF16 rounds to the nearest binary16, ties to even (overflow to ±Inf, NaN stays NaN).
func F32ToF16(f float32) uint16 { return float16.Fromfloat32(f).Bits() }

// Round16 is rnd16 of SPEC.md: f rounded to binary16 and widened back.
func Round16(f float32) float32 { return f16Table()[F32ToF16(f)] }

// BF16ToF32 widens a bfloat16 pattern.
func BF16ToF32(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

// F32ToBF16 rounds to the nearest bfloat16, ties to even; NaN stays a quiet NaN.
func F32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

func widenF16Go(dst []float32, src []uint16) {
	t := f16Table()
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
		dst[i] = float16.Fromfloat32(f).Bits()
	}
}

func narrowBF16Go(dst []uint16, src []float32) {
	src = src[:len(dst)]
	for i, f := range src {
		dst[i] = F32ToBF16(f)
	}
}

// narrow16Go is narrowBF16Go (bf) or narrowF16Go.
func narrow16Go(bf bool, dst []uint16, src []float32) {
	if bf {
		narrowBF16Go(dst, src)
		return
	}
	narrowF16Go(dst, src)
}
