package shaders

import (
	"testing"

	"github.com/fusednorm/fusednorm/internal/ops"
)

func TestRenderCached(t *testing.T) {
	p := Embed{W: 256, Private: 3, DType: ops.F16, OddH: true, Sum: true}
	a, err := RenderEmbed(p)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := RenderEmbed(p)
	if a != b {
		t.Fatal("second render differs")
	}
	q := p
	q.Sum = false
	c, _ := RenderEmbed(q)
	if c == a || p.Key() == q.Key() {
		t.Fatal("different parameters rendered the same kernel")
	}
}

func TestRenderRejects(t *testing.T) {
	bad := []Embed{
		{W: 3, DType: ops.F32},
		{W: 64, Private: maxPrivateScalar + 1, DType: ops.F32},
		{W: 64, Private: MaxPrivate + 1, DType: ops.F32, Vec: true},
		{W: 64, DType: ops.BF16},
		{W: 64, DType: ops.F32, SegIDs: true},
		// Pair kernels off the pair kernel's shape or dtype.
		{W: 64, Private: 1, DType: ops.F32, Pair: true, Rows: 2},
		{W: 32, Private: 1, DType: ops.F16, Pair: true, Rows: 2},
		{W: 64, Private: 0, DType: ops.F16, Pair: true, Rows: 2},
		{W: 64, Private: 1, DType: ops.F16, Pair: true, Rows: 1},
		{W: 64, Private: 1, DType: ops.F16, Pair: true, Rows: 2, Vec: true},
	}
	for _, p := range bad {
		if _, err := RenderEmbed(p); err == nil {
			t.Errorf("%s: rendered", p.Key())
		}
	}
	if _, err := RenderAddLN(AddLN{W: 64, X1: ops.I32, X2: ops.F32, Gamma: ops.F32, Out: ops.F32}); err == nil {
		t.Error("int32 x1 rendered")
	}
	pair := AddLN{W: 256, Private: 8, X1: ops.F16, X2: ops.F16, Gamma: ops.F16, Out: ops.F16, OddD: true, Pair: true, Rows: 2}
	if _, err := RenderAddLN(pair); err != nil {
		t.Errorf("%s: %v", pair.Key(), err)
	}
	for _, p := range []AddLN{
		func(p AddLN) AddLN { p.X1, p.Out = ops.F32, ops.F32; return p }(pair),
		func(p AddLN) AddLN { p.OddD = false; return p }(pair),
		func(p AddLN) AddLN { p.Rows = 1; return p }(pair),
	} {
		if _, err := RenderAddLN(p); err == nil {
			t.Errorf("%s: rendered", p.Key())
		}
	}
}

func TestPrivateFor(t *testing.T) {
	for _, c := range []struct {
		h, w  int
		out16 bool
		want  int
	}{{1, 1, false, 1}, {3, 4, false, 1}, {768, 256, false, 3}, {4096, 256, false, 16}, {4100, 256, false, 0},
		{4097, 256, false, 17}, {6144 + 1, 256, false, 0}, {4097, 256, true, 0}, {4095, 256, true, 16}} {
		if got := PrivateFor(c.h, c.w, c.out16); got != c.want {
			t.Errorf("PrivateFor(%d, %d, %v) = %d, want %d", c.h, c.w, c.out16, got, c.want)
		}
	}
}
