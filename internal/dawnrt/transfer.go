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
	"runtime"
	"sync"
	"time"
	"unsafe"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// Transfers at PCIe speed (issue 13 item 3).
//
// An upload or read-back of at least xferMin bytes goes through a ring of staging buffers the
// device keeps for its life: xferSlots MapWrite|CopySrc buffers for uploads and xferSlots
// MapRead|CopyDst buffers for read-backs, xferChunk bytes each (made on first use, released
// by Close, so a recovery, which closes the lost device, drops them too). The data moves in
// chunks of xferChunk bytes:
//
//   - upload: wait for the slot's map (queued after its last copy), copy the chunk into the
//     mapped range on several goroutines, unmap, submit a copy into the destination, queue
//     the map again. The CPU fills chunk i+1 while the GPU copies chunk i, and a call's
//     dispatch, submitted after, is ordered behind the copies by the queue.
//   - read-back: submit the copies of the first xferSlots chunks, each followed by a map;
//     then for each chunk wait for its map, copy out on several goroutines, unmap, and submit
//     the copy of the chunk xferSlots further on.
//
// Smaller transfers keep the simple path (a queue write; a read-back into a pooled staging
// buffer of the whole size, copied out on several goroutines), whose fixed costs are lower;
// a read-back of one chunk or less too (useRingRead). The whole transfer runs under the
// device lock, so the ring has one user at a time and Close cannot release it mid-copy.
const (
	// Four staging buffers of 64 MiB a direction, copied on up to 16 goroutines: of chunks
	// of 16 and 64 MiB, 4 and 8 buffers, 8 and 16 goroutines, timed in one run on the H200
	// host, the fastest both ways.
	xferSlots        = 4
	xferChunkDefault = 64 << 20
	xferMinDefault   = 4 << 20
	// copyPart is the smallest part of a chunk one goroutine copies.
	copyPart   = 1 << 20
	maxCopiers = 16
	// xferWaitMax bounds one wait for a staging map; past it the transfer fails.
	xferWaitMax = 60 * time.Second
)

type xferSlot struct {
	buf     C.WGPUBuffer
	pending bool // a map of buf is in flight, its future in the slot's wait
}

// xferC is the ring's C memory: the waits (callbacks write their status into them) and the
// argument structs of the C calls.
type xferC struct {
	up, down [xferSlots]C.drt_wait
	cp       C.drt_copy
	rd       C.drt_read
	call     C.drt_call
	m        C.drt_map
}

type xferRing struct {
	chunk, min uint64
	up, down   [xferSlots]xferSlot
	c          *xferC
	copiers    int
	work       chan copyJob
	wg         sync.WaitGroup
}

type copyJob struct {
	dst, src unsafe.Pointer
	n        int
}

// ring returns the device's transfer ring, making its host side on first use; under the lock.
func (d *Device) ring() *xferRing {
	if d.xfer == nil {
		r := &xferRing{chunk: xferChunkDefault, min: xferMinDefault}
		r.c = (*xferC)(C.calloc(1, C.size_t(unsafe.Sizeof(xferC{}))))
		r.startCopiers(min(runtime.GOMAXPROCS(0), maxCopiers) - 1)
		d.xfer = r
	}
	return d.xfer
}

// startCopiers starts n copier goroutines (none for n ≤ 0).
func (r *xferRing) startCopiers(n int) {
	r.copiers = max(n, 0)
	if r.copiers > 0 {
		r.work = make(chan copyJob, r.copiers)
		for i := 0; i < r.copiers; i++ {
			go r.copier(r.work)
		}
	}
}

// setTransfer sets the ring's chunk size (a multiple of 256) and the smallest transfer that
// uses it; for tests and the benchmark. It releases the ring's buffers.
func (d *Device) setTransfer(chunk, minBytes uint64) {
	_ = d.lock(context.Background())
	defer d.unlock()
	if d.closed {
		return
	}
	r := d.ring()
	r.releaseBuffers(d)
	r.chunk, r.min = chunk, minBytes
}

func (r *xferRing) copier(work <-chan copyJob) {
	for j := range work {
		copy(unsafe.Slice((*byte)(j.dst), j.n), unsafe.Slice((*byte)(j.src), j.n))
		r.wg.Done()
	}
}

// copy copies n bytes from src to dst, split across the copier goroutines.
func (r *xferRing) copy(dst, src unsafe.Pointer, n int) {
	parts := min(r.copiers+1, n/copyPart)
	if parts <= 1 {
		copy(unsafe.Slice((*byte)(dst), n), unsafe.Slice((*byte)(src), n))
		return
	}
	step := (n/parts + 63) &^ 63
	off := 0
	r.wg.Add(parts - 1)
	for i := 0; i < parts-1; i++ {
		r.work <- copyJob{dst: unsafe.Add(dst, off), src: unsafe.Add(src, off), n: step}
		off += step
	}
	copy(unsafe.Slice((*byte)(unsafe.Add(dst, off)), n-off), unsafe.Slice((*byte)(unsafe.Add(src, off)), n-off))
	r.wg.Wait()
}

