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
	"github.com/fusednorm/fusednorm/internal/testkit"
)

// The outlier rows of spec §C.4b: rows of N(0, 1) whose first element lies k standard
// deviations out, both signs, where plan v2's error grew with k. Every output must meet the
// bound against float64 (boundExcess), and equal the CPU plan's bits.
var (
	outlierKs   = []float64{3, 30, 300, 1000}
	outlierDims = []int{32, 100, 768, 1023, 4096, 8192}
)

// outlierRows is the input rows: one per k and sign, then two rows without an outlier.
func outlierRows(seed float64, d int) (x []float64, rows int) {
	r := rng(seed)
	rows = 2*len(outlierKs) + 2
	x = make([]float64, 0, rows*d)
	for row := range rows {
		v := make([]float64, d)
		for i := range v {
			v[i] = r.NormFloat64()
		}
		if row < 2*len(outlierKs) {
			k := outlierKs[row/2]
			if row%2 == 1 {
				k = -k
			}
			v[0] = k + 0.1*r.NormFloat64()
		}
		x = append(x, v...)
	}
	return x, rows
}

// boundExcess is how far an output y of dtype dt lies beyond spec §C.4b's bound,
// 2⁻²⁴·K·(|γ|·(1 + |z|) + |β|) plus half an ulp of the output dtype (16-bit outputs), against
// the float64 result y64 = γ·z + β of the same (rounded) inputs; ≤ 0 when it holds. It also
// returns the error in units of 2⁻²⁴·(|γ|·(1 + |z|) + |β|), for the log.
func boundExcess(dt fn.DType, y, z, gamma, beta float64) (excess, units float64) {
	y64 := gamma*z + beta
	unit := 0x1p-24 * (math.Abs(gamma)*(1+math.Abs(z)) + math.Abs(beta))
	err := math.Abs(y - y64)
	if dt != fn.Float32 {
		err = math.Max(0, err-0.5*math.Max(testkit.ULPOf(dt, y), testkit.ULPOf(dt, y64)))
	}
	return err - plan.K*unit, err / unit
}

// checkBound checks every output of one row against boundExcess; it returns the worst
// error in units.
func checkBound(t *testing.T, what string, dt fn.DType, y func(i int) float64, x []float32, eps float32, gamma, beta func(i int) float32) float64 {
	t.Helper()
	mean, rstd, _ := reference.Stats64(x, eps, gamma, beta)
	var worst float64
	for i, v := range x {
		z := (float64(v) - mean) * rstd
		excess, units := boundExcess(dt, y(i), z, float64(gamma(i)), float64(beta(i)))
		worst = max(worst, units)
		if excess > 0 {
			t.Fatalf("%s: y[%d] = %.9g, float64 %.9g: %.1f units of 2⁻²⁴·(|γ|(1+|z|)+|β|), the bound is K = %d (spec §C.4b)",
				what, i, y(i), float64(gamma(i))*z+float64(beta(i)), units, plan.K)
		}
	}
	return worst
}

// outliers checks spec §C.4b's bound on the outlier rows, both ops, every dtype row.
func (s *Suite) outliers(t *testing.T) {
	t.Run("AddLayerNorm", s.outlierAdd)
	t.Run("EmbedLayerNorm", s.outlierEmbed)
}

func (s *Suite) outlierAdd(t *testing.T) {
	ctx := context.Background()
	k, err := s.Engine.GetKernel(addKernel, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, dts := range ops.AddDTypeRows {
		x1t, x2t, gt, outT := dts[0], dts[1], dts[2], dts[3]
		for _, d := range outlierDims {
			t.Run(fmt.Sprintf("%v,%v,%v/D=%d", x1t, x2t, gt, d), func(t *testing.T) {
				x1, n := outlierRows(float64(d)+0.125, d)
				r := rng(float64(d) + 0.375)
				x2 := uniform(r, n*d, -1e-3, 1e-3) // small: the outlier stays where it is
				gamma, beta := hardWeights(float64(d)+0.625, d)
				in := map[string]fn.Tensor{
					"x1T": makeTensor(x1t, []int{n, d}, x1), "x2T": makeTensor(x2t, []int{n, d}, x2),
					"gammaT": makeTensor(gt, []int{d}, gamma), "betaT": makeTensor(gt, []int{d}, beta),
				}
				attrs := map[string]any{"epsilon": 1e-5}
				got, err := k.Run(ctx, in, attrs)
				if err != nil {
					t.Fatalf("run: %v", err)
				}
				a, _ := addOps(in, attrs, outT)
				y := got["yT"]
				g := func(i int) float32 { return reference.At(a.Gamma, i) }
				b := func(i int) float32 { return reference.At(a.Beta, i) }
				var worst float64
				for row := range n {
					what := fmt.Sprintf("row %d", row)
					at := func(i int) float64 { return y.At(row*d + i) }
					worst = max(worst, checkBound(t, what, outT, at, reference.AddRow(a, row), a.Epsilon, g, b))
				}
				t.Logf("worst error %.2f units of 2⁻²⁴·(|γ|(1+|z|)+|β|) (K = %d)", worst, plan.K)
				s.crossCheck(t, "Outliers/AddLayerNorm", outT, got, d, nil, func(e *fn.Engine) (map[string]fn.Tensor, error) {
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

func (s *Suite) outlierEmbed(t *testing.T) {
	ctx := context.Background()
	k, err := s.Engine.GetKernel(embedKernel, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, dt := range []fn.DType{fn.Float32, fn.Float16} {
		for _, h := range outlierDims {
			t.Run(fmt.Sprintf("%v/H=%d", dt, h), func(t *testing.T) {
				word, n := outlierRows(float64(h)+0.875, h)
				ids := make([]float64, n)
				for i := range ids {
					ids[i] = float64(i)
				}
				gamma, beta := hardWeights(float64(h)+0.25, h)
				in := map[string]fn.Tensor{
					"wordEmbeddingT": makeTensor(dt, []int{n, h}, word), "positionEmbeddingT": makeTensor(dt, []int{1, h}, make([]float64, h)),
					"gammaT": makeTensor(dt, []int{h}, gamma), "betaT": makeTensor(dt, []int{h}, beta),
					"inputIdsT": makeTensor(fn.Int32, []int{1, n}, ids), "positionIdsT": makeTensor(fn.Int32, []int{1, n}, make([]float64, n)),
				}
				attrs := map[string]any{"epsilon": 1e-5}
				got, err := k.Run(ctx, in, attrs)
				if err != nil {
					t.Fatalf("run: %v", err)
				}
				w, x := embedOps(in, attrs)
				out := got["outputT"]
				g := func(i int) float32 { return reference.At(w.Gamma, i) }
				b := func(i int) float32 { return reference.At(w.Beta, i) }
				var worst float64
				for tok := range n {
					at := func(i int) float64 { return out.At(tok*h + i) }
					worst = max(worst, checkBound(t, fmt.Sprintf("token %d", tok), dt, at, reference.EmbedRow(w, x, tok), w.Epsilon, g, b))
				}
				t.Logf("worst error %.2f units of 2⁻²⁴·(|γ|(1+|z|)+|β|) (K = %d)", worst, plan.K)
				s.crossCheck(t, "Outliers/EmbedLayerNorm", dt, got, h, nil, func(e *fn.Engine) (map[string]fn.Tensor, error) {
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
