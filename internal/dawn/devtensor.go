//go:build cgo

package dawn

import (
	"context"
	"fmt"
	"sync"
	"unsafe"

	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/shaders"
)

var _ ops.DeviceBackend = (*Backend)(nil)

// devBuf is a device tensor's storage.
type devBuf struct {
	b     *Backend
	buf   *buffer
	dtype ops.DType
	n     int
	bytes uint64 // n elements, before rounding up to whole words
}

// Len is the element count.
func (m *devBuf) Len() int { return m.n }

// writeChunk bounds one queue write, so Dawn's own staging for it stays bounded.
const writeChunk = 64 << 20

// NewDeviceMem allocates a zeroed device tensor of n elements.
func (b *Backend) NewDeviceMem(dt ops.DType, n int) (ops.DeviceMem, error) {
	if n < 0 || dt.Size() == 0 {
		return nil, fmt.Errorf("dawn: NewDeviceMem: %d elements of %v: %w", n, dt, ops.ErrInvalidArgument)
	}
	bytes := uint64(n) * uint64(dt.Size())
	if err := b.checkBinding("NewDeviceMem", "tensor", align4(bytes)); err != nil {
		return nil, err
	}
	buf, err := b.dev.createBuffer("fusednorm.tensor", max(align4(bytes), 4), usageStorage|usageCopySrc|usageCopyDst)
	if err != nil {
		return nil, deviceErr(err)
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

// WriteDevice queues a copy of src into m; later calls see it.
func (b *Backend) WriteDevice(m ops.DeviceMem, src []byte) error {
	db, err := b.own("WriteDevice", "tensor", m)
	if err != nil {
		return err
	}
	if uint64(len(src)) != db.bytes {
		return fmt.Errorf("dawn: WriteDevice: %d bytes for a %d-byte tensor: %w", len(src), db.bytes, ops.ErrInvalidArgument)
	}
	d := b.dev
	if err := d.lock(context.Background()); err != nil {
		return err
	}
	defer d.unlock()
	if err := d.usable("WriteDevice"); err != nil {
		return err
	}
	if db.buf.c == nil {
		return fmt.Errorf("dawn: WriteDevice: device tensor closed: %w", ops.ErrInvalidArgument)
	}
	if err := injected(d.inject, "write-buffer"); err != nil {
		return fmt.Errorf("dawn: WriteDevice: %w: %w", ops.ErrDevice, err)
	}
	if d.useRing(uint64(len(src))) {
		return d.uploadLocked("WriteDevice", db.buf, 0, src)
	}
	for off := 0; off < len(src); off += writeChunk {
		n := min(writeChunk, len(src)-off)
		d.queueWrite(db.buf, uint64(off), unsafe.Pointer(&src[off]), n)
	}
	return nil
}

// ReadDevice waits for the work m depends on and copies it into dst.
func (b *Backend) ReadDevice(ctx context.Context, m ops.DeviceMem, dst []byte) error {
	db, err := b.own("ReadDevice", "tensor", m)
	if err != nil {
		return err
	}
	if uint64(len(dst)) != db.bytes {
		return fmt.Errorf("dawn: ReadDevice: %d bytes for a %d-byte tensor: %w", len(dst), db.bytes, ops.ErrInvalidArgument)
	}
	s := specs.Get().(*callSpec)
	defer specs.Put(s)
	s.reset("ReadDevice")
	s.wait = true
	if b.dev.ringFor(uint64(len(dst))) {
		return b.readRing(ctx, s, db.buf, dst)
	}
	s.read(readOp{buf: db.buf, scratch: atBuffer, dst: dst})
	return b.run2(ctx, s)
}

// FreeDevice releases m and the cached bind groups that use it.
func (b *Backend) FreeDevice(m ops.DeviceMem) error {
	db, err := b.own("FreeDevice", "tensor", m)
	if err != nil {
		return err
	}
	d := b.dev
	if err := d.lock(context.Background()); err != nil {
		return err
	}
	defer d.unlock()
	if d.closed || db.buf.c == nil {
		return nil
	}
	if b.dt.cache != nil {
		b.forget(db.buf)
	}
	d.releaseLocked(db.buf)
	return nil
}

// Sync waits for every call submitted so far and reports the first device error among the
// calls that did not wait.
func (b *Backend) Sync(ctx context.Context) error {
	s := specs.Get().(*callSpec)
	defer specs.Put(s)
	s.reset("Sync")
	s.wait = true
	return b.run2(ctx, s)
}

// run2 is exec inside the backend's life lock (Close waits for it).
func (b *Backend) run2(ctx context.Context, s *callSpec) error {
	b.life.RLock()
	defer b.life.RUnlock()
	if b.closed {
		return fmt.Errorf("dawn: %s: %w", s.name, ops.ErrClosed)
	}
	return b.exec(ctx, s)
}

var specs = sync.Pool{New: func() any { return new(callSpec) }}

// embedPipeline is the pipeline of k, cached by the parameter struct (Key formats a string).
func (b *Backend) embedPipeline(k shaders.Embed) (*pipeline, error) {
	st := &b.dt
	st.pipeMu.RLock()
	p := st.embedPipe[k]
	st.pipeMu.RUnlock()
	if p != nil {
		return p, nil
	}
	p, err := b.pipeline(k.Key(), func() (string, error) { return shaders.RenderEmbed(k) })
	if err != nil {
		return nil, err
	}
	st.pipeMu.Lock()
	if st.embedPipe == nil {
		st.embedPipe = map[shaders.Embed]*pipeline{}
	}
	st.embedPipe[k] = p
	st.pipeMu.Unlock()
	return p, nil
}

// addPipeline is the pipeline of k, cached by the parameter struct.
func (b *Backend) addPipeline(k shaders.AddLN) (*pipeline, error) {
	st := &b.dt
	st.pipeMu.RLock()
	p := st.addPipe[k]
	st.pipeMu.RUnlock()
	if p != nil {
		return p, nil
	}
	p, err := b.pipeline(k.Key(), func() (string, error) { return shaders.RenderAddLN(k) })
	if err != nil {
		return nil, err
	}
	st.pipeMu.Lock()
	if st.addPipe == nil {
		st.addPipe = map[shaders.AddLN]*pipeline{}
	}
	st.addPipe[k] = p
	st.pipeMu.Unlock()
	return p, nil
}
