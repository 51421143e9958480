package half

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/x448/float16"
)

// TestF16 checks the widening, by its fields and by the table, against the float16 package
// for every pattern, and the rounding against it on random patterns and the midpoints
// between neighbours.
func TestF16(t *testing.T) {
	tab := F16Table()
	for h := range 1 << 16 {
		want := math.Float32bits(float16.Frombits(uint16(h)).Float32())
		if got := math.Float32bits(F16ToF32(uint16(h))); got != want {
			t.Fatalf("F16ToF32(%#04x) = %#08x, want %#08x", h, got, want)
		}
		if got := math.Float32bits(tab[h]); got != want {
			t.Fatalf("F16Table()[%#04x] = %#08x, want %#08x", h, got, want)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 1 << 16 {
		f := math.Float32frombits(r.Uint32())
		if got, want := F32ToF16(f), float16.Fromfloat32(f).Bits(); got != want {
			t.Fatalf("F32ToF16(%#08x) = %#04x, want %#04x", math.Float32bits(f), got, want)
		}
	}
}

// TestF32ToBF16 checks the bfloat16 rounding against its definition in float64: the nearer
// of the two bfloat16 neighbours of f, the one with an even mantissa on a tie, ±Inf past the
// largest finite value's midpoint, and a quiet NaN for a NaN.
func TestF32ToBF16(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	check := func(u uint32) {
		f := math.Float32frombits(u)
		got := F32ToBF16(f)
		if f != f {
			if w := BF16ToF32(got); w == w || got&0x40 == 0 {
				t.Fatalf("F32ToBF16(NaN %#08x) = %#04x, want a quiet NaN", u, got)
			}
			return
		}
		lo := uint16(u >> 16) // f truncated: the neighbour towards zero
		hi := lo + 1
		dlo := math.Abs(float64(f) - float64(BF16ToF32(lo)))
		dhi := math.Abs(float64(BF16ToF32(hi)) - float64(f)) // lo+1 past the largest finite value is ±Inf: the overflow
		want := lo
		if u&0xffff != 0 && (dhi < dlo || dhi == dlo && lo&1 == 1 || math.IsInf(float64(BF16ToF32(hi)), 0) && u&0xffff >= 0x8000 && lo&1 == 1) {
			want = hi
		}
		if got != want {
			t.Fatalf("F32ToBF16(%g = %#08x) = %#04x, want %#04x", f, u, got, want)
		}
	}
	for range 1 << 18 {
		u := r.Uint32()
		check(u)
		check(u&0xffff0000 | 0x8000) // the midpoint
		check(u&0xffff0000 | 0x7fff)
		check(u&0xffff0000 | 0x8001)
	}
	for _, u := range []uint32{0, 0x80000000, 0x7f800000, 0xff800000, 0x7f7fffff, 0x7f7f8000, 0x7f7f7fff, 0x00000001, 0x7fc00000, 0x7f800001} {
		check(u)
	}
}
