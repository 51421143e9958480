package fusednorm

import (
	"runtime"
	"slices"
	"sync"
	"unsafe"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// A Kernel keeps the op it prepared for the weight tensors of its last call (EmbedLayerNorm's
// tables, gamma and beta; AddLayerNorm's gamma, beta and bias) and reuses it while the same
// tensors come back with the same attributes, so a bind-key call stops uploading (or, on the
// CPU, moving onto huge pages) a word table it already holds. "The same tensor" is identity,
// not value: the same dtype, shape and memory (a host tensor's first element and length, a
// device tensor's storage), as for NewEmbedLayerNorm, whose weights must not change while it
// is in use.

// weightID identifies a tensor by what it is rather than by its values.
type weightID struct {
	dt    DType
	shape []int
	ptr   unsafe.Pointer
	n     int
	dev   ops.DeviceMem
}

func idOf(t Tensor) weightID {
	id := weightID{dt: t.DType(), shape: t.shape, dev: t.buf.Dev}
	switch {
	case t.buf.F32 != nil:
		id.ptr, id.n = unsafe.Pointer(unsafe.SliceData(t.buf.F32)), len(t.buf.F32)
	case t.buf.U16 != nil:
		id.ptr, id.n = unsafe.Pointer(unsafe.SliceData(t.buf.U16)), len(t.buf.U16)
	case t.buf.I32 != nil:
		id.ptr, id.n = unsafe.Pointer(unsafe.SliceData(t.buf.I32)), len(t.buf.I32)
	}
	return id
}

func (a weightID) same(b weightID) bool {
	return a.dt == b.dt && a.ptr == b.ptr && a.n == b.n && a.dev == b.dev && slices.Equal(a.shape, b.shape)
}

// preparedKey is what a prepared op was made from: its weights and the options that bind.
type preparedKey struct {
	w [5]weightID
	c opConfig
}

func (k *preparedKey) same(o *preparedKey) bool {
	for i := range k.w {
		if !k.w[i].same(o.w[i]) {
			return false
		}
	}
	return k.c == o.c
}

// preparedOp is one prepared op a Kernel holds, closed once it is replaced and no call uses it.
type preparedOp struct {
	key   preparedKey
	embed *EmbedLayerNorm
	add   *AddLayerNorm
	users int
	stale bool
}

func (p *preparedOp) close() {
	if p.embed != nil {
		p.embed.Close()
	}
	if p.add != nil {
		p.add.Close()
	}
}

// kernelCache is a Kernel's prepared op, shared by its concurrent calls.
type kernelCache struct {
	mu       sync.Mutex
	cur      *preparedOp
	prepared int // ops prepared so far (tests read it)
}

// use runs call with the prepared op for key, preparing one with prepare when the cached one
// was made from other weights or options.
func (kc *kernelCache) use(key *preparedKey, prepare func(*preparedOp) error, call func(*preparedOp) error) error {
	p, err := kc.acquire(key, prepare)
	if err != nil {
		return err
	}
	defer kc.release(p)
	return call(p)
}

// acquire returns the prepared op for key (see use), counted as in use until release.
func (kc *kernelCache) acquire(key *preparedKey, prepare func(*preparedOp) error) (*preparedOp, error) {
	kc.mu.Lock()
	defer kc.mu.Unlock()
	if p := kc.cur; p != nil && p.key.same(key) {
		p.users++
		return p, nil
	}
	p := &preparedOp{key: *key}
	for i := range p.key.w {
		p.key.w[i].shape = slices.Clone(p.key.w[i].shape) // the caller may reuse its shape slices
	}
	if err := prepare(p); err != nil {
		return nil, err
	}
	kc.retire()
	p.users = 1
	kc.cur = p
	kc.prepared++
	return p, nil
}

// release ends a call's use of p.
func (kc *kernelCache) release(p *preparedOp) {
	kc.mu.Lock()
	defer kc.mu.Unlock()
	p.users--
	if p.stale && p.users == 0 {
		p.close()
	}
}

// retire drops the cached op, closing it now if no call uses it (else its last call does).
// Under kc.mu.
func (kc *kernelCache) retire() {
	if p := kc.cur; p != nil {
		kc.cur, p.stale = nil, true
		if p.users == 0 {
			p.close()
		}
	}
}

// Close releases the op the Kernel holds prepared (its device memory, on a GPU). The Kernel
// stays usable: its next call prepares again. A Kernel that becomes unreachable releases it
// too, at some point after.
func (k *Kernel) Close() error {
	k.cache.mu.Lock()
	defer k.cache.mu.Unlock()
	k.cache.retire()
	return nil
}

// newKernel makes a Kernel whose prepared op is released when the Kernel is garbage.
func newKernel(e *Engine, c *opContract, m *manifest) *Kernel {
	k := &Kernel{eng: e, c: c, m: m, cache: new(kernelCache)}
	runtime.AddCleanup(k, func(kc *kernelCache) {
		kc.mu.Lock()
		defer kc.mu.Unlock()
		kc.retire()
	}, k.cache)
	return k
}
