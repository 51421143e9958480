package fusednorm

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/testkit"
	"github.com/stretchr/testify/require"
)

// openDawnOrSkip opens a Dawn engine, skipping without Dawn unless FUSEDNORM_REQUIRE_DAWN=1.
func openDawnOrSkip(t *testing.T, opts ...Option) *Engine {
	t.Helper()
	e, err := Open(append([]Option{WithBackend(BackendDawn)}, opts...)...)
	if err != nil {
		testkit.SkipWithoutDawn(t, err)
	}
	return e
}

// TestOpenIgnoresWorkingDirectory (issue 12 item 1): a Dawn library planted in
// third_party/dawn/ of a module above the working directory is never tried, in auto or dawn
// mode; the search list's failure lists what it tried instead.
func TestOpenIgnoresWorkingDirectory(t *testing.T) {
	real := os.Getenv(EnvDawnLib)
	// Dawn running in this process before the test (it loads the one from the environment):
	// then the search returns that one, never the planted link to it.
	loadedBefore := false
	if e, err := Open(WithBackend(BackendDawn)); err == nil {
		loadedBefore = true
		require.NoError(t, e.Close())
	}
	dir := t.TempDir()
	planted := filepath.Join(dir, "third_party", "dawn", "libwebgpu_wrapper.so")
	require.NoError(t, os.MkdirAll(filepath.Dir(planted), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module planted\n"), 0o644))
	if real != "" {
		require.NoError(t, os.Symlink(real, planted)) // a library that would load and work
	} else {
		require.NoError(t, os.WriteFile(planted, []byte("not a library"), 0o755))
	}
	t.Chdir(filepath.Join(dir, "third_party"))
	t.Setenv(EnvDawnLib, "")

	e, err := Open(WithBackend(BackendAuto))
	require.NoError(t, err)
	info := e.Info()
	require.NoError(t, e.Close())
	require.NotContains(t, info.Reason, dir)
	require.NotContains(t, info.Library, dir)

	e, err = Open(WithBackend(BackendDawn))
	if err == nil {
		info = e.Info()
		require.NoError(t, e.Close())
		require.NotContains(t, info.Library, dir, "loaded the planted library")
		if loadedBefore {
			require.Equal(t, real, info.Library, "the process's Dawn")
		} else {
			require.NotEqual(t, real, info.Library)
		}
		return
	}
	require.ErrorIs(t, err, ErrUnavailable)
	require.NotContains(t, err.Error(), dir, "the planted library was tried")
	if !strings.Contains(err.Error(), "without cgo") {
		require.Contains(t, err.Error(), "tried:")
	}
}

// TestDawnLibraryIsADemand (issue 12 item 7): WithDawnLibrary or FUSEDNORM_DAWN_LIB naming a
// missing file fails with that path, even where another library would load; auto mode falls
// back to the CPU and says why.
func TestDawnLibraryIsADemand(t *testing.T) {
	_, err := Open(WithBackend(BackendDawn), WithDawnLibrary("/missing.so"))
	require.ErrorIs(t, err, ErrUnavailable)
	if strings.Contains(err.Error(), "without cgo") {
		t.Skip("built without cgo: no library is ever loaded")
	}
	require.Contains(t, err.Error(), "/missing.so: no such file")
	require.Contains(t, err.Error(), "dawn requested by option")

	e, err := Open(WithBackend(BackendAuto), WithDawnLibrary("/missing.so"))
	require.NoError(t, err)
	require.Equal(t, "cpu", e.Info().Backend)
	require.Contains(t, e.Info().Reason, "/missing.so")
	require.NoError(t, e.Close())

	t.Setenv(EnvDawnLib, "/missing-from-env.so")
	_, err = Open(WithBackend(BackendDawn))
	require.ErrorIs(t, err, ErrUnavailable)
	require.Contains(t, err.Error(), "/missing-from-env.so: no such file")

	_, err = Open(WithBackend(BackendDawn), WithDawnLibrary("third_party/dawn/libwebgpu_wrapper.so"))
	require.ErrorIs(t, err, ErrUnavailable)
	require.Contains(t, err.Error(), "relative path")
}

// TestInfoNamesDawnLibrary (issue 12 item 7): Info says which file was loaded.
func TestInfoNamesDawnLibrary(t *testing.T) {
	e := openDawnOrSkip(t)
	defer e.Close()
	info := e.Info()
	require.True(t, filepath.IsAbs(info.Library), "Info.Library = %q", info.Library)
	if want := os.Getenv(EnvDawnLib); want != "" {
		require.Equal(t, want, info.Library)
	}
	cpuEng, err := Open(WithBackend(BackendCPU))
	require.NoError(t, err)
	require.Empty(t, cpuEng.Info().Library)
	require.NoError(t, cpuEng.Close())
}

// TestDeviceLossRecovery (issue 12 item 12) loses the device for real (the "lose" fault site
// calls wgpuDeviceForceLoss with a dispatch in flight) during a prepared EmbedLayerNorm and
// during an AddLayerNorm of BERT-base shapes. The call in flight fails wrapping ErrDevice and
// says the device was lost; the next calls reopen a device, upload the word table again and
// give the bits of before, compared also with the CPU backend mirroring the device's
// contraction profile. It logs the failed calls, the time to recover and the comparison; on a
// GPU: go test -run TestDeviceLossRecovery -v .
func TestDeviceLossRecovery(t *testing.T) {
	var lose atomic.Bool
	var logs testkit.LockedBuffer
	e := openDawnOrSkip(t,
		withFaultInjection(func(site string) error {
			if site == "lose" && lose.CompareAndSwap(true, false) {
				return errors.New("device lost on purpose by TestDeviceLossRecovery")
			}
			return nil
		}),
		WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	defer e.Close()
	t.Logf("device: %s", e.Info())

	// BERT-base's tables; fewer rows on a software adapter (lavapipe), which is slow.
	const V, P, H = 30522, 512, 768
	B, S, N := 8, 128, 4096
	if e.be.Info().Software {
		B, S, N = 2, 64, 256
	}
	r := rand.New(rand.NewPCG(7, 12))
	vals := func(n int, scale float32) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = (r.Float32()*2 - 1) * scale
		}
		return v
	}
	w := EmbedWeights{
		Word: FromFloat32(vals(V*H, 0.1), V, H), Position: FromFloat32(vals(P*H, 0.05), P, H),
		Segment: FromFloat32(vals(2*H, 0.05), 2, H),
		Gamma:   FromFloat32(vals(H, 1), H), Beta: FromFloat32(vals(H, 0.1), H),
	}
	ids, seg := make([]int32, B*S), make([]int32, B*S)
	for i := range ids {
		ids[i], seg[i] = int32(r.IntN(V)), int32(r.IntN(2))
	}
	embIn := EmbedInputs{InputIDs: FromInt32(ids, B, S), SegmentIDs: FromInt32(seg, B, S)}
	addIn := AddLayerNormInputs{
		X1: FromFloat32(vals(N*H, 2), N, H), X2: FromFloat32(vals(N*H, 1), N, H),
		Gamma: FromFloat32(vals(H, 1), H), Beta: FromFloat32(vals(H, 0.2), H),
	}

	// The CPU backend mirroring the device's profile: the bits the device must give.
	ref, err := Open(WithBackend(BackendCPU), WithContraction(e.Info().Profile))
	require.NoError(t, err)
	defer ref.Close()

	type call struct {
		name string
		run  func(*Engine, *EmbedLayerNorm) ([]float32, error)
	}
	calls := []call{
		{"EmbedLayerNorm", func(_ *Engine, op *EmbedLayerNorm) ([]float32, error) {
			var out EmbedOutputs
			err := op.Run(context.Background(), embIn, &out)
			return out.Output.Float32s(), err
		}},
		{"AddLayerNorm", func(eng *Engine, _ *EmbedLayerNorm) ([]float32, error) {
			var out AddLayerNormOutputs
			err := eng.AddLayerNorm(context.Background(), addIn, &out)
			return append(append(out.Y.Float32s(), out.Mean.Float32s()...), out.Rstd.Float32s()...), err
		}},
	}
	op, err := e.NewEmbedLayerNorm(w)
	require.NoError(t, err)
	defer op.Close()
	refOp, err := ref.NewEmbedLayerNorm(w)
	require.NoError(t, err)
	defer refOp.Close()
	before := make([][]float32, len(calls))
	cpuBits := make([][]float32, len(calls))
	for i, c := range calls {
		before[i], err = c.run(e, op)
		require.NoError(t, err, c.name)
		cpuBits[i], err = c.run(ref, refOp)
		require.NoError(t, err, c.name)
	}
	differ := func(a, b []float32) int {
		return testkit.Compare(testkit.Float(ops.F32, a), testkit.Float(ops.F32, b), 1, nil).Count
	}
	for i, c := range calls {
		t.Logf("before any loss: %s differs from the CPU backend in %d of %d elements", c.name, differ(before[i], cpuBits[i]), len(before[i]))
	}

	for i, lost := range calls {
		lose.Store(true)
		_, err := lost.run(e, op)
		require.False(t, lose.Load(), "the loss site was not reached")
		require.ErrorIs(t, err, ErrDevice)
		require.Contains(t, err.Error(), "device lost")
		t.Logf("failed call: %s: %v", lost.name, strings.SplitN(err.Error(), "\n", 2)[0])
		for j := range calls {
			k := (i + j) % len(calls)
			start := time.Now()
			got, err := calls[k].run(e, op)
			took := time.Since(start)
			require.NoError(t, err, "%s after the loss", calls[k].name)
			if j == 0 {
				t.Logf("recovered: the next call (%s) took %v in all", calls[k].name, took)
			}
			bad, badCPU := differ(got, before[k]), differ(got, cpuBits[k])
			t.Logf("%s after the loss: %d of %d elements differ from before, %d from the CPU backend (profile %v)",
				calls[k].name, bad, len(got), badCPU, e.Info().Profile)
			require.Zero(t, bad, "%s gives other bits after the loss", calls[k].name)
		}
	}
	info := e.Info()
	t.Logf("health: %s", info.Health)
	require.Equal(t, BackendDawn, info.Backend)
	require.Contains(t, info.Health, "device lost 2 time(s)")
	require.Contains(t, logs.String(), "device lost")
	require.Contains(t, logs.String(), "device reopened")
}

// TestDeviceLossAutoFallback (issue 12 item 12): an engine in auto mode whose device is lost
// and cannot be reopened carries on with its CPU backend, same bits, and Info says so: the
// router, the one place that decides to run on the CPU, moves there. Auto mode never picks a
// software adapter, so the test builds that engine the way Open's auto branch does, on
// whatever adapter there is, with a cost model that sends host-tensor calls to the CPU; the
// call that meets the loss has a device-tensor input, so it runs on the GPU.
func TestDeviceLossAutoFallback(t *testing.T) {
	var lose, noDevice atomic.Bool
	c := config{inject: func(site string) error {
		switch {
		case site == "lose" && lose.CompareAndSwap(true, false):
			return errors.New("device lost on purpose")
		case site == "open" && noDevice.Load():
			return errors.New("the GPU is gone")
		}
		return nil
	}, dawnLib: os.Getenv(EnvDawnLib)}
	gpu, err := openDawn(&c)
	if err != nil {
		testkit.SkipWithoutDawn(t, err)
	}
	p := gpu.Info().Profile
	cpu, err := newCPU(&config{profile: &p})
	require.NoError(t, err)
	e := &Engine{be: newRouter(gpu, cpu, routeModel{h2d: 1, d2h: 1, cpuBW: 1e15, launch: 1}), reason: "auto: dawn loaded"}
	defer e.Close()
	in := AddLayerNormInputs{
		X1: FromFloat32([]float32{1, 2, 3, 4, -1, 0.5, 2, 8}, 2, 4), X2: FromFloat32([]float32{0.5, -0.5, 0.25, 1, 3, -2, 0, 1}, 2, 4),
		Gamma: FromFloat32([]float32{1, 0.5, 2, -1}, 4), Beta: FromFloat32([]float32{0, 0.1, -0.2, 0.3}, 4),
	}
	var want AddLayerNormOutputs
	require.NoError(t, e.AddLayerNorm(context.Background(), in, &want))
	x1, err := e.Upload(in.X1)
	require.NoError(t, err)
	defer x1.Close()
	onDevice := in
	onDevice.X1 = x1.Tensor()
	lose.Store(true)
	noDevice.Store(true)
	var out AddLayerNormOutputs
	err = e.AddLayerNorm(context.Background(), onDevice, &out)
	require.ErrorIs(t, err, ErrDevice)
	out = AddLayerNormOutputs{}
	require.NoError(t, e.AddLayerNorm(context.Background(), in, &out))
	require.Equal(t, want.Y.Float32s(), out.Y.Float32s())
	info := e.Info()
	t.Logf("%s", info)
	require.Equal(t, BackendCPU, info.Backend)
	require.Contains(t, info.Health, "running on the CPU")
	require.Contains(t, info.String(), "health: ")
}
