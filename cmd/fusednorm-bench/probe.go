package main

import (
	"slices"

	"github.com/fusednorm/fusednorm/internal/cpu"
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
	// Paired: each timed run of the case was followed by one copy and one stream pass, so
	// the op and the probe were measured over the same minutes (these machines drift);
	// else the probe ran after the case, on its own.
	Paired bool `json:"paired"`
}

// Best is the higher of the two copy figures: the rate the machine moved this many bytes
// at, read plus written, which the % of probe column divides by. (Go's copy is one stream
// each way; the ops stream two or three, which some processors serve faster.)
func (p probeResult) Best() float64 { return max(p.CopyGBps, p.StreamGBps) }

// prober holds the probe's buffers over a byte count: halves for the copy, quarters for
// the two interleaved copies, the whole for the read.
type prober struct {
	threads                int
	buf, src, dst          []uint64
	srcA, srcB, dstA, dstB []float32
	copyBytes, streamBytes int64
	sums                   []uint64 // one cache line per worker
}

// newProber allocates `bytes` bytes and faults them in, each page by the worker that uses
// it.
func newProber(bytes int64, threads int) *prober {
	threads = max(1, threads)
	words := max(int(bytes/8), threads) // uint64 words over the whole byte count
	p := &prober{threads: threads, buf: make([]uint64, words), sums: make([]uint64, threads*8)}
	half := words / 2
	p.src, p.dst = p.buf[:half], p.buf[half:2*half]
	parallel(threads, len(p.buf), func(_, lo, hi int) {
		for i := lo; i < hi; i++ {
			p.buf[i] = uint64(i)
		}
	})
	quarter := words / 4 * 2 // float32 elements per quarter
	f := unsafe.Slice((*float32)(unsafe.Pointer(&p.buf[0])), 2*words)
	p.srcA, p.srcB, p.dstA, p.dstB = f[:quarter], f[quarter:2*quarter], f[2*quarter:3*quarter], f[3*quarter:4*quarter]
	p.copyBytes, p.streamBytes = int64(2*half*8), int64(4*quarter*4)
	return p
}

// copyPass is dst = src over the two halves (Go's copy).
func (p *prober) copyPass() time.Duration {
	t := time.Now()
	parallel(p.threads, len(p.src), func(_, lo, hi int) { copy(p.dst[lo:hi], p.src[lo:hi]) })
	return time.Since(t)
}

// streamPass is two copies at once, a row at a time, as AddLayerNorm streams x1, x2 in and
// y, x out, with the CPU kernels' non-temporal stores.
func (p *prober) streamPass() time.Duration {
	const row = 4096 // elements: 16 KiB
	t := time.Now()
	parallel(p.threads, len(p.srcA), func(_, lo, hi int) {
		for r := lo; r < hi; r += row {
			e := min(r+row, hi)
			cpu.CopyNT(p.dstA[r:e], p.srcA[r:e])
			cpu.CopyNT(p.dstB[r:e], p.srcB[r:e])
		}
	})
	return time.Since(t)
}

// readPass sums the whole byte count.
func (p *prober) readPass() time.Duration {
	t := time.Now()
	parallel(p.threads, len(p.buf), func(w, lo, hi int) {
		p.sums[w*8] += sumWords(p.buf[lo:hi])
	})
	probeSink = p.sums[0]
	return time.Since(t)
}

// result is the probe's figures from the pass times taken (the median of each).
func (p *prober) result(copies, streams, reads []time.Duration, paired bool) probeResult {
	gbps := func(bytes int64, d []time.Duration) float64 {
		d = slices.Clone(d)
		slices.Sort(d)
		return float64(bytes) / max(float64(d[len(d)/2].Nanoseconds()), 1)
	}
	return probeResult{
		CopyGBps:   gbps(p.copyBytes, copies),
		StreamGBps: gbps(p.streamBytes, streams),
		ReadGBps:   gbps(int64(len(p.buf)*8), reads),
		Reps:       len(copies),
		Paired:     paired,
	}
}

// pairedShare is the median over the timed runs of the op's rate over the probe's in the
// passes right after it (the better of the copy and the stream). Each ratio is taken over
// the same second, so a shared machine's drift from one moment to the next cancels out of
// it, where a ratio of the two medians keeps it.
func (p *prober) pairedShare(bytes int64, ops, copies, streams []time.Duration) float64 {
	ns := func(d time.Duration) float64 { return max(float64(d.Nanoseconds()), 1) }
	ratios := make([]float64, len(ops))
	for i, d := range ops {
		probe := max(float64(p.copyBytes)/ns(copies[i]), float64(p.streamBytes)/ns(streams[i]))
		ratios[i] = float64(bytes) / ns(d) / probe
	}
	slices.Sort(ratios)
	return ratios[len(ratios)/2]
}

// probe moves `bytes` bytes with `threads` goroutines, each on its own contiguous slice,
// and reports the median of reps passes of each kernel after two unmeasured ones (which
// also fault the pages in): the probe taken after a case, when the two do not fit in
// memory together.
func probe(bytes int64, threads int) probeResult {
	reps := 21
	if bytes > 4e8 {
		reps = 5
	}
	p := newProber(bytes, threads)
	return p.result(passes(reps, p.copyPass), passes(reps, p.streamPass), passes(reps, p.readPass), false)
}

// passes runs fn twice unmeasured, then reps times, and returns the times.
func passes(reps int, fn func() time.Duration) []time.Duration {
	fn()
	fn()
	t := make([]time.Duration, reps)
	for i := range t {
		t[i] = fn()
	}
	return t
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
