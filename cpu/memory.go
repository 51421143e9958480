package cpu

import (
	"unsafe"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// Memory-level work of the big ops. A row of the ops is a few KiB and every kernel on it
// is cheap, so at the bench shapes the time goes to DRAM: the latency of the gathered word
// rows (EmbedLayerNorm) and the write-allocate reads of the outputs. Nothing here changes a
// value: prefetches fetch, and non-temporal stores write the bits the normal kernels would.

// copyGo is the twin of copyNT.
func copyGo(dst, src []float32) { copy(dst, src[:len(dst)]) }

// add3NTGo is the twin of the Add3NT kernels (the separate first pass of addSum with x and c): s =
// (a + b) + c, and x = s.
func add3NTGo(s, x, a, b, c []float32) {
	add3Go(s, a, b, c)
	copy(x[:len(s)], s)
}

// rowPrefetch is up to three rows being prefetched a piece at a time. The zero value and
// nil prefetch nothing.
type rowPrefetch struct {
	k     *kernelSet
	rows  [3][]byte
	piece int // bytes per step and row, a whole number of 64-byte lines
}

// newRowPrefetch starts a prefetch, piece bytes of each row a step (tuning.prefetchPiece).
func newRowPrefetch(k *kernelSet, piece int) rowPrefetch {
	return rowPrefetch{k: k, piece: piece}
}

// add queues elements [off, off+n) of b (the first three rows added count).
func (p *rowPrefetch) add(b ops.Buf, off, n int) {
	var r []byte
	if b.DType == ops.F32 {
		r = bytesOf(b.F32[off : off+n])
	} else {
		r = bytesOf(b.U16[off : off+n])
	}
	for i := range p.rows {
		if len(p.rows[i]) == 0 {
			p.rows[i] = r
			return
		}
	}
}

// bytesOf views a slice's elements as bytes.
func bytesOf[E float32 | uint16](s []E) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(s[0])))
}

// step prefetches the next piece of every row.
func (p *rowPrefetch) step() {
	if p == nil {
		return
	}
	for i, r := range p.rows {
		if len(r) > 0 {
			n := min(p.piece, len(r))
			p.k.prefetch(r[:n])
			p.rows[i] = r[n:]
		}
	}
}

// rest prefetches what is left.
func (p *rowPrefetch) rest() {
	if p == nil {
		return
	}
	for i, r := range p.rows {
		if len(r) > 0 {
			p.k.prefetch(r)
			p.rows[i] = nil
		}
	}
}
