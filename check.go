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
		return ops.Buf{}, argErr(op, name, "%s must be %v, got %v", name, dt, t.DType())
	}
	if !sameShape(t.shape, shape) {
		return ops.Buf{}, argErr(op, name, "%s must have shape %v, got %v", name, slices.Clone(shape), t.shape)
	}
	return t.buf, nil
}

// span is the memory a tensor's data occupies, [lo, hi); empty for an absent or empty
// tensor.
type span struct{ lo, hi uintptr }

func spanOf(b ops.Buf) span {
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
	return span{uintptr(p), uintptr(p) + n}
}

func spanI32(s []int32) span { return spanOf(ops.Buf{DType: ops.I32, I32: s}) }

func (a span) overlaps(b span) bool { return a.lo < b.hi && b.lo < a.hi }

// checkOverlap refuses an output that shares memory with any input, weight or earlier
// output: the kernels read inputs while they write outputs, so shared memory gives wrong
// results or corrupts a bound weight for every later call. Exact aliasing (in place) is
// refused too: no kernel is specified to work in place. The outputs come first in spans,
// then the inputs and weights; a zero span (absent) overlaps nothing.
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
