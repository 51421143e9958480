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
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// binding binds a buffer range at @group(0) @binding(Binding). Size 0 means the whole buffer
// from Offset.
type binding struct {
	Binding      uint32
	Buffer       *buffer
	Offset, Size uint64
}

// readback copies len(Dst) bytes of Src from Offset (a multiple of 4) into Dst after the
// dispatch. The copy on the device is rounded up to 4 bytes.
type readback struct {
	Src    *buffer
	Offset uint64
	Dst    []byte
}

// waitSlice is how long one wait holds the device lock; between slices other goroutines
// submit and ctx is checked. A wait returns as soon as the GPU is done, so this adds no latency.
const waitSlice = 2 * time.Millisecond

// reapOnClose bounds how long Close waits for dispatches whose callers gave up.
const reapOnClose = 5 * time.Second

// inflight is one submitted dispatch. The device's inflight set owns it: a caller that stops
// waiting marks it abandoned and never touches it again; the next call under the lock (or
// Close) recycles its staging buffers once the GPU is done with them.
type inflight struct {
	t         *C.drt_ticket
	staging   []C.WGPUBuffer
	classes   []uint64
	timing    *timing
	abandoned atomic.Bool
}

func (f *inflight) freeTicket() {
	C.drt_ticket_free(f.t)
	f.t = nil
}

// timing is one set of timestamp-query objects, pooled per device.
type timing struct {
	c C.drt_timing
}

func (t *timing) release(d *device) {
	C.drt_query_set_release(d.c, t.c.query_set)
	C.drt_buffer_release(d.c, t.c.resolve)
	C.drt_buffer_release(d.c, t.c.staging)
}

// run encodes one compute pass that dispatches groups workgroups of p with binds in bind
// group 0, copies each readback region to pooled staging buffers, submits, waits (honouring
// ctx) and copies the results into each Dst. Everything Dawn can reject runs inside error
// scopes.
func (d *device) run(ctx context.Context, p *pipeline, binds []binding, groups [3]uint32, reads []readback) error {
	_, err := d.dispatch(ctx, "(*device).run", p, binds, groups, reads, false)
	return err
}

// runTimed is run that also returns the GPU time of the compute pass, measured with
// timestamp queries written at the pass's beginning and end. It needs the TimestampQuery
// feature (see hasFeature) and returns ops.ErrNotSupported without it. The time covers the
// pass only, not the readback copies or the round trip.
func (d *device) runTimed(ctx context.Context, p *pipeline, binds []binding, groups [3]uint32, reads []readback) (time.Duration, error) {
	if !d.hasFeature("TimestampQuery") {
		return 0, fmt.Errorf("dawn: (*device).runTimed: the adapter has no TimestampQuery: %w", ops.ErrNotSupported)
	}
	return d.dispatch(ctx, "(*device).runTimed", p, binds, groups, reads, true)
}

