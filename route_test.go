package fusednorm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/testalloc"
	"github.com/fusednorm/fusednorm/internal/testkit"
	"github.com/stretchr/testify/require"
)

// autoSoftwareEngine opens auto mode keeping lavapipe as if it were a GPU, or skips
// without Dawn unless FUSEDNORM_REQUIRE_DAWN=1.
func autoSoftwareEngine(t *testing.T, opts ...Option) *Engine {
	t.Helper()
	e, err := Open(append([]Option{WithBackend(BackendAuto), withAutoSoftware()}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { e.Close() })
	if e.Info().Backend != BackendDawn {
		testkit.SkipWithoutDawn(t, e.Info())
	}
	return e
}

// modelPicking is a cost model that sends every new shape to on first.
func modelPicking(on side) routeModel {
	if on == onGPU {
		return routeModel{h2d: 1e18, d2h: 1e18, cpuBW: 1}
	}
	return routeModel{h2d: 1, d2h: 1, cpuBW: 1e18, launch: 1}
}

// routeCall is one of the host-tensor calls the router routes, with the outputs it writes.
type routeCall struct {
	name string
	run  func(ctx context.Context) error
	outs []Tensor
}

// out is a copy of the call's output bytes.
func (c routeCall) out() []byte {
	var b []byte
	for _, t := range c.outs {
		b = append(b, t.buf.Bytes()...)
	}
	return b
}

// spoil overwrites the outputs, so the next call's must be its own.
func (c routeCall) spoil() {
	for _, t := range c.outs {
		b := t.buf.Bytes()
		for i := range b {
			b[i] = 0xff
		}
	}
}

// routeCalls are the three host-tensor calls of one shape (n rows, or a batch of n) on e: the
// engine's AddLayerNorm, a prepared AddLayerNorm and an EmbedLayerNorm, with inputs drawn from
// seed and n (the same on every engine) and every output given, so that a call allocates
// nothing.
func routeCalls(t *testing.T, e *Engine, seed uint64, n int) []routeCall {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, uint64(n)))
	const D = 37
	in := AddLayerNormInputs{X1: allocTensor(r, Float16, 0, n, D), X2: allocTensor(r, Float32, 0, n, D),
		Gamma: allocTensor(r, Float32, 0, D), Beta: allocTensor(r, Float32, 0, D), Bias: allocTensor(r, Float32, 0, D)}
	addOut := func() *AddLayerNormOutputs {
		return &AddLayerNormOutputs{Y: allocTensor(r, Float32, 0, n, D), Mean: allocTensor(r, Float32, 0, n, 1),
			Rstd: allocTensor(r, Float32, 0, n, 1), X: allocTensor(r, Float32, 0, n, D)}
	}
	aout, pout := addOut(), addOut()
	pop, err := e.NewAddLayerNorm(AddLayerNormWeights{Gamma: in.Gamma, Beta: in.Beta, Bias: in.Bias}, AdditionalOutput(true))
	require.NoError(t, err)
	t.Cleanup(func() { pop.Close() })
	const S, H, V, P = 6, 45, 20, 8
	eop, err := e.NewEmbedLayerNorm(EmbedWeights{Word: allocTensor(r, Float32, 0, V, H), Position: allocTensor(r, Float32, 0, P, H),
		Gamma: allocTensor(r, Float32, 0, H), Beta: allocTensor(r, Float32, 0, H)})
	require.NoError(t, err)
	t.Cleanup(func() { eop.Close() })
	ein := EmbedInputs{InputIDs: allocTensor(r, Int32, V, n, S)}
	eout := EmbedOutputs{Output: allocTensor(r, Float32, 0, n, S, H), EmbeddingSum: allocTensor(r, Float32, 0, n, S, H)}
	return []routeCall{
		{"AddLayerNorm", func(ctx context.Context) error { return e.AddLayerNorm(ctx, in, aout, AdditionalOutput(true)) },
			[]Tensor{aout.Y, aout.Mean, aout.Rstd, aout.X}},
		{"prepared AddLayerNorm", func(ctx context.Context) error { return pop.Run(ctx, in.X1, in.X2, pout) },
			[]Tensor{pout.Y, pout.Mean, pout.Rstd, pout.X}},
		{"EmbedLayerNorm", func(ctx context.Context) error { return eop.Run(ctx, ein, &eout) },
			[]Tensor{eout.Output, eout.EmbeddingSum}},
	}
}

