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