func (d *device) dispatch(ctx context.Context, method string, p *pipeline, binds []binding, groups [3]uint32,
	reads []readback, timed bool) (time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("dawn: %s: %w", method, err)
	}
	if p == nil {
		return 0, fmt.Errorf("dawn: %s: nil pipeline: %w", method, ops.ErrInvalidArgument)
	}
	for i, g := range groups {
		if g > d.limits.MaxComputeWorkgroupsPerDimension {
			return 0, fmt.Errorf("dawn: %s: %s: %d workgroups in dimension %d, over the device's %d: %w",
				method, p.key, g, i, d.limits.MaxComputeWorkgroupsPerDimension, ops.ErrNotSupported)
		}
	}
	cbinds := make([]C.drt_binding, len(binds))
	for i, b := range binds {
		if b.Buffer == nil {
			return 0, fmt.Errorf("dawn: %s: %s: binding %d: nil buffer: %w", method, p.key, b.Binding, ops.ErrInvalidArgument)
		}
		size := b.Size
		if b.Offset > b.Buffer.size {
			return 0, fmt.Errorf("dawn: %s: %s: binding %d: offset %d past the %d-byte buffer %s: %w",
				method, p.key, b.Binding, b.Offset, b.Buffer.size, b.Buffer.label, ops.ErrInvalidArgument)
		}
		if size == 0 {
			size = b.Buffer.size - b.Offset
		}
		if size > d.limits.MaxStorageBufferBindingSize {
			return 0, fmt.Errorf("dawn: %s: %s: binding %d: %d bytes over the device's maxStorageBufferBindingSize %d: %w",
				method, p.key, b.Binding, size, d.limits.MaxStorageBufferBindingSize, ops.ErrNotSupported)
		}
		cbinds[i] = C.drt_binding{binding: C.uint32_t(b.Binding), offset: C.uint64_t(b.Offset), size: C.uint64_t(size)}
	}
	creads := make([]C.drt_read, len(reads))
	for i, r := range reads {
		n := (uint64(len(r.Dst)) + 3) &^ 3
		if r.Src == nil || r.Offset%4 != 0 || r.Offset > r.Src.size || n > r.Src.size-r.Offset || n == 0 {
			return 0, fmt.Errorf("dawn: %s: %s: readback %d: want a non-empty range at a multiple of 4 inside the source: %w",
				method, p.key, i, ops.ErrInvalidArgument)
		}
		creads[i] = C.drt_read{src_offset: C.uint64_t(r.Offset), size: C.uint64_t(n)}
	}

	if err := d.lock(ctx); err != nil {
		return 0, fmt.Errorf("dawn: %s: %w", method, err)
	}
	// Large read-backs go through the transfer ring once the dispatch is done (transfer.go).
	var big []readback
	if !d.closed {
		for _, r := range reads {
			if d.useRingRead(uint64(len(r.Dst))) {
				big = append(big, r)
			}
		}
	}
	if big != nil {
		small, smallC := make([]readback, 0, len(reads)), make([]C.drt_read, 0, len(reads))
		for i, r := range reads {
			if !d.useRingRead(uint64(len(r.Dst))) {
				small, smallC = append(small, r), append(smallC, creads[i])
			}
		}
		reads, creads = small, smallC
	}
	f, err := d.submit(method, p, binds, cbinds, groups, reads, creads, timed)
	if err == nil && d.inject != nil {
		if cause := injected(d.inject, "lose"); cause != nil {
			d.forceLoss(cause) // the dispatch is in flight: waiting for it reports the loss
		}
	}
	d.unlock()
	if err != nil {
		return 0, err
	}

	for {
		if err := d.lock(ctx); err != nil {
			f.abandoned.Store(true)
			return 0, fmt.Errorf("dawn: %s: %w", method, err)
		}
		if d.closed {
			d.unlock()
			return 0, fmt.Errorf("dawn: %s: %w", method, ops.ErrClosed)
		}
		slice := waitSlice
		if dl, ok := ctx.Deadline(); ok {
			if left := time.Until(dl); left < slice {
				slice = max(left, 0)
			}
		}
		rc := C.drt_ticket_wait(d.c, f.t, C.uint64_t(slice.Nanoseconds()), d.errbuf, errCap)
		if rc == C.DRT_OK {
			break
		}
		if rc != C.DRT_ETIMEOUT {
			err := d.failure(method, rc)
			f.abandoned.Store(true) // the next reap retries the wait and frees it
			d.unlock()
			return 0, err
		}
		if err := ctx.Err(); err != nil {
			f.abandoned.Store(true)
			d.unlock()
			return 0, fmt.Errorf("dawn: %s: %w", method, err)
		}
		d.unlock()
	}
	defer d.unlock()
	dur, err := d.finish(method, f, reads)
	for _, r := range big {
		if err != nil {
			break
		}
		err = d.downloadLocked(method, r.Src, r.Offset, r.Dst)
	}
	return dur, err
}

// submit acquires staging, encodes and submits; under the lock.
func (d *device) submit(method string, p *pipeline, binds []binding, cbinds []C.drt_binding, groups [3]uint32,
	reads []readback, creads []C.drt_read, timed bool) (*inflight, error) {
	if err := d.usable(method); err != nil {
		return nil, err
	}
	d.reap(0)
	for i, b := range binds {
		if b.Buffer.c == nil {
			return nil, fmt.Errorf("dawn: %s: %s: binding %d: buffer %s released: %w", method, p.key, b.Binding, b.Buffer.label, ops.ErrInvalidArgument)
		}
		cbinds[i].buffer = b.Buffer.c
	}
	for i, r := range reads {
		if r.Src.c == nil {
			return nil, fmt.Errorf("dawn: %s: %s: readback %d: buffer %s released: %w", method, p.key, i, r.Src.label, ops.ErrInvalidArgument)
		}
		creads[i].src = r.Src.c
	}
	if err := injected(d.inject, "submit"); err != nil {
		return nil, fmt.Errorf("dawn: %s: %s: %w: %w", method, p.key, ops.ErrDevice, err)
	}
	f := &inflight{}
	giveBack := func() {
		for i, s := range f.staging {
			d.putStaging(s, f.classes[i])
		}
		if f.timing != nil {
			d.timings = append(d.timings, f.timing)
		}
	}
	for i := range creads {
		s, class, err := d.getStaging(method, uint64(creads[i].size))
		if err != nil {
			giveBack()
			return nil, err
		}
		creads[i].staging = s
		f.staging = append(f.staging, s)
		f.classes = append(f.classes, class)
	}
	var ctiming *C.drt_timing
	if timed {
		t, err := d.getTiming(method)
		if err != nil {
			giveBack()
			return nil, err
		}
		f.timing = t
		ctiming = &t.c
	}
	f.t = C.drt_ticket_new(C.int(len(creads)))
	if f.t == nil {
		giveBack()
		return nil, fmt.Errorf("dawn: %s: %w: out of host memory", method, ops.ErrDevice)
	}
	var bp *C.drt_binding
	if len(cbinds) > 0 {
		bp = &cbinds[0]
	}
	var rp *C.drt_read
	if len(creads) > 0 {
		rp = &creads[0]
	}
	// The Go slices hold only C handles and integers, and C reads them during the call only.
	rc := C.drt_submit(d.c, f.t, p.c, p.bgl, bp, C.int(len(cbinds)),
		C.uint32_t(groups[0]), C.uint32_t(groups[1]), C.uint32_t(groups[2]), rp, ctiming, d.errbuf, errCap)
	if rc != C.DRT_OK {
		f.freeTicket()
		giveBack()
		return nil, d.failure(method, rc)
	}
	if d.inflight == nil {
		d.inflight = map[*inflight]struct{}{}
	}
	d.inflight[f] = struct{}{}
	return f, nil
}

