//go:build cgo

package dawn

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// CopyProbe measures a device's copy bandwidth, the ceiling the benchmark puts beside the
// kernels' own: a vec4<f32> WGSL copy, one vector per invocation, 256 per workgroup (the
// fastest copy measured through this Dawn), on a device of its own.
type CopyProbe struct {
	d        *device
	p        *pipeline
	src, dst *buffer
}

// copyMax is the most bytes copied each way: one binding of 4 GiB fails, and a copy this
// large already runs at the device's full rate.
const copyMax = 1 << 30

const copyWGSL = `@group(0) @binding(0) var<storage, read> src: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<f32>>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) g: vec3<u32>, @builtin(num_workgroups) n: vec3<u32>) {
	let i = g.x + g.y * n.x * 256u;
	if (i < arrayLength(&dst)) {
		dst[i] = src[i];
	}
}
`

// NewCopyProbe opens a device of its own from the Dawn library libPath names, as
// Config.LibPath does (empty: the usual search), and allocates two 1 GiB buffers for the copy. Errors wrap
// ops.ErrUnavailable when Dawn or an adapter is missing.
func NewCopyProbe(libPath string) (*CopyProbe, error) {
	d, err := openDevice(deviceOptions{LibPath: libPath})
	if err != nil {
		return nil, err
	}
	p := &CopyProbe{d: d}
	if p.p, err = d.pipeline("dawn.copyprobe", copyWGSL, "main"); err == nil {
		if p.src, err = d.createBuffer("dawn.copyprobe.src", copyMax, usageStorage); err == nil {
			p.dst, err = d.createBuffer("dawn.copyprobe.dst", copyMax, usageStorage)
		}
	}
	if err != nil {
		d.close()
		return nil, fmt.Errorf("dawn: NewCopyProbe: %w", err)
	}
	return p, nil
}

// GBps copies bytes/2 (rounded down to a multiple of 16, at most 1 GiB) from one buffer to the
// other, so that bytes are read and written in all, once to warm up and then reps times, each
// pass timed on the device with timestamp queries around its compute pass; it returns the
// bytes moved per second of the median pass, in GB/s. Without TimestampQuery it fails wrapping
// ops.ErrNotSupported.
func (p *CopyProbe) GBps(ctx context.Context, bytes int64, reps int) (float64, error) {
	n := uint64(min(max(bytes/2, 16), copyMax)) &^ 15
	vecs := n / 16
	wgs := (vecs + 255) / 256
	nx := min(wgs, 65535)
	groups := [3]uint32{uint32(nx), uint32((wgs + nx - 1) / nx), 1}
	binds := []binding{{Binding: 0, Buffer: p.src, Size: n}, {Binding: 1, Buffer: p.dst, Size: n}}
	reps = max(reps, 1)
	ts := make([]time.Duration, 0, reps)
	for i := range reps + 1 {
		d, err := p.d.runTimed(ctx, p.p, binds, groups, nil)
		if err != nil {
			return 0, fmt.Errorf("dawn: (*CopyProbe).GBps: %w", err)
		}
		if i > 0 {
			ts = append(ts, d)
		}
	}
	slices.Sort(ts)
	if ts[len(ts)/2] <= 0 {
		return 0, fmt.Errorf("dawn: (*CopyProbe).GBps: the device timed the copy at 0: %w", ops.ErrDevice)
	}
	return float64(2*n) / ts[len(ts)/2].Seconds() / 1e9, nil
}

// Close releases the buffers and the probe's device.
func (p *CopyProbe) Close() error { return p.d.close() }
