package fusednorm

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// DeviceTensor is a tensor that lives in the memory of an engine's device, so that calls
// can pass data between them without a round trip through the host. Use dt.Tensor()
// wherever an op takes a Tensor (inputs, weights, caller-provided outputs); host and device
// tensors mix freely in one call.
//
// On the GPU, a call whose outputs are all device tensors returns once its work is
// submitted; Read (and Engine.Sync, and any call that returns host outputs) waits for the
// work it depends on and reports the first device error of an earlier call that did not
// wait, naming that call. Ids that live on the device are range-checked by the kernel
// (spec §A.2a): an out-of-range id reads as a zero row, and the next wait returns the
// InvalidArgument error; the outputs of that call are then unspecified.
//
// On the CPU backend a device tensor is host memory: calls use it in place, with the same API.
//
// Close frees the memory; work already submitted that uses it still completes. A call
// given a closed device tensor, or one of another engine, fails before it computes on every
// backend: an *ArgError naming the tensor, wrapping ErrClosed for a closed one. A device
// tensor is safe for concurrent use; the order of calls that write it is the caller's.
type DeviceTensor struct {
	eng *Engine
	t   Tensor // shape, dtype; host slices on the CPU, buf.Dev on a GPU; t.dev is the tensor

	mu     sync.Mutex // serializes Write and Close
	closed atomic.Bool
}

// NewDeviceTensor allocates a zeroed tensor of the dtype and shape on the engine's device.
// As NewTensor, it returns an error wrapping ErrInvalidArgument for a negative dimension or
// an unknown dtype, and one wrapping ErrNotSupported for a tensor larger than the library
// (on the CPU) or the device (on a GPU) allocates.
func (e *Engine) NewDeviceTensor(dt DType, shape ...int) (*DeviceTensor, error) {
	const op = "NewDeviceTensor"
	n, err := sizeOf(op, dt, shape)
	if err != nil {
		return nil, err
	}
	if err := e.use(); err != nil {
		return nil, err
	}
	defer e.done()
	d := &DeviceTensor{eng: e}
	db, ok := e.be.(ops.DeviceBackend)
	if !ok {
		if bound := allocBound(); n*dt.Size() > bound {
			return nil, fmt.Errorf("fusednorm: %s: shape %v is %d bytes, over the %d bytes the library allocates at once: %w",
				op, shape, n*dt.Size(), bound, ErrNotSupported)
		}
		d.t = newTensor(dt, n, shape)
		d.t.dev = d
		return d, nil
	}
	m, err := db.NewDeviceMem(dt, n)
	if err != nil {
		return nil, backendErr("fusednorm: "+op+": ", op, err)
	}
	d.t = Tensor{shape: slices.Clone(shape), buf: ops.Buf{DType: dt, Dev: m}, dev: d}
	return d, nil
}

