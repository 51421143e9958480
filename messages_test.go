package fusednorm

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fusednorm/fusednorm/internal/testkit"
)

// The mask and segment_ids shape rules keep their wording (ORT's) and add both shapes.
func TestShapeRuleMessagesGiveTheShapes(t *testing.T) {
	e := cpuEngine(t)
	w, in := smallEmbed()
	bad := in
	bad.Mask = FromInt32(make([]int32, 3), 3, 1)
	err := e.EmbedLayerNormOnce(context.Background(), w, bad, &EmbedOutputs{})
	requireArgError(t, err, "mask", "Input 0 and 7 (mask) shall have same shape: input_ids [2 3], mask [3 1]")
	bad = in
	bad.SegmentIDs = FromInt32(make([]int32, 6), 6, 1)
	err = e.EmbedLayerNormOnce(context.Background(), w, bad, &EmbedOutputs{})
	requireArgError(t, err, "segment_ids", "Input 0 and 1 shall have same shape: input_ids [2 3], segment_ids [6 1]")
}

// A dtype combination §B.2 does not allow calls an absent bias absent (not "invalid") and
// says what the dtypes of x1 and x2 take.
func TestDTypeCombinationMessage(t *testing.T) {
	e := cpuEngine(t)
	in := smallAdd()
	in.Gamma = FromFloat16Bits(make([]uint16, 8), 8)
	in.Beta = FromFloat16Bits(make([]uint16, 8), 8)
	err := e.AddLayerNorm(context.Background(), in, &AddLayerNormOutputs{})
	requireArgError(t, err, "x1", "unsupported dtype combination: x1 float32, x2 float32, gamma float16, beta float16, bias absent; "+
		"with x1 float32 and x2 float32, gamma and beta must both be float32, and bias, when given, float32")
	require.NotContains(t, err.Error(), "invalid")

	in = smallAdd()
	in.X1 = FromFloat16Bits(make([]uint16, 24), 3, 8)
	in.X2 = FromFloat16Bits(make([]uint16, 24), 3, 8)
	in.Bias = FromFloat32(make([]float32, 8), 8)
	err = e.AddLayerNorm(context.Background(), in, &AddLayerNormOutputs{})
	requireArgError(t, err, "x1", "bias float32; with x1 float16 and x2 float16, gamma and beta must both be float16 or float32, and bias, when given, float16")

	in = smallAdd()
	in.X2 = FromInt32(make([]int32, 24), 3, 8)
	err = e.AddLayerNorm(context.Background(), in, &AddLayerNormOutputs{})
	requireArgError(t, err, "x1", "x2 int32, gamma float32, beta float32, bias absent; x1 and x2 must be float32, float16 or bfloat16")
}

// Reusing an outputs struct whose outputs an earlier call allocated, for a call of another
// shape, says so and how to have them allocated again; an output the caller made does not.
func TestOutputReuseAcrossShapes(t *testing.T) {
	e := cpuEngine(t)
	ctx := context.Background()
	add := func(n int) AddLayerNormInputs {
		return AddLayerNormInputs{X1: FromFloat32(f32s(n*8, 1), n, 8), X2: FromFloat32(f32s(n*8, 2), n, 8),
			Gamma: FromFloat32(f32s(8, 1), 8), Beta: FromFloat32(f32s(8, 0), 8)}
	}
	var out AddLayerNormOutputs
	require.NoError(t, e.AddLayerNorm(ctx, add(4), &out))
	err := e.AddLayerNorm(ctx, add(8), &out)
	requireArgError(t, err, "y", "y must have shape [8 8], got [4 8]; this y is the float32(4, 8) an earlier call allocated")
	require.Contains(t, err.Error(), "set that field back to the zero Tensor (or zero the whole struct)")
	out.Y = Tensor{}
	err = e.AddLayerNorm(ctx, add(8), &out)
	requireArgError(t, err, "mean", "mean/rstd must have shape [8 1] float32, got float32(4, 1); this mean is the float32(4, 1) an earlier call allocated")
	out = AddLayerNormOutputs{}
	require.NoError(t, e.AddLayerNorm(ctx, add(8), &out))
	require.Equal(t, []int{8, 8}, out.Y.Shape())

	// The caller's own tensor of the wrong shape: no such hint.
	mine, err := NewTensor(Float32, 4, 8)
	require.NoError(t, err)
	err = e.AddLayerNorm(ctx, add(8), &AddLayerNormOutputs{Y: mine})
	requireArgError(t, err, "y", "y must have shape [8 8], got [4 8]")
	require.NotContains(t, err.Error(), "earlier call")

	// EmbedLayerNorm: a batch of 2, then of 1.
	w, in := smallEmbed()
	op, err := e.NewEmbedLayerNorm(w)
	require.NoError(t, err)
	defer op.Close()
	eout := EmbedOutputs{WantMaskIndex: true}
	require.NoError(t, op.Run(ctx, in, &eout))
	one := EmbedInputs{InputIDs: FromInt32([]int32{0, 1, 2}, 1, 3)}
	err = op.Run(ctx, one, &eout)
	requireArgError(t, err, "output", "output must have shape [1 3 4], got [2 3 4]; this output is the float32(2, 3, 4) an earlier call allocated")
}

