//go:build cgo

package dawn

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/fusednorm/fusednorm/internal/dawnrt"
	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/plan"
	"github.com/fusednorm/fusednorm/shaders"
)

// Backend runs both ops on one Dawn device. It implements ops.Backend.
type Backend struct {
	cfg Config

	// Replaced by a recovery (which holds life exclusively); mu guards them for Info and Plan.
	dev    *dawnrt.Device
	limits dawnrt.Limits
	prof   plan.Contraction
	// profileKnown is false when no contraction profile reproduced the calibration run.
	profileKnown bool
	calibration  string
	// fast16: the device's builtin float16 conversions are exact (convert16.go), so the
	// kernels use them.
	fast16 bool

	// life: calls hold it shared; Close and a recovery take it exclusively, so they wait for
	// calls in flight.
	life   sync.RWMutex
	leave  func() // life.RUnlock, made once: a method value made per call would allocate
	closed bool

	// The pipelines, by kernel variant; a recovery starts them afresh.
	pipeMu    sync.RWMutex
	embedPipe map[shaders.Embed]*dawnrt.Pipeline
	addPipe   map[shaders.AddLN]*dawnrt.Pipeline
	probePipe map[bool]*dawnrt.Pipeline // by Fast16

	// Device loss (recover.go). mu guards them and the fields above for readers outside life.
	mu        sync.Mutex
	preps     map[resident]struct{} // live prepared ops, whose weights a recovery uploads again
	lossCount int
	lastLoss  string
	broken    error // set while a lost device could not be reopened
	health    string
}

var _ ops.Backend = (*Backend)(nil)

// New opens the device, calibrates the contraction profile and the float16 conversions, and
// returns the backend. Errors wrap ops.ErrUnavailable when Dawn or a usable adapter is
// missing.
func New(cfg Config) (*Backend, error) {
	b := &Backend{cfg: cfg}
	b.leave = b.life.RUnlock
	if err := b.open(); err != nil {
		return nil, err
	}
	return b, nil
}

// open opens a device and calibrates on it; on failure nothing is left open.
func (b *Backend) open() error {
	dev, err := dawnrt.Open(dawnrt.Options{Library: b.cfg.Library, Adapter: b.cfg.Adapter, Logger: b.cfg.Logger, Faults: b.cfg.Faults,
		QuietLoader: b.cfg.QuietLoader})
	if err != nil {
		if errors.Is(err, ops.ErrUnavailable) {
			return err
		}
		return fmt.Errorf("dawn: New: %w: %w", ops.ErrUnavailable, err)
	}
	b.dev, b.limits = dev, dev.Limits()
	b.resetPipelines()
	prof, known, report, err := b.calibrate()
	if err == nil {
		var report16 string
		if b.fast16, report16, err = b.calibrate16(context.Background()); err == nil {
			report += "; " + report16
		}
	}
	if err != nil {
		dev.Close()
		return fmt.Errorf("dawn: New: calibration: %w", err)
	}
	b.prof, b.profileKnown, b.calibration = prof, known, report
	return nil
}