// runRouted makes n calls of c, each into spoiled outputs that must come back as want, and
// returns where each ran.
func runRouted(t *testing.T, c routeCall, want []byte, n int) []string {
	t.Helper()
	ran := make([]string, n)
	for i := range ran {
		c.spoil()
		require.NoError(t, c.run(ReportBackend(context.Background(), &ran[i])), "%s, call %d", c.name, i)
		if !bytes.Equal(want, c.out()) {
			t.Fatalf("%s, call %d on %s: the outputs differ from the CPU engine's", c.name, i, ran[i])
		}
	}
	return ran
}

// settle makes calls of c, as runRouted, until e's router has chosen every shape, and
// returns where they ran. Exploring takes routeSamples timed calls of each backend after its
// first, the slower one's spaced by how many times slower it is (routeMaxRatio at most).
func settle(t *testing.T, e *Engine, c routeCall, want []byte) []string {
	t.Helper()
	var ran []string
	for len(ran) < 2*(1+routeSamples)*(1+routeMaxRatio) {
		ran = append(ran, runRouted(t, c, want, 1)...)
		if _, exploring := e.routedShapes(); exploring == 0 {
			return ran
		}
	}
	t.Fatalf("%s: not chosen after %d calls: %v", c.name, len(ran), ran)
	return nil
}

// wants runs each call once and returns its outputs: the reference calls' results.
func wants(t *testing.T, calls []routeCall) [][]byte {
	t.Helper()
	out := make([][]byte, len(calls))
	for i, c := range calls {
		require.NoError(t, c.run(context.Background()), c.name)
		out[i] = c.out()
	}
	return out
}

// TestAutoRoutes opens auto on lavapipe-as-if-GPU and checks the routing: a host-tensor
// call shape runs first where the model says (forced each way by setting the model), second
// on the other backend, then on one once chosen; device-tensor calls go to the GPU; and the
// bits are those of the Dawn engine wherever a call ran.
func TestAutoRoutes(t *testing.T) {
	ctx := context.Background()
	e := autoSoftwareEngine(t)
	m, ok := e.routeModelOf()
	require.True(t, ok, "auto with a GPU open routes")
	t.Logf("Open's cost model: %s", m)
	require.True(t, m.h2d > 0 && m.d2h > 0 && m.cpuBW > 0 && m.launch > 0, "model %s", m)
	require.Contains(t, e.Info().Reason, "per call shape whichever its timed calls finished sooner")
	require.Contains(t, e.Info().Reason, "h2d ")
	d := dawnEngine(t)
	require.NotNil(t, d)
	require.Equal(t, d.Info().Profile, e.Info().Profile)

	for i, c := range []struct {
		name  string
		model routeModel
		first string
	}{
		// The measured model: a call of a few KiB costs the CPU microseconds, less than one
		// round trip to any GPU.
		{"measured", *m, BackendCPU},
		{"cpu", modelPicking(onCPU), BackendCPU},
		{"gpu", modelPicking(onGPU), BackendDawn},
	} {
		*m = c.model
		n := 3 + i // shapes of their own, whose first calls the model places
		want := wants(t, routeCalls(t, d, 9, n))
		for j, call := range routeCalls(t, e, 9, n) {
			ran := settle(t, e, call, want[j])
			require.Equal(t, c.first, ran[0], "%s: %s: the model places the first call", c.name, call.name)
			require.NotEqual(t, c.first, ran[1], "%s: %s: the second tries the other backend", c.name, call.name)
			chosen := runRouted(t, call, want[j], 4)
			require.Equal(t, []string{chosen[0], chosen[0], chosen[0], chosen[0]}, chosen, "%s: %s stays where it was faster", c.name, call.name)
			t.Logf("%s: %s: chosen %s after %d calls, %d on dawn", c.name, call.name, chosen[0], len(ran), count(ran, BackendDawn))
		}
	}

	// Any device tensor: the GPU, whatever the model says.
	*m = modelPicking(onCPU)
	r := rand.New(rand.NewPCG(3, 4))
	const N, D = 5, 37
	in := AddLayerNormInputs{X1: allocTensor(r, Float16, 0, N, D), X2: allocTensor(r, Float32, 0, N, D),
		Gamma: allocTensor(r, Float32, 0, D), Beta: allocTensor(r, Float32, 0, D), Bias: allocTensor(r, Float32, 0, D)}
	var want AddLayerNormOutputs
	require.NoError(t, d.AddLayerNorm(ctx, in, &want, AdditionalOutput(true)))
	const B, S, H, V, P = 2, 6, 45, 20, 8
	w := EmbedWeights{Word: allocTensor(r, Float32, 0, V, H), Position: allocTensor(r, Float32, 0, P, H),
		Gamma: allocTensor(r, Float32, 0, H), Beta: allocTensor(r, Float32, 0, H)}
	ein := EmbedInputs{InputIDs: allocTensor(r, Int32, V, B, S)}
	dop, err := d.NewEmbedLayerNorm(w)
	require.NoError(t, err)
	defer dop.Close()
	var ewant EmbedOutputs
	require.NoError(t, dop.Run(ctx, ein, &ewant))
	pop, err := e.NewAddLayerNorm(AddLayerNormWeights{Gamma: in.Gamma, Beta: in.Beta, Bias: in.Bias}, AdditionalOutput(true))
	require.NoError(t, err)
	defer pop.Close()
	eop, err := e.NewEmbedLayerNorm(w)
	require.NoError(t, err)
	defer eop.Close()
	var where string
	rctx := ReportBackend(ctx, &where)
	y, x := devLike(t, e, Float32, N, D), devLike(t, e, Float32, N, D)
	got := AddLayerNormOutputs{Y: y.Tensor(), X: x.Tensor()}
	require.NoError(t, pop.Run(rctx, upload(t, e, in.X1), in.X2, &got))
	require.Equal(t, BackendDawn, where, "device-tensor AddLayerNorm")
	require.Equal(t, want.Y.buf.Bytes(), readBack(t, y).buf.Bytes(), "device y")
	where = ""
	var eout EmbedOutputs
	require.NoError(t, eop.Run(rctx, EmbedInputs{InputIDs: upload(t, e, ein.InputIDs)}, &eout))
	require.Equal(t, BackendDawn, where, "device-tensor EmbedLayerNorm")
	require.Equal(t, ewant.Output.buf.Bytes(), eout.Output.buf.Bytes(), "device-ids output")
}

