package fusednorm

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fusednorm/fusednorm/internal/testkit"
	"github.com/stretchr/testify/require"
)

// One engine per GPU: the adapter list, WithAdapter's selectors, and engines on two adapters at
// once, one losing its device while the other works on. On a machine without a second GPU the
// tests list the Vulkan driver of VK_ICD_FILENAMES twice (lavapipe twice), so Dawn sees two
// adapters; the Vulkan loader reads the variable at each instance, and Dawn makes one for each
// listing and each device, so setting it in the test process is enough.

// adaptersOrSkip lists the adapters, skipping without Dawn unless FUSEDNORM_REQUIRE_DAWN=1.
func adaptersOrSkip(t *testing.T) []AdapterInfo {
	t.Helper()
	list, err := Adapters()
	if err != nil {
		testkit.SkipWithoutDawn(t, err)
	}
	require.NotEmpty(t, list, "Adapters: an empty list without an error")
	return list
}

// twoAdapters lists the adapters, listing the driver twice when there is only one. Fewer than
// two only where VK_ICD_FILENAMES is unset on a machine with one GPU.
func twoAdapters(t *testing.T) []AdapterInfo {
	t.Helper()
	list := adaptersOrSkip(t)
	if len(list) < 2 && testkit.ListDriverTwice(t) {
		list = adaptersOrSkip(t)
		require.GreaterOrEqual(t, len(list), 2, "with the driver listed twice: %v", list)
	}
	return list
}

// adapterLine is how Info.Device begins for an engine on a: its name, backend and type.
func adapterLine(a AdapterInfo) string { return a.Name + " (" + a.Backend + ", " + a.Type }

// TestAdaptersAndSelectors: Adapters lists the same adapters, in the same order, each time;
// each opens by its index and by its name, Info naming it; a selector that matches none is an
// error naming every adapter, an index past the list one naming their count, and auto mode
// given either runs on the CPU saying why.
func TestAdaptersAndSelectors(t *testing.T) {
	list := twoAdapters(t)
	t.Logf("adapters: %+v", list)
	for range 2 {
		again, err := Adapters()
		require.NoError(t, err)
		require.Equal(t, list, again, "Adapters changed between calls")
	}
	for i, a := range list {
		require.Equal(t, i, a.Index)
		require.Equal(t, "Vulkan", a.Backend, "adapter %d", i)
		require.NotEmpty(t, a.Name, "adapter %d", i)
		require.Equal(t, a.Type == "CPU", a.Software, "adapter %d: Software and Type disagree", i)
		// By name: the first adapter whose name, vendor or driver holds it (two identical
		// GPUs, or lavapipe listed twice, share a name: the index tells them apart).
		byName := slices.IndexFunc(list, func(b AdapterInfo) bool {
			return slices.ContainsFunc([]string{b.Name, b.Vendor, b.Driver}, func(f string) bool {
				return strings.Contains(strings.ToLower(f), strings.ToLower(a.Name))
			})
		})
		for _, sel := range []struct {
			sel  string
			want AdapterInfo
		}{{strconv.Itoa(i), a}, {a.Name, list[byName]}, {strings.ToUpper(a.Name), list[byName]}} {
			e, err := Open(WithBackend(BackendDawn), WithAdapter(sel.sel))
			require.NoError(t, err, "WithAdapter(%q)", sel.sel)
			info := e.Info()
			require.NoError(t, e.Close())
			require.True(t, strings.HasPrefix(info.Device, adapterLine(sel.want)), "WithAdapter(%q): Info.Device %q, want the adapter %q", sel.sel, info.Device, adapterLine(sel.want))
			if sel.want.Driver != "" {
				require.Contains(t, info.Device, sel.want.Driver, "WithAdapter(%q)", sel.sel)
			}
		}
	}

	_, err := Open(WithBackend(BackendDawn), WithAdapter("no-such-gpu"))
	require.ErrorIs(t, err, ErrUnavailable)
	require.Contains(t, err.Error(), `"no-such-gpu"`)
	for _, a := range list {
		require.Contains(t, err.Error(), fmt.Sprintf("%d: %s", a.Index, a.Name), "the error does not name every adapter")
	}
	_, err = Open(WithBackend(BackendDawn), WithAdapter(strconv.Itoa(len(list))))
	require.ErrorIs(t, err, ErrUnavailable)
	require.Contains(t, err.Error(), fmt.Sprintf("lists %d Vulkan adapter", len(list)))
	for sel, why := range map[string]string{"no-such-gpu": `"no-such-gpu"`, strconv.Itoa(len(list)): fmt.Sprintf("lists %d Vulkan adapter", len(list))} {
		e, err := Open(WithBackend(BackendAuto), WithAdapter(sel))
		require.NoError(t, err)
		info := e.Info()
		require.NoError(t, e.Close())
		require.Equal(t, BackendCPU, info.Backend, "auto with WithAdapter(%q)", sel)
		require.Contains(t, info.Reason, why, "auto with WithAdapter(%q)", sel)
	}
	for _, sel := range []string{"-1", " "} {
		_, err := Open(WithBackend(BackendDawn), WithAdapter(sel))
		require.ErrorIs(t, err, ErrInvalidArgument, "WithAdapter(%q)", sel)
	}
}

