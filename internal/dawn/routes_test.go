//go:build cgo

package dawn

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/fusednorm/fusednorm/internal/half"
	"github.com/fusednorm/fusednorm/internal/plan"
	"github.com/fusednorm/fusednorm/shaders"
)

// TestRstdRoutes checks both routes of the kernels' exact rstd against the CPU's: the one the
// kernels take (the device's sqrt and division, corrected by exact integer checks) and the
// digit-by-digit one it falls back to, which no device here needs.
func TestRstdRoutes(t *testing.T) {
	b := backend(t)
	var in []uint32
	for e := -149; e <= 127; e++ { // powers of two and their neighbours, subnormals included
		p := math.Float32bits(float32(math.Ldexp(1, e)))
		in = append(in, p, p-1, p+1, p+2)
	}
	r := rand.New(rand.NewPCG(11, 3))
	for len(in) < 1<<20 {
		switch len(in) % 4 {
		case 0: // any positive finite
			in = append(in, 1+r.Uint32N(0x7f7fffff))
		case 1: // variance-like
			in = append(in, math.Float32bits(float32(r.ExpFloat64())*1e-3+1e-12))
		case 2:
			in = append(in, math.Float32bits(float32(r.Float64()*4)+1e-5))
		default: // subnormal
			in = append(in, 1+r.Uint32N(0x007fffff))
		}
	}
	for _, mode := range []uint32{shaders.ProbeRstd, shaders.ProbeRstdDigit} {
		got, err := b.runProbe(context.Background(), false, mode, in)
		if err != nil {
			t.Fatal(err)
		}
		bad := 0
		for i, v := range in {
			if want := math.Float32bits(plan.Rstd(math.Float32frombits(v))); got[i] != want {
				if bad < 5 {
					t.Errorf("mode %d: rstd(%#08x) = %#08x, want %#08x", mode, v, got[i], want)
				}
				bad++
			}
		}
		if bad > 0 {
			t.Errorf("mode %d: %d of %d values off", mode, bad, len(in))
		}
	}
}

// TestRound16Routes checks round16 in both forms against the CPU's rnd16 on every binary16,
// the rounding boundaries around each, overflow and random float32: the integer form, and the
// Fast16 form (the builtins' round trip outside the normal range) where calibration chose it.
func TestRound16Routes(t *testing.T) {
	b := backend(t)
	var in []uint32
	add := func(f float32) { in = append(in, math.Float32bits(f), math.Float32bits(-f)) }
	for h := uint16(0); h < 0x7c00; h++ {
		f, next := half.F16ToF32(h), half.F16ToF32(h+1)
		mid := f + (next-f)/2
		add(f)
		add(math.Nextafter32(mid, 0))
		add(mid)
		add(math.Nextafter32(mid, next))
	}
	for _, f := range []float32{65520, 1e10, math.MaxFloat32, float32(math.Inf(1)), 0x1p-126, 0x1p-149} {
		add(f)
	}
	r := rand.New(rand.NewPCG(5, 9))
	for range 1 << 18 {
		if v := r.Uint32(); v&0x7fffffff <= 0x7f800000 {
			in = append(in, v)
		}
	}
	for _, fast := range []bool{false, b.fast16} {
		got, err := b.runProbe(context.Background(), fast, shaders.ProbeRound16, in)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range in {
			f := math.Float32frombits(v)
			if want := math.Float32bits(half.F16ToF32(half.F32ToF16(f))); got[i] != want {
				t.Fatalf("fast16=%v: round16(%g = %#08x) = %#08x, want %#08x", fast, f, v, got[i], want)
			}
		}
	}
}
