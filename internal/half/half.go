// Package half converts between float32 and the two 16-bit formats of the ops, binary16
// and bfloat16, with the rounding docs/spec.md fixes: to nearest, ties to even. The CPU backend
// and the module's tests share it.
package half

import (
	"math"
	"sync"

	"github.com/x448/float16"
)

// f16Table maps every binary16 pattern to its float32 value: in a loop that widens many
// values, a table lookup is the fastest exact widening in pure Go (the SIMD kernels use
// F16C instead).
var f16Table = sync.OnceValue(func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = float16.Frombits(uint16(i)).Float32()
	}
	return &t
})

// F16Table maps every binary16 pattern to its float32 value, as F16ToF32 does, for loops
// that widen many values.
func F16Table() *[1 << 16]float32 { return f16Table() }

// F16ToF32 widens a binary16 pattern by its fields, without the table: one value widened
// now and then (a row's first element) would otherwise miss in the cache on a 256 KiB table.
// It is short enough to inline: the fields are moved into place and the exponent rebiased
// by 127 − 15, with two exceptions, infinities and NaNs (exponent all ones, NaNs quieted
// as F16C does, payload kept), and ±0 and subnormals (man·2^-24, exact in float32).
func F16ToF32(h uint16) float32 {
	o := uint32(h&0x7fff) << 13
	switch o & 0x0f800000 {
	case 0x0f800000:
		o += (255 - 31) << 23
		if o&0x7fffff != 0 {
			o |= 0x400000
		}
	case 0:
		o = math.Float32bits(math.Float32frombits(o+113<<23) - 0x1p-14)
	default:
		o += (127 - 15) << 23
	}
	return math.Float32frombits(o | uint32(h&0x8000)<<16)
}

// F32ToF16 rounds to the nearest binary16, ties to even (overflow to ±Inf, NaN stays NaN).
func F32ToF16(f float32) uint16 { return float16.Fromfloat32(f).Bits() }

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
