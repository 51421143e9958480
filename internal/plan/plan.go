// Package plan is the reduction plan of spec §C.4, §C.4a and §C.4b (plan v3): the one order of
// every floating-point reduction, shared by the WGSL kernels (shaders renders it) and the CPU
// kernels (cpu mirrors it), so both give the same bits.
//
// A row of H elements is reduced by W "invocations" (W a power of two; see For). Invocation
// k adds its elements k, k+W, k+2W, … in that order into its own f32 partial, starting from
// 0; then the partials are combined by a tree (Tree): for rows whose length is a multiple of
// 4 (Vec), each quad first, q[t] = (part[4t] + part[4t+1]) + (part[4t+2] + part[4t+3]), then
// the W/4 quad sums by halving, q[t] += q[t+off] for off = W/8, W/16, …, 1; for other rows
// the halving over all W partials, part[k] += part[k+off] for off = W/2, …, 1.
//
// The GPU kernels run the plan's invocations four to a thread in the vector kernels
// (shaders.VecOK: H a multiple of 4): thread t of W/4 holds the partials of invocations
// 4t … 4t+3 as the lanes of a vec4 and loads their elements of chunk m, x[mW+4t … mW+4t+3],
// as one 16-byte vector (8 bytes for 16-bit data); it folds its own quad in registers, and
// only the W/4 quad sums meet in workgroup memory. Every partial sees the same additions in
// the same order, so the CPU mirror is the same for both. (Folding the quads first cut the
// tree's barrier steps by two and took 11-26% off the AddLayerNorm kernels on the H200 against
// halving all W partials, 0.66 vs 0.78 ms at f16 (16384,4096).)
//
// 16-bit rows a multiple of 8 long run eight to a thread (Lanes, WideLanes): two quads, whose
// eight values are one 16-byte vector, with W doubled so that a thread holds as many
// elements as before. The plan is the same in every other respect (the quads are folded and
// halved as above). On the H200, against four lanes, in one run, random order, three rounds:
// EmbedLayerNorm f16 (64,512,1024) 88.3 -> 75.9 us, (256,512,4096) 1220 -> 1083 us;
// AddLayerNorm f16 (4096,768) 9.4 -> 8.75 us, (65536,8192) 1261 -> 1234 us.
//
// Plan v3 (spec §C.4b) reduces twice-shifted data. The first shift x0 is the row's first
// element (the value the statistics use: s[0] of AddLayerNorm, the T-rounded embedding sum of
// EmbedLayerNorm), which every invocation and the CPU know before the first pass; the second
// is the first pass's mean estimate. Every step is one correctly rounded float32 operation:
//
//	m1       = Σ f32(x − x0) · InvH             (the sum by the plan, InvH = f32(1/H))
//	shift    = x0 + m1                          (exact for a constant row: m1 = 0)
//	e        = f32(x − shift)                   (from x itself, not from x − x0)
//	m2       = Σ e · InvH, E2 = Σ e² · InvH     (one pass, two partial sets, the same tree;
//	                                             e·e fused into its add when FuseVariance)
//	variance = E2 − f32(m2·m2), 0 if negative   (m2 is tiny next to the spread)
//	rstd     = 1/sqrt(variance + eps)           (each step correctly rounded)
//	mean     = shift + m2                       (the reported mean)
//	y        = f32(f32(e − m2)·rstd)·gamma + beta (fused when FuseAffine)
//
// Why: plan v2 (one shift by x0, deviations f32(x − x0) − meanD) made constant rows exact but
// tied every output's error to |x0 − mean|: the shifted sums grow to H·|x0 − mean|, and their
// rounding lands on every output near the mean. Returning to x for the second pass, around a
// shift already within a rounding of the mean, removes that: measured with a float32 emulation
// of the plan against float64 (2000 rows per cell, H 32…8192, both profiles), the worst
// |y − y64| / (2⁻²⁴·(1 + |z|)) for rows whose first element lies 0 / 3 / 30 / 300 / 3000
// standard deviations out is 3.3 / 3.1 / 3.6 / 4.6 / 5.2 (f32; plan v2 9.7 / 14.5 / 65.5 / 253 /
// 222), so the plan states K = 8 (spec §C.4b). Each part is needed: correcting from x − x0
// without returning to x still reaches 75, dropping m2 is as bad as plan v2, and dropping m2²
// fails rows of 1e5 ± 1. An exactly constant row still gives e = 0, m2 = 0 and y = beta for
// every c, H and eps; rows far from zero are still differenced exactly before anything is
// rounded. The mean is scaled by InvH, a product (a WGSL division is 2.5 ulp).
package plan

