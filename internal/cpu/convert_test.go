package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/fusednorm/fusednorm/internal/ops"
)

func TestConversionKernels(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	g := &goKernels
	all := make([]uint16, 1<<16)
	for i := range all {
		all[i] = uint16(i)
	}
	for _, name := range simdLevels() {
		k := mustKernels(t, name)
		// Every 16-bit pattern, widened.
		got, want := out32(len(all), nil), out32(len(all), nil)
		k.widen(convForm{dt: ops.F16}, got, all)
		g.widen(convForm{dt: ops.F16}, want, all)
		same32(t, name+"/widenF16/all", got, want)
		k.widen(convForm{dt: ops.BF16}, got, all)
		g.widen(convForm{dt: ops.BF16}, want, all)
		same32(t, name+"/widenBF16/all", got, want)

		for _, n := range append(kernelSizes, 1<<16) {
			tag := func(op string) string { return fmt.Sprintf("%s/%s/n=%d", name, op, n) }
			src16 := halves(r, n)
			got, want := out32(n, nil), out32(n, nil)
			k.widen(convForm{dt: ops.F16}, got, src16)
			g.widen(convForm{dt: ops.F16}, want, src16)
			same32(t, tag("widenF16"), got, want)
			k.widen(convForm{dt: ops.BF16}, got, src16)
			g.widen(convForm{dt: ops.BF16}, want, src16)
			same32(t, tag("widenBF16"), got, want)

			src := narrowInputs(r, n)
			got16, want16 := out16(n), out16(n)
			k.narrow(convForm{dt: ops.F16}, got16, src)
			g.narrow(convForm{dt: ops.F16}, want16, src)
			same16(t, tag("narrowF16"), got16, want16)
			k.narrow(convForm{dt: ops.BF16}, got16, src)
			g.narrow(convForm{dt: ops.BF16}, want16, src)
			same16(t, tag("narrowBF16"), got16, want16)
		}
	}
}
