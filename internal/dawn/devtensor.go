//go:build cgo

package dawn

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/fusednorm/fusednorm/internal/dawnrt"
	"github.com/fusednorm/fusednorm/internal/ops"
)

var _ ops.DeviceBackend = (*Backend)(nil)

// devBuf is a device tensor's storage.
type devBuf struct {
	b     *Backend
	buf   *dawnrt.Buffer
	dtype ops.DType
	n     int
	bytes uint64 // n elements, before rounding up to whole words
}

// Len is the element count.
func (m *devBuf) Len() int { return m.n }

// NewDeviceMem allocates a zeroed device tensor of n elements.
func (b *Backend) NewDeviceMem(dt ops.DType, n int) (ops.DeviceMem, error) {
	const op = "NewDeviceTensor"
	leave, err := b.enter(op)
	if err != nil {
		return nil, err
	}
	defer leave()
	bytes := uint64(n) * uint64(dt.Size())
	if err := b.checkBinding(op, "tensor", align4(bytes)); err != nil {
		return nil, err
	}
	buf, err := b.dev.NewBuffer("fusednorm.tensor", bytes, dawnrt.UsageStorage|dawnrt.UsageCopySrc|dawnrt.UsageCopyDst)
	if err != nil {
		return nil, err
	}
	return &devBuf{b: b, buf: buf, dtype: dt, n: n, bytes: bytes}, nil
}

// own returns m's storage when this backend made it.
func (b *Backend) own(op, name string, m ops.DeviceMem) (*devBuf, error) {
	db, ok := m.(*devBuf)
	if !ok || db.b != b {
		return nil, fmt.Errorf("dawn: %s: %s: a device tensor of another engine: %w", op, name, ops.ErrInvalidArgument)
	}
	return db, nil
}

// buffer is the buffer of device tensor m (nil for a nil m).
func (b *Backend) buffer(op, name string, m ops.DeviceMem) (*dawnrt.Buffer, error) {
	if m == nil {
		return nil, nil
	}
	db, err := b.own(op, name, m)
	if err != nil {
		return nil, err
	}
	return db.buf, nil
}

// operand is where one tensor of a call lives: a device tensor's buffer, or host bytes.
func (b *Backend) operand(op, name string, x ops.Buf) (*dawnrt.Buffer, []byte, error) {
	if x.Dev == nil {
		return nil, x.Bytes(), nil
	}
	buf, err := b.buffer(op, name, x.Dev)
	return buf, nil, err
}

// WriteDevice writes src into m, ordered after the calls made before it.
func (b *Backend) WriteDevice(m ops.DeviceMem, src []byte) error {
	const op = "DeviceTensor.Write"
	db, err := b.own(op, "tensor", m)
	if err != nil {
		return err
	}
	if uint64(len(src)) != db.bytes {
		return fmt.Errorf("dawn: %s: %d bytes for a %d-byte tensor: %w", op, len(src), db.bytes, ops.ErrInvalidArgument)
	}
	leave, err := b.enter(op)
	if err != nil {
		return err
	}
	defer leave()
	return b.dev.Write(op, db.buf, 0, src)
}

// ReadDevice waits for the work m depends on and copies it into dst.
func (b *Backend) ReadDevice(ctx context.Context, m ops.DeviceMem, dst []byte) error {
	const op = "DeviceTensor.Read"
	db, err := b.own(op, "tensor", m)
	if err != nil {
		return err
	}
	if uint64(len(dst)) != db.bytes {
		return fmt.Errorf("dawn: %s: %d bytes for a %d-byte tensor: %w", op, len(dst), db.bytes, ops.ErrInvalidArgument)
	}
	leave, err := b.enter(op)
	if err != nil {
		return err
	}
	defer leave()
	return b.dev.Read(ctx, op, db.buf, 0, dst)
}

// FreeDevice releases m; work already recorded that uses it still completes.
func (b *Backend) FreeDevice(m ops.DeviceMem) error {
	db, err := b.own("DeviceTensor.Close", "tensor", m)
	if err != nil {
		return err
	}
	db.buf.Release()
	return nil
}

// Sync waits for every call made so far and reports the first device error among the calls
// that did not wait.
func (b *Backend) Sync(ctx context.Context) error {
	leave, err := b.enter("Sync")
	if err != nil {
		return err
	}
	defer leave()
	return b.dev.Sync(ctx)
}

// hostBytes returns x's bytes on the host, reading a device tensor back (prepare time only).
func (b *Backend) hostBytes(ctx context.Context, op, name string, x ops.Buf) ([]byte, error) {
	if x.Dev == nil {
		return x.Bytes(), nil
	}
	db, err := b.own(op, name, x.Dev)
	if err != nil {
		return nil, err
	}
	out := make([]byte, db.bytes)
	if err := b.dev.Read(ctx, op, db.buf, 0, out); err != nil {
		return nil, err
	}
	return out, nil
}

func orBuf(own, dev *dawnrt.Buffer) *dawnrt.Buffer {
	if dev != nil {
		return dev
	}
	return own
}

// releaseAll releases the buffers that ps point to and clears them; nil ones are skipped.
func releaseAll(ps ...**dawnrt.Buffer) {
	for _, p := range ps {
		if *p != nil {
			(*p).Release()
			*p = nil
		}
	}
}

// bytesOf views an int32 or float32 slice as bytes without copying.
func bytesOf[T int32 | float32 | uint32](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*4)
}