// TestAutoPastDeviceLimitRunsOnCPU: a host-tensor call the GPU refuses with ErrNotSupported
// (here a buffer the hook refuses as if past a device limit) runs on the CPU in auto mode,
// and so does its shape from then on; a device-tensor call still reports the refusal.
func TestAutoPastDeviceLimitRunsOnCPU(t *testing.T) {
	ctx := context.Background()
	var refuse atomic.Bool
	hook := func(site string) error {
		if site == "create-buffer" && refuse.Load() {
			return fmt.Errorf("test: past maxBufferSize: %w", ErrNotSupported)
		}
		return nil
	}
	e := autoSoftwareEngine(t, withFaultInjection(hook))
	m, _ := e.routeModelOf()
	m.cpuBW = 1 // host calls go to the GPU first
	r := rand.New(rand.NewPCG(5, 6))
	const N, D = 300, 129 // a shape no earlier call made, so its buffers are new
	in := AddLayerNormInputs{X1: allocTensor(r, Float32, 0, N, D), X2: allocTensor(r, Float32, 0, N, D),
		Gamma: allocTensor(r, Float32, 0, D), Beta: allocTensor(r, Float32, 0, D)}
	c, err := Open(WithBackend(BackendCPU), WithContraction(e.Info().Profile))
	require.NoError(t, err)
	defer c.Close()
	var want AddLayerNormOutputs
	require.NoError(t, c.AddLayerNorm(ctx, in, &want))

	refuse.Store(true)
	var where string
	var got AddLayerNormOutputs
	require.NoError(t, e.AddLayerNorm(ReportBackend(ctx, &where), in, &got))
	require.Equal(t, BackendCPU, where)
	require.Equal(t, want.Y.buf.Bytes(), got.Y.buf.Bytes())
	_, err = e.NewDeviceTensor(Float32, N+1, D)
	require.True(t, errors.Is(err, ErrNotSupported) || strings.Contains(fmt.Sprint(err), "past maxBufferSize"), "%v", err)
	refuse.Store(false)
	for i := range 2 * (1 + routeSamples) {
		got = AddLayerNormOutputs{}
		require.NoError(t, e.AddLayerNorm(ReportBackend(ctx, &where), in, &got))
		require.Equal(t, BackendCPU, where, "call %d after the refusal", i)
		require.Equal(t, want.Y.buf.Bytes(), got.Y.buf.Bytes())
	}
}

