package cpu

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// TestAddLayerNormLevels runs whole AddLayerNorm calls at every level and compares each
// output with the pure-Go level, bit for bit.
func TestAddLayerNormLevels(t *testing.T) { addLayerNormLevels(t, defaultTuning()) }

// addLayerNormLevels is TestAddLayerNormLevels on backends of the tuning.
func addLayerNormLevels(t *testing.T, tune tuning) {
	// The reference runs the first pass over whole rows (TestNonTemporalLevels runs it in
	// pieces too).
	ref := tune
	ref.sumPiece = 1 << 30
	r := rand.New(rand.NewPCG(11, 12))
	type combo struct{ x1, x2, gb, out ops.DType }
	// Every dtype row of SPEC B.2: the backend reads the weights as they come, in the
	// formats those rows allow.
	var combos []combo
	for _, row := range ops.AddDTypeRows {
		combos = append(combos, combo{row[0], row[1], row[2], row[3]})
	}
	for _, name := range simdLevels() {
		for _, prof := range profiles {
			for _, cb := range combos {
				for _, d := range []int{1, 7, 8, 9, 255, 256, 257, 768, 1000} {
					for bias := range 3 { // none, row, full
						n := 5
						mk := func(dt ops.DType, len int) ops.Buf { return buf(dt, values(r, len, false)) }
						a := ops.AddLN{N: n, D: d, X1: mk(cb.x1, n*d), X2: mk(cb.x2, n*d),
							Gamma: mk(cb.gb, d), Beta: mk(cb.gb, d), Epsilon: 1e-5}
						switch bias {
						case 1:
							a.Bias = mk(cb.out, d)
						case 2:
							a.Bias, a.BiasFull = mk(cb.out, n*d), true
						}
						run := func(level string, tune tuning) ops.AddLN {
							c := a
							c.Y, c.X = emptyBuf(cb.out, n*d), emptyBuf(cb.out, n*d)
							c.Mean, c.Rstd = make([]float32, n), make([]float32, n)
							be := newTunedBackend(t, Options{Profile: prof, Threads: 1, Level: level}, tune)
							if err := be.AddLayerNorm(context.Background(), &c); err != nil {
								t.Fatal(err)
							}
							return c
						}
						got, want := run(name, tune), run("go", ref)
						tag := fmt.Sprintf("%s/%v/%v/D=%d/bias=%d", name, prof, cb, d, bias)
						sameBuf(t, tag+"/y", got.Y, want.Y)
						sameBuf(t, tag+"/x", got.X, want.X)
						same32(t, tag+"/mean", got.Mean, want.Mean)
						same32(t, tag+"/rstd", got.Rstd, want.Rstd)
					}
				}
			}
		}
	}
}
