package cpu

import (
	"runtime"
	"sync"
)

// minElemsPerWorker keeps small problems on one goroutine: below it, the cost of waking
// another core exceeds the work (about 64 KiB of f32 per worker).
const minElemsPerWorker = 1 << 14

// scratch is one worker's row buffers, reused across calls through scratchPool.
type scratch struct {
	x, y, t []float32
	part    []float32
	bits    []uint16
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

func grow(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

func (s *scratch) size(h, w int) {
	s.x = grow(s.x, h)
	s.y = grow(s.y, h)
	s.t = grow(s.t, h)
	s.part = grow(s.part, w)
}

// forRows runs fn over [0, rows) split into contiguous chunks, one per worker; each worker
// gets its own scratch sized for rows of h elements and plan width w.
func forRows(rows, h, w, threads int, fn func(lo, hi int, sc *scratch)) {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	workers := min(threads, rows, max(1, rows*h/minElemsPerWorker))
	if workers <= 1 {
		sc := scratchPool.Get().(*scratch)
		sc.size(h, w)
		fn(0, rows, sc)
		scratchPool.Put(sc)
		return
	}
	var wg sync.WaitGroup
	chunk := (rows + workers - 1) / workers
	for lo := 0; lo < rows; lo += chunk {
		hi := min(lo+chunk, rows)
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := scratchPool.Get().(*scratch)
			sc.size(h, w)
			fn(lo, hi, sc)
			scratchPool.Put(sc)
		}()
	}
	wg.Wait()
}
