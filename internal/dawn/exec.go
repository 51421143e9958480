//go:build cgo

package dawn

/*
#include <stdlib.h>
#include "../../cgo/dawnrt_fast.h"
*/
import "C"

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/bits"
	"sync"
	"time"
	"unsafe"

	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/shaders"
)

// The low-overhead path (issue 17): a call that touches a device tensor, or a prepared
// AddLayerNorm, is described as a callSpec and executed by exec. Its pipeline, uniform
// parameters, scratch buffers and bind group are looked up in a cache keyed by everything
// the bind group depends on, so a repeated call only writes its host inputs (one cgo
// crossing each) and records and submits one command buffer (one crossing: drt_enqueue).
// A call that reads nothing back returns once submitted; a call that reads back, and
// DeviceTensor reads and syncs, wait, and then report the first device error of any
// earlier call that did not wait (its error-scope verdict, kept in a ring in C memory).
//
// Scratch buffers belong to a cache entry and are reused by every call that hits it: the
// queue orders each call's writes, dispatch and copies, and the whole sequence is recorded
// under the device lock, so consecutive calls on one entry never see each other's data.

const (
	maxBinds   = 12 // EmbedLayerNorm's bindings 0-11 (drt_bind_group takes up to 16)
	maxScratch = 6
	maxCopies  = 10
	maxReads   = 8
	maxWrites  = 8
	paramsCap  = 64
	// ringSize bounds the calls whose error-scope verdicts are not yet collected.
	ringSize = 256
	// idSlots bounds the calls with device-resident ids whose range checks (SPEC A.2a) are
	// not yet read; a call that would overflow it waits.
	idSlots = 256
	// cacheCap bounds the cached bind groups; past it the least recently used goes.
	cacheCap = 128
	// maxRepeat bounds a timed call's dispatches (ops.KernelClock.Repeat).
	maxRepeat = 1024
)

// Operand places: a buffer of its own (resident weights, a device tensor), a scratch buffer
// of the cache entry, or the entry's uniform parameters.
const (
	atBuffer  int8 = -1
	atParams  int8 = -2
	atNowhere int8 = -3
)

// bindRef is one binding of a call: a buffer, or scratch index / params.
type bindRef struct {
	binding   uint32
	buf       *buffer
	scratch   int8
	write     bool
	off, size uint64
}

type scratchReq struct {
	size  uint64
	usage bufferUsage
}

// callKey is everything a call's bind group and scratch depend on.
type callKey struct {
	pipe    *pipeline
	nparams uint8
	params  [paramsCap]byte
	nbinds  uint8
	binds   [maxBinds]bindRef
	scratch [maxScratch]scratchReq
}

// hash mixes the parts of k in use, a word at a time (a multiply and a rotate each; a
// collision costs a cache miss, see entry). The map of entries is keyed by it rather than by
// k: Go's hash of the whole 700-byte struct, field by field, took about 1 us of a tiny call's
// Go time on the H200 host.
func (k *callKey) hash() uint64 {
	h := uint64(0x243f6a8885a308d3)
	mix := func(v uint64) {
		h = bits.RotateLeft64((h^v)*0x9e3779b97f4a7c15, 29)
	}
	mix(uint64(uintptr(unsafe.Pointer(k.pipe))))
	mix(uint64(k.nparams)<<8 | uint64(k.nbinds))
	for i := 0; i+8 <= int(k.nparams); i += 8 {
		mix(binary.LittleEndian.Uint64(k.params[i:]))
	}
	for i := 0; i < int(k.nbinds); i++ {
		r := &k.binds[i]
		w := uint64(0)
		if r.write {
			w = 1
		}
		mix(uint64(r.binding) | uint64(uint8(r.scratch))<<32 | w<<40)
		mix(uint64(uintptr(unsafe.Pointer(r.buf))))
		mix(r.off)
		mix(r.size)
	}
	for _, sr := range k.scratch {
		mix(sr.size)
		mix(uint64(sr.usage))
	}
	return h ^ h>>32
}

