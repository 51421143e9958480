package testkit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// The sweeps: problems of seeded random data over the row lengths, optional inputs and
// outputs, dtype rows and grid shapes the kernels treat differently. The conformance suite
// (tests/) runs them on every backend and CPU level through the API; dawn's transfer test
// runs a few at the backend level (CheckEmbed, CheckAddLN).

// SweepH are the row lengths of the size sweeps: a lane, odd rows, the vector width ±1, a
// workgroup ±1, BERT's 768 and long rows that take several passes.
var SweepH = []int{1, 3, 4, 5, 63, 64, 65, 255, 256, 257, 768, 1024, 4096, 16384}

// EmbedCase is one EmbedLayerNorm problem of the sweeps.
type EmbedCase struct {
	Name          string
	DType         ops.DType // F32 or F16
	B, S, H       int
	V, P, G       int // table rows; G = 0: no segment table
	SegIDs        bool
	Mask          bool
	Pos           int // position_ids: 0 none, 1 (1, S), 2 (B, S)
	WantMaskIndex bool
	WantSum       bool
	Rule          ops.MaskRule
	Seed          uint64
}

func (c EmbedCase) String() string {
	return fmt.Sprintf("%s/%v/B%dS%dH%d/G%d-seg%v-mask%v-pos%d-mi%v-sum%v-rule%d",
		c.Name, c.DType, c.B, c.S, c.H, c.G, c.SegIDs, c.Mask, c.Pos, c.WantMaskIndex, c.WantSum, c.Rule)
}

// Problem is the case's weights and inputs, from its seed (epsilon 1e-12).
func (c EmbedCase) Problem() (*ops.EmbedWeights, *ops.EmbedInputs) {
	r := rand.New(rand.NewPCG(c.Seed, uint64(c.H)))
	w := &ops.EmbedWeights{
		DType: c.DType, H: c.H, V: c.V, P: c.P, G: c.G,
		Word:    Float(c.DType, Normal(r, c.V*c.H, 1, 0.2)),
		Pos:     Float(c.DType, Normal(r, c.P*c.H, 0.5, 0)),
		Gamma:   Float(c.DType, Normal(r, c.H, 1, 0.5)),
		Beta:    Float(c.DType, Normal(r, c.H, 0.3, 0)),
		Epsilon: 1e-12,
		Rule:    c.Rule,
	}
	if c.G > 0 {
		w.Seg = Float(c.DType, Normal(r, c.G*c.H, 0.25, 0))
	}
	n := c.B * c.S
	in := &ops.EmbedInputs{B: c.B, S: c.S, IDs: make([]int32, n)}
	for i := range in.IDs {
		in.IDs[i] = int32(r.IntN(c.V))
	}
	if c.SegIDs {
		in.SegIDs = make([]int32, n)
		for i := range in.SegIDs {
			in.SegIDs[i] = int32(r.IntN(c.G))
		}
	}
	if c.Mask {
		in.Mask = make([]int32, n)
		for i := range in.Mask {
			in.Mask[i] = []int32{1, 1, 1, 0, 2, -1}[r.IntN(6)]
		}
	}
	if c.Pos > 0 {
		in.PosBatch = 1
		if c.Pos == 2 {
			in.PosBatch = c.B
		}
		in.PosIDs = make([]int32, in.PosBatch*c.S)
		for i := range in.PosIDs {
			in.PosIDs[i] = int32(r.IntN(c.P))
		}
	}
	return w, in
}

// Outputs are poisoned outputs for the case (Poison; mask_index -7).
func (c EmbedCase) Outputs() *ops.EmbedOutputs {
	n := c.B * c.S * c.H
	o := &ops.EmbedOutputs{Out: Zeros(c.DType, n)}
	Poison(o.Out)
	if c.WantMaskIndex {
		o.MaskIndex = Zeros(ops.I32, c.B).I32
		Poison(ops.Buf{DType: ops.I32, I32: o.MaskIndex})
	}
	if c.WantSum {
		o.Sum = Zeros(c.DType, n)
		Poison(o.Sum)
	}
	return o
}

