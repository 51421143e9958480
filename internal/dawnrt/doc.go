// Package dawnrt is the runtime of the Dawn backend, and the one package of the library that
// speaks C: it loads native Dawn at run time (dlopen, so building needs no Dawn and a process
// without the library gets an error, not a crash), opens a device on a Vulkan adapter, and
// owns what runs on it: buffers, pipelines, bind groups, transfers and the executor that
// records calls and submits them. It knows nothing of the ops; internal/dawn builds their
// calls (Call) on top of it, and the benchmark's probes use it directly.
//
// # The executor
//
// A Call is one compute dispatch with the copies and read-backs around it. Device.Run records
// it into the device's one open command encoder; calls accumulate there and are submitted
// together (one command buffer), so a chain of calls on device tensors pays one submit, not one
// each; consecutive dispatches share one compute pass, which a copy, a read-back, a timed
// dispatch or the submit ends. A call recorded while the GPU has nothing in flight is submitted
// at once; after it, the encoder is submitted when a call must wait (it reads something back,
// or asks for its kernel time), on Sync and on reads of a device buffer, when the recorded
// calls reach a bound (Limits of the batch: see batchCalls), when a host write that is ordered
// after them cannot be recorded, and, so that a GPU is never left idle with work held back,
// once the first call recorded has waited idleFlush. The verdict of each submit's validation
// error scope and the device-side id checks are collected at the next wait, which returns the
// first error of an earlier call, naming it.
//
// Host data a call writes (uniforms, small inputs) is ordered by the queue: a queue write
// takes effect after everything submitted before it and before everything submitted after
// it. A write that recorded but unsubmitted calls must not see is therefore staged in an
// arena and copied inside the encoder, in order, without a submit.
//
// # Backends
//
// Only Dawn's Vulkan backend is used: a GPU's Vulkan driver, or on GPU-less machines Mesa's
// lavapipe. Dawn's Null backend, which "succeeds" with garbage, is refused.
//
// # Thread safety
//
// A Device and everything made from it may be used from many goroutines: every call into
// Dawn runs under the device's lock, which a wait releases while the GPU works.
//
// # Errors
//
// Errors wrap the sentinels of internal/ops: ErrUnavailable (library or adapter missing),
// ErrNotSupported (a size over a device limit), ErrInvalidArgument (misuse, e.g. a released
// buffer), ErrDevice (Dawn or the driver rejected or failed an operation; the message carries
// Dawn's), ErrClosed (used after Close). A cancelled or expired context comes back as
// ctx.Err(), wrapped.
//
// # Library search
//
// An explicit library, Options.Library, is a demand, not a hint: only that file is tried, and
// Open fails with its path and the reason when it does not load. It must be an absolute path,
// or a bare file name for the system loader; a relative path with a directory would be
// resolved against the working directory and is refused.
//
// Without one, Open tries libwebgpu_dawn.so and libwebgpu_wrapper.so next to the executable
// (only when that directory and file are owned by the user or root and writable by their
// owner alone: whoever can write there can already replace the executable), then the same
// names through the system loader (LD_LIBRARY_PATH, the loader cache, the system directories;
// skipped when LD_LIBRARY_PATH has an empty or relative entry, which the loader reads as the
// working directory), then libwebgpu_wrapper.so in the folder cmd/fusednorm-dawn installs
// into by default (the user cache's fusednorm/dawn-<version>, under the same ownership rules),
// where a file is loaded only when its SHA-256 is the pinned build's: nothing planted in a
// cache is ever run. Nothing is ever loaded from a place derived from the working directory
// or from where the source was built. A failure lists every candidate and why it was not
// used. Device.Library names the file that was loaded.
//
// One Dawn runs in a process: two copies from different files share C++ symbols and break
// each other's event handling. Once a library is loaded, the search returns it, and an
// explicit library that is another file is refused before it is loaded.
//
// The package needs cgo; a build without it has no dawnrt (internal/dawn's cgo-free twin
// reports ErrUnavailable instead).
package dawnrt
