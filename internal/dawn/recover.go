//go:build cgo

package dawn

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/fusednorm/fusednorm/internal/dawnrt"
	"github.com/fusednorm/fusednorm/internal/ops"
)

// Device loss and recovery.
//
// Dawn reports a lost device (driver reset, GPU removed, or the "lose" fault site) through
// its device-lost callback. The calls in flight then fail with an error wrapping
// ops.ErrDevice that says "device lost". The next call to reach the backend (enter) finds
// the device lost and, holding the backend exclusively, recovers before it runs: it closes
// the lost device and opens a new one from the same library and adapter; the pipelines are
// compiled again on first use; every live prepared op uploads its weights again from the
// host tensors it keeps a reference to (the caller's, which the API forbids modifying while
// the op lives). Device tensors die with the device: calls that name one fail. The
// contraction profile is kept when the new adapter is the same; another adapter is
// calibrated again. When the reopening fails, the call fails wrapping ops.ErrDevice with the
// reason, and the next call tries again: the backend never runs elsewhere (in auto mode the
// router decides that). Info's Health says what happened: each loss and how long the
// recovery took.

// resident is a prepared op whose weights live on the device: a recovery uploads them again,
// Close releases them.
type resident interface {
	upload() error
	release()
}

// prepared is the life a prepared op shares with the others: runs hold life for reading,
// Close for writing, so weights are released after the runs in flight.
type prepared struct {
	b      *Backend
	life   sync.RWMutex
	closed bool
}

// enter starts a run of the op named op: the op open and the backend entered (enter).
func (p *prepared) enter(op string) error {
	p.life.RLock()
	if p.closed {
		p.life.RUnlock()
		return fmt.Errorf("dawn: %s: %w", op, ops.ErrClosed)
	}
	if _, err := p.b.enter(op); err != nil {
		p.life.RUnlock()
		return err
	}
	return nil
}

// leave ends a run enter started (the backend's leave, which enter returns, is b.leave).
func (p *prepared) leave() {
	p.b.leave()
	p.life.RUnlock()
}

// close marks op (the op p is part of) closed and releases its weights once, not during a
// recovery, which uploads the weights of the live ops again.
func (p *prepared) close(op resident) error {
	p.life.Lock()
	defer p.life.Unlock()
	if !p.closed {
		p.closed = true
		p.b.life.RLock()
		p.b.untrack(op)
		op.release()
		p.b.life.RUnlock()
	}
	return nil
}

// needsRecovery reports whether the device was lost or a recovery is still owed; under life.
func (b *Backend) needsRecovery() bool { return b.broken != nil || b.dev.Lost() }

// Recover reopens a lost device now (ops.Recoverer): nil when the device is usable.
func (b *Backend) Recover() error {
	b.life.Lock()
	defer b.life.Unlock()
	if b.closed {
		return fmt.Errorf("dawn: %w", ops.ErrClosed)
	}
	return b.recover()
}

// DeviceMemory counts the buffers the device holds now and their bytes (ops.MemoryReporter).
func (b *Backend) DeviceMemory() (int, uint64) {
	b.life.RLock()
	defer b.life.RUnlock()
	if b.closed {
		return 0, 0
	}
	return b.dev.LiveBuffers()
}

// recover replaces a lost device; under life, held exclusively. It returns the error the
// call that found the loss should report, or nil when the call can run.
func (b *Backend) recover() error {
	if !b.needsRecovery() {
		return b.broken
	}
	start := time.Now()
	old := b.dev
	if b.broken == nil { // the loss is new: note it once
		b.lossCount++
		b.lastLoss = old.LossMessage()
	}
	old.Close() // the lost device, or the one a failed recovery opened: releases all on it
	err := b.reopen(old)
	took := time.Since(start)
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil {
		b.broken = nil
		b.health = fmt.Sprintf("device lost %d time(s), last: %s; reopened in %v", b.lossCount, firstLine(b.lastLoss), took.Round(time.Microsecond))
		if b.cfg.Logger != nil {
			b.cfg.Logger.Info("dawn: device reopened after a loss", "took", took, "device", b.dev.Info().String())
		}
		return nil
	}
	b.broken = fmt.Errorf("dawn: %w: device lost (%s) and not reopened: %w", ops.ErrDevice, firstLine(b.lastLoss), err)
	b.health = b.broken.Error()
	return b.broken
}

// reopen opens a new device and moves the backend and its prepared ops onto it.
func (b *Backend) reopen(old *dawnrt.Device) error {
	b.resetPipelines()
	dev, err := dawnrt.Open(dawnrt.Options{Library: b.cfg.Library, Adapter: b.cfg.Adapter, Logger: b.cfg.Logger, Faults: b.cfg.Faults})
	if err != nil {
		return err
	}
	b.mu.Lock()
	b.dev, b.limits = dev, dev.Limits()
	b.mu.Unlock()
	if dev.Info() != old.Info() {
		// Another adapter: its compiler may fuse differently.
		prof, known, report, err := b.calibrate()
		var fast16 bool
		var report16 string
		if err == nil {
			fast16, report16, err = b.calibrate16(context.Background())
		}
		if err != nil {
			dev.Close()
			return fmt.Errorf("calibration: %w", err)
		}
		b.mu.Lock()
		b.prof, b.profileKnown, b.calibration, b.fast16 = prof, known, report+"; "+report16, fast16
		b.mu.Unlock()
	}
	for op := range b.preps {
		if e, ok := op.(*embedOp); ok {
			e.plan = b.Plan(e.w.H, e.w.Half())
		}
		if err := op.upload(); err != nil {
			return fmt.Errorf("re-uploading the weights of a prepared op: %w", err)
		}
	}
	return nil
}

// firstLine is the first line of Dawn's message (the rest is its backtrace).
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// track and untrack keep the set of live prepared ops, which a recovery uploads again.
func (b *Backend) track(op resident) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.preps == nil {
		b.preps = map[resident]struct{}{}
	}
	b.preps[op] = struct{}{}
}

func (b *Backend) untrack(op resident) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.preps, op)
}
