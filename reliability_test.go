package fusednorm

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/fusednorm/fusednorm/internal/testkit"
	"github.com/stretchr/testify/require"
)

// The tests of issue 12's items on the typed API: bad input and faults get an error that
// names the tensor, never a crash, and a failed call leaves the caller's outputs as they
// were.

func cpuEngine(t *testing.T) *Engine {
	t.Helper()
	e, err := Open(WithBackend(BackendCPU))
	require.NoError(t, err)
	t.Cleanup(func() { e.Close() })
	return e
}

// requireArgError checks err is an *ArgError on the tensor whose rule contains want.
func requireArgError(t *testing.T, err error, tensor, want string) {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, ErrInvalidArgument)
	var ae *ArgError
	require.True(t, errors.As(err, &ae), "%v is not an *ArgError", err)
	require.Equal(t, tensor, ae.Tensor, "%v", err)
	require.Contains(t, ae.Rule, want)
}

func f32s(n int, v float32) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = v
	}
	return s
}

// smallEmbed is a valid EmbedLayerNorm problem: B=2, S=3, H=4, V=5, P=3, G=2, float32.
func smallEmbed() (EmbedWeights, EmbedInputs) {
	const H = 4
	w := EmbedWeights{
		Word: FromFloat32(f32s(5*H, 0.5), 5, H), Position: FromFloat32(f32s(3*H, 0.25), 3, H),
		Segment: FromFloat32(f32s(2*H, 0.125), 2, H), Gamma: FromFloat32(f32s(H, 1), H), Beta: FromFloat32(f32s(H, 0), H),
	}
	w.Word.buf.F32[1] = 2 // rows that are not constant
	w.Word.buf.F32[6] = -1
	in := EmbedInputs{
		InputIDs:   FromInt32([]int32{0, 1, 2, 3, 4, 0}, 2, 3),
		SegmentIDs: FromInt32([]int32{0, 0, 1, 1, 0, 1}, 2, 3),
		Mask:       FromInt32([]int32{1, 1, 0, 1, 1, 1}, 2, 3),
	}
	return w, in
}

// smallAdd is a valid AddLayerNorm problem: x1 (3, 8) float32, gamma (8).
func smallAdd() AddLayerNormInputs {
	x1, x2 := f32s(24, 1), f32s(24, 0.5)
	for i := range x1 {
		x1[i] = float32(i % 5)
	}
	return AddLayerNormInputs{X1: FromFloat32(x1, 3, 8), X2: FromFloat32(x2, 3, 8),
		Gamma: FromFloat32(f32s(8, 1), 8), Beta: FromFloat32(f32s(8, 0), 8)}
}

// Item 2: an output too large to allocate is an error, not a fatal out of memory.

// hugeEmbed is an EmbedLayerNorm problem of 16 MiB of real data whose output would be
// (1, 2^20, 2^20) float32: 4 TiB, more than any machine this runs on has.
func hugeEmbed() (EmbedWeights, EmbedInputs) {
	const H, S = 1 << 20, 1 << 20
	w := EmbedWeights{Word: FromFloat32(f32s(H, 1), 1, H), Position: FromFloat32(f32s(H, 1), 1, H),
		Gamma: FromFloat32(f32s(H, 1), H), Beta: FromFloat32(f32s(H, 0), H)}
	in := EmbedInputs{InputIDs: FromInt32(make([]int32, S), 1, S), PositionIDs: FromInt32(make([]int32, S), 1, S)}
	return w, in
}

func TestHugeOutputIsAnError(t *testing.T) {
	e := cpuEngine(t)
	w, in := hugeEmbed()
	var out EmbedOutputs
	err := e.EmbedLayerNormOnce(context.Background(), w, in, &out)
	require.ErrorIs(t, err, ErrNotSupported)
	require.Contains(t, err.Error(), "output")
	require.Equal(t, EmbedOutputs{}, out)

	k, err := e.GetKernel("com.microsoft.EmbedLayerNormalization", 1)
	require.NoError(t, err)
	_, err = k.Run(context.Background(), map[string]Tensor{"inputIdsT": in.InputIDs, "positionIdsT": in.PositionIDs,
		"wordEmbeddingT": w.Word, "positionEmbeddingT": w.Position, "gammaT": w.Gamma, "betaT": w.Beta}, nil)
	require.ErrorIs(t, err, ErrNotSupported)
}

