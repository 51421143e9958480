package fusednorm

import (
	"fmt"
	"math"
	"runtime/debug"
	"slices"
	"sync"
	"unsafe"

	"github.com/x448/float16"

	"github.com/fusednorm/fusednorm/internal/half"
	"github.com/fusednorm/fusednorm/internal/ops"
)

// Tensors: the dtypes, Tensor, its constructors and accessors, and the outputs a call
// allocates; below them, the bound on what the library allocates (allocBound,
// outputBudget) and the checks of the tensors a call is given (checkTensor, givenOutput,
// checkOverlap, checkDevices).

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
// another shape, from one the caller made (madeHint, below). The mark is an element past
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

// The Go runtime cannot fail an allocation softly: one larger than the process can get
// ends it ("fatal error: out of memory"). So the library sizes every output it would
// allocate before allocating any, and refuses (ErrNotSupported, naming the tensor) past a
// bound on the bytes one call allocates.

// allocBound is that bound: half the least of the machine's physical memory, the
// process's address-space limit (RLIMIT_AS) and its cgroup's memory limit, all read once,
// and at most the Go memory limit (GOMEMLIMIT, debug.SetMemoryLimit) as it stands now.
func allocBound() int {
	b := systemBound()
	if l := debug.SetMemoryLimit(-1); l < int64(b) {
		b = int(max(l, 0))
	}
	return b
}

// systemBound is half the least memory limit of the machine and process (memoryLimits),
// at most math.MaxInt/2: on 32-bit platforms, the address space bounds it first.
var systemBound = sync.OnceValue(func() int {
	least := uint64(math.MaxInt)
	for _, l := range memoryLimits() {
		if l > 0 && l < least {
			least = l
		}
	}
	return int(least / 2)
})

// outputBudget counts the bytes one call allocates for its outputs against a bound, read
// when the call first allocates: a call whose outputs are all given (the steady state of a
// loop) pays nothing for it.
type outputBudget struct {
	e    *Engine
	left int
	read bool
}

// newOutputBudget starts a call's count.
func (e *Engine) newOutputBudget() outputBudget { return outputBudget{e: e} }

// bound is the engine's own bound (a test sets it) when it is lower than allocBound.
func (e *Engine) bound() int {
	b := allocBound()
	if e.allocCap > 0 && e.allocCap < b {
		b = e.allocCap
	}
	return b
}

// take counts an output of dtype dt and shape, or refuses it: ErrNotSupported naming the
// tensor. shape does not escape.
func (b *outputBudget) take(op, name string, dt DType, shape []int) (int, error) {
	if !b.read {
		b.left, b.read = b.e.bound(), true
	}
	n, ok := numel(shape)
	if !ok {
		return 0, fmt.Errorf("fusednorm: %s: %s: shape %v has more than %d elements: %w",
			op, name, slices.Clone(shape), maxElems, ErrNotSupported)
	}
	size := n * dt.Size() // ≤ 8·maxElems: no overflow
	if size > b.left {
		return 0, fmt.Errorf("fusednorm: %s: %s: shape %v is %d bytes, over the %d bytes left of what the library allocates for one call: %w",
			op, name, slices.Clone(shape), size, b.left, ErrNotSupported)
	}
	b.left -= size
	return n, nil
}

// The checks of the tensors a call is given, shared by the ops (each op's file applies its
// contract with them): they run before the call reaches a backend, so every backend
// answers alike.

// checkTensor verifies a given tensor is well formed: its data length matches its shape.
func checkTensor(op, name string, t *Tensor) error {
	if t.IsZero() {
		return nil
	}
	n, ok := numel(t.shape)
	if !ok {
		return argErr(op, name, "shape %v has a negative or too large dimension", t.shape)
	}
	if t.Len() != n {
		return argErr(op, name, "data has %d elements, shape %v needs %d", t.Len(), t.shape, n)
	}
	return nil
}

func sameShape(a, b []int) bool { return slices.Equal(a, b) }

// givenOutput checks a caller's output tensor against the contract; a zero Buf when the
// caller gave none. shape does not escape (the paths that print it take a copy), so
// callers may build it on the stack.
func givenOutput(op, name string, t *Tensor, dt DType, shape []int) (ops.Buf, error) {
	if t.IsZero() {
		return ops.Buf{}, nil
	}
	if err := checkTensor(op, name, t); err != nil {
		return ops.Buf{}, err
	}
	if t.DType() != dt {
		return ops.Buf{}, argErr(op, name, "%s must be %v, got %v%s", name, dt, t.DType(), madeHint(name, t))
	}
	if !sameShape(t.shape, shape) {
		return ops.Buf{}, argErr(op, name, "%s must have shape %v, got %v%s", name, slices.Clone(shape), t.shape, madeHint(name, t))
	}
	return t.buf, nil
}

