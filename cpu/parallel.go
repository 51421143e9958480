package cpu

import (
	"runtime"
	"sync"
	"sync/atomic"
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

// Row parallelism without allocation.
//
// A call splits its rows into contiguous chunks, one per goroutine, and runs them on a set
// of long-lived worker goroutines, not on goroutines of its own: a go statement allocates
// (the closure carrying its arguments, and a goroutine when none is free for reuse), and so
// does a closure that outlives its frame, while a steady-state call must allocate nothing.
// So the work of one call is a rowWork (a pointer to a pooled struct holding the call's
// state, with the call's WaitGroup inside), a chunk is a task value, and a task travels to
// a worker over an unbuffered channel: sending a struct value allocates nothing.
//
// The handoff never blocks. A send succeeds only into the hands of a worker idle in its
// receive; with none idle, a new worker starts while the set is smaller than the call's
// thread count plus one (so the set grows lazily to the largest thread count any call
// asked for, Options.Threads included, and no further: the one spare covers a worker of
// the previous call still on its way back to the channel). Past that, every CPU the calls
// may use is busy, and the caller computes the chunks not handed off itself. A caller
// therefore only ever waits for chunks that a running worker holds, never for one queued
// behind a busy worker, so a call made from inside a worker (or from many goroutines at
// once) cannot deadlock. Idle workers park on the channel and cost nothing but their
// stacks.

// rowWork is one call's work: rows computes rows [lo, hi) with sc sized for the call.
type rowWork interface {
	rows(lo, hi int, sc *scratch)
}

// task is a chunk of a call handed to a worker.
type task struct {
	work   rowWork
	lo, hi int
	h, w   int             // row length and plan width, for sizing the worker's scratch
	wg     *sync.WaitGroup // the call's, inside the pooled call struct; Done once the chunk is computed
}

var (
	rowTasks   = make(chan task) // unbuffered: a send completes only into an idle worker's hands
	rowWorkers atomic.Int64      // worker goroutines started
)

// worker runs its first task, then those it receives, for the life of the process.
func worker(t task) {
	t.run()
	for t := range rowTasks {
		t.run()
	}
}

func (t task) run() {
	runRows(t.work, t.lo, t.hi, t.h, t.w)
	t.wg.Done()
}

// runRows runs rows [lo, hi) of work with a pooled scratch.
func runRows(work rowWork, lo, hi, h, w int) {
	sc := scratchPool.Get().(*scratch)
	sc.size(h, w)
	work.rows(lo, hi, sc)
	scratchPool.Put(sc)
}

// handOff gives t to an idle worker, or to a new one while fewer than limit have been
// started; false when neither can take it.
func handOff(t task, limit int) bool {
	select {
	case rowTasks <- t:
		return true
	default:
	}
	for {
		n := rowWorkers.Load()
		if n >= int64(limit) {
			return false
		}
		if rowWorkers.CompareAndSwap(n, n+1) {
			go worker(t)
			return true
		}
	}
}

// forRows runs work over [0, rows) split into contiguous chunks, one per goroutine
// (threads ≤ 0 means GOMAXPROCS); each chunk gets its own scratch sized for rows of h
// elements and plan width w. wg belongs to the call (it is idle between calls); forRows
// returns when every chunk is done.
//
// A split call hands every chunk to a worker and parks until they are done, as a call
// that started a goroutine per chunk did: a readied worker waits in its P's runnext slot,
// which another P steals only after a sleep while the P is busy, so a caller that went on
// computing a chunk itself would keep its peer waiting. The caller computes the chunks no
// worker could take.
func forRows(rows, h, w, threads int, work rowWork, wg *sync.WaitGroup) {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	n := min(threads, rows, max(1, rows*h/minElemsPerWorker))
	lo := 0
	if n > 1 {
		chunk := (rows + n - 1) / n
		for ; lo < rows; lo += chunk {
			wg.Add(1)
			if !handOff(task{work: work, lo: lo, hi: min(lo+chunk, rows), h: h, w: w, wg: wg}, threads+1) {
				wg.Done()
				break
			}
		}
	}
	if lo < rows {
		runRows(work, lo, rows, h, w)
	}
	wg.Wait()
}