// EmbedSweep is every EmbedLayerNorm case of the sweeps: SweepH in f32 and f16 with every
// optional input and output; every segment × position_ids combination with mask,
// mask_index and embedding_sum rotating so each of their on/off pairings appears (each flag
// set is a separate kernel, and lavapipe compiles each for about a second); and more token
// rows than one dispatch dimension allows.
func EmbedSweep() []EmbedCase {
	var cs []EmbedCase
	for _, dt := range []ops.DType{ops.F32, ops.F16} {
		for i, h := range SweepH {
			c := EmbedCase{Name: "sizes", DType: dt, B: 2, S: 3, H: h, V: 7, P: 5, G: 2,
				SegIDs: true, Mask: true, Pos: 2, WantMaskIndex: true, WantSum: true, Rule: ops.MaskRule(i % 2), Seed: uint64(i)}
			if h >= 4096 {
				c.B, c.S = 1, 2
			}
			cs = append(cs, c)
		}
	}
	for _, dt := range []ops.DType{ops.F32, ops.F16} {
		for seg := 0; seg < 3; seg++ {
			for pos := 0; pos < 3; pos++ {
				i := seg*3 + pos
				c := EmbedCase{Name: "optional", DType: dt, B: 3, S: 4, H: 5, V: 9, P: 6,
					SegIDs: seg == 2, Mask: i%2 == 0, Pos: pos, WantMaskIndex: (i/2)%2 == 0 || i == 8,
					WantSum: i%3 != 1, Rule: ops.MaskRule((i / 4) % 2), Seed: uint64(100 + i)}
				if seg > 0 {
					c.G = 3
				}
				cs = append(cs, c)
			}
		}
	}
	// Odd f16 rows in pairs (the pair kernel): a lone last token, a pair across batch rows.
	cs = append(cs, EmbedCase{Name: "pairs", DType: ops.F16, B: 1, S: 5, H: 1023, V: 7, P: 5, G: 2,
		SegIDs: true, Mask: true, Pos: 1, WantMaskIndex: true, WantSum: true, Seed: 11},
		EmbedCase{Name: "pairs", DType: ops.F16, B: 3, S: 3, H: 255, V: 7, P: 5, Mask: true,
			WantMaskIndex: true, Rule: ops.MaskCountOnes, Seed: 12})
	return append(cs, EmbedCase{Name: "grid2d", DType: ops.F16, B: 33000, S: 2, H: 3, V: 50, P: 2, G: 2,
		SegIDs: true, Mask: true, WantMaskIndex: true, WantSum: true, Rule: ops.MaskCountOnes, Seed: 9},
		EmbedCase{Name: "grid2d-vec", DType: ops.F32, B: 32801, S: 2, H: 8, V: 50, P: 2, G: 2,
			SegIDs: true, WantSum: true, Seed: 10})
}

// AddLNCase is one AddLayerNorm problem of the sweeps.
type AddLNCase struct {
	Row    [4]ops.DType // x1, x2, gamma (= beta), OutT (= bias): a row of ops.AddDTypeRows
	N, D   int
	Bias   int // 0 none, 1 (D), 2 (N, D)
	WriteX bool
	Seed   uint64
}

func (c AddLNCase) String() string {
	return fmt.Sprintf("%v+%v,g%v->%v/N%dD%d/bias%d/x%v", c.Row[0], c.Row[1], c.Row[2], c.Row[3], c.N, c.D, c.Bias, c.WriteX)
}

// Problem is the case's call from its seed, epsilon 1e-5, with poisoned outputs.
func (c AddLNCase) Problem() *ops.AddLN {
	r := rand.New(rand.NewPCG(c.Seed, uint64(c.D)))
	n := c.N * c.D
	a := &ops.AddLN{N: c.N, D: c.D, Epsilon: 1e-5, Y: Zeros(c.Row[3], n),
		Mean: make([]float32, c.N), Rstd: make([]float32, c.N)}
	Poison(a.Y)
	if c.WriteX {
		a.X = Zeros(c.Row[3], n)
		Poison(a.X)
	}
	a.X1 = Float(c.Row[0], Normal(r, n, 2, 1))
	a.X2 = Float(c.Row[1], Normal(r, n, 1, -0.5))
	a.Gamma = Float(c.Row[2], Normal(r, c.D, 1, 0.5))
	a.Beta = Float(c.Row[2], Normal(r, c.D, 0.5, 0))
	switch c.Bias {
	case 1:
		a.Bias = Float(c.Row[3], Normal(r, c.D, 0.3, 0.1))
	case 2:
		a.Bias, a.BiasFull = Float(c.Row[3], Normal(r, n, 0.3, 0.1)), true
	}
	return a
}

// AddLNOptions are the bias/x combinations per dtype row at an odd D (16-bit rows share
// words).
func AddLNOptions() []AddLNCase {
	var cs []AddLNCase
	for j, row := range ops.AddDTypeRows {
		cs = append(cs, AddLNCase{Row: row, N: 5, D: 7, Bias: j % 3, WriteX: true, Seed: uint64(2 * j)},
			AddLNCase{Row: row, N: 5, D: 7, Bias: (j + 1) % 3, WriteX: false, Seed: uint64(2*j + 1)})
	}
	return cs
}

