package fusednorm

import (
	"context"
	"errors"
	"math"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fusednorm/fusednorm/internal/testalloc"
	"github.com/fusednorm/fusednorm/internal/testkit"
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

// TestCPUCancelMidCall gives a CPU call a deadline of a quarter of its uncancelled time:
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
		whole := time.Duration(math.MaxInt64)
		for range 2 { // the faster of two: the first one faults the output's pages in
			b.fill()
			start := time.Now()
			if err := b.run(context.Background()); err != nil {
				t.Fatal(err)
			}
			whole = min(whole, time.Since(start))
		}
		if n := b.written(); n != B*S {
			t.Fatalf("an uncancelled call wrote %d of %d rows", n, B*S)
		}
		b.fill()
		ctx, cancel := context.WithTimeout(context.Background(), whole/4)
		defer cancel()
		start := time.Now()
		err := b.run(ctx)
		took := time.Since(start)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a call past its deadline returned %v, want context.DeadlineExceeded", err)
		}
		n := b.written()
		t.Logf("uncancelled %v; with a deadline of a quarter of that returned after %v (%v), %d of %d rows written", whole, took, err, n, B*S)
		if n == B*S {
			t.Errorf("a call cancelled a quarter of the way in wrote all its rows (uncancelled it takes %v): it did not stop", whole)
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
		whole := time.Duration(math.MaxInt64)
		for range 2 { // the faster of two: the first one faults the output's pages in
			fill()
			start := time.Now()
			if n, err := run(context.Background()); err != nil || n != N {
				t.Fatalf("uncancelled: %d of %d rows, %v", n, N, err)
			}
			whole = min(whole, time.Since(start))
		}
		fill()
		ctx, cancel := context.WithTimeout(context.Background(), whole/4)
		defer cancel()
		start := time.Now()
		n, err := run(ctx)
		took := time.Since(start)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a call past its deadline returned %v, want context.DeadlineExceeded", err)
		}
		t.Logf("uncancelled %v; with a deadline of a quarter of that returned after %v (%v), %d of %d rows written", whole, took, err, n, N)
		if n == N {
			t.Errorf("a call cancelled a quarter of the way in wrote all its rows (uncancelled it takes %v): it did not stop", whole)
		}
	})
}

// settledGoroutines is runtime.NumGoroutine once it stops falling to at most want, waiting
// a while for goroutines that have ended their work to exit.
func settledGoroutines(want int) int {
	n := runtime.NumGoroutine()
	for end := time.Now().Add(2 * time.Second); n > want && time.Now().Before(end); n = runtime.NumGoroutine() {
		time.Sleep(time.Millisecond)
	}
	return n
}

// TestCloseStopsWorkers runs a call split 600 ways on a WithThreads(600) engine, which
// starts about 600 worker goroutines, and checks that none is left after Close (the
// workers used to live as long as the process).
func TestCloseStopsWorkers(t *testing.T) {
	before := runtime.NumGoroutine()
	e, err := Open(WithBackend(BackendCPU), WithThreads(600))
	if err != nil {
		t.Fatal(err)
	}
	const B, S, H = 16, 600, 1024 // 9600 rows: 600 chunks of at least minElemsPerWorker
	b := newBigEmbed(t, e, B, S, H)
	b.fill()
	if err := b.run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := b.written(); n != B*S {
		t.Fatalf("%d of %d rows written", n, B*S)
	}
	during := runtime.NumGoroutine()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	after := settledGoroutines(before)
	t.Logf("goroutines: %d before Open, %d after a call, %d after Close", before, during, after)
	if during < before+100 {
		t.Errorf("%d goroutines after a call split 600 ways (%d before): the test did not start the workers", during, before)
	}
	if after > before {
		t.Errorf("%d goroutines after Close, %d before Open: workers outlive the engine", after, before)
	}
}

// TestCloseDuringCall closes a CPU engine while a long call runs: Close must return without
// waiting for the call's work, the call must fail with ErrClosed with rows left unwritten,
// and a call after Close must fail at once.
//
// Whether Close lands inside the call is up to the scheduler: on a loaded machine (CI runs
// the packages' tests side by side) the test goroutine can wake from its sleep after the call
// has ended, or the call's goroutine start after Close. So an attempt counts only when Close
// began within a quarter of the call's uncancelled time after the call began, when the call
// cannot have finished (it is never faster than the least of two quiet runs by half), and
// the call wrote a row; other attempts are logged and retried on a new engine.
func TestCloseDuringCall(t *testing.T) {
	if testing.Short() {
		t.Skip("a large call (64 MiB of output)")
	}
	const B, S, H = 64, 256, 1024
	const attempts = 10
	for try := 1; ; try++ {
		if closeDuringCall(t, B, S, H) {
			return
		}
		if try == attempts {
			t.Fatalf("in %d attempts, Close never began early in the call: the machine is too loaded for this test", attempts)
		}
	}
}