// Info names the adapter, the library, the detected contraction profile and, after a device
// loss, what became of it (Health).
func (b *Backend) Info() ops.Info {
	b.mu.Lock()
	defer b.mu.Unlock()
	prof := b.prof.String()
	if !b.profileKnown {
		prof = "undetermined (using unfused)"
	}
	info := b.dev.Info()
	f16 := "integer"
	if b.fast16 {
		f16 = "builtins"
	}
	return ops.Info{
		Name:     "dawn",
		Device:   info.String(),
		Detail:   fmt.Sprintf("backend %v, profile: %s, f16 %s", info.Backend, prof, f16),
		Profile:  b.prof,
		Software: info.AdapterType == "CPU",
		Library:  b.dev.Library(),
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

// Close waits for calls in flight and closes the device, which releases everything made on
// it (the resident weights of ops not closed among them).
func (b *Backend) Close() error {
	b.life.Lock()
	defer b.life.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	return b.dev.Close()
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
		return b.leave, nil
	}
	b.life.RUnlock()
	b.life.Lock()
	var err error
	if !b.closed {
		err = b.recover()
	}
	b.life.Unlock()
	if err != nil {
		return nil, dawnrt.Within(op, err)
	}
	return b.enter(op)
}

// grid spreads the workgroups of rows rows, per a workgroup, over x and y (workgroup wg.x +
// wg.y·nx) within the device limit.
func (b *Backend) grid(op string, rows, per int) (groups [3]uint32, nx uint32, err error) {
	max := int(b.limits.MaxComputeWorkgroupsPerDimension)
	if max <= 0 {
		max = 65535
	}
	n := (rows + per - 1) / per
	x := min(n, max)
	y := (n + x - 1) / x
	x = (n + y - 1) / y // no empty workgroups: 65536 rows are 2×32768, not 2×65535
	if y > max {
		return groups, 0, fmt.Errorf("dawn: %s: %d rows exceed the dispatch grid %d×%d of %d rows a workgroup: %w",
			op, rows, max, max, per, ops.ErrNotSupported)
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

// pipeline is the pipeline of kernel variant k (Embed or AddLN), compiled on first use.
func pipeline[K comparable](b *Backend, cache map[K]*dawnrt.Pipeline, k K, key func() string, render func() (string, error)) (*dawnrt.Pipeline, error) {
	b.pipeMu.RLock()
	p := cache[k]
	b.pipeMu.RUnlock()
	if p != nil {
		return p, nil
	}
	src, err := render()
	if err != nil {
		return nil, err
	}
	if p, err = b.dev.NewPipeline(key(), src); err != nil {
		return nil, err
	}
	b.pipeMu.Lock()
	cache[k] = p
	b.pipeMu.Unlock()
	return p, nil
}

// resetPipelines empties the pipeline caches (a new device).
func (b *Backend) resetPipelines() {
	b.pipeMu.Lock()
	b.embedPipe, b.addPipe, b.probePipe = map[shaders.Embed]*dawnrt.Pipeline{}, map[shaders.AddLN]*dawnrt.Pipeline{}, map[bool]*dawnrt.Pipeline{}
	b.pipeMu.Unlock()
}

// newBuffer makes a resident buffer (weights) and writes data into it.
func (b *Backend) newBuffer(op, name string, data []byte) (*dawnrt.Buffer, error) {
	size := align4(uint64(len(data)))
	if err := b.checkBinding(op, name, size); err != nil {
		return nil, err
	}
	buf, err := b.dev.NewBuffer("fusednorm."+name, size, dawnrt.UsageStorage|dawnrt.UsageCopyDst|dawnrt.UsageCopySrc)
	if err != nil {
		return nil, dawnrt.Within(op+": "+name, err) // "dawn: <op>: <name>: NewBuffer: …"
	}
	if err := b.dev.Write(op+": "+name, buf, 0, data); err != nil {
		buf.Release()
		return nil, err
	}
	return buf, nil
}

// params is a little-endian uniform block built without allocating.
type params struct {
	b [64]byte
	n int
}

func (p *params) u32(v uint32)  { binary.LittleEndian.PutUint32(p.b[p.n:], v); p.n += 4 }
func (p *params) f32(v float32) { p.u32(math.Float32bits(v)) }
func (p *params) bytes() []byte { return p.b[:(p.n+15)&^15] }

// align4 rounds a byte count up to a whole number of u32 words.
func align4(n uint64) uint64 { return (n + 3) &^ 3 }

// privateFor is how many elements per invocation the kernel keeps in registers; out is the
// dtype of its outputs.
func privateFor(p plan.Plan, out ops.DType) int { return shaders.PrivateFor(p.H, p.W, out.Is16()) }

// calls are the pooled Calls of the ops: a Call is large, and a call must not allocate.
var calls = sync.Pool{New: func() any { return new(dawnrt.Call) }}
