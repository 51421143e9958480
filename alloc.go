package fusednorm

import (
	"fmt"
	"math"
	"runtime/debug"
	"slices"
	"sync"
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
