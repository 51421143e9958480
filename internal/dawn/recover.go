//go:build cgo

package dawn

import (
	"context"
	"fmt"
	"time"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// Device loss and recovery.
//
// Dawn reports a lost device (driver reset, GPU removed, or the "lose" fault site) through
// its device-lost callback. The calls in flight then fail with an error wrapping
// ops.ErrDevice that says "device lost". The next call to reach the backend (enter) finds
// the device lost and, holding the backend exclusively, recovers before it runs:
//
//   - It closes the lost device and opens a new one from the same library. The pipelines
//     are compiled again on first use (the WGSL is cached); the pooled buffers start empty;
//     every live prepared EmbedLayerNorm uploads its weights again from the host tensors it
//     keeps a reference to (the caller's, which the API forbids modifying while the op lives).
//     The contraction profile is kept when the new adapter is the same; another adapter is
//     calibrated again.
//   - If that fails and Config.Fallback is set (auto mode), the backend moves for good to the
//     CPU backend Fallback returns, mirroring the device's contraction profile so the bits do
//     not change, and prepares every live op there. Info then names the CPU and says why.
//   - Otherwise the call fails wrapping ops.ErrDevice with the reason, and the next call tries
//     again.
//
// Info's Health says what happened: each loss, how long the recovery took, or the fallback.

// needsRecovery reports whether the device was lost or a recovery is still owed; under life.
func (b *Backend) needsRecovery() bool { return b.fallback == nil && (b.broken != nil || b.dev.lost()) }

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
		b.lastLoss = old.lossMessage()
	}
	// The lost device, or the one a failed recovery opened: closing releases every buffer on
	// it (and reports the loss again, which is known). Close is idempotent.
	// The device-tensor path's cached bind groups and staging live on the old device too:
	// released before it closes, their C memory freed after, the path started afresh.
	b.closeFast()
	b.pool.release()
	old.close()
	b.freeFast()
	b.dt = devState{}
	err := b.reopen()
	took := time.Since(start)
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil {
		b.broken = nil
		b.health = fmt.Sprintf("device lost %d time(s), last: %s; reopened in %v", b.lossCount, firstLine(b.lastLoss), took.Round(time.Microsecond))
		b.logInfo("dawn: device reopened after a loss", "took", took, "device", b.dev.info.String())
		return nil
	}
	if b.cfg.Fallback != nil {
		if ferr := b.fallBack(); ferr == nil {
			b.broken = nil
			b.health = fmt.Sprintf("device lost: %s; reopening failed: %v; running on the CPU backend, mirroring profile %v",
				firstLine(b.lastLoss), err, b.prof)
			b.logInfo("dawn: device lost and not reopened; continuing on the CPU", "error", err)
			return nil
		} else {
			err = fmt.Errorf("%w; the CPU fallback failed too: %w", err, ferr)
		}
	}
	b.broken = fmt.Errorf("dawn: %w: device lost (%s) and not reopened: %w", ops.ErrDevice, firstLine(b.lastLoss), err)
	b.health = b.broken.Error()
	return b.broken
}

// reopen opens a new device and moves the backend and its prepared ops onto it.
func (b *Backend) reopen() error {
	dev, err := openDevice(deviceOptions{LibPath: b.cfg.LibPath, Inject: b.cfg.Inject, Logger: b.cfg.Logger, Adapter: b.cfg.Adapter})
	if err != nil {
		return err
	}
	prof, known, report, fast16 := b.prof, b.profileKnown, b.calibration, b.fast16
	if dev.info != b.dev.info {
		// Another adapter: its compiler may fuse differently. Calibrate on a backend of its own
		// (this one is held exclusively).
		nb := &Backend{dev: dev, limits: dev.limits, cfg: b.cfg}
		nb.pool.dev = dev
		var err error
		if prof, known, report, err = nb.calibrate(); err != nil {
			nb.pool.release()
			dev.close()
			return fmt.Errorf("calibration: %w", err)
		}
		var report16 string
		if fast16, report16, err = nb.calibrate16(context.Background()); err != nil {
			nb.pool.release()
			dev.close()
			return fmt.Errorf("calibration: %w", err)
		}
		report += "; " + report16
		nb.pool.release()
	}
	b.mu.Lock()
	b.dev, b.limits = dev, dev.limits
	b.prof, b.profileKnown, b.calibration, b.fast16 = prof, known, report, fast16
	b.mu.Unlock()
	b.pool.release()
	b.pool.dev = dev
	for op := range b.preps {
		op.plan = b.Plan(op.w.H, op.w.Half())
		if err := op.upload(); err != nil {
			return fmt.Errorf("re-uploading the weights of a prepared op: %w", err)
		}
	}
	return nil
}

// fallBack moves the backend and every prepared op to the CPU backend of Config.Fallback.
func (b *Backend) fallBack() error {
	fb, err := b.cfg.Fallback(b.prof)
	if err != nil {
		return err
	}
	for op := range b.preps {
		cp, err := fb.PrepareEmbed(&op.w)
		if err != nil {
			for op := range b.preps {
				if op.cpu != nil {
					op.cpu.Close()
					op.cpu = nil
				}
			}
			fb.Close()
			return err
		}
		op.release()
		op.cpu = cp
	}
	b.fallback = fb
	return nil
}

func (b *Backend) logInfo(msg string, args ...any) {
	if b.cfg.Logger != nil {
		b.cfg.Logger.Info(msg, args...)
	}
}

// firstLine is the first line of Dawn's message (the rest is its backtrace).
func firstLine(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			return s[:i]
		}
	}
	return s
}

// track and untrack keep the set of live prepared ops, which a recovery prepares again.
func (b *Backend) track(op *embedOp) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.preps == nil {
		b.preps = map[*embedOp]struct{}{}
	}
	b.preps[op] = struct{}{}
}

func (b *Backend) untrack(op *embedOp) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.preps, op)
}
