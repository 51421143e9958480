package fusednorm

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/fusednorm/fusednorm/internal/cpu"
	"github.com/fusednorm/fusednorm/internal/dawn"
	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/plan"
	"github.com/fusednorm/fusednorm/internal/softauto"
)

// Contraction is a device's contraction profile: which multiply-adds of the reduction plan
// it fuses (spec §C.4). Engine.Info reports it; WithContraction makes the CPU mirror it.
type Contraction = plan.Contraction

// Backend names accepted by WithBackend and FUSEDNORM_BACKEND.
const (
	BackendAuto = "auto" // with a hardware adapter, Dawn and the CPU, chosen per call (ReportBackend); else the CPU
	BackendCPU  = "cpu"
	BackendDawn = "dawn"
)

// Info says which backend an engine runs and why it was chosen.
type Info struct {
	Backend string      // "cpu" or "dawn"
	Device  string      // CPU model or GPU adapter line
	Detail  string      // kernel level, threads, contraction profile, driver
	Level   string      // CPU kernel level ("go", "avx2"); empty on a GPU
	Reason  string      // why this backend: the option, the env var, or the auto fallback cause
	Profile Contraction // contraction profile of the reduction plan
	Library string      // the Dawn library file loaded; empty on the CPU
	// Health says what befell the device since Open: each loss and how long the recovery
	// took, or, in auto mode, that the engine moved to the CPU for good (Backend then says
	// "cpu"). Empty when nothing did.
	Health string
}

// String is a one-line summary for logs.
func (i Info) String() string {
	s := fmt.Sprintf("%s on %s [%s] (%s)", i.Backend, i.Device, i.Detail, i.Reason)
	if i.Health != "" {
		s += " health: " + i.Health
	}
	return s
}

// Engine runs the ops on one backend. It is safe for concurrent use.
type Engine struct {
	be        ops.Backend
	reason    string
	mu        sync.RWMutex
	closed    bool
	closing   atomic.Bool // set at once by Close: new calls fail without waiting for it
	closeOnce sync.Once
	closeErr  error // what the backend's Close returned
	// allocCap, when > 0, lowers the bound on the bytes one call allocates for its
	// outputs below allocBound() (tests reach the refusal with small tensors).
	allocCap int
}

// Open chooses a backend: the WithBackend option, else FUSEDNORM_BACKEND, else auto. Auto
// with Dawn loaded on a real (not software) adapter runs device-tensor calls on the GPU and
// each host-tensor call where calls of its shape were timed to finish sooner, the GPU or the
// CPU backend (which mirrors the GPU's contraction profile, so the bits are the same), a cost
// model measured at Open placing a new shape's first call; see ReportBackend and the README's
// "What auto picks and why". Without such an adapter auto
// runs on the CPU, with the cause recorded in Info.
func Open(opts ...Option) (*Engine, error) {
	var c config
	for _, o := range opts {
		o(&c)
	}
	name, source := c.backend, "option"
	if name == "" {
		name, source = os.Getenv(EnvBackend), EnvBackend
	}
	if name == "" {
		name, source = BackendAuto, "default"
	}
	name = strings.ToLower(strings.TrimSpace(name))
	if c.dawnLib == "" {
		c.dawnLib = envDawnLib()
	}
	if c.cpuLevel == "" {
		c.cpuLevel, c.levelSource = os.Getenv(EnvCPULevel), EnvCPULevel
	}
	if c.threads < 0 {
		return nil, fmt.Errorf("fusednorm: Open: WithThreads(%d): the goroutines of one CPU call must be >= 1, or 0 for GOMAXPROCS: %w",
			c.threads, ErrInvalidArgument)
	}
	if c.adapterSet && name != BackendCPU {
		if i, err := strconv.Atoi(strings.TrimSpace(c.adapter)); (err == nil && i < 0) || strings.TrimSpace(c.adapter) == "" {
			return nil, fmt.Errorf("fusednorm: Open: WithAdapter(%q): want an index >= 0 or part of an adapter's name: %w", c.adapter, ErrInvalidArgument)
		}
	}
	switch name {
	case BackendCPU:
		be, err := newCPU(&c)
		if err != nil {
			return nil, err
		}
		return &Engine{be: be, reason: "cpu requested by " + source}, nil
	case BackendDawn:
		be, err := openDawn(&c)
		if err != nil {
			return nil, fmt.Errorf("fusednorm: Open: dawn requested by %s: %w", source, err)
		}
		return &Engine{be: be, reason: "dawn requested by " + source}, nil
	case BackendAuto:
		c.quietLoader = true // the loader's "Found no drivers" must not print on every GPU-less Open
		be, err := openDawn(&c)
		if err == nil && be.Info().Software && !c.autoSoftware && !softauto.Kept() {
			// A CPU rasterizer (lavapipe) runs the shaders correctly but far slower than the
			// CPU backend: auto takes the CPU; WithBackend("dawn") still gets the adapter.
			err = fmt.Errorf("dawn: only a software adapter (%s); the CPU backend is faster", be.Info().Device)
			be.Close()
		}
		if err != nil {
			cb, cerr := newCPU(&c)
			if cerr != nil {
				return nil, cerr
			}
			return &Engine{be: cb, reason: "auto: dawn unavailable: " + err.Error()}, nil
		}
		return openRouter(&c, be)
	}
	return nil, fmt.Errorf("fusednorm: Open: backend %q (from %s) is not one of auto, cpu, dawn: %w",
		name, source, ErrInvalidArgument)
}