// TestAutoReportsPlainBackend: an engine on one backend reports it, and does not route.
func TestAutoReportsPlainBackend(t *testing.T) {
	e, err := Open(WithBackend(BackendCPU))
	require.NoError(t, err)
	defer e.Close()
	var where string
	r := rand.New(rand.NewPCG(1, 2))
	in := AddLayerNormInputs{X1: allocTensor(r, Float32, 0, 2, 8), X2: allocTensor(r, Float32, 0, 2, 8),
		Gamma: allocTensor(r, Float32, 0, 8), Beta: allocTensor(r, Float32, 0, 8)}
	var out AddLayerNormOutputs
	require.NoError(t, e.AddLayerNorm(ReportBackend(context.Background(), &where), in, &out))
	require.Equal(t, BackendCPU, where)
	_, ok := e.routeModelOf()
	require.False(t, ok)
}

// TestNoAllocsRoutedToCPU: a host-tensor call that auto routes to the CPU allocates nothing
// in steady state, as on a CPU engine, once its shape is chosen (lavapipe is far slower than
// the CPU on these shapes).
func TestNoAllocsRoutedToCPU(t *testing.T) {
	testalloc.SkipUnderRace(t)
	e := autoSoftwareEngine(t)
	var where string
	rctx := ReportBackend(context.Background(), &where)
	for _, c := range routeCalls(t, e, 7, 2) {
		settle(t, e, c, wants(t, []routeCall{c})[0])
		testalloc.None(t, c.name, func() {
			if err := c.run(rctx); err != nil {
				t.Fatal(err)
			}
		})
		require.Equal(t, BackendCPU, where, c.name)
	}
}

// stagedBackend is one side of a routedEngine: a CPU backend whose every call moves a clock
// the two sides share on by cost, which refuses calls as if past a device limit while refuse
// is set, and fails them as a device would while broken is.
type stagedBackend struct {
	ops.Backend
	clock  *atomic.Int64 // nanoseconds
	cost   atomic.Int64
	once   atomic.Int64 // added to the next call's cost only: a pipeline compiled, weights uploaded
	calls  atomic.Int64 // calls it ran
	tries  atomic.Int64 // calls it was given
	refuse atomic.Bool
	broken atomic.Bool
	// settling: this many more calls of its prepared EmbedLayerNorms run while the op still
	// prepares in the background (Settling), each costing slowBy more.
	settling atomic.Int64
	slowBy   atomic.Int64
}

func (b *stagedBackend) step() error {
	b.tries.Add(1)
	if b.refuse.Load() {
		return fmt.Errorf("test: past a device limit: %w", ErrNotSupported)
	}
	if b.broken.Load() {
		return fmt.Errorf("test: device failed: %w", ErrDevice)
	}
	b.calls.Add(1)
	b.clock.Add(b.cost.Load() + b.once.Swap(0))
	return nil
}

func (b *stagedBackend) AddLayerNorm(ctx context.Context, a *ops.AddLN) error {
	if err := b.step(); err != nil {
		return err
	}
	return b.Backend.AddLayerNorm(ctx, a)
}

func (b *stagedBackend) PrepareAddLN(gamma, beta, bias ops.Buf, biasFull bool) (ops.PreparedAddLN, error) {
	return stagedAdd{b}, nil
}

func (b *stagedBackend) PrepareEmbed(w *ops.EmbedWeights) (ops.PreparedEmbed, error) {
	p, err := b.Backend.PrepareEmbed(w)
	if err != nil {
		return nil, err
	}
	return stagedEmbed{p, b}, nil
}

type stagedAdd struct{ b *stagedBackend }

func (p stagedAdd) Run(ctx context.Context, a *ops.AddLN) error { return p.b.AddLayerNorm(ctx, a) }
func (p stagedAdd) Close() error                                { return nil }

type stagedEmbed struct {
	ops.PreparedEmbed
	b *stagedBackend
}