import (
	"fmt"
	"math"
	"math/bits"
)

// MaxW is the largest W of rows whose length is not a multiple of VecLanes: the WebGPU
// default maxComputeInvocationsPerWorkgroup, which every device offers (the scalar kernels
// run W invocations), so every device and the CPU mirror agree on W without knowing each
// other.
const MaxW = 256

// VecLanes is how many of the plan's invocations one invocation of the GPU's vector kernels
// stands for (rows whose length is a multiple of it, see the package doc).
const VecLanes = 4

// MaxVecW is the largest W of rows whose length is a multiple of VecLanes: the vector
// kernels run at most 256 invocations, each standing for VecLanes plan invocations, or
// WideLanes in the wide kernel (16-bit rows, see For).
const MaxVecW = maxVecThreads * WideLanes

// maxVecThreads is the most invocations a vector kernel runs: WebGPU's default limit.
const maxVecThreads = 256

// WideLanes is how many of the plan's invocations one invocation of the wide vector kernel
// stands for: two quads, eight 16-bit values, one 16-byte vector.
const WideLanes = 8

// minVecThreads is the least number of vector-kernel invocations a row long enough gets:
// one warp of the H200 (W 128 against 256 took 19% off AddLayerNorm f16 (4096,768) there).
const minVecThreads = 32

// vecPerLane is how many elements For lets one vector-kernel invocation hold, in vectors of
// VecLanes, before it doubles W: 8 (32 elements), where a layer norm on the H200 reached
// 95.7% of its copy bandwidth (D 8192, 256 invocations); 64 invocations holding 32 vectors
// each would leave it few warps. 16 (W halved at H 2052-8192) was slower on every case it
// changes, on the H200 in one run, both orders twice: EmbedLayerNorm (256,512,4096) f32
// 1.64 -> 2.25 ms, f16 1.24 -> 1.66 ms; AddLayerNorm (65536,8192) f32 2.24 -> 2.56 ms, f16
// 1.27 -> 1.40 ms.
const vecPerLane = 8

// Contraction says which multiply-adds a device fuses into one rounding (spec §C.4 DECISION 2).
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
	W       int     // invocations per row, a power of two, ≤ MaxW (≤ MaxVecW for Vec rows)
	Lanes   int     // plan invocations per GPU invocation: 1, VecLanes, or WideLanes (16-bit rows)
	InvH    float32 // f32(1/H): the mean and variance are scaled by it (a WGSL divide is 2.5 ulp)
	Profile Contraction
}

// For returns the plan for rows of h elements under a device's contraction profile; half
// says the row's data are 16-bit values (EmbedLayerNorm's dtype, AddLayerNorm's output).
// Rows whose length is not a multiple of VecLanes: W is pow2ceil(h) up to MaxW, one GPU
// invocation each. Others run L = VecLanes plan invocations per GPU invocation, or L =
// WideLanes for 16-bit rows a multiple of WideLanes long (their eight values are one 16-byte
// vector); W is the least power of two from 32·L (one warp of GPU invocations), and at most
// pow2ceil(h), that leaves each GPU invocation at most 4·vecPerLane elements.
func For(h int, half bool, prof Contraction) Plan {
	if h < 1 {
		panic(fmt.Sprintf("plan: row length %d", h)) // callers validate H first
	}
	w, lanes := MaxW, 1
	if h < MaxW {
		w = 1 << bits.Len(uint(h-1)) // pow2ceil
	}
	if h%VecLanes == 0 {
		lanes = VecLanes
		if half && h%WideLanes == 0 {
			lanes = WideLanes
		}
		w = min(minVecThreads*lanes, 1<<bits.Len(uint(h-1)))
		for w < maxVecThreads*lanes && w/lanes*VecLanes*vecPerLane < h {
			w *= 2
		}
	}
	return Plan{H: h, W: w, Lanes: lanes, InvH: float32(1 / float64(h)), Profile: prof}
}

// Vec reports whether the GPU runs the row in its vector kernels (H a multiple of VecLanes).
func (p Plan) Vec() bool { return p.H%VecLanes == 0 }

// String is a short description for logs.
func (p Plan) String() string {
	return fmt.Sprintf("plan(H=%d W=%d lanes=%d %s)", p.H, p.W, p.Lanes, p.Profile)
}