// equal reports whether k and o describe the same bind group: the parts in use are equal.
func (k *callKey) equal(o *callKey) bool {
	if k.pipe != o.pipe || k.nparams != o.nparams || k.nbinds != o.nbinds || k.scratch != o.scratch ||
		!bytes.Equal(k.params[:k.nparams], o.params[:o.nparams]) {
		return false
	}
	for i := 0; i < int(k.nbinds); i++ {
		if k.binds[i] != o.binds[i] {
			return false
		}
	}
	return true
}

type copyOp struct {
	src, dst               *buffer
	srcScratch, dstScratch int8
	srcOff, dstOff, size   uint64
	srcZero, dstIDStatus   bool // from the device's zero buffer / into this call's id slot
}

type writeOp struct {
	scratch int8
	off     uint64
	data    []byte
	data2   []byte // written right after data (gamma then beta), joined on the host
}

type readOp struct {
	buf     *buffer
	scratch int8
	off     uint64
	dst     []byte
}

// callSpec is one call, built by an op and run by exec. It comes from a pool: it is large,
// and a call must not allocate.
type callSpec struct {
	name    string
	key     callKey
	groups  [3]uint32
	writes  [maxWrites]writeOp
	nwrites int
	copies  [maxCopies]copyOp
	npre    int
	npost   int
	reads   [maxReads]readOp
	nreads  int
	// zeroBytes is how many bytes of the device's zero buffer the copies use.
	zeroBytes uint64
	// idCheck: the call has device-resident ids, and a post copy delivers its status word.
	idCheck bool
	// wait: wait for the call even though it reads nothing back (Sync).
	wait bool
	// clock: time the kernel on the device (ops.WithKernelClock); the call then waits.
	clock *ops.KernelClock
	// entry: the cache entry of key, once enqueue has found it (until the entry is dropped).
	entry *callEntry
}

// reset empties s for a new call.
func (s *callSpec) reset(name string) {
	*s = callSpec{name: name}
}

func (s *callSpec) bind(r bindRef) { s.key.binds[s.key.nbinds] = r; s.key.nbinds++ }

// scratchFor adds a scratch buffer of size bytes and returns its index.
func (s *callSpec) scratchFor(size uint64, usage bufferUsage) int8 {
	for i := range s.key.scratch {
		if s.key.scratch[i].size == 0 {
			s.key.scratch[i] = scratchReq{size: max(align4(size), 4), usage: usage}
			return int8(i)
		}
	}
	panic("dawn: callSpec: too many scratch buffers") // a bug in an op, not an input
}

func (s *callSpec) pre(c copyOp)  { s.copies[s.npre] = c; s.npre++ }
func (s *callSpec) post(c copyOp) { s.copies[s.npre+s.npost] = c; s.npost++ }
func (s *callSpec) write(w writeOp) {
	if len(w.data)+len(w.data2) > 0 {
		s.writes[s.nwrites] = w
		s.nwrites++
	}
}
func (s *callSpec) read(r readOp) {
	if len(r.dst) > 0 {
		s.reads[s.nreads] = r
		s.nreads++
	}
}

// setParams stores the uniform block (a multiple of 16 bytes).
func (s *callSpec) setParams(p []byte) {
	s.key.nparams = uint8(copy(s.key.params[:], p))
}

// callEntry is a cached bind group with the buffers it binds that the entry owns.
type callEntry struct {
	key     callKey
	bg      C.WGPUBindGroup
	params  *buffer
	scratch [maxScratch]*buffer
	used    uint64
	dropped bool // out of the cache, its bind group and buffers released (dropEntry)
}

// waiter is what a waiting call needs, reused: the C futures and the staging buffers.
type waiter struct {
	w       *C.drt_wait
	staging [maxReads + 1]C.WGPUBuffer
	classes [maxReads + 1]uint64
	n       int
	timing  *timing
	// id-check range this wait covers.
	idFrom, idTo uint64
	idRead       int // index of the id-status read, -1 none
	abandoned    bool
}

