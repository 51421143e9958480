package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/fusednorm/fusednorm/internal/half"
	"github.com/fusednorm/fusednorm/internal/plan"
)

func TestEmbedSumF16Kernel(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	g := &goKernels
	for _, name := range simdLevels() {
		k := mustKernels(t, name)
		for _, n := range append(kernelSizes, 1<<16) {
			w, p, s := halves(r, n), halves(r, n), halves(r, n)
			for _, seg := range [][]uint16{nil, s} {
				tag := fmt.Sprintf("%s/embedSumF16/n=%d/seg=%v", name, n, seg != nil)
				gotX, wantX := out32(n, nil), out32(n, nil)
				gotB, wantB := out16(n), out16(n)
				f := embedForm{seg: seg != nil}
				k.embedSum(f, gotX, gotB, w, p, seg)
				g.embedSum(f, wantX, wantB, w, p, seg)
				same32(t, tag+"/x", gotX, wantX)
				same16(t, tag+"/bits", gotB, wantB)
			}
		}
	}
}

// TestEmbedShiftKernel checks the staged sum fused with the first pass (bits, t and the
// partial sums) against its twin for every plan width, from +0 and onto earlier pieces,
// and embedFirst against the staged sum's first element.
func TestEmbedShiftKernel(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	g := &goKernels
	for _, name := range simdLevels() {
		k := mustKernels(t, name)
		for _, w := range append(planWidths, 32, 64, 128) {
			for _, n := range append(kernelSizes, 768, 3*w, 3*w+5) {
				if n == 0 {
					continue // a row has at least one element
				}
				wd, p, s := halves(r, n), halves(r, n), halves(r, n)
				init := values(r, w, false)
				start := func(i int) float32 { return init[i] }
				for _, seg := range [][]uint16{nil, s} {
					f := embedForm{seg: seg != nil}
					var g0 uint16
					if seg != nil {
						g0 = seg[0]
					}
					x0 := embedFirst(f.seg, wd[0], p[0], g0)
					first := out32(1, nil)
					g.embedSum(f, first, out16(1), wd, p, seg)
					same32(t, fmt.Sprintf("%s/embedFirst/seg=%v", name, f.seg), []float32{x0}, first)
					for _, acc := range []bool{false, true} {
						f.acc = acc
						tag := fmt.Sprintf("%s/embedShift/W=%d/n=%d/seg=%v/acc=%v", name, w, n, f.seg, acc)
						gotP, wantP := out32(w, start), out32(w, start)
						gotT, wantT := out32(n, nil), out32(n, nil)
						gotB, wantB := out16(n), out16(n)
						k.embedShift(f, gotP, gotT, gotB, wd, p, seg, x0)
						g.embedShift(f, wantP, wantT, wantB, wd, p, seg, x0)
						same32(t, tag+"/t", gotT, wantT)
						same16(t, tag+"/bits", gotB, wantB)
						same32(t, tag+"/part", gotP, wantP)
					}
				}
			}
		}
	}
}

// TestEmbedShiftTreeKernel checks the short token's first pass with its tree and shift
// (embedKernels.shiftTree, where a level has it) against its twin for every tree width and
// rows of one to three chunks: the shift, t and the bits, on rows of ordinary values (a
// finite shift) and of halves' (Infs and NaNs among them).
func TestEmbedShiftTreeKernel(t *testing.T) {
	r := rand.New(rand.NewPCG(25, 26))
	for _, name := range simdLevels() {
		k := mustKernels(t, name)
		if k.embeds.shiftTree == nil {
			continue
		}
		for w := 64; w <= 2048; w *= 2 {
			for _, n := range []int{w, 2 * w, 3 * w} {
				p := plan.Plan{H: n, W: w, Lanes: plan.WideLanes, InvH: float32(1 / float64(n))}
				for _, data := range []string{"ordinary", "halves"} {
					gen := halves
					if data == "ordinary" {
						gen = ordinaryHalves
					}
					wd, ps, s := gen(r, n), gen(r, n), gen(r, n)
					for _, seg := range [][]uint16{nil, s} {
						tag := fmt.Sprintf("%s/embedShiftTree/W=%d/n=%d/%s/seg=%v", name, w, n, data, seg != nil)
						gotT, wantT := out32(n, nil), out32(n, nil)
						gotB, wantB := out16(n), out16(n)
						var got float32
						if seg != nil {
							got = k.embeds.shiftTreeSeg(out32(w, nil), gotT, gotB, wd, ps, seg, p.InvH)
						} else {
							got = k.embeds.shiftTree(out32(w, nil), gotT, gotB, wd, ps, p.InvH)
						}
						want := embedShiftTreeGo(&p, out32(w, nil), wantT, wantB, wd, ps, seg)
						same32(t, tag+"/shift", []float32{got}, []float32{want})
						same32(t, tag+"/t", gotT, wantT)
						same16(t, tag+"/bits", gotB, wantB)
					}
				}
			}
		}
	}
}

// TestEmbedShiftTree32Kernel does the same for the float32 kernels (embedKernels.shiftTree32):
// the shift and t, on rows of ordinary values and of values' (specials among them).
func TestEmbedShiftTree32Kernel(t *testing.T) {
	r := rand.New(rand.NewPCG(27, 28))
	for _, name := range simdLevels() {
		k := mustKernels(t, name)
		if k.embeds.shiftTree32 == nil {
			continue
		}
		for w := 64; w <= 2048; w *= 2 {
			for _, n := range []int{w, 2 * w, 3 * w} {
				p := plan.Plan{H: n, W: w, Lanes: plan.WideLanes, InvH: float32(1 / float64(n))}
				for _, special := range []bool{false, true} {
					gen := func() []float32 { return plainValues(r, n, false) }
					if special {
						gen = func() []float32 { return values(r, n, true) }
					}
					wd, ps, s := gen(), gen(), gen()
					for _, seg := range [][]float32{nil, s} {
						tag := fmt.Sprintf("%s/embedShiftTree32/W=%d/n=%d/special=%v/seg=%v", name, w, n, special, seg != nil)
						gotT, wantT := out32(n, nil), out32(n, nil)
						var got float32
						if seg != nil {
							got = k.embeds.shiftTree32Seg(out32(w, nil), gotT, wd, ps, seg, p.InvH)
						} else {
							got = k.embeds.shiftTree32(out32(w, nil), gotT, wd, ps, p.InvH)
						}
						want := embedShiftTree32Go(&p, out32(w, nil), wantT, wd, ps, seg)
						same32(t, tag+"/shift", []float32{got}, []float32{want})
						same32(t, tag+"/t", gotT, wantT)
					}
				}
			}
		}
	}
}

// ordinaryHalves is n binary16 values of plainValues' (no special ones).
func ordinaryHalves(r *rand.Rand, n int) []uint16 {
	s := make([]uint16, n)
	for i, v := range plainValues(r, n, false) {
		s[i] = half.F32ToF16(v)
	}
	return s
}
