// Package cpu is the CPU backend of package fusednorm: the reduction plan of spec §C.4
// in Go, with SIMD kernels chosen at run time where the processor has them. It gives the
// bits a GPU running the same plan gives, and is the fallback where there is no GPU.
//
// # Who imports it
//
// The API is the root package: fusednorm.Open(fusednorm.WithBackend("cpu")) runs this
// backend, and WithThreads, WithCPULevel, WithHugePages and WithContraction set its
// Options. Importing cpu directly is not supported: its methods take the module's internal
// op descriptors (internal/ops), which only the module's own packages can name, so New,
// Options and Backend are for those packages (the root opens the backend, dawn's tests
// take it as their bit-exact reference) and change with them.
//
// # Kernel levels
//
// Options.Level picks the kernels: "go" (the pure-Go twins, present on every build),
// "avx2" (AVX2+FMA+F16C), "avx512" (AVX-512 F/BW/VL) or "avx512fp16" (AVX512-FP16), each
// available where the processor has it and the build has assembly (amd64, without the
// noasm and purego tags). Empty means the widest available. Every level gives the same bits.
//
// # Thread safety
//
// A Backend and the ops it prepares are safe for concurrent use. Large calls are split over
// rows across up to Options.Threads goroutines (GOMAXPROCS by default), workers the Backend
// starts as calls need them and stops at Close.
//
// # Cancellation
//
// A call looks at its context, and at whether its Backend was closed, between steps of
// about 256 KiB of rows on each goroutine it runs on (a millisecond of work or less), and
// stops there: it returns ctx.Err() or ops.ErrClosed, with the rows it had computed written
// and the others as they were.
package cpu

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/cpuid/v2"

	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/plan"
)

// Options configure a CPU backend; the root package fills them in from its Open options.
type Options struct {
	// Profile is the contraction profile to mirror: unfused alone, or the profile a GPU
	// backend detected when the CPU serves as its bit-exact reference.
	Profile plan.Contraction
	// Threads bounds the goroutines one call uses; 0 means GOMAXPROCS.
	Threads int
	// Level picks the kernels (see Kernel levels): "go" or a SIMD level the processor has;
	// empty means the widest.
	Level string
	// NoHugePages leaves EmbedLayerNorm's word table on the pages it has. By default,
	// PrepareEmbed has Linux move a table of 16 MiB or more onto 2 MiB pages, on a
	// goroutine of its own that the op's Close and the Backend's Close stop and wait for
	// (hugepages.go).
	NoHugePages bool
}

// Backend is the CPU implementation of both ops: the ops.Backend the root package opens.
type Backend struct {
	opts  Options
	tune  tuning
	k     *kernels
	level string
	pool  *workers // the worker goroutines of its calls, and the huge-page collapses
}

// New returns a CPU backend with the default tuning, or an error wrapping
// ops.ErrUnavailable for a level this processor or build does not have.
func New(opts Options) (*Backend, error) { return newTuned(opts, defaultTuning()) }

// newTuned is New with a tuning of the caller's.
func newTuned(opts Options, tune tuning) (*Backend, error) {
	name := opts.Level
	if name == "" {
		name = levels[0].name
	}
	k := kernelsOf(name)
	if k == nil {
		return nil, fmt.Errorf("cpu: kernel level %q is not available (have %v): %w", name, levelNames(), ops.ErrUnavailable)
	}
	b := &Backend{opts: opts, tune: tune, k: k, level: name, pool: newWorkers()}
	// A Backend dropped without Close stops its workers when it is collected (they hold the
	// set, not the Backend).
	runtime.AddCleanup(b, (*workers).shut, b.pool)
	return b, nil
}

// Info names the backend, the processor and the kernel level in use.
func (b *Backend) Info() ops.Info {
	detail := fmt.Sprintf("kernels %s, threads %d, profile %s", b.level, b.threads(), b.opts.Profile)
	if b.opts.NoHugePages {
		detail += ", huge pages off"
	}
	return ops.Info{
		Name:    "cpu",
		Device:  cpuid.CPU.BrandName,
		Detail:  detail,
		Level:   b.level,
		Profile: b.opts.Profile,
	}
}

