package cpu

import (
	"slices"
	"unsafe"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// kernels is one level: for each family of hot loops, the assembly kernels of one vector
// width, each of which handles the whole vectors of its slices. The families' methods on it
// are the dispatch, in each family's Go file: they check lengths the way the Go twins do (so a
// short slice panics instead of being overrun), run the whole vectors here, hand what is
// left to narrower, and the go level (no lanes, no kernels) runs the twins. Every level
// gives the twins' bits. Each Backend holds the level it runs.
//
// One kernel group per family F: internal/cmd/asmgen generates the group's kernels,
// F_amd64.s, and their declarations, F_amd64.go (go generate ./cpu); vectables_amd64.go,
// generated too, holds each width's table of them. The family's form struct, Go twins and
// dispatch are in the Go file named here:
//
//	sum       sum.go       the plan's accumulations and halving tree (sumForm)
//	addsum    sum.go       the elementwise adds and a row's first pass fused with its sum (addForm)
//	affine    affine.go    the affine step, float32 or rounded to 16 bits (affineForm)
//	convert   convert.go   widening and narrowing of 16-bit data (convForm)
//	embedsum  embedsum.go  EmbedLayerNorm's staged binary16 sums (embedForm), the avx512fp16 ones too
//	mask      mask.go      mask_index's rules (ops.MaskRule)
//	memory    kernels.go   non-temporal copy, prefetch and fence (this file, after the levels)
type kernels struct {
	lanes    int      // float32 lanes of the width; 0 at the go level
	tails    bool     // the kernels finish their slices under lane masks (AVX-512): see reach and treeRow
	narrower *kernels // takes what this width leaves: the next narrower width, else the go level
	sums     sumKernels
	adds     addKernels
	affines  affineKernels
	convs    convKernels
	embeds   embedKernels
	masks    maskKernels
	mem      memKernels
}

// goKernels is the pure-Go level, present on every build: no kernels, every family's twins.
var goKernels kernels

// simd reports whether k has kernels (it is not the go level).
func (k *kernels) simd() bool { return k.lanes != 0 }

// whole is the length of the whole vectors of an n-element slice.
func (k *kernels) whole(n int) int { return n &^ (k.lanes - 1) }

// reach is how many elements of an n-element slice the width's elementwise kernels
// (affine, convert, the adds' rows, the staged embedding sums) take: every one where they
// finish the tail under a lane mask (tails: internal/cmd/asmgen's loopTail), else the whole
// vectors. A row of D 1023 f16 went through four calls a step and the twin for its last
// seven elements (the twins about 15% of its time); under the mask the tail is one more
// iteration of the kernel.
func (k *kernels) reach(n int) int {
	if k.tails {
		return n
	}
	return k.whole(n)
}

// from is v[i:], or nil for a nil v (an operand the form leaves out).
func from[E any](v []E, i int) []E {
	if v == nil {
		return nil
	}
	return v[i:]
}

type namedLevel struct {
	name string
	k    *kernels
}

// levels are the kernel sets this processor can run, widest first; "go" is always last, and
// the first is the default of a Backend whose Options.Level is empty.
var levels = []namedLevel{{"go", &goKernels}}

// addLevel registers a SIMD level, from an init that has checked cpuid; a wider level is
// registered after the narrower ones it builds on.
func addLevel(name string, k *kernels) {
	levels = slices.Insert(levels, 0, namedLevel{name, k})
}

// levelNames names the levels, widest first: "avx512fp16", "avx512", "avx2", "go" on a
// machine with AVX512-FP16 (and AVX-512 F/BW/VL); "avx512", "avx2", "go" on one with
// AVX-512 F/BW/VL; "avx2", "go" on an AVX2+FMA+F16C machine; "go" alone in noasm and
// purego builds and on other architectures.
func levelNames() []string {
	names := make([]string, len(levels))
	for i, l := range levels {
		names[i] = l.name
	}
	return names
}

// kernelsOf returns the named level's kernels, or nil when this processor or build lacks it.
func kernelsOf(name string) *kernels {
	i := slices.IndexFunc(levels, func(l namedLevel) bool { return l.name == name })
	if i < 0 {
		return nil
	}
	return levels[i].k
}

// Levels names the kernel levels this processor and build run, widest first and "go" last:
// the values Options.Level accepts here.
func Levels() []string { return levelNames() }

// CopyNT copies src into dst (len(dst) elements) with the non-temporal stores of the widest
// level, then fences: the store side of fusednorm-bench's bandwidth probe, which streams the
// way the ops stream their outputs. Without SIMD kernels it is copy.
func CopyNT(dst, src []float32) {
	k := levels[0].k
	k.copyNT(dst, src)
	k.fence()
}

// The memory family: memory-level work of the big ops. A row of the ops is a few KiB and
// every kernel on it is cheap, so at the bench shapes the time goes to DRAM: the latency of
// the gathered word rows (EmbedLayerNorm) and the write-allocate reads of the outputs.
// Nothing here changes a value: prefetches fetch, and non-temporal stores write the bits
// ordinary stores would. The NT stores are weakly ordered: a worker that used them calls
// fence before its rows are shared.

// memKernels are a width's memory kernels.
type memKernels struct {
	copyNT   func(dst, src []float32) // whole vectors, dst aligned to the vector
	prefetch func(b []byte)           // every 64-byte line of b
	fence    func()                   // SFENCE
}

// copyGo is the twin of copyNT.
func copyGo(dst, src []float32) { copy(dst, src[:len(dst)]) }

// copyNT is copy with non-temporal stores for the whole vectors from dst's first aligned
// address on (the caller fences).
func (k *kernels) copyNT(dst, src []float32) {
	src = src[:len(dst)]
	if !k.simd() {
		copyGo(dst, src)
		return
	}
	h := k.ntHead(dst)
	copy(dst[:h], src[:h])
	dst, src = dst[h:], src[h:]
	n := k.whole(len(dst))
	if n > 0 {
		k.mem.copyNT(dst[:n], src)
	}
	copy(dst[n:], src[n:])
}

// prefetch asks for the lines of b (nothing at the go level).
func (k *kernels) prefetch(b []byte) {
	if k.simd() {
		k.mem.prefetch(b)
	}
}

// fence orders the non-temporal stores before it before any store after it.
func (k *kernels) fence() {
	if k.simd() {
		k.mem.fence()
	}
}

// ntHead is how many elements of y come before its first vector-aligned address (the part
// the non-temporal kernels leave to others), or len(y) when y is not even 4-byte aligned.
func (k *kernels) ntHead(y []float32) int {
	if len(y) == 0 {
		return 0
	}
	a := uintptr(unsafe.Pointer(&y[0]))
	if a&3 != 0 {
		return len(y)
	}
	return min(len(y), int(-a&uintptr(4*k.lanes-1))/4) // the vector's size, a power of two
}

// nt16Head is ntHead for 16-bit values: the elements of y before its first address aligned
// to one vector of them.
func (k *kernels) nt16Head(y []uint16) int {
	if len(y) == 0 {
		return 0
	}
	a := uintptr(unsafe.Pointer(&y[0]))
	if a&1 != 0 {
		return len(y)
	}
	return min(len(y), int(-a&uintptr(2*k.lanes-1))/2)
}

// lineSplit is how a width whose kernels finish their tails (tails) stores a row y
// non-temporally: its first h elements, up to y's first 64-byte line, and those after the
// next n (whole lines) through the cache, the n non-temporally (all of y through the cache
// where y is not aligned to its elements). A line that rows share (D 1023, D 1000) is
// written by two rows' plain stores and stays in the cache between them; a line that
// half took non-temporal stores (from a vector boundary, as nt16Head splits) and half plain
// ones cost the whole row: AddLayerNorm f16 D 1023 ran no faster with every tail in its
// kernel until the split followed the lines.
func lineSplit[E float32 | uint16](y []E) (h, n int) {
	if len(y) == 0 {
		return 0, 0
	}
	size := int(unsafe.Sizeof(y[0]))
	a := uintptr(unsafe.Pointer(&y[0]))
	if a%uintptr(size) != 0 {
		return len(y), 0
	}
	h = min(len(y), int(-a&63)/size)
	return h, (len(y) - h) &^ (64/size - 1)
}

// tailLines prefetches the cache line holding element end (a row's last) of y, and of x
// where present, before the row is computed (both ops, rows off the lines). Such a row's
// last partial line (and the next row's first, the same line) takes plain stores
// (lineSplit): its read from DRAM, the first store's miss, would hold up every store behind
// it (AddLayerNorm f16 D 1023, one thread: the plain stores of the few elements at the rows'
// ends took a third of the affine step's and x's time).
func (k *kernels) tailLines(end int, y, x *ops.Buf) {
	k.prefetch(bufBytes(y, end, 1))
	if x.Present() {
		k.prefetch(bufBytes(x, end, 1))
	}
}

// narrowHead16 reports whether y starts off a vector's boundary by whole vectors of the
// next narrower width, with a vector of this width after them: narrowing y non-temporally
// (kernels.narrow) then needs neither the go level's twin nor plain stores past the head.
func (k *kernels) narrowHead16(y []uint16) bool {
	h := k.nt16Head(y)
	n := k.narrower
	return h != 0 && h < len(y) && (k.tails || n != nil && n.simd() && h%n.lanes == 0)
}

// rowPrefetch is up to three rows being prefetched a piece at a time. The zero value and
// nil prefetch nothing.
type rowPrefetch struct {
	k     *kernels
	rows  [3][]byte
	piece int // bytes per step and row, a whole number of 64-byte lines
}

// newRowPrefetch starts a prefetch, piece bytes of each row a step (tuning.prefetchPiece).
func newRowPrefetch(k *kernels, piece int) rowPrefetch {
	return rowPrefetch{k: k, piece: piece}
}

// add queues elements [off, off+n) of b (the first three rows added count).
func (p *rowPrefetch) add(b ops.Buf, off, n int) {
	r := bufBytes(&b, off, n)
	for i := range p.rows {
		if len(p.rows[i]) == 0 {
			p.rows[i] = r
			return
		}
	}
}

// bufBytes views elements [off, off+n) of a float32 or 16-bit host buffer as bytes.
func bufBytes(b *ops.Buf, off, n int) []byte {
	if b.DType == ops.F32 {
		return bytesOf(b.F32[off : off+n])
	}
	return bytesOf(b.U16[off : off+n])
}

// bytesOf views a slice's elements as bytes.
func bytesOf[E float32 | uint16](s []E) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(s[0])))
}

// prefetchLead prefetches the first n bytes of elements [off, …) of b (at most to b's end):
// the lead of a row (tuning.rowLead).
func (k *kernels) prefetchLead(b *ops.Buf, off, n int) {
	k.prefetch(bufBytes(b, off, min(n/b.DType.Size(), b.Len()-off)))
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