// devState is the backend's state for the low-overhead path. Under the device lock.
type devState struct {
	cache map[uint64]*callEntry // by callKey.hash; the entry holds its key
	tick  uint64

	// Pipelines by parameter struct, under pipeMu (not the device lock).
	pipeMu    sync.RWMutex
	embedPipe map[shaders.Embed]*pipeline
	addPipe   map[shaders.AddLN]*pipeline

	ring     *C.drt_status // ringSize slots of error-scope verdicts, C memory
	ringName [ringSize]string
	ringSeq  [ringSize]uint64
	head     uint64
	tail     uint64
	seq      uint64

	idBuf  *buffer
	idName [idSlots]string
	idSeq  [idSlots]uint64
	idHead uint64
	idTail uint64

	zero      *buffer
	join      []byte        // host bytes of writes joined from two parts
	pending   error         // the first device error not yet reported
	closing   []*C.drt_wait // C memory of waits, freed by freeFast
	waiters   []*waiter
	abandoned []*waiter
	// Argument arrays of the C calls, in C memory (cgo checks a Go object passed to C
	// as a whole, and the backend holds Go pointers).
	cargs *cArgs
}

type cArgs struct {
	call   C.drt_call
	copies [maxCopies + 1]C.drt_copy
	reads  [maxReads + 1]C.drt_read
	binds  [maxBinds]C.drt_binding
	ids    [idSlots]uint32
}

// init allocates the C side of the state; under the lock.
func (st *devState) init() {
	if st.cache != nil {
		return
	}
	st.cache = map[uint64]*callEntry{}
	st.cargs = (*cArgs)(C.calloc(1, C.size_t(unsafe.Sizeof(cArgs{}))))
	st.ring = (*C.drt_status)(C.calloc(ringSize, C.sizeof_drt_status))
}

func (st *devState) slot(i uint64) *C.drt_status {
	return (*C.drt_status)(unsafe.Add(unsafe.Pointer(st.ring), uintptr(i%ringSize)*C.sizeof_drt_status))
}

// release frees everything the path holds; under the lock, before the device closes.
func (b *Backend) releaseFast() {
	st := &b.dt
	d := b.dev
	for h, e := range st.cache {
		b.dropEntry(h, e)
	}
	for _, w := range append(st.waiters, st.abandoned...) {
		st.closing = append(st.closing, w.w)
		for i := 0; i < w.n; i++ {
			C.drt_buffer_release(d.c, w.staging[i])
		}
		w.n = 0
	}
	st.waiters, st.abandoned = nil, nil
	for _, p := range []**buffer{&st.idBuf, &st.zero} {
		if *p != nil {
			d.releaseLocked(*p)
			*p = nil
		}
	}
	// The ring and the waits' C memory stay until freeFast: callbacks of popped scopes
	// and pending maps may write into them until the instance is released.
}

// freeFast frees the path's C memory once the device (and its instance) is gone.
func (b *Backend) freeFast() {
	st := &b.dt
	C.free(unsafe.Pointer(st.ring))
	C.free(unsafe.Pointer(st.cargs))
	st.ring, st.cargs = nil, nil
	for _, w := range st.closing {
		C.free(unsafe.Pointer(w))
	}
	st.closing = nil
}

// forgetBuffers drops the cached bind groups that bind any of bufs (resident weights of
// an op being closed), so the device memory goes with the op.
func (b *Backend) forgetBuffers(bufs ...*buffer) {
	if err := b.dev.lock(context.Background()); err != nil {
		return
	}
	defer b.dev.unlock()
	if b.dt.cache == nil || b.dev.closed {
		return
	}
	for _, buf := range bufs {
		if buf != nil {
			b.forget(buf)
		}
	}
}

var _ ops.BufferCounter = (*Backend)(nil)

