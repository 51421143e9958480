//go:build cgo

package dawn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/plan"
	"github.com/fusednorm/fusednorm/shaders"
)

// Config chooses the Dawn library and, for tests, injects faults at named sites.
type Config struct {
	// LibPath is the Dawn shared library, and only it is tried; empty: $FUSEDNORM_DAWN_LIB, else
	// the library next to the executable, else the system loader's.
	LibPath string
	// Inject, when set, is called at named fault sites ("load", "open", "create-buffer",
	// "write-buffer", "pipeline", "submit", "map"); a non-nil error fails that step. At "lose",
	// called once a dispatch is submitted, it makes Dawn lose the device for real.
	Inject func(site string) error
	// Logger receives Dawn's messages and the backend's reports of device loss; nil discards.
	Logger *slog.Logger
	// Fallback, when set, makes a backend whose device is lost and cannot be reopened carry on
	// with the backend Fallback returns (the CPU, mirroring the given contraction profile).
	// Without it such calls fail wrapping ops.ErrDevice. See recover.go.
	Fallback func(plan.Contraction) (ops.Backend, error)
	// Adapter, when > 0, opens adapter Adapter-1 of ListAdapters' list instead of the first; a
	// device reopened after a loss is on the same adapter.
	Adapter int
}

// Backend runs both ops on one Dawn device. It implements ops.Backend.
type Backend struct {
	cfg Config

	// Replaced by a recovery (which holds life exclusively); mu guards them for Info and Plan.
	dev    *device
	limits deviceLimits
	prof   plan.Contraction
	// profileKnown is false when no contraction profile reproduced the calibration run.
	profileKnown bool
	calibration  string
	// fast16: the device's builtin float16 conversions are exact (convert16.go), so the
	// kernels use them.
	fast16 bool

	pool pool

	// life: calls hold it shared; Close and a recovery take it exclusively, so they wait for
	// calls in flight.
	life   sync.RWMutex
	closed bool

	// Device loss (recover.go). mu guards them and the fields above for readers outside life.
	mu        sync.Mutex
	preps     map[*embedOp]struct{} // live prepared ops
	lossCount int
	lastLoss  string
	broken    error       // set while a lost device could not be reopened
	fallback  ops.Backend // set once the backend runs on the CPU instead
	health    string

	// timed makes dispatches measure their compute pass with timestamp queries (benchmarks);
	// gpuTime holds the last measurement in nanoseconds.
	timed   atomic.Bool
	gpuTime atomic.Int64

	// dt is the low-overhead path's state (exec.go).
	dt devState
}

var _ ops.Backend = (*Backend)(nil)

// New opens the device, calibrates the contraction profile and returns the backend. Errors
// wrap ops.ErrUnavailable when Dawn or a usable adapter is missing.
func New(cfg Config) (*Backend, error) {
	dev, err := openDevice(deviceOptions{LibPath: cfg.LibPath, Inject: cfg.Inject, Logger: cfg.Logger, Adapter: cfg.Adapter})
	if err != nil {
		if errors.Is(err, ops.ErrUnavailable) {
			return nil, err
		}
		return nil, fmt.Errorf("dawn: New: %w: %w", ops.ErrUnavailable, err)
	}
	b := &Backend{cfg: cfg, dev: dev, limits: dev.limits}
	b.pool.dev = dev
	prof, known, report, err := b.calibrate()
	if err != nil {
		b.pool.release()
		dev.close()
		return nil, fmt.Errorf("dawn: New: calibration: %w", err)
	}
	fast16, report16, err := b.calibrate16(context.Background())
	if err != nil {
		b.pool.release()
		dev.close()
		return nil, fmt.Errorf("dawn: New: calibration: %w", err)
	}
	b.prof, b.profileKnown, b.calibration, b.fast16 = prof, known, report+"; "+report16, fast16
	return b, nil
}

// Info names the adapter, the library, the detected contraction profile and, after a device
// loss, what became of it (Health); after a fallback, the CPU backend that runs instead.
func (b *Backend) Info() ops.Info {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fallback != nil {
		info := b.fallback.Info()
		info.Health = b.health
		return info
	}
	prof := b.prof.String()
	if !b.profileKnown {
		prof = "undetermined (using unfused)"
	}
	info := b.dev.info
	return ops.Info{
		Name:     "dawn",
		Device:   info.String(),
		Detail:   fmt.Sprintf("backend %v, profile: %s, f16 %s", info.Backend, prof, map[bool]string{true: "builtins", false: "integer"}[b.fast16]),
		Profile:  b.prof,
		Software: info.AdapterType == "CPU",
		Library:  b.dev.library(),
		Health:   b.health,
	}
}

// Plan is the reduction plan of the kernels for rows of h elements, under the detected profile.
func (b *Backend) Plan(h int, half bool) plan.Plan {
	b.mu.Lock()
	prof := b.prof
	b.mu.Unlock()
	return plan.For(h, half, prof)
}

