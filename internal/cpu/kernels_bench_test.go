package cpu

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/plan"
)

// Benchmarks run each kernel and each whole op at every level under test, single-threaded:
//
//	go test ./cpu -run XXX -bench . -benchtime 2s
//
// Bytes per op count what the op must read and write (every gathered row, as ONNX Runtime's
// bench in tools/oracle counts them), so MB/s compares with its kernel_GBps.

// atLevels runs fn as a sub-benchmark per level under test.
func atLevels(b *testing.B, fn func(b *testing.B, level string)) {
	for _, name := range testLevels() {
		b.Run(name, func(b *testing.B) { fn(b, name) })
	}
}

// benchRow is BERT-base's hidden size: one row is the unit every kernel sees. ROW sets
// another for BenchmarkKernels (ROW=4096: the long rows of the large bench shapes, which
// spill L1).
const benchRow = 768

// normal returns n float32 values from N(0, 1): realistic activations. (The test data's
// subnormals would time the processor's microcode assists rather than the kernels.)
func normal(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

func BenchmarkKernels(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	n := benchRow
	envInt("ROW", &n)
	x, y, g, be := normal(r, n), make([]float32, n), normal(r, n), normal(r, n)
	h1, h2, h3, bits := halves(r, n), halves(r, n), halves(r, n), make([]uint16, n)
	part, part2 := make([]float32, plan.MaxW), make([]float32, plan.MaxW)
	rowPart := make([]float32, 2*plan.MaxVecW) // the plans' 2·W, for the entries that take one
	p32, p16 := plan.For(n, false, plan.Contraction{}), plan.For(n, true, plan.Contraction{})
	mask := make([]int32, n) // all 1: both rules scan the whole row
	for i := range mask {
		mask[i] = 1
	}
	kernels := []struct {
		name  string
		bytes int
		fn    func(k *kernels)
	}{
		// The second pass writes e back into its row: y drifts by the shift each round,
		// which costs nothing (no subnormals, no overflow in any benchmark's rounds).
		{"accumulateShift", 4 * n, func(k *kernels) { k.accumulate(sumForm{}, part, nil, x, 0.25) }},
		{"accumulateDev", 8 * n, func(k *kernels) { k.accumulate(sumForm{dev: true}, part, part2, y, 0.5) }},
		{"accumulateDevFMA", 8 * n, func(k *kernels) { k.accumulate(sumForm{dev: true, fma: true}, part, part2, y, 0.5) }},
		{"affine", 16 * n, func(k *kernels) { k.affine(affineForm{dt: ops.F32}, y, x, g, be, 0.5, 1.5) }},
		{"affineFMA", 16 * n, func(k *kernels) { k.affine(affineForm{dt: ops.F32, fma: true}, y, x, g, be, 0.5, 1.5) }},
		{"embedSumF16", 12 * n, func(k *kernels) { k.embedSum(embedForm{seg: true}, y, bits, h1, h2, h3) }},
		{"addRow2", 12 * n, func(k *kernels) { k.addRow(addForm{dt: ops.F32}, y, nil, x, g, nil) }},
		{"addRow3", 16 * n, func(k *kernels) { k.addRow(addForm{dt: ops.F32, bias: true}, y, nil, x, g, be) }},
		{"addTo", 12 * n, func(k *kernels) { k.addTo(y, x) }},
		{"widenF16", 6 * n, func(k *kernels) { k.widen(convForm{dt: ops.F16}, y, h1) }},
		{"widenBF16", 6 * n, func(k *kernels) { k.widen(convForm{dt: ops.BF16}, y, h1) }},
		{"narrowF16", 6 * n, func(k *kernels) { k.narrow(convForm{dt: ops.F16}, bits, x) }},
		{"narrowBF16", 6 * n, func(k *kernels) { k.narrow(convForm{dt: ops.BF16}, bits, x) }},
		{"maskCountOnes", 4 * n, func(k *kernels) { k.mask(ops.MaskCountOnes, mask) }},
		{"maskFirstZero", 4 * n, func(k *kernels) { k.mask(ops.MaskFirstZero, mask) }},
		// The 16-bit AddLayerNorm row: first pass with a bias row, x stored, affine step.
		{"addSum16", 10 * n, func(k *kernels) { k.addSum16(addForm{dt: ops.F16, bias: true}, part, y, nil, h1, h2, h3, 0.25) }},
		{"addSum16X", 12 * n, func(k *kernels) {
			k.addSum16(addForm{dt: ops.F16, bias: true, x: true}, part, y, bits, h1, h2, h3, 0.25)
			k.fence()
		}},
		// A row's second pass and its two trees under the plan (float32 row), and the
		// 16-bit first pass with its tree: one kernel where the level has it
		// (addSum16Tree), else the pass and then planTree.
		{"devSums", 8 * n, func(k *kernels) { s, sq := k.devSums(&p32, rowPart, y, 0.5); benchSink = s + sq }},
		{"addSum16Tree", 10 * n, func(k *kernels) {
			f := addForm{dt: ops.F16, bias: true}
			s, ok := k.addSum16Tree(f, &p16, rowPart, y, nil, h1, h2, h3, 0.25)
			if !ok {
				k.addSum16(f, rowPart[:p16.W], y, nil, h1, h2, h3, 0.25)
				s = k.planTree(&p16, rowPart)
			}
			benchSink = s
		}},
		{"affine16H", 10 * n, func(k *kernels) { k.affineH(affineForm{dt: ops.F16}, bits, x, h1, h2, 0.5, 1.5) }},
		{"affine16HFMA", 10 * n, func(k *kernels) { k.affineH(affineForm{dt: ops.F16, fma: true}, bits, x, h1, h2, 0.5, 1.5) }},
	}
	for _, k := range kernels {
		b.Run(k.name, func(b *testing.B) {
			atLevels(b, func(b *testing.B, level string) {
				b.SetBytes(int64(k.bytes))
				ks := mustKernels(b, level)
				for b.Loop() {
					k.fn(ks)
				}
			})
		})
	}
}

// benchSink keeps the benchmarks' sums alive.
var benchSink float32

// BenchmarkEmbedLayerNorm is the bench shape: f32, B=8, S=512, H=768, V=30522, P=512, two
// segment rows, mask_index wanted; with and without the embedding_sum output.
func BenchmarkEmbedLayerNorm(b *testing.B) {
	const B, S, H, V, P, G = 8, 512, 768, 30522, 512, 2
	r := rand.New(rand.NewPCG(2, 2))
	f32 := func(n int) ops.Buf {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64() * 0.05)
		}
		return ops.Buf{DType: ops.F32, F32: v}
	}
	w := ops.EmbedWeights{DType: ops.F32, H: H, V: V, P: P, G: G,
		Word: f32(V * H), Pos: f32(P * H), Seg: f32(G * H), Gamma: f32(H), Beta: f32(H),
		Epsilon: 1e-12, Rule: ops.MaskCountOnes}
	in := benchEmbedInputs(r, B, S, V, G)
	tokens := B * S
	for _, withSum := range []bool{false, true} {
		name := "f32_8x512x768"
		if withSum {
			name += "+sum"
		}
		b.Run(name, func(b *testing.B) {
			atLevels(b, func(b *testing.B, level string) {
				op, err := newBackend(b, Options{Threads: 1, Level: level}).PrepareEmbed(&w)
				if err != nil {
					b.Fatal(err)
				}
				awaitHuge(op)
				out := ops.EmbedOutputs{Out: f32(tokens * H), MaskIndex: make([]int32, B)}
				bytes := 3*tokens*H*4 + 3*tokens*4 + 2*H*4 + tokens*H*4 + B*4
				if withSum {
					out.Sum = f32(tokens * H)
					bytes += tokens * H * 4
				}
				b.SetBytes(int64(bytes))
				for b.Loop() {
					if err := op.Run(context.Background(), &in, &out); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e6/float64(b.N), "ms/op")
			})
		})
	}
}

