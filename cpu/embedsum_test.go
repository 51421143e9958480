package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"
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
