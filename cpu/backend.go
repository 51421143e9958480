// Package cpu is the CPU backend: the reduction plan of SPEC.md §C.4 in Go, with SIMD
// kernels chosen at run time where the processor has them. It gives the bits a GPU running
// the same plan gives, and is the fallback where there is no GPU.
//
// # Thread safety
//
// A Backend and the ops it prepares are safe for concurrent use. Large calls are split over
// rows across up to Options.Threads goroutines (GOMAXPROCS by default).
package cpu

import (
	"fmt"
	"runtime"

	"github.com/klauspost/cpuid/v2"

	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/plan"
)

// Options configure a CPU backend.
type Options struct {
	// Profile is the contraction profile to mirror: unfused alone, or the profile a GPU
	// backend detected when the CPU serves as its bit-exact reference.
	Profile plan.Contraction
	// Threads bounds the goroutines one call uses; 0 means GOMAXPROCS.
	Threads int
	// Level caps the kernels: "go" (pure Go) or a SIMD level the processor has; "" = best.
	Level string
	// NoHugePages leaves EmbedLayerNorm's word table on the pages it has. By default,
	// PrepareEmbed asks Linux to move a table of hugeBytes or more onto 2 MiB pages
	// (hugepages.go).
	NoHugePages bool
}

// Backend is the CPU implementation of both ops.
type Backend struct {
	opts  Options
	k     *kernelSet
	level string
}

// New returns a CPU backend, or an error wrapping ops.ErrUnavailable for a level this
// processor or build does not have.
func New(opts Options) (*Backend, error) {
	name := opts.Level
	if name == "" {
		name = level
	}
	k := kernelsOf(name)
	if k == nil {
		return nil, fmt.Errorf("cpu: kernel level %q is not available (have %v): %w", name, Levels(), ops.ErrUnavailable)
	}
	return &Backend{opts: opts, k: k, level: name}, nil
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
func (b *Backend) Plan(h int) plan.Plan { return plan.For(h, b.opts.Profile) }

// Close releases nothing: the CPU backend holds no resources.
func (b *Backend) Close() error { return nil }

// Level names the default kernel level of new backends: the widest this processor runs,
// unless SetLevel chose another.
func Level() string { return level }

var level = "go"