// closeDuringCall is one attempt of TestCloseDuringCall on a new engine; false when Close
// did not begin early enough in the call for the checks to hold.
func closeDuringCall(t *testing.T, B, S, H int) bool {
	e, err := Open(WithBackend(BackendCPU), WithThreads(1)) // a P left free: a sleeping test goroutine wakes only when one enters the scheduler
	if err != nil {
		t.Fatal(err)
	}
	b := newBigEmbed(t, e, B, S, H)
	whole := time.Duration(math.MaxInt64)
	for range 2 { // the faster of two: the first one faults the output's pages in
		b.fill()
		start := time.Now()
		if err := b.run(context.Background()); err != nil {
			t.Fatal(err)
		}
		whole = min(whole, time.Since(start))
	}
	b.fill()
	var began atomic.Int64 // the call's start, in nanoseconds since the test's epoch
	epoch := time.Now()
	errc := make(chan error, 1)
	var ended atomic.Int64
	go func() {
		began.Store(int64(time.Since(epoch)))
		err := b.run(context.Background())
		ended.Store(int64(time.Since(epoch)))
		errc <- err
	}()
	time.Sleep(whole / 16)
	closeAt := time.Since(epoch)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	closing := time.Since(epoch) - closeAt
	err = <-errc
	n := b.written()
	into := closeAt - time.Duration(began.Load())
	t.Logf("uncancelled call %v; Close %v after the call began took %v; the call returned %v with %d of %d rows written",
		whole, into, closing, err, n, B*S)
	if into > whole/2 || time.Duration(ended.Load()) <= closeAt {
		t.Log("Close began too late in the call to tell (on a loaded machine the call can end before it): another attempt")
		return false
	}
	if n == 0 && errors.Is(err, ErrClosed) {
		t.Log("the call began after Close: another attempt")
		return false
	}
	if !errors.Is(err, ErrClosed) {
		t.Errorf("a call in flight at Close returned %v, want ErrClosed", err)
	}
	if n == B*S {
		t.Error("the call in flight at Close wrote all its rows: Close waited for it")
	}
	b.fill()
	if err := b.run(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("a call after Close returned %v, want ErrClosed", err)
	}
	if n := b.written(); n != 0 {
		t.Errorf("a call after Close wrote %d rows", n)
	}
	if err := e.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
	return true
}

// TestNoAllocsWithDeadline checks that a split CPU call under a context with a deadline
// (one context, reused) allocates nothing: the look between steps reads the clock and
// the context's channel, and keeps neither.
func TestNoAllocsWithDeadline(t *testing.T) {
	testalloc.SkipUnderRace(t)
	e, err := Open(WithBackend(BackendCPU), WithThreads(2))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	const B, S, H = 4, 256, 768 // 1024 rows: 2 chunks of 6 steps each
	b := newBigEmbed(t, e, B, S, H)
	defer b.op.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	out := EmbedOutputs{Output: FromFloat32(b.out, B, S, H)}
	testalloc.None(t, "EmbedLayerNorm under a deadline", func() {
		if err := b.op.Run(ctx, b.in, &out); err != nil {
			t.Fatal(err)
		}
	})
}

// TestCloseDuringCallDawn closes a Dawn engine while calls run on it from several
// goroutines: Close must return (it waits for the GPU work in flight), each call must end
// with nil or an error wrapping ErrClosed, and a call after Close must fail at once. Needs
// Dawn (lavapipe in CI).
func TestCloseDuringCallDawn(t *testing.T) {
	e, err := Open(WithBackend(BackendDawn))
	if err != nil {
		testkit.SkipWithoutDawn(t, err)
	}
	const B, S, H = 8, 128, 256
	b := newBigEmbed(t, e, B, S, H)
	const callers = 4
	errc := make(chan error, callers)
	for range callers {
		go func() {
			out := EmbedOutputs{Output: FromFloat32(make([]float32, B*S*H), B, S, H)}
			for {
				if err := b.op.Run(context.Background(), b.in, &out); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Close with %d callers in flight took %v", callers, time.Since(start))
	for range callers {
		if err := <-errc; !errors.Is(err, ErrClosed) {
			t.Errorf("a call at Close returned %v, want nil or ErrClosed", err)
		}
	}
	out := EmbedOutputs{Output: FromFloat32(make([]float32, B*S*H), B, S, H)}
	if err := b.op.Run(context.Background(), b.in, &out); !errors.Is(err, ErrClosed) {
		t.Errorf("a call after Close returned %v, want ErrClosed", err)
	}
}
