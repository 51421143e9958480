//go:build cgo

package dawnrt

/*
#include <stdlib.h>
#include "../../cgo/dawnrt.h"
*/
import "C"

import (
	"context"
	"fmt"
	"math/bits"
	"unsafe"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// Usage is a set of WebGPU buffer usages (the values, from dawn.json, in zdawn_gen.go).
type Usage uint64

// Buffer is a device buffer. Release it when done; the device's Close releases what is left.
type Buffer struct {
	d     *Device
	c     C.WGPUBuffer // nil once released
	size  uint64
	label string
}

// Size is the buffer's size in bytes (a multiple of 4).
func (b *Buffer) Size() uint64 { return b.size }

// NewBuffer creates a zeroed buffer of size bytes rounded up to a multiple of 4 (at least 4:
// a binding may not be empty).
func (d *Device) NewBuffer(label string, size uint64, usage Usage) (*Buffer, error) {
	if err := d.lock(context.Background()); err != nil {
		return nil, err
	}
	defer d.unlock()
	return d.newBuffer(label, size, usage)
}

// newBuffer is NewBuffer under the lock.
func (d *Device) newBuffer(label string, size uint64, usage Usage) (*Buffer, error) {
	const method = "NewBuffer"
	size = max((size+3)&^3, 4)
	if size > d.limits.MaxBufferSize {
		return nil, fmt.Errorf("dawn: %s: %s: %d bytes over the device's maxBufferSize %d: %w",
			method, label, size, d.limits.MaxBufferSize, ops.ErrNotSupported)
	}
	if err := d.usable(method); err != nil {
		return nil, err
	}
	if err := fault(d.faults, "create-buffer"); err != nil {
		return nil, fmt.Errorf("dawn: %s: %w: %w", method, ops.ErrDevice, err)
	}
	cl := C.CString(label)
	defer C.free(unsafe.Pointer(cl))
	var cb C.WGPUBuffer
	if rc := C.drt_create_buffer(d.c, cl, C.uint64_t(size), C.uint64_t(usage), &cb, d.errbuf, errCap); rc != C.DRT_OK {
		return nil, d.failure(method, rc)
	}
	buf := &Buffer{d: d, c: cb, size: size, label: label}
	d.buffers[buf] = struct{}{}
	return buf, nil
}

// releaseLocked is Release for a caller that holds the lock.
func (d *Device) releaseLocked(b *Buffer) {
	if b == nil || b.c == nil || d.closed {
		return
	}
	d.x.forget(b)
	C.drt_buffer_release(d.c, b.c)
	b.c = nil
	delete(d.buffers, b)
}

// Release releases the buffer; work already recorded or submitted that uses it still
// completes (the command encoder holds its own reference). A no-op on a released buffer
// and after the device's Close.
func (b *Buffer) Release() {
	if b == nil || b.d == nil {
		return
	}
	d := b.d
	_ = d.lock(context.Background())
	defer d.unlock()
	d.releaseLocked(b)
}

// Released reports whether the buffer was released (or its device closed).
func (b *Buffer) Released() bool {
	d := b.d
	_ = d.lock(context.Background())
	defer d.unlock()
	return b.c == nil
}

// LiveBuffers counts the device buffers alive now (the executor's scratch among them): the
// Engine reports it as device memory in use.
func (d *Device) LiveBuffers() (n int, bytes uint64) {
	if err := d.lock(context.Background()); err != nil {
		return 0, 0
	}
	defer d.unlock()
	for b := range d.buffers {
		n++
		bytes += b.size
	}
	return n, bytes
}

// stagingClass is the pooled size for a read-back of n bytes: a power of two, at least 256.
func stagingClass(n uint64) uint64 {
	if n <= 256 {
		return 256
	}
	return 1 << bits.Len64(n-1)
}

// maxPooledPerClass bounds the idle staging buffers kept per size class.
const maxPooledPerClass = 16

// getStaging takes a MapRead staging buffer of at least n bytes from the pool or makes one.
// Under the lock.
func (d *Device) getStaging(method string, n uint64) (C.WGPUBuffer, uint64, error) {
	class := stagingClass(n)
	if list := d.staging[class]; len(list) > 0 {
		s := list[len(list)-1]
		d.staging[class] = list[:len(list)-1]
		return s, class, nil
	}
	if class > d.limits.MaxBufferSize {
		class = (n + 3) &^ 3
	}
	var s C.WGPUBuffer
	cl := C.CString("fusednorm staging")
	defer C.free(unsafe.Pointer(cl))
	if rc := C.drt_create_buffer(d.c, cl, C.uint64_t(class), C.uint64_t(UsageMapRead|UsageCopyDst), &s, d.errbuf, errCap); rc != C.DRT_OK {
		return nil, 0, d.failure(method, rc)
	}
	return s, class, nil
}

// putStaging returns an unmapped staging buffer to the pool. Under the lock.
func (d *Device) putStaging(s C.WGPUBuffer, class uint64) {
	if d.staging == nil || len(d.staging[class]) >= maxPooledPerClass {
		C.drt_buffer_release(d.c, s)
		return
	}
	d.staging[class] = append(d.staging[class], s)
}

// timing is one set of timestamp-query objects, pooled per device.
type timing struct {
	c C.drt_timing
}

func (t *timing) release(d *Device) {
	C.drt_query_set_release(d.c, t.c.query_set)
	C.drt_buffer_release(d.c, t.c.resolve)
	C.drt_buffer_release(d.c, t.c.staging)
}

// getTiming takes a timestamp set from the pool or makes one; under the lock.
func (d *Device) getTiming(method string) (*timing, error) {
	if !d.HasFeature("TimestampQuery") {
		return nil, fmt.Errorf("dawn: %s: the adapter has no TimestampQuery: %w", method, ops.ErrNotSupported)
	}
	if n := len(d.timings); n > 0 {
		t := d.timings[n-1]
		d.timings = d.timings[:n-1]
		t.c.repeat = 0
		return t, nil
	}
	t := &timing{}
	if rc := C.drt_create_query_set(d.c, 2, &t.c.query_set, d.errbuf, errCap); rc != C.DRT_OK {
		return nil, d.failure(method, rc)
	}
	cl := C.CString("fusednorm timestamps")
	defer C.free(unsafe.Pointer(cl))
	if rc := C.drt_create_buffer(d.c, cl, 256, C.uint64_t(UsageQueryResolve|UsageCopySrc), &t.c.resolve, d.errbuf, errCap); rc != C.DRT_OK {
		t.release(d)
		return nil, d.failure(method, rc)
	}
	if rc := C.drt_create_buffer(d.c, cl, 256, C.uint64_t(UsageMapRead|UsageCopyDst), &t.c.staging, d.errbuf, errCap); rc != C.DRT_OK {
		t.release(d)
		return nil, d.failure(method, rc)
	}
	return t, nil
}

// align4 rounds a byte count up to a whole number of u32 words.
func align4(n uint64) uint64 { return (n + 3) &^ 3 }
