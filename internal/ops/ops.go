// Package ops holds the backend-facing description of both operations: validated,
// shape-resolved problems over raw typed storage. The root package builds these from the
// public API after every check of docs/spec.md has passed; a backend only computes.
package ops

import (
	"context"
	"time"
	"unsafe"

	"github.com/fusednorm/fusednorm/internal/plan"
)

// DType is an element type of tensor storage.
type DType uint8

// The element types the library knows.
const (
	Invalid DType = iota
	F32
	F16
	BF16
	I32
)

// String returns the dtype's name as the manifests spell it.
func (d DType) String() string {
	switch d {
	case F32:
		return "float32"
	case F16:
		return "float16"
	case BF16:
		return "bfloat16"
	case I32:
		return "int32"
	}
	return "invalid"
}

// Size is the element size in bytes.
func (d DType) Size() int {
	switch d {
	case F32, I32:
		return 4
	case F16, BF16:
		return 2
	}
	return 0
}

// Is16 reports whether d is a 16-bit float type stored as raw bits.
func (d DType) Is16() bool { return d == F16 || d == BF16 }

// Buf is a typed view of tensor storage. Exactly one slice is set, chosen by DType:
// F32 uses F32, F16 and BF16 use U16 (raw bits), I32 uses I32. A zero Buf means "absent".
type Buf struct {
	DType DType
	F32   []float32
	U16   []uint16
	I32   []int32
	// Dev, when set, is storage on a backend's device (a device tensor); the slices are
	// then nil. Only the backend that made it reads it.
	Dev DeviceMem
}

// DeviceMem is tensor storage that lives on a backend's device.
type DeviceMem interface {
	// Len is the element count.
	Len() int
}

// DeviceBackend is implemented by backends whose device has its own memory (Dawn); the
// CPU backend's device tensors are host memory.
type DeviceBackend interface {
	// NewDeviceMem allocates n elements of dt, zeroed.
	NewDeviceMem(dt DType, n int) (DeviceMem, error)
	// WriteDevice copies host bytes into m (the write is ordered before later calls).
	WriteDevice(m DeviceMem, src []byte) error
	// ReadDevice waits for the work m depends on and copies its bytes into dst; it
	// returns the first pending device error of earlier calls instead, if any.
	ReadDevice(ctx context.Context, m DeviceMem, dst []byte) error
	// FreeDevice releases m; work already submitted that uses it still completes.
	FreeDevice(m DeviceMem) error
	// Sync waits for all submitted work and returns the first pending device error.
	Sync(ctx context.Context) error
}

// MemoryReporter is implemented by backends whose device has its own memory (Dawn): the
// buffers and bytes the backend holds on it now.
type MemoryReporter interface {
	DeviceMemory() (buffers int, bytes uint64)
}

// Recoverer is implemented by backends whose device can be lost (Dawn): Recover reopens a
// lost device now, and reports why when it cannot.
type Recoverer interface {
	Recover() error
}

// PreparedAddLN is an AddLayerNorm with gamma, beta and bias bound once (resident on the
// device for GPU backends). Run ignores a.Gamma, a.Beta and a.Bias.
type PreparedAddLN interface {
	Run(ctx context.Context, a *AddLN) error
	Close() error
}

// AddPreparer is implemented by backends that keep AddLayerNorm weights resident.
type AddPreparer interface {
	PrepareAddLN(gamma, beta, bias Buf, biasFull bool) (PreparedAddLN, error)
}

// Len is the element count.
func (b Buf) Len() int {
	if b.Dev != nil {
		return b.Dev.Len()
	}
	switch b.DType {
	case F32:
		return len(b.F32)
	case F16, BF16:
		return len(b.U16)
	case I32:
		return len(b.I32)
	}
	return 0
}

// Present reports whether the buffer was given.
func (b Buf) Present() bool { return b.DType != Invalid }

// Bytes views the storage as bytes, without copying (little-endian hosts only, which is
// every platform Go supports that also runs Dawn).
func (b Buf) Bytes() []byte {
	switch b.DType {
	case F32:
		if len(b.F32) == 0 {
			return nil
		}
		return unsafe.Slice((*byte)(unsafe.Pointer(&b.F32[0])), len(b.F32)*4)
	case F16, BF16:
		if len(b.U16) == 0 {
			return nil
		}
		return unsafe.Slice((*byte)(unsafe.Pointer(&b.U16[0])), len(b.U16)*2)
	case I32:
		if len(b.I32) == 0 {
			return nil
		}
		return unsafe.Slice((*byte)(unsafe.Pointer(&b.I32[0])), len(b.I32)*4)
	}
	return nil
}

// MaskRule selects how mask_index is derived from the mask (spec §A.4).
type MaskRule uint8

const (
	// MaskFirstZero: index of the first zero in the row, else S (HF kernel card, ORT CUDA).
	MaskFirstZero MaskRule = iota
	// MaskCountOnes: number of entries equal to 1 (ORT CPU, DirectML).
	MaskCountOnes
)

// AddDTypeRows is spec §B.2: the dtype rows AddLayerNorm allows, as x1, x2, gamma (= beta),
// bias (= OutT, the dtype of y and x). The API, the manifest test and the kernel tests share it.
var AddDTypeRows = [][4]DType{
	{F32, F32, F32, F32},
	{F16, F16, F16, F16},
	{BF16, BF16, BF16, BF16},
	{F16, F16, F32, F16},
	{BF16, BF16, F32, BF16},
	{F32, F16, F32, F32},
	{F32, BF16, F32, F32},
	{F16, F32, F32, F32},
	{BF16, F32, F32, F32},
}

