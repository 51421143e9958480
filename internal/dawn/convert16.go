//go:build cgo

package dawn

import (
	"context"
	"fmt"
	"math"

	"github.com/x448/float16"

	"github.com/fusednorm/fusednorm/internal/dawnrt"
	"github.com/fusednorm/fusednorm/shaders"
)

// The kernels' float16 conversions come in two forms (shaders.Embed.Fast16,
// shaders.AddLN.Fast16): integer routines that round nearest-even on any device, and the
// builtins pack2x16float / unpack2x16float alone, whose results WGSL leaves to the device
// (rounding, subnormals, overflow, Inf and NaN) but which cost a fraction of the integer work.
// When a device opens, calibrate16 runs the Fast16 helpers through the probe kernel on every
// binary16, on every rounding boundary between two of them and on overflowing, infinite and
// NaN float32, and the builtins are used only when every result is the one the CPU computes
// (a NaN for a NaN, whatever its payload): then the kernels' bits are the same either way.

// calibrate16 reports whether the device's builtin float16 conversions give the CPU's
// results on every value the kernels can hand them.
func (b *Backend) calibrate16(ctx context.Context) (bool, string, error) {
	// Widening: every binary16, in the low half and in the high half.
	var words []uint32
	for h := uint32(0); h < 1<<16; h++ {
		words = append(words, h|0x3c00<<16, 0x3c00|h<<16)
	}
	lo, hi, err := b.probeHalves(ctx, shaders.ProbeF16x2Lo, shaders.ProbeF16x2Hi, words)
	if err != nil {
		return false, "", err
	}
	for i, w := range words {
		if !same32(lo[i], widen16(uint16(w))) || !same32(hi[i], widen16(uint16(w>>16))) {
			return false, fmt.Sprintf("f16 builtins off: unpack2x16float(%#08x) = %#08x, %#08x", w, lo[i], hi[i]), nil
		}
	}
	// Narrowing: each finite binary16, the midpoint to the next one up and the f32 on either
	// side of it, both signs; the values below the smallest subnormal; f32 subnormals.
	var vals []uint32
	add := func(f float32) { vals = append(vals, math.Float32bits(f), math.Float32bits(-f)) }
	for h := uint16(0); h < 0x7bff; h++ {
		f, next := float16.Frombits(h).Float32(), float16.Frombits(h+1).Float32()
		mid := f + (next-f)/2 // exact: binary16 has 11 significant bits
		add(f)
		add(mid)
		add(math.Nextafter32(mid, 0))
		add(math.Nextafter32(mid, next))
	}
	for _, f := range []float32{65504, 65519.996, 65520, 1e10, float32(math.Inf(1)), 0x1p-25, math.Nextafter32(0x1p-25, 1),
		0x1p-26, 0x1p-126, 0x1p-149, 0x1p-140, math.MaxFloat32} {
		add(f)
	}
	for e := 16; e < 128; e++ { // overflow at every exponent: ±Inf
		for _, m := range []float32{1, 1.5, 1.9990234, math.Nextafter32(2, 0)} {
			add(float32(math.Ldexp(float64(m), e)))
		}
	}
	vals = append(vals, 0x7fc00000, 0xffc12345, 0x7f812345) // NaNs: quiet and signalling payloads
	plo, phi, err := b.probeHalves(ctx, shaders.ProbePackLo, shaders.ProbePackHi, vals)
	if err != nil {
		return false, "", err
	}
	for i, v := range vals {
		want := narrow16(v)
		if !same16(plo[i], want) || !same16(phi[i], want) {
			return false, fmt.Sprintf("f16 builtins off: pack2x16float(%g) = %#04x, %#04x, want %#04x",
				math.Float32frombits(v), plo[i], phi[i], want), nil
		}
	}
	return true, "f16 builtins exact", nil
}

// probeHalves runs the Fast16 probe kernel over src in the mode of a word's low half and in
// that of its high half.
func (b *Backend) probeHalves(ctx context.Context, lo, hi uint32, src []uint32) ([]uint32, []uint32, error) {
	l, err := b.runProbe(ctx, true, lo, src)
	if err != nil {
		return nil, nil, err
	}
	h, err := b.runProbe(ctx, true, hi, src)
	return l, h, err
}

// runProbe runs the shaders' probe kernel (Fast16 form or not) in one mode over src and
// returns its output words.
func (b *Backend) runProbe(ctx context.Context, fast16 bool, mode uint32, src []uint32) ([]uint32, error) {
	pipe, err := pipeline(b, b.probePipe, fast16, func() string { return fmt.Sprintf("probe(fast16=%v)", fast16) },
		func() (string, error) { return shaders.RenderProbe(fast16) })
	if err != nil {
		return nil, err
	}
	groups, _, err := b.grid("calibration", len(src), shaders.ProbeWorkgroup)
	if err != nil {
		return nil, err
	}
	n := uint64(len(src)) * 4
	dst := make([]uint32, len(src))
	var u params
	u.u32(uint32(len(src)))
	u.u32(mode)
	var s dawnrt.Call
	s.Reset("calibration")
	s.Kernel(pipe, groups)
	s.Params(shaders.ProbeBindings.Params, u.bytes())
	s.Input(shaders.ProbeBindings.Src, "src", nil, bytesOf(src), n)
	s.Output(shaders.ProbeBindings.Dst, "dst", nil, bytesOf(dst), n)
	if err := b.dev.Run(ctx, &s); err != nil {
		return nil, err
	}
	return dst, nil
}

// same32 reports whether float32 bits got are want's, or a NaN where want is one: a NaN's
// payload is no backend's contract (x86 and NVIDIA already make different NaNs of 0/0).
func same32(got, want uint32) bool {
	nan := func(b uint32) bool { return b&0x7fffffff > 0x7f800000 }
	return got == want || nan(got) && nan(want)
}

// same16 is same32 for binary16 bits.
func same16(got, want uint32) bool {
	nan := func(b uint32) bool { return b&0x7fff > 0x7c00 }
	return got == want || nan(got) && nan(want)
}

// widen16 is the exact float32 bits of binary16 h, as the shaders' f16_to_f32 gives them
// (Inf, and NaN with its payload in the top fraction bits).
func widen16(h uint16) uint32 {
	if h&0x7c00 == 0x7c00 {
		return uint32(h&0x8000)<<16 | 0x7f800000 | uint32(h&0x3ff)<<13
	}
	return math.Float32bits(float16.Frombits(h).Float32())
}

// narrow16 is binary16 bits of float32 bits v, nearest-even, as the shaders' f32_to_f16
// gives them: ±Inf from 65520 up, a NaN quiet with the payload's top bits.
func narrow16(v uint32) uint32 {
	if a := v & 0x7fffffff; a > 0x7f800000 {
		return (v>>16)&0x8000 | 0x7e00 | (a>>13)&0x3ff
	}
	return uint32(float16.Fromfloat32(math.Float32frombits(v)).Bits())
}
