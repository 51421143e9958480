package cpu

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// TestEmbedLayerNormLevels does the same for EmbedLayerNorm, f32 and f16, with and without
// the segment table and the embedding_sum output.
func TestEmbedLayerNormLevels(t *testing.T) {
	embedLayerNormLevels(t, defaultTuning(), shortWidths, 2, 6, values)
}

// embedLayerNormLevels is TestEmbedLayerNormLevels on backends of the tuning, at the widths,
// on data from gen (values or plainValues).
// TestEmbedShortRowsPrefetched runs the whole-op comparisons on rows that take shortToken
// with their word rows prefetched (a table past gatherBytes): whole at once up to
// wholePrefetch bytes (H 64-256 f16, 64 and 128 f32), in pieces past it.
func TestEmbedShortRowsPrefetched(t *testing.T) {
	tune := defaultTuning()
	tune.gatherBytes = 0
	embedLayerNormLevels(t, tune, []int{64, 128, 256}, 2, 6, values)
}

// TestEmbedShortPairsOdd runs the whole-op comparisons on calls of an odd number of short
// tokens, which go two at a time (shortPair) but for the last, with their word rows
// prefetched (a table past gatherBytes; whole up to wholePrefetch: f16 H 256 and f32 H 128
// at its 512 bytes) and not.
func TestEmbedShortPairsOdd(t *testing.T) {
	tune := defaultTuning()
	tune.gatherBytes = 0
	for _, tn := range []tuning{defaultTuning(), tune} {
		embedLayerNormLevels(t, tn, []int{64, 128, 256}, 1, 7, values)
		embedLayerNormLevels(t, tn, []int{64}, 3, 3, values)
	}
}

func embedLayerNormLevels(t *testing.T, tune tuning, widths []int, B, S int, gen func(r *rand.Rand, n int, special bool) []float32) {
	ref := tune
	ref.sumPiece = 1 << 30 // the reference sums whole rows
	r := rand.New(rand.NewPCG(13, 14))
	for _, name := range simdLevels() {
		for _, prof := range profiles {
			for _, dt := range []ops.DType{ops.F32, ops.F16} {
				for _, h := range widths {
					for _, segs := range []int{0, 2} {
						const V, P = 11, 8 // P ≥ S
						mk := func(len int) ops.Buf { return buf(dt, gen(r, len, false)) }
						w := ops.EmbedWeights{DType: dt, H: h, V: V, P: P, G: segs,
							Word: mk(V * h), Pos: mk(P * h), Gamma: mk(h), Beta: mk(h), Epsilon: 1e-12}
						if segs > 0 {
							w.Seg = mk(segs * h)
						}
						in := ops.EmbedInputs{B: B, S: S, IDs: make([]int32, B*S)}
						for i := range in.IDs {
							in.IDs[i] = int32(r.IntN(V))
						}
						if segs > 0 {
							in.SegIDs = make([]int32, B*S)
							for i := range in.SegIDs {
								in.SegIDs[i] = int32(r.IntN(segs))
							}
						}
						run := func(level string, tune tuning, sum bool) ops.EmbedOutputs {
							out := ops.EmbedOutputs{Out: emptyBuf(dt, B*S*h)}
							if sum {
								out.Sum = emptyBuf(dt, B*S*h)
							}
							op, err := newTunedBackend(t, Options{Profile: prof, Threads: 1, Level: level}, tune).PrepareEmbed(&w)
							if err != nil {
								t.Fatal(err)
							}
							if err := op.Run(context.Background(), &in, &out); err != nil {
								t.Fatal(err)
							}
							return out
						}
						for _, sum := range []bool{true, false} { // without it, f32 short tokens take shiftTree32
							got, want := run(name, tune, sum), run("go", ref, sum)
							tag := fmt.Sprintf("%s/%v/%v/H=%d/segs=%d/sum=%v", name, prof, dt, h, segs, sum)
							sameBuf(t, tag+"/out", got.Out, want.Out)
							if sum {
								sameBuf(t, tag+"/sum", got.Sum, want.Sum)
							}
						}
					}
				}
			}
		}
	}
}
