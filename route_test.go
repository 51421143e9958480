package fusednorm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fusednorm/fusednorm/internal/testalloc"
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
		skipWithoutDawn(t, e.Info())
	}
	return e
}

// TestAutoRoutes opens auto on lavapipe-as-if-GPU and checks the routing: host-tensor calls
// go where the model says (forced each way by setting the model), device-tensor calls go to
// the GPU, and the bits are those of the Dawn engine wherever a call ran.
func TestAutoRoutes(t *testing.T) {
	ctx := context.Background()
	e := autoSoftwareEngine(t)
	m, ok := e.routeModelOf()
	require.True(t, ok, "auto with a GPU open routes")
	t.Logf("Open's cost model: %s", m)
	require.True(t, m.h2d > 0 && m.d2h > 0 && m.cpuBW > 0 && m.launch > 0, "model %s", m)
	require.Contains(t, e.Info().Reason, "host-tensor calls on the cpu or dawn")
	require.Contains(t, e.Info().Reason, "h2d ")
	d := dawnEngine(t)
	require.NotNil(t, d)
	require.Equal(t, d.Info().Profile, e.Info().Profile)

	measured := *m
	toCPU, toGPU := measured, measured
	toCPU.launch = 1e9 // the GPU never finishes sooner
	toGPU.cpuBW = 1    // the CPU never does

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
	ewant := EmbedOutputs{WantEmbeddingSum: true}
	require.NoError(t, dop.Run(ctx, ein, &ewant))

	pop, err := e.NewAddLayerNorm(AddLayerNormWeights{Gamma: in.Gamma, Beta: in.Beta, Bias: in.Bias}, AdditionalOutput(true))
	require.NoError(t, err)
	defer pop.Close()
	eop, err := e.NewEmbedLayerNorm(w)
	require.NoError(t, err)
	defer eop.Close()

	for _, c := range []struct {
		name  string
		model routeModel
		want  string
	}{
		// The measured model: a call of a few KiB costs the CPU microseconds, less than one
		// round trip to any GPU.
		{"measured", measured, BackendCPU},
		{"cpu", toCPU, BackendCPU},
		{"gpu", toGPU, BackendDawn},
	} {
		*m = c.model
		var where string
		rctx := ReportBackend(ctx, &where)
		var got AddLayerNormOutputs
		require.NoError(t, e.AddLayerNorm(rctx, in, &got, AdditionalOutput(true)))
		require.Equal(t, c.want, where, "%s: host AddLayerNorm", c.name)
		require.Equal(t, want.Y.buf.Bytes(), got.Y.buf.Bytes(), "%s: y", c.name)
		require.Equal(t, want.X.buf.Bytes(), got.X.buf.Bytes(), "%s: x", c.name)
		require.Equal(t, want.Rstd.Float32s(), got.Rstd.Float32s(), "%s: rstd", c.name)

		where, got = "", AddLayerNormOutputs{}
		require.NoError(t, pop.Run(rctx, in.X1, in.X2, &got))
		require.Equal(t, c.want, where, "%s: prepared host AddLayerNorm", c.name)
		require.Equal(t, want.Y.buf.Bytes(), got.Y.buf.Bytes(), "%s: prepared y", c.name)

		where = ""
		eout := EmbedOutputs{WantEmbeddingSum: true}
		require.NoError(t, eop.Run(rctx, ein, &eout))
		require.Equal(t, c.want, where, "%s: host EmbedLayerNorm", c.name)
		require.Equal(t, ewant.Output.buf.Bytes(), eout.Output.buf.Bytes(), "%s: embed output", c.name)
		require.Equal(t, ewant.EmbeddingSum.buf.Bytes(), eout.EmbeddingSum.buf.Bytes(), "%s: embed sum", c.name)

		// Any device tensor: the GPU, whatever the model says.
		where = ""
		x1 := upload(t, e, in.X1)
		y := devLike(t, e, Float32, N, D)
		got = AddLayerNormOutputs{Y: y.Tensor()}
		require.NoError(t, pop.Run(rctx, x1, in.X2, &got))
		require.Equal(t, BackendDawn, where, "%s: device-tensor AddLayerNorm", c.name)
		require.Equal(t, want.Y.buf.Bytes(), readBack(t, y).buf.Bytes(), "%s: device y", c.name)
		where = ""
		eout = EmbedOutputs{}
		require.NoError(t, eop.Run(rctx, EmbedInputs{InputIDs: upload(t, e, ein.InputIDs)}, &eout))
		require.Equal(t, BackendDawn, where, "%s: device-tensor EmbedLayerNorm", c.name)
		require.Equal(t, ewant.Output.buf.Bytes(), eout.Output.buf.Bytes(), "%s: device-ids output", c.name)
	}
}

// TestAutoPastDeviceLimitRunsOnCPU: a host-tensor call the GPU refuses with ErrNotSupported
// (here a buffer the hook refuses as if past a device limit) runs on the CPU in auto mode;
// a device-tensor call still reports the refusal.
func TestAutoPastDeviceLimitRunsOnCPU(t *testing.T) {
	ctx := context.Background()
	var refuse atomic.Bool
	hook := func(site string) error {
		if site == "create-buffer" && refuse.Load() {
			return fmt.Errorf("test: past maxBufferSize: %w", ErrNotSupported)
		}
		return nil
	}
	e := autoSoftwareEngine(t, WithFaultInjection(hook))
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
// in steady state, as on a CPU engine.
func TestNoAllocsRoutedToCPU(t *testing.T) {
	testalloc.SkipUnderRace(t)
	ctx := context.Background()
	e := autoSoftwareEngine(t)
	m, _ := e.routeModelOf()
	m.launch = 1e9
	r := rand.New(rand.NewPCG(7, 9))
	const B, S, H, V = 2, 16, 64, 30
	op, err := e.NewEmbedLayerNorm(EmbedWeights{Word: allocTensor(r, Float32, 0, V, H), Position: allocTensor(r, Float32, 0, S, H),
		Gamma: allocTensor(r, Float32, 0, H), Beta: allocTensor(r, Float32, 0, H)})
	require.NoError(t, err)
	defer op.Close()
	in := EmbedInputs{InputIDs: allocTensor(r, Int32, V, B, S)}
	out := EmbedOutputs{Output: allocTensor(r, Float32, 0, B, S, H)}
	var where string
	rctx := ReportBackend(ctx, &where)
	testalloc.None(t, "EmbedLayerNorm", func() {
		if err := op.Run(rctx, in, &out); err != nil {
			t.Fatal(err)
		}
	})
	require.Equal(t, BackendCPU, where)
	ain := AddLayerNormInputs{X1: allocTensor(r, Float32, 0, B, S, H), X2: allocTensor(r, Float32, 0, B, S, H),
		Gamma: allocTensor(r, Float32, 0, H), Beta: allocTensor(r, Float32, 0, H)}
	aout := AddLayerNormOutputs{Y: allocTensor(r, Float32, 0, B, S, H), Mean: allocTensor(r, Float32, 0, B, S, 1),
		Rstd: allocTensor(r, Float32, 0, B, S, 1)}
	p, err := e.NewAddLayerNorm(AddLayerNormWeights{Gamma: ain.Gamma, Beta: ain.Beta})
	require.NoError(t, err)
	defer p.Close()
	testalloc.None(t, "AddLayerNorm", func() {
		if err := e.AddLayerNorm(rctx, ain, &aout); err != nil {
			t.Fatal(err)
		}
		if err := p.Run(rctx, ain.X1, ain.X2, &aout); err != nil {
			t.Fatal(err)
		}
	})
	require.Equal(t, BackendCPU, where)
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
