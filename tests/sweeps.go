package tests

import (
	"context"
	"fmt"
	"math"
	"testing"

	fn "github.com/fusednorm/fusednorm"
	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/testkit"
)

// The sweeps of package testkit (row lengths, optional inputs and outputs, dtype rows, grids
// past one dispatch dimension), once dawn's own second suite (issue 14): here every backend
// and CPU level runs each case through every entry the test.json cases go through, with the
// same checks (references, device-tensor twin, prepared API, the CPU plan's bits).
func (s *Suite) sweeps(t *testing.T) {
	t.Run("EmbedLayerNorm", func(t *testing.T) {
		k := s.kernel(t, embedKernel)
		for _, c := range testkit.EmbedSweep() {
			t.Run(c.String(), func(t *testing.T) { s.embedSweepCase(t, k, c) })
		}
	})
	t.Run("AddLayerNorm", func(t *testing.T) {
		k := s.kernel(t, addKernel)
		for _, c := range testkit.AddLNSweep() {
			t.Run(c.String(), func(t *testing.T) { s.addSweepCase(t, k, c) })
		}
	})
	t.Run("MaskIndexRules", s.maskIndexRules)
	t.Run("AddConstantRows", s.addConstantRows)
	t.Run("Concurrent", s.concurrent)
}

