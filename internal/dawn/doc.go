// Package dawn runs both fused normalization ops as WGSL compute shaders on a GPU through
// native Dawn, loaded at run time, and gives the same bits as the CPU backend running the
// same reduction plan (spec §C.4).
//
// The user API is the root package, fusednorm, which opens this backend (WithBackend,
// FUSEDNORM_BACKEND); importing dawn directly is not supported, since Backend's methods take
// and return internal/ops types. It sits on internal/dawnrt, the runtime that speaks C: each op
// builds one dawnrt.Call from its binding table (package shaders) and runs it on the device's
// executor, host tensors or device tensors alike.
//
// # Backends
//
// New opens the default adapter (Vulkan; lavapipe on GPU-less machines), then calibrates:
// it runs the real kernels on a small input whose results differ under each contraction
// profile (which multiply-adds the driver fuses) and compares them with internal/plan under
// all four profiles. The detected profile is reported by Info and carried by Plan, so the CPU
// backend built with it is a bit-exact reference. Kernels are WGSL templates from package
// shaders; 16-bit data is stored two values per u32, so no shader-f16 feature is needed, and
// converted by the builtins pack2x16float/unpack2x16float alone where New finds them giving the
// CPU's results on every binary16, rounding boundary, overflow, Inf and NaN (a NaN for a NaN;
// convert16.go), else by integer arithmetic.
// EmbedLayerNorm and AddLayerNorm each take one dispatch.
//
// A build without cgo has the same API; New then fails with ops.ErrUnavailable.
//
// # Thread safety
//
// A Backend and the ops it prepares are safe for concurrent use. Prepared weights stay
// resident on the device; a call's scratch buffers and bind group are cached by the executor.
// Close waits for calls in flight and then releases everything; calls after Close fail with
// ops.ErrClosed.
//
// # Errors
//
// Errors wrap the sentinels of internal/ops (re-exported by the root package):
// ErrUnavailable when the library, an adapter or cgo is missing; ErrNotSupported when a tensor
// exceeds a device limit (the message names the tensor and the limit); an *ops.ArgError (so
// ErrInvalidArgument) when the device finds an id out of range in ids held in device tensors
// (host ids are checked on the host), reported at the next wait; ErrDevice when Dawn rejects
// or loses work (after a loss the next call opens a new device; when that fails the backend
// returns ErrDevice until Recover succeeds, and an auto engine moves to the CPU: see
// recover.go); ErrClosed after Close. A failed call leaves its outputs unwritten, except that a
// device-detected bad id is reported after the call's outputs were written.
package dawn
