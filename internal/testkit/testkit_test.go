package testkit

import (
	"math"
	"testing"

	"github.com/fusednorm/fusednorm/internal/ops"
)

func TestCompare(t *testing.T) {
	nan := float32(math.NaN())
	one := float32(1)
	next := math.Nextafter32(one, 2)
	got := Float(ops.F32, []float32{0, one, nan, next, float32(math.Copysign(0, -1))})
	want := Float(ops.F32, []float32{0, one, float32(math.Float32frombits(0x7fc0dead)), one, 0})
	d := Compare(got, want, 1, nil)
	if d.N != 5 || d.Count != 1 || d.MaxULP != 1 || d.First != 3 {
		t.Errorf("f32: %+v, want one element 1 ulp off at 3 (NaN payloads and ±0 aside)", d)
	}
	if d := Compare(got, want, 2, map[int]bool{1: true}); d.Count != 0 || d.N != 3 {
		t.Errorf("row 1 skipped: %+v", d)
	}
	h := Float(ops.F16, []float32{1, -1, 65504})
	h2 := Float(ops.F16, []float32{1, 1, 65504})
	if d := Compare(h, h2, 1, nil); d.MaxULP != 2*0x3c00 || d.First != 1 {
		t.Errorf("f16: %+v: -1 and 1 are 2·0x3c00 ulp apart", d)
	}
	p := Zeros(ops.BF16, 2)
	Poison(p)
	if d := Compare(p, Zeros(ops.BF16, 2), 1, nil); d.Count != 2 {
		t.Errorf("poisoned bf16 against zeros: %+v", d)
	}
}

func TestULPStats(t *testing.T) {
	var s ULPStats
	s.Add("y f32", 0)
	s.Add("y f32", 3)
	s.Add("mean f32", 0)
	want := "  mean f32                     max ulp 0 over 1 runs\n  y f32                        max ulp 3 over 2 runs\n"
	if got := s.String(); got != want {
		t.Errorf("got\n%q\nwant\n%q", got, want)
	}
}
