package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/fusednorm/fusednorm/internal/plan"
)

func TestAccumulateKernels(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	g := &goKernels
	for _, name := range simdLevels() {
		k := mustKernels(t, name)
		for _, w := range planWidths {
			for _, n := range kernelSizes {
				for _, special := range []bool{false, true} {
					tag := func(op string) string {
						return fmt.Sprintf("%s/%s/W=%d/n=%d/special=%v", name, op, w, n, special)
					}
					x := values(r, n, special)
					init, init2 := values(r, w, false), values(r, w, false)
					start := func(i int) float32 { return init[i] }
					start2 := func(i int) float32 { return init2[i] }
					shift := float32(r.NormFloat64()) // x0 of the first pass, the second shift of dev

					for _, f := range []sumForm{{}, {dev: true}, {dev: true, fma: true},
						{zero: true}, {dev: true, zero: true}, {dev: true, fma: true, zero: true}} {
						// dev writes e back into t; the first pass only reads it.
						gotT, wantT := out32(n, func(i int) float32 { return x[i] }), out32(n, func(i int) float32 { return x[i] })
						got, want := out32(w, start), out32(w, start)
						var got2, want2 []float32
						if f.dev {
							got2, want2 = out32(w, start2), out32(w, start2)
						}
						k.accumulate(f, got, got2, gotT, shift)
						g.accumulate(f, want, want2, wantT, shift)
						form := fmt.Sprintf("%+v", f)
						same32(t, tag(form), got, want)
						same32(t, tag(form+"/part2"), got2, want2)
						same32(t, tag(form+"/t"), gotT, wantT)
						if f.zero { // the zero-start forms ignore what the partials held
							clear(want)
							clear(want2)
							g.accumulate(sumForm{dev: f.dev, fma: f.fma}, want, want2, slices.Clone(x), shift)
							same32(t, tag(fmt.Sprintf("%+v/cleared", f)), got, want)
							same32(t, tag(fmt.Sprintf("%+v/cleared/part2", f)), got2, want2)
						}
					}
				}
			}
		}
	}
}

// The accumulation kernels must also follow the plan itself, not only their twins: the
// statistics are plan.Stats's, and the row's scratch ends holding e = f32(x − Shift).
func TestAccumulateFollowsPlan(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, name := range testLevels() {
		for _, h := range []int{1, 7, 8, 9, 255, 256, 257, 768, 1000, 4096, 4099} {
			for _, prof := range []plan.Contraction{{}, {FuseVariance: true, FuseAffine: true}} {
				for _, far := range []float32{0, 1000} { // far: the first element lies far from the mean
					p := plan.For(h, h%2 == 0, prof)
					x := values(r, h, false)
					if far != 0 {
						x = plainNormal(r, h)
						x[0] += far
					}
					part := make([]float32, 2*p.W)
					row := make([]float32, h)
					got := rowStats(kernelsOf(name), &p, x, row, part, 1e-5, nil)
					want := p.Stats(x, 1e-5, make([]float32, 2*p.W))
					if !sameStats(got, want) {
						t.Fatalf("%s: H=%d %v far=%v: rowStats = %+v, plan.Stats = %+v", name, h, prof, far, got, want)
					}
					e := make([]float32, h)
					for i, v := range x {
						e[i] = v - want.Shift
					}
					same32(t, fmt.Sprintf("%s/H=%d/%v/far=%v/e", name, h, prof, far), row, e)
				}
			}
		}
	}
}

func TestFoldQuadsKernel(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	for _, name := range testLevels() {
		k := mustKernels(t, name)
		for _, w := range []int{4, 8, 16, 32, 64, 96, 128, 256, 512, 1024, 1028} {
			for _, special := range []bool{false, true} {
				init := values(r, w, special)
				got, want := out32(w, func(i int) float32 { return init[i] }), slices.Clone(init)
				k.foldQuads(got[:w])
				plan.FoldQuads(want)
				same32(t, fmt.Sprintf("%s/foldQuads/W=%d/special=%v", name, w, special), got, want)
			}
		}
	}
}

// TestPlanTree checks a row's whole tree (avx512's foldTree for vector rows) against the
// plan's, for every W a vector or scalar row can have.
func TestPlanTree(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for _, name := range testLevels() {
		k := mustKernels(t, name)
		for _, h := range []int{5, 8, 24, 100, 128, 256, 768, 1000, 1024, 2048, 4096, 8192} {
			for _, half := range []bool{false, true} {
				p := plan.For(h, half, plan.Contraction{})
				// values' spread of magnitudes (1e30 beside 1) tests the order of the
				// additions; a row of plain normal values also shows a partial taken twice
				// or dropped, which a 1e30 elsewhere in the row would swallow.
				tame := plainNormal(r, p.W)
				for i, init := range [][]float32{values(r, p.W, false), values(r, p.W, true), tame} {
					got, want := slices.Clone(init), slices.Clone(init)
					sum, wantSum := k.planTree(&p, got), p.Tree(want)
					same32(t, fmt.Sprintf("%s/planTree/%v/values=%d", name, p, i), []float32{sum}, []float32{wantSum})
				}
			}
		}
	}
}