// A Dawn error names the op once: "fusednorm: AddLayerNorm: dawn: <what failed>: …", with
// one "dawn: " prefix, for a call, a prepared op's call and preparing the weights. Needs Dawn
// (lavapipe in CI).
func TestDawnErrorNamesTheOpOnce(t *testing.T) {
	var fail string
	boom := errors.New("boom")
	e, err := Open(WithBackend(BackendDawn), withFaultInjection(func(site string) error {
		if site == fail {
			return boom
		}
		return nil
	}))
	if err != nil {
		testkit.SkipWithoutDawn(t, err)
	}
	defer e.Close()
	ctx := context.Background()
	once := func(t *testing.T, err error, op, site string) {
		t.Helper()
		require.ErrorIs(t, err, ErrDevice)
		require.ErrorIs(t, err, boom)
		msg := err.Error()
		require.True(t, strings.HasPrefix(msg, "fusednorm: "+op+": "), "%v", msg)
		require.Equal(t, 1, strings.Count(msg, op), "the op named more than once: %v", msg)
		require.Equal(t, 1, strings.Count(msg, "dawn: "), "dawn: more than once: %v", msg)
		require.Equal(t, 1, strings.Count(msg, "fusednorm: "), "%v", msg)
		require.Contains(t, msg, "injected fault at "+site+": boom")
	}
	w, in := smallEmbed()
	embed, err := e.NewEmbedLayerNorm(w)
	require.NoError(t, err)
	defer embed.Close()
	a := smallAdd()
	add, err := e.NewAddLayerNorm(AddLayerNormWeights{Gamma: a.Gamma, Beta: a.Beta})
	require.NoError(t, err)
	defer add.Close()
	for _, site := range []string{"create-buffer", "write-buffer", "submit", "map"} {
		t.Run(site, func(t *testing.T) {
			// A new shape each time: its scratch is made anew, so create-buffer is reached.
			n := map[string]int{"create-buffer": 5, "write-buffer": 6, "submit": 7, "map": 9}[site]
			x := AddLayerNormInputs{X1: FromFloat32(f32s(n*8, 1), n, 8), X2: FromFloat32(f32s(n*8, 2), n, 8),
				Gamma: a.Gamma, Beta: a.Beta}
			fail = site
			err := e.AddLayerNorm(ctx, x, &AddLayerNormOutputs{})
			fail = ""
			once(t, err, "AddLayerNorm", site)
			t.Logf("AddLayerNorm: %v", err)
			x.X1, x.X2 = FromFloat32(f32s((n+10)*8, 1), n+10, 8), FromFloat32(f32s((n+10)*8, 2), n+10, 8)
			fail = site
			err = add.Run(ctx, x.X1, x.X2, &AddLayerNormOutputs{})
			fail = ""
			once(t, err, "AddLayerNorm", site)
			if site != "create-buffer" {
				fail = site
				err = embed.Run(ctx, in, &EmbedOutputs{})
				fail = ""
				once(t, err, "EmbedLayerNorm", site)
				t.Logf("EmbedLayerNorm: %v", err)
			}
		})
	}
	// Preparing the weights: their buffers.
	fail = "create-buffer"
	_, err = e.NewEmbedLayerNorm(w)
	fail = ""
	once(t, err, "EmbedLayerNorm", "create-buffer")
	require.Contains(t, err.Error(), "preparing the weights")
	t.Logf("NewEmbedLayerNorm: %v", err)
}

// The root's wrapping drops a backend's repeat of the op, whichever backend, and keeps an
// earlier call's name, which says which call failed.
func TestBackendErrorNamesTheOpOnce(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"dawn: AddLayerNorm: device error: lost", "fusednorm: AddLayerNorm: dawn: device error: lost"},
		{"cpu: AddLayerNorm: closed", "fusednorm: AddLayerNorm: cpu: closed"},
		{"dawn: EmbedLayerNorm (call 3): device error: x", "fusednorm: AddLayerNorm: dawn: EmbedLayerNorm (call 3): device error: x"},
		{"closed", "fusednorm: AddLayerNorm: closed"},
	} {
		inner := errors.New(c.in)
		err := callErr("AddLayerNorm", inner)
		require.Equal(t, c.want, err.Error())
		require.ErrorIs(t, err, inner)
	}
	err := callErr("Sync", context.Canceled)
	require.Equal(t, "fusednorm: Sync: canceled: context canceled", err.Error())
	require.ErrorIs(t, err, ErrCanceled)
	require.ErrorIs(t, err, context.Canceled)
}
