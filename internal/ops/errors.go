package ops

import "errors"

// The sentinels every package of the library wraps; the root package re-exports them so
// callers test with errors.Is(err, fusednorm.ErrInvalidArgument) and so on.
var (
	// ErrInvalidArgument: an input, output or attribute breaks a rule of the op's contract.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrUnavailable: the asked-for backend cannot run here (no library, no adapter, no cgo).
	ErrUnavailable = errors.New("backend unavailable")
	// ErrNotSupported: valid input the backend cannot run (e.g. a table over a binding limit).
	ErrNotSupported = errors.New("not supported")
	// ErrDevice: the device failed while running (lost, out of memory, validation error).
	ErrDevice = errors.New("device error")
	// ErrClosed: the engine or prepared op was closed.
	ErrClosed = errors.New("closed")
)