func (p stagedEmbed) Run(ctx context.Context, in *ops.EmbedInputs, out *ops.EmbedOutputs) error {
	if err := p.b.step(); err != nil {
		return err
	}
	if p.b.settling.Load() > 0 {
		p.b.clock.Add(p.b.slowBy.Load())
		defer p.b.settling.Add(-1)
	}
	return p.PreparedEmbed.Run(ctx, in, out)
}

// Settling is the CPU op's report (cpu's embedOp.Settling) that it still prepares.
func (p stagedEmbed) Settling() bool { return p.b.settling.Load() > 0 }

// stagedRoute is a routed engine over two staged CPU backends: the router's choices tested
// with call times the test sets, and real results on both sides.
type stagedRoute struct {
	e        *Engine
	cpu, gpu *stagedBackend
	clock    atomic.Int64
}

func newStagedRoute(t *testing.T, m routeModel) *stagedRoute {
	s := &stagedRoute{}
	staged := func() *stagedBackend {
		be, err := newCPU(&config{})
		require.NoError(t, err)
		return &stagedBackend{Backend: be, clock: &s.clock}
	}
	s.cpu, s.gpu = staged(), staged()
	s.e = routedEngine(s.gpu, s.cpu, m, func() time.Time { return time.Unix(0, s.clock.Load()) })
	t.Cleanup(func() { s.e.Close() })
	return s
}

// costs sets how long a call takes on each side.
func (s *stagedRoute) costs(cpu, gpu time.Duration) {
	s.cpu.cost.Store(int64(cpu))
	s.gpu.cost.Store(int64(gpu))
}

func count(ran []string, name string) (n int) {
	for _, w := range ran {
		if w == name {
			n++
		}
	}
	return n
}

// TestRouteConverges: whichever backend the model picks first, a shape's second call tries
// the other, and its calls settle on the faster one, the slower having run 1+2·routeSamples
// of them (its first, then trials of two calls, the second timed) and one of the first four
// (so a benchmark's warm-up and three timed runs time the faster in two); the bits are the
// same wherever a call ran.
func TestRouteConverges(t *testing.T) {
	const fast, slow = time.Millisecond, 3 * time.Millisecond
	want := wants(t, routeCalls(t, cpuEngine(t), 1, 4))
	for _, first := range []side{onCPU, onGPU} {
		for _, faster := range []side{onCPU, onGPU} {
			s := newStagedRoute(t, modelPicking(first))
			if faster == onCPU {
				s.costs(fast, slow)
			} else {
				s.costs(slow, fast)
			}
			for j, c := range routeCalls(t, s.e, 1, 4) {
				name := fmt.Sprintf("model %s, %s faster: %s", first.name(), faster.name(), c.name)
				ran := runRouted(t, c, want[j], 30)
				require.Equal(t, first.name(), ran[0], "%s: the model places the first call: %v", name, ran)
				require.Equal(t, first.other().name(), ran[1], "%s: the second tries the other: %v", name, ran)
				require.Equal(t, 1, count(ran[:4], faster.other().name()), "%s: %v", name, ran)
				require.Equal(t, 1+2*routeSamples, count(ran, faster.other().name()), "%s: %v", name, ran)
				require.Equal(t, 10, count(ran[20:], faster.name()), "%s: %v", name, ran)
			}
		}
	}
}

// TestRouteOutgrowsFirstCall: a backend's first call of a shape, slow for a cause that does
// not recur (a pipeline to compile, weights to upload), does not keep the shape off it.
func TestRouteOutgrowsFirstCall(t *testing.T) {
	s := newStagedRoute(t, modelPicking(onCPU))
	s.costs(3*time.Millisecond, time.Millisecond)
	s.gpu.once.Store(int64(50 * time.Millisecond))
	c := routeCalls(t, s.e, 8, 4)[2]
	want := wants(t, routeCalls(t, cpuEngine(t), 8, 4))[2]
	ran := settle(t, s.e, c, want)
	require.Equal(t, []string{BackendCPU, BackendDawn, BackendCPU}, ran[:3], "the GPU's first call was the slower")
	require.Equal(t, []string{BackendDawn, BackendDawn}, runRouted(t, c, want, 2), "then its second the faster: %v", ran)
}