func TestNewTensorHugeIsAnError(t *testing.T) {
	for _, shape := range [][]int{{maxElems}, {1 << 20, 1 << 20}, {math.MaxInt}, {math.MaxInt / 2, 4}, {-1}} {
		_, err := NewTensor(Float32, shape...)
		require.Error(t, err, "%v", shape)
		if shape[0] > 0 {
			require.ErrorIs(t, err, ErrNotSupported, "%v", shape)
		}
	}
	tt, err := NewTensor(Float16, 3, 4)
	require.NoError(t, err)
	require.Len(t, tt.Bits16(), 12)
}

// With the engine's bound lowered, every output the library would allocate is checked,
// and the one that does not fit is named.
func TestOutputBoundNamesTheTensor(t *testing.T) {
	e := cpuEngine(t)
	ctx := context.Background()
	in := smallAdd() // y (3, 8) float32: 96 bytes; mean, rstd 12 each
	e.allocCap = 100
	var out AddLayerNormOutputs
	err := e.AddLayerNorm(ctx, in, &out)
	require.ErrorIs(t, err, ErrNotSupported)
	require.Contains(t, err.Error(), ": mean: ")
	require.Equal(t, AddLayerNormOutputs{}, out)
	out.Y = FromFloat32(make([]float32, 24), 3, 8) // given: only mean and rstd are allocated
	require.NoError(t, e.AddLayerNorm(ctx, in, &out))

	w, ein := smallEmbed() // output (2, 3, 4) float32: 96 bytes
	e.allocCap = 95
	var eout EmbedOutputs
	err = e.EmbedLayerNormOnce(ctx, w, ein, &eout)
	require.ErrorIs(t, err, ErrNotSupported)
	require.Contains(t, err.Error(), ": output: ")
	e.allocCap = 96 + 8
	eout = EmbedOutputs{WantMaskIndex: true, WantEmbeddingSum: true}
	err = e.EmbedLayerNormOnce(ctx, w, ein, &eout)
	require.ErrorIs(t, err, ErrNotSupported)
	require.Contains(t, err.Error(), ": embedding_sum: ")
	require.Equal(t, EmbedOutputs{WantMaskIndex: true, WantEmbeddingSum: true}, eout)
}

// Item 4: a failed call, whatever the reason, leaves the output struct and slices as they
// were.

func TestFailedCallLeavesOutputs(t *testing.T) {
	e := cpuEngine(t)
	w, in := smallEmbed()
	op, err := e.NewEmbedLayerNorm(w)
	require.NoError(t, err)
	defer op.Close()

	// A given output that breaks the contract: nothing else is allocated into out.
	mi := []int32{7, 7, 7, 7}
	out := EmbedOutputs{MaskIndex: FromInt32(mi, 4)}
	requireArgError(t, op.Run(context.Background(), in, &out), "mask_index", "mask_index must have shape")
	require.True(t, out.Output.IsZero())
	require.Equal(t, []int32{7, 7, 7, 7}, mi)

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, ctx := range []context.Context{cancelled, expired} {
		out := EmbedOutputs{WantMaskIndex: true, WantEmbeddingSum: true}
		err := op.Run(ctx, in, &out)
		require.ErrorIs(t, err, ctx.Err())
		require.Equal(t, EmbedOutputs{WantMaskIndex: true, WantEmbeddingSum: true}, out)
		err = e.EmbedLayerNormOnce(ctx, w, in, &out)
		require.ErrorIs(t, err, ctx.Err())
		require.Equal(t, EmbedOutputs{WantMaskIndex: true, WantEmbeddingSum: true}, out)

		// Given output slices: untouched when the call fails before it starts.
		y := f32s(24, 42)
		aout := AddLayerNormOutputs{Y: FromFloat32(y, 3, 8)}
		err = e.AddLayerNorm(ctx, smallAdd(), &aout, AdditionalOutput(true))
		require.ErrorIs(t, err, ctx.Err())
		require.True(t, aout.Mean.IsZero() && aout.Rstd.IsZero() && aout.X.IsZero())
		require.Equal(t, f32s(24, 42), y)
	}

	// And the same calls succeed, filling the struct, on a live context.
	out = EmbedOutputs{WantMaskIndex: true}
	require.NoError(t, op.Run(context.Background(), in, &out))
	require.Equal(t, []int{2, 3, 4}, out.Output.Shape())
	require.Equal(t, []int32{2, 3}, out.MaskIndex.Int32s())
}

