package main

import (
	"slices"

	"github.com/fusednorm/fusednorm/cpu"
	"sync"
	"time"
	"unsafe"
)

// probeResult is the machine's memory bandwidth over a case's byte count, sampled in the
// same run as the case (these machines drift), counted the STREAM way: bytes read plus
// bytes written, 1 GB = 1e9 B.
type probeResult struct {
	CopyGBps   float64 `json:"copy_GBps"`   // dst = src over two halves of the byte count (Go's copy)
	StreamGBps float64 `json:"stream_GBps"` // two such copies interleaved in 16 KiB rows, non-temporal stores of the CPU kernels
	ReadGBps   float64 `json:"read_GBps"`   // a sum over the whole byte count
	Reps       int     `json:"reps"`
}

// Best is the higher of the two copy figures: the rate the machine moved this many bytes
// at, read plus written, which the % of probe column divides by. (Go's copy is one stream
// each way; the ops stream two or three, which some processors serve faster.)
func (p probeResult) Best() float64 { return max(p.CopyGBps, p.StreamGBps) }

// probe moves `bytes` bytes with `threads` goroutines, each on its own contiguous slice,
// and reports the median of reps passes of each kernel after two unmeasured ones (which
// also fault the pages in).
func probe(bytes int64, threads int) probeResult {
	threads = max(1, threads)
	reps := 21
	if bytes > 4e8 {
		reps = 5
	}
	words := max(int(bytes/8), threads) // uint64 words over the whole byte count
	buf := make([]uint64, words)
	half := words / 2
	src, dst := buf[:half], buf[half:2*half]
	parallel(threads, len(buf), func(_, lo, hi int) { // first touch, by the thread that uses it
		for i := lo; i < hi; i++ {
			buf[i] = uint64(i)
		}
	})
	res := probeResult{Reps: reps}
	res.CopyGBps = float64(2*half*8) / medianPass(reps, func() {
		parallel(threads, half, func(_, lo, hi int) { copy(dst[lo:hi], src[lo:hi]) })
	})
	// Two copies at once, a row at a time, as AddLayerNorm streams x1, x2 in and y, x out.
	quarter := words / 4 * 2 // float32 elements per quarter
	f := unsafe.Slice((*float32)(unsafe.Pointer(&buf[0])), 2*words)
	srcA, srcB, dstA, dstB := f[:quarter], f[quarter:2*quarter], f[2*quarter:3*quarter], f[3*quarter:4*quarter]
	const row = 4096 // elements: 16 KiB
	res.StreamGBps = float64(4*quarter*4) / medianPass(reps, func() {
		parallel(threads, quarter, func(_, lo, hi int) {
			for r := lo; r < hi; r += row {
				e := min(r+row, hi)
				cpu.CopyNT(dstA[r:e], srcA[r:e])
				cpu.CopyNT(dstB[r:e], srcB[r:e])
			}
		})
	})
	sums := make([]uint64, threads*8) // one cache line per worker
	res.ReadGBps = float64(words*8) / medianPass(reps, func() {
		parallel(threads, words, func(w, lo, hi int) {
			sums[w*8] += sumWords(buf[lo:hi])
		})
	})
	probeSink = sums[0]
	return res
}

// probeSink keeps the read kernel from being optimized away.
var probeSink uint64

// sumWords reads s with four independent accumulators, so the loop is bound by loads, not
// by one add chain.
func sumWords(s []uint64) uint64 {
	var a, b, c, d uint64
	i := 0
	for ; i+4 <= len(s); i += 4 {
		a += s[i]
		b += s[i+1]
		c += s[i+2]
		d += s[i+3]
	}
	for ; i < len(s); i++ {
		a += s[i]
	}
	return a + b + c + d
}

// medianPass times fn reps times after two warm-up passes and returns the median in
// nanoseconds, so bytes/ns is GB/s.
func medianPass(reps int, fn func()) float64 {
	fn()
	fn()
	t := make([]float64, reps)
	for i := range t {
		t0 := time.Now()
		fn()
		t[i] = float64(time.Since(t0).Nanoseconds())
	}
	slices.Sort(t)
	return max(t[reps/2], 1)
}

// parallel splits [0, n) into at most one contiguous range per worker w, aligned to
// cache lines.
func parallel(workers, n int, fn func(w, lo, hi int)) {
	const align = 64 / int(unsafe.Sizeof(uint64(0)))
	chunk := ((n+workers-1)/workers + align - 1) / align * align
	if workers == 1 || chunk >= n {
		fn(0, 0, n)
		return
	}
	var wg sync.WaitGroup
	for w, lo := 0, 0; lo < n; w, lo = w+1, lo+chunk {
		hi := min(lo+chunk, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(w, lo, hi)
		}()
	}
	wg.Wait()
}