// releaseBuffers releases the staging buffers (a pending map is cancelled by the release);
// under the lock, with the device open.
func (r *xferRing) releaseBuffers(d *Device) {
	for _, s := range []*[xferSlots]xferSlot{&r.up, &r.down} {
		for i := range s {
			if s[i].buf != nil {
				C.drt_buffer_release(d.c, s[i].buf)
			}
			s[i] = xferSlot{}
		}
	}
}

// releaseXfer releases the ring's buffers and stops its copiers; Close calls it under the
// lock before the device goes. The C memory waits for freeXfer.
func (d *Device) releaseXfer() {
	if d.xfer == nil {
		return
	}
	d.xfer.releaseBuffers(d)
	if d.xfer.work != nil {
		close(d.xfer.work)
		d.xfer.work = nil
	}
}

// freeXfer frees the ring's C memory once the instance is gone (no callback can write it).
func (d *Device) freeXfer() {
	if d.xfer == nil {
		return
	}
	C.free(unsafe.Pointer(d.xfer.c))
	d.xfer = nil
}

// useRing reports whether an upload of n bytes goes through the ring; under the lock.
func (d *Device) useRing(n uint64) bool {
	return n >= d.ring().min
}

// useRingRead reports whether a read-back of n bytes goes through the ring: one of a chunk or
// less gains no overlap there and costs a round trip more than a copy in the call's own
// submit (into a pooled staging buffer, copied out on several goroutines). Under the lock.
func (d *Device) useRingRead(n uint64) bool {
	r := d.ring()
	return n >= r.min && n > r.chunk
}

// waitMap waits for the map in w; under the lock.
func (d *Device) waitMap(method string, w *C.drt_wait) error {
	deadline := time.Now().Add(xferWaitMax)
	for {
		rc := C.drt_wait_all(d.c, w, C.uint64_t(waitSlice.Nanoseconds()), d.errbuf, errCap)
		if rc == C.DRT_OK {
			break
		}
		if rc != C.DRT_ETIMEOUT {
			return d.failure(method, rc)
		}
		if err := d.usable(method); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("dawn: %s: %w: a staging map did not complete in %v", method, ops.ErrDevice, xferWaitMax)
		}
	}
	if rc := C.drt_wait_error(w, d.errbuf, errCap); rc != C.DRT_OK {
		return d.failure(method, rc)
	}
	return nil
}

// slot returns slot i of a direction with its buffer mapped (write for uploads) and ready;
// under the lock.
func (d *Device) xferSlot(method string, up bool, i int) (*xferSlot, error) {
	r := d.xfer
	s, w, usage, write := &r.down[i], &r.c.down[i], UsageMapRead|UsageCopyDst, C.int(0)
	if up {
		s, w, usage, write = &r.up[i], &r.c.up[i], UsageMapWrite|UsageCopySrc, 1
	}
	if s.buf == nil {
		cl := C.CString("fusednorm transfer")
		defer C.free(unsafe.Pointer(cl))
		if rc := C.drt_create_buffer(d.c, cl, C.uint64_t(r.chunk), C.uint64_t(usage), &s.buf, d.errbuf, errCap); rc != C.DRT_OK {
			s.buf = nil
			return nil, d.failure(method, rc)
		}
		if up { // a fresh upload buffer is mapped here; a read-back one by its first copy
			r.c.m = C.drt_map{buf: s.buf, size: C.uint64_t(r.chunk), write: write}
			if rc := C.drt_flush(d.c, nil, &r.c.m, 1, w, d.errbuf, errCap); rc != C.DRT_OK {
				return nil, d.failure(method, rc)
			}
			s.pending = true
		}
	}
	if up && s.pending {
		s.pending = false
		if err := d.waitMap(method, w); err != nil {
			r.releaseBuffers(d) // a slot in an unknown state is not reused
			return nil, err
		}
	}
	return s, nil
}

