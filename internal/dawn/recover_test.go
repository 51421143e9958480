//go:build cgo

package dawn

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fusednorm/fusednorm/internal/cpu"
	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/plan"
	"github.com/fusednorm/fusednorm/internal/testkit"
)

// lossHook is a fault-injection hook that loses the device at the next dispatch once armed,
// and can make reopening fail.
type lossHook struct {
	lose     atomic.Bool
	failOpen atomic.Bool
	opens    atomic.Int32
}

func (h *lossHook) inject(site string) error {
	switch site {
	case "lose":
		if h.lose.CompareAndSwap(true, false) {
			return errors.New("test: device lost on purpose")
		}
	case "open":
		h.opens.Add(1)
		if h.failOpen.Load() {
			return errors.New("test: no device to reopen")
		}
	}
	return nil
}

// lossFixture is a fresh backend (not the shared one: it loses its device) with a prepared
// EmbedLayerNorm and an AddLayerNorm problem, and their results before any loss.
type lossFixture struct {
	b        *Backend
	hook     *lossHook
	emb      ops.PreparedEmbed
	embIn    ops.EmbedInputs
	addIn    ops.AddLN
	embWant  []float32
	addWant  []float32
	cpuEmb   []float32 // the CPU backend's results, mirroring the device's profile
	cpuAdd   []float32
	logs     *strings.Builder
	logMu    *sync.Mutex
	fallback bool
}

func newLossFixture(t *testing.T, fallback bool) *lossFixture {
	t.Helper()
	f := &lossFixture{hook: &lossHook{}, logs: &strings.Builder{}, logMu: &sync.Mutex{}, fallback: fallback}
	cfg := Config{
		Inject: f.hook.inject,
		Logger: slog.New(slog.NewTextHandler(&lockedWriter{w: f.logs, mu: f.logMu}, nil)),
	}
	if fallback {
		cfg.Fallback = func(p plan.Contraction) (ops.Backend, error) { return cpu.New(cpu.Options{Profile: p}) }
	}
	b, err := New(cfg)
	if err != nil {
		testkit.SkipWithoutDawn(t, err)
	}
	t.Cleanup(func() { b.Close() })
	f.b = b

	r := rand.New(rand.NewPCG(12, 1))
	const V, P, H, B, S = 97, 32, 200, 3, 17
	w := ops.EmbedWeights{
		DType: ops.F32, H: H, V: V, P: P, Epsilon: 1e-12,
		Word:  testkit.Float(ops.F32, testkit.Normal(r, V*H, 1, 0.2)),
		Pos:   testkit.Float(ops.F32, testkit.Normal(r, P*H, 0.5, 0)),
		Gamma: testkit.Float(ops.F32, testkit.Normal(r, H, 1, 0.5)),
		Beta:  testkit.Float(ops.F32, testkit.Normal(r, H, 0.3, 0)),
	}
	ids := make([]int32, B*S)
	for i := range ids {
		ids[i] = int32(r.IntN(V))
	}
	f.embIn = ops.EmbedInputs{B: B, S: S, IDs: ids}
	if f.emb, err = b.PrepareEmbed(&w); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.emb.Close() })
	const N, D = 37, 300
	f.addIn = ops.AddLN{
		N: N, D: D, Epsilon: 1e-5,
		X1:    testkit.Float(ops.F32, testkit.Normal(r, N*D, 2, 0.1)),
		X2:    testkit.Float(ops.F32, testkit.Normal(r, N*D, 1, -0.3)),
		Gamma: testkit.Float(ops.F32, testkit.Normal(r, D, 1, 0.5)),
		Beta:  testkit.Float(ops.F32, testkit.Normal(r, D, 0.2, 0)),
	}
	if f.embWant, err = f.runEmbed(); err != nil {
		t.Fatal(err)
	}
	if f.addWant, err = f.runAdd(); err != nil {
		t.Fatal(err)
	}

	ref, err := cpu.New(cpu.Options{Profile: b.Info().Profile})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	cp, err := ref.PrepareEmbed(&w)
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Close()
	out := ops.EmbedOutputs{Out: testkit.Zeros(ops.F32, B*S*H)}
	if err := cp.Run(context.Background(), &f.embIn, &out); err != nil {
		t.Fatal(err)
	}
	f.cpuEmb = out.Out.F32
	a := f.addIn
	a.Y, a.Mean, a.Rstd = testkit.Zeros(ops.F32, N*D), make([]float32, N), make([]float32, N)
	if err := ref.AddLayerNorm(context.Background(), &a); err != nil {
		t.Fatal(err)
	}
	f.cpuAdd = append(append(a.Y.F32, a.Mean...), a.Rstd...)
	return f
}

