package fusednorm_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/x448/float16"

	"github.com/fusednorm/fusednorm"
	"github.com/fusednorm/fusednorm/internal/cases"
)

// The benchmarks run the public API on the CPU for the smallest case of each op and dtype
// in internal/cases/<op>/bench.json, with b.SetBytes from the case's bytes model (what the op
// must read and write), so `go test -bench .` reports MB/s comparable with the benchmark
// binary's GB/s. cmd/fusednorm-bench runs every case, with a bandwidth probe beside it.

// benchCase is the part of a bench.json case these benchmarks use.
type benchCase struct {
	Name  string         `json:"name"`
	DType string         `json:"dtype"`
	Shape map[string]int `json:"shape"`
	Bytes struct{ Read, Write int64 }
}

// smallestCase returns the case of the dtype with the fewest bytes in
// internal/cases/<dir>/bench.json.
func smallestCase(b *testing.B, dir, dtype string) benchCase {
	b.Helper()
	raw, err := cases.File(dir, "bench.json")
	if err != nil {
		b.Fatal(err)
	}
	var f struct{ Cases []benchCase }
	if err := json.Unmarshal(raw, &f); err != nil {
		b.Fatal(err)
	}
	var best *benchCase
	for i := range f.Cases {
		c := &f.Cases[i]
		if c.DType == dtype && (best == nil || c.Bytes.Read+c.Bytes.Write < best.Bytes.Read+best.Bytes.Write) {
			best = c
		}
	}
	if best == nil {
		b.Fatalf("%s/%s/bench.json has no %s case", cases.Dir, dir, dtype)
	}
	return *best
}

func openCPU(b *testing.B) *fusednorm.Engine {
	b.Helper()
	eng, err := fusednorm.Open(fusednorm.WithBackend(fusednorm.BackendCPU))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { eng.Close() })
	return eng
}

// randTensor is a seeded tensor of the dtype with values uniform in [-scale, scale).
func randTensor(r *rand.Rand, dtype string, scale float32, shape ...int) fusednorm.Tensor {
	n := 1
	for _, d := range shape {
		n *= d
	}
	if dtype == "float16" {
		h := make([]float16.Float16, n)
		for i := range h {
			h[i] = float16.Fromfloat32(scale * (2*r.Float32() - 1))
		}
		return fusednorm.FromFloat16(h, shape...)
	}
	f := make([]float32, n)
	for i := range f {
		f[i] = scale * (2*r.Float32() - 1)
	}
	return fusednorm.FromFloat32(f, shape...)
}

// embedBench is the smallest EmbedLayerNorm bench.json case of a dtype: seeded weights and
// inputs with a right-padded mask.
func embedBench(b *testing.B, dt string) (benchCase, fusednorm.EmbedWeights, fusednorm.EmbedInputs) {
	c := smallestCase(b, "embedlayernorm", dt)
	B, S, H := c.Shape["B"], c.Shape["S"], c.Shape["H"]
	V, P, G := c.Shape["V"], c.Shape["P"], c.Shape["G"]
	r := rand.New(rand.NewPCG(1, 0))
	w := fusednorm.EmbedWeights{
		Word:     randTensor(r, dt, 0.5, V, H),
		Position: randTensor(r, dt, 0.5, P, H),
		Segment:  randTensor(r, dt, 0.5, G, H),
		Gamma:    randTensor(r, dt, 1, H),
		Beta:     randTensor(r, dt, 0.1, H),
	}
	ids, seg, mask := make([]int32, B*S), make([]int32, B*S), make([]int32, B*S)
	for bi := range B {
		n := S/2 + r.IntN(S-S/2+1) // right-padded mask
		for s := range S {
			i := bi*S + s
			ids[i] = int32(r.IntN(V))
			seg[i] = int32(min(G-1, 2*s/S))
			if s < n {
				mask[i] = 1
			}
		}
	}
	in := fusednorm.EmbedInputs{
		InputIDs:   fusednorm.FromInt32(ids, B, S),
		SegmentIDs: fusednorm.FromInt32(seg, B, S),
		Mask:       fusednorm.FromInt32(mask, B, S),
	}
	return c, w, in
}

func BenchmarkEmbedLayerNorm(b *testing.B) {
	for _, dt := range []string{"float32", "float16"} {
		c := smallestCase(b, "embedlayernorm", dt)
		b.Run(c.Name, func(b *testing.B) {
			c, w, in := embedBench(b, dt)
			eng := openCPU(b)
			op, err := eng.NewEmbedLayerNorm(w)
			if err != nil {
				b.Fatal(err)
			}
			defer op.Close()
			out := fusednorm.EmbedOutputs{WantMaskIndex: true}
			ctx := context.Background()
			if err := op.Run(ctx, in, &out); err != nil { // allocates the outputs, reused below
				b.Fatal(err)
			}
			b.SetBytes(c.Bytes.Read + c.Bytes.Write)
			for b.Loop() {
				if err := op.Run(ctx, in, &out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEmbedBindKey is the same call through the bind-key Kernel, which keeps the op it
// prepared for the same weight tensors (kernel), against binding the weights on every call
// (once, EmbedLayerNormOnce: what the Kernel did before it kept them). On the backend
// FUSEDNORM_BACKEND names (default: auto).
func BenchmarkEmbedBindKey(b *testing.B) {
	c, w, in := embedBench(b, "float32")
	eng, err := fusednorm.Open()
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close()
	ctx := context.Background()
	b.Run("kernel", func(b *testing.B) {
		k, err := eng.GetKernel("com.microsoft.EmbedLayerNormalization", 1)
		if err != nil {
			b.Fatal(err)
		}
		defer k.Close()
		inputs := map[string]fusednorm.Tensor{"inputIdsT": in.InputIDs, "segmentIdsT": in.SegmentIDs, "maskT": in.Mask,
			"wordEmbeddingT": w.Word, "positionEmbeddingT": w.Position, "segmentEmbeddingT": w.Segment, "gammaT": w.Gamma, "betaT": w.Beta}
		b.SetBytes(c.Bytes.Read + c.Bytes.Write)
		for b.Loop() {
			if _, err := k.Run(ctx, inputs, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("once", func(b *testing.B) {
		b.SetBytes(c.Bytes.Read + c.Bytes.Write)
		for b.Loop() {
			var out fusednorm.EmbedOutputs
			if err := eng.EmbedLayerNormOnce(ctx, w, in, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkAddLayerNorm(b *testing.B) {
	for _, dt := range []string{"float32", "float16"} {
		c := smallestCase(b, "addlayernorm", dt)
		b.Run(c.Name, func(b *testing.B) {
			N, D := c.Shape["N"], c.Shape["D"]
			r := rand.New(rand.NewPCG(2, 0))
			eng := openCPU(b)
			in := fusednorm.AddLayerNormInputs{
				X1:    randTensor(r, dt, 1, N, D),
				X2:    randTensor(r, dt, 1, N, D),
				Gamma: randTensor(r, dt, 1, D),
				Beta:  randTensor(r, dt, 0.1, D),
				Bias:  randTensor(r, dt, 0.1, D),
			}
			var out fusednorm.AddLayerNormOutputs
			ctx := context.Background()
			opt := fusednorm.AdditionalOutput(true)
			if err := eng.AddLayerNorm(ctx, in, &out, opt); err != nil { // allocates the outputs
				b.Fatal(err)
			}
			b.SetBytes(c.Bytes.Read + c.Bytes.Write)
			for b.Loop() {
				if err := eng.AddLayerNorm(ctx, in, &out, opt); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