// LiveBuffers counts the device buffers alive now: those the device holds (device
// tensors, resident weights, pooled and cached scratch) and released ones that a cached
// bind group still keeps alive. It is exported only to implement ops.BufferCounter, for the
// leak tests of this package and the root package, which compare it before and after.
func (b *Backend) LiveBuffers() int {
	d := b.dev
	_ = d.lock(context.Background())
	defer d.unlock()
	n := len(d.buffers)
	seen := map[*buffer]bool{}
	for _, e := range b.dt.cache {
		k := &e.key
		for i := 0; i < int(k.nbinds); i++ {
			if buf := k.binds[i].buf; buf != nil && buf.c == nil && !seen[buf] {
				seen[buf] = true
				n++
			}
		}
	}
	return n
}

func (b *Backend) dropEntry(h uint64, e *callEntry) {
	C.drt_bind_group_release(b.dev.c, e.bg)
	b.dev.releaseLocked(e.params)
	for _, s := range e.scratch {
		b.dev.releaseLocked(s)
	}
	e.dropped = true
	delete(b.dt.cache, h)
}

// forget drops the cached bind groups that bind buf (a device tensor being freed).
func (b *Backend) forget(buf *buffer) {
	for h, e := range b.dt.cache {
		for i := 0; i < int(e.key.nbinds); i++ {
			if e.key.binds[i].buf == buf {
				b.dropEntry(h, e)
				break
			}
		}
	}
}

// entry returns the cached bind group and scratch of s, making them on a miss.
func (b *Backend) entry(s *callSpec) (*callEntry, error) {
	st := &b.dt
	st.tick++
	h := s.key.hash()
	if e := st.cache[h]; e != nil {
		if e.key.equal(&s.key) {
			e.used = st.tick
			return e, nil
		}
		b.dropEntry(h, e) // another key of the same hash: the newer takes the slot
	}
	if len(st.cache) >= cacheCap {
		var oldH uint64
		var old *callEntry
		for h, e := range st.cache {
			if old == nil || e.used < old.used {
				oldH, old = h, e
			}
		}
		b.dropEntry(oldH, old)
	}
	d := b.dev
	e := &callEntry{key: s.key, used: st.tick}
	fail := func(err error) (*callEntry, error) {
		C.drt_bind_group_release(d.c, e.bg)
		d.releaseLocked(e.params)
		for _, sb := range e.scratch {
			d.releaseLocked(sb)
		}
		return nil, fmt.Errorf("dawn: %s: %w", s.name, deviceErr(err))
	}
	k := &s.key
	if k.nparams > 0 {
		p, err := d.createLocked("fusednorm.params", uint64(k.nparams), usageUniform|usageCopyDst)
		if err != nil {
			return fail(err)
		}
		e.params = p
		C.drt_queue_write(d.c, p.c, 0, unsafe.Pointer(&k.params[0]), C.size_t(k.nparams))
	}
	for i, r := range k.scratch {
		if r.size == 0 {
			continue
		}
		sb, err := d.createLocked("fusednorm.scratch", r.size, r.usage)
		if err != nil {
			return fail(err)
		}
		e.scratch[i] = sb
	}
	n := int(k.nbinds)
	for i := 0; i < n; i++ {
		r := k.binds[i]
		var buf *buffer
		switch r.scratch {
		case atBuffer:
			buf = r.buf
		case atParams:
			buf = e.params
		default:
			buf = e.scratch[r.scratch]
		}
		st.cargs.binds[i] = C.drt_binding{binding: C.uint32_t(r.binding), buffer: buf.c, offset: C.uint64_t(r.off), size: C.uint64_t(r.size)}
	}
	if rc := C.drt_bind_group(d.c, k.pipe.bgl, &st.cargs.binds[0], C.int(n), &e.bg, d.errbuf, errCap); rc != C.DRT_OK {
		return fail(d.failure("(*device).BindGroup", rc))
	}
	st.cache[h] = e
	return e, nil
}

// exec runs a call: writes, copies, dispatch and reads in one submit; it waits only when
// the call reads something back (or s.wait is set, or kernel timing is on).
func (b *Backend) exec(ctx context.Context, s *callSpec) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dawn: %s: %w", s.name, err)
	}
	d := b.dev
	if s.key.pipe != nil {
		s.clock = ops.KernelClockFrom(ctx)
	}
	if err := d.lock(ctx); err != nil {
		return fmt.Errorf("dawn: %s: %w", s.name, err)
	}
	w, err := b.enqueue(s)
	d.unlock()
	if err != nil || w == nil {
		return err
	}
	return b.await(ctx, s, w)
}

