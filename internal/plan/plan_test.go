package plan

import (
	"math"
	"math/big"
	"math/rand/v2"
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
	for _, c := range []struct{ h, w int }{{1, 1}, {2, 2}, {3, 4}, {4, 4}, {5, 8}, {255, 256}, {256, 256}, {257, 256}, {65536, 256}} {
		if p := For(c.h, Contraction{}); p.W != c.w {
			t.Errorf("For(%d).W = %d, want %d", c.h, p.W, c.w)
		}
	}
}

func TestSumOrder(t *testing.T) {
	// With W = 4 and x of 6 elements, the plan sums (x0+x4)+(x2) and (x1+x5)+(x3), then the tree.
	p := For(6, Contraction{})
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
	if got := p.Sum(x, part); got != want {
		t.Fatalf("Sum = %v, want %v", got, want)
	}
}
