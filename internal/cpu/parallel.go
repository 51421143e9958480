package cpu

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
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
	s.part = grow(s.part, 2*w) // the second pass's two partial sets
}

// Row parallelism without allocation.
//
// A call splits its rows into contiguous chunks, one per goroutine, and runs them on a set
// of long-lived worker goroutines, not on goroutines of its own: a go statement allocates
// (the closure carrying its arguments, and a goroutine when none is free for reuse), and so
// does a closure that outlives its frame, while a steady-state call must allocate nothing.
// So the work of one call is a rowWork (a pointer to a pooled struct holding the call's
// state, with the call's rowJoin inside), a chunk is a task value, and a task travels to
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
//
// Each Backend has its own set (a workers), which its Close stops: the idle workers exit
// at once, a busy one after the step of rows it is computing, and Close returns when none
// is left. A Backend dropped without Close stops its set when the garbage collector finds
// it unreachable.
//
// Cancellation. A chunk is computed in steps of about stepBytes of rows; between two steps
// the goroutine computing it looks (without blocking) at the call's ctx.Done(), at the
// context's deadline and at its backend's stop channel, and when the context is done, the
// deadline passed or the backend stopped, it marks the call cut and leaves the rest of its
// chunk. So a call notices a cancelled context or a closed backend within about a step of
// work (a millisecond or less) on each of its goroutines, and the rows not yet computed
// are left as they were. The deadline is read from the clock, not only from ctx.Done():
// the timer that closes Done runs when a P enters the scheduler, which a P busy with
// the chunks of a call does not do until the runtime preempts it, 10 ms or more later.

// stepBytes is how much row data (rows × row length × 4 bytes) a goroutine computes between
// two looks at the call's cancellation: 256 KiB, about 0.1-0.2 ms with the SIMD kernels and
// a millisecond with the pure-Go ones (on the development VM, loaded). A look costs a
// select (60-100 ns there) and, under a deadline, a clock read (300 ns more on that VM):
// under 0.5% of a step.
const stepBytes = 256 << 10

// rowsPerStep is the number of rows of h elements in a step: at least one.
func rowsPerStep(h int) int { return max(1, stepBytes/(4*max(h, 1))) }

// rowWork is one call's work: rows computes rows [lo, hi) with sc sized for the call.
type rowWork interface {
	rows(lo, hi int, sc *scratch)
}

// rowJoin is what a call's goroutines share besides the work: the WaitGroup its caller
// waits on, when to stop, and whether a goroutine left its chunk unfinished. It lives in
// the pooled call struct, idle between calls.
type rowJoin struct {
	wg       sync.WaitGroup
	done     <-chan struct{} // the call's ctx.Done() (nil for a context that is never done)
	deadline time.Time       // the call's ctx.Deadline(); zero without one
	stop     <-chan struct{} // the worker set's
	cut      atomic.Bool
}

// halted reports, without blocking, whether the call is to stop: its context done or past
// its deadline, or its backend closed.
func (j *rowJoin) halted() bool {
	select {
	case <-j.done:
		return true
	case <-j.stop:
		return true
	default:
	}
	return !j.deadline.IsZero() && !time.Now().Before(j.deadline)
}

// task is a chunk of a call handed to a worker.
type task struct {
	work   rowWork
	lo, hi int
	h, w   int      // row length and plan width, for sizing the worker's scratch
	join   *rowJoin // the call's; Done once the chunk is computed or cut
}

// workers is one Backend's set of worker goroutines.
type workers struct {
	tasks   chan task     // unbuffered: a send completes only into an idle worker's hands
	stop    chan struct{} // closed by close: workers exit, calls in flight are cut
	started atomic.Int64  // worker goroutines started (never decreases)
	mu      sync.Mutex    // orders the start of a worker against close
	closed  bool
	live    sync.WaitGroup // the workers (and spawned goroutines) not yet exited
}

func newWorkers() *workers {
	return &workers{tasks: make(chan task), stop: make(chan struct{})}
}