// enqueue records and submits s; under the lock. It returns the waiter when the call waits.
func (b *Backend) enqueue(s *callSpec) (*waiter, error) {
	d := b.dev
	st := &b.dt
	if err := d.usable(s.name); err != nil {
		return nil, err
	}
	st.init()
	b.reapFast()
	// Every buffer the call names must still be alive (a device tensor closed meanwhile).
	for i := 0; i < int(s.key.nbinds); i++ {
		if r := s.key.binds[i]; r.scratch == atBuffer && r.buf.c == nil {
			return nil, fmt.Errorf("dawn: %s: binding %d: device tensor closed: %w", s.name, r.binding, ops.ErrInvalidArgument)
		}
	}
	var e *callEntry
	if s.key.pipe != nil {
		// A remembered spec (specmemo.go) keeps the entry it found, while the cache does.
		if e = s.entry; e != nil && !e.dropped {
			st.tick++
			e.used = st.tick
		} else {
			var err error
			if e, err = b.entry(s); err != nil {
				return nil, err
			}
			s.entry = e
		}
	}
	if s.zeroBytes > 0 && (st.zero == nil || st.zero.size < s.zeroBytes) {
		d.releaseLocked(st.zero)
		st.zero = nil
		z, err := d.createLocked("fusednorm.zero", max(s.zeroBytes, 256), usageCopySrc)
		if err != nil {
			return nil, fmt.Errorf("dawn: %s: %w", s.name, deviceErr(err))
		}
		st.zero = z // WebGPU buffers start zeroed
	}
	timed := s.key.pipe != nil && (s.clock != nil || b.timed.Load())
	wait := s.wait || s.nreads > 0 || timed
	if s.idCheck {
		if st.idBuf == nil {
			ib, err := d.createLocked("fusednorm.idstatus", idSlots*4, usageStorage|usageCopySrc|usageCopyDst)
			if err != nil {
				return nil, fmt.Errorf("dawn: %s: %w", s.name, deviceErr(err))
			}
			st.idBuf = ib
		}
		if st.idHead-st.idTail >= idSlots-1 {
			wait = true // the slots are full: this call collects them
		}
	}
	if err := injected(d.inject, "submit"); err != nil {
		return nil, fmt.Errorf("dawn: %s: %w: %w", s.name, ops.ErrDevice, err)
	}

	// Host inputs: one queue write each, into the entry's scratch.
	for i := 0; i < s.nwrites; i++ {
		wr := &s.writes[i]
		data := wr.data
		if len(wr.data2) > 0 {
			st.join = append(append(st.join[:0], wr.data...), wr.data2...)
			data = st.join
		}
		if d.useRing(uint64(len(data))) {
			if err := d.uploadLocked(s.name, e.scratch[wr.scratch], wr.off, data); err != nil {
				return nil, err
			}
			continue
		}
		C.drt_queue_write(d.c, e.scratch[wr.scratch].c, C.uint64_t(wr.off), unsafe.Pointer(&data[0]), C.size_t(len(data)))
	}
	st.seq++
	seq := st.seq
	idSlot := st.idHead
	ncopies := s.npre + s.npost
	for i := 0; i < ncopies; i++ {
		c := &s.copies[i]
		cc := &st.cargs.copies[i]
		cc.src = b.place(e, c.src, c.srcScratch, c.srcZero)
		cc.dst = b.place(e, c.dst, c.dstScratch, false)
		cc.src_offset, cc.dst_offset, cc.size = C.uint64_t(c.srcOff), C.uint64_t(c.dstOff), C.uint64_t(c.size)
		if c.dstIDStatus {
			cc.dst = st.idBuf.c
			cc.dst_offset = C.uint64_t((idSlot % idSlots) * 4)
		}
		if cc.src == nil || cc.dst == nil {
			return nil, fmt.Errorf("dawn: %s: copy %d: device tensor closed: %w", s.name, i, ops.ErrInvalidArgument)
		}
	}
	var wt *waiter
	nreads := s.nreads
	if wait {
		wt = b.getWaiter()
		wt.idRead = -1
		if st.idHead > st.idTail || s.idCheck {
			wt.idRead = nreads
			nreads++
		}
		for i := 0; i < nreads; i++ {
			var src *buffer
			var off, n uint64
			if i == wt.idRead {
				src, off, n = st.idBuf, 0, idSlots*4
			} else {
				r := &s.reads[i]
				src, off, n = r.buf, r.off, align4(uint64(len(r.dst)))
				if r.scratch != atBuffer {
					src = e.scratch[r.scratch]
				}
			}
			if src == nil || src.c == nil {
				b.putWaiter(wt)
				return nil, fmt.Errorf("dawn: %s: read %d: device tensor closed: %w", s.name, i, ops.ErrInvalidArgument)
			}
			sb, class, err := d.getStaging(s.name, n)
			if err != nil {
				b.putWaiter(wt)
				return nil, err
			}
			wt.staging[i], wt.classes[i] = sb, class
			wt.n = i + 1
			st.cargs.reads[i] = C.drt_read{src: src.c, src_offset: C.uint64_t(off), staging: sb, size: C.uint64_t(n)}
		}
		if timed {
			t, err := d.getTiming(s.name)
			if err != nil {
				b.putWaiter(wt)
				return nil, err
			}
			t.c.repeat = 1
			if s.clock != nil {
				t.c.repeat = C.uint32_t(min(max(s.clock.Repeat, 1), maxRepeat))
			}
			wt.timing = t
		}
	}
	// The error-scope verdict slot; a full ring is collected first.
	if st.head-st.tail >= ringSize {
		b.collect()
		for tries := 0; st.head-st.tail >= ringSize && tries < 1000; tries++ {
			time.Sleep(10 * time.Microsecond)
			b.collect()
		}
		if st.head-st.tail >= ringSize {
			st.tail++ // a verdict that never came: stop waiting for it
		}
	}
	var slot *C.drt_status
	if s.key.pipe != nil || ncopies > 0 || nreads > 0 {
		slot = st.slot(st.head)
		st.ringName[st.head%ringSize], st.ringSeq[st.head%ringSize] = s.name, seq
		st.head++
	}

	c := &st.cargs.call
	*c = C.drt_call{npre: C.int(s.npre), npost: C.int(s.npost), nreads: C.int(nreads), scope: slot}
	if s.key.pipe != nil {
		c.pl, c.bg = s.key.pipe.c, e.bg
		c.groups = [3]C.uint32_t{C.uint32_t(s.groups[0]), C.uint32_t(s.groups[1]), C.uint32_t(s.groups[2])}
	}
	if ncopies > 0 {
		c.copies = &st.cargs.copies[0]
	}
	if wt != nil {
		c.w = wt.w
		if nreads > 0 {
			c.reads = &st.cargs.reads[0]
		}
		if wt.timing != nil {
			c.timing = &wt.timing.c
		}
	}
	rc := C.drt_enqueue(d.c, c, d.errbuf, errCap)
	if rc != C.DRT_OK {
		if wt != nil {
			b.putWaiter(wt)
		}
		return nil, d.failure(s.name, rc)
	}
	if s.idCheck {
		st.idName[idSlot%idSlots], st.idSeq[idSlot%idSlots] = s.name, seq
		st.idHead++
	}
	// Fault site "async": the device fails the call after it was submitted, as a Dawn
	// error-scope verdict would; the next wait reports it.
	if err := injected(d.inject, "async"); err != nil && st.pending == nil {
		st.pending = fmt.Errorf("dawn: %s (call %d): %w: %w", s.name, seq, ops.ErrDevice, err)
	}
	if wt != nil {
		wt.idFrom, wt.idTo = st.idTail, st.idHead
	}
	return wt, nil
}