// AddLNSweep is every AddLayerNorm case of the sweeps: SweepH with two of the nine dtype
// rows per size, rotating, so every row meets several sizes without compiling all 126
// kernels on lavapipe; AddLNOptions; and more rows than one dispatch dimension allows.
func AddLNSweep() []AddLNCase {
	var cs []AddLNCase
	rows := ops.AddDTypeRows
	for i, d := range SweepH {
		for _, j := range []int{(2 * i) % 9, (2*i + 1) % 9} {
			c := AddLNCase{Row: rows[j], N: 3, D: d, Bias: (i + j) % 3, WriteX: (i+j)%4 != 3, Seed: uint64(100*i + j)}
			if d >= 4096 {
				c.N = 2
			}
			cs = append(cs, c)
		}
	}
	cs = append(cs, AddLNOptions()...)
	return append(cs,
		// Odd 16-bit rows in pairs (the pair kernel): whole pairs, a lone last row, each bias.
		AddLNCase{Row: rows[1], N: 4, D: 1023, Bias: 2, WriteX: true, Seed: 9},
		AddLNCase{Row: rows[4], N: 5, D: 1023, Bias: 1, WriteX: true, Seed: 10},
		AddLNCase{Row: rows[2], N: 3, D: 255, Bias: 0, WriteX: false, Seed: 11},
		AddLNCase{Row: rows[1], N: 70000, D: 3, Bias: 2, WriteX: true, Seed: 5},
		AddLNCase{Row: rows[0], N: 66000, D: 1, Bias: 1, WriteX: true, Seed: 6},
		// The vector kernels past one dispatch dimension too, each workgroup's x stored in pass 1.
		AddLNCase{Row: rows[1], N: 65601, D: 8, Bias: 1, WriteX: true, Seed: 7},
		AddLNCase{Row: rows[0], N: 65601, D: 12, Bias: 2, WriteX: true, Seed: 8})
}

// CompareBufs checks got == want bit for bit (NaN matching NaN), records the largest ulp
// distance in stats under name and dtype, and reports a difference on t.
func CompareBufs(t testing.TB, stats *ULPStats, name string, got, want ops.Buf) {
	t.Helper()
	d := Compare(got, want, 1, nil)
	if stats != nil {
		stats.Add(name+" "+want.DType.String(), d.MaxULP)
	}
	if d.Count > 0 {
		t.Errorf("%s: %d of %d elements differ (max %d ulp), first at %d: got %s want %s",
			name, d.Count, d.N, d.MaxULP, d.First, Elem(got, d.First), Elem(want, d.First))
	}
}

// CheckEmbed runs c on b and on ref and wants the same bits in every output.
func CheckEmbed(t testing.TB, stats *ULPStats, b, ref ops.Backend, c EmbedCase) {
	t.Helper()
	w, in := c.Problem()
	got, want := c.Outputs(), c.Outputs()
	for _, e := range []struct {
		be  ops.Backend
		out *ops.EmbedOutputs
	}{{b, got}, {ref, want}} {
		op, err := e.be.PrepareEmbed(w)
		if err != nil {
			t.Fatalf("%v: PrepareEmbed on %s: %v", c, e.be.Info().Name, err)
		}
		err = op.Run(context.Background(), in, e.out)
		op.Close()
		if err != nil {
			t.Fatalf("%v: Run on %s: %v", c, e.be.Info().Name, err)
		}
	}
	CompareBufs(t, stats, "output", got.Out, want.Out)
	if c.WantSum {
		CompareBufs(t, stats, "embedding_sum", got.Sum, want.Sum)
	}
	if c.WantMaskIndex {
		CompareBufs(t, stats, "mask_index", ops.Buf{DType: ops.I32, I32: got.MaskIndex}, ops.Buf{DType: ops.I32, I32: want.MaskIndex})
	}
	if t.Failed() {
		t.Fatalf("case %v", c)
	}
}

// CheckAddLN runs c on b and on ref and wants the same bits in every output.
func CheckAddLN(t testing.TB, stats *ULPStats, b, ref ops.Backend, c AddLNCase) {
	t.Helper()
	got, want := c.Problem(), c.Problem()
	if err := b.AddLayerNorm(context.Background(), got); err != nil {
		t.Fatalf("%v: %v", c, err)
	}
	if err := ref.AddLayerNorm(context.Background(), want); err != nil {
		t.Fatalf("%v: reference: %v", c, err)
	}
	CompareBufs(t, stats, "y", got.Y, want.Y)
	CompareBufs(t, stats, "mean", Float(ops.F32, got.Mean), Float(ops.F32, want.Mean))
	CompareBufs(t, stats, "rstd", Float(ops.F32, got.Rstd), Float(ops.F32, want.Rstd))
	if c.WriteX {
		CompareBufs(t, stats, "x", got.X, want.X)
	}
	if t.Failed() {
		t.Fatalf("case %v", c)
	}
}