// pairWork is the calls each engine of TestEnginePerAdapter runs, with the bits the CPU gives.
type pairWork struct {
	add    AddLayerNormInputs
	embIn  EmbedInputs
	embW   EmbedWeights
	wantY  []float32 // AddLayerNorm's y, mean, rstd on the CPU mirroring the engine's profile
	wantE  []float32 // EmbedLayerNorm's output on the same
	engine *Engine
	op     *EmbedLayerNorm
}

func newPairWork(t *testing.T, e *Engine, seed uint64) *pairWork {
	t.Helper()
	const N, H, V, P, B, S = 64, 768, 1000, 128, 2, 64
	r := rand.New(rand.NewPCG(seed, 21))
	vals := func(n int, scale float32) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = (r.Float32()*2 - 1) * scale
		}
		return v
	}
	w := &pairWork{engine: e}
	w.add = AddLayerNormInputs{X1: FromFloat32(vals(N*H, 2), N, H), X2: FromFloat32(vals(N*H, 1), N, H),
		Gamma: FromFloat32(vals(H, 1), H), Beta: FromFloat32(vals(H, 0.2), H)}
	w.embW = EmbedWeights{Word: FromFloat32(vals(V*H, 0.1), V, H), Position: FromFloat32(vals(P*H, 0.05), P, H),
		Segment: FromFloat32(vals(2*H, 0.05), 2, H), Gamma: FromFloat32(vals(H, 1), H), Beta: FromFloat32(vals(H, 0.1), H)}
	ids, seg := make([]int32, B*S), make([]int32, B*S)
	for i := range ids {
		ids[i], seg[i] = int32(r.IntN(V)), int32(r.IntN(2))
	}
	w.embIn = EmbedInputs{InputIDs: FromInt32(ids, B, S), SegmentIDs: FromInt32(seg, B, S)}

	ref, err := Open(WithBackend(BackendCPU), WithContraction(e.Info().Profile), WithCPULevel("go"))
	require.NoError(t, err)
	defer ref.Close()
	refOp, err := ref.NewEmbedLayerNorm(w.embW)
	require.NoError(t, err)
	defer refOp.Close()
	w.wantY, err = w.runAdd(ref)
	require.NoError(t, err)
	w.wantE, err = w.runEmbed(refOp)
	require.NoError(t, err)
	w.op, err = e.NewEmbedLayerNorm(w.embW)
	require.NoError(t, err)
	t.Cleanup(func() { w.op.Close() })
	return w
}

func (w *pairWork) runAdd(e *Engine) ([]float32, error) {
	var out AddLayerNormOutputs
	err := e.AddLayerNorm(context.Background(), w.add, &out)
	return slices.Concat(out.Y.Float32s(), out.Mean.Float32s(), out.Rstd.Float32s()), err
}

func (w *pairWork) runEmbed(op *EmbedLayerNorm) ([]float32, error) {
	var out EmbedOutputs
	err := op.Run(context.Background(), w.embIn, &out)
	return out.Output.Float32s(), err
}

// round runs both calls on the engine and checks their bits against the CPU's.
func (w *pairWork) round() error {
	y, err := w.runAdd(w.engine)
	if err != nil {
		return fmt.Errorf("AddLayerNorm: %w", err)
	}
	if n := bitsDiffer(y, w.wantY); n > 0 {
		return fmt.Errorf("AddLayerNorm: %d of %d elements differ from the CPU's bits", n, len(y))
	}
	o, err := w.runEmbed(w.op)
	if err != nil {
		return fmt.Errorf("EmbedLayerNorm: %w", err)
	}
	if n := bitsDiffer(o, w.wantE); n > 0 {
		return fmt.Errorf("EmbedLayerNorm: %d of %d elements differ from the CPU's bits", n, len(o))
	}
	return nil
}

// bitsDiffer counts the elements whose bits differ (every length difference counts).
func bitsDiffer(a, b []float32) int {
	n := max(len(a), len(b)) - min(len(a), len(b))
	for i := range min(len(a), len(b)) {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			n++
		}
	}
	return n
}