// finish checks a completed dispatch and copies its results out; under the lock.
func (d *device) finish(method string, f *inflight, reads []readback) (time.Duration, error) {
	delete(d.inflight, f)
	defer d.recycle(f)
	if d.lost() { // whatever the dispatch's own status, its results are not to be trusted
		return 0, d.lossError(method)
	}
	if rc := C.drt_ticket_error(f.t, d.errbuf, errCap); rc != C.DRT_OK {
		return 0, d.failure(method, rc)
	}
	if err := d.uncapturedError(method); err != nil {
		return 0, err
	}
	if err := injected(d.inject, "map"); err != nil {
		return 0, fmt.Errorf("dawn: %s: %w: %w", method, ops.ErrDevice, err)
	}
	for i, r := range reads {
		if err := d.copyMapped(method, f.staging[i], r.Dst); err != nil {
			return 0, err
		}
	}
	if f.timing == nil {
		return 0, nil
	}
	var begin, end C.uint64_t
	rc := C.drt_read_timestamps(d.c, &f.timing.c, &begin, &end, d.errbuf, errCap)
	if rc != C.DRT_OK {
		return 0, d.failure(method, rc)
	}
	if end < begin {
		return 0, nil
	}
	return time.Duration(end - begin), nil
}

// recycle unmaps a completed dispatch's staging buffers and returns them to the pools.
func (d *device) recycle(f *inflight) {
	for i, s := range f.staging {
		C.drt_unmap(d.c, s)
		d.putStaging(s, f.classes[i])
	}
	f.staging = nil
	if f.timing != nil {
		C.drt_unmap(d.c, f.timing.c.staging)
		d.timings = append(d.timings, f.timing)
		f.timing = nil
	}
	f.freeTicket()
}

// reap recycles abandoned dispatches the GPU has finished, waiting up to wait in all. With
// the device closing (wait > 0 and called from Close) every dispatch counts as abandoned,
// and the buffers of those still pending are released, their tickets freed after the
// device is gone. Under the lock.
func (d *device) reap(wait time.Duration) {
	closing := wait > 0
	deadline := time.Now().Add(wait)
	for f := range d.inflight {
		if !closing && !f.abandoned.Load() {
			continue
		}
		timeout := time.Duration(0)
		if closing {
			timeout = max(time.Until(deadline), 0)
		}
		if C.drt_ticket_wait(d.c, f.t, C.uint64_t(timeout.Nanoseconds()), d.errbuf, errCap) == C.DRT_OK {
			delete(d.inflight, f)
			d.recycle(f)
			continue
		}
		if closing {
			for _, s := range f.staging {
				C.drt_buffer_release(d.c, s)
			}
			f.staging = nil
			if f.timing != nil {
				f.timing.release(d)
				f.timing = nil
			}
		}
	}
}

// getTiming takes a timestamp set from the pool or makes one; under the lock.
func (d *device) getTiming(method string) (*timing, error) {
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
	if rc := C.drt_create_buffer(d.c, cl, 256, C.uint64_t(usageQueryResolve|usageCopySrc), &t.c.resolve, d.errbuf, errCap); rc != C.DRT_OK {
		t.release(d)
		return nil, d.failure(method, rc)
	}
	if rc := C.drt_create_buffer(d.c, cl, 256, C.uint64_t(usageMapRead|usageCopyDst), &t.c.staging, d.errbuf, errCap); rc != C.DRT_OK {
		t.release(d)
		return nil, d.failure(method, rc)
	}
	return t, nil
}