// Item 5: outputs that share memory with an input, a bound weight or another output.

func TestOverlapIsAnError(t *testing.T) {
	e := cpuEngine(t)
	ctx := context.Background()

	in := smallAdd()
	x2 := in.X2.buf.F32
	backing := make([]float32, 32)
	in.X2 = FromFloat32(backing[:24], 3, 8)
	copy(backing, x2)
	cases := []struct {
		name       string
		out        func() AddLayerNormOutputs
		add        bool
		tensor, vs string
	}{
		{"y over x2 shifted a row", func() AddLayerNormOutputs {
			return AddLayerNormOutputs{Y: FromFloat32(backing[8:32], 3, 8)}
		}, false, "y", "x2"},
		{"y is x1 (in place)", func() AddLayerNormOutputs {
			return AddLayerNormOutputs{Y: in.X1}
		}, false, "y", "x1"},
		{"mean and rstd one slice", func() AddLayerNormOutputs {
			s := make([]float32, 3)
			return AddLayerNormOutputs{Mean: FromFloat32(s, 3, 1), Rstd: FromFloat32(s, 3, 1)}
		}, false, "rstd", "mean"},
		{"x over y", func() AddLayerNormOutputs {
			s := make([]float32, 25)
			return AddLayerNormOutputs{Y: FromFloat32(s[:24], 3, 8), X: FromFloat32(s[1:], 3, 8)}
		}, true, "x", "y"},
		{"mean over gamma", func() AddLayerNormOutputs {
			return AddLayerNormOutputs{Mean: FromFloat32(in.Gamma.buf.F32[5:8], 3, 1)}
		}, false, "mean", "gamma"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := slices.Clone(backing)
			out := c.out()
			saved := out
			err := e.AddLayerNorm(ctx, in, &out, AdditionalOutput(c.add))
			requireArgError(t, err, c.tensor, "overlaps "+c.vs)
			require.Equal(t, saved, out)
			require.Equal(t, before, backing)
		})
	}

	// 16-bit tensors compare by their bytes too.
	h := make([]uint16, 25)
	in16 := AddLayerNormInputs{X1: FromFloat16Bits(h[:24], 3, 8), X2: FromFloat16Bits(make([]uint16, 24), 3, 8),
		Gamma: FromFloat16Bits(make([]uint16, 8), 8), Beta: FromFloat16Bits(make([]uint16, 8), 8)}
	out16 := AddLayerNormOutputs{Y: FromFloat16Bits(h[1:], 3, 8)}
	requireArgError(t, e.AddLayerNorm(ctx, in16, &out16), "y", "overlaps x1")

	w, ein := smallEmbed()
	wordBacking := make([]float32, 40)
	copy(wordBacking, w.Word.buf.F32)
	w.Word = FromFloat32(wordBacking[:20], 5, 4)
	word := slices.Clone(w.Word.buf.F32)
	op, err := e.NewEmbedLayerNorm(w)
	require.NoError(t, err)
	defer op.Close()
	// The output over the bound word table: refused, and the table stays as it was.
	eout := EmbedOutputs{Output: FromFloat32(wordBacking[16:40], 2, 3, 4)}
	requireArgError(t, op.Run(ctx, ein, &eout), "output", "overlaps word_embedding")
	require.Equal(t, word, w.Word.buf.F32)

	sum := make([]float32, 24)
	eout = EmbedOutputs{Output: FromFloat32(sum, 2, 3, 4), EmbeddingSum: FromFloat32(sum, 2, 3, 4)}
	requireArgError(t, op.Run(ctx, ein, &eout), "embedding_sum", "overlaps output")

	eout = EmbedOutputs{MaskIndex: FromInt32(ein.Mask.buf.I32[4:6], 2)}
	requireArgError(t, op.Run(ctx, ein, &eout), "mask_index", "overlaps mask")

	// An int32 output over a float32 one's memory.
	outF := make([]float32, 24)
	eout = EmbedOutputs{Output: FromFloat32(outF, 2, 3, 4),
		MaskIndex: FromInt32(unsafe.Slice((*int32)(unsafe.Pointer(&outF[10])), 2), 2)}
	requireArgError(t, op.Run(ctx, ein, &eout), "mask_index", "overlaps output")

	// Adjacent but separate memory is fine.
	two := make([]float32, 48)
	eout = EmbedOutputs{Output: FromFloat32(two[:24], 2, 3, 4), EmbeddingSum: FromFloat32(two[24:], 2, 3, 4)}
	require.NoError(t, op.Run(ctx, ein, &eout))
}

