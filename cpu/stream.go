package cpu

import (
	"unsafe"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// Memory-level work of the big ops. A row of the ops is a few KiB and every kernel on it
// is cheap, so at the bench shapes the time goes to DRAM: the latency of the gathered word
// rows (EmbedLayerNorm) and the write-allocate reads of the outputs. Nothing here changes a
// value: prefetches fetch, and non-temporal stores write the bits the normal kernels would.

// bigBytes is the size from which data counts as past the caches (well past a core's L2):
// f32 outputs that large are stored non-temporally (bypassing the caches, which saves the
// read of every written line: the output would leave the cache before anyone reads it), and
// streamed or gathered inputs that large are prefetched. A variable so tests can lower it.
var bigBytes = 4 << 20

// copyGo is the twin of copyNT.
func copyGo(dst, src []float32) { copy(dst, src[:len(dst)]) }

// add3NTGo is the twin of the Add3NT kernels (the separate first pass of addSum with x and c): s =
// (a + b) + c, and x = s.
func add3NTGo(s, x, a, b, c []float32) {
	add3Go(s, a, b, c)
	copy(x[:len(s)], s)
}

// prefetchAhead is how many rows (tokens) ahead of the one being computed the ops
// prefetch their streamed inputs: the gathered word rows of EmbedLayerNorm, and x1, x2 and
// a full bias of AddLayerNorm.
var prefetchAhead = 1

// hwStreamRow is the input row size (bytes) from which AddLayerNorm leaves its inputs,
// which follow each other row after row, to the hardware prefetchers instead of
// prefetching a row ahead: the first pass reads a row in address order, and the
// prefetchers run ahead into the next one. BenchmarkStreamAB measures it, as a multiple of
// the bandwidth probe's time (lower is better; docs/measurements/*-stream-ab.txt):
//
//	                   Xeon avx512        EPYC avx2
//	                   ahead  hardware    ahead  hardware
//	f32, 32 KiB rows   1.62   1.33        1.52   1.24
//	f32, 16 KiB rows   1.48   1.31        1.60   1.26
//	f32,  3 KiB rows   1.16   1.32        1.24   1.44
//	f16, 16 KiB rows   2.80   1.83        2.95   2.22
//	f16,  8 KiB rows   2.69   1.72        2.29   2.04
//	f16,  1.5 KiB rows 1.94   1.86        2.10   2.35
//
// A row prefetched ahead is in the caches when the first pass reads it, so it takes the
// fused addSum rather than addSumStream's two passes: on the Xeon that was 0-6% faster on
// AddLN f32 rows of 3 KiB and 5-8% on EmbedLN f32 rows of 3 and 4 KiB (paired, as above;
// within the noise on the EPYC).
var hwStreamRow = 4096

// hwGatherRow is hwStreamRow for the gathered word rows of EmbedLayerNorm. A gathered row
// starts at a random address, so its first lines wait out the whole latency without a
// prefetch, and the rows must be longer before the hardware prefetchers pay
// (BenchmarkStreamAB OP=embed, (B,S,H) = (16,512,4096) and (64,512,1024); at 8 KiB the
// two machines disagree, by less than their noise):
//
//	                   Xeon avx512        EPYC avx2
//	                   ahead  hardware    ahead  hardware
//	f32, 16 KiB rows   1.14   1.11        1.21   1.10
//	f16,  8 KiB rows   1.51   1.58        2.04   1.84
//	f32,  4 KiB rows   0.98   1.12        1.28   1.44
//	f16,  2 KiB rows   1.43   1.60        1.99   2.21
var hwGatherRow = 8192

// prefetchSteps is how many pieces a row prefetch is cut into: one after each pass the
// current row makes (the sum with its partial sums, the variance pass, the affine step).
// Issued at once, a 3 KiB row's 48 lines would fill the core's miss buffers and stall the
// work they should overlap; spread out they overlap it.
var prefetchSteps = 3

// rowPrefetch is up to three rows being prefetched a piece at a time. The zero value and
// nil prefetch nothing.
type rowPrefetch struct {
	k     *kernelSet
	rows  [3][]byte
	piece int // bytes per step and row, a whole number of 64-byte lines
}

// prefetchPiece is the piece (bytes per step) for rows of up to rowBytes bytes: computed
// once per call, not per row.
func prefetchPiece(rowBytes int) int {
	return max((rowBytes/max(1, prefetchSteps)+63)&^63, 64)
}

// newRowPrefetch starts a prefetch, piece bytes of each row a step (from prefetchPiece).
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
