package fusednorm

import (
	"context"
	"errors"
	"fmt"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// Sentinel errors: every error the library returns wraps one of these, so callers branch
// with errors.Is.
var (
	// ErrInvalidArgument: an input, output or attribute breaks a rule of the op's contract.
	ErrInvalidArgument = ops.ErrInvalidArgument
	// ErrUnavailable: the asked-for backend cannot run here (no library, no adapter, no cgo).
	ErrUnavailable = ops.ErrUnavailable
	// ErrNotSupported: valid input that the backend cannot run (e.g. over a device limit).
	ErrNotSupported = ops.ErrNotSupported
	// ErrDevice: the device failed while running.
	ErrDevice = ops.ErrDevice
	// ErrClosed: the engine, the prepared op or a device tensor of the call was used after
	// Close.
	ErrClosed = ops.ErrClosed
	// ErrCanceled: the call's ctx ended (cancelled, or past its deadline) before the call
	// did. The error wraps ctx's error too, so errors.Is(err, context.Canceled) and
	// errors.Is(err, context.DeadlineExceeded) work as usual.
	ErrCanceled = errors.New("canceled")
)

// ArgError is a contract violation: which op, which tensor or attribute, and which rule.
// It unwraps to ErrInvalidArgument, and to Err as well when that is set. An id found out of
// range by a GPU's own check (ids in device tensors, reported at the next wait) is one too.
type ArgError = ops.ArgError

// callErr wraps the error of op's call; an error of the call's ctx also wraps ErrCanceled.
func callErr(op string, err error) error {
	if (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) && !errors.Is(err, ErrCanceled) {
		return fmt.Errorf("fusednorm: %s: %w: %w", op, ErrCanceled, err)
	}
	return fmt.Errorf("fusednorm: %s: %w", op, err)
}