// close stops the set: idle workers exit at once, busy ones once their chunk is done or
// cut, and calls in flight are cut at their next step. It returns when every worker has
// exited.
func (p *workers) close() {
	p.shut()
	p.live.Wait()
}

// shut is close without the wait (for a Backend the garbage collector found unreachable).
func (p *workers) shut() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.stop)
	}
	p.mu.Unlock()
}

// spawn runs f on a goroutine that close waits for; false (f not run) once the set is
// stopped. f is to watch the stop channel.
func (p *workers) spawn(f func()) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.live.Add(1)
	go func() {
		defer p.live.Done()
		f()
	}()
	return true
}

// worker runs its first task, then those it receives, until the set is stopped.
func (p *workers) worker(t task) {
	defer p.live.Done()
	t.run()
	for {
		select {
		case t := <-p.tasks:
			t.run()
		case <-p.stop:
			return
		}
	}
}

func (t task) run() {
	runRows(t.work, t.lo, t.hi, t.h, t.w, t.join)
	t.join.wg.Done()
}

// runRows runs rows [lo, hi) of work with a pooled scratch, a step at a time; it leaves
// the rest and marks join cut once the call is halted. The first step goes without a look:
// the call looked as it started (Backend.admit), and a call of one step (most small ones)
// pays for no look at all.
func runRows(work rowWork, lo, hi, h, w int, join *rowJoin) {
	sc := scratchPool.Get().(*scratch)
	sc.size(h, w)
	step := rowsPerStep(h)
	for lo < hi {
		end := min(lo+step, hi)
		work.rows(lo, end, sc)
		if lo = end; lo < hi && join.halted() {
			join.cut.Store(true)
			break
		}
	}
	scratchPool.Put(sc)
}

// stopped reports, without blocking, whether done or stop is closed (a nil channel never
// is).
func stopped(done, stop <-chan struct{}) bool {
	select {
	case <-done:
		return true
	case <-stop:
		return true
	default:
		return false
	}
}

// handOff gives t to an idle worker, or to a new one while fewer than limit have been
// started and the set is not stopped; false when none can take it.
func (p *workers) handOff(t task, limit int) bool {
	select {
	case p.tasks <- t:
		return true
	default:
	}
	if p.started.Load() >= int64(limit) {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.started.Load() >= int64(limit) {
		return false
	}
	p.started.Add(1)
	p.live.Add(1)
	go p.worker(t)
	return true
}

// forRows runs work over [0, rows) split into contiguous chunks, one per goroutine
// (threads ≤ 0 means GOMAXPROCS); each chunk gets its own scratch sized for rows of h
// elements and plan width w. join belongs to the call (it is idle between calls). forRows
// returns when every chunk is done or cut, and reports whether all rows were computed:
// false when ctx ended or the set was stopped before some were (those are left unwritten).
//
// A split call hands every chunk to a worker and parks until they are done, as a call
// that started a goroutine per chunk did: a readied worker waits in its P's runnext slot,
// which another P steals only after a sleep while the P is busy, so a caller that went on
// computing a chunk itself would keep its peer waiting. The caller computes the chunks no
// worker could take.
func (p *workers) forRows(ctx context.Context, rows, h, w, threads int, work rowWork, join *rowJoin) bool {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	join.done, join.stop = ctx.Done(), p.stop
	join.deadline, _ = ctx.Deadline()
	join.cut.Store(false)
	n := min(threads, rows, max(1, rows*h/minElemsPerWorker))
	lo := 0
	if n > 1 {
		chunk := (rows + n - 1) / n
		for ; lo < rows; lo += chunk {
			join.wg.Add(1)
			t := task{work: work, lo: lo, hi: min(lo+chunk, rows), h: h, w: w, join: join}
			if !p.handOff(t, threads+1) {
				join.wg.Done()
				break
			}
		}
	}
	if lo < rows {
		runRows(work, lo, rows, h, w, join)
	}
	join.wg.Wait()
	join.done, join.stop = nil, nil
	return !join.cut.Load()
}