// EmbedWeights are the bound, validated weights of an EmbedLayerNorm op.
type EmbedWeights struct {
	DType   DType // F32 or F16
	H       int   // hidden size
	V, P, G int   // rows of the word, position and segment tables (G = 0: no segment table)
	Word    Buf   // (V, H)
	Pos     Buf   // (P, H)
	Seg     Buf   // (G, H); absent when G == 0
	Gamma   Buf   // (H)
	Beta    Buf   // (H)
	Epsilon float32
	Rule    MaskRule
}

// Half reports whether the op's rows are 16-bit data for the reduction plan (plan.For's
// half): its dtype is.
func (w *EmbedWeights) Half() bool { return w.DType.Is16() }

// EmbedInputs are the validated per-call inputs. Every id is already known to be in range.
type EmbedInputs struct {
	B, S     int
	IDs      []int32 // (B, S)
	SegIDs   []int32 // (B, S) or nil: then segment row 0 is used when a segment table exists
	Mask     []int32 // (B, S) or nil
	PosIDs   []int32 // (PosBatch, S) or nil: then position s
	PosBatch int     // 1 or B when PosIDs is set

	// Device tensors (then the matching slice is nil): their ids are checked by the
	// kernel (spec §A.2a), not before the call.
	IDsDev, SegIDsDev, MaskDev, PosIDsDev DeviceMem
}

// EmbedOutputs are caller- or library-allocated, already shape-checked outputs.
type EmbedOutputs struct {
	Out       Buf     // (B, S, H), weights' dtype
	MaskIndex []int32 // (B) or nil when not wanted
	Sum       Buf     // (B, S, H) or absent when not wanted

	MaskIndexDev DeviceMem // mask_index on the device (then MaskIndex is nil)
}

// AddLN is one validated AddLayerNorm call: N rows of D elements.
type AddLN struct {
	N, D     int
	X1, X2   Buf // (N, D)
	Gamma    Buf // (D)
	Beta     Buf // (D)
	Bias     Buf // (D), (N, D) when BiasFull, or absent
	BiasFull bool
	Epsilon  float32

	Y    Buf       // (N, D), OutT
	Mean []float32 // (N)
	Rstd []float32 // (N)
	X    Buf       // (N, D), OutT, or absent when additional_output is false

	MeanDev, RstdDev DeviceMem // mean and rstd on the device (then Mean, Rstd are nil)
}

// Half reports whether the call's rows are 16-bit data for the reduction plan (plan.For's
// half): its output y is, whatever its inputs.
func (a *AddLN) Half() bool { return a.Y.DType.Is16() }

// PreparedEmbed is an EmbedLayerNorm op with its weights bound to a backend (resident on
// the device for GPU backends). Safe for concurrent Run calls.
type PreparedEmbed interface {
	Run(ctx context.Context, in *EmbedInputs, out *EmbedOutputs) error
	Close() error
}

// Info says what a backend is and why it was chosen.
type Info struct {
	Name   string // "cpu" or "dawn"
	Device string // adapter or CPU model
	Detail string // ISA level, driver, contraction profile
	Level  string // CPU kernel level ("go", "avx2", …); empty for GPU backends
	// Software: the device is a CPU rasterizer (lavapipe, SwiftShader): right for testing
	// the GPU path, never faster than the CPU backend.
	Software bool
	Profile  plan.Contraction
	// Library is the file of the Dawn library loaded (GPU backends).
	Library string
	// Health says what befell the device since it was opened (loss, recovery, fallback to
	// the CPU); empty when nothing did.
	Health string
}

// KernelClock asks a GPU backend to time one call's kernel on the device: the call
// dispatches its kernel Repeat times (at least once) in one compute pass between two
// timestamps, waits for it, and sets PerCall to the pass's device time over Repeat. The
// root package exports it as KernelTiming.
type KernelClock struct {
	// Repeat is how many times the kernel is dispatched in the timed pass: a kernel shorter
	// than a pass's own overhead is timed by a Repeat large enough to hide it. Every repeat
	// computes the same outputs from the same inputs.
	Repeat int
	// PerCall is set by the call: the pass's device time over Repeat; zero where the backend
	// has no device timer (the CPU, a GPU without timestamp queries).
	PerCall time.Duration
}

type kernelClockKey struct{}

// WithKernelClock returns a context under which a GPU call is timed into c.
func WithKernelClock(ctx context.Context, c *KernelClock) context.Context {
	return context.WithValue(ctx, kernelClockKey{}, c)
}

// KernelClockFrom returns the clock WithKernelClock put in ctx, or nil.
func KernelClockFrom(ctx context.Context) *KernelClock {
	c, _ := ctx.Value(kernelClockKey{}).(*KernelClock)
	return c
}

// Backend computes both ops. Implementations: cpu.Backend and dawn.Backend.
type Backend interface {
	Info() Info
	// Plan returns the reduction plan this backend uses for a row of h elements, of 16-bit
	// values when half (EmbedWeights.Half, AddLN.Half).
	Plan(h int, half bool) plan.Plan
	PrepareEmbed(w *EmbedWeights) (PreparedEmbed, error)
	AddLayerNorm(ctx context.Context, a *AddLN) error
	Close() error
}

// ArgError is a contract violation: which op, which tensor or attribute, and which rule. The
// root package exports it as fusednorm.ArgError; a backend returns one for what only it can
// check (ids in device tensors, checked on the GPU).
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
