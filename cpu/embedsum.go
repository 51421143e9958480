package cpu

import (
	"github.com/fusednorm/fusednorm/internal/half"
)

// EmbedLayerNorm's binary16 sum, staged as the plan stages it: h = rnd16(rnd16(w + g) + p)
// with a segment row g, else rnd16(w + p), written as its bits and as float32. (The float32
// sum is a first pass, addsum.go.)

// embedForm is the form of a staged sum.
type embedForm struct {
	seg      bool // a segment row g is added first
	prefetch bool // w (a gathered word row, from DRAM) is prefetched in address order first
}

// embedKernels are a width's staged-sum kernels, for whole vectors of x.
type embedKernels struct {
	sum    func(x []float32, bits []uint16, w, p []uint16)
	sumSeg func(x []float32, bits []uint16, w, p, g []uint16)
}

// embedSumGo is the twin of embedSum.
func embedSumGo(f embedForm, x []float32, bits []uint16, w, p, g []uint16) {
	t := half.F16Table()
	w = w[:len(x)]
	p = p[:len(x)]
	bits = bits[:len(x)]
	if !f.seg {
		for i := range x {
			h := half.F32ToF16(t[w[i]] + t[p[i]])
			bits[i], x[i] = h, t[h]
		}
		return
	}
	g = g[:len(x)]
	for i := range x {
		h := half.F32ToF16(t[half.F32ToF16(t[w[i]]+t[g[i]])] + t[p[i]])
		bits[i], x[i] = h, t[h]
	}
}

// embedSum runs the staged sum: the width's kernel over the whole vectors of x, what is
// left narrower.
func (k *kernels) embedSum(f embedForm, x []float32, bits []uint16, w, p, g []uint16) {
	bits, w, p = bits[:len(x)], w[:len(x)], p[:len(x)]
	if f.seg {
		g = g[:len(x)]
	}
	if f.prefetch {
		k.prefetch(bytesOf(w))
		f.prefetch = false
	}
	if !k.simd() {
		embedSumGo(f, x, bits, w, p, g)
		return
	}
	n := k.whole(len(x))
	if n > 0 {
		if f.seg {
			k.embeds.sumSeg(x[:n], bits, w, p, g)
		} else {
			k.embeds.sum(x[:n], bits, w, p)
		}
	}
	if n < len(x) {
		k.narrower.embedSum(f, x[n:], bits[n:], w[n:], p[n:], from(g, n))
	}
}