// TestEnginePerAdapter opens a Dawn engine on each of two adapters (the same adapter twice
// where there is only one and VK_ICD_FILENAMES is unset), runs calls on both at once with the
// CPU's bits, and keeps each engine's device memory its own. Then, while the other engine runs
// calls in a loop, it loses the first engine's device for real ("lose" fault site): the call
// in flight there fails with ErrDevice, the next calls recover and give the CPU's bits again,
// and every call of the other engine, those during the loss and the recovery among them,
// succeeds with the CPU's bits, its device tensor and memory untouched. On a GPU:
// go test -run TestEnginePerAdapter -v .
func TestEnginePerAdapter(t *testing.T) {
	list := twoAdapters(t)
	sels := []string{"0", "1"}
	if len(list) < 2 {
		sels[1] = "0"
		t.Logf("one adapter (%s) and VK_ICD_FILENAMES unset: both engines on it", list[0].Name)
	}
	var lose atomic.Bool
	lost, err := Open(WithBackend(BackendDawn), WithAdapter(sels[0]), withFaultInjection(func(site string) error {
		if site == "lose" && lose.CompareAndSwap(true, false) {
			return errors.New("device lost on purpose by TestEnginePerAdapter")
		}
		return nil
	}))
	require.NoError(t, err)
	defer lost.Close()
	other, err := Open(WithBackend(BackendDawn), WithAdapter(sels[1]))
	require.NoError(t, err)
	defer other.Close()
	for i, e := range []*Engine{lost, other} {
		t.Logf("engine on adapter %s: %s", sels[i], e.Info())
	}
	wl, wo := newPairWork(t, lost, 1), newPairWork(t, other, 2)

	// Both at once.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, w := range []*pairWork{wl, wo} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				if err := w.round(); err != nil {
					errs[i] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...), "calls on both engines at once")

	// Each engine's device memory is its own.
	x := FromFloat32(slices.Repeat([]float32{1, -2, 3.5, 0.25}, 256), 1024)
	for i, e := range []*Engine{lost, other} {
		o := []*Engine{other, lost}[i]
		nE, bE := e.DeviceMemory()
		nO, bO := o.DeviceMemory()
		d, err := e.Upload(x)
		require.NoError(t, err)
		nE2, bE2 := e.DeviceMemory()
		nO2, bO2 := o.DeviceMemory()
		require.Equal(t, nE+1, nE2, "engine %d: buffers after an upload", i)
		require.GreaterOrEqual(t, bE2, bE+4096, "engine %d: bytes after an upload", i)
		require.Equal(t, [2]uint64{uint64(nO), bO}, [2]uint64{uint64(nO2), bO2}, "an upload on engine %d changed the other's device memory", i)
		require.NoError(t, d.Close())
		nE3, _ := e.DeviceMemory()
		require.Equal(t, nE, nE3, "engine %d: buffers after the device tensor's Close", i)
	}

	// The other engine keeps a device tensor across the loss, and runs calls in a loop.
	kept, err := other.Upload(x)
	require.NoError(t, err)
	defer kept.Close()
	require.NoError(t, wo.round()) // its scratch settled before the memory is taken
	otherBuffers, otherBytes := other.DeviceMemory()
	var calls atomic.Int64
	stop, loopErr := make(chan struct{}), make(chan error, 1)
	go func() {
		defer close(loopErr)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := wo.round(); err != nil {
				loopErr <- fmt.Errorf("the other engine's round %d: %w", calls.Load()+1, err)
				return
			}
			calls.Add(1)
		}
	}()
	// waitFor waits until the other engine has finished n rounds, or its loop failed.
	waitFor := func(n int64) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for calls.Load() < n {
			select {
			case err := <-loopErr:
				close(stop)
				require.NoError(t, err)
				require.FailNow(t, "the other engine's loop ended")
			case <-time.After(time.Millisecond):
			}
			require.True(t, time.Now().Before(deadline), "the other engine finished %d rounds in 2 minutes, want %d", calls.Load(), n)
		}
	}
	waitFor(1)

	lose.Store(true)
	atLoss := calls.Load()
	_, err = wl.runAdd(lost)
	require.False(t, lose.Load(), "the loss site was not reached")
	require.ErrorIs(t, err, ErrDevice)
	require.Contains(t, err.Error(), "device lost")
	start := time.Now()
	require.NoError(t, wl.round(), "the lost engine after its loss")
	t.Logf("the lost engine recovered; its next round took %v; the other engine finished %d rounds meanwhile",
		time.Since(start).Round(time.Millisecond), calls.Load()-atLoss)
	for range 2 {
		require.NoError(t, wl.round(), "the lost engine after its recovery")
	}
	waitFor(calls.Load() + 2) // rounds of the other engine begun after the recovery too
	close(stop)
	require.NoError(t, <-loopErr)
	t.Logf("the other engine: %d rounds, all with the CPU's bits", calls.Load())

	got := FromFloat32(make([]float32, x.Len()), x.Len())
	require.NoError(t, kept.Read(context.Background(), got))
	require.Zero(t, bitsDiffer(got.Float32s(), x.Float32s()), "the other engine's device tensor changed")
	n, b := other.DeviceMemory()
	require.Equal(t, [2]uint64{uint64(otherBuffers), otherBytes}, [2]uint64{uint64(n), b}, "the other engine's device memory changed")
	require.Contains(t, lost.Info().Health, "device lost 1 time(s)")
	require.Empty(t, other.Info().Health, "the other engine's Health")
	if n, _ := lost.DeviceMemory(); n == 0 {
		t.Error("the lost engine holds no device memory after the recovery (its prepared op's weights at least)")
	}
}
