package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

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

// TestNTRowsOffLines checks the non-temporal stores of rows that do not start on a cache
// line (lineSplit at AVX-512: the partial lines at the ends through the cache, the whole
// lines between non-temporally; elsewhere nt16Head and ntHead) against the twins: the
// affine steps and the narrowing, y starting 0 to 33 elements past a 64-byte line, for
// lengths around a line, a vector and the bench's odd widths; the elements before and after
// y stay as they were.
func TestNTRowsOffLines(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	g := &goKernels
	const pad = 64 // elements each side of y, guarded
	for _, name := range simdLevels() {
		k := mustKernels(t, name)
		for _, n := range []int{1, 7, 15, 16, 17, 31, 32, 33, 63, 65, 1000, 1023} {
			tt, gamma, beta := values(r, n, true), values(r, n, false), values(r, n, false)
			mean, rstd := float32(r.NormFloat64()), float32(math.Exp(r.NormFloat64()*3))
			for off := 0; off < 34; off++ {
				// y16 and y32 at off elements past a 64-byte line of buffers guarded each side.
				buf16 := make([]uint16, n+2*pad+32)
				lead16 := int(-uintptr(unsafe.Pointer(&buf16[0]))&63) / 2
				for i := range buf16 {
					buf16[i] = guard16
				}
				y16 := buf16[lead16+pad+off : lead16+pad+off+n]
				buf32 := make([]float32, n+2*pad+16)
				lead32 := int(-uintptr(unsafe.Pointer(&buf32[0]))&63) / 4
				for i := range buf32 {
					buf32[i] = guard32
				}
				y32 := buf32[lead32+pad+off : lead32+pad+off+n]
				check16 := func(what string, want []uint16) {
					t.Helper()
					tag := fmt.Sprintf("%s/%s/n=%d/off=%d", name, what, n, off)
					same16(t, tag, y16, want)
					for i, v := range buf16 {
						if in := i >= lead16+pad+off && i < lead16+pad+off+n; !in && v != guard16 {
							t.Fatalf("%s: element %d past y written", tag, i-(lead16+pad+off))
						}
					}
				}
				for _, fma := range []bool{false, true} {
					f := affineForm{dt: ops.F32, fma: fma, nt: true}
					want32 := make([]float32, n)
					g.affine(f, want32, tt, gamma, beta, mean, rstd)
					k.affine(f, y32, tt, gamma, beta, mean, rstd)
					k.fence()
					tag := fmt.Sprintf("%s/affine%+v/n=%d/off=%d", name, f, n, off)
					same32(t, tag, y32, want32)
					for i, v := range buf32 {
						if in := i >= lead32+pad+off && i < lead32+pad+off+n; !in && math.Float32bits(v) != math.Float32bits(guard32) {
							t.Fatalf("%s: element %d past y written", tag, i-(lead32+pad+off))
						}
					}
					for _, dt := range []ops.DType{ops.F16, ops.BF16} {
						f := affineForm{dt: dt, fma: fma, nt: true}
						want := make([]uint16, n)
						g.affine16(f, want, tt, gamma, beta, mean, rstd)
						k.affine16(f, y16, tt, gamma, beta, mean, rstd)
						k.fence()
						check16(fmt.Sprintf("affine16%+v", f), want)
					}
				}
				for _, dt := range []ops.DType{ops.F16, ops.BF16} {
					f := convForm{dt: dt, nt: true}
					want := make([]uint16, n)
					g.narrow(f, want, tt)
					k.narrow(f, y16, tt)
					k.fence()
					check16(fmt.Sprintf("narrow%+v", f), want)
				}
			}
		}
	}
}
