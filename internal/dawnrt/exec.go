//go:build cgo

package dawnrt

/*
#include <stdlib.h>
#include "../../cgo/dawnrt.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// The executor: see the package documentation. Everything here runs under the device lock.

const (
	// ringSize bounds the submits whose error-scope verdicts are not yet collected.
	ringSize = 256
	// idSlots bounds the calls with device-resident ids whose range checks (spec §A.2a) are
	// not yet read; a call that would overflow it waits.
	idSlots = 256
	// cacheCap bounds the cached bind groups; past it the least recently used goes.
	cacheCap = 128
	// cacheScratchBytes bounds the scratch the cached calls keep (host-tensor calls' inputs
	// and outputs): past it the least recently used entries go, so a process that calls
	// many large shapes on host tensors does not keep a copy of each on the device.
	cacheScratchBytes = 1 << 30
	// maxRepeat bounds a timed call's dispatches (ops.KernelClock.Repeat).
	maxRepeat = 1024
	// waitSlice is how long one wait holds the device lock; between slices other goroutines
	// record and ctx is checked. A wait returns as soon as the GPU is done.
	waitSlice = 2 * time.Millisecond
	// reapOnClose bounds how long Close waits for work in flight.
	reapOnClose = 5 * time.Second
	// spinFor is how long a wait polls before it sleeps in the driver. A small call's wait is
	// over in tens of microseconds, about what waking a thread from the driver's sleep costs
	// on a VM, and a cgo call that blocks past 20 us also has the Go runtime hand its P to
	// another thread and take one back on return; polling, each poll a short cgo call, pays
	// neither. A long wait polls for spinFor (a sliver of its time) and then sleeps.
	spinFor = 200 * time.Microsecond
)

// The batch's bounds. A call recorded while no submit is in flight is submitted at once:
// the GPU is idle, and holding its work back would only delay it. Later calls gather in
// the open encoder until it holds batchCalls calls, or until its first call has waited
// idleFlush (the GPU would otherwise idle with work held back); host inputs of recorded
// calls are staged in an arena of arenaBytes. Chosen on an H100 (docs/performance.md,
// "The batch's bounds"): of 64 or 256 calls, with or without the first call submitted at
// once, 16 calls with it ran the BERT-sized chains fastest.
//
// idleFlush is a backstop for a caller that stops recording without waiting, not a part of
// a chain's schedule: Go's timers fire no sooner than about a millisecond on Linux (the
// runtime's poller sleeps in whole milliseconds; BenchmarkIdleFlushTimer: a 50 us timer
// fired after 1.1 ms on the EPYC, Go 1.26), so the 20, 50 and 200 us tried in that
// comparison all fired after about 1 ms, and a chain's calls meet the count bound or a
// wait first.
const (
	batchCalls = 16
	idleFlush  = time.Millisecond
	arenaBytes = 4 << 20
)

// entry is a cached bind group with the buffers it binds that the entry owns.
type entry struct {
	key     callKey
	bg      C.WGPUBindGroup
	params  *Buffer
	scratch [maxScratch]*Buffer
	bytes   uint64 // of scratch
	used    uint64
}

// waiter is what a waiting call needs, reused: the C futures and the staging buffers.
type waiter struct {
	w       *C.drt_wait
	staging [maxReads + 1]C.WGPUBuffer
	classes [maxReads + 1]uint64
	n       int
	timing  *timing
	// The id-check slots this wait covers, and the index of the id-status read (-1: none).
	idFrom, idTo uint64
	idRead       int
}

// executor is a device's recording and submitting state.
type executor struct {
	d     *Device
	cache map[uint64]*entry // by callKey.hash; the entry holds its key
	tick  uint64
	bytes uint64 // scratch held by cached entries

	// The submits' validation verdicts: a ring of C memory the pops' callbacks write.
	ring     *C.drt_status
	ringName [ringSize]submitNames // the calls of each submit, worded only on an error
	head     uint64
	tail     uint64
	seq      uint64 // calls recorded so far: a call's number in errors

	// The id checks of spec §A.2a: a slot of idBuf per call, read back at a wait.
	idBuf    *Buffer
	idName   [idSlots]string
	idSeq    [idSlots]uint64
	idReport [idSlots]func(uint32) error
	idHead   uint64
	idTail   uint64

	zero  *Buffer
	arena *Buffer
	// The open batch: calls recorded and not submitted, the arena bytes they staged, and
	// the numbers of its first and last call (the verdict names them).
	batch, arenaUsed uint64
	first, last      uint64
	firstName        string
	timer            *time.Timer
	timerArmed       bool
	inflight         bool // a submit nobody has waited for may still run on the GPU

	join      []byte // host bytes of writes joined from two parts
	pending   error  // the first device error not yet reported
	waiters   []*waiter
	abandoned []*waiter
	freeC     []*C.drt_wait // C memory of waits, freed with the instance
	// Argument arrays of the C calls, in C memory (cgo checks a Go object passed to C as a
	// whole, and the executor holds Go pointers).
	cargs *cArgs
}

type cArgs struct {
	call   C.drt_call
	copies [maxCopies + maxWrites]C.drt_copy
	reads  [maxReads + 1]C.drt_read
	maps   [maxReads + 2]C.drt_map
	binds  [maxBinds]C.drt_binding
	ids    [idSlots]uint32
	label  [64]C.char
}

func (x *executor) init(d *Device) {
	x.d = d
	x.cache = map[uint64]*entry{}
	x.cargs = (*cArgs)(C.calloc(1, C.size_t(unsafe.Sizeof(cArgs{}))))
	x.ring = (*C.drt_status)(C.calloc(ringSize, C.sizeof_drt_status))
	x.timer = time.AfterFunc(time.Hour, x.idle)
	x.timer.Stop()
}

func (x *executor) slot(i uint64) *C.drt_status {
	return (*C.drt_status)(unsafe.Add(unsafe.Pointer(x.ring), uintptr(i%ringSize)*C.sizeof_drt_status))
}

// stopTimer stops the idle flush (Close, before it takes the lock the flush takes).
func (x *executor) stopTimer() {
	if x.timer != nil {
		x.timer.Stop()
	}
}

// idle is the idle flush: the first call of the open batch has waited idleFlush.
func (x *executor) idle() {
	d := x.d
	if d.lock(context.Background()) != nil {
		return
	}
	defer d.unlock()
	x.timerArmed = false
	if !d.closed && x.batch > 0 && d.usable("idle") == nil {
		x.flush(nil, 0)
	}
}

// drain submits the open batch and waits up to wait for all work; Close calls it.
func (x *executor) drain(wait time.Duration) {
	d := x.d
	w := x.getWaiter()
	if x.flush(w, 0) != nil {
		return
	}
	deadline := time.Now().Add(wait)
	for C.drt_wait_all(d.c, w.w, C.uint64_t(waitSlice.Nanoseconds()), d.errbuf, errCap) == C.DRT_ETIMEOUT {
		if time.Now().After(deadline) {
			x.abandoned = append(x.abandoned, w)
			return
		}
	}
	x.putWaiter(w)
}

// release drops the cached bind groups, the waits' staging and the executor's buffers,
// before the device closes. The ring and the waits' C memory stay until free: callbacks of
// popped scopes and pending maps may write into them until the instance is released.
func (x *executor) release() {
	d := x.d
	C.drt_discard(d.c)
	for h, e := range x.cache {
		x.drop(h, e)
	}
	for _, w := range append(x.waiters, x.abandoned...) {
		x.freeC = append(x.freeC, w.w)
		for i := 0; i < w.n; i++ {
			C.drt_buffer_release(d.c, w.staging[i])
		}
		w.n = 0
		if w.timing != nil {
			w.timing.release(d)
			w.timing = nil
		}
	}
	x.waiters, x.abandoned = nil, nil
	for _, p := range []**Buffer{&x.idBuf, &x.zero, &x.arena} {
		d.releaseLocked(*p)
		*p = nil
	}
}

// free frees the executor's C memory once the device and its instance are gone.
func (x *executor) free() {
	C.free(unsafe.Pointer(x.ring))
	C.free(unsafe.Pointer(x.cargs))
	x.ring, x.cargs = nil, nil
	for _, w := range x.freeC {
		C.free(unsafe.Pointer(w))
	}
	x.freeC = nil
}

func (x *executor) drop(h uint64, e *entry) {
	d := x.d
	C.drt_bind_group_release(d.c, e.bg)
	d.releaseLocked(e.params)
	for _, s := range e.scratch {
		d.releaseLocked(s)
	}
	x.bytes -= e.bytes
	delete(x.cache, h)
}

// forget drops the cached bind groups that bind buf (a buffer being released), so its
// memory goes with it.
func (x *executor) forget(buf *Buffer) {
	for h, e := range x.cache {
		for i := 0; i < int(e.key.nbinds); i++ {
			if e.key.binds[i].buf == buf {
				x.drop(h, e)
				break
			}
		}
	}
}

// entryOf returns the cached bind group and scratch of s, making them on a miss.
func (x *executor) entryOf(s *Call) (*entry, error) {
	d := x.d
	x.tick++
	h := s.key.hash()
	if e := x.cache[h]; e != nil {
		if e.key.equal(&s.key) {
			e.used = x.tick
			return e, nil
		}
		x.drop(h, e) // another key of the same hash: the newer takes the slot
	}
	var need uint64
	for _, r := range s.key.scratch {
		need += r.size
	}
	for len(x.cache) > 0 && (len(x.cache) >= cacheCap || x.bytes+need > cacheScratchBytes) {
		var oldH uint64
		var old *entry
		for h, e := range x.cache {
			if old == nil || e.used < old.used {
				oldH, old = h, e
			}
		}
		x.drop(oldH, old)
	}
	e := &entry{key: s.key, used: x.tick}
	fail := func(err error) (*entry, error) {
		C.drt_bind_group_release(d.c, e.bg)
		d.releaseLocked(e.params)
		for _, sb := range e.scratch {
			d.releaseLocked(sb)
		}
		return nil, Within(s.name, deviceErr(err))
	}
	k := &s.key
	if k.nparams > 0 {
		p, err := d.newBuffer("fusednorm.params", uint64(k.nparams), UsageUniform|UsageCopyDst)
		if err != nil {
			return fail(err)
		}
		e.params = p
		// A new buffer, which nothing recorded uses: a queue write is in order.
		C.drt_queue_write(d.c, p.c, 0, unsafe.Pointer(&k.params[0]), C.size_t(k.nparams))
	}
	for i, r := range k.scratch {
		if r.size == 0 {
			continue
		}
		sb, err := d.newBuffer("fusednorm.scratch", r.size, r.usage)
		if err != nil {
			return fail(err)
		}
		e.scratch[i] = sb
		e.bytes += sb.size
	}
	n := int(k.nbinds)
	for i := 0; i < n; i++ {
		r := k.binds[i]
		var buf *Buffer
		switch r.slot {
		case AtBuffer:
			buf = r.buf
		case AtParams:
			buf = e.params
		default:
			buf = e.scratch[r.slot]
		}
		x.cargs.binds[i] = C.drt_binding{binding: C.uint32_t(r.binding), buffer: buf.c, offset: C.uint64_t(r.off), size: C.uint64_t(r.size)}
	}
	if k.pipe.bgl == nil {
		return fail(fmt.Errorf("the kernel binds nothing, but the call binds %d buffers", n))
	}
	if rc := C.drt_bind_group(d.c, k.pipe.bgl, &x.cargs.binds[0], C.int(n), &e.bg, d.errbuf, errCap); rc != C.DRT_OK {
		return fail(d.failure("bind group", rc))
	}
	x.cache[h] = e
	x.bytes += e.bytes
	return e, nil
}

// Run executes s: its host writes, copies, dispatch and read-backs are recorded into the
// open batch, which is submitted when s must wait (it reads back, Wait, or its kernel is
// timed) or a bound is reached. A call that waits returns once its results are copied out
// and reports the first device error of any earlier call that did not wait, naming it.
func (d *Device) Run(ctx context.Context, s *Call) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dawn: %s: %w", s.name, err)
	}
	if s.key.pipe != nil && d.HasFeature("TimestampQuery") {
		s.clock = ops.KernelClockFrom(ctx)
	}
	if err := d.lock(ctx); err != nil {
		return fmt.Errorf("dawn: %s: %w", s.name, err)
	}
	w, big, err := d.x.record(s)
	if err != nil || w == nil {
		d.unlock()
		return err
	}
	if big != nil {
		// The scratch a large read-back comes from must not be written by another call
		// before the transfer ring has read it: such a call keeps the lock to the end.
		defer d.unlock()
		if err := d.x.waitLocked(ctx, s, w); err != nil {
			return err
		}
		return d.x.finish(s, w, big)
	}
	d.unlock()
	return d.x.await(ctx, s, w)
}

// Sync waits for every call recorded so far and returns the first device error of a call
// that did not wait, naming it.
func (d *Device) Sync(ctx context.Context) error {
	s := spareCalls.Get().(*Call)
	defer spareCalls.Put(s)
	s.Reset("Sync")
	s.Wait()
	return d.Run(ctx, s)
}

// spareCalls hold the Calls of Sync and Read: a Call is a few kilobytes, and one on the
// stack escapes through Run, so a wait would allocate it.
var spareCalls = sync.Pool{New: func() any { return new(Call) }}

// Read waits for the work recorded so far and copies len(dst) bytes of b from off into dst
// (large reads through the transfer ring); it reports earlier calls' errors as Sync does.
func (d *Device) Read(ctx context.Context, name string, b *Buffer, off uint64, dst []byte) error {
	s := spareCalls.Get().(*Call)
	defer spareCalls.Put(s)
	s.Reset(name)
	s.Read(b, AtBuffer, off, dst)
	err := d.Run(ctx, s)
	s.Reset("") // drop dst: a pooled Call must not keep the caller's memory
	return err
}

// Write writes data into b at off (a multiple of 4; a tail that is not a whole word is
// padded with zeros), ordered after every call recorded before it and before every call
// recorded after it.
func (d *Device) Write(name string, b *Buffer, off uint64, data []byte) error {
	if off%4 != 0 || off > b.size || align4(uint64(len(data))) > b.size-off {
		return fmt.Errorf("dawn: %s: %d bytes at offset %d do not fit a %d-byte buffer at a multiple of 4: %w",
			name, len(data), off, b.size, ops.ErrInvalidArgument)
	}
	if len(data) == 0 {
		return nil
	}
	if err := d.lock(context.Background()); err != nil {
		return err
	}
	defer d.unlock()
	if err := d.usable(name); err != nil {
		return err
	}
	if b.c == nil {
		return fmt.Errorf("dawn: %s: %s released: %w", name, b.label, ops.ErrInvalidArgument)
	}
	if err := fault(d.faults, "write-buffer"); err != nil {
		return fmt.Errorf("dawn: %s: %w: %w", name, ops.ErrDevice, err)
	}
	x := &d.x
	n := uint64(len(data))
	if x.batch > 0 && align4(n) <= arenaBytes-x.arenaUsed {
		c, err := x.stage(name, data, b, off)
		if err != nil {
			return err
		}
		x.cargs.copies[0] = c
		x.cargs.call = C.drt_call{copies: &x.cargs.copies[0], npre: 1}
		if rc := C.drt_record(d.c, &x.cargs.call, d.errbuf, errCap); rc != C.DRT_OK {
			return d.failure(name, rc)
		}
		return nil
	}
	if err := x.flush(nil, 0); err != nil {
		return err
	}
	return x.writeNow(name, b, off, data)
}

// writeNow writes data into b at off with nothing recorded: a queue write (in chunks, so
// Dawn's own staging stays bounded), or the transfer ring for large data.
func (x *executor) writeNow(name string, b *Buffer, off uint64, data []byte) error {
	d := x.d
	if d.useRing(uint64(len(data))) {
		return d.uploadLocked(name, b, off, data)
	}
	const chunk = 64 << 20
	for o := 0; o < len(data); o += chunk {
		n := min(chunk, len(data)-o)
		C.drt_queue_write(d.c, b.c, C.uint64_t(off+uint64(o)), unsafe.Pointer(&data[o]), C.size_t(n))
	}
	return nil
}

// stage puts data into the arena (made on first use) and returns the copy that moves it
// to dst at off inside the encoder.
func (x *executor) stage(name string, data []byte, dst *Buffer, off uint64) (C.drt_copy, error) {
	d := x.d
	if x.arena == nil {
		a, err := d.newBuffer("fusednorm.arena", arenaBytes, UsageCopySrc|UsageCopyDst)
		if err != nil {
			return C.drt_copy{}, Within(name, deviceErr(err))
		}
		x.arena = a
	}
	at := x.arenaUsed
	C.drt_queue_write(d.c, x.arena.c, C.uint64_t(at), unsafe.Pointer(&data[0]), C.size_t(len(data)))
	n := align4(uint64(len(data)))
	x.arenaUsed += n
	return C.drt_copy{src: x.arena.c, src_offset: C.uint64_t(at), dst: dst.c, dst_offset: C.uint64_t(off), size: C.uint64_t(n)}, nil
}

// record records s; it returns the waiter when s waits, and the reads that go through the
// transfer ring after the wait.
func (x *executor) record(s *Call) (*waiter, []readOp, error) {
	d := x.d
	if err := d.usable(s.name); err != nil {
		return nil, nil, err
	}
	x.reap()
	// Every buffer the call names must still be alive (a device tensor closed meanwhile).
	for i := 0; i < int(s.key.nbinds); i++ {
		if r := s.key.binds[i]; r.slot == AtBuffer && r.buf.c == nil {
			return nil, nil, fmt.Errorf("dawn: %s: %s: device tensor closed: %w", s.name, r.name, ops.ErrInvalidArgument)
		}
	}
	for i := 0; i < s.npre+s.npost; i++ {
		c := &s.copies[i]
		if (c.Src != nil && c.Src.c == nil) || (c.Dst != nil && c.Dst.c == nil) {
			name := c.SrcName
			if c.Dst != nil && c.Dst.c == nil {
				name = c.DstName
			}
			return nil, nil, fmt.Errorf("dawn: %s: %s: device tensor closed: %w", s.name, name, ops.ErrInvalidArgument)
		}
	}
	var big []readOp
	nreads := 0
	for i := 0; i < s.nreads; i++ {
		r := s.reads[i]
		if r.slot == AtBuffer && r.buf.c == nil {
			return nil, nil, fmt.Errorf("dawn: %s: device tensor closed: %w", s.name, ops.ErrInvalidArgument)
		}
		if d.useRingRead(uint64(len(r.dst))) {
			big = append(big, r)
			continue
		}
		s.reads[nreads] = r
		nreads++
	}
	s.nreads = nreads
	var e *entry
	if s.key.pipe != nil {
		var err error
		if e, err = x.entryOf(s); err != nil {
			return nil, nil, err
		}
	}
	if s.zeroBytes > 0 && (x.zero == nil || x.zero.size < s.zeroBytes) {
		d.releaseLocked(x.zero)
		x.zero = nil
		z, err := d.newBuffer("fusednorm.zero", max(s.zeroBytes, 256), UsageCopySrc)
		if err != nil {
			return nil, nil, Within(s.name, deviceErr(err))
		}
		x.zero = z // WebGPU buffers start zeroed
	}
	timed := s.clock != nil
	wait := s.wait || s.nreads > 0 || big != nil || timed
	if s.idReport != nil {
		if x.idBuf == nil {
			ib, err := d.newBuffer("fusednorm.idstatus", idSlots*4, UsageStorage|UsageCopySrc|UsageCopyDst)
			if err != nil {
				return nil, nil, Within(s.name, deviceErr(err))
			}
			x.idBuf = ib
		}
		if x.idHead-x.idTail >= idSlots-1 {
			wait = true // the slots are full: this call collects them
		}
	}
	if err := fault(d.faults, "submit"); err != nil {
		return nil, nil, fmt.Errorf("dawn: %s: %w: %w", s.name, ops.ErrDevice, err)
	}

	// Host inputs: into the entry's scratch by queue writes when nothing is recorded (they
	// take effect before this batch), else staged in the arena and copied in order; when
	// they do not fit the arena, the batch is submitted first.
	var hostBytes uint64
	for i := 0; i < s.nwrites; i++ {
		hostBytes += align4(uint64(len(s.writes[i].data) + len(s.writes[i].data2)))
	}
	if s.nwrites > 0 {
		if err := fault(d.faults, "write-buffer"); err != nil {
			return nil, nil, fmt.Errorf("dawn: %s: %w: %w", s.name, ops.ErrDevice, err)
		}
	}
	if x.batch > 0 && hostBytes > arenaBytes-x.arenaUsed {
		if err := x.flush(nil, 0); err != nil {
			return nil, nil, err
		}
	}
	nc := 0
	for i := 0; i < s.nwrites; i++ {
		wr := &s.writes[i]
		data := wr.data
		if len(wr.data2) > 0 {
			x.join = append(append(x.join[:0], wr.data...), wr.data2...)
			data = x.join
		}
		dst := e.scratch[wr.slot]
		if x.batch == 0 {
			if err := x.writeNow(s.name, dst, wr.off, data); err != nil {
				return nil, nil, err
			}
			continue
		}
		c, err := x.stage(s.name, data, dst, wr.off)
		if err != nil {
			return nil, nil, err
		}
		x.cargs.copies[nc] = c
		nc++
	}
	x.seq++
	seq := x.seq
	idSlot := x.idHead
	npre := nc
	for i := 0; i < s.npre+s.npost; i++ {
		c := &s.copies[i]
		cc := &x.cargs.copies[nc]
		nc++
		cc.src = x.place(e, c.Src, c.SrcSlot, c.SrcZero)
		cc.dst = x.place(e, c.Dst, c.DstSlot, false)
		cc.src_offset, cc.dst_offset, cc.size = C.uint64_t(c.SrcOff), C.uint64_t(c.DstOff), C.uint64_t(c.Size)
		if c.DstIDCheck {
			cc.dst = x.idBuf.c
			cc.dst_offset = C.uint64_t((idSlot % idSlots) * 4)
		}
		if i < s.npre {
			npre++
		}
	}
	var wt *waiter
	nreads = s.nreads
	nmaps := 0
	if wait {
		wt = x.getWaiter()
		wt.idRead = -1
		if x.idHead > x.idTail || s.idReport != nil {
			wt.idRead = nreads
			nreads++
		}
		for i := 0; i < nreads; i++ {
			var src *Buffer
			var off, n uint64
			if i == wt.idRead {
				src, off, n = x.idBuf, 0, idSlots*4
			} else {
				r := &s.reads[i]
				src, off, n = r.buf, r.off, align4(uint64(len(r.dst)))
				if r.slot != AtBuffer {
					src = e.scratch[r.slot]
				}
			}
			sb, class, err := d.getStaging(s.name, n)
			if err != nil {
				x.putWaiter(wt)
				return nil, nil, err
			}
			wt.staging[i], wt.classes[i] = sb, class
			wt.n = i + 1
			x.cargs.reads[i] = C.drt_read{src: src.c, src_offset: C.uint64_t(off), staging: sb, size: C.uint64_t(n)}
			x.cargs.maps[nmaps] = C.drt_map{buf: sb, size: C.uint64_t(n)}
			nmaps++
		}
		if timed {
			t, err := d.getTiming(s.name)
			if err != nil {
				x.putWaiter(wt)
				return nil, nil, err
			}
			t.c.repeat = C.uint32_t(min(max(s.clock.Repeat, 1), maxRepeat))
			wt.timing = t
			x.cargs.maps[nmaps] = C.drt_map{buf: t.c.staging, size: 16}
			nmaps++
		}
	}
	c := &x.cargs.call
	*c = C.drt_call{npre: C.int(npre), npost: C.int(nc - npre), nreads: C.int(nreads)}
	if s.key.pipe != nil {
		c.pl, c.bg = s.key.pipe.c, e.bg
		c.groups = [3]C.uint32_t{C.uint32_t(s.groups[0]), C.uint32_t(s.groups[1]), C.uint32_t(s.groups[2])}
		c.label = x.label(s.name, seq)
	}
	if nc > 0 {
		c.copies = &x.cargs.copies[0]
	}
	if nreads > 0 {
		c.reads = &x.cargs.reads[0]
	}
	if wt != nil && wt.timing != nil {
		c.timing = &wt.timing.c
	}
	if s.key.pipe != nil || nc > 0 || nreads > 0 {
		if rc := C.drt_record(d.c, c, d.errbuf, errCap); rc != C.DRT_OK {
			if wt != nil {
				x.putWaiter(wt)
			}
			return nil, nil, d.failure(s.name, rc)
		}
		if x.batch == 0 {
			x.first, x.firstName = seq, s.name
		}
		x.batch++
		x.last = seq
	}
	if s.idReport != nil {
		x.idName[idSlot%idSlots], x.idSeq[idSlot%idSlots], x.idReport[idSlot%idSlots] = s.name, seq, s.idReport
		x.idHead++
	}
	// Fault site "async": the device fails the call after it was recorded, as the verdict of
	// its submit would; the next wait reports it.
	if err := fault(d.faults, "async"); err != nil && x.pending == nil {
		x.pending = fmt.Errorf("dawn: %s (call %d): %w: %w", s.name, seq, ops.ErrDevice, err)
	}
	switch {
	case wait:
		wt.idFrom, wt.idTo = x.idTail, x.idHead
		if err := x.flush(wt, nmaps); err != nil {
			x.putWaiter(wt)
			return nil, nil, err
		}
	case x.batch >= batchCalls || !x.inflight:
		if err := x.flush(nil, 0); err != nil {
			return nil, nil, err
		}
	case x.batch > 0 && !x.timerArmed:
		x.timerArmed = true
		x.timer.Reset(idleFlush)
	}
	return wt, big, nil
}

// label is the compute pass's label, "fusednorm <name> #<seq>", in C memory: Dawn names it
// in a validation error of the pass. A pass is labelled after the call that opens it; the
// calls recorded after it share it (drt_record), and the submit's verdict names them all.
func (x *executor) label(name string, seq uint64) *C.char {
	b := unsafe.Slice((*byte)(unsafe.Pointer(&x.cargs.label[0])), len(x.cargs.label))
	out := append(append(append(b[:0], "fusednorm "...), name...), " #"...)
	out = strconv.AppendUint(out, seq, 10)
	if len(out) >= len(b) {
		out = out[:len(b)-1]
	}
	b[len(out)] = 0
	return &x.cargs.label[0]
}

// flush submits the open batch (if any) with a verdict slot, and when w is set queues its
// nmaps maps (x.cargs.maps) or the queue's completion into it; the batch and arena start
// afresh. Fault site "lose" follows a submit.
func (x *executor) flush(w *waiter, nmaps int) error {
	d := x.d
	var slot *C.drt_status
	if x.batch > 0 {
		if x.head-x.tail >= ringSize {
			x.collect()
			for tries := 0; x.head-x.tail >= ringSize && tries < 1000; tries++ {
				time.Sleep(10 * time.Microsecond)
				x.collect()
			}
			if x.head-x.tail >= ringSize {
				x.tail++ // a verdict that never came: stop waiting for it
			}
		}
		slot = x.slot(x.head)
		x.ringName[x.head%ringSize] = submitNames{x.firstName, x.first, x.last}
		x.head++
	}
	var cw *C.drt_wait
	var maps *C.drt_map
	if w != nil {
		cw = w.w
		if nmaps > 0 {
			maps = &x.cargs.maps[0]
		}
	}
	submitted := x.batch > 0
	x.batch, x.arenaUsed = 0, 0
	x.inflight = w == nil && (submitted || x.inflight) // a wait covers what went before
	if rc := C.drt_flush(d.c, slot, maps, C.int(nmaps), cw, d.errbuf, errCap); rc != C.DRT_OK {
		return d.failure("submit", rc)
	}
	if submitted && d.faults != nil {
		if cause := fault(d.faults, "lose"); cause != nil {
			d.forceLoss(cause) // the work is in flight: waiting for it reports the loss
		}
	}
	return nil
}

// submitNames are the calls of one submit: the first one's name and the sequence numbers of
// the first and last. A submit keeps these and words them only when its verdict is an error,
// so a call does not build a string.
type submitNames struct {
	firstName   string
	first, last uint64
}

func (n submitNames) String() string {
	if n.first == n.last {
		return n.firstName + " (call " + strconv.FormatUint(n.first, 10) + ")"
	}
	return "the calls " + strconv.FormatUint(n.first, 10) + " to " + strconv.FormatUint(n.last, 10) +
		" (from " + n.firstName + ", call " + strconv.FormatUint(n.first, 10) + ")"
}

// place resolves a copy end to its C buffer.
func (x *executor) place(e *entry, buf *Buffer, slot Slot, zero bool) C.WGPUBuffer {
	switch {
	case zero:
		return x.zero.c
	case slot == AtBuffer:
		return buf.c
	case slot == Nowhere:
		return nil
	}
	return e.scratch[slot].c
}

// await waits for a submitted call, releasing the lock between slices of the wait, then
// finishes it.
func (x *executor) await(ctx context.Context, s *Call, wt *waiter) error {
	d := x.d
	spin := true
	for {
		if err := d.lock(ctx); err != nil {
			x.abandon(wt)
			return fmt.Errorf("dawn: %s: %w", s.name, err)
		}
		if d.closed {
			d.unlock()
			return fmt.Errorf("dawn: %s: %w", s.name, ops.ErrClosed)
		}
		slice := waitSlice
		if dl, ok := ctx.Deadline(); ok {
			if left := time.Until(dl); left < slice {
				slice = max(left, 0)
			}
		}
		rc := C.int(C.DRT_ETIMEOUT)
		if spin {
			rc, spin = x.spin(wt, min(spinFor, slice)), false
		}
		if rc == C.DRT_ETIMEOUT {
			rc = C.drt_wait_all(d.c, wt.w, C.uint64_t(slice.Nanoseconds()), d.errbuf, errCap)
		}
		if rc == C.DRT_OK {
			break
		}
		if rc != C.DRT_ETIMEOUT {
			err := d.failure(s.name, rc)
			x.abandoned = append(x.abandoned, wt)
			d.unlock()
			return err
		}
		if err := ctx.Err(); err != nil {
			x.abandoned = append(x.abandoned, wt)
			d.unlock()
			return fmt.Errorf("dawn: %s: %w", s.name, err)
		}
		d.unlock()
	}
	defer d.unlock()
	return x.finish(s, wt, nil)
}

// waitLocked waits for a submitted call without releasing the lock.
func (x *executor) waitLocked(ctx context.Context, s *Call, wt *waiter) error {
	d := x.d
	for {
		rc := C.drt_wait_all(d.c, wt.w, C.uint64_t(waitSlice.Nanoseconds()), d.errbuf, errCap)
		if rc == C.DRT_OK {
			return nil
		}
		if rc != C.DRT_ETIMEOUT {
			x.abandoned = append(x.abandoned, wt)
			return d.failure(s.name, rc)
		}
		if err := ctx.Err(); err != nil {
			x.abandoned = append(x.abandoned, wt)
			return fmt.Errorf("dawn: %s: %w", s.name, err)
		}
	}
}

// finish reports earlier calls' errors and the call's own id check once its wait is over,
// and copies its reads out; big reads then go through the transfer ring. Under the lock.
func (x *executor) finish(s *Call, wt *waiter, big []readOp) error {
	d := x.d
	defer x.putWaiter(wt)
	if err := fault(d.faults, "map"); err != nil {
		return fmt.Errorf("dawn: %s: %w: %w", s.name, ops.ErrDevice, err)
	}
	if d.lost() { // whatever the wait's status, results are not to be trusted
		return d.lossError(s.name)
	}
	if rc := C.drt_wait_error(wt.w, d.errbuf, errCap); rc != C.DRT_OK {
		return d.failure(s.name, rc)
	}
	x.collect()
	if wt.idRead >= 0 {
		x.checkIDs(wt)
	}
	if err := x.takePending(); err != nil {
		return err
	}
	for i := 0; i < s.nreads; i++ {
		if err := d.copyMapped(s.name, wt.staging[i], s.reads[i].dst); err != nil {
			return err
		}
	}
	if wt.timing != nil {
		var ts [2]uint64
		if C.drt_copy_mapped(d.c, wt.timing.c.staging, unsafe.Pointer(&ts[0]), 16, d.errbuf, errCap) == C.DRT_OK && ts[1] >= ts[0] {
			s.clock.PerCall = time.Duration(ts[1]-ts[0]) / time.Duration(wt.timing.c.repeat)
		}
	}
	for _, r := range big {
		src := r.buf
		if r.slot != AtBuffer {
			e := x.cache[s.key.hash()]
			if e == nil || !e.key.equal(&s.key) {
				return fmt.Errorf("dawn: %s: %w: its scratch was dropped before its read-back", s.name, ops.ErrDevice)
			}
			src = e.scratch[r.slot]
		}
		if err := d.downloadLocked(s.name, src, r.off, r.dst); err != nil {
			return err
		}
	}
	return nil
}

// spin polls wt's futures until they are done, fail, or dur passes: DRT_OK, an error, or
// DRT_ETIMEOUT. Under the lock.
func (x *executor) spin(wt *waiter, dur time.Duration) C.int {
	d := x.d
	end := time.Now().Add(dur)
	for {
		rc := C.drt_wait_all(d.c, wt.w, 0, d.errbuf, errCap)
		if rc != C.DRT_ETIMEOUT || !time.Now().Before(end) {
			return rc
		}
	}
}

// checkIDs reads the id-status words the wait read back.
func (x *executor) checkIDs(wt *waiter) {
	d := x.d
	words := &x.cargs.ids
	if C.drt_copy_mapped(d.c, wt.staging[wt.idRead], unsafe.Pointer(&words[0]), idSlots*4, d.errbuf, errCap) != C.DRT_OK {
		return
	}
	for i := max(wt.idFrom, x.idTail); i < wt.idTo; i++ {
		if w := words[i%idSlots]; w != 0 && x.pending == nil {
			x.pending = fmt.Errorf("dawn: %s (call %d), detected on the device (that call's outputs are unspecified): %w",
				x.idName[i%idSlots], x.idSeq[i%idSlots], x.idReport[i%idSlots](w))
		}
	}
	if wt.idTo > x.idTail {
		x.idTail = wt.idTo
	}
}

// collect runs pending callbacks and records the first failed verdict.
func (x *executor) collect() {
	d := x.d
	C.drt_process_events(d.c)
	for x.tail < x.head {
		v := x.slot(x.tail)
		if v.done == 0 {
			break
		}
		if (v.status != C.WGPUPopErrorScopeStatus_Success || v._type != C.WGPUErrorType_NoError) && x.pending == nil {
			x.pending = fmt.Errorf("dawn: %s: %w: %s", x.ringName[x.tail%ringSize].String(), ops.ErrDevice, C.GoString(&v.msg[0]))
		}
		x.tail++
	}
	if err := d.uncapturedError("collect"); err != nil && x.pending == nil {
		x.pending = err
	}
	if err := d.usable("collect"); err != nil && x.pending == nil {
		x.pending = err
	}
}

// takePending returns the first unreported device error and forgets it.
func (x *executor) takePending() error {
	err := x.pending
	x.pending = nil
	return err
}

func (x *executor) getWaiter() *waiter {
	if n := len(x.waiters); n > 0 {
		w := x.waiters[n-1]
		x.waiters = x.waiters[:n-1]
		return w
	}
	return &waiter{w: (*C.drt_wait)(C.calloc(1, C.sizeof_drt_wait))}
}

// putWaiter unmaps and returns a finished waiter's staging buffers.
func (x *executor) putWaiter(wt *waiter) {
	d := x.d
	for i := 0; i < wt.n; i++ {
		C.drt_unmap(d.c, wt.staging[i])
		d.putStaging(wt.staging[i], wt.classes[i])
	}
	wt.n = 0
	if wt.timing != nil {
		C.drt_unmap(d.c, wt.timing.c.staging)
		d.timings = append(d.timings, wt.timing)
		wt.timing = nil
	}
	x.waiters = append(x.waiters, wt)
}

// abandon hands a wait whose caller gave up (without the lock) to the next recording.
func (x *executor) abandon(wt *waiter) {
	_ = x.d.lock(context.Background())
	x.abandoned = append(x.abandoned, wt)
	x.d.unlock()
}

// reap recycles abandoned waits the GPU has finished.
func (x *executor) reap() {
	d := x.d
	for i := 0; i < len(x.abandoned); {
		wt := x.abandoned[i]
		if C.drt_wait_all(d.c, wt.w, 0, d.errbuf, errCap) != C.DRT_OK {
			i++
			continue
		}
		x.abandoned = append(x.abandoned[:i], x.abandoned[i+1:]...)
		x.putWaiter(wt)
	}
}

// Within names the call (or method) name in err, the error of a step of it: "dawn: <name>:
// <step>: …", with one "dawn: " prefix where err's message has one already. It wraps err.
func Within(name string, err error) error {
	return &withinError{msg: "dawn: " + name + ": " + strings.TrimPrefix(err.Error(), "dawn: "), err: err}
}

type withinError struct {
	msg string
	err error
}

func (e *withinError) Error() string { return e.msg }
func (e *withinError) Unwrap() error { return e.err }

// deviceErr makes sure a runtime failure wraps ops.ErrDevice (context errors, closing and
// limits stay as they are).
func deviceErr(err error) error {
	if err == nil || isCtxErr(err) || errors.Is(err, ops.ErrDevice) || errors.Is(err, ops.ErrClosed) ||
		errors.Is(err, ops.ErrNotSupported) || errors.Is(err, ops.ErrInvalidArgument) {
		return err
	}
	return fmt.Errorf("%w: %w", ops.ErrDevice, err)
}