func (s *Suite) kernel(t *testing.T, name string) *fn.Kernel {
	t.Helper()
	k, err := s.Engine.GetKernel(name, 1)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// tensorOf is a tensor over b's storage.
func tensorOf(b ops.Buf, shape ...int) fn.Tensor {
	switch b.DType {
	case ops.F32:
		return fn.FromFloat32(b.F32, shape...)
	case ops.F16:
		return fn.FromFloat16Bits(b.U16, shape...)
	case ops.BF16:
		return fn.FromBFloat16Bits(b.U16, shape...)
	}
	return fn.FromInt32(b.I32, shape...)
}

func ids(v []int32, shape ...int) fn.Tensor { return fn.FromInt32(v, shape...) }

// embedSweepCase runs an EmbedLayerNorm sweep case as the bind-key call of its problem.
func (s *Suite) embedSweepCase(t *testing.T, k *fn.Kernel, c testkit.EmbedCase) {
	w, x := c.Problem()
	in := map[string]fn.Tensor{
		"wordEmbeddingT":     tensorOf(w.Word, w.V, w.H),
		"positionEmbeddingT": tensorOf(w.Pos, w.P, w.H),
		"gammaT":             tensorOf(w.Gamma, w.H),
		"betaT":              tensorOf(w.Beta, w.H),
		"inputIdsT":          ids(x.IDs, x.B, x.S),
	}
	if w.G > 0 {
		in["segmentEmbeddingT"] = tensorOf(w.Seg, w.G, w.H)
	}
	if x.SegIDs != nil {
		in["segmentIdsT"] = ids(x.SegIDs, x.B, x.S)
	}
	if x.Mask != nil {
		in["maskT"] = ids(x.Mask, x.B, x.S)
	}
	if x.PosIDs != nil {
		in["positionIdsT"] = ids(x.PosIDs, x.PosBatch, x.S)
	}
	want := []any{}
	if c.WantMaskIndex {
		want = append(want, "maskIndexT")
	}
	if c.WantSum {
		want = append(want, "embeddingSumT")
	}
	attrs := map[string]any{"epsilon": float64(w.Epsilon), "want": want}
	if w.Rule == ops.MaskCountOnes {
		attrs["mask_index_rule"] = "count_ones"
	}
	s.embedRun(t, k, &caseJSON{Name: c.String()}, in, attrs, nil)
}

// addSweepCase runs an AddLayerNorm sweep case as the bind-key call of its problem.
func (s *Suite) addSweepCase(t *testing.T, k *fn.Kernel, c testkit.AddLNCase) {
	a := c.Problem()
	in := map[string]fn.Tensor{
		"x1T":    tensorOf(a.X1, a.N, a.D),
		"x2T":    tensorOf(a.X2, a.N, a.D),
		"gammaT": tensorOf(a.Gamma, a.D),
		"betaT":  tensorOf(a.Beta, a.D),
	}
	switch {
	case a.BiasFull:
		in["biasT"] = tensorOf(a.Bias, a.N, a.D)
	case a.Bias.Present():
		in["biasT"] = tensorOf(a.Bias, a.D)
	}
	attrs := map[string]any{"epsilon": float64(a.Epsilon), "additional_output": c.WriteX}
	s.addRun(t, k, &caseJSON{Name: c.String()}, in, attrs, nil)
}

// maskIndexRules checks both mask_index rules on the masks of spec §A.7, with a batch larger
// than H.
func (s *Suite) maskIndexRules(t *testing.T) {
	k := s.kernel(t, embedKernel)
	masks := [][]int32{{1, 1, 0, 0}, {1, 0, 1, 0}, {0, 1, 1, 1}, {2, 2, 2, 0}, {1, 1, 1, 1}, {0, 0, 0, 0}, {1, -1, 1, 0}}
	want := map[string][]int32{
		"first_zero": {2, 1, 0, 3, 4, 0, 3},
		"count_ones": {2, 2, 3, 0, 4, 0, 2},
	}
	B, S, H := len(masks), 4, 4
	var mask []int32
	for _, m := range masks {
		mask = append(mask, m...)
	}
	zeros := func(shape ...int) fn.Tensor { z, _ := fn.NewTensor(fn.Float32, shape...); return z }
	in := map[string]fn.Tensor{"wordEmbeddingT": zeros(2, H), "positionEmbeddingT": zeros(S, H), "gammaT": zeros(H),
		"betaT": zeros(H), "inputIdsT": ids(make([]int32, B*S), B, S), "maskT": ids(mask, B, S)}
	for rule, exp := range want {
		t.Run(rule, func(t *testing.T) {
			got, err := k.Run(context.Background(), in, map[string]any{"mask_index_rule": rule, "want": []any{"maskIndexT"}})
			if err != nil {
				t.Fatal(err)
			}
			checkExact(t, "mask_index", got["maskIndexT"], values(fn.FromInt32(exp, B)))
		})
	}
}

// addConstantRows is the Ascend sample of spec §B.7 through the typed API: constant rows
// give mean = c, rstd = 1/sqrt(eps) rounded once, and y = beta exactly.
func (s *Suite) addConstantRows(t *testing.T) {
	x1, x2 := make([]float32, 16), make([]float32, 16)
	for i := range 8 {
		x1[i], x2[i], x1[8+i], x2[8+i] = 1, 4, 2, -3
	}
	fill := func(v float32) fn.Tensor {
		f := make([]float32, 8)
		for i := range f {
			f[i] = v
		}
		return fn.FromFloat32(f, 8)
	}
	var out fn.AddLayerNormOutputs
	err := s.Engine.AddLayerNorm(context.Background(), fn.AddLayerNormInputs{X1: fn.FromFloat32(x1, 2, 8), X2: fn.FromFloat32(x2, 2, 8),
		Gamma: fill(2), Beta: fill(0.1), Bias: fill(0.5)}, &out, fn.Epsilon(1e-6))
	if err != nil {
		t.Fatal(err)
	}
	mean, rstd := out.Mean.Float32s(), out.Rstd.Float32s()
	if mean[0] != 5.5 || mean[1] != -0.5 || math.Float32bits(rstd[0]) != 0x4479ffff || rstd[1] != rstd[0] {
		t.Errorf("mean %v rstd %v (%#08x)", mean, rstd, math.Float32bits(rstd[0]))
	}
	for _, y := range out.Y.Float32s() {
		if y != float32(0.1) {
			t.Fatalf("y = %v, want 0.1 everywhere", out.Y.Float32s())
		}
	}
}

// concurrent runs AddLayerNorm and EmbedLayerNorm sweep cases from parallel subtests, on
// kernels the sweeps compiled already.
func (s *Suite) concurrent(t *testing.T) {
	ka, ke := s.kernel(t, addKernel), s.kernel(t, embedKernel)
	cs := testkit.AddLNOptions()
	t.Run("group", func(t *testing.T) {
		for g := range 4 {
			t.Run(fmt.Sprint(g), func(t *testing.T) {
				t.Parallel()
				for i := range 4 {
					c := cs[(g*4+i)%len(cs)]
					c.Seed = uint64(1000 + g*10 + i)
					s.addSweepCase(t, ka, c)
					s.embedSweepCase(t, ke, testkit.EmbedCase{Name: "concurrent", DType: ops.F16, B: 2, S: 3, H: 33,
						V: 5, P: 3, G: 2, SegIDs: true, Mask: true, WantMaskIndex: true, WantSum: true, Seed: uint64(g*10 + i)})
				}
			})
		}
	})
}