// place resolves a copy end to its C buffer.
func (b *Backend) place(e *callEntry, buf *buffer, scratch int8, zero bool) C.WGPUBuffer {
	switch {
	case zero:
		return b.dt.zero.c
	case scratch == atBuffer:
		if buf == nil {
			return nil
		}
		return buf.c
	case scratch == atNowhere:
		return nil
	}
	return e.scratch[scratch].c
}

// await waits for a submitted call, then reports earlier calls' errors, the call's own
// id check, and copies its reads out.
func (b *Backend) await(ctx context.Context, s *callSpec, wt *waiter) error {
	d := b.dev
	spin := true
	for {
		if err := d.lock(ctx); err != nil {
			b.abandon(wt)
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
			rc, spin = b.spinWait(wt, min(spinFor, slice)), false
		}
		if rc == C.DRT_ETIMEOUT {
			rc = C.drt_wait_all(d.c, wt.w, C.uint64_t(slice.Nanoseconds()), d.errbuf, errCap)
		}
		if rc == C.DRT_OK {
			break
		}
		if rc != C.DRT_ETIMEOUT {
			err := d.failure(s.name, rc)
			wt.abandoned = true
			b.dt.abandoned = append(b.dt.abandoned, wt)
			d.unlock()
			return err
		}
		if err := ctx.Err(); err != nil {
			wt.abandoned = true
			b.dt.abandoned = append(b.dt.abandoned, wt)
			d.unlock()
			return fmt.Errorf("dawn: %s: %w", s.name, err)
		}
		d.unlock()
	}
	defer d.unlock()
	defer b.putWaiter(wt)
	if rc := C.drt_wait_error(wt.w, d.errbuf, errCap); rc != C.DRT_OK {
		return d.failure(s.name, rc)
	}
	b.collect()
	if wt.idRead >= 0 {
		b.checkIDs(wt)
	}
	if err := b.takePendingLocked(); err != nil {
		return err
	}
	for i := 0; i < s.nreads; i++ {
		r := &s.reads[i]
		if err := d.copyMapped(s.name, wt.staging[i], r.dst); err != nil {
			return err
		}
	}
	if wt.timing != nil {
		var begin, end C.uint64_t
		if rc := C.drt_read_timestamps(d.c, &wt.timing.c, &begin, &end, d.errbuf, errCap); rc == C.DRT_OK && end >= begin {
			b.gpuTime.Store(int64(end - begin))
			if s.clock != nil {
				s.clock.Per = time.Duration(end-begin) / time.Duration(wt.timing.c.repeat)
			}
		}
		d.timings = append(d.timings, wt.timing)
		wt.timing = nil
	}
	return nil
}