func (f *lossFixture) runEmbed() ([]float32, error) {
	out := ops.EmbedOutputs{Out: testkit.Zeros(ops.F32, f.embIn.B*f.embIn.S*200)}
	testkit.Poison(out.Out)
	err := f.emb.Run(context.Background(), &f.embIn, &out)
	return out.Out.F32, err
}

func (f *lossFixture) runAdd() ([]float32, error) {
	a := f.addIn
	a.Y, a.Mean, a.Rstd = testkit.Zeros(ops.F32, a.N*a.D), make([]float32, a.N), make([]float32, a.N)
	testkit.Poison(a.Y)
	err := f.b.AddLayerNorm(context.Background(), &a)
	return append(append(a.Y.F32, a.Mean...), a.Rstd...), err
}

// sameBits counts the elements whose bits differ.
func sameBits(got, want []float32) int {
	return testkit.Compare(testkit.Float(ops.F32, got), testkit.Float(ops.F32, want), 1, nil).Count
}

// loseDuring arms the hook, runs call (which must fail with the loss) and checks its error.
func (f *lossFixture) loseDuring(t *testing.T, name string, call func() ([]float32, error)) {
	t.Helper()
	f.hook.lose.Store(true)
	_, err := call()
	if f.hook.lose.Load() {
		t.Fatalf("%s: the loss site was never reached", name)
	}
	if !errors.Is(err, ops.ErrDevice) || !strings.Contains(err.Error(), "device lost") {
		t.Fatalf("%s in flight during the loss: want ErrDevice saying the device was lost, got %v", name, err)
	}
	t.Logf("failed call: %s: %v", name, firstLine(err.Error()))
}

// TestBackendDeviceLossRecovery loses the device for real (wgpuDeviceForceLoss) during a prepared
// EmbedLayerNorm and during an AddLayerNorm: each call in flight fails wrapping ErrDevice with
// "device lost", the next call reopens a device, uploads the prepared weights again, and
// gives the bits of before, which are the CPU backend's under the device's profile. Run it on
// a GPU with: go test -run TestBackendDeviceLossRecovery -v ./dawn/
func TestBackendDeviceLossRecovery(t *testing.T) {
	f := newLossFixture(t, false)
	t.Logf("device: %s; library: %s", f.b.Info().Device, f.b.Info().Library)
	t.Logf("before the loss: embed differs from the CPU (profile %v) in %d of %d, addln in %d of %d",
		f.b.Info().Profile, sameBits(f.embWant, f.cpuEmb), len(f.cpuEmb), sameBits(f.addWant, f.cpuAdd), len(f.cpuAdd))
	calls := []struct {
		name string
		run  func() ([]float32, error)
		want []float32
		cpu  []float32
	}{
		{"EmbedLayerNorm", f.runEmbed, f.embWant, f.cpuEmb},
		{"AddLayerNorm", f.runAdd, f.addWant, f.cpuAdd},
	}
	for i, lost := range calls {
		f.loseDuring(t, lost.name, lost.run)
		for j := range calls {
			next := calls[(i+j)%len(calls)] // the call that lost the device first, then the other
			start := time.Now()
			got, err := next.run()
			took := time.Since(start)
			if err != nil {
				t.Fatalf("%s after the loss: %v", next.name, err)
			}
			if j == 0 {
				t.Logf("recovered: the next call (%s) took %v", next.name, took)
			}
			bad, badCPU := sameBits(got, next.want), sameBits(got, next.cpu)
			t.Logf("%s after the loss: %d of %d elements differ from before, %d from the CPU backend", next.name, bad, len(got), badCPU)
			if bad != 0 {
				t.Errorf("%s after the loss: %d elements differ from before", next.name, bad)
			}
		}
	}
	info := f.b.Info()
	t.Logf("health: %s", info.Health)
	if info.Name != "dawn" || !strings.Contains(info.Health, "device lost 2 time(s)") || !strings.Contains(info.Health, "reopened in") {
		t.Errorf("Info after two recovered losses: %+v", info)
	}
	if n := f.hook.opens.Load(); n != 3 {
		t.Errorf("opened %d devices, want 3 (the first and two reopens)", n)
	}
	f.logMu.Lock()
	defer f.logMu.Unlock()
	if !strings.Contains(f.logs.String(), "device reopened") {
		t.Errorf("the logger did not hear of the recovery: %s", f.logs.String())
	}
}