func (b *Backend) threads() int {
	if b.opts.Threads > 0 {
		return b.opts.Threads
	}
	return runtime.GOMAXPROCS(0)
}

// Plan is the reduction plan for rows of h elements under this backend's profile.
func (b *Backend) Plan(h int, half bool) plan.Plan { return plan.For(h, half, b.opts.Profile) }

// Close stops the backend: later calls, and calls in flight at their next step of rows,
// return ops.ErrClosed (the rows a call in flight had not computed are left as they were).
// It returns once the worker goroutines and the huge-page collapses the backend started
// have ended: within a step of rows and one madvise of a huge page. Close may be
// called concurrently with calls, and more than once.
func (b *Backend) Close() error {
	b.pool.close()
	return nil
}

// admit is the check at the start of a call: ctx.Err(), or ops.ErrClosed once the backend
// is closed.
func (b *Backend) admit(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if stopped(nil, b.pool.stop) {
		return ops.ErrClosed
	}
	return nil
}

// cut is the error of a call that forRows stopped before all its rows were computed:
// ctx.Err() when the context ended (context.DeadlineExceeded past its deadline, before the
// context's timer has run), else ops.ErrClosed.
func (b *Backend) cut(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return ops.ErrClosed
}

// tuning is how a Backend meets the memory system: sizes and distances that change where
// data is fetched from and how it is stored, never a value (every tuning gives the same
// bits). New takes defaultTuning(); the tests and BenchmarkStreamAB build backends with
// other tunings (newTuned) to reach every path and to compare settings.
type tuning struct {
	// bigBytes is the size from which data counts as past the caches (well past a core's
	// L2): f32 outputs that large are stored non-temporally, which saves the read of every
	// written line, and streamed or gathered inputs that large are prefetched.
	bigBytes int
	// prefetchAhead is how many rows (tokens) ahead of the one being computed the ops
	// prefetch their streamed inputs: EmbedLayerNorm's gathered word rows, AddLayerNorm's
	// x1, x2 and full bias (0: none).
	prefetchAhead int
	// prefetchSteps is how many pieces a row's prefetch is cut into, one after each pass
	// over the current row: issued at once, a row's lines would fill the core's miss
	// buffers and stall the work they should overlap.
	prefetchSteps int
	// hwStreamRow is the input row size (bytes) from which AddLayerNorm leaves its rows,
	// which follow each other in memory, to the hardware prefetchers, and reads them in
	// address order; shorter rows are prefetched a row ahead, and take the fused first pass.
	hwStreamRow int
	// shortRow: output rows of at most this many bytes are not prefetched ahead, as the
	// hardware prefetchers alone follow rows that short best, and AddLayerNorm's take the
	// kernels chosen once a call (shortKernels), which store through the caches, or past
	// the caches non-temporally where every row starts on a cache line (on the EPYC, one
	// thread, AddLayerNorm against the general path's non-temporal stores and a row's
	// prefetch: D 64 f16 0.81x the time, D 128 0.82x, f32 D 64 0.80x, D 128 0.92x; from D 256
	// f16 and f32 0.98-1.18x). EmbedLayerNorm's short rows are stored through the caches at
	// any size (non-temporal stores took 1.10-1.31x the time at H 64-256), and its gathered
	// rows are still prefetched (gatherBytes).
	shortRow int
	// hwGatherRow is hwStreamRow for EmbedLayerNorm's gathered word rows, which start at
	// random addresses, so the hardware prefetchers pay only on longer rows.
	hwGatherRow int
	// gatherBytes is the word table size from which EmbedLayerNorm's gathered rows count as
	// past the caches (prefetched a token ahead, or read in address order): a table past a
	// core's L2, well before bigBytes. On the EPYC, one thread, f16 H 64 (a 3.9 MB table)
	// took 0.74x the time prefetched.
	gatherBytes int
	// rowLead is how many bytes of the next row's inputs AddLayerNorm's streamed rows and
	// EmbedLayerNorm's gathered rows of at least hwGatherRow prefetch a row ahead (0: none):
	// the plan's first shift x0 is the row's first element, read before its first pass, which
	// would otherwise wait on a DRAM miss with nothing else in flight.
	rowLead int
	// wideBytes is the most that 16-bit gamma and beta may take widened to float32 for the
	// affine step to read them so (widened once per prepared EmbedLayerNorm, per
	// AddLayerNorm call), converting one vector instead of three; longer rows keep them
	// 16-bit, where they take half the L1 beside x.
	wideBytes int
	// sumPiece is how many elements of a row the 16-bit first passes work on at a time,
	// rounded up to a multiple of the plan width (sumPieceOf) so that pieces add whole
	// chunks onto the partials, in the plan's order. 4096 takes rows up to 4096 whole: the
	// staged row (16 KiB of f32) and its two 8 KiB inputs stay in a 48 KiB L1, and the
	// pass ends in the plan's tree in one kernel. On the H200 machine's Xeon, against 1024
	// (one chunk a piece at W 1024), 16-bit AddLayerNorm (16384,4096) took 0.92x the time at
	// one thread and 0.90x at 16, EmbedLayerNorm (256,512,4096) 0.96x and 0.90x.
	sumPiece int
	// pageChunks is the distance (bytes of one 16-bit input) between a partial's elements
	// from which AddLayerNorm's streamed 16-bit rows take the first pass whole, without
	// the pieces' prefetch: register blocks of partials go down every chunk, each chunk a
	// page or more from the next, so each is a stream in a page of its own, which the
	// hardware prefetchers follow, and no partial leaves the registers between chunks
	// (wholeRow).
	pageChunks int
	// hugeBytes is the word table size from which PrepareEmbed moves the table onto huge
	// pages: twice the reach of a core's second-level TLB over 4 KiB pages.
	hugeBytes int
}

