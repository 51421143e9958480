package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// TestAffineKernels checks the affine steps against their twins: float32, and rounded to
// either 16-bit format with float32 weights and with weights in y's format.
func TestAffineKernels(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 3))
	g := &goKernels
	for _, name := range simdLevels() {
		k := mustKernels(t, name)
		for _, n := range kernelSizes {
			tag := func(op string) string { return fmt.Sprintf("%s/%s/n=%d", name, op, n) }
			a, b, c := values(r, n, true), values(r, n, false), values(r, n, false)

			got, want := out32(n, nil), out32(n, nil)
			mean, rstd := float32(r.NormFloat64()), float32(math.Exp(r.NormFloat64()*3))
			for _, fma := range []bool{false, true} {
				f := affineForm{dt: ops.F32, fma: fma}
				k.affine(f, got, a, b, c, mean, rstd)
				g.affine(f, want, a, b, c, mean, rstd)
				same32(t, tag(fmt.Sprintf("affine%+v", f)), got, want)
			}

			// The affine steps that round y to 16 bits; rstd large enough that values land
			// on rounding boundaries, overflow and underflow.
			want16 := out16(n)
			var forms []affineForm
			for _, dt := range []ops.DType{ops.F16, ops.BF16} {
				for _, fma := range []bool{false, true} {
					for _, nt := range []bool{false, true} {
						forms = append(forms, affineForm{dt: dt, fma: fma, nt: nt})
					}
				}
			}
			for _, f := range forms {
				for _, off := range []int{0, 1, 3, 8} { // y's start within a vector of halves
					y := out16(n + off)[off:]
					k.affine16(f, y, a, b, c, mean, rstd)
					k.fence()
					g.affine16(f, want16, a, b, c, mean, rstd)
					same16(t, tag(fmt.Sprintf("affine16%+v/off=%d", f, off)), y, want16)
				}
				// gamma and beta in y's format, against their widened copies.
				gh, bh := halves(r, n), halves(r, n)
				if f.dt == ops.BF16 {
					narrowBF16Go(gh, b)
					narrowBF16Go(bh, c)
				}
				gw, bw := make([]float32, n), make([]float32, n)
				g.widen(convForm{dt: f.dt}, gw, gh)
				g.widen(convForm{dt: f.dt}, bw, bh)
				for _, off := range []int{0, 1, 3, 8} {
					y := out16(n + off)[off:]
					k.affineH(f, y, a, gh, bh, mean, rstd)
					k.fence()
					g.affine16(f, want16, a, gw, bw, mean, rstd)
					same16(t, tag(fmt.Sprintf("affineH%+v/off=%d", f, off)), y, want16)
				}
			}
		}
	}
}
