//go:build cgo

package dawnrt

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"
	"unsafe"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// A Call is one dispatch and the copies and read-backs around it, as a backend describes it
// and Device.Run executes it. Its pipeline, uniform parameters, scratch buffers and bind
// group are kept by the executor in a cache keyed by everything the bind group depends on
// (callKey), so a repeated call only records (and writes its host inputs, if any). Calls
// come from a pool in the caller: a Call is large, and a call of an op must not allocate.

const (
	maxBinds   = 12 // EmbedLayerNorm's bindings 0-11
	maxScratch = 10
	maxCopies  = 10
	maxReads   = 8
	maxWrites  = 8
	paramsCap  = 64
)

// Slot names where a binding, copy end or read lives: a buffer of its own (Buffer), the
// call's uniform parameters (Params), nowhere (Nowhere), or scratch i of the call (0, 1, …).
type Slot int8

const (
	AtBuffer Slot = -1
	AtParams Slot = -2
	Nowhere  Slot = -3
)

// bindRef is one binding of a call: a buffer, the params, or a scratch slot.
type bindRef struct {
	binding   uint32
	buf       *Buffer
	slot      Slot
	write     bool
	off, size uint64
	name      string // the tensor, for errors
}

type scratchReq struct {
	size  uint64
	usage Usage
}

// callKey is everything a call's bind group and scratch depend on.
type callKey struct {
	pipe    *Pipeline
	nparams uint8
	params  [paramsCap]byte
	nbinds  uint8
	binds   [maxBinds]bindRef
	scratch [maxScratch]scratchReq
}

// hash mixes the parts of k in use, a word at a time (a multiply and a rotate each; a
// collision costs a cache miss). The cache is keyed by it rather than by k: Go's hash of
// the whole struct, field by field, took about 1 us of a tiny call's Go time on the H200 host.
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
		mix(uint64(r.binding) | uint64(uint8(r.slot))<<32 | w<<40)
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
		a, b := &k.binds[i], &o.binds[i]
		if a.binding != b.binding || a.buf != b.buf || a.slot != b.slot || a.write != b.write || a.off != b.off || a.size != b.size {
			return false
		}
	}
	return true
}

// Copy is a buffer-to-buffer copy of a call, before or after its dispatch. Each end is a
// buffer (Slot AtBuffer) or a scratch slot; the source may be the device's zero buffer
// (SrcZero) and the destination the call's id-check slot (DstIDCheck).
type Copy struct {
	Src              *Buffer
	SrcSlot          Slot
	SrcOff           uint64
	Dst              *Buffer
	DstSlot          Slot
	DstOff           uint64
	Size             uint64 // a multiple of 4
	SrcZero          bool
	DstIDCheck       bool
	DstName, SrcName string // the tensors, for errors
}

type writeOp struct {
	slot  Slot
	off   uint64
	data  []byte
	data2 []byte // written right after data (gamma then beta), joined on the host
}

type readOp struct {
	buf  *Buffer
	slot Slot
	off  uint64
	dst  []byte
}

// Call is one call of a kernel; see the top of this file.
type Call struct {
	name    string
	key     callKey
	groups  [3]uint32
	writes  [maxWrites]writeOp
	nwrites int
	copies  [maxCopies]Copy
	npre    int
	npost   int
	reads   [maxReads]readOp
	nreads  int
	// zeroBytes is how many bytes of the device's zero buffer the copies use.
	zeroBytes uint64
	// idReport, when set, formats the id-check status word a post copy delivers (nonzero
	// when the kernel met an id out of range).
	idReport func(status uint32) error
	// wait: wait for the call even though it reads nothing back (Sync).
	wait bool
	// clock: time the kernel on the device; the call then waits.
	clock *ops.KernelClock
}

// Reset empties s for a new call named name (the op, as errors name it).
func (s *Call) Reset(name string) { *s = Call{name: name} }

// Kernel sets the call's pipeline and workgroup grid.
func (s *Call) Kernel(p *Pipeline, groups [3]uint32) { s.key.pipe, s.groups = p, groups }

// Params sets the uniform block (at most 64 bytes, padded to 16) and binds it at binding.
func (s *Call) Params(binding uint32, p []byte) {
	n := copy(s.key.params[:], p)
	n = min((n+15)&^15, paramsCap)
	s.key.nparams = uint8(n)
	s.bind(bindRef{binding: binding, slot: AtParams, size: uint64(n)})
}

func (s *Call) bind(r bindRef) {
	if int(s.key.nbinds) == maxBinds {
		panic("dawnrt: Call: too many bindings") // a bug in an op, not an input
	}
	s.key.binds[s.key.nbinds] = r
	s.key.nbinds++
}

// Bind binds size bytes of buf (a device tensor or resident weights) at binding; name is the
// tensor, write says the kernel writes it.
func (s *Call) Bind(binding uint32, name string, buf *Buffer, size uint64, write bool) {
	s.bind(bindRef{binding: binding, buf: buf, slot: AtBuffer, size: size, write: write, name: name})
}