// TestBackendDeviceLossFallback: with a fallback (auto mode) and no device to reopen, the backend
// carries on with the CPU backend mirroring the device's profile: same bits, Info says so.
// Without one, calls fail wrapping ErrDevice until a device can be reopened.
func TestBackendDeviceLossFallback(t *testing.T) {
	for _, fallback := range []bool{true, false} {
		f := newLossFixture(t, fallback)
		f.hook.failOpen.Store(true)
		f.loseDuring(t, "AddLayerNorm", f.runAdd)
		got, err := f.runEmbed()
		if !fallback {
			if !errors.Is(err, ops.ErrDevice) || !strings.Contains(err.Error(), "not reopened") {
				t.Fatalf("no fallback, no device: want ErrDevice, got %v", err)
			}
			if info := f.b.Info(); info.Name != "dawn" || !strings.Contains(info.Health, "not reopened") {
				t.Errorf("Info while the device is gone: %+v", info)
			}
			f.hook.failOpen.Store(false) // the device is back
			if got, err = f.runEmbed(); err != nil {
				t.Fatalf("once a device can be opened again: %v", err)
			}
		} else if err != nil {
			t.Fatalf("fallback: %v", err)
		}
		if bad := sameBits(got, f.embWant); bad != 0 {
			t.Errorf("fallback %v: EmbedLayerNorm: %d elements differ from before the loss", fallback, bad)
		}
		got, err = f.runAdd()
		if err != nil || sameBits(got, f.addWant) != 0 {
			t.Errorf("fallback %v: AddLayerNorm after the loss: %v, %d elements differ", fallback, err, sameBits(got, f.addWant))
		}
		info := f.b.Info()
		t.Logf("fallback %v: %s on %s; health: %s", fallback, info.Name, info.Device, info.Health)
		if fallback && (info.Name != "cpu" || !strings.Contains(info.Health, "running on the CPU")) {
			t.Errorf("Info after falling back: %+v", info)
		}
		if err := f.b.setKernelTiming(true); fallback && !errors.Is(err, ops.ErrNotSupported) {
			t.Errorf("setKernelTiming on the CPU fallback: %v", err)
		}
	}
}

// TestBackendKernelTimingAfterClose: a closed backend says so.
func TestBackendKernelTimingAfterClose(t *testing.T) {
	b, err := New(Config{})
	if err != nil {
		t.Skip(err)
	}
	b.Close()
	if err := b.setKernelTiming(true); !errors.Is(err, ops.ErrClosed) {
		t.Errorf("setKernelTiming after Close: %v", err)
	}
}

// TestBackendDeviceLossConcurrent loses the device while several goroutines run both ops:
// each call either succeeds with the bits of before or fails wrapping ErrDevice; afterwards
// every call succeeds again. Meant for -race.
func TestBackendDeviceLossConcurrent(t *testing.T) {
	f := newLossFixture(t, false)
	const workers, rounds = 6, 6
	var wg sync.WaitGroup
	var failed atomic.Int32
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				if w == 0 && i == 2 {
					f.hook.lose.Store(true)
				}
				run, want := f.runAdd, f.addWant
				if (w+i)%2 == 1 {
					run, want = f.runEmbed, f.embWant
				}
				got, err := run()
				if err != nil {
					if !errors.Is(err, ops.ErrDevice) {
						t.Errorf("worker %d round %d: %v", w, i, err)
					}
					failed.Add(1)
					continue
				}
				if bad := sameBits(got, want); bad != 0 {
					t.Errorf("worker %d round %d: %d elements differ", w, i, bad)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d of %d calls failed with the loss; health: %s", failed.Load(), workers*rounds, f.b.Info().Health)
	if failed.Load() == 0 {
		t.Error("no call failed: the device was not lost")
	}
	for _, run := range []func() ([]float32, error){f.runAdd, f.runEmbed} {
		if _, err := run(); err != nil {
			t.Errorf("after the loss: %v", err)
		}
	}
}
