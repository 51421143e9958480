package fusednorm_test

import (
	"context"
	"testing"

	"github.com/fusednorm/fusednorm"
)

// The tiny benchmarks of issue 17: one EmbedLayerNorm f32 (1,1,768) and one AddLayerNorm f32
// (1,768) call with every tensor on the device, either waited for one by one (Sync after
// each call) or submitted back to back (one Sync per b.N calls). They measure what a call
// costs beyond its kernel: validation, encoding, submission, cgo. The engine comes from
// FUSEDNORM_BACKEND (auto when unset): FUSEDNORM_BACKEND=dawn runs them on the GPU, or on
// lavapipe. Run with -benchmem: the steady state allocates nothing. The C twin is
// cgo/bench/tiny_bench.c.

// tinyCall is one tiny call on device tensors, with its engine.
type tinyCall struct {
	eng     *fusednorm.Engine
	call    func() error
	closers []interface{ Close() error }
}

func (tc *tinyCall) close() {
	for _, c := range tc.closers {
		c.Close()
	}
	tc.eng.Close()
}

// tinySetup prepares the op with its weights resident and every per-call tensor on the
// device (cmd/fusednorm-bench -tiny does the same).
func tinySetup(b *testing.B, op string) *tinyCall {
	b.Helper()
	eng, err := fusednorm.Open()
	if err != nil {
		b.Fatal(err)
	}
	tc := &tinyCall{eng: eng}
	const H = 768
	dev := func(t fusednorm.Tensor) fusednorm.Tensor {
		d, err := eng.Upload(t)
		if err != nil {
			b.Fatal(err)
		}
		tc.closers = append(tc.closers, d)
		return d.Tensor()
	}
	ramp := func(n int, scale float32) []float32 {
		s := make([]float32, n)
		for i := range s {
			s[i] = float32(i%97)*scale - 1
		}
		return s
	}
	ctx := context.Background()
	switch op {
	case "embed":
		const V, P = 64, 8
		e, err := eng.NewEmbedLayerNorm(fusednorm.EmbedWeights{
			Word: dev(fusednorm.FromFloat32(ramp(V*H, 0.01), V, H)), Position: dev(fusednorm.FromFloat32(ramp(P*H, 0.02), P, H)),
			Gamma: dev(fusednorm.FromFloat32(ramp(H, 0.003), H)), Beta: dev(fusednorm.FromFloat32(ramp(H, 0.001), H))})
		if err != nil {
			b.Fatal(err)
		}
		tc.closers = append(tc.closers, e)
		in := fusednorm.EmbedInputs{InputIDs: dev(fusednorm.FromInt32([]int32{5}, 1, 1))}
		out := fusednorm.EmbedOutputs{Output: dev(fusednorm.FromFloat32(make([]float32, H), 1, 1, H))}
		tc.call = func() error { return e.Run(ctx, in, &out) }
	case "add":
		a, err := eng.NewAddLayerNorm(fusednorm.AddLayerNormWeights{
			Gamma: dev(fusednorm.FromFloat32(ramp(H, 0.003), H)), Beta: dev(fusednorm.FromFloat32(ramp(H, 0.001), H))})
		if err != nil {
			b.Fatal(err)
		}
		tc.closers = append(tc.closers, a)
		x1, x2 := dev(fusednorm.FromFloat32(ramp(H, 0.01), 1, H)), dev(fusednorm.FromFloat32(ramp(H, 0.02), 1, H))
		out := fusednorm.AddLayerNormOutputs{Y: dev(fusednorm.FromFloat32(make([]float32, H), 1, H)),
			Mean: dev(fusednorm.FromFloat32(make([]float32, 1), 1, 1)), Rstd: dev(fusednorm.FromFloat32(make([]float32, 1), 1, 1))}
		tc.call = func() error { return a.Run(ctx, x1, x2, &out) }
	}
	b.Logf("%s on %s", op, eng.Info())
	return tc
}

func benchTiny(b *testing.B, op string, waitEach bool) {
	tc := tinySetup(b, op)
	defer tc.close()
	ctx := context.Background()
	for range 20 { // warm: pipelines, bind groups, pools
		if err := tc.call(); err != nil {
			b.Fatal(err)
		}
	}
	if err := tc.eng.Sync(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := tc.call(); err != nil {
			b.Fatal(err)
		}
		if waitEach {
			if err := tc.eng.Sync(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := tc.eng.Sync(ctx); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkTinyEmbedWaitEach(b *testing.B)   { benchTiny(b, "embed", true) }
func BenchmarkTinyEmbedBackToBack(b *testing.B) { benchTiny(b, "embed", false) }
func BenchmarkTinyAddWaitEach(b *testing.B)     { benchTiny(b, "add", true) }
func BenchmarkTinyAddBackToBack(b *testing.B)   { benchTiny(b, "add", false) }