// madeHint explains an output of the wrong dtype or shape that an earlier call allocated: the
// outputs struct was reused for a call of another shape or dtype with the field still set.
func madeHint(name string, t *Tensor) string {
	if !madeByCall(t) {
		return ""
	}
	return fmt.Sprintf("; this %s is the %s an earlier call allocated into the outputs struct, which was reused: "+
		"set that field back to the zero Tensor (or zero the whole struct) to have this call allocate it again", name, t.String())
}

// span is the memory a tensor's data occupies, [lo, hi), or the device storage it is; empty
// for an absent or empty tensor.
type span struct {
	lo, hi uintptr
	dev    ops.DeviceMem
}

func spanOf(b ops.Buf) span {
	if b.Dev != nil {
		return span{dev: b.Dev}
	}
	var p unsafe.Pointer
	switch b.DType {
	case ops.F32:
		p = unsafe.Pointer(unsafe.SliceData(b.F32))
	case ops.F16, ops.BF16:
		p = unsafe.Pointer(unsafe.SliceData(b.U16))
	case ops.I32:
		p = unsafe.Pointer(unsafe.SliceData(b.I32))
	}
	n := uintptr(b.Len() * b.DType.Size())
	if p == nil || n == 0 {
		return span{}
	}
	return span{lo: uintptr(p), hi: uintptr(p) + n}
}

// spanI32 is the span of int32 data on the host (s) or the device (dev).
func spanI32(s []int32, dev ops.DeviceMem) span {
	return spanOf(ops.Buf{DType: ops.I32, I32: s, Dev: dev})
}

// spanF32 is the span of float32 data on the host (s) or the device (dev).
func spanF32(s []float32, dev ops.DeviceMem) span {
	return spanOf(ops.Buf{DType: ops.F32, F32: s, Dev: dev})
}

// overlaps: host memory that intersects, or the same device storage (a device tensor is
// one buffer: two tensors on one are the same tensor).
func (a span) overlaps(b span) bool {
	if a.dev != nil || b.dev != nil {
		return a.dev == b.dev
	}
	return a.lo < b.hi && b.lo < a.hi
}

// checkOverlap refuses an output that shares memory with any input, weight or earlier
// output: the kernels read inputs while they write outputs, so shared memory gives wrong
// results or corrupts a bound weight for every later call. Exact aliasing (in place) is
// refused too: no kernel is specified to work in place. The outputs come first in spans,
// then the inputs and weights; a zero span (absent) overlaps nothing. Host memory and device
// tensors alike (one device tensor given twice) are refused here, before any backend, so
// every backend gives the same error.
func checkOverlap(op string, names []string, spans []span, nOut int) error {
	for i := range nOut {
		for j := nOut; j < len(spans); j++ {
			if spans[i].overlaps(spans[j]) {
				return overlapErr(op, names[i], names[j])
			}
		}
		for j := range i {
			if spans[i].overlaps(spans[j]) {
				return overlapErr(op, names[i], names[j])
			}
		}
	}
	return nil
}

func overlapErr(op, out, other string) error {
	return argErr(op, out, "%s overlaps %s in memory; an output must not share memory with an input, a weight or another output", out, other)
}

// checkDevices refuses a device tensor that the engine cannot use: one of another engine
// (open or closed), or one closed before the call (the *ArgError then wraps ErrClosed too).
// names[i] names ts[i]. Every backend's calls pass here before they reach the backend, so
// each answers alike: the CPU's device tensors are host memory it could otherwise go on
// using after their Close.
func (e *Engine) checkDevices(op string, names []string, ts []*Tensor) error {
	for i, t := range ts {
		d := t.dev
		if d == nil {
			if t.buf.Dev != nil { // storage with no DeviceTensor: not of this engine
				return argErr(op, names[i], "%s is a device tensor of another engine", names[i])
			}
			continue
		}
		if d.eng != e {
			return argErr(op, names[i], "%s is a device tensor of another engine", names[i])
		}
		if d.closed.Load() {
			return &ArgError{Op: op, Tensor: names[i], Rule: names[i] + " is a device tensor closed before the call", Err: ErrClosed}
		}
	}
	return nil
}

// checkOpen is checkDevices' second half alone, for a call whose tensors were found to be
// the engine's before: a prepared op's remembered call (callmemo.go).
func checkOpen(op string, names []string, ts []*Tensor) error {
	for i, t := range ts {
		if d := t.dev; d != nil && d.closed.Load() {
			return &ArgError{Op: op, Tensor: names[i], Rule: names[i] + " is a device tensor closed before the call", Err: ErrClosed}
		}
	}
	return nil
}
