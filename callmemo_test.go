package fusednorm

import (
	"context"
	"testing"

	"github.com/fusednorm/fusednorm/internal/memo"
	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/stretchr/testify/require"
)

// TestCallMemoAdd: a prepared AddLayerNorm's repeated call on the same device tensors is
// remembered (on a GPU engine), computes from the tensors' current data, and a device tensor
// closed since fails it as it fails a call that was never remembered.
func TestCallMemoAdd(t *testing.T) {
	ctx := context.Background()
	for name, e := range deviceEngines(t) {
		t.Run(name, func(t *testing.T) {
			const N, D = 3, 8
			g, b := FromFloat32(ramp(D, 0.3), D), FromFloat32(ramp(D, -0.2), D)
			op, err := e.NewAddLayerNorm(AddLayerNormWeights{Gamma: g, Beta: b})
			require.NoError(t, err)
			defer op.Close()
			x1h, x2h := FromFloat32(ramp(N*D, 0.5), N, D), FromFloat32(ramp(N*D, 0.25), N, D)
			x1, x2 := devLike(t, e, Float32, N, D), devLike(t, e, Float32, N, D)
			require.NoError(t, x1.Write(x1h))
			require.NoError(t, x2.Write(x2h))
			y, mean, rstd := devLike(t, e, Float32, N, D), devLike(t, e, Float32, N, 1), devLike(t, e, Float32, N, 1)
			out := AddLayerNormOutputs{Y: y.Tensor(), Mean: mean.Tensor(), Rstd: rstd.Tensor()}
			want := func() Tensor { // the same call on host tensors
				var h AddLayerNormOutputs
				require.NoError(t, op.Run(ctx, x1h, x2h, &h))
				return h.Y
			}
			require.NoError(t, op.Run(ctx, x1.Tensor(), x2.Tensor(), &out))
			require.Equal(t, want(), readBack(t, y))
			x1t, x2t := x1.Tensor(), x2.Tensor()
			keys, _ := addKeysOf(&x1t, &x2t, &out)
			require.Equal(t, name == "dawn", remembered(&op.memo, keys), "remembered on the GPU engine only")

			// New data in the same tensors: the remembered call reads it.
			x1h = FromFloat32(ramp(N*D, -1.5), N, D)
			require.NoError(t, x1.Write(x1h))
			require.NoError(t, op.Run(ctx, x1.Tensor(), x2.Tensor(), &out))
			require.Equal(t, want(), readBack(t, y))

			// Another output shape over the same storage is another call: checked, refused.
			bad := out
			bad.Mean = Tensor{shape: []int{1, N}, buf: mean.Tensor().buf}
			require.ErrorIs(t, op.Run(ctx, x1.Tensor(), x2.Tensor(), &bad), ErrInvalidArgument)

			// A closed output: the remembered call fails as a fresh op's does.
			require.NoError(t, y.Close())
			errMemo := op.Run(ctx, x1.Tensor(), x2.Tensor(), &out)
			fresh, err := e.NewAddLayerNorm(AddLayerNormWeights{Gamma: g, Beta: b})
			require.NoError(t, err)
			defer fresh.Close()
			errFresh := fresh.Run(ctx, x1.Tensor(), x2.Tensor(), &out)
			if name == "dawn" {
				require.Error(t, errMemo)
			}
			require.Equal(t, errFresh == nil, errMemo == nil, "fresh: %v, remembered: %v", errFresh, errMemo)
		})
	}
}

