package plan

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
)

// exactFMA32 rounds a·b+c computed exactly with big.Float to float32 (nearest-even).
func exactFMA32(a, b, c float32) float32 {
	x := new(big.Float).SetPrec(0).SetMode(big.ToNearestEven)
	x.SetPrec(2000)
	x.Mul(big.NewFloat(float64(a)).SetPrec(2000), big.NewFloat(float64(b)).SetPrec(2000))
	x.Add(x, big.NewFloat(float64(c)).SetPrec(2000))
	f, _ := x.Float32()
	return f
}

func TestFMA32MatchesExactRounding(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200000; i++ {
		a := math.Float32frombits(r.Uint32())
		b := math.Float32frombits(r.Uint32())
		c := math.Float32frombits(r.Uint32())
		if i%2 == 0 { // bring c near a·b so that cancellation and ties are exercised
			c = -float32(float64(a)*float64(b)) * (1 + float32(r.IntN(5)-2)*0x1p-23)
		}
		if isBad(a) || isBad(b) || isBad(c) || isBad(a*b) {
			continue
		}
		got, want := FMA32(a, b, c), exactFMA32(a, b, c)
		if math.Float32bits(got) != math.Float32bits(want) && !(got == 0 && want == 0) {
			t.Fatalf("FMA32(%g, %g, %g) = %g, want %g", a, b, c, got, want)
		}
	}
}

// A case where rounding a float64 fma to float32 is wrong: the f64 result lands exactly on a
// float32 tie that the exact value is just above.
func TestFMA32DoubleRoundingCase(t *testing.T) {
	a := float32(1 + 0x1p-23)
	b := float32(1 + 0x1p-23) // a·b = 1 + 2^-22 + 2^-46
	c := float32(0x1p-24)     // sum = 1 + 2^-22 + 2^-24 + 2^-46: just above a tie
	got := FMA32(a, b, c)
	if want := exactFMA32(a, b, c); got != want {
		t.Fatalf("FMA32 = %x, want %x", math.Float32bits(got), math.Float32bits(want))
	}
}

func isBad(f float32) bool {
	return math.IsInf(float64(f), 0) || math.IsNaN(float64(f)) || (f != 0 && math.Abs(float64(f)) < 0x1p-126) || math.Abs(float64(f)) > 0x1p100
}

func TestForWidth(t *testing.T) {
	for _, c := range []struct {
		h     int
		half  bool
		w, ln int
	}{{1, false, 1, 1}, {2, false, 2, 1}, {3, false, 4, 1}, {4, false, 4, 4}, {5, false, 8, 1}, {255, false, 256, 1},
		{256, false, 128, 4}, {257, false, 256, 1}, {64, false, 64, 4}, {132, false, 128, 4}, {768, false, 128, 4},
		{1024, false, 128, 4}, {2048, false, 256, 4}, {2052, false, 512, 4}, {4096, false, 512, 4}, {4097, false, 256, 1},
		{4098, false, 256, 1}, {5120, false, 1024, 4}, {8192, false, 1024, 4}, {65536, false, 1024, 4}, {65537, false, 256, 1},
		// 16-bit rows a multiple of 8 long: eight lanes a GPU invocation, W doubled
		{4, true, 4, 4}, {8, true, 8, 8}, {12, true, 16, 4}, {64, true, 64, 8}, {768, true, 256, 8}, {1024, true, 256, 8},
		{4096, true, 1024, 8}, {4100, true, 1024, 4}, {8192, true, 2048, 8}, {65536, true, 2048, 8}, {65537, true, 256, 1}} {
		if p := For(c.h, c.half, Contraction{}); p.W != c.w || p.Lanes != c.ln {
			t.Errorf("For(%d, %v) = W %d, lanes %d; want %d, %d", c.h, c.half, p.W, p.Lanes, c.w, c.ln)
		}
	}
}

func TestSumOrder(t *testing.T) {
	// With W = 4 and x of 6 elements, the plan sums (x0+x4)+(x2) and (x1+x5)+(x3), then the tree.
	p := For(6, false, Contraction{})
	if p.W != 8 {
		t.Fatalf("W = %d", p.W)
	}
	x := []float32{1e8, 1, -1e8, 1, 3, 5}
	part := make([]float32, p.W)
	// tree over 8: off 4: p0+=p4(3), p1+=p5(5); off 2: p0+=p2, p1+=p3; off 1: p0+=p1
	a0 := float32(1e8) + 3
	a1 := float32(1) + 5
	a0 = a0 + float32(-1e8)
	a1 = a1 + 1
	want := a0 + a1
	if got := p.Sum(x, 0, part); got != want {
		t.Fatalf("Sum = %v, want %v", got, want)
	}
}

// hardRow is a row the plan must get right: exactly constant (c), or offset ± spread.
type hardRow struct {
	name string
	x    []float32
}

func hardRows() []hardRow {
	var rows []hardRow
	r := rand.New(rand.NewPCG(16, 4))
	for _, h := range []int{1, 3, 7, 64, 100, 255, 768, 1000, 1024, 4096, 4097, 8192} {
		for _, c := range []float32{0, 1, -2.7, 0.1, 1000.1, -1e4, 3.3e7, 1e-20, 65504} {
			x := make([]float32, h)
			for i := range x {
				x[i] = c
			}
			rows = append(rows, hardRow{fmt.Sprintf("const(H=%d,c=%g)", h, c), x})
		}
		for _, off := range []float64{1000, -1000, 1e4, 1e5} {
			x := make([]float32, h)
			for i := range x {
				x[i] = float32(off + 2*r.Float64() - 1)
			}
			rows = append(rows, hardRow{fmt.Sprintf("offset(H=%d,%g±1)", h, off), x})
		}
	}
	return rows
}

