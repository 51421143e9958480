package fusednorm

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// An op option of the other op is refused where the op receives it, naming the option and
// the op it applies to: AdditionalOutput is AddLayerNorm's, WithMaskRule EmbedLayerNorm's.
func TestOpOptionOfTheOtherOp(t *testing.T) {
	e := cpuEngine(t)
	ctx := context.Background()
	w, in := smallEmbed()
	for _, on := range []bool{true, false} { // any value: the option does not apply
		_, err := e.NewEmbedLayerNorm(w, AdditionalOutput(on))
		requireArgError(t, err, "additional_output", "AdditionalOutput applies to AddLayerNorm only")
		err = e.EmbedLayerNormOnce(ctx, w, in, &EmbedOutputs{}, Epsilon(1e-5), AdditionalOutput(on))
		requireArgError(t, err, "additional_output", "AdditionalOutput applies to AddLayerNorm only")
	}
	for _, r := range []MaskRule{MaskFirstZero, MaskIndexCountOnes} {
		var out AddLayerNormOutputs
		err := e.AddLayerNorm(ctx, smallAdd(), &out, WithMaskRule(r))
		requireArgError(t, err, "mask_index_rule", "WithMaskRule applies to EmbedLayerNorm only")
		require.Equal(t, AddLayerNormOutputs{}, out)
		_, err = e.NewAddLayerNorm(AddLayerNormWeights{Gamma: smallAdd().Gamma, Beta: smallAdd().Beta}, WithMaskRule(r))
		requireArgError(t, err, "mask_index_rule", "WithMaskRule applies to EmbedLayerNorm only")
	}
	// The options of each op still work.
	op, err := e.NewEmbedLayerNorm(w, Epsilon(1e-5), WithMaskRule(MaskIndexCountOnes))
	require.NoError(t, err)
	require.NoError(t, op.Close())
	var out AddLayerNormOutputs
	require.NoError(t, e.AddLayerNorm(ctx, smallAdd(), &out, Epsilon(1e-6), AdditionalOutput(true)))
	require.False(t, out.X.IsZero())
}

// WithThreads(n) with n < 0 is refused at Open, in every mode; 0 is the default, GOMAXPROCS.
func TestWithThreadsNegative(t *testing.T) {
	for _, b := range []string{BackendCPU, BackendAuto, BackendDawn} {
		_, err := Open(WithBackend(b), WithThreads(-1))
		require.ErrorIs(t, err, ErrInvalidArgument, "%s: %v", b, err)
		require.Contains(t, err.Error(), "WithThreads(-1)")
		require.Contains(t, err.Error(), "CPU call")
	}
	e, err := Open(WithBackend(BackendCPU), WithThreads(0))
	require.NoError(t, err)
	require.NoError(t, e.Close())
}

// A CPU level is accepted in any case, spaces around it ignored, from WithCPULevel and from
// FUSEDNORM_CPU_LEVEL; one this build does not run lists those it does.
func TestCPULevelCaseAndUnknown(t *testing.T) {
	levels := CPULevels()
	for _, l := range levels {
		for _, spelled := range []string{strings.ToUpper(l), " " + l + " ", strings.ToUpper(l[:1]) + l[1:]} {
			e, err := Open(WithBackend(BackendCPU), WithCPULevel(spelled))
			require.NoError(t, err, "WithCPULevel(%q)", spelled)
			require.Equal(t, l, e.Info().Level)
			require.NoError(t, e.Close())
		}
	}
	if os.Getenv(EnvCPULevel) == "" {
		t.Setenv(EnvCPULevel, " GO")
		e, err := Open(WithBackend(BackendCPU))
		require.NoError(t, err)
		require.Equal(t, "go", e.Info().Level)
		require.NoError(t, e.Close())
		t.Setenv(EnvCPULevel, "sse4")
		_, err = Open(WithBackend(BackendCPU))
		require.ErrorIs(t, err, ErrUnavailable)
		require.Contains(t, err.Error(), EnvCPULevel+`="sse4"`)
		require.Contains(t, err.Error(), strings.Join(levels, ", "))
		t.Setenv(EnvCPULevel, "")
	}
	_, err := Open(WithBackend(BackendCPU), WithCPULevel("SSE4"))
	require.ErrorIs(t, err, ErrUnavailable)
	require.Contains(t, err.Error(), `WithCPULevel("SSE4"): "sse4" is not a CPU kernel level`)
	require.Contains(t, err.Error(), "the levels here are "+strings.Join(levels, ", "))
	require.Equal(t, 1, strings.Count(err.Error(), "fusednorm:"), "%v", err)
}
