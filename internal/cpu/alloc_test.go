package cpu

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/testalloc"
)

// allocShape is a problem size for TestNoAllocsPerCall: (B, S, H) for EmbedLayerNorm,
// (B*S, H) for AddLayerNorm. Small stays on one goroutine; large, with Threads: 2, is split
// over two.
type allocShape struct {
	name    string
	b, s, h int
	threads int
	split   bool // the shape is large enough to be split
}

var allocShapes = []allocShape{
	{"small", 1, 8, 64, 0, false},
	{"large", 2, 64, 768, 2, true},
}

// TestNoAllocsPerCall checks that a call of either op allocates nothing in steady state,
// on one goroutine and on several, and that the split result equals the one-goroutine one.
func TestNoAllocsPerCall(t *testing.T) {
	testalloc.SkipUnderRace(t)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(21, 22))
	for _, level := range testLevels() {
		for _, sh := range allocShapes {
			if split := sh.b*sh.s*sh.h/minElemsPerWorker >= 2; split != sh.split {
				t.Fatalf("%s: split over workers = %v, want %v", sh.name, split, sh.split)
			}
			for _, dt := range []ops.DType{ops.F32, ops.F16} {
				const V, G = 50, 2
				B, Sq, H := sh.b, sh.s, sh.h
				mk := func(n int) ops.Buf { return buf(dt, values(r, n, false)) }
				w := ops.EmbedWeights{DType: dt, H: H, V: V, P: Sq, G: G,
					Word: mk(V * H), Pos: mk(Sq * H), Seg: mk(G * H), Gamma: mk(H), Beta: mk(H),
					Epsilon: 1e-12}
				in := ops.EmbedInputs{B: B, S: Sq, IDs: make([]int32, B*Sq), SegIDs: make([]int32, B*Sq), Mask: make([]int32, B*Sq)}
				for i := range in.IDs {
					in.IDs[i] = int32(r.IntN(V))
					in.SegIDs[i] = int32(r.IntN(G))
					in.Mask[i] = int32(r.IntN(2))
				}
				run := func(threads int) ops.EmbedOutputs {
					out := ops.EmbedOutputs{Out: emptyBuf(dt, B*Sq*H), Sum: emptyBuf(dt, B*Sq*H), MaskIndex: make([]int32, B)}
					op, err := newBackend(t, Options{Threads: threads, Level: level}).PrepareEmbed(&w)
					if err != nil {
						t.Fatal(err)
					}
					tag := fmt.Sprintf("%s/embed/%s/%v/threads=%d", level, sh.name, dt, threads)
					testalloc.None(t, tag, func() {
						if err := op.Run(ctx, &in, &out); err != nil {
							t.Fatal(err)
						}
					})
					return out
				}
				got, want := run(sh.threads), run(1)
				tag := fmt.Sprintf("%s/embed/%s/%v", level, sh.name, dt)
				sameBuf(t, tag+"/out", got.Out, want.Out)
				sameBuf(t, tag+"/sum", got.Sum, want.Sum)
			}
			// f32, f16, and bf16 activations with f32 weights (a row of ops.AddDTypeRows).
			for _, row := range [][4]ops.DType{{ops.F32, ops.F32, ops.F32, ops.F32}, {ops.F16, ops.F16, ops.F16, ops.F16}, {ops.BF16, ops.BF16, ops.F32, ops.BF16}} {
				N, D := sh.b*sh.s, sh.h
				mk := func(dt ops.DType, n int) ops.Buf { return buf(dt, values(r, n, false)) }
				a := ops.AddLN{N: N, D: D, X1: mk(row[0], N*D), X2: mk(row[1], N*D),
					Gamma: mk(row[2], D), Beta: mk(row[2], D), Bias: mk(row[3], D), Epsilon: 1e-5}
				run := func(threads int) ops.AddLN {
					c := a
					c.Y, c.X = emptyBuf(row[3], N*D), emptyBuf(row[3], N*D)
					c.Mean, c.Rstd = make([]float32, N), make([]float32, N)
					be := newBackend(t, Options{Threads: threads, Level: level})
					tag := fmt.Sprintf("%s/add/%s/%v/threads=%d", level, sh.name, row, threads)
					testalloc.None(t, tag, func() {
						if err := be.AddLayerNorm(ctx, &c); err != nil {
							t.Fatal(err)
						}
					})
					return c
				}
				got, want := run(sh.threads), run(1)
				tag := fmt.Sprintf("%s/add/%s/%v", level, sh.name, row)
				sameBuf(t, tag+"/y", got.Y, want.Y)
				sameBuf(t, tag+"/x", got.X, want.X)
				same32(t, tag+"/mean", got.Mean, want.Mean)
				same32(t, tag+"/rstd", got.Rstd, want.Rstd)
			}
		}
	}
}
