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

					for _, f := range []sumForm{{}, {sq: true}, {sq: true, fma: true},
						{zero: true}, {sq: true, zero: true}, {sq: true, fma: true, zero: true}} {
						got, want := out32(w, start), out32(w, start)
						k.accumulate(f, got, x, x0, mean)
						g.accumulate(f, want, x, x0, mean)
						same32(t, tag(fmt.Sprintf("%+v", f)), got, want)
						if f.zero { // the zero-start forms ignore what part held
							clear(want)
							g.accumulate(sumForm{sq: f.sq, fma: f.fma}, want, x, x0, mean)
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
				got := rowStats(kernelsOf(name), &p, x, part, 1e-5, nil)
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