// uploadLocked writes data into dst at off (a multiple of 4) through the ring; a tail that is
// not a whole word is padded with zeros. Under the lock.
func (d *Device) uploadLocked(method string, dst *Buffer, off uint64, data []byte) error {
	r := d.ring()
	n := uint64(len(data))
	for done, i := uint64(0), 0; done < n; done, i = done+r.chunk, (i+1)%xferSlots {
		l := min(r.chunk, n-done)
		s, err := d.xferSlot(method, true, i)
		if err != nil {
			return err
		}
		p := C.drt_mapped(d.c, s.buf, 1, C.uint64_t(r.chunk))
		if p == nil {
			r.releaseBuffers(d)
			return fmt.Errorf("dawn: %s: %w: upload staging not mapped", method, ops.ErrDevice)
		}
		r.copy(p, unsafe.Pointer(&data[done]), int(l))
		words := align4(l)
		for j := l; j < words; j++ {
			*(*byte)(unsafe.Add(p, j)) = 0
		}
		C.drt_unmap(d.c, s.buf)
		r.c.cp = C.drt_copy{src: s.buf, dst: dst.c, dst_offset: C.uint64_t(off + done), size: C.uint64_t(words)}
		r.c.call = C.drt_call{copies: &r.c.cp, npre: 1}
		r.c.m = C.drt_map{buf: s.buf, size: C.uint64_t(r.chunk), write: 1}
		if rc := C.drt_record(d.c, &r.c.call, d.errbuf, errCap); rc != C.DRT_OK {
			r.releaseBuffers(d)
			return d.failure(method, rc)
		}
		if rc := C.drt_flush(d.c, nil, &r.c.m, 1, &r.c.up[i], d.errbuf, errCap); rc != C.DRT_OK {
			r.releaseBuffers(d)
			return d.failure(method, rc)
		}
		s.pending = true
	}
	return d.uncapturedError(method)
}

// downloadLocked copies len(dst) bytes of src from off (a multiple of 4) into dst through the
// ring, after the work queued so far. Under the lock.
func (d *Device) downloadLocked(method string, src *Buffer, off uint64, dst []byte) error {
	if src.c == nil {
		return fmt.Errorf("dawn: %s: readback: buffer %s released: %w", method, src.label, ops.ErrInvalidArgument)
	}
	r := d.ring()
	n := uint64(len(dst))
	chunks := int((n + r.chunk - 1) / r.chunk)
	issue := func(c int) error {
		i := c % xferSlots
		s, err := d.xferSlot(method, false, i)
		if err != nil {
			return err
		}
		at := uint64(c) * r.chunk
		words := align4(min(r.chunk, n-at))
		r.c.rd = C.drt_read{src: src.c, src_offset: C.uint64_t(off + at), staging: s.buf, size: C.uint64_t(words)}
		r.c.call = C.drt_call{reads: &r.c.rd, nreads: 1}
		r.c.m = C.drt_map{buf: s.buf, size: C.uint64_t(words)}
		if rc := C.drt_record(d.c, &r.c.call, d.errbuf, errCap); rc != C.DRT_OK {
			return d.failure(method, rc)
		}
		if rc := C.drt_flush(d.c, nil, &r.c.m, 1, &r.c.down[i], d.errbuf, errCap); rc != C.DRT_OK {
			return d.failure(method, rc)
		}
		s.pending = true
		return nil
	}
	fail := func(err error) error {
		r.releaseBuffers(d) // drops the maps still in flight with the buffers
		return err
	}
	for c := 0; c < min(chunks, xferSlots); c++ {
		if err := issue(c); err != nil {
			return fail(err)
		}
	}
	for c := 0; c < chunks; c++ {
		i := c % xferSlots
		s := &r.down[i]
		s.pending = false
		if err := d.waitMap(method, &r.c.down[i]); err != nil {
			return fail(err)
		}
		at := uint64(c) * r.chunk
		l := min(r.chunk, n-at)
		p := C.drt_mapped(d.c, s.buf, 0, C.uint64_t(align4(l)))
		if p == nil {
			return fail(fmt.Errorf("dawn: %s: %w: read-back staging not mapped", method, ops.ErrDevice))
		}
		r.copy(unsafe.Pointer(&dst[at]), p, int(l))
		C.drt_unmap(d.c, s.buf)
		if c+xferSlots < chunks {
			if err := issue(c + xferSlots); err != nil {
				return fail(err)
			}
		}
	}
	return d.uncapturedError(method)
}

// copyMapped copies len(dst) bytes from the start of a mapped read staging buffer into dst,
// on several goroutines when large; under the lock.
func (d *Device) copyMapped(method string, staging C.WGPUBuffer, dst []byte) error {
	if len(dst) < copyPart*2 {
		if rc := C.drt_copy_mapped(d.c, staging, unsafe.Pointer(&dst[0]), C.size_t(len(dst)), d.errbuf, errCap); rc != C.DRT_OK {
			return d.failure(method, rc)
		}
		return nil
	}
	p := C.drt_mapped(d.c, staging, 0, C.uint64_t(align4(uint64(len(dst)))))
	if p == nil {
		return fmt.Errorf("dawn: %s: %w: readback: no mapped range", method, ops.ErrDevice)
	}
	d.ring().copy(unsafe.Pointer(&dst[0]), p, len(dst))
	return nil
}
