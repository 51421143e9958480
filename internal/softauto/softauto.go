// Package softauto lets test code outside the root package (the conformance tests in tests/)
// open auto mode on a software adapter such as lavapipe, so that the router between the GPU
// path and the CPU runs on a machine without a GPU. Only tests set it.
package softauto

import "sync/atomic"

var keep atomic.Bool

// Keep makes Open in auto mode keep a software adapter (on) instead of taking the CPU (off,
// the default).
func Keep(on bool) { keep.Store(on) }

// Kept reports what Keep last set.
func Kept() bool { return keep.Load() }
