package fusednorm

import (
	"context"
	"errors"
	"fmt"
	"strings"

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

// argErr is an *ArgError of op on tensor (or attribute), the rule formatted from format and a.
func argErr(op, tensor, format string, a ...any) error {
	return &ArgError{Op: op, Tensor: tensor, Rule: fmt.Sprintf(format, a...)}
}

// callErr wraps the error of op's call; an error of the call's ctx also wraps ErrCanceled.
// The message names op once: "fusednorm: AddLayerNorm: dawn: <what failed>: …" (see
// backendMsg).
func callErr(op string, err error) error {
	if (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) && !errors.Is(err, ErrCanceled) {
		return &opError{msg: "fusednorm: " + op + ": " + ErrCanceled.Error() + ": " + backendMsg(op, err), errs: []error{ErrCanceled, err}}
	}
	return backendErr("fusednorm: "+op+": ", op, err)
}

// backendErr is err, a backend's error in op, under prefix (which names op): its message
// with the op named once, wrapping err.
func backendErr(prefix, op string, err error) error {
	return &opError{msg: prefix + backendMsg(op, err), errs: []error{err}}
}

// backendMsg is err's message without a leading "<backend>: <op>: " naming op again: the
// backends name the call an error happened in by its op (an error of a call that did not
// wait is reported by a later call, maybe of another op), and the root's prefix names op
// already. "dawn: AddLayerNorm: device error: …" becomes "dawn: device error: …"; an earlier
// call named in the message ("dawn: AddLayerNorm (call 12): …") stays as it is.
func backendMsg(op string, err error) string {
	msg := err.Error()
	for _, be := range [...]string{BackendDawn, BackendCPU} {
		if rest, ok := strings.CutPrefix(msg, be+": "+op+": "); ok {
			return be + ": " + rest
		}
	}
	return msg
}

// opError is an error with a message of its own that wraps errs: callErr's, whose message
// is not its wrapped error's with a prefix.
type opError struct {
	msg  string
	errs []error
}

func (e *opError) Error() string   { return e.msg }
func (e *opError) Unwrap() []error { return e.errs }