// Scratch adds a scratch buffer of size bytes and returns its slot.
func (s *Call) Scratch(size uint64, usage Usage) Slot {
	for i := range s.key.scratch {
		if s.key.scratch[i].size == 0 {
			s.key.scratch[i] = scratchReq{size: max(align4(size), 4), usage: usage}
			return Slot(i)
		}
	}
	panic("dawnrt: Call: too many scratch buffers") // a bug in an op, not an input
}

// BindScratch binds size bytes of scratch slot at binding.
func (s *Call) BindScratch(binding uint32, name string, slot Slot, size uint64, write bool) {
	s.bind(bindRef{binding: binding, slot: slot, size: size, write: write, name: name})
}

// Input binds an input tensor at binding: buf where it is, else the host bytes through a
// scratch buffer the call writes first.
func (s *Call) Input(binding uint32, name string, buf *Buffer, host []byte, size uint64) {
	if buf != nil {
		s.Bind(binding, name, buf, size, false)
		return
	}
	i := s.Scratch(size, UsageStorage|UsageCopyDst)
	s.BindScratch(binding, name, i, size, false)
	s.Write(i, 0, host, nil)
}

// Output binds an output tensor at binding: buf where it is, else a scratch buffer read
// back into the host bytes.
func (s *Call) Output(binding uint32, name string, buf *Buffer, host []byte, size uint64) {
	if buf != nil {
		s.Bind(binding, name, buf, size, true)
		return
	}
	i := s.Scratch(size, UsageStorage|UsageCopySrc)
	s.BindScratch(binding, name, i, size, true)
	s.Read(nil, i, 0, host)
}

// Pre adds a copy recorded before the dispatch; Post one after it.
func (s *Call) Pre(c Copy) {
	if c.SrcZero {
		s.zeroBytes = max(s.zeroBytes, c.SrcOff+c.Size)
	}
	s.copies[s.npre+s.npost] = c
	if s.npost > 0 { // keep the pre copies first
		copy(s.copies[s.npre+1:], s.copies[s.npre:s.npre+s.npost])
		s.copies[s.npre] = c
	}
	s.npre++
}

// Post adds a copy recorded after the dispatch.
func (s *Call) Post(c Copy) {
	if c.SrcZero {
		s.zeroBytes = max(s.zeroBytes, c.SrcOff+c.Size)
	}
	s.copies[s.npre+s.npost] = c
	s.npost++
}

// Write writes host bytes (data, then data2 right after it) into scratch slot at off before
// the dispatch. Empty writes are dropped.
func (s *Call) Write(slot Slot, off uint64, data, data2 []byte) {
	if len(data)+len(data2) > 0 {
		s.writes[s.nwrites] = writeOp{slot: slot, off: off, data: data, data2: data2}
		s.nwrites++
	}
}

// Read reads len(dst) bytes of buf (or of scratch slot, buf nil) from off back into dst
// after the dispatch; the call then waits. An empty dst is dropped.
func (s *Call) Read(buf *Buffer, slot Slot, off uint64, dst []byte) {
	if len(dst) > 0 {
		if buf != nil {
			slot = AtBuffer
		}
		s.reads[s.nreads] = readOp{buf: buf, slot: slot, off: off, dst: dst}
		s.nreads++
	}
}

// CheckIDs makes a post copy with DstIDCheck deliver the kernel's id-check status word; the
// next wait reports a nonzero word as report's error (an *ops.ArgError, as a rule), wrapped
// in a message naming the call.
func (s *Call) CheckIDs(report func(status uint32) error) { s.idReport = report }

// Wait makes the call wait for the work submitted so far, even with nothing to read back.
func (s *Call) Wait() { s.wait = true }

// CheckAliases refuses a call whose written buffer is also bound elsewhere (WebGPU forbids a
// writable binding that aliases another in one dispatch) or receives two outputs.
func (s *Call) CheckAliases() error {
	n := int(s.key.nbinds)
	for i := 0; i < n; i++ {
		a := s.key.binds[i]
		if !a.write || a.slot != AtBuffer {
			continue
		}
		for j := 0; j < n; j++ {
			if b := s.key.binds[j]; j != i && b.buf == a.buf {
				return fmt.Errorf("dawn: %s: %s and %s are the same device tensor: %w", s.name, a.name, b.name, ops.ErrInvalidArgument)
			}
		}
	}
	for i := 0; i < s.npre+s.npost; i++ {
		c := s.copies[i]
		if c.Dst == nil {
			continue
		}
		for j := 0; j < n; j++ {
			if r := s.key.binds[j]; r.buf == c.Dst {
				return fmt.Errorf("dawn: %s: %s and %s are the same device tensor: %w", s.name, c.DstName, r.name, ops.ErrInvalidArgument)
			}
		}
		for j := 0; j < s.npre+s.npost; j++ {
			if o := s.copies[j]; j != i && o.Dst == c.Dst {
				return fmt.Errorf("dawn: %s: %s and %s are the same device tensor: %w", s.name, c.DstName, o.DstName, ops.ErrInvalidArgument)
			}
		}
	}
	return nil
}