// TestRouteIgnoresSettlingCPU: the CPU's EmbedLayerNorm calls made while the op still moves
// its word table onto huge pages in the background run slower than it will; the router takes
// them as upper bounds only, so they do not send the shape to a GPU that is slower once the
// op has settled.
func TestRouteIgnoresSettlingCPU(t *testing.T) {
	s := newStagedRoute(t, modelPicking(onCPU))
	s.costs(time.Millisecond, 3*time.Millisecond)
	s.cpu.settling.Store(8)
	s.cpu.slowBy.Store(int64(20 * time.Millisecond))
	c := routeCalls(t, s.e, 9, 4)[2]
	want := wants(t, routeCalls(t, cpuEngine(t), 9, 4))[2]
	ran := settle(t, s.e, c, want)
	require.Zero(t, s.cpu.settling.Load(), "the router chose before the op settled: %v", ran)
	require.Equal(t, []string{BackendCPU, BackendCPU, BackendCPU, BackendCPU}, runRouted(t, c, want, 4),
		"the CPU, faster once settled, is the choice: %v", ran)
}

// TestRouteIgnoresBusyMoment: a backend timed while the machine was busy (two of its three
// samples here, five times its own time) is still chosen when it is the faster: the least
// of a backend's samples counts, since other work only slows a call.
func TestRouteIgnoresBusyMoment(t *testing.T) {
	s := newStagedRoute(t, modelPicking(onGPU))
	c := routeCalls(t, s.e, 11, 4)[0]
	want := wants(t, routeCalls(t, cpuEngine(t), 11, 4))[0]
	r := s.e.be.(*router)
	route := func() *shapeRoute {
		r.shapes.mu.RLock()
		defer r.shapes.mu.RUnlock()
		for _, sr := range r.shapes.shapes {
			return sr
		}
		return nil
	}
	var ran []string
	for range 200 {
		cpu := time.Millisecond
		if sr := route(); sr != nil {
			sr.mu.Lock()
			if sr.n[onCPU] < 2 {
				cpu = 5 * time.Millisecond // busy until the CPU has two samples
			}
			sr.mu.Unlock()
		}
		s.costs(cpu, 2*time.Millisecond)
		ran = append(ran, runRouted(t, c, want, 1)...)
		if sr := route(); sr != nil && sr.state.Load() != exploring {
			break
		}
	}
	require.Equal(t, chosenCPU, route().state.Load(), "the busy samples decided: %v", ran)
}

// TestRouteFollowsLoad: a chosen shape tries the other backend (two calls, the second timed)
// every routeRecheck calls times how much slower that backend was, and moves when the times
// turn.
func TestRouteFollowsLoad(t *testing.T) {
	const fast, slow = time.Millisecond, 10 * time.Millisecond
	const every = 10 * routeRecheck
	s := newStagedRoute(t, modelPicking(onCPU))
	s.costs(fast, slow)
	c := routeCalls(t, s.e, 2, 4)[0] // the three calls share the router's choice: one will do
	want := wants(t, routeCalls(t, cpuEngine(t), 2, 4))[0]
	settle(t, s.e, c, want)
	ran := runRouted(t, c, want, 2*every)
	require.Equal(t, 4, count(ran, BackendDawn), "two calls on the slower backend each %d", every)
	require.Equal(t, []string{BackendCPU, BackendDawn, BackendDawn, BackendCPU}, ran[every-4:every])

	s.costs(slow, fast) // the machine's load turns: the GPU is now the faster
	ran = runRouted(t, c, want, 2*every+100)
	require.Equal(t, 100, count(ran[2*every:], BackendDawn), "the shape moved to the GPU: %v", ran[2*every:])
	require.Equal(t, 2, count(ran[:every], BackendDawn), "one fresh sample does not move it")
}

// TestRouteRefusedStaysOnCPU: a shape the GPU refuses for a device limit runs on the CPU, its
// first call included, and stays there though the GPU would be faster.
func TestRouteRefusedStaysOnCPU(t *testing.T) {
	s := newStagedRoute(t, modelPicking(onGPU))
	s.costs(10*time.Millisecond, time.Millisecond)
	want := wants(t, routeCalls(t, cpuEngine(t), 3, 4))
	s.gpu.refuse.Store(true)
	calls := routeCalls(t, s.e, 3, 4)
	for j, c := range calls {
		require.Equal(t, []string{BackendCPU}, runRouted(t, c, want[j], 1), c.name)
	}
	s.gpu.refuse.Store(false)
	for j, c := range calls {
		ran := runRouted(t, c, want[j], 2*routeRecheck+1)
		require.Equal(t, len(ran), count(ran, BackendCPU), c.name)
	}
	require.Zero(t, s.gpu.calls.Load())
}