// Close waits for calls in flight, releases the pooled buffers and closes the device. Ops
// prepared on the backend must be closed first; their buffers are released with the device.
func (b *Backend) Close() error {
	b.life.Lock()
	defer b.life.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	b.pool.release()
	if b.fallback != nil {
		b.fallback.Close()
	}
	b.closeFast()
	err := b.dev.close() // after a fallback, the lost device, closed already: nil
	b.freeFast()
	return err
}

// enter marks a call in flight; the returned function ends it. A lost device is replaced
// first (see recover.go).
func (b *Backend) enter(op string) (func(), error) {
	b.life.RLock()
	if b.closed {
		b.life.RUnlock()
		return nil, fmt.Errorf("dawn: %s: %w", op, ops.ErrClosed)
	}
	if !b.needsRecovery() {
		return b.life.RUnlock, nil
	}
	b.life.RUnlock()
	b.life.Lock()
	var err error
	if !b.closed {
		err = b.recover()
	}
	b.life.Unlock()
	if err != nil {
		return nil, fmt.Errorf("dawn: %s: %w", op, err)
	}
	return b.enter(op)
}

// grid spreads rows workgroups over x and y (row = wg.x + wg.y·nx) within the device limit.
func (b *Backend) grid(op string, rows int) (groups [3]uint32, nx uint32, err error) {
	max := int(b.limits.MaxComputeWorkgroupsPerDimension)
	if max <= 0 {
		max = 65535
	}
	x := min(rows, max)
	y := (rows + x - 1) / x
	x = (rows + y - 1) / y // no empty workgroups: 65536 rows are 2×32768, not 2×65535
	if y > max {
		return groups, 0, fmt.Errorf("dawn: %s: %d rows exceed the dispatch grid %d×%d: %w",
			op, rows, max, max, ops.ErrNotSupported)
	}
	return [3]uint32{uint32(x), uint32(y), 1}, uint32(x), nil
}

// checkBinding rejects a tensor of size bytes that no storage binding of this device can hold.
func (b *Backend) checkBinding(op, tensor string, size uint64) error {
	if lim := b.limits.MaxStorageBufferBindingSize; lim > 0 && size > lim {
		return fmt.Errorf("dawn: %s: %s is %d bytes, over the device's maxStorageBufferBindingSize %d: %w",
			op, tensor, size, lim, ops.ErrNotSupported)
	}
	if lim := b.limits.MaxBufferSize; lim > 0 && size > lim {
		return fmt.Errorf("dawn: %s: %s is %d bytes, over the device's maxBufferSize %d: %w",
			op, tensor, size, lim, ops.ErrNotSupported)
	}
	// Element indices are u32 in the kernels.
	if size >= 1<<34 {
		return fmt.Errorf("dawn: %s: %s is %d bytes, over the kernels' 32-bit indexing: %w",
			op, tensor, size, ops.ErrNotSupported)
	}
	return nil
}

// pipeline renders (cached by the shaders package) and builds (cached by the device) a kernel.
func (b *Backend) pipeline(key string, render func() (string, error)) (*pipeline, error) {
	src, err := render()
	if err != nil {
		return nil, err
	}
	p, err := b.dev.pipeline(key, src, shaders.Entry)
	if err != nil {
		return nil, deviceErr(err)
	}
	return p, nil
}

// setKernelTiming makes every dispatch measure its compute pass with timestamp queries, for
// benchmarks; it costs a query resolve per call. ErrNotSupported without TimestampQuery.
func (b *Backend) setKernelTiming(on bool) error {
	leave, err := b.enter("setKernelTiming")
	if err != nil {
		return err
	}
	defer leave()
	if b.fallback != nil {
		return fmt.Errorf("dawn: setKernelTiming: running on the CPU since the device was lost: %w", ops.ErrNotSupported)
	}
	if on && !b.dev.hasFeature("TimestampQuery") {
		return fmt.Errorf("dawn: setKernelTiming: the adapter has no TimestampQuery: %w", ops.ErrNotSupported)
	}
	b.timed.Store(on)
	return nil
}

// lastKernelTime is the device time of the most recent timed dispatch (0 before any). With
// concurrent calls it is the time of whichever finished last.
func (b *Backend) lastKernelTime() time.Duration { return time.Duration(b.gpuTime.Load()) }

// run dispatches one kernel and reads back, timing the pass when timed is set.
func (b *Backend) run(ctx context.Context, p *pipeline, binds []binding, groups [3]uint32, reads []readback) error {
	if b.timed.Load() {
		d, err := b.dev.runTimed(ctx, p, binds, groups, reads)
		b.gpuTime.Store(int64(d))
		return err
	}
	return b.dev.run(ctx, p, binds, groups, reads)
}

// deviceErr makes sure a runtime failure wraps ops.ErrDevice (context errors stay as they are).
func deviceErr(err error) error {
	if err == nil || errors.Is(err, ops.ErrDevice) || errors.Is(err, context.Canceled) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ops.ErrClosed) {
		return err
	}
	return fmt.Errorf("%w: %w", ops.ErrDevice, err)
}

// privateFor is how many elements per invocation the kernel keeps in registers.
func privateFor(p plan.Plan) int { return shaders.PrivateFor(p.H, p.W) }
