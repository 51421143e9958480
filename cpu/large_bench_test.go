package cpu

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// BenchmarkAddLayerNormLarge is the long-row bench shapes (rows of 3, 16 and 32 KiB), f32
// with a bias row and the x output, as the bench tool runs them (fewer rows). The knobs of
// stream.go/rowstats.go can be set from the environment to compare settings in one build:
// PFA (prefetchAhead), LONG (longRow: 1000000 = the unchunked passes), CHUNK (passChunk).
func BenchmarkAddLayerNormLarge(b *testing.B) {
	if v, err := strconv.Atoi(os.Getenv("PFA")); err == nil {
		old := prefetchAhead
		prefetchAhead = v
		defer func() { prefetchAhead = old }()
	}
	if v, err := strconv.Atoi(os.Getenv("LONG")); err == nil {
		old := longRow
		longRow = v
		defer func() { longRow = old }()
	}
	if v, err := strconv.Atoi(os.Getenv("CHUNK")); err == nil {
		old := passChunk
		passChunk = v
		defer func() { passChunk = old }()
	}
	for _, sh := range [][2]int{{4096, 768}, {16384, 768}, {4096, 4096}, {2048, 8192}} {
		N, D := sh[0], sh[1]
		r := rand.New(rand.NewPCG(4, 4))
		f32 := func(n int) ops.Buf { return ops.Buf{DType: ops.F32, F32: normal(r, n)} }
		x1, x2, gamma, beta, bias := f32(N*D), f32(N*D), f32(D), f32(D), f32(D)
		b.Run(fmt.Sprintf("f32_%dx%d+x", N, D), func(b *testing.B) {
			be := newBackend(b, Options{Threads: 1})
			a := ops.AddLN{N: N, D: D, X1: x1, X2: x2, Gamma: gamma, Beta: beta, Bias: bias,
				Epsilon: 1e-5, Y: f32(N * D), X: f32(N * D), Mean: make([]float32, N), Rstd: make([]float32, N)}
			b.SetBytes(int64(4*N*D*4 + 3*D*4 + 2*N*4))
			for b.Loop() {
				if err := be.AddLayerNorm(context.Background(), &a); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e6/float64(b.N), "ms/op")
		})
	}
}