// defaultTuning is the tuning of New's backends, chosen with BenchmarkStreamAB (which times
// other tunings paired with it) on AVX-512 and AVX2 machines.
func defaultTuning() tuning {
	return tuning{
		bigBytes:      4 << 20,
		prefetchAhead: 1,
		prefetchSteps: 3,
		hwStreamRow:   4096,
		shortRow:      512,
		hwGatherRow:   8192,
		gatherBytes:   1 << 20,
		rowLead:       256,
		wideBytes:     8 << 10,
		sumPiece:      4096,
		pageChunks:    4096,
		hugeBytes:     16 << 20,
	}
}

// prefetchPiece is the piece of a row prefetched per step (bytes, a whole number of 64-byte
// lines) for rows of up to rowBytes bytes: computed once per call, not per row.
func (t *tuning) prefetchPiece(rowBytes int) int {
	return max((rowBytes/max(1, t.prefetchSteps)+63)&^63, 64)
}

// sumPieceOf is the piece for plan width w: sumPiece rounded up to a multiple of w, so every
// piece adds whole chunks onto the partials (all of them: the first piece sets them, the
// later ones add on).
func (t *tuning) sumPieceOf(w int) int {
	return roundUp(t.sumPiece, w)
}

// wholeRow reports whether a streamed 16-bit row of d elements of size bytes under plan
// width w takes its first pass whole (pageChunks): its chunks at least pageChunks apart,
// and at most four of them (W 2048 and D ≤ 8192 in plan v2), what was measured.
func (t *tuning) wholeRow(w, d, size int) bool {
	return w*size >= t.pageChunks && d <= 4*w
}

// A call's rows on the Backend's worker goroutines: each chunk's scratch, then the workers.

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
	s.part = grow(s.part, 4*w) // the second pass's two partial sets, for two rows at once (shortPair)
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
