package fusednorm

import (
	"context"
	"fmt"
	"slices"
	"unsafe"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// checkCall is the first check of every entry point: ctx and the outputs must be given.
func checkCall(op string, ctx context.Context, noOutputs bool) error {
	if ctx == nil {
		return argErr(op, "ctx", "ctx must not be nil; pass context.Background()")
	}
	if noOutputs {
		return argErr(op, "outputs", "outputs must not be nil")
	}
	return nil
}

func argErr(op, tensor, format string, a ...any) error {
	return &ArgError{Op: op, Tensor: tensor, Rule: fmt.Sprintf(format, a...)}
}

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
