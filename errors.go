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
// It unwraps to ErrInvalidArgument, and to Err as well when that is set.
type ArgError struct {
	Op     string // "EmbedLayerNorm" or "AddLayerNorm"
	Tensor string // the ONNX/Ascend name of the tensor or attribute at fault
	Rule   string // the rule's message, as docs/spec.md words it
	// Err, when set, is a further sentinel the error wraps: ErrClosed for a device tensor
	// that was closed before the call.
	Err error
}

func (e *ArgError) Error() string {
	return "fusednorm: " + e.Op + ": " + e.Tensor + ": " + e.Rule
}

// Unwrap makes errors.Is(err, ErrInvalidArgument) true.
func (e *ArgError) Unwrap() error { return ErrInvalidArgument }

// Is makes errors.Is(err, e.Err) true as well.
func (e *ArgError) Is(target error) bool { return e.Err != nil && target == e.Err }

// callErr wraps the error of op's call; an error of the call's ctx also wraps ErrCanceled.
func callErr(op string, err error) error {
	if (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) && !errors.Is(err, ErrCanceled) {
		return fmt.Errorf("fusednorm: %s: %w: %w", op, ErrCanceled, err)
	}
	return fmt.Errorf("fusednorm: %s: %w", op, err)
}