// Tree combines the W partials in place by the plan's tree and returns the row's sum: the
// quads first for Vec rows, then the halving (see the package doc).
func (p Plan) Tree(part []float32) float32 {
	w := p.W
	if p.Vec() {
		FoldQuads(part[:w])
		w /= VecLanes
	}
	for off := w / 2; off >= 1; off /= 2 {
		for k := 0; k < off; k++ {
			part[k] += part[k+off]
		}
	}
	return part[0]
}

// FoldQuads is the first step of a Vec row's tree: part[t] = (part[4t] + part[4t+1]) +
// (part[4t+2] + part[4t+3]) for t < len(part)/4, in place.
func FoldQuads(part []float32) { FoldQuadsFrom(part, 0) }

// FoldQuadsFrom is FoldQuads for the quads t ≥ from only (those below are folded already).
func FoldQuadsFrom(part []float32, from int) {
	for t := from; t < len(part)/4; t++ {
		q := part[4*t : 4*t+4 : 4*t+4]
		part[t] = (q[0] + q[1]) + (q[2] + q[3])
	}
}

// Sum reduces f32(x − x0) (x of len H) by the plan. part is scratch of at least W elements.
func (p Plan) Sum(x []float32, x0 float32, part []float32) float32 {
	part = part[:p.W]
	clear(part)
	for base := 0; base < len(x); base += p.W {
		n := min(p.W, len(x)-base)
		for k := 0; k < n; k++ {
			part[k] += x[base+k] - x0
		}
	}
	return p.Tree(part)
}

// K is the constant of spec §C.4b's bound that plan v3 meets on every backend: every output
// lies within 2⁻²⁴·K·(|gamma|·(1 + |z|) + |beta|) of the float64 result, plus the output
// dtype's rounding.
const K = 8

// SumDev reduces e = f32(x − shift) and e² by the plan in one sweep, two partial sets through
// the same tree, fusing e·e into its add when the profile does. part and part2 are scratch
// of at least W elements each.
func (p Plan) SumDev(x []float32, shift float32, part, part2 []float32) (sum, sumSq float32) {
	part, part2 = part[:p.W], part2[:p.W]
	clear(part)
	clear(part2)
	fuse := p.Profile.FuseVariance
	for base := 0; base < len(x); base += p.W {
		n := min(p.W, len(x)-base)
		for k := 0; k < n; k++ {
			e := x[base+k] - shift
			part[k] += e
			if fuse {
				part2[k] = FMA32(e, e, part2[k])
			} else {
				part2[k] += float32(e * e)
			}
		}
	}
	return p.Tree(part), p.Tree(part2)
}

// Stats are a row's statistics under the plan.
type Stats struct {
	Shift float32 // the second shift: x0 + the first pass's mean of f32(x − x0)
	MeanD float32 // m2, the mean of e = f32(x − Shift)
	Rstd  float32
}

// Mean is the row's reported mean, Shift + MeanD.
func (s Stats) Mean() float32 { return s.Shift + s.MeanD }

// Stats returns the row's statistics by the plan (x non-empty). part is scratch of at least
// 2·W elements.
func (p Plan) Stats(x []float32, eps float32, part []float32) Stats {
	// The conversions keep a compiler from fusing a product into the add after it (Go may on
	// arm64; the GPU's opaque() forbids it there).
	m1 := float32(p.Sum(x, x[0], part) * p.InvH)
	shift := x[0] + m1
	sum, sumSq := p.SumDev(x, shift, part[:p.W], part[p.W:2*p.W])
	return p.StatsOf(shift, sum, sumSq, eps)
}

// StatsOf finishes the statistics from the second pass's two sums (SumDev's): m2, the
// variance E2 − m2² (0 where rounding makes it negative) and rstd.
func (p Plan) StatsOf(shift, sum, sumSq, eps float32) Stats {
	m2 := float32(sum * p.InvH)
	e2 := float32(sumSq * p.InvH)
	variance := e2 - float32(m2*m2)
	if variance < 0 {
		variance = 0
	}
	return Stats{Shift: shift, MeanD: m2, Rstd: Rstd(variance + eps)}
}

// Affine is one normalized element: f32(f32(e − MeanD)·rstd)·gamma + beta, e = f32(x −
// Shift), with the profile's fusion.
func (p Plan) Affine(x float32, st Stats, gamma, beta float32) float32 {
	n := float32(((x - st.Shift) - st.MeanD) * st.Rstd)
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
