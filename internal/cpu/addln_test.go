package cpu

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// TestAddLayerNormLevels runs whole AddLayerNorm calls at every level and compares each
// output with the pure-Go level, bit for bit.
func TestAddLayerNormLevels(t *testing.T) {
	addLayerNormLevels(t, defaultTuning(), shortWidths, values)
}

// plainValues is plainNormal in the form of values.
func plainValues(r *rand.Rand, n int, _ bool) []float32 { return plainNormal(r, n) }

// shortWidths are the row widths of the whole-op comparisons: around both vector widths and
// the plan's W, and one that no W divides.
var shortWidths = []int{1, 7, 8, 9, 255, 256, 257, 768, 1000}

// commonWidths are the hidden sizes of common models that the plan's W or the 16-bit
// pieces (tuning.sumPiece) do not divide (1000, 1023, 2560, 5120), beside ones they do: the
// rows whose shorter last chunk the kernels take as a chunk of its whole vectors.
var commonWidths = []int{1000, 1023, 2048, 2560, 3072, 4096, 5120, 6144}

// TestCommonWidthsLevels runs the whole-op comparisons at commonWidths, with the default
// tuning and with the ops past the caches (non-temporal stores, streamed rows, the 16-bit
// rows of a few chunks summed whole), on values of N(0,1): every output finite, and every
// bit of it depending on the sums (values' 1e30s overflow 16-bit rows to NaN outputs and
// float32 variances to Inf, which would hide a partial taken twice or dropped).
//
// With -short (the emulated AVX-512 run of make test) only the widths that nothing divides:
// the others are whole chunks, as in TestAddLayerNormLevels.
func TestCommonWidthsLevels(t *testing.T) {
	widths := commonWidths
	if testing.Short() {
		widths = []int{1000, 1023, 2560, 5120}
	}
	big := defaultTuning()
	big.bigBytes, big.gatherBytes, big.hwStreamRow, big.hwGatherRow, big.shortRow = 0, 0, 1, 1, 0
	for _, tc := range []struct {
		name string
		tune tuning
	}{{"Default", defaultTuning()}, {"Big", big}} {
		t.Run("AddLayerNorm"+tc.name, func(t *testing.T) { addLayerNormLevels(t, tc.tune, widths, plainValues) })
		t.Run("EmbedLayerNorm"+tc.name, func(t *testing.T) { embedLayerNormLevels(t, tc.tune, widths, 2, 6, plainValues) })
	}
}

// addLayerNormLevels is TestAddLayerNormLevels on backends of the tuning, at the widths,
// on data from gen (values or plainValues).
func addLayerNormLevels(t *testing.T, tune tuning, widths []int, gen func(r *rand.Rand, n int, special bool) []float32) {
	// The reference runs the first pass over whole rows (TestNonTemporalLevels runs it in
	// pieces too).
	ref := tune
	ref.sumPiece = 1 << 30
	r := rand.New(rand.NewPCG(11, 12))
	type combo struct{ x1, x2, gb, out ops.DType }
	// Every dtype row of spec §B.2: the backend reads the weights as they come, in the
	// formats those rows allow.
	var combos []combo
	for _, row := range ops.AddDTypeRows {
		combos = append(combos, combo{row[0], row[1], row[2], row[3]})
	}
	for _, name := range simdLevels() {
		for _, prof := range profiles {
			for _, cb := range combos {
				for _, d := range widths {
					for bias := range 3 { // none, row, full
						n := 5
						mk := func(dt ops.DType, len int) ops.Buf { return buf(dt, gen(r, len, false)) }
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

// TestShortRowsOffsets compares whole calls of rows that take shortRows (16-bit, whole
// chunks of W, at most tuning.shortRow bytes of y, so stored through the caches although
// past bigBytes) with the pure-Go level, bit for bit, with every tensor starting 0, 1, 8 or
// 24 elements past a 64-byte boundary.
func TestShortRowsOffsets(t *testing.T) {
	tune := defaultTuning()
	tune.bigBytes = 0 // past the caches at every size: only shortRow keeps these rows cached
	r := rand.New(rand.NewPCG(21, 22))
	// at is b's data copied to start off elements past a 64-byte boundary, guarded after
	// its end (checkGuards16).
	at := func(b ops.Buf, off int) ops.Buf {
		raw := make([]uint16, len(b.U16)+off+64)
		skip := int(-uintptr(unsafe.Pointer(&raw[0]))&63) / 2
		u := raw[skip+off : skip+off+len(b.U16)]
		copy(u, b.U16)
		for i := range raw[skip+off+len(u):] {
			raw[skip+off+len(u)+i] = guard16
		}
		return ops.Buf{DType: b.DType, U16: u}
	}
	for _, name := range simdLevels() {
		for _, dt := range []ops.DType{ops.F16, ops.BF16} {
			for _, gb := range []ops.DType{ops.F32, dt} {
				for _, d := range []int{64, 256} {
					for _, off := range []int{0, 1, 8, 24} {
						n := 6
						mk := func(len int) ops.Buf { return buf(dt, plainNormal(r, len)) }
						a := ops.AddLN{N: n, D: d, X1: at(mk(n*d), off), X2: at(mk(n*d), off), Bias: at(mk(n*d), off), BiasFull: true,
							Gamma: buf(gb, plainNormal(r, d)), Beta: buf(gb, plainNormal(r, d)), Epsilon: 1e-5}
						run := func(level string) ops.AddLN {
							c := a
							c.Y, c.X = at(emptyBuf(dt, n*d), off), at(emptyBuf(dt, n*d), off)
							c.Mean, c.Rstd = make([]float32, n), make([]float32, n)
							be := newTunedBackend(t, Options{Threads: 1, Level: level}, tune)
							if err := be.AddLayerNorm(context.Background(), &c); err != nil {
								t.Fatal(err)
							}
							return c
						}
						got, want := run(name), run("go")
						tag := fmt.Sprintf("%s/%v/gamma %v/D=%d/offset %d", name, dt, gb, d, off)
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