// ref64 is the row's layer norm in float64: mean, variance, y with gamma 1 and beta 0.
func ref64(x []float32, eps float64) (mean, variance float64, y []float64) {
	for _, v := range x {
		mean += float64(v)
	}
	mean /= float64(len(x))
	for _, v := range x {
		variance += (float64(v) - mean) * (float64(v) - mean)
	}
	variance /= float64(len(x))
	y = make([]float64, len(x))
	for i, v := range x {
		y[i] = (float64(v) - mean) / math.Sqrt(variance+eps)
	}
	return mean, variance, y
}

// TestHardRows checks the plan against float64 on constant and offset rows (spec §C.4a):
// constant rows exactly (mean = c, variance 0, y = beta), offset rows within 1e-5 with
// gamma 1, under every profile.
func TestHardRows(t *testing.T) {
	for _, prof := range []Contraction{{}, {FuseVariance: true, FuseAffine: true}} {
		for _, eps := range []float32{1e-5, 1e-12} {
			var worst float64
			for i, row := range hardRows() {
				p := For(len(row.x), i%2 == 1, prof) // both widths of 16-bit rows' plans too
				part := make([]float32, 2*p.W)
				st := p.Stats(row.x, eps, part)
				mean64, _, y64 := ref64(row.x, float64(eps))
				constant := strings.HasPrefix(row.name, "const")
				if constant {
					if st.Mean() != row.x[0] || st.Rstd != Rstd(eps) {
						t.Errorf("%v eps=%g %s: mean %g rstd %g, want %g and %g", prof, eps, row.name, st.Mean(), st.Rstd, row.x[0], Rstd(eps))
					}
				} else if d := math.Abs(float64(st.Mean()) - mean64); d > 2*ulp32(mean64) {
					t.Errorf("%v eps=%g %s: mean %g, float64 %g", prof, eps, row.name, st.Mean(), mean64)
				}
				for i, v := range row.x {
					y := p.Affine(v, st, 1.5, 0.25)
					if constant && y != 0.25 {
						t.Fatalf("%v eps=%g %s: y[%d] = %g, want beta exactly", prof, eps, row.name, i, y)
					}
					worst = max(worst, math.Abs(float64(y)-(1.5*y64[i]+0.25))/1.5)
				}
			}
			t.Logf("%v eps=%g: largest |y − y64|/|gamma|: %.3g", prof, eps, worst)
			if worst > 1e-5 {
				t.Errorf("%v eps=%g: the plan is %.3g from float64, want ≤ 1e-5", prof, eps, worst)
			}
		}
	}
}

// TestBound checks spec §C.4b's bound, |y − y64| ≤ 2⁻²⁴·K·(|γ|·(1 + |z|) + |β|), on rows of
// N(0, 1) whose first element lies k standard deviations out (k 0 to 1000, both signs), for
// widths 32 to 8192, both profiles, random gamma and beta; it logs the worst ratio per k.
func TestBound(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 24))
	widths := []int{32, 100, 768, 1000, 1023, 4096, 8192}
	if testing.Short() {
		widths = []int{32, 1023, 4096}
	}
	for _, prof := range []Contraction{{}, {FuseVariance: true, FuseAffine: true}} {
		for _, k := range []float64{0, 3, 30, 300, 1000} {
			var worst float64
			for _, h := range widths {
				for rep := 0; rep < 8; rep++ {
					x, gamma, beta := outlierRow(r, h, k, rep%2 == 1), weights(r, h), weights(r, h)
					p := For(h, rep%4 >= 2, prof)
					st := p.Stats(x, 1e-5, make([]float32, 2*p.W))
					_, _, z := ref64(x, 1e-5)
					for i, v := range x {
						y := float64(p.Affine(v, st, gamma[i], beta[i]))
						y64 := float64(gamma[i])*z[i] + float64(beta[i])
						unit := 0x1p-24 * (math.Abs(float64(gamma[i]))*(1+math.Abs(z[i])) + math.Abs(float64(beta[i])))
						worst = max(worst, math.Abs(y-y64)/unit)
					}
				}
			}
			t.Logf("%v k=%g: worst |y − y64| / (2⁻²⁴·(|γ|(1+|z|)+|β|)) = %.2f", prof, k, worst)
			if worst > K {
				t.Errorf("%v k=%g: error %.2f units, the plan states K = %d", prof, k, worst, K)
			}
		}
	}
}

// outlierRow is a row of h values from N(0, 1) whose first element is moved k standard
// deviations out (below the rest when neg), all rounded to float32.
func outlierRow(r *rand.Rand, h int, k float64, neg bool) []float32 {
	x := make([]float32, h)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	if neg {
		k = -k
	}
	x[0] = float32(k + 0.1*r.NormFloat64())
	return x
}

func weights(r *rand.Rand, h int) []float32 {
	w := make([]float32, h)
	for i := range w {
		w[i] = float32(2*r.Float64() - 1)
	}
	return w
}

func ulp32(v float64) float64 {
	f := float32(math.Abs(v))
	return float64(math.Nextafter32(f, float32(math.Inf(1))) - f)
}