// Item 6: a nil ctx is an ArgError naming ctx at every entry point.

func TestNilContextIsAnError(t *testing.T) {
	e := cpuEngine(t)
	w, in := smallEmbed()
	op, err := e.NewEmbedLayerNorm(w)
	require.NoError(t, err)
	defer op.Close()
	var nilCtx context.Context
	var out EmbedOutputs
	requireArgError(t, op.Run(nilCtx, in, &out), "ctx", "ctx must not be nil")
	requireArgError(t, e.EmbedLayerNormOnce(nilCtx, w, in, &out), "ctx", "ctx must not be nil")
	require.Equal(t, EmbedOutputs{}, out)
	var aout AddLayerNormOutputs
	requireArgError(t, e.AddLayerNorm(nilCtx, smallAdd(), &aout), "ctx", "ctx must not be nil")
	require.Equal(t, AddLayerNormOutputs{}, aout)
	k, err := e.GetKernel("ascend.AddLayerNorm", 1)
	require.NoError(t, err)
	a := smallAdd()
	_, err = k.Run(nilCtx, map[string]Tensor{"x1T": a.X1, "x2T": a.X2, "gammaT": a.Gamma, "betaT": a.Beta}, nil)
	requireArgError(t, err, "ctx", "ctx must not be nil")
}

// Item 8: epsilon, the mask rule and a closed engine, the same on every entry.

func TestEpsilonAndMaskRuleRules(t *testing.T) {
	e := cpuEngine(t)
	ctx := context.Background()
	w, in := smallEmbed()
	for _, eps := range []float32{float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), -1e-12} {
		var out EmbedOutputs
		requireArgError(t, e.EmbedLayerNormOnce(ctx, w, in, &out, Epsilon(eps)), "epsilon", "epsilon must be >= 0")
		_, err := e.NewEmbedLayerNorm(w, Epsilon(eps))
		requireArgError(t, err, "epsilon", "epsilon must be >= 0")
	}
	var out EmbedOutputs
	require.NoError(t, e.EmbedLayerNormOnce(ctx, w, in, &out, Epsilon(0)))

	_, err := e.NewEmbedLayerNorm(w, WithMaskRule(MaskRule(7)))
	requireArgError(t, err, "mask_index_rule", "mask_index_rule must be")

	ek, err := e.GetKernel("com.microsoft.EmbedLayerNormalization", 1)
	require.NoError(t, err)
	ak, err := e.GetKernel("ascend.AddLayerNorm", 1)
	require.NoError(t, err)
	ein := map[string]Tensor{"inputIdsT": in.InputIDs, "wordEmbeddingT": w.Word, "positionEmbeddingT": w.Position,
		"gammaT": w.Gamma, "betaT": w.Beta}
	a := smallAdd()
	ain := map[string]Tensor{"x1T": a.X1, "x2T": a.X2, "gammaT": a.Gamma, "betaT": a.Beta}
	for _, eps := range []any{1e300, -1e300, math.Inf(1), math.NaN()} {
		_, err := ek.Run(ctx, ein, map[string]any{"epsilon": eps})
		requireArgError(t, err, "epsilon", "epsilon")
		_, err = ak.Run(ctx, ain, map[string]any{"epsilon": eps})
		requireArgError(t, err, "epsilon", "epsilon")
	}
	// The largest float32 is still a valid epsilon for both.
	_, err = ak.Run(ctx, ain, map[string]any{"epsilon": float64(math.MaxFloat32)})
	require.NoError(t, err)

	e2, err := Open(WithBackend(BackendCPU))
	require.NoError(t, err)
	require.NoError(t, e2.Close())
	_, err = e2.GetKernel("ascend.AddLayerNorm", 1)
	require.ErrorIs(t, err, ErrClosed)
}

