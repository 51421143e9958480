package fusednorm

import (
	"fmt"
	"math"
	"slices"
	"unsafe"

	"github.com/x448/float16"

	"github.com/fusednorm/fusednorm/internal/half"
	"github.com/fusednorm/fusednorm/internal/ops"
)

// DType is a tensor element type.
type DType = ops.DType

// The element types. Float16 and BFloat16 are stored as raw 16-bit patterns.
const (
	Float32  DType = ops.F32
	Float16  DType = ops.F16
	BFloat16 DType = ops.BF16
	Int32    DType = ops.I32
)

// Tensor is a dense, row-major tensor that wraps caller memory without copying. The zero
// Tensor means "absent" for optional inputs and "allocate for me" for outputs.
type Tensor struct {
	shape []int
	buf   ops.Buf
	dev   *DeviceTensor // the device tensor this is the Tensor of; nil for host memory
}

// FromFloat32 wraps data as a float32 tensor of the given shape.
func FromFloat32(data []float32, shape ...int) Tensor {
	return Tensor{shape: shape, buf: ops.Buf{DType: ops.F32, F32: nonNil(data)}}
}

// FromFloat16 wraps data as a float16 tensor of the given shape.
func FromFloat16(data []float16.Float16, shape ...int) Tensor {
	var bits []uint16
	if len(data) > 0 {
		bits = unsafe.Slice((*uint16)(unsafe.Pointer(&data[0])), len(data))
	}
	return Tensor{shape: shape, buf: ops.Buf{DType: ops.F16, U16: nonNil(bits)}}
}

// FromFloat16Bits wraps raw binary16 bit patterns as a float16 tensor.
func FromFloat16Bits(bits []uint16, shape ...int) Tensor {
	return Tensor{shape: shape, buf: ops.Buf{DType: ops.F16, U16: nonNil(bits)}}
}

// FromBFloat16Bits wraps raw bfloat16 bit patterns (the top half of a float32) as a tensor.
func FromBFloat16Bits(bits []uint16, shape ...int) Tensor {
	return Tensor{shape: shape, buf: ops.Buf{DType: ops.BF16, U16: nonNil(bits)}}
}

// FromFloat32AsBFloat16 converts data to a new bfloat16 tensor of the given shape, each value
// rounded to the nearest bfloat16, ties to even (NaN stays a quiet NaN), as the ops round
// their bfloat16 outputs. Unlike the other From functions it copies: data is not kept.
// FromBFloat16Bits wraps bfloat16 bit patterns one has already.
func FromFloat32AsBFloat16(data []float32, shape ...int) Tensor {
	bits := make([]uint16, len(data))
	for i, v := range data {
		bits[i] = half.F32ToBF16(v)
	}
	return FromBFloat16Bits(bits, shape...)
}

// FromInt32 wraps data as an int32 tensor of the given shape.
func FromInt32(data []int32, shape ...int) Tensor {
	return Tensor{shape: shape, buf: ops.Buf{DType: ops.I32, I32: nonNil(data)}}
}

// nonNil keeps an empty-but-given slice distinguishable from an absent tensor.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// NewTensor allocates a zeroed tensor of the dtype and shape. It returns an error wrapping
// ErrInvalidArgument for a negative dimension or an unknown dtype, and one wrapping
// ErrNotSupported for a tensor larger than the library allocates (see allocBound).
func NewTensor(dt DType, shape ...int) (Tensor, error) {
	n, err := sizeOf("NewTensor", dt, shape)
	if err != nil {
		return Tensor{}, err
	}
	if bound := allocBound(); n*dt.Size() > bound {
		return Tensor{}, fmt.Errorf("fusednorm: NewTensor: shape %v is %d bytes, over the %d bytes the library allocates at once: %w",
			shape, n*dt.Size(), bound, ErrNotSupported)
	}
	return newTensor(dt, n, shape), nil
}

// sizeOf is the element count of a tensor op allocates: an error wrapping
// ErrInvalidArgument for a negative dimension or an unknown dtype, ErrNotSupported for more
// than maxElems elements.
func sizeOf(op string, dt DType, shape []int) (int, error) {
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("fusednorm: %s: shape %v: negative dimension: %w", op, shape, ErrInvalidArgument)
		}
	}
	if dt.Size() == 0 {
		return 0, fmt.Errorf("fusednorm: %s: dtype %v: %w", op, dt, ErrInvalidArgument)
	}
	n, ok := numel(shape)
	if !ok {
		return 0, fmt.Errorf("fusednorm: %s: shape %v has more than %d elements: %w", op, shape, maxElems, ErrNotSupported)
	}
	return n, nil
}

// newTensor allocates a tensor of n elements, n the element count of shape, which it copies.
func newTensor(dt DType, n int, shape []int) Tensor {
	t := Tensor{shape: append([]int(nil), shape...)}
	t.buf.DType = dt
	switch dt {
	case Float32:
		t.buf.F32 = make([]float32, n)
	case Float16, BFloat16:
		t.buf.U16 = make([]uint16, n)
	case Int32:
		t.buf.I32 = make([]int32, n)
	}
	return t
}

