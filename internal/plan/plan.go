// Package plan is the reduction plan of SPEC.md §C.4: the one order of every floating-point
// reduction, shared by the WGSL kernels (shaders renders it) and the CPU kernels (cpu mirrors
// it), so both give the same bits.
//
// A row of H elements is reduced by W "invocations" (W a power of two). Invocation k adds
// x[k], x[k+W], x[k+2W], … in that order into its own f32 partial, starting from 0; then the
// partials are combined by a halving tree, part[k] += part[k+off] for off = W/2, W/4, …, 1.
// The mean is that sum times InvH (= f32(1/H)); the variance reduces (x−mean)² with the same
// plan and is scaled by InvH; rstd = 1/sqrt(var+eps), each step correctly rounded.
package plan

import (
	"fmt"
	"math"
	"math/bits"
)

// MaxW is the largest row width the plan uses: the WebGPU default
// maxComputeInvocationsPerWorkgroup, which every device offers, so every device and the CPU
// mirror agree on W without knowing each other.
const MaxW = 256

// Contraction says which multiply-adds a device fuses into one rounding (SPEC §C.4 DECISION 2).
// The zero value is the unfused profile: what lavapipe does and what the CPU uses alone.
type Contraction struct {
	// FuseVariance: acc = fma(d, d, acc) instead of acc + f32(d·d) in the variance pass.
	FuseVariance bool
	// FuseAffine: y = fma(d·rstd, gamma, beta) instead of f32(d·rstd·gamma) + beta.
	FuseAffine bool
}

// String names the profile as the logs and the benchmark print it.
func (c Contraction) String() string {
	switch {
	case c.FuseVariance && c.FuseAffine:
		return "fused(variance,affine)"
	case c.FuseVariance:
		return "fused(variance)"
	case c.FuseAffine:
		return "fused(affine)"
	}
	return "unfused"
}

// Plan is the reduction order for rows of H elements.
type Plan struct {
	H       int
	W       int     // invocations per row, a power of two, ≤ MaxW
	InvH    float32 // f32(1/H): the mean and variance are scaled by it (a WGSL divide is 2.5 ulp)
	Profile Contraction
}

// For returns the plan for rows of h elements under a device's contraction profile.
func For(h int, prof Contraction) Plan {
	if h < 1 {
		panic(fmt.Sprintf("plan: row length %d", h)) // callers validate H first
	}
	w := MaxW
	if h < MaxW {
		w = 1 << bits.Len(uint(h-1)) // pow2ceil
	}
	return Plan{H: h, W: w, InvH: float32(1 / float64(h)), Profile: prof}
}

// String is a short description for logs.
func (p Plan) String() string {
	return fmt.Sprintf("plan(H=%d W=%d %s)", p.H, p.W, p.Profile)
}

// Tree combines W partials in place by the halving tree and returns part[0].
func (p Plan) Tree(part []float32) float32 {
	for off := p.W / 2; off >= 1; off /= 2 {
		for k := 0; k < off; k++ {
			part[k] += part[k+off]
		}
	}
	return part[0]
}

// Sum reduces x (len H) by the plan. part is scratch of at least W elements.
func (p Plan) Sum(x []float32, part []float32) float32 {
	part = part[:p.W]
	clear(part)
	for base := 0; base < len(x); base += p.W {
		n := min(p.W, len(x)-base)
		for k := 0; k < n; k++ {
			part[k] += x[base+k]
		}
	}
	return p.Tree(part)
}

// SumSqDev reduces (x−mean)² by the plan, fusing the multiply-add when the profile does.
func (p Plan) SumSqDev(x []float32, mean float32, part []float32) float32 {
	part = part[:p.W]
	clear(part)
	fuse := p.Profile.FuseVariance
	for base := 0; base < len(x); base += p.W {
		n := min(p.W, len(x)-base)
		for k := 0; k < n; k++ {
			d := x[base+k] - mean
			if fuse {
				part[k] = FMA32(d, d, part[k])
			} else {
				part[k] += float32(d * d)
			}
		}
	}
	return p.Tree(part)
}

// Stats returns the row's mean and rstd by the plan.
func (p Plan) Stats(x []float32, eps float32, part []float32) (mean, rstd float32) {
	mean = p.Sum(x, part) * p.InvH
	variance := p.SumSqDev(x, mean, part) * p.InvH
	return mean, Rstd(variance + eps)
}

// Affine is one normalized element: ((x−mean)·rstd)·gamma + beta with the profile's fusion.
func (p Plan) Affine(x, mean, rstd, gamma, beta float32) float32 {
	n := float32((x - mean) * rstd)
	if p.Profile.FuseAffine {
		return FMA32(n, gamma, beta)
	}
	return float32(n*gamma) + beta
}

// Rstd is the exact 1/sqrt(v) of the plan: the correctly rounded square root, then the
// correctly rounded reciprocal (the shader's integer routine computes the same bits).
func Rstd(v float32) float32 {
	return 1 / float32(math.Sqrt(float64(v)))
}

// FMA32 is the single-rounding float32 fused multiply-add, as a GPU's fma and VFMADD*PS
// compute it. math.FMA rounds to float64 first, and rounding that again to float32 can be off
// (double rounding), so the float64 sum is rounded to odd before the final rounding: with
// 53 ≥ 24+2 bits that gives the correctly rounded float32 result.
func FMA32(a, b, c float32) float32 {
	p := float64(a) * float64(b) // exact: 48 significant bits
	s := p + float64(c)
	if math.IsInf(s, 0) || math.IsNaN(s) {
		return float32(s)
	}
	// TwoSum: err is the exact rounding error of p + c.
	bv := s - p
	err := (p - (s - bv)) + (float64(c) - bv)
	if err != 0 {
		u := math.Float64bits(s)
		if u&1 == 0 { // round to odd: step toward the exact value
			if (err > 0) == (s > 0) {
				u++
			} else {
				u--
			}
			s = math.Float64frombits(u)
		}
	}
	return float32(s)
}
