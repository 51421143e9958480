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
	b       *Backend
	hook    *lossHook
	emb     ops.PreparedEmbed
	embIn   ops.EmbedInputs
	addIn   ops.AddLN
	embWant []float32
	addWant []float32
	cpuEmb  []float32 // the CPU backend's results, mirroring the device's profile
	cpuAdd  []float32
	logs    *testkit.LockedBuffer
}

func newLossFixture(t *testing.T) *lossFixture {
	t.Helper()
	f := &lossFixture{hook: &lossHook{}, logs: &testkit.LockedBuffer{}}
	b, err := New(Config{Faults: f.hook.inject, Logger: slog.New(slog.NewTextHandler(f.logs, nil))})
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
// a GPU with: go test -run TestBackendDeviceLossRecovery -v ./internal/dawn/
func TestBackendDeviceLossRecovery(t *testing.T) {
	f := newLossFixture(t)
	dev, err := f.b.NewDeviceMem(ops.F32, 10) // a device tensor: it dies with the device
	if err != nil {
		t.Fatal(err)
	}
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
	if logs := f.logs.String(); !strings.Contains(logs, "device reopened") || !strings.Contains(logs, "device lost") {
		t.Errorf("the logger did not hear of the loss and the recovery: %s", logs)
	}
	// The device tensor made before the losses died with its device; freeing it is fine.
	if err := f.b.ReadDevice(context.Background(), dev, make([]byte, 40)); !errors.Is(err, ops.ErrInvalidArgument) {
		t.Errorf("reading a device tensor of the lost device: %v", err)
	}
	if err := f.b.WriteDevice(dev, make([]byte, 40)); !errors.Is(err, ops.ErrInvalidArgument) {
		t.Errorf("writing a device tensor of the lost device: %v", err)
	}
	a := f.addIn
	a.X1 = ops.Buf{DType: ops.F32, Dev: dev}
	a.N, a.D = 1, 10
	a.X2, a.Gamma, a.Beta = testkit.Zeros(ops.F32, 10), testkit.Zeros(ops.F32, 10), testkit.Zeros(ops.F32, 10)
	a.Y = testkit.Zeros(ops.F32, 10)
	if err := f.b.AddLayerNorm(context.Background(), &a); !errors.Is(err, ops.ErrInvalidArgument) || !strings.Contains(err.Error(), "x1") {
		t.Errorf("AddLayerNorm on a device tensor of the lost device: %v", err)
	}
	if err := f.b.FreeDevice(dev); err != nil {
		t.Errorf("FreeDevice of a device tensor of the lost device: %v", err)
	}
	if n, bytes := f.b.DeviceMemory(); n == 0 || bytes == 0 {
		t.Errorf("DeviceMemory after the recovery: %d buffers, %d bytes (the prepared op's weights at least)", n, bytes)
	}
}

// TestBackendDeviceLossUnrecoverable: when no device can be reopened after a loss, every
// call fails wrapping ops.ErrDevice (the root router then moves to the CPU), Info's Health
// says so, and Recover reports why; once a device can be opened again, Recover (or the next
// call) reopens it and the calls give the bits of before the loss. After Close every entry
// fails with ErrClosed.
func TestBackendDeviceLossUnrecoverable(t *testing.T) {
	f := newLossFixture(t)
	f.hook.failOpen.Store(true)
	f.loseDuring(t, "AddLayerNorm", f.runAdd)
	for range 2 { // the call that finds the loss, and the next one, which tries again
		if _, err := f.runEmbed(); !errors.Is(err, ops.ErrDevice) || !strings.Contains(err.Error(), "not reopened") ||
			!strings.Contains(err.Error(), "no device to reopen") {
			t.Fatalf("no device to reopen: want ErrDevice saying why, got %v", err)
		}
	}
	if info := f.b.Info(); info.Name != "dawn" || !strings.Contains(info.Health, "not reopened") {
		t.Errorf("Info while the device is gone: %+v", info)
	}
	err := f.b.Recover()
	if !errors.Is(err, ops.ErrDevice) || !strings.Contains(err.Error(), "not reopened") {
		t.Errorf("Recover with no device to reopen: %v", err)
	}
	t.Logf("Recover: %v", err)
	if _, err := f.b.NewDeviceMem(ops.F32, 4); !errors.Is(err, ops.ErrDevice) {
		t.Errorf("NewDeviceMem with no device: %v", err)
	}
	if err := f.b.Sync(context.Background()); !errors.Is(err, ops.ErrDevice) {
		t.Errorf("Sync with no device: %v", err)
	}
	if n, _ := f.b.DeviceMemory(); n != 0 {
		t.Errorf("DeviceMemory with no device: %d buffers", n)
	}

	f.hook.failOpen.Store(false) // the device is back
	opens := f.hook.opens.Load()
	if err := f.b.Recover(); err != nil {
		t.Fatalf("Recover once a device can be opened: %v", err)
	}
	if f.hook.opens.Load() != opens+1 {
		t.Errorf("Recover opened %d devices, want 1", f.hook.opens.Load()-opens)
	}
	if err := f.b.Recover(); err != nil || f.hook.opens.Load() != opens+1 {
		t.Errorf("Recover of a working device: %v, %d opens", err, f.hook.opens.Load()-opens)
	}
	if info := f.b.Info(); info.Name != "dawn" || !strings.Contains(info.Health, "reopened in") {
		t.Errorf("Info after the recovery: %+v", info)
	}
	got, err := f.runEmbed()
	if err != nil || sameBits(got, f.embWant) != 0 {
		t.Errorf("EmbedLayerNorm after the recovery: %v, %d elements differ", err, sameBits(got, f.embWant))
	}
	got, err = f.runAdd()
	if err != nil || sameBits(got, f.addWant) != 0 {
		t.Errorf("AddLayerNorm after the recovery: %v, %d elements differ", err, sameBits(got, f.addWant))
	}

	// Closed: every entry says so, and a second Close is fine.
	if err := f.b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.b.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := f.runAdd(); !errors.Is(err, ops.ErrClosed) {
		t.Errorf("AddLayerNorm after Close: %v", err)
	}
	if _, err := f.runEmbed(); !errors.Is(err, ops.ErrClosed) {
		t.Errorf("a prepared op's Run after the backend's Close: %v", err)
	}
	if _, err := f.b.PrepareEmbed(&ops.EmbedWeights{}); !errors.Is(err, ops.ErrClosed) {
		t.Errorf("PrepareEmbed after Close: %v", err)
	}
	if _, err := f.b.PrepareAddLN(ops.Buf{}, ops.Buf{}, ops.Buf{}, false); !errors.Is(err, ops.ErrClosed) {
		t.Errorf("PrepareAddLN after Close: %v", err)
	}
	if _, err := f.b.NewDeviceMem(ops.F32, 4); !errors.Is(err, ops.ErrClosed) {
		t.Errorf("NewDeviceMem after Close: %v", err)
	}
	if err := f.b.Sync(context.Background()); !errors.Is(err, ops.ErrClosed) {
		t.Errorf("Sync after Close: %v", err)
	}
	if err := f.b.Recover(); !errors.Is(err, ops.ErrClosed) {
		t.Errorf("Recover after Close: %v", err)
	}
	if n, bytes := f.b.DeviceMemory(); n != 0 || bytes != 0 {
		t.Errorf("DeviceMemory after Close: %d, %d", n, bytes)
	}
	if info := f.b.Info(); info.Name != "dawn" {
		t.Errorf("Info after Close: %+v", info)
	}
}

// TestBackendDeviceLossConcurrent loses the device while several goroutines run both ops:
// each call either succeeds with the bits of before or fails wrapping ErrDevice; afterwards
// every call succeeds again. Meant for -race.
func TestBackendDeviceLossConcurrent(t *testing.T) {
	f := newLossFixture(t)
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

// TestBackendCloseDuringRecovery closes prepared ops while a recovery uploads the weights of
// the live ones again: the closed ops' weights are not uploaded (nothing is left on the new
// device but the live op's), and nothing races. Meant for -race.
func TestBackendCloseDuringRecovery(t *testing.T) {
	f := newLossFixture(t)
	for round := range 3 {
		var preps []ops.PreparedAddLN
		for range 12 {
			p, err := f.b.PrepareAddLN(testkit.Zeros(ops.F32, 300), testkit.Zeros(ops.F32, 300), testkit.Zeros(ops.F32, 1<<18), true)
			if err != nil {
				t.Fatal(err)
			}
			preps = append(preps, p)
		}
		f.loseDuring(t, "AddLayerNorm", f.runAdd)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			if err := f.b.Recover(); err != nil {
				t.Errorf("round %d: Recover: %v", round, err)
			}
		}()
		go func() { // while the new device opens and the weights go up again
			defer wg.Done()
			for _, p := range preps {
				time.Sleep(10 * time.Millisecond)
				if err := p.Close(); err != nil {
					t.Errorf("round %d: Close: %v", round, err)
				}
			}
		}()
		wg.Wait()
		// Left on the device: the prepared EmbedLayerNorm's word and position tables and
		// gamma+beta, nothing of the closed ops.
		if n, _ := f.b.DeviceMemory(); n != 3 {
			t.Errorf("round %d: %d buffers on the device after the recovery, want the live op's 3", round, n)
		}
	}
	got, err := f.runEmbed()
	if err != nil || sameBits(got, f.embWant) != 0 {
		t.Errorf("EmbedLayerNorm after the recoveries: %v, %d elements differ", err, sameBits(got, f.embWant))
	}
}
