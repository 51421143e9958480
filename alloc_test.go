package fusednorm

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/fusednorm/fusednorm/internal/half"
	"github.com/fusednorm/fusednorm/internal/testalloc"
)

// allocTensor is a tensor of the dtype with random values (ids in [0, n) for Int32).
func allocTensor(r *rand.Rand, dt DType, n int, shape ...int) Tensor {
	t, err := NewTensor(dt, shape...)
	if err != nil {
		panic(err)
	}
	for i := range t.Len() {
		v := float32(r.NormFloat64())
		switch dt {
		case Float32:
			t.buf.F32[i] = v
		case Float16:
			t.buf.U16[i] = half.F32ToF16(v)
		case BFloat16:
			t.buf.U16[i] = half.F32ToBF16(v)
		case Int32:
			t.buf.I32[i] = int32(r.IntN(n))
		}
	}
	return t
}

// TestNoAllocsPerCall checks that a public call on the CPU backend allocates nothing in
// steady state when the caller provides every output, on one goroutine and on two.
func TestNoAllocsPerCall(t *testing.T) {
	testalloc.SkipUnderRace(t)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(31, 32))
	shapes := []struct {
		name    string
		b, s, h int
		threads int
	}{{"small", 1, 8, 64, 0}, {"large", 2, 64, 768, 2}}
	for _, sh := range shapes {
		eng, err := Open(WithBackend(BackendCPU), WithThreads(sh.threads))
		if err != nil {
			t.Fatal(err)
		}
		defer eng.Close()
		B, S, H := sh.b, sh.s, sh.h
		for _, dt := range []DType{Float32, Float16} {
			const V, G = 50, 2
			op, err := eng.NewEmbedLayerNorm(EmbedWeights{
				Word: allocTensor(r, dt, 0, V, H), Position: allocTensor(r, dt, 0, S, H), Segment: allocTensor(r, dt, 0, G, H),
				Gamma: allocTensor(r, dt, 0, H), Beta: allocTensor(r, dt, 0, H)})
			if err != nil {
				t.Fatal(err)
			}
			defer op.Close()
			in := EmbedInputs{InputIDs: allocTensor(r, Int32, V, B, S), SegmentIDs: allocTensor(r, Int32, G, B, S),
				Mask: allocTensor(r, Int32, 2, B, S), PositionIDs: allocTensor(r, Int32, S, 1, S)}
			out := EmbedOutputs{Output: allocTensor(r, dt, 0, B, S, H), MaskIndex: allocTensor(r, Int32, 1, B),
				EmbeddingSum: allocTensor(r, dt, 0, B, S, H)}
			testalloc.None(t, fmt.Sprintf("EmbedLayerNorm/%s/%v", sh.name, dt), func() {
				if err := op.Run(ctx, in, &out); err != nil {
					t.Fatal(err)
				}
			})
		}
		for _, row := range [][4]DType{{Float32, Float32, Float32, Float32}, {Float16, Float16, Float16, Float16}, {BFloat16, BFloat16, Float32, BFloat16}} {
			in := AddLayerNormInputs{X1: allocTensor(r, row[0], 0, B, S, H), X2: allocTensor(r, row[1], 0, B, S, H),
				Gamma: allocTensor(r, row[2], 0, H), Beta: allocTensor(r, row[2], 0, H), Bias: allocTensor(r, row[3], 0, H)}
			out := AddLayerNormOutputs{Y: allocTensor(r, row[3], 0, B, S, H), Mean: allocTensor(r, Float32, 0, B, S, 1),
				Rstd: allocTensor(r, Float32, 0, B, S, 1), X: allocTensor(r, row[3], 0, B, S, H)}
			testalloc.None(t, fmt.Sprintf("AddLayerNorm/%s/%v", sh.name, row), func() {
				if err := eng.AddLayerNorm(ctx, in, &out); err != nil {
					t.Fatal(err)
				}
			})
			testalloc.None(t, fmt.Sprintf("AddLayerNorm/%s/%v/options", sh.name, row), func() {
				if err := eng.AddLayerNorm(ctx, in, &out, Epsilon(1e-6), AdditionalOutput(true)); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// TestNoAllocsPerDeviceCall: a prepared op on device tensors allocates nothing in steady
// state on Dawn, a call waited for (Sync after it) and calls sharing a submit alike (the
// tiny benchmarks' two patterns), and one given only y (no hidden host statistics).
func TestNoAllocsPerDeviceCall(t *testing.T) {
	testalloc.SkipUnderRace(t)
	e := dawnEngine(t)
	if e == nil {
		return
	}
	ctx := context.Background()
	r := rand.New(rand.NewPCG(33, 34))
	const N, D = 4, 768
	op, err := e.NewAddLayerNorm(AddLayerNormWeights{Gamma: upload(t, e, allocTensor(r, Float32, 0, D)), Beta: upload(t, e, allocTensor(r, Float32, 0, D))})
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	x1, x2 := upload(t, e, allocTensor(r, Float32, 0, N, D)), upload(t, e, allocTensor(r, Float32, 0, N, D))
	out := AddLayerNormOutputs{Y: devLike(t, e, Float32, N, D).Tensor(), NoStats: true}
	testalloc.None(t, "AddLayerNorm on device tensors, Sync after each", func() {
		if err := op.Run(ctx, x1, x2, &out); err != nil {
			t.Fatal(err)
		}
		if err := e.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	})
	testalloc.None(t, "AddLayerNorm on device tensors, back to back", func() {
		if err := op.Run(ctx, x1, x2, &out); err != nil {
			t.Fatal(err)
		}
	})
	// Only y given, mean and rstd left zero: skipped as with NoStats, so the call neither
	// allocates host outputs for them nor waits to read them back.
	onlyY := AddLayerNormOutputs{Y: out.Y}
	testalloc.None(t, "AddLayerNorm on device tensors, only y given", func() {
		if err := op.Run(ctx, x1, x2, &onlyY); err != nil {
			t.Fatal(err)
		}
	})
	if !onlyY.Mean.IsZero() || !onlyY.Rstd.IsZero() {
		t.Fatal("a call with only a device y filled in host mean or rstd")
	}
	if err := e.Sync(ctx); err != nil {
		t.Fatal(err)
	}
}