// benchEmbedInputs are the bench inputs: random word ids, the first half of each sequence
// segment 0 and the second segment 1, every mask bit set.
func benchEmbedInputs(r *rand.Rand, B, S, V, G int) ops.EmbedInputs {
	in := ops.EmbedInputs{B: B, S: S, IDs: make([]int32, B*S), SegIDs: make([]int32, B*S), Mask: make([]int32, B*S)}
	for i := range in.IDs {
		in.IDs[i] = int32(r.IntN(V))
		in.SegIDs[i] = int32(i % S * G / S)
		in.Mask[i] = 1
	}
	return in
}

// BenchmarkAddLayerNorm is the bench shape: f32 (4096, 768) with a bias row (ORT's
// SkipLayerNormalization "beta+bias -> output"), and with the x output as well.
func BenchmarkAddLayerNorm(b *testing.B) {
	const N, D = 4096, 768
	r := rand.New(rand.NewPCG(3, 3))
	f32 := func(n int) ops.Buf { return ops.Buf{DType: ops.F32, F32: normal(r, n)} }
	x1, x2, gamma, beta, bias := f32(N*D), f32(N*D), f32(D), f32(D), f32(D)
	for _, withX := range []bool{false, true} {
		name := "f32_4096x768"
		if withX {
			name += "+x"
		}
		b.Run(name, func(b *testing.B) {
			atLevels(b, func(b *testing.B, level string) {
				be := newBackend(b, Options{Threads: 1, Level: level})
				a := ops.AddLN{N: N, D: D, X1: x1, X2: x2, Gamma: gamma, Beta: beta, Bias: bias,
					Epsilon: 1e-5, Y: f32(N * D), Mean: make([]float32, N), Rstd: make([]float32, N)}
				bytes := 3*N*D*4 + 3*D*4 + 2*N*4
				if withX {
					a.X = f32(N * D)
					bytes += N * D * 4
				}
				b.SetBytes(int64(bytes))
				for b.Loop() {
					if err := be.AddLayerNorm(context.Background(), &a); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e6/float64(b.N), "ms/op")
			})
		})
	}
}
