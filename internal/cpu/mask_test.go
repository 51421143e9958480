package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// TestMaskKernels checks the mask_index rules' kernels against their twins: masks of 0s,
// 1s and other values (which neither rule may take for a 1 or a 0), the first 0 at every
// place, and guard elements after each mask that would change the answer if read.
func TestMaskKernels(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	g := &goKernels
	others := []int32{2, -1, 3, math.MaxInt32, math.MinInt32, 1 << 16, 0x10001}
	for _, name := range simdLevels() {
		k := mustKernels(t, name)
		for _, n := range append(kernelSizes, 1<<16) {
			buf := make([]int32, n+guards)
			m := buf[:n]
			for i := range buf[n:] {
				buf[n+i] = int32(i % 2) // a 0 and a 1 right after the mask
			}
			check := func(what string) {
				t.Helper()
				if got, want := k.mask(ops.MaskCountOnes, m), g.mask(ops.MaskCountOnes, m); got != want {
					t.Errorf("%s/maskCountOnes/n=%d/%s: %d, want %d", name, n, what, got, want)
				}
				if got, want := k.mask(ops.MaskFirstZero, m), g.mask(ops.MaskFirstZero, m); got != want {
					t.Errorf("%s/maskFirstZero/n=%d/%s: %d, want %d", name, n, what, got, want)
				}
			}
			// Random 0s, 1s and others.
			for i := range m {
				switch c := r.IntN(8); {
				case c < 3:
					m[i] = 1
				case c == 3:
					m[i] = 0
				default:
					m[i] = others[r.IntN(len(others))]
				}
			}
			check("mixed")
			// No 0: 1s and others; then a single 0 at each place (every place up to 300,
			// a sample beyond).
			for i := range m {
				m[i] = 1
				if r.IntN(3) == 0 {
					m[i] = others[r.IntN(len(others))]
				}
			}
			check("no zero")
			for at := 0; at < n; at++ {
				if at > 300 && r.IntN(64) != 0 {
					continue
				}
				old := m[at]
				m[at] = 0
				check(fmt.Sprintf("zero at %d", at))
				m[at] = old
			}
		}
	}
}
