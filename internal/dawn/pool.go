//go:build cgo

package dawn

import (
	"fmt"
	"math/bits"
	"sync"
	"unsafe"
)

// pool keeps per-call device buffers for reuse, by usage and power-of-two size class.
type pool struct {
	dev  *device
	mu   sync.Mutex
	free map[poolKey][]*buffer
}

type poolKey struct {
	usage bufferUsage
	size  uint64
}

// maxPooled caps how many idle buffers of one class the pool keeps.
const maxPooled = 8

func sizeClass(n uint64) uint64 {
	if n <= 256 {
		return 256
	}
	return 1 << bits.Len64(n-1)
}

// get returns a buffer of at least n bytes and its pool key.
func (p *pool) get(label string, n uint64, usage bufferUsage) (*buffer, poolKey, error) {
	k := poolKey{usage, sizeClass(n)}
	p.mu.Lock()
	if l := p.free[k]; len(l) > 0 {
		b := l[len(l)-1]
		p.free[k] = l[:len(l)-1]
		p.mu.Unlock()
		return b, k, nil
	}
	p.mu.Unlock()
	b, err := p.dev.createBuffer(label, k.size, usage)
	if err != nil {
		return nil, k, deviceErr(fmt.Errorf("dawn: buffer %s (%d bytes): %w", label, k.size, err))
	}
	return b, k, nil
}

// put returns a buffer to the pool.
func (p *pool) put(k poolKey, b *buffer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.free == nil {
		p.free = make(map[poolKey][]*buffer)
	}
	if len(p.free[k]) >= maxPooled {
		b.release()
		return
	}
	p.free[k] = append(p.free[k], b)
}

func (p *pool) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.free {
		for _, b := range l {
			b.release()
		}
	}
	p.free = nil
}

// lease collects the pooled buffers of one call so they go back together.
type lease struct {
	p    *pool
	bufs []*buffer
	keys []poolKey
}

func (l *lease) get(label string, n uint64, usage bufferUsage) (*buffer, error) {
	b, k, err := l.p.get(label, n, usage)
	if err != nil {
		return nil, err
	}
	l.bufs = append(l.bufs, b)
	l.keys = append(l.keys, k)
	return b, nil
}

func (l *lease) done() {
	for i, b := range l.bufs {
		l.p.put(l.keys[i], b)
	}
}

// align4 rounds a byte count up to a whole number of u32 words.
func align4(n uint64) uint64 { return (n + 3) &^ 3 }

// write uploads data at off; a length that is not a whole number of words (odd 16-bit
// tensors) gets its last partial word padded with zeros, without copying the rest.
func (b *Backend) write(buf *buffer, off uint64, data []byte) error {
	whole := len(data) &^ 3
	if whole > 0 {
		if err := b.dev.writeBuffer(buf, off, data[:whole]); err != nil {
			return deviceErr(err)
		}
	}
	if tail := data[whole:]; len(tail) > 0 {
		var w [4]byte
		copy(w[:], tail)
		if err := b.dev.writeBuffer(buf, off+uint64(whole), w[:]); err != nil {
			return deviceErr(err)
		}
	}
	return nil
}

// readPlan collects the readbacks of one call, straight into the caller's slices.
type readPlan struct{ reads []readback }

func (r *readPlan) add(src *buffer, off uint64, dst []byte) {
	if len(dst) > 0 {
		r.reads = append(r.reads, readback{Src: src, Offset: off, Dst: dst})
	}
}

// bytesOf views an int32 or float32 slice as bytes without copying.
func bytesOf[T int32 | float32 | uint32](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*4)
}