// TestCallMemoEmbed: a prepared EmbedLayerNorm's call that differs from the remembered one
// only by a Want flag is a different call: the wanted output is allocated and returned.
func TestCallMemoEmbed(t *testing.T) {
	ctx := context.Background()
	for name, e := range deviceEngines(t) {
		t.Run(name, func(t *testing.T) {
			const B, S, H, V, P = 2, 3, 8, 5, 4
			op, err := e.NewEmbedLayerNorm(EmbedWeights{Word: FromFloat32(ramp(V*H, 0.1), V, H),
				Position: FromFloat32(ramp(P*H, 0.2), P, H), Gamma: FromFloat32(ramp(H, 0.3), H), Beta: FromFloat32(ramp(H, 0.4), H)})
			require.NoError(t, err)
			defer op.Close()
			ids := upload(t, e, FromInt32([]int32{0, 1, 2, 3, 4, 0}, B, S))
			mask := upload(t, e, FromInt32([]int32{1, 1, 0, 1, 0, 0}, B, S))
			o := devLike(t, e, Float32, B, S, H)
			in := EmbedInputs{InputIDs: ids, Mask: mask}
			out := EmbedOutputs{Output: o.Tensor()}
			require.NoError(t, op.Run(ctx, in, &out))
			require.NoError(t, op.Run(ctx, in, &out))
			require.True(t, out.MaskIndex.IsZero(), "mask_index not wanted")
			keys, _ := embedKeysOf(&in, &out)
			require.Equal(t, name == "dawn", remembered(&op.memo, keys), "remembered on the GPU engine only")

			out.WantMaskIndex = true
			require.NoError(t, op.Run(ctx, in, &out))
			require.Equal(t, []int32{2, 1}, out.MaskIndex.Int32s(), "mask_index, allocated for the call that wants it")
			if name != "dawn" {
				return
			}
			// The remembered call still checks its ids on the device (spec §A.2a).
			idsDev := devLike(t, e, Int32, B, S)
			in = EmbedInputs{InputIDs: idsDev.Tensor()}
			out = EmbedOutputs{Output: o.Tensor()}
			require.NoError(t, idsDev.Write(FromInt32([]int32{0, 1, 2, 3, 4, 0}, B, S)))
			require.NoError(t, op.Run(ctx, in, &out))
			require.NoError(t, op.Run(ctx, in, &out)) // remembered
			require.NoError(t, idsDev.Write(FromInt32([]int32{0, 1, V, 3, 4, 0}, B, S)))
			require.NoError(t, op.Run(ctx, in, &out))
			err = e.Sync(ctx)
			require.ErrorIs(t, err, ErrInvalidArgument)
			require.Contains(t, err.Error(), "out of range")
		})
	}
}

// remembered reports whether m holds a value under k.
func remembered[K comparable, V any](m *memo.Last[K, V], k K) bool {
	_, ok := m.Hold(&k)
	if ok {
		m.Release()
	}
	return ok
}

// ramp is n values (i mod 7)·scale − 1.
func ramp(n int, scale float32) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(i%7)*scale - 1
	}
	return s
}

// fakeDev is device storage for the header tests, which need no device.
type fakeDev struct{ n int }

func (f *fakeDev) Len() int { return f.n }

// TestHeaderIs: h.is(t) holds exactly when t's header is h, over absent, host and device
// tensors of several dtypes, ranks and shapes, two of them on the same storage.
func TestHeaderIs(t *testing.T) {
	d1, d2 := &fakeDev{24}, &fakeDev{24}
	dev := func(m ops.DeviceMem, dt DType, shape ...int) Tensor {
		return Tensor{shape: shape, buf: ops.Buf{DType: dt, Dev: m}}
	}
	ts := []Tensor{
		{},
		FromFloat32(make([]float32, 24), 4, 6),
		dev(d1, Float32, 4, 6),
		dev(d1, Float32, 6, 4),
		dev(d1, Float32, 24),
		dev(d1, Float32, 2, 3, 4),
		dev(d1, Float16, 4, 6),
		dev(d2, Float32, 4, 6),
		dev(d1, Float32, 1, 1, 1, 1, 1, 1, 1, 1, 24),
	}
	for i := range ts {
		h, ok := headerOf(&ts[i])
		for j := range ts {
			hj, okj := headerOf(&ts[j])
			want := ok && okj && h == hj
			if got := ok && h.is(&ts[j]); got != want {
				t.Errorf("tensor %d's header is(tensor %d) = %v, want %v", i, j, got, want)
			}
		}
	}
	// The keys of a call match its own tensors and not a call with one tensor changed.
	x1, x2, y := dev(d1, Float32, 4, 6), dev(d2, Float32, 4, 6), dev(&fakeDev{24}, Float32, 4, 6)
	out := AddLayerNormOutputs{Y: y}
	k, ok := addKeysOf(&x1, &x2, &out)
	if !ok || !k.match(&x1, &x2, &out) {
		t.Fatal("a call's keys do not match its own tensors")
	}
	if k.match(&x2, &x1, &out) {
		t.Error("keys match with x1 and x2 swapped")
	}
	in := EmbedInputs{InputIDs: dev(d1, Int32, 4, 6)}
	eout := EmbedOutputs{Output: dev(d2, Float32, 4, 6, 1)}
	ek, ok := embedKeysOf(&in, &eout)
	if !ok || !ek.match(&in, &eout) {
		t.Fatal("an EmbedLayerNorm call's keys do not match its own tensors")
	}
	eout.WantMaskIndex = true
	if ek.match(&in, &eout) {
		t.Error("keys match with WantMaskIndex changed")
	}
}
