package tests

import (
	"context"
	"fmt"
	"math"
	"testing"

	fn "github.com/fusednorm/fusednorm"
	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/plan"
	"github.com/fusednorm/fusednorm/internal/reference"
)

// The hard rows of spec §C.4a: exactly constant rows (every value of c below, rounded to the
// input dtype, stays constant) and rows far from zero (offset ± 1).
var (
	hardConsts  = []float64{0, 1, -2.7, 0.1, 1000.1, -3e4, 1e-3, 7.5e3}
	hardOffsets = []float64{1000, -1000, 1e4, 1000}
	hardDims    = []int{1, 7, 768, 1000, 4096, 4097}
	hardEps     = []float64{1e-5, 1e-12}
)

// hardRows checks the plan's robust statistics (spec §C.4a) on every backend and dtype:
// exactly constant rows give y = beta exactly (AddLayerNorm also mean = c and variance 0:
// rstd = 1/sqrt(eps) exactly), and rows of offset ± 1 give y within 1e-5·max(1, |gamma|) of float64 (f32; the
// 16-bit outputs within spec §C.5). Every output is also compared with the CPU plan's bits.
func (s *Suite) hardRows(t *testing.T) {
	t.Run("AddLayerNorm", s.hardAdd)
	t.Run("EmbedLayerNorm", s.hardEmbed)
}

// hardWeights are gamma (±0.5…1.5) and beta for rows of d elements.
func hardWeights(seed float64, d int) (gamma, beta []float64) {
	r := rng(seed)
	gamma = uniform(r, d, 0.5, 1.5)
	for i := range gamma {
		if r.IntN(4) == 0 {
			gamma[i] = -gamma[i]
		}
	}
	return gamma, uniform(r, d, -0.2, 0.2)
}

// hardAllow is the allowance for y against float64 on an offset row.
func hardAllow(dt fn.DType, ref, gmax float64, d int) float64 {
	if dt == fn.Float32 {
		return 1e-5 * math.Max(1, gmax)
	}
	return tol(dt, ref, gmax, d)
}

func (s *Suite) hardAdd(t *testing.T) {
	ctx := context.Background()
	k, err := s.Engine.GetKernel(addKernel, 1)
	if err != nil {
		t.Fatal(err)
	}
	nc := len(hardConsts)
	n := nc + len(hardOffsets)
	for _, dts := range ops.AddDTypeRows {
		x1t, x2t, gt, outT := dts[0], dts[1], dts[2], dts[3]
		for _, d := range hardDims {
			for _, eps := range hardEps {
				name := fmt.Sprintf("%v,%v,%v/D=%d/eps=%g", x1t, x2t, gt, d, eps)
				t.Run(name, func(t *testing.T) {
					r := rng(float64(d))
					x1, x2 := make([]float64, n*d), make([]float64, n*d)
					for row := range n {
						for i := range d {
							j := row*d + i
							if row < nc {
								x1[j] = hardConsts[row]
								x2[j] = 0.25 * float64(row%2) // constant too
							} else {
								x1[j] = hardOffsets[row-nc] + 2*r.Float64() - 1
								if row == n-1 {
									x2[j] = r.Float64() - 0.5
								}
							}
						}
					}
					gamma, beta := hardWeights(float64(d)+0.5, d)
					in := map[string]fn.Tensor{
						"x1T": makeTensor(x1t, []int{n, d}, x1), "x2T": makeTensor(x2t, []int{n, d}, x2),
						"gammaT": makeTensor(gt, []int{d}, gamma), "betaT": makeTensor(gt, []int{d}, beta),
					}
					attrs := map[string]any{"epsilon": eps}
					got, err := k.Run(ctx, in, attrs)
					if err != nil {
						t.Fatalf("run: %v", err)
					}
					a, _ := addOps(in, attrs, outT)
					y, mean, rstd := got["yT"], got["meanT"], got["rstdT"]
					wantBeta := values(makeTensor(outT, []int{d}, values(in["betaT"])))
					gmax := maxAbs(in["gammaT"])
					for row := range n {
						sum := reference.AddRow(a, row)
						if row < nc {
							if m := mean.At(row); m != float64(sum[0]) {
								t.Errorf("constant row %d (c=%g): mean %g, want %g exactly", row, sum[0], m, sum[0])
							}
							if rs, want := rstd.At(row), float64(plan.Rstd(float32(eps))); rs != want {
								t.Errorf("constant row %d (c=%g): rstd %g, want 1/sqrt(eps) = %g exactly (variance 0)", row, sum[0], rs, want)
							}
							for i := range d {
								if v := y.At(row*d + i); v != wantBeta[i] {
									t.Fatalf("constant row %d (c=%g): y[%d] = %g, want beta = %g exactly", row, sum[0], i, v, wantBeta[i])
								}
							}
							continue
						}
						_, _, y64 := reference.Stats64(sum, a.Epsilon, func(i int) float32 { return reference.At(a.Gamma, i) },
							func(i int) float32 { return reference.At(a.Beta, i) })
						for i, ref := range y64 {
							if v := y.At(row*d + i); math.Abs(v-ref) > hardAllow(outT, ref, gmax, d) {
								t.Fatalf("offset row %d (%g ± 1): y[%d] = %g, float64 %g (off by %.3g)", row, hardOffsets[row-nc], i, v, ref, math.Abs(v-ref))
							}
						}
					}
					s.crossCheck(t, "HardRows/AddLayerNorm", outT, got, d, nil, func(e *fn.Engine) (map[string]fn.Tensor, error) {
						rk, err := e.GetKernel(addKernel, 1)
						if err != nil {
							return nil, err
						}
						return rk.Run(ctx, in, attrs)
					})
				})
			}
		}
	}
}

