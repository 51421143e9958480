//go:build cgo

package dawn

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

// bufferUsage is a set of WebGPU buffer usages (values in zdawn_gen.go, from dawn.json).
type bufferUsage uint64

// buffer is a device buffer. release it when done; the device's close releases what is left.
type buffer struct {
	d     *device
	c     C.WGPUBuffer // nil once released
	size  uint64
	label string
}

// createBuffer creates a buffer of size bytes rounded up to a multiple of 4 (at least 4:
// a binding may not be empty).
func (d *device) createBuffer(label string, size uint64, usage bufferUsage) (*buffer, error) {
	if err := d.lock(context.Background()); err != nil {
		return nil, err
	}
	defer d.unlock()
	return d.createLocked(label, size, usage)
}

// createLocked is createBuffer for a caller that holds the lock.
func (d *device) createLocked(label string, size uint64, usage bufferUsage) (*buffer, error) {
	const method = "(*device).createBuffer"
	size = max((size+3)&^3, 4)
	if size > d.limits.MaxBufferSize {
		return nil, fmt.Errorf("dawn: %s: %s: %d bytes over the device's maxBufferSize %d: %w",
			method, label, size, d.limits.MaxBufferSize, ops.ErrNotSupported)
	}
	if err := d.usable(method); err != nil {
		return nil, err
	}
	if err := injected(d.inject, "create-buffer"); err != nil {
		return nil, fmt.Errorf("dawn: %s: %w: %w", method, ops.ErrDevice, err)
	}
	cl := C.CString(label)
	defer C.free(unsafe.Pointer(cl))
	var cb C.WGPUBuffer
	if rc := C.drt_create_buffer(d.c, cl, C.uint64_t(size), C.uint64_t(usage), &cb, d.errbuf, errCap); rc != C.DRT_OK {
		return nil, d.failure(method, rc)
	}
	buf := &buffer{d: d, c: cb, size: size, label: label}
	d.buffers[buf] = struct{}{}
	return buf, nil
}

// releaseLocked is buffer.release for a caller that holds the lock.
func (d *device) releaseLocked(b *buffer) {
	if b == nil || b.c == nil || d.closed {
		return
	}
	C.drt_buffer_release(d.c, b.c)
	b.c = nil
	delete(d.buffers, b)
}

// release releases the buffer; work already submitted that uses it still completes. It is a
// no-op on a released buffer or after the device's close.
func (b *buffer) release() {
	if b == nil || b.d == nil {
		return
	}
	d := b.d
	_ = d.lock(context.Background())
	defer d.unlock()
	d.releaseLocked(b)
}

// writeBuffer writes data into b at offset (a multiple of 4). A tail that is not a multiple
// of 4 bytes is padded with zeros, which overwrite the buffer up to the next multiple of 4.
func (d *device) writeBuffer(b *buffer, offset uint64, data []byte) error {
	const method = "(*device).writeBuffer"
	if b == nil {
		return fmt.Errorf("dawn: %s: nil buffer: %w", method, ops.ErrInvalidArgument)
	}
	n := uint64(len(data))
	if offset%4 != 0 || offset > b.size || (n+3)&^3 > b.size-offset {
		return fmt.Errorf("dawn: %s: %s: %d bytes at offset %d do not fit a %d-byte buffer at a multiple of 4: %w",
			method, b.label, n, offset, b.size, ops.ErrInvalidArgument)
	}
	if n == 0 {
		return nil
	}
	if err := d.lock(context.Background()); err != nil {
		return err
	}
	defer d.unlock()
	if err := d.usable(method); err != nil {
		return err
	}
	if b.c == nil {
		return fmt.Errorf("dawn: %s: %s: buffer released: %w", method, b.label, ops.ErrInvalidArgument)
	}
	if err := injected(d.inject, "write-buffer"); err != nil {
		return fmt.Errorf("dawn: %s: %w: %w", method, ops.ErrDevice, err)
	}
	if d.useRing(n) {
		return d.uploadLocked(method, b, offset, data)
	}
	// Dawn copies the bytes before the call returns, so the Go memory is only borrowed.
	if rc := C.drt_write_buffer(d.c, b.c, C.uint64_t(offset), unsafe.Pointer(&data[0]), C.size_t(n), d.errbuf, errCap); rc != C.DRT_OK {
		return d.failure(method, rc)
	}
	return nil
}

// stagingClass is the pooled size for a readback of n bytes: a power of two, at least 256.
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
func (d *device) getStaging(method string, n uint64) (C.WGPUBuffer, uint64, error) {
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
	if rc := C.drt_create_buffer(d.c, cl, C.uint64_t(class), C.uint64_t(usageMapRead|usageCopyDst), &s, d.errbuf, errCap); rc != C.DRT_OK {
		return nil, 0, d.failure(method, rc)
	}
	return s, class, nil
}

// putStaging returns an unmapped staging buffer to the pool. Under the lock.
func (d *device) putStaging(s C.WGPUBuffer, class uint64) {
	if d.staging == nil || len(d.staging[class]) >= maxPooledPerClass {
		C.drt_buffer_release(d.c, s)
		return
	}
	d.staging[class] = append(d.staging[class], s)
}
