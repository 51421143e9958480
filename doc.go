// Package fusednorm runs two fused normalization ops of transformer inference:
// EmbedLayerNormalization (ONNX Runtime's com.microsoft contrib op: gather word, position and
// optional segment embedding rows per token, add them, layer-normalize; optional mask_index
// and embedding_sum outputs) and AddLayerNorm (Huawei Ascend's: x = x1 + x2 (+ bias), layer
// norm over the trailing dims of gamma, with mean and rstd). Semantics follow the project's specification (docs/spec.md).
//
// # Backends
//
// Open picks one at run time: the WithBackend option, else FUSEDNORM_BACKEND, else "auto".
// "cpu" and "dawn" (WGSL compute shaders on native WebGPU, loaded with dlopen) run every call
// there. "auto" opens Dawn when the library loads and a hardware adapter exists (a software
// Vulkan such as lavapipe only serves an explicit "dawn" request), and then runs both backends
// behind one router: a call with a device tensor runs on the GPU; a call whose tensors all
// live in host memory runs on the backend that has finished calls of its shape sooner (its
// first call where a cost model measured at Open says, then each backend timed; see route.go).
// Without a GPU, auto is the CPU. A Dawn engine that loses its device reopens it, or returns
// ErrDevice; an auto engine whose device is lost for good moves to its CPU backend and says
// so in Info. Engine.Info says which backend runs and why. Both backends follow one
// reduction plan (internal/plan, spec §C.4), so the CPU reproduces a GPU's results bit for
// bit once it mirrors that GPU's contraction profile (WithContraction): where a call ran
// shows only in its time.
//
// # Device tensors and shared submits
//
// DeviceTensor keeps data on the engine's device (host memory on the CPU backend). A call
// whose outputs are all device tensors does not wait for the GPU: it is recorded with the
// calls before it and submitted with them when something waits (Engine.Sync, DeviceTensor.Read,
// a call with host outputs) or a bound on pending work is reached. An error such a call meets
// on the device (an id out of range) is returned by the next wait, naming the call and the
// tensor. Give AddLayerNormOutputs.NoStats to compute y alone.
//
// # Thread safety
//
// An Engine and the ops it prepares are safe for concurrent use. Tensors wrap caller memory
// without copying: do not modify inputs or read outputs while a call runs, and do not modify
// an EmbedLayerNorm's weights while the op is alive.
//
// # Errors
//
// Every error wraps a sentinel for errors.Is: ErrInvalidArgument (a contract rule was broken;
// the error is an *ArgError naming the tensor and the rule), ErrUnavailable, ErrNotSupported,
// ErrDevice, ErrClosed, ErrCanceled (the call's ctx ended; the error wraps ctx's error too).
// All checks, including every id against its table, run before any output is written. A nil
// ctx is an *ArgError on "ctx", at every entry that takes one (Engine.Sync and
// DeviceTensor.Read among them). An output may not share memory with an input, a weight or
// another output, not even exactly (no op runs in place), nor be the same device tensor as
// one: that is an *ArgError naming both tensors. A device tensor of another engine is an
// *ArgError naming it, and one closed before the call too, wrapping ErrClosed as well. These
// checks run before the call reaches a backend, so every backend answers alike.
//
// A failed call leaves the caller's output structs as they were: outputs the library
// allocates reach them only when the call succeeds. Output data the caller gave is untouched
// by a call that fails before it computes (a broken rule, ctx already done); a call whose ctx
// ends, or whose device fails, while it computes may have written part of it.
//
// The library never asks the Go runtime for an allocation the process may not survive (Go
// ends the process on one it cannot serve): the outputs it would allocate for one call are
// sized first and refused with ErrNotSupported, naming the tensor, past half the least of
// the machine's memory, the process's address-space limit and its cgroup's memory limit, or
// past the Go memory limit (GOMEMLIMIT), which lowers the bound where that is wanted.
package fusednorm