func (s *Suite) hardEmbed(t *testing.T) {
	ctx := context.Background()
	k, err := s.Engine.GetKernel(embedKernel, 1)
	if err != nil {
		t.Fatal(err)
	}
	nc := len(hardConsts)
	n := nc + len(hardOffsets) // one token per word row
	for _, dt := range []fn.DType{fn.Float32, fn.Float16} {
		for _, h := range hardDims {
			for _, eps := range hardEps {
				t.Run(fmt.Sprintf("%v/H=%d/eps=%g", dt, h, eps), func(t *testing.T) {
					r := rng(float64(h) + 0.25)
					word := make([]float64, n*h)
					for row := range n {
						for i := range h {
							if row < nc {
								word[row*h+i] = hardConsts[row]
							} else {
								word[row*h+i] = hardOffsets[row-nc] + 2*r.Float64() - 1
							}
						}
					}
					// Position row 0 is zeros (the constant tokens' sums stay constant), row 1
					// small values added to the offset tokens.
					pos := append(make([]float64, h), uniform(r, h, -0.01, 0.01)...)
					ids, posIDs := make([]float64, n), make([]float64, n)
					for i := range ids {
						ids[i] = float64(i)
						if i >= nc {
							posIDs[i] = 1
						}
					}
					gamma, beta := hardWeights(float64(h)+0.75, h)
					in := map[string]fn.Tensor{
						"wordEmbeddingT": makeTensor(dt, []int{n, h}, word), "positionEmbeddingT": makeTensor(dt, []int{2, h}, pos),
						"gammaT": makeTensor(dt, []int{h}, gamma), "betaT": makeTensor(dt, []int{h}, beta),
						"inputIdsT": makeTensor(fn.Int32, []int{1, n}, ids), "positionIdsT": makeTensor(fn.Int32, []int{1, n}, posIDs),
					}
					attrs := map[string]any{"epsilon": eps}
					got, err := k.Run(ctx, in, attrs)
					if err != nil {
						t.Fatalf("run: %v", err)
					}
					w, x := embedOps(in, attrs)
					out := got["outputT"]
					wantBeta := values(in["betaT"])
					gmax := maxAbs(in["gammaT"])
					for tok := range n {
						if tok < nc {
							for i := range h {
								if v := out.At(tok*h + i); v != wantBeta[i] {
									t.Fatalf("constant token %d (c=%g): output[%d] = %g, want beta = %g exactly", tok, hardConsts[tok], i, v, wantBeta[i])
								}
							}
							continue
						}
						row := reference.EmbedRow(w, x, tok)
						_, _, y64 := reference.Stats64(row, w.Epsilon, func(i int) float32 { return reference.At(w.Gamma, i) },
							func(i int) float32 { return reference.At(w.Beta, i) })
						for i, ref := range y64 {
							if v := out.At(tok*h + i); math.Abs(v-ref) > hardAllow(dt, ref, gmax, h) {
								t.Fatalf("offset token %d (%g ± 1): output[%d] = %g, float64 %g (off by %.3g)", tok, hardOffsets[tok-nc], i, v, ref, math.Abs(v-ref))
							}
						}
					}
					s.crossCheck(t, "HardRows/EmbedLayerNorm", dt, got, h, nil, func(e *fn.Engine) (map[string]fn.Tensor, error) {
						rk, err := e.GetKernel(embedKernel, 1)
						if err != nil {
							return nil, err
						}
						return rk.Run(ctx, in, attrs)
					})
				})
			}
		}
	}
}
