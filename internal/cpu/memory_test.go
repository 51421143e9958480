package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// TestMemoryKernels checks the non-temporal kernels against their twins at every start
// alignment (the NT stores need addresses aligned to the vector, 32 bytes for avx2 and 64
// for avx512: the dispatch hands the head and tail to narrower kernels and the twins), and
// that the prefetches and the fence change nothing.
func TestMemoryKernels(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	g := &goKernels
	for _, name := range simdLevels() {
		k := mustKernels(t, name)
		for _, n := range kernelSizes {
			for off := range 16 {
				tag := func(op string) string { return fmt.Sprintf("%s/%s/n=%d/off=%d", name, op, n, off) }
				a, b, c := values(r, n, true), values(r, n, false), values(r, n, false)
				// off elements before the output: its start moves through the 64-byte grid.
				shifted := func() []float32 { return out32(n+off, nil)[off:] }
				got, want := shifted(), shifted()

				mean, rstd := float32(r.NormFloat64()), float32(math.Exp(r.NormFloat64()*3))
				for _, fma := range []bool{false, true} {
					f := affineForm{dt: ops.F32, fma: fma, nt: true}
					k.affine(f, got, a, b, c, mean, rstd)
					g.affine(f, want, a, b, c, mean, rstd)
					k.fence()
					same32(t, tag(fmt.Sprintf("affine%+v", f)), got, want)
					g.affine(affineForm{dt: ops.F32, fma: fma}, want, a, b, c, mean, rstd)
					same32(t, tag(fmt.Sprintf("affine%+v/stored", f)), got, want)
				}

				// The non-temporal narrowings, against the ordinary ones.
				for _, dt := range []ops.DType{ops.F16, ops.BF16} {
					got16, want16 := out16(n + off)[off:], out16(n)
					k.narrow(convForm{dt: dt, nt: true}, got16, a)
					k.fence()
					g.narrow(convForm{dt: dt}, want16, a)
					same16(t, tag(fmt.Sprintf("narrow%v/nt", dt)), got16, want16)
				}

				got = shifted()
				k.copyNT(got, a)
				k.fence()
				same32(t, tag("copyNT"), got, a)

				// The prefetches change nothing, whatever the start and length.
				before := slices.Clone(a)
				k.prefetch(bytesOf(a[off%max(1, n):]))
				k.prefetch(bytesOf(a)[min(off, 4*n):])
				k.prefetch(nil)
				same32(t, tag("prefetch"), a, before)
			}
		}
	}
}