// spinFor is how long a wait polls before it sleeps in the driver. A small call's wait is
// over in tens of microseconds, about what waking a thread from the driver's sleep costs on a
// VM, and a cgo call that blocks past 20 us also has the Go runtime hand its P to another
// thread and take one back on return; polling, each poll a short cgo call, pays neither. A
// long call polls for spinFor (a sliver of its time) and then sleeps. The C twin of the tiny
// benchmark (cgo/bench/tiny_bench.c) waits the same way.
const spinFor = 200 * time.Microsecond

// spinWait polls wt's futures until they are done, fail, or d passes: DRT_OK, an error, or
// DRT_ETIMEOUT. Under the lock.
func (b *Backend) spinWait(wt *waiter, d time.Duration) C.int {
	dev := b.dev
	end := time.Now().Add(d)
	for {
		rc := C.drt_wait_all(dev.c, wt.w, 0, dev.errbuf, errCap)
		if rc != C.DRT_ETIMEOUT || !time.Now().Before(end) {
			return rc
		}
	}
}

// checkIDs reads the id-status words the wait read back; under the lock.
func (b *Backend) checkIDs(wt *waiter) {
	st := &b.dt
	d := b.dev
	words := &st.cargs.ids
	if C.drt_copy_mapped(d.c, wt.staging[wt.idRead], unsafe.Pointer(&words[0]), idSlots*4, d.errbuf, errCap) != C.DRT_OK {
		return
	}
	from := max(wt.idFrom, st.idTail)
	for i := from; i < wt.idTo; i++ {
		if words[i%idSlots] != 0 && st.pending == nil {
			st.pending = fmt.Errorf("dawn: %s (call %d): input_ids, position_ids or segment_ids: input index out of range (detected on the device; that call's outputs are unspecified): %w",
				st.idName[i%idSlots], st.idSeq[i%idSlots], ops.ErrInvalidArgument)
		}
	}
	if wt.idTo > st.idTail {
		st.idTail = wt.idTo
	}
}