// openRouter is auto mode with a GPU open: the CPU backend beside it, mirroring its
// contraction profile, and the cost model that places a new host-tensor call shape's first
// call (route.go). When
// the model cannot be measured, the engine runs on the GPU alone and Reason says why.
func openRouter(c *config, gpu ops.Backend) (*Engine, error) {
	cc := *c
	p := gpu.Info().Profile
	cc.profile = &p
	cb, err := newCPU(&cc)
	if err != nil {
		gpu.Close()
		return nil, err
	}
	m, err := calibrateRoute(gpu, cb)
	if err != nil {
		cb.Close()
		return &Engine{be: gpu, reason: "auto: dawn loaded; no routing to the cpu (the cost model failed: " + err.Error() + ")"}, nil
	}
	reason := fmt.Sprintf("auto: device-tensor calls on dawn; host-tensor calls on the cpu or dawn, per call shape whichever its timed calls finished sooner, the model's guess first (model: %s)", &m)
	return &Engine{be: newRouter(gpu, cb, m), reason: reason}, nil
}

func envDawnLib() string { return os.Getenv(EnvDawnLib) }

func newCPU(c *config) (ops.Backend, error) {
	level, err := cpuLevel(c.cpuLevel, c.levelSource)
	if err != nil {
		return nil, err
	}
	o := cpu.Options{Threads: c.threads, Level: level, NoHugePages: c.noHuge}
	if c.profile != nil {
		o.Profile = *c.profile
	}
	be, err := cpu.New(o)
	if err != nil {
		return nil, fmt.Errorf("fusednorm: Open: %w", err)
	}
	return be, nil
}

// Info says what runs.
func (e *Engine) Info() Info {
	bi := e.be.Info()
	return Info{Backend: bi.Name, Device: bi.Device, Detail: bi.Detail, Level: bi.Level, Reason: e.reason,
		Profile: bi.Profile, Library: bi.Library, Health: bi.Health}
}

// Route names, written by ReportBackend.
type routeKey struct{}

// ReportBackend returns a context under which each call of the engine's ops writes the name
// of the backend that ran it ("cpu" or "dawn") to *where once it succeeds. An auto engine
// with a GPU open chooses per call (see the README, "What auto picks and why"); other
// engines always write their one backend's name. Unlike a method on the engine that would
// report its last call, this names the call made with ctx, whatever else runs; calls made
// concurrently need a ctx (and a string) each. A failed call leaves *where as it was.
func ReportBackend(ctx context.Context, where *string) context.Context {
	return context.WithValue(ctx, routeKey{}, where)
}

// reportRoute writes name where ReportBackend asked for it.
func reportRoute(ctx context.Context, name string) {
	if p, ok := ctx.Value(routeKey{}).(*string); ok && p != nil {
		*p = name
	}
}

// report is reportRoute for an engine's plain (unrouted) backend. It looks the backend's
// name up only when asked: Info allocates.
func (e *Engine) report(ctx context.Context) {
	if p, ok := ctx.Value(routeKey{}).(*string); ok && p != nil {
		if _, routed := e.be.(*router); !routed {
			*p = e.be.Info().Name
		}
	}
}