// newOutput allocates an output of a call (a field the caller left zero), as newTensor, its
// shape marked as the library's: madeByCall tells such a tensor, given back to a call of
// another shape, from one the caller made (check.go, madeHint). The mark is an element past
// the shape's end, in its capacity: the Tensor's value (its length-bound shape included) is
// what newTensor's would be, so comparing tensors is unaffected.
func newOutput(dt DType, n int, shape []int) Tensor {
	s := make([]int, len(shape)+1)
	copy(s, shape)
	s[len(shape)] = madeMark
	t := newTensor(dt, n, nil)
	t.shape = s[:len(shape)]
	return t
}

// madeMark marks the shapes of the outputs a call allocated: a value no dimension has.
const madeMark = math.MinInt + 0x6d616465

// madeByCall reports whether t is an output a call allocated (newOutput).
func madeByCall(t *Tensor) bool {
	s := t.shape
	return cap(s) > len(s) && s[:len(s)+1][len(s)] == madeMark
}

// IsZero reports whether t is the zero Tensor (absent).
func (t Tensor) IsZero() bool { return t.buf.DType == ops.Invalid }

// DType is the element type.
func (t Tensor) DType() DType { return t.buf.DType }

// Shape returns the dimensions (the caller must not modify the slice).
func (t Tensor) Shape() []int { return t.shape }

// Len is the number of elements of the backing data.
func (t Tensor) Len() int { return t.buf.Len() }

// Float32s returns the data of a float32 tensor, without copying. It does not convert: for
// any other dtype it returns nil, for float16 and bfloat16 tensors (the dtype of y and x with
// 16-bit inputs, see spec §B.2) included; read those with AsFloat32 (a float32 copy),
// Float16s or Bits16. On a GPU a device tensor's Tensor has no host data: nil too.
func (t Tensor) Float32s() []float32 { return t.buf.F32 }

// AsFloat32 returns a new slice of the tensor's values widened to float32, whatever its float
// dtype: a copy of a float32 tensor's data, or each float16 or bfloat16 value converted
// (exactly: float32 holds every 16-bit float value). nil for an int32 tensor, an absent one,
// and a GPU device tensor's Tensor (DeviceTensor.Read copies that to the host first).
func (t Tensor) AsFloat32() []float32 {
	switch t.buf.DType {
	case ops.F32:
		if t.buf.F32 == nil {
			return nil
		}
		return slices.Clone(t.buf.F32)
	case ops.F16, ops.BF16:
		if t.buf.U16 == nil {
			return nil
		}
		out := make([]float32, len(t.buf.U16))
		widen := half.F16ToF32
		if t.buf.DType == ops.BF16 {
			widen = half.BF16ToF32
		}
		for i, b := range t.buf.U16 {
			out[i] = widen(b)
		}
		return out
	}
	return nil
}

// Float16s returns the data of a float16 tensor (nil for other dtypes).
func (t Tensor) Float16s() []float16.Float16 {
	if t.buf.DType != ops.F16 || len(t.buf.U16) == 0 {
		return nil
	}
	return unsafe.Slice((*float16.Float16)(unsafe.Pointer(&t.buf.U16[0])), len(t.buf.U16))
}

// Bits16 returns the raw 16-bit patterns of a float16 or bfloat16 tensor, without copying
// (nil for other dtypes).
func (t Tensor) Bits16() []uint16 { return t.buf.U16 }

// Int32s returns the data of an int32 tensor (nil for other dtypes).
func (t Tensor) Int32s() []int32 { return t.buf.I32 }

// At returns element i widened to float64, for any dtype (tests and tools).
func (t Tensor) At(i int) float64 {
	switch t.buf.DType {
	case ops.F32:
		return float64(t.buf.F32[i])
	case ops.F16:
		return float64(float16.Frombits(t.buf.U16[i]).Float32())
	case ops.BF16:
		return float64(bf16ToF32(t.buf.U16[i]))
	case ops.I32:
		return float64(t.buf.I32[i])
	}
	return 0
}

// String describes the tensor, e.g. "float32(8, 512, 768)".
func (t Tensor) String() string {
	if t.IsZero() {
		return "absent"
	}
	s := t.buf.DType.String() + "("
	for i, d := range t.shape {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprint(d)
	}
	return s + ")"
}

func bf16ToF32(b uint16) float32 {
	return float32frombits(uint32(b) << 16)
}

func float32frombits(u uint32) float32 { return *(*float32)(unsafe.Pointer(&u)) }

// maxElems bounds the element count of a shape: far beyond any memory, and small enough
// that the bytes of maxElems 8-byte elements fit in an int, on 32-bit platforms too.
const maxElems = min(1<<46, math.MaxInt/8)

// numel is the product of the dims; ok is false for a negative dim or a product over
// maxElems (so it never overflows).
func numel(shape []int) (n int, ok bool) {
	n = 1
	for _, d := range shape {
		if d < 0 {
			return 0, false
		}
		if d != 0 && n > maxElems/d {
			return 0, false
		}
		n *= d
	}
	return n, true
}
