package fusednorm

import (
	"fmt"
	"math"
	"runtime/debug"
	"slices"
	"sync"
	"unsafe"

	"github.com/fusednorm/fusednorm/internal/ops"
)

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
