package cpu

import (
	"slices"

	"github.com/fusednorm/fusednorm/internal/cpuhook"
	"github.com/fusednorm/fusednorm/internal/plan"
)

// kernelSet is one complete set of the hot loops, all giving the bits of the pure-Go twins
// (the …Go functions). Each Backend holds the set of its level.
type kernelSet struct {
	accumulate         func(part, x []float32, x0 float32)                                                    // part[k] += x[c·W+k] − x0, the plan's order
	accumulateSqDev    func(part, x []float32, x0, meanD float32)                                             // part[k] += f32(d·d), d = (x−x0)−meanD
	accumulateSqDevFMA func(part, x []float32, x0, meanD float32)                                             // part[k] = fma(d, d, part[k])
	tree               func(part []float32) float32                                                           // the halving steps of plan.Plan.Tree
	foldQuads          func(part []float32)                                                                   // a vector row's first tree step (plan.FoldQuads)
	affine             func(y, x, gamma, beta []float32, x0, meanD, rstd float32)                             // f32(((x−x0)−meanD)·rstd)·gamma + beta
	affineFMA          func(y, x, gamma, beta []float32, x0, meanD, rstd float32)                             // fma(((x−x0)−meanD)·rstd, gamma, beta)
	affine16           func(f form16, y []uint16, x, gamma, beta []float32, x0, meanD, rstd float32)          // affine or affineFMA, rounded to 16 bits
	affine16H          func(f form16, y []uint16, x []float32, gamma, beta []uint16, x0, meanD, rstd float32) // affine16, gamma and beta in y's format
	embedSumF32        func(x, w, p, g []float32)                                                             // (w + p) + g, or w + p without g
	embedSumF16        func(x []float32, bits []uint16, w, p, g []uint16)                                     // rnd16(rnd16(w + g) + p), as f32 and bits
	add2               func(s, a, b []float32)                                                                // s = a + b
	add3               func(s, a, b, c []float32)                                                             // s = (a + b) + c
	addTo              func(s, b []float32)                                                                   // s += b
	widenF16           func(dst []float32, src []uint16)                                                      // binary16 → float32
	widenBF16          func(dst []float32, src []uint16)                                                      // bfloat16 → float32
	narrowF16          func(dst []uint16, src []float32)                                                      // float32 → binary16, nearest-even
	narrowBF16         func(dst []uint16, src []float32)                                                      // float32 → bfloat16 (half.F32ToBF16)
	maskCountOnes      func(m []int32) int32                                                                  // how many of m are 1
	maskFirstZero      func(m []int32) int                                                                    // index of the first 0 in m, else len(m)

	// Memory-system variants (stream.go): the same values as their twins, stored or
	// fetched differently. The NT stores are weakly ordered: a worker that used them calls
	// fence before its rows are shared.
	affineNT    func(y, x, gamma, beta []float32, x0, meanD, rstd float32)
	affineFMANT func(y, x, gamma, beta []float32, x0, meanD, rstd float32)
	copyNT      func(dst, src []float32)
	prefetch    func(b []byte)
	fence       func()

	// Fewer passes over a row (rowstats.go): the three accumulations on partials that start
	// at zero (no clear first), and a row's first pass fused with its first accumulation.
	sumZero      func(part, x []float32, x0 float32)
	sqDevZero    func(part, x []float32, x0, meanD float32)
	sqDevFMAZero func(part, x []float32, x0, meanD float32)
	addSum       func(part, s, x, a, b, c []float32, x0 float32) // x0 = s[0], the plan's shift
	addSumAcc    func(part, s, a, b, c []float32, x0 float32)    // addSum without x, onto the partials as they are
	// addSumStream is addSum for inputs streamed from DRAM: the sum in one sequential pass,
	// then the partial sums from s in the caches. (addSum's register-blocked walk strides
	// through a row W elements at a time, which leaves the hardware prefetchers behind.)
	addSumStream func(part, s, x, a, b, c []float32, x0 float32)
	// addSum16 is addSum (f.acc: addSumAcc) for 16-bit a and b of one format (f.bf:
	// bfloat16), widened as they are loaded, and c of that format too (nil: none); x (nil:
	// none) gets s rounded to that format, stored non-temporally where the level can (the
	// caller fences).
	addSum16 func(f sum16, part, s []float32, x, a, b, c []uint16, x0 float32)
}