// sameStats reports whether a and b have the same bits (NaNs alike).
func sameStats(a, b plan.Stats) bool {
	same := func(x, y float32) bool { return x != x && y != y || math.Float32bits(x) == math.Float32bits(y) }
	return same(a.Shift, b.Shift) && same(a.MeanD, b.MeanD) && same(a.Rstd, b.Rstd)
}

// TestDevSums checks the second pass with its two trees against the twin accumulation and
// the plan's tree, for every vector W from 64 to 2048 at one to three chunks and a row with
// a shorter last chunk, both profiles (e written back into the row too); and the first
// pass's sum in one kernel (sumTree) the same way.
func TestDevSums(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	for _, name := range testLevels() {
		k := mustKernels(t, name)
		for _, w := range []int{64, 128, 256, 512, 1024, 2048} {
			p := plan.Plan{H: w, W: w, Lanes: plan.VecLanes}
			for _, n := range []int{w, 2 * w, 3 * w, 2*w + 36} {
				for _, fma := range []bool{false, true} {
					p.Profile.FuseVariance = fma
					for i, row := range [][]float32{values(r, n, false), values(r, n, true), plainNormal(r, n)} {
						shift := float32(r.NormFloat64())
						part := out32(2*w, nil)
						gotRow := out32(n, func(i int) float32 { return row[i] })
						got, gotSq := k.devSums(&p, part, gotRow, shift)
						want, want2 := make([]float32, w), make([]float32, w)
						accumulateGo(sumForm{dev: true, fma: fma, zero: true}, want, want2, row, shift)
						wantSum, wantSq := p.Tree(want), p.Tree(want2)
						tag := fmt.Sprintf("%s/devSums/W=%d/n=%d/fma=%v/values=%d", name, w, n, fma, i)
						same32(t, tag, []float32{got, gotSq}, []float32{wantSum, wantSq})
						same32(t, tag+"/t", gotRow, row)
						checkGuards32(t, fmt.Sprintf("%s/devSums/W=%d/n=%d part", name, w, n), part)
					}
				}
				// The first pass's sum of a staged row, where the level has it in one kernel.
				if k.sums.sumTree == nil || n%w != 0 {
					continue
				}
				for i, row := range [][]float32{values(r, n, false), values(r, n, true), plainNormal(r, n)} {
					x0 := row[0]
					part := out32(w, nil)
					got := k.sums.sumTree(part, row, x0)
					want := make([]float32, w)
					accumulateGo(sumForm{zero: true}, want, nil, row, x0)
					same32(t, fmt.Sprintf("%s/sumTree/W=%d/n=%d/values=%d", name, w, n, i), []float32{got}, []float32{p.Tree(want)})
					checkGuards32(t, fmt.Sprintf("%s/sumTree/W=%d/n=%d part", name, w, n), part)
				}
			}
		}
	}
}

// plainNormal is n values of N(0,1): partials of one magnitude, where a partial taken twice
// or dropped shows (values' 1e30s would swallow it).
func plainNormal(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(r.NormFloat64())
	}
	return s
}

func TestTreeKernel(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	for _, name := range testLevels() {
		k := mustKernels(t, name)
		for _, w := range []int{1, 2, 4, 8, 16, 32, 64, 128, 256} {
			for _, special := range []bool{false, true} {
				init := values(r, w, special)
				got, want := out32(w, func(i int) float32 { return init[i] }), slices.Clone(init)
				sum := k.tree(got)
				wantSum := treeGo(want)
				tag := fmt.Sprintf("%s/tree/W=%d/special=%v", name, w, special)
				same32(t, tag, []float32{sum}, []float32{wantSum})
				same32(t, tag+"/part", got, want)
			}
		}
		// Lengths outside the plan's widths follow treeGo too (powers of two past MaxW run
		// the one-kernel tree, the others the step-by-step path).
		for _, w := range []int{3, 12, 24, 48, 200, 512, 1024} {
			init := values(r, w, true)
			got, want := out32(w, func(i int) float32 { return init[i] }), slices.Clone(init)
			sum, wantSum := k.tree(got), treeGo(want)
			tag := fmt.Sprintf("%s/tree/len=%d", name, w)
			same32(t, tag, []float32{sum}, []float32{wantSum})
			same32(t, tag+"/part", got, want)
		}
	}
}
