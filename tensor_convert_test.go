package fusednorm

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/x448/float16"
)

func TestFromFloat32AsBFloat16(t *testing.T) {
	in := []float32{1, -2.5, 0, float32(math.Inf(-1)),
		math.Float32frombits(0x3f808000), // halfway between 1 and the next bfloat16, 1 is even: 1
		math.Float32frombits(0x3f818000), // halfway, the lower neighbour odd: rounds up to 0x3f82
		math.Float32frombits(0x3f808001), // just above halfway: up
		float32(math.NaN())}
	tt := FromFloat32AsBFloat16(in, 2, 4)
	require.Equal(t, BFloat16, tt.DType())
	require.Equal(t, []int{2, 4}, tt.Shape())
	bits := tt.Bits16()
	require.Equal(t, []uint16{0x3f80, 0xc020, 0, 0xff80, 0x3f80, 0x3f82, 0x3f81}, bits[:7])
	require.True(t, math.IsNaN(tt.At(7)))
	in[0] = 7 // a copy: the data is not kept
	require.Equal(t, uint16(0x3f80), tt.Bits16()[0])
	// A valid tensor of the ops: a bf16 AddLayerNorm runs on it.
	require.Equal(t, 0, FromFloat32AsBFloat16(nil).Len())
	require.False(t, FromFloat32AsBFloat16(nil).IsZero())
}

func TestAsFloat32(t *testing.T) {
	// Float32s does not convert: nil for 16-bit tensors; AsFloat32 does.
	bf := FromFloat32AsBFloat16([]float32{1.5, -3, 0.0078125}, 3)
	require.Nil(t, bf.Float32s())
	require.Equal(t, []float32{1.5, -3, 0.0078125}, bf.AsFloat32())
	h := FromFloat16([]float16.Float16{float16.Fromfloat32(0.5), float16.Fromfloat32(-65504), float16.Frombits(1)}, 3)
	require.Nil(t, h.Float32s())
	require.Equal(t, []float32{0.5, -65504, 0x1p-24}, h.AsFloat32())
	f := FromFloat32([]float32{1, 2}, 2)
	got := f.AsFloat32()
	require.Equal(t, []float32{1, 2}, got)
	got[0] = 9 // a copy
	require.Equal(t, float32(1), f.Float32s()[0])
	require.Nil(t, FromInt32([]int32{1}, 1).AsFloat32())
	require.Nil(t, Tensor{}.AsFloat32())
}
