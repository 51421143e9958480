package fusednorm

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"
)

// sentinel marks output elements not yet written: a NaN no kernel produces from the
// finite inputs below.
var sentinel = math.Float32frombits(0x7fc0dead)

// bigEmbed is an EmbedLayerNorm with a small table and a large batch: B×S rows of H.
type bigEmbed struct {
	op  *EmbedLayerNorm
	in  EmbedInputs
	out []float32
	h   int
}

func newBigEmbed(t *testing.T, e *Engine, B, S, H int) *bigEmbed {
	t.Helper()
	const V = 64
	word, pos, gamma, beta := make([]float32, V*H), make([]float32, S*H), make([]float32, H), make([]float32, H)
	for i := range word {
		word[i] = float32(i%97) / 97
	}
	for i := range pos {
		pos[i] = float32(i%89) / 89
	}
	for i := range gamma {
		gamma[i], beta[i] = 1, float32(i%7)
	}
	op, err := e.NewEmbedLayerNorm(EmbedWeights{Word: FromFloat32(word, V, H), Position: FromFloat32(pos, S, H),
		Gamma: FromFloat32(gamma, H), Beta: FromFloat32(beta, H)})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int32, B*S)
	for i := range ids {
		ids[i] = int32(i * 31 % V)
	}
	return &bigEmbed{op: op, in: EmbedInputs{InputIDs: FromInt32(ids, B, S)}, out: make([]float32, B*S*H), h: H}
}

// fill sets the output to the sentinel.
func (b *bigEmbed) fill() {
	for i := range b.out {
		b.out[i] = sentinel
	}
}

// run runs the op into the output.
func (b *bigEmbed) run(ctx context.Context) error {
	out := EmbedOutputs{Output: FromFloat32(b.out, len(b.out)/b.h/b.in.InputIDs.Shape()[1], b.in.InputIDs.Shape()[1], b.h)}
	return b.op.Run(ctx, b.in, &out)
}

// written counts the output rows the last run wrote (no element left at the sentinel).
func (b *bigEmbed) written() (rows int) {
	for r := 0; r < len(b.out)/b.h; r++ {
		row := b.out[r*b.h : (r+1)*b.h]
		if math.Float32bits(row[0]) != math.Float32bits(sentinel) && math.Float32bits(row[b.h-1]) != math.Float32bits(sentinel) {
			rows++
		}
	}
	return rows
}

// TestCPUCancelMidCall gives a CPU call that takes tens of milliseconds a 2 ms deadline:
// it must return an error wrapping context.DeadlineExceeded with rows left unwritten (it
// stopped before the whole work was done), where before the CPU ran every call to its end
// and returned nil. The same for AddLayerNorm.
func TestCPUCancelMidCall(t *testing.T) {
	if testing.Short() {
		t.Skip("large calls (64 MiB of output)")
	}
	e, err := Open(WithBackend(BackendCPU), WithThreads(2))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()

	t.Run("EmbedLayerNorm", func(t *testing.T) {
		const B, S, H = 64, 256, 1024 // 16M elements
		b := newBigEmbed(t, e, B, S, H)
		defer b.op.Close()
		b.fill()
		start := time.Now()
		if err := b.run(context.Background()); err != nil {
			t.Fatal(err)
		}
		whole := time.Since(start)
		if n := b.written(); n != B*S {
			t.Fatalf("an uncancelled call wrote %d of %d rows", n, B*S)
		}
		b.fill()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Millisecond)
		defer cancel()
		start = time.Now()
		err := b.run(ctx)
		took := time.Since(start)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a call past its deadline returned %v, want context.DeadlineExceeded", err)
		}
		n := b.written()
		t.Logf("uncancelled %v; with a 2 ms deadline returned after %v (%v), %d of %d rows written", whole, took, err, n, B*S)
		if n == B*S {
			t.Errorf("a call cancelled 2 ms in wrote all its rows (uncancelled it takes %v): it did not stop", whole)
		}
	})

	t.Run("AddLayerNorm", func(t *testing.T) {
		const N, D = 8192, 1024 // 8M elements
		x, g, bt := make([]float32, N*D), make([]float32, D), make([]float32, D)
		for i := range x {
			x[i] = float32(i%101) / 101
		}
		for i := range g {
			g[i] = 1
		}
		y := make([]float32, N*D)
		fill := func() {
			for i := range y {
				y[i] = sentinel
			}
		}
		run := func(ctx context.Context) (int, error) {
			out := AddLayerNormOutputs{Y: FromFloat32(y, N, D)}
			err := e.AddLayerNorm(ctx, AddLayerNormInputs{X1: FromFloat32(x, N, D), X2: FromFloat32(x, N, D),
				Gamma: FromFloat32(g, D), Beta: FromFloat32(bt, D)}, &out)
			rows := 0
			for r := range N {
				if math.Float32bits(y[r*D]) != math.Float32bits(sentinel) {
					rows++
				}
			}
			return rows, err
		}
		fill()
		start := time.Now()
		if n, err := run(context.Background()); err != nil || n != N {
			t.Fatalf("uncancelled: %d of %d rows, %v", n, N, err)
		}
		whole := time.Since(start)
		fill()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Millisecond)
		defer cancel()
		start = time.Now()
		n, err := run(ctx)
		took := time.Since(start)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a call past its deadline returned %v, want context.DeadlineExceeded", err)
		}
		t.Logf("uncancelled %v; with a 2 ms deadline returned after %v (%v), %d of %d rows written", whole, took, err, n, N)
		if n == N {
			t.Errorf("a call cancelled 2 ms in wrote all its rows (uncancelled it takes %v): it did not stop", whole)
		}
	})
}