// Upload allocates a device tensor shaped like t and copies t's data into it.
func (e *Engine) Upload(t Tensor) (*DeviceTensor, error) {
	if t.IsZero() {
		return nil, fmt.Errorf("fusednorm: Upload: absent tensor: %w", ErrInvalidArgument)
	}
	if err := checkTensor("Upload", "tensor", &t); err != nil {
		return nil, err
	}
	d, err := e.NewDeviceTensor(t.DType(), t.shape...)
	if err != nil {
		return nil, err
	}
	if err := d.Write(t); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// Tensor is the device tensor as a Tensor, to pass to an op. On a GPU it has no host data
// (Float32s and the like return nil); use Read to copy it to the host.
func (d *DeviceTensor) Tensor() Tensor { return d.t }

// DType is the element type.
func (d *DeviceTensor) DType() DType { return d.t.DType() }

// Shape returns the dimensions (the caller must not modify the slice).
func (d *DeviceTensor) Shape() []int { return d.t.shape }

// String describes the tensor, e.g. "float32(1, 768) on dawn".
func (d *DeviceTensor) String() string { return d.t.String() + " on " + d.eng.be.Info().Name }

// check is the common part of Write and Read: src/dst a host tensor of the same dtype and shape.
func (d *DeviceTensor) check(op string, h *Tensor) error {
	if h.IsZero() || h.buf.Dev != nil || h.dev != nil { // a CPU device tensor too, as on a GPU
		return argErr(op, "tensor", "want a host tensor, got %v", h)
	}
	if err := checkTensor(op, "tensor", h); err != nil {
		return err
	}
	if h.DType() != d.t.DType() || !sameShape(h.shape, d.t.shape) {
		return argErr(op, "tensor", "want %v, got %v", d.t, h)
	}
	return nil
}

// Write copies host data (same dtype and shape) into the device tensor. It is ordered
// before every call made after it; on the GPU it does not wait.
func (d *DeviceTensor) Write(src Tensor) error {
	const op = "DeviceTensor.Write"
	if err := d.check(op, &src); err != nil {
		return err
	}
	if err := d.eng.use(); err != nil {
		return err
	}
	defer d.eng.done()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed.Load() {
		return fmt.Errorf("fusednorm: %s: %w", op, ErrClosed)
	}
	if d.t.buf.Dev == nil {
		copy(d.t.buf.Bytes(), src.buf.Bytes())
		return nil
	}
	if err := d.eng.be.(ops.DeviceBackend).WriteDevice(d.t.buf.Dev, src.buf.Bytes()); err != nil {
		return backendErr("fusednorm: "+op+": ", op, err)
	}
	return nil
}

// Read waits for the work the tensor depends on and copies it into dst, a host tensor of
// the same dtype and shape. It returns instead the first device error of an earlier call
// that did not wait, or ctx's error (wrapped with ErrCanceled) when ctx ends first; then dst
// is untouched. A nil ctx is an *ArgError on "ctx".
func (d *DeviceTensor) Read(ctx context.Context, dst Tensor) error {
	const op = "DeviceTensor.Read"
	if err := checkCall(op, ctx, false); err != nil {
		return err
	}
	if err := d.check(op, &dst); err != nil {
		return err
	}
	if err := d.eng.use(); err != nil {
		return err
	}
	defer d.eng.done()
	if d.closed.Load() {
		return fmt.Errorf("fusednorm: %s: %w", op, ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return callErr(op, err)
	}
	if d.t.buf.Dev == nil {
		copy(dst.buf.Bytes(), d.t.buf.Bytes())
		return nil
	}
	if err := d.eng.be.(ops.DeviceBackend).ReadDevice(ctx, d.t.buf.Dev, dst.buf.Bytes()); err != nil {
		return callErr(op, err)
	}
	return nil
}

// Close frees the device memory. Later calls that name the tensor fail; Close again does
// nothing.
func (d *DeviceTensor) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed.Swap(true) {
		return nil
	}
	if d.t.buf.Dev == nil {
		return nil
	}
	if err := d.eng.use(); err != nil {
		return nil // the engine is closed: its device memory is gone with it
	}
	defer d.eng.done()
	return d.eng.be.(ops.DeviceBackend).FreeDevice(d.t.buf.Dev)
}

// Sync waits for every call submitted so far and returns the first device error of a call
// that did not wait (named in the message), or nil. On the CPU it returns at once. A ctx
// already ended gives its error (wrapped with ErrCanceled) on every backend; a nil ctx is an
// *ArgError on "ctx".
func (e *Engine) Sync(ctx context.Context) error {
	const op = "Sync"
	if err := checkCall(op, ctx, false); err != nil {
		return err
	}
	if err := e.use(); err != nil {
		return err
	}
	defer e.done()
	if err := ctx.Err(); err != nil {
		return callErr(op, err)
	}
	db, ok := e.be.(ops.DeviceBackend)
	if !ok {
		return nil
	}
	if err := db.Sync(ctx); err != nil {
		return callErr(op, err)
	}
	return nil
}

// DeviceMemory reports the device memory the engine holds now: its buffers and their bytes
// (device tensors, resident weights, and the scratch the GPU backend keeps for repeated
// calls). Zero on the CPU backend, whose device tensors are host memory.
func (e *Engine) DeviceMemory() (buffers int, bytes uint64) {
	if err := e.use(); err != nil {
		return 0, 0
	}
	defer e.done()
	if m, ok := e.be.(ops.MemoryReporter); ok {
		return m.DeviceMemory()
	}
	return 0, 0
}
