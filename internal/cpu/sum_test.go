package cpu

import (
	"fmt"
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
					init := values(r, w, false)
					start := func(i int) float32 { return init[i] }
					mean := float32(r.NormFloat64())
					x0 := float32(r.NormFloat64()) // the plan's shift

					for _, f := range []sumForm{{}, {shifted: true}, {sq: true}, {sq: true, fma: true},
						{zero: true}, {shifted: true, zero: true}, {sq: true, zero: true}, {sq: true, fma: true, zero: true}} {
						got, want := out32(w, start), out32(w, start)
						// The shift writes t (into a slice of its own, and in place over
						// x); the sums of a shifted row and the squared deviations read it.
						for _, inPlace := range []bool{false, true} {
							gotT, wantT := out32(n, nil), out32(n, nil)
							var src []float32
							if inPlace {
								copy(gotT, x)
								src = gotT
							} else {
								src = x
							}
							if f.sq || f.shifted {
								copy(gotT, x)
								copy(wantT, x)
								src = nil
							}
							got, want = out32(w, start), out32(w, start)
							k.accumulate(f, got, gotT, src, x0, mean)
							g.accumulate(f, want, wantT, x, x0, mean)
							form := fmt.Sprintf("%+v/inPlace=%v", f, inPlace)
							same32(t, tag(form), got, want)
							same32(t, tag(form+"/t"), gotT, wantT)
						}
						if f.zero { // the zero-start forms ignore what part held
							clear(want)
							wantT := out32(n, nil)
							if f.sq || f.shifted {
								copy(wantT, x)
							}
							g.accumulate(sumForm{sq: f.sq, shifted: f.shifted, fma: f.fma}, want, wantT, x, x0, mean)
							same32(t, tag(fmt.Sprintf("%+v/cleared", f)), got, want)
						}
					}
				}
			}
		}
	}
}

// The accumulation kernels must also follow the plan itself, not only their twins.
func TestAccumulateFollowsPlan(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, name := range testLevels() {
		for _, h := range []int{1, 7, 8, 9, 255, 256, 257, 768, 1000, 4099} {
			for _, prof := range []plan.Contraction{{}, {FuseVariance: true, FuseAffine: true}} {
				p := plan.For(h, h%2 == 0, prof)
				x := values(r, h, false)
				part := make([]float32, p.W)
				got := rowStats(kernelsOf(name), &p, x, make([]float32, h), part, 1e-5, nil)
				want := p.Stats(x, 1e-5, make([]float32, p.W))
				if got != want {
					t.Fatalf("%s: H=%d %v: rowStats = %+v, plan.Stats = %+v", name, h, prof, got, want)
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

// TestSqDevSum checks the variance pass with its tree (the fused kernel of AVX-512 rows of
// whole chunks, the two steps elsewhere) against the twin accumulation and the plan's tree,
// for every vector W from 64 to 2048 at one to three chunks and a row with a shorter last
// chunk, both profiles; and the plain sum's fused kernel (sumTree) the same way.
func TestSqDevSum(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	for _, name := range testLevels() {
		k := mustKernels(t, name)
		for _, w := range []int{64, 128, 256, 512, 1024, 2048} {
			p := plan.Plan{H: w, W: w, Lanes: plan.VecLanes}
			for _, n := range []int{w, 2 * w, 3 * w, 2*w + 36} {
				for _, fma := range []bool{false, true} {
					p.Profile.FuseVariance = fma
					for i, row := range [][]float32{values(r, n, false), values(r, n, true), plainNormal(r, n)} {
						meanD := float32(r.NormFloat64())
						part := out32(w, nil)
						got := k.sqDevSum(&p, part, row, meanD)
						want := make([]float32, w)
						accumulateGo(sumForm{sq: true, fma: fma, zero: true}, want, slices.Clone(row), nil, 0, meanD)
						wantSum := p.Tree(want)
						same32(t, fmt.Sprintf("%s/sqDevSum/W=%d/n=%d/fma=%v/values=%d", name, w, n, fma, i),
							[]float32{got}, []float32{wantSum})
						checkGuards32(t, fmt.Sprintf("%s/sqDevSum/W=%d/n=%d part", name, w, n), part)
					}
				}
				// The plain sum of a shifted row, where the level has it in one kernel.
				if k.sums.sumTree == nil || n%w != 0 {
					continue
				}
				for i, row := range [][]float32{values(r, n, false), values(r, n, true), plainNormal(r, n)} {
					part := out32(w, nil)
					got := k.sums.sumTree(part, row)
					want := make([]float32, w)
					accumulateGo(sumForm{shifted: true, zero: true}, want, row, nil, 0, 0)
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