// Close releases the backend; prepared ops of the engine stop working. From its start,
// new calls fail with an error wrapping ErrClosed. Calls in flight on the CPU stop at
// their next step of rows (about a millisecond of work) and fail the same way, their
// outputs partly written; on Dawn, Close waits for the GPU work in flight to finish.
// Close returns once no call is in flight and the CPU's worker goroutines (and a
// huge-page collapse still running, hugepages.go in package cpu) have exited. Later
// calls of Close return what the first returned.
func (e *Engine) Close() error {
	e.closing.Store(true)
	e.closeOnce.Do(func() {
		// The backend first: it stops the calls in flight, which the lock waits for.
		e.closeErr = e.be.Close()
		e.mu.Lock()
		e.closed = true
		e.mu.Unlock()
	})
	return e.closeErr
}

// checkCall is the first check of every entry point: ctx and the outputs must be given.
func checkCall(op string, ctx context.Context, noOutputs bool) error {
	if ctx == nil {
		return argErr(op, "ctx", "ctx must not be nil; pass context.Background()")
	}
	if noOutputs {
		return argErr(op, "outputs", "outputs must not be nil")
	}
	return nil
}

// use holds the engine open for the duration of a call: on success the caller calls
// e.done() when the call ends. (Not a release func returned: the method value e.mu.RUnlock
// would be allocated on every call.)
func (e *Engine) use() error {
	if !e.closing.Load() {
		e.mu.RLock()
		if !e.closed {
			return nil
		}
		e.mu.RUnlock()
	}
	return fmt.Errorf("fusednorm: engine: %w", ErrClosed)
}

// done ends a call that use admitted.
func (e *Engine) done() { e.mu.RUnlock() }

// cpuLevel reads a level of WithCPULevel or FUSEDNORM_CPU_LEVEL (source says which): any
// case, spaces around ignored; empty is the widest. A level this processor and build do not
// run is an error wrapping ErrUnavailable that lists those they do.
func cpuLevel(level, source string) (string, error) {
	name := strings.ToLower(strings.TrimSpace(level))
	have := cpu.Levels()
	if name == "" || slices.Contains(have, name) {
		return name, nil
	}
	what := "is not a CPU kernel level"
	if slices.Contains(knownCPULevels, name) {
		what = "is a kernel level this processor or build does not run"
	}
	src := source + "(" + strconv.Quote(level) + ")"
	if source == EnvCPULevel {
		src = source + "=" + strconv.Quote(level)
	}
	return "", fmt.Errorf("fusednorm: Open: %s: %q %s; the levels here are %s (CPULevels): %w",
		src, name, what, strings.Join(have, ", "), ErrUnavailable)
}

// knownCPULevels are the kernel levels of every build, widest first.
var knownCPULevels = []string{"avx512fp16", "avx512", "avx2", "go"}

// CPULevels lists the CPU kernel levels this processor and build run, widest first and "go"
// (the pure-Go kernels) last: the values WithCPULevel and FUSEDNORM_CPU_LEVEL accept here.
// Every level gives the same bits.
func CPULevels() []string { return cpu.Levels() }

// openDawn opens the Dawn backend: the library from WithDawnLibrary or FUSEDNORM_DAWN_LIB
// alone when one is named, else the runtime's search list; errors wrap ErrUnavailable with
// the cause (the path and why, no adapter, Null backend only, built without cgo).
func openDawn(c *config) (ops.Backend, error) {
	cfg := dawn.Config{Library: c.dawnLib, Faults: c.inject, Logger: c.logger, QuietLoader: c.quietLoader}
	if c.adapterSet {
		i, err := chooseAdapter(c.dawnLib, c.adapter)
		if err != nil {
			return nil, err
		}
		cfg.Adapter = i + 1
	}
	be, err := dawn.New(cfg)
	if err != nil {
		return nil, err
	}
	return be, nil
}

// KernelTiming asks a GPU engine to time the kernel of the calls made with a context from
// TimeKernels: Repeat dispatches of the kernel in one compute pass between two device
// timestamps, the call waiting for them, PerCall set to the pass's time over Repeat. For
// profiling and benchmarks: see the fields.
type KernelTiming = ops.KernelClock

// TimeKernels returns a context under which each call of the engine's ops on a GPU times its
// kernel into t (give each concurrent call a KernelTiming of its own). Such a call always
// waits for its work. On the CPU, and on a GPU without timestamp queries, t.PerCall stays 0.
func TimeKernels(ctx context.Context, t *KernelTiming) context.Context {
	return ops.WithKernelClock(ctx, t)
}