// TestRouteTrialFailureHidden: a call the router gives to the backend its shape has not chosen
// (to time it) and that fails there runs on the other, so exploring shows in no call's result;
// the failing backend is tried again every routeRecheck calls, and taken once it works.
func TestRouteTrialFailureHidden(t *testing.T) {
	s := newStagedRoute(t, modelPicking(onCPU))
	s.costs(3*time.Millisecond, time.Millisecond)
	s.gpu.broken.Store(true)
	c := routeCalls(t, s.e, 10, 4)[0]
	want := wants(t, routeCalls(t, cpuEngine(t), 10, 4))[0]
	ran := runRouted(t, c, want, 2*routeRecheck+4) // tries at calls 2, 3+routeRecheck, 4+2*routeRecheck
	require.Equal(t, len(ran), count(ran, BackendCPU))
	require.Equal(t, int64(3), s.gpu.tries.Load(), "the second call, then one every %d", routeRecheck)
	s.gpu.broken.Store(false)
	settle(t, s.e, c, want)
	require.Equal(t, []string{BackendDawn}, runRouted(t, c, want, 1))
}

// TestRouteNoAllocs: the router's steady state allocates nothing, a pair of timed calls
// (one on the other backend) included.
func TestRouteNoAllocs(t *testing.T) {
	testalloc.SkipUnderRace(t)
	s := newStagedRoute(t, modelPicking(onGPU))
	s.costs(time.Millisecond, time.Millisecond) // a tie: the CPU, timing the GPU every routeRecheck calls
	var where string
	rctx := ReportBackend(context.Background(), &where)
	for _, c := range routeCalls(t, s.e, 4, 4) {
		testalloc.None(t, c.name, func() {
			for range routeRecheck + 1 {
				if err := c.run(rctx); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	require.Greater(t, s.gpu.calls.Load(), int64(3*(1+routeSamples)), "the timed calls on the other backend ran")
}

// TestRouteConcurrent: calls of one shape from many goroutines at once, and more shapes than
// the router keeps, which it drops oldest first; every call's bits are right (run it under
// -race).
func TestRouteConcurrent(t *testing.T) {
	const goroutines, calls = 8, 100
	const setsEach = routeShapes/(2*goroutines) + 2 // each set's prepared ops are two new shapes
	s := newStagedRoute(t, modelPicking(onCPU))
	s.costs(2*time.Millisecond, time.Millisecond)
	c := cpuEngine(t)
	want, ownWant := wants(t, routeCalls(t, c, 5, 3)), wants(t, routeCalls(t, c, 6, 1))
	var shared, own [goroutines][]routeCall
	for g := range goroutines {
		shared[g] = routeCalls(t, s.e, 5, 3)
		for range setsEach {
			own[g] = append(own[g], routeCalls(t, s.e, 6, 1)...)
		}
	}
	check := func(g, i int, c routeCall, want []byte) bool {
		var where string
		if err := c.run(ReportBackend(context.Background(), &where)); err != nil {
			t.Error(err)
			return false
		}
		if !bytes.Equal(want, c.out()) || (where != BackendCPU && where != BackendDawn) {
			t.Errorf("goroutine %d, call %d (%s) on %q: the outputs differ from the CPU engine's", g, i, c.name, where)
			return false
		}
		return true
	}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls {
				j := i % len(want)
				if !check(g, i, shared[g][j], want[j]) || (i < len(own[g]) && !check(g, i, own[g][i], ownWant[j])) {
					return
				}
			}
		}()
	}
	wg.Wait()
	held, _ := s.e.routedShapes()
	require.Equal(t, routeShapes, held, "the router keeps %d shapes", routeShapes)

	// The router alone, harder: twice the shapes it keeps, each explored by all goroutines at
	// once, a few of them refused.
	r := s.e.be.(*router)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 * routeShapes {
				t := r.route(callShape{dims: [3]int{i % (2 * routeShapes)}}, side(g%2))
				if t.on == onGPU && i%97 == 0 {
					t.refused()
				}
				s.clock.Add(int64(time.Microsecond))
				r.finish(&t, nil)
			}
		}()
	}
	wg.Wait()
	held, _ = s.e.routedShapes()
	require.Equal(t, routeShapes, held)
}

