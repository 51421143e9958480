//go:build cgo

package dawn

import (
	"context"
	"fmt"
	"math"

	"github.com/x448/float16"

	"github.com/fusednorm/fusednorm/shaders"
)

// The kernels' float16 conversions come in two forms (shaders.Embed.Fast16,
// shaders.AddLN.Fast16): integer routines that round nearest-even on any device, and the
// builtins pack2x16float / unpack2x16float, whose rounding WGSL leaves to the device but
// which cost a fraction of the integer work (the 16-bit kernels were bound by it). When a
// device opens, calibrate16 runs both Fast16 helpers through the probe kernel on every
// finite binary16 and on every rounding boundary between two of them, and the builtins are
// used only when every result equals the nearest-even one the CPU computes: then the
// kernels' bits are the same either way.

// calibrate16 reports whether the device's builtin float16 conversions are exact on every
// value the Fast16 helpers hand them.
func (b *Backend) calibrate16(ctx context.Context) (bool, string, error) {
	// Widening: every binary16 but Inf and NaN (those take the integer route), low and high half.
	var words []uint32
	for h := uint32(0); h < 1<<16; h++ {
		words = append(words, h|0x3c00<<16, 0x3c00|h<<16)
	}
	lo, hi, err := b.probeHalves(ctx, shaders.ProbeF16x2Lo, shaders.ProbeF16x2Hi, words)
	if err != nil {
		return false, "", err
	}
	for i, w := range words {
		if lo[i] != widen16(uint16(w)) || hi[i] != widen16(uint16(w>>16)) {
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
		0x1p-26, 0x1p-126, 0x1p-149, 0x1p-140} {
		add(f)
	}
	vals = append(vals, 0x7fc00000, 0xffc12345, 0x7f812345) // NaNs: quiet and signalling payloads
	plo, phi, err := b.probeHalves(ctx, shaders.ProbePackLo, shaders.ProbePackHi, vals)
	if err != nil {
		return false, "", err
	}
	for i, v := range vals {
		want := narrow16(v)
		if plo[i] != want || phi[i] != want {
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
	wgsl, err := shaders.RenderProbe(fast16)
	if err != nil {
		return nil, err
	}
	pipe, err := b.dev.pipeline(fmt.Sprintf("probe(fast16=%v)", fast16), wgsl, shaders.Entry)
	if err != nil {
		return nil, err
	}
	n := uint64(len(src))
	var bufs [3]*buffer
	defer func() {
		for _, buf := range bufs {
			if buf != nil {
				buf.release()
			}
		}
	}()
	for i, s := range []struct {
		size  uint64
		usage bufferUsage
	}{{16, usageUniform | usageCopyDst}, {n * 4, usageStorage | usageCopyDst}, {n * 4, usageStorage | usageCopySrc}} {
		if bufs[i], err = b.dev.createBuffer("fusednorm.probe", s.size, s.usage); err != nil {
			return nil, err
		}
	}
	var u params
	u.u32(uint32(n))
	u.u32(mode)
	u.u32(0)
	u.u32(0)
	if err := b.write(bufs[0], 0, u.bytes()); err != nil {
		return nil, err
	}
	if err := b.write(bufs[1], 0, bytesOf(src)); err != nil {
		return nil, err
	}
	groups := (len(src) + shaders.ProbeWorkgroup - 1) / shaders.ProbeWorkgroup
	nx := min(groups, 65535)
	dst := make([]uint32, n)
	err = b.dev.run(ctx, pipe, []binding{
		{Binding: 0, Buffer: bufs[0], Size: 16},
		{Binding: 1, Buffer: bufs[1], Size: n * 4},
		{Binding: 2, Buffer: bufs[2], Size: n * 4},
	}, [3]uint32{uint32(nx), uint32((groups + nx - 1) / nx), 1}, []readback{{Src: bufs[2], Dst: bytesOf(dst)}})
	if err != nil {
		return nil, err
	}
	return dst, nil
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