// sum16 is the form of an addSum16 call.
type sum16 struct {
	bf  bool // bfloat16 inputs, else binary16
	acc bool // onto the partials as they are, else from +0
}

// form16 is how an affine step stores 16-bit values.
type form16 struct {
	bf    bool // bfloat16 (half.F32ToBF16), else binary16 (half.F32ToF16)
	fused bool // fma(n, gamma, beta), else f32(n·gamma) + beta
	nt    bool // non-temporal stores (the caller fences): the same values
}

// goKernels is the pure-Go level, present on every build.
var goKernels = kernelSet{
	accumulate:         accumulateGo,
	accumulateSqDev:    accumulateSqDevGo,
	accumulateSqDevFMA: accumulateSqDevFMAGo,
	tree:               treeGo,
	foldQuads:          plan.FoldQuads,
	affine:             affineGo,
	affineFMA:          affineFMAGo,
	affine16:           affine16Go,
	affine16H:          affine16HGo,
	embedSumF32:        embedSumF32Go,
	embedSumF16:        embedSumF16Go,
	add2:               add2Go,
	add3:               add3Go,
	addTo:              addToGo,
	widenF16:           widenF16Go,
	widenBF16:          widenBF16Go,
	narrowF16:          narrowF16Go,
	narrowBF16:         narrowBF16Go,
	maskCountOnes:      maskCountOnesGo,
	maskFirstZero:      maskFirstZeroGo,
	affineNT:           affineGo,
	affineFMANT:        affineFMAGo,
	copyNT:             copyGo,
	prefetch:           func([]byte) {},
	fence:              func() {},
	sumZero:            sumZeroGo,
	sqDevZero:          sqDevZeroGo,
	sqDevFMAZero:       sqDevFMAZeroGo,
	addSum:             addSumGo,
	addSumStream:       addSumGo,
	addSumAcc:          addSumAccGo,
	addSum16:           addSum16Go,
}

// treeGo is plan.Plan.Tree for W = len(part): part[k] += part[k+off], off = W/2 … 1.
func treeGo(part []float32) float32 {
	for off := len(part) / 2; off >= 1; off /= 2 {
		lo, hi := part[:off], part[off:2*off]
		for k := range lo {
			lo[k] += hi[k]
		}
	}
	return part[0]
}

type namedLevel struct {
	name string
	k    *kernelSet
}

// levels are the kernel sets this processor can run, widest first; "go" is always last, and
// the first is the default of a Backend whose Options.Level is empty.
var levels = []namedLevel{{"go", &goKernels}}

// addLevel registers a SIMD level, from an init that has checked cpuid; a wider level is
// registered after the narrower ones it builds on.
func addLevel(name string, k *kernelSet) {
	levels = slices.Insert(levels, 0, namedLevel{name, k})
}

// levelNames names the levels, widest first: "avx512fp16", "avx512", "avx2", "go" on a
// machine with AVX512-FP16 (and AVX-512 F/BW/VL); "avx512", "avx2", "go" on one with
// AVX-512 F/BW/VL; "avx2", "go" on an AVX2+FMA+F16C machine; "go" alone in noasm and
// purego builds and on other architectures.
func levelNames() []string {
	names := make([]string, len(levels))
	for i, l := range levels {
		names[i] = l.name
	}
	return names
}

// kernelsOf returns the named level's kernels, or nil when this processor or build lacks it.
func kernelsOf(name string) *kernelSet {
	i := slices.IndexFunc(levels, func(l namedLevel) bool { return l.name == name })
	if i < 0 {
		return nil
	}
	return levels[i].k
}

func init() {
	cpuhook.Levels = levelNames
	cpuhook.CopyNT = func(dst, src []float32) {
		k := levels[0].k
		k.copyNT(dst, src)
		k.fence()
	}
}
