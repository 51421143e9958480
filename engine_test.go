package fusednorm

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/fusednorm/fusednorm/internal/testkit"
	"github.com/stretchr/testify/require"
)

func TestOpenChoosesBackend(t *testing.T) {
	e, err := Open(WithBackend("CPU "))
	require.NoError(t, err)
	require.Equal(t, "cpu", e.Info().Backend)
	require.Contains(t, e.Info().Reason, "option")
	require.NoError(t, e.Close())

	t.Setenv(EnvBackend, "cpu")
	e, err = Open()
	require.NoError(t, err)
	require.Contains(t, e.Info().Reason, EnvBackend)
	require.NoError(t, e.Close())

	t.Setenv(EnvBackend, "tpu")
	_, err = Open()
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.Contains(t, err.Error(), EnvBackend)

	// The option wins over the environment.
	e, err = Open(WithBackend(BackendCPU))
	require.NoError(t, err)
	require.NoError(t, e.Close())
}

func TestOpenDawnUnavailableNamesTheCause(t *testing.T) {
	// No Vulkan driver: whether or not a Dawn library loads, there is no real adapter.
	t.Setenv("VK_ICD_FILENAMES", "/nonexistent/icd.json")
	t.Setenv("VK_DRIVER_FILES", "/nonexistent/icd.json")
	_, err := Open(WithBackend(BackendDawn))
	require.ErrorIs(t, err, ErrUnavailable)
	require.Contains(t, err.Error(), "dawn requested by option")

	// auto falls back to the CPU and says why.
	e, err := Open(WithBackend(BackendAuto))
	require.NoError(t, err)
	defer e.Close()
	require.Equal(t, "cpu", e.Info().Backend)
	require.True(t, strings.HasPrefix(e.Info().Reason, "auto: dawn unavailable: "), e.Info().Reason)
}

func TestCPULevelUnknown(t *testing.T) {
	_, err := Open(WithBackend(BackendCPU), WithCPULevel("avx9000"))
	require.ErrorIs(t, err, ErrUnavailable)
}

func TestHugePagesOption(t *testing.T) {
	e, err := Open(WithBackend(BackendCPU), WithHugePages(false))
	require.NoError(t, err)
	require.Contains(t, e.Info().Detail, "huge pages off")
	require.NoError(t, e.Close())
	e, err = Open(WithBackend(BackendCPU))
	require.NoError(t, err)
	require.NotContains(t, e.Info().Detail, "huge pages")
	require.NoError(t, e.Close())
}

func TestClosedEngine(t *testing.T) {
	e, err := Open(WithBackend(BackendCPU))
	require.NoError(t, err)
	op, err := e.NewEmbedLayerNorm(EmbedWeights{
		Word: FromFloat32([]float32{1, 2, 3, 4}, 2, 2), Position: FromFloat32([]float32{0, 1}, 1, 2),
		Gamma: FromFloat32([]float32{1, 1}, 2), Beta: FromFloat32([]float32{0, 0}, 2),
	})
	require.NoError(t, err)
	require.NoError(t, e.Close())
	require.NoError(t, e.Close(), "Close twice")
	var out EmbedOutputs
	err = op.Run(context.Background(), EmbedInputs{InputIDs: FromInt32([]int32{1}, 1, 1)}, &out)
	require.ErrorIs(t, err, ErrClosed)
	err = e.AddLayerNorm(context.Background(), AddLayerNormInputs{}, &AddLayerNormOutputs{})
	require.ErrorIs(t, err, ErrClosed)
}

// TestDawnFaultInjection makes each fault site of the device fail once and checks the call
// reports a device error and leaves caller outputs untouched. Needs Dawn (lavapipe in CI).
func TestDawnFaultInjection(t *testing.T) {
	var fail string
	e, err := Open(WithBackend(BackendDawn), withFaultInjection(func(site string) error {
		if site == fail {
			return errors.New("injected fault at " + site)
		}
		return nil
	}))
	if err != nil {
		testkit.SkipWithoutDawn(t, err)
	}
	defer e.Close()
	in := AddLayerNormInputs{
		X1: FromFloat32([]float32{1, 2, 3, 4, -1, 0.5, 2, 8}, 2, 4), X2: FromFloat32([]float32{0.5, -0.5, 0.25, 1, 3, -2, 0, 1}, 2, 4),
		Gamma: FromFloat32([]float32{1, 0.5, 2, -1}, 4), Beta: FromFloat32([]float32{0, 0.1, -0.2, 0.3}, 4),
	}
	for _, site := range []string{"create-buffer", "write-buffer", "submit", "map"} {
		t.Run(site, func(t *testing.T) {
			y := FromFloat32([]float32{7, 7, 7, 7, 7, 7, 7, 7}, 2, 4)
			out := AddLayerNormOutputs{Y: y}
			fail = site
			err := e.AddLayerNorm(context.Background(), in, &out)
			fail = ""
			require.Error(t, err)
			require.ErrorIs(t, err, ErrDevice, "%v", err)
			for _, v := range y.Float32s() {
				require.Equal(t, float32(7), v, "a failed call wrote y")
			}
			// The device keeps working after the fault.
			out = AddLayerNormOutputs{}
			require.NoError(t, e.AddLayerNorm(context.Background(), in, &out))
			require.InDelta(t, -0.904531896, out.Y.Float32s()[0], 1e-5)
		})
	}
}

// TestAutoPassesOverSoftwareAdapters: with only lavapipe, auto runs on the CPU backend and
// says why, while an explicit dawn request still gets lavapipe (that is how CI tests Dawn).
func TestAutoPassesOverSoftwareAdapters(t *testing.T) {
	d, err := Open(WithBackend(BackendDawn))
	if err != nil {
		testkit.SkipWithoutDawn(t, err)
	}
	software := d.be.Info().Software
	d.Close()
	if !software {
		t.Skip("the adapter is a GPU: auto rightly picks it")
	}
	e, err := Open(WithBackend(BackendAuto))
	require.NoError(t, err)
	defer e.Close()
	require.Equal(t, "cpu", e.Info().Backend)
	require.Contains(t, e.Info().Reason, "software adapter")
}