// Item 9: the error names the tensor that is wrong, with the spec's message.

func TestErrorsNameTheWrongTensor(t *testing.T) {
	e := cpuEngine(t)
	ctx := context.Background()
	w, in := smallEmbed()
	// input_ids of rank 3 beside segment_ids and mask of the right (B, S).
	bad := in
	bad.InputIDs = FromInt32(in.InputIDs.buf.I32, 2, 3, 1)
	var out EmbedOutputs
	requireArgError(t, e.EmbedLayerNormOnce(ctx, w, bad, &out), "input_ids", "input_ids is expected to have 2 dimensions, got 3")
	bad.SegmentIDs = Tensor{}
	requireArgError(t, e.EmbedLayerNormOnce(ctx, w, bad, &out), "input_ids", "input_ids is expected to have 2 dimensions, got 3")
	// segment_ids that is wrong beside good input_ids is still blamed on segment_ids.
	bad = in
	bad.SegmentIDs = FromInt32(in.SegmentIDs.buf.I32, 3, 2)
	requireArgError(t, e.EmbedLayerNormOnce(ctx, w, bad, &out), "segment_ids", "Input 0 and 1 shall have same shape")

	// A float16 word table among float32 weights: the word table is the odd one.
	w16 := w
	w16.Word = FromFloat16Bits(make([]uint16, 20), 5, 4)
	requireArgError(t, e.EmbedLayerNormOnce(ctx, w16, in, &out), "word_embedding", "type error")
	// A float16 gamma among float32 weights: gamma.
	w16 = w
	w16.Gamma = FromFloat16Bits(make([]uint16, 4), 4)
	requireArgError(t, e.EmbedLayerNormOnce(ctx, w16, in, &out), "gamma", "type error")
	// An int32 word table: named, whatever the others are.
	w16 = w
	w16.Word = FromInt32(make([]int32, 20), 5, 4)
	requireArgError(t, e.EmbedLayerNormOnce(ctx, w16, in, &out), "word_embedding", "type error")

	// gamma (31) against x1 (1, 32) with beta (32): gamma is wrong.
	x := FromFloat32(make([]float32, 32), 1, 32)
	var aout AddLayerNormOutputs
	err := e.AddLayerNorm(ctx, AddLayerNormInputs{X1: x, X2: x, Gamma: FromFloat32(make([]float32, 31), 31),
		Beta: FromFloat32(make([]float32, 32), 32)}, &aout)
	requireArgError(t, err, "gamma", "gamma dim 0 must equal x1 dim 1")
	// beta that differs from a right gamma: beta.
	err = e.AddLayerNorm(ctx, AddLayerNormInputs{X1: x, X2: x, Gamma: FromFloat32(make([]float32, 32), 32),
		Beta: FromFloat32(make([]float32, 31), 31)}, &aout)
	requireArgError(t, err, "beta", "gamma and beta must have the same shape")
	require.True(t, strings.HasPrefix(err.Error(), "fusednorm: AddLayerNorm: beta: "))
}

// Item 4 on a device that fails: the outputs the call allocated never reach the caller.
// Needs Dawn (lavapipe in CI).
func TestDeviceFaultLeavesOutputs(t *testing.T) {
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
	ctx := context.Background()
	w, in := smallEmbed()
	op, err := e.NewEmbedLayerNorm(w)
	require.NoError(t, err)
	defer op.Close()
	for _, site := range []string{"submit", "map"} {
		fail = site
		var aout AddLayerNormOutputs
		err := e.AddLayerNorm(ctx, smallAdd(), &aout, AdditionalOutput(true))
		require.ErrorIs(t, err, ErrDevice)
		require.Equal(t, AddLayerNormOutputs{}, aout)
		eout := EmbedOutputs{WantMaskIndex: true, WantEmbeddingSum: true}
		err = op.Run(ctx, in, &eout)
		require.ErrorIs(t, err, ErrDevice)
		require.Equal(t, EmbedOutputs{WantMaskIndex: true, WantEmbeddingSum: true}, eout)
		fail = ""
		require.NoError(t, op.Run(ctx, in, &eout))
		require.Equal(t, []int32{2, 3}, eout.MaskIndex.Int32s())
	}
}