// TestAdapterChoice lists the adapters (lavapipe listed twice through a second ICD manifest
// when VK_ICD_FILENAMES names one), opens each by index and by name, and refuses an unknown
// name: an error with Dawn forced, the CPU with the cause in Reason in auto mode.
func TestAdapterChoice(t *testing.T) {
	if dawnEngine(t) == nil { // fails instead under FUSEDNORM_REQUIRE_DAWN=1
		t.Skip("Dawn unavailable")
	}
	if env := os.Getenv("VK_ICD_FILENAMES"); env != "" {
		t.Setenv("VK_ICD_FILENAMES", env+string(os.PathListSeparator)+secondManifest(t, strings.Split(env, string(os.PathListSeparator))[0]))
	}
	list, err := Adapters()
	require.NoError(t, err)
	require.NotEmpty(t, list)
	t.Logf("adapters: %+v", list)
	for _, a := range list {
		e, err := Open(WithBackend(BackendDawn), WithAdapter(fmt.Sprint(a.Index)))
		require.NoError(t, err, "adapter %d", a.Index)
		require.Contains(t, e.Info().Device, a.Name)
		require.NoError(t, e.Close())
	}
	name := strings.Fields(list[0].Name)[0]
	e, err := Open(WithBackend(BackendDawn), WithAdapter(strings.ToUpper(name)))
	require.NoError(t, err)
	require.Contains(t, e.Info().Device, list[0].Name)
	require.NoError(t, e.Close())

	_, err = Open(WithBackend(BackendDawn), WithAdapter("no-such-gpu"))
	require.ErrorIs(t, err, ErrUnavailable)
	require.Contains(t, err.Error(), list[0].Name, "the error names the adapters there are")
	_, err = Open(WithBackend(BackendDawn), WithAdapter(fmt.Sprint(len(list))))
	require.ErrorIs(t, err, ErrUnavailable)
	e, err = Open(WithBackend(BackendAuto), WithAdapter("no-such-gpu"))
	require.NoError(t, err)
	require.Equal(t, BackendCPU, e.Info().Backend)
	require.Contains(t, e.Info().Reason, "no-such-gpu")
	require.NoError(t, e.Close())
	for _, bad := range []string{"-1", " "} {
		_, err = Open(WithBackend(BackendDawn), WithAdapter(bad))
		require.ErrorIs(t, err, ErrInvalidArgument, "WithAdapter(%q)", bad)
	}
}

// secondManifest writes a copy of the ICD manifest at first with its library path made
// absolute, so the Vulkan loader lists that driver's adapter twice.
func secondManifest(t *testing.T, first string) string {
	t.Helper()
	raw, err := os.ReadFile(first)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	icd, _ := m["ICD"].(map[string]any)
	lib, _ := icd["library_path"].(string)
	require.NotEmpty(t, lib, "%s: ICD.library_path", first)
	if strings.Contains(lib, "/") && !filepath.IsAbs(lib) {
		icd["library_path"] = filepath.Join(filepath.Dir(first), lib)
	}
	out, err := json.Marshal(m)
	require.NoError(t, err)
	second := filepath.Join(t.TempDir(), "second_icd.json")
	require.NoError(t, os.WriteFile(second, out, 0o644))
	return second
}

// TestAdapterSelectorRules runs in every build: a negative index or an empty selector is an
// argument error for Dawn and auto alike, and the CPU backend ignores WithAdapter.
func TestAdapterSelectorRules(t *testing.T) {
	for _, b := range []string{BackendDawn, BackendAuto} {
		for _, bad := range []string{"-1", ""} {
			_, err := Open(WithBackend(b), WithAdapter(bad))
			require.ErrorIs(t, err, ErrInvalidArgument, "%s, WithAdapter(%q)", b, bad)
		}
	}
	e, err := Open(WithBackend(BackendCPU), WithAdapter("-1"))
	require.NoError(t, err)
	require.NoError(t, e.Close())
	if _, err := Adapters(); err != nil {
		require.ErrorIs(t, err, ErrUnavailable)
	}
}