// collect runs pending callbacks and records the first failed verdict; under the lock.
func (b *Backend) collect() {
	st := &b.dt
	d := b.dev
	if st.ring == nil {
		return
	}
	C.drt_process_events(d.c)
	for st.tail < st.head {
		v := st.slot(st.tail)
		if v.done == 0 {
			break
		}
		if (v.status != C.WGPUPopErrorScopeStatus_Success || v._type != C.WGPUErrorType_NoError) && st.pending == nil {
			i := st.tail % ringSize
			st.pending = fmt.Errorf("dawn: %s (call %d): %w: %s", st.ringName[i], st.ringSeq[i], ops.ErrDevice, C.GoString(&v.msg[0]))
		}
		st.tail++
	}
	if err := d.uncapturedError("collect"); err != nil && st.pending == nil {
		st.pending = err
	}
	if err := d.usable("collect"); err != nil && st.pending == nil {
		st.pending = err
	}
}

// takePendingLocked returns the first unreported device error and forgets it.
func (b *Backend) takePendingLocked() error {
	err := b.dt.pending
	b.dt.pending = nil
	return err
}

// takePending reports, for the host-tensor path that waited on its own, the first device
// error of an earlier call that did not wait.
func (b *Backend) takePending() error {
	if err := b.dev.lock(context.Background()); err != nil {
		return err
	}
	defer b.dev.unlock()
	if b.dev.closed {
		return nil
	}
	b.collect()
	return b.takePendingLocked()
}

func (b *Backend) getWaiter() *waiter {
	st := &b.dt
	if n := len(st.waiters); n > 0 {
		w := st.waiters[n-1]
		st.waiters = st.waiters[:n-1]
		return w
	}
	return &waiter{w: (*C.drt_wait)(C.calloc(1, C.sizeof_drt_wait))}
}

// putWaiter unmaps and returns a finished waiter's staging buffers; under the lock.
func (b *Backend) putWaiter(wt *waiter) {
	d := b.dev
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
	wt.abandoned = false
	b.dt.waiters = append(b.dt.waiters, wt)
}

func (b *Backend) abandon(wt *waiter) {
	// Without the lock: hand it over at the next enqueue (the lock was not taken).
	_ = b.dev.lock(context.Background())
	wt.abandoned = true
	b.dt.abandoned = append(b.dt.abandoned, wt)
	b.dev.unlock()
}

// reapFast recycles abandoned waits the GPU has finished; under the lock.
func (b *Backend) reapFast() {
	st := &b.dt
	d := b.dev
	for i := 0; i < len(st.abandoned); {
		wt := st.abandoned[i]
		if C.drt_wait_all(d.c, wt.w, 0, d.errbuf, errCap) != C.DRT_OK {
			i++
			continue
		}
		st.abandoned = append(st.abandoned[:i], st.abandoned[i+1:]...)
		b.putWaiter(wt)
	}
}

// queueWrite queues n bytes at p into buf at off; under the lock.
func (d *device) queueWrite(buf *buffer, off uint64, p unsafe.Pointer, n int) {
	C.drt_queue_write(d.c, buf.c, C.uint64_t(off), p, C.size_t(n))
}

// closeFast releases the path's cached objects before the device closes.
func (b *Backend) closeFast() {
	if err := b.dev.lock(context.Background()); err != nil {
		return
	}
	defer b.dev.unlock()
	if !b.dev.closed {
		b.releaseFast()
	}
}
