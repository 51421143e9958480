//go:build fusednorm_phases

package cpu

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// BenchmarkRowPhases is where an AddLayerNorm row's time goes, at one thread: ns a row in
// each phase (rowPhase), and "between" (the call's time less their sum: the next row's
// lead, the loop, the marks' own clock reads, about 20 ns each). The bench case's form:
// 16-bit x1, x2, gamma, beta and bias row, the x output; N rows of D (N, D from the
// environment, default 16384 and 4096; DT=f32 for float32), past the caches as in the
// bench. Only with -tags fusednorm_phases:
//
//	go test -tags fusednorm_phases ./cpu -run XXX -bench RowPhases -benchtime 20x
//
// Two builds compare phase by phase when run at the same time on cores of their own.
func BenchmarkRowPhases(b *testing.B) {
	N, D := 16384, 4096
	envInt("N", &N)
	envInt("D", &D)
	dt := envDType(ops.F16)
	r := rand.New(rand.NewPCG(1, 2))
	block := randBuf(r, dt, 1<<16+8, 1)
	mk := func(n int) ops.Buf { // the block repeated: seeding N·D values one by one is slow
		v := ops.Buf{DType: dt}
		if dt == ops.F32 {
			v.F32 = make([]float32, n)
			for i := 0; i < n; i += len(block.F32) {
				copy(v.F32[i:], block.F32)
			}
			return v
		}
		v.U16 = make([]uint16, n)
		for i := 0; i < n; i += len(block.U16) {
			copy(v.U16[i:], block.U16)
		}
		return v
	}
	a := ops.AddLN{N: N, D: D, X1: mk(N * D), X2: mk(N * D), Gamma: mk(D), Beta: mk(D), Bias: mk(D),
		Epsilon: 1e-5, Y: mk(N * D), X: mk(N * D), Mean: make([]float32, N), Rstd: make([]float32, N)}
	be := newTunedBackend(b, Options{Threads: 1}, defaultTuning())
	b.Run(fmt.Sprintf("%v_%dx%d", dt, N, D), func(b *testing.B) {
		var sum [numPhases]int64
		for b.Loop() {
			phaseReset()
			if err := be.AddLayerNorm(context.Background(), &a); err != nil {
				b.Fatal(err)
			}
			for p, ns := range phaseNs {
				sum[p] += ns
			}
		}
		rows := float64(b.N) * float64(N)
		between := float64(b.Elapsed().Nanoseconds())
		for p, ns := range sum {
			b.ReportMetric(float64(ns)/rows, phaseNames[p]+"-ns/row")
			between -= float64(ns)
		}
		b.ReportMetric(between/rows, "between-ns/row")
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/rows, "ns/row")
	})
}
