package fusednorm

import "github.com/fusednorm/fusednorm/internal/ops"

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
	// ErrClosed: the engine or prepared op was used after Close.
	ErrClosed = ops.ErrClosed
)

// ArgError is a contract violation: which op, which tensor or attribute, and which rule.
// It unwraps to ErrInvalidArgument.
type ArgError struct {
	Op     string // "EmbedLayerNorm" or "AddLayerNorm"
	Tensor string // the ONNX/Ascend name of the tensor or attribute at fault
	Rule   string // the rule's message, as SPEC.md words it
}

func (e *ArgError) Error() string {
	return "fusednorm: " + e.Op + ": " + e.Tensor + ": " + e.Rule
}

// Unwrap makes errors.Is(err, ErrInvalidArgument) true.
func (e *ArgError) Unwrap() error { return ErrInvalidArgument }
