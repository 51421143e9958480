//go:build cgo

package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/fusednorm/fusednorm/dawn"
)

// deviceCopier measures the GPU's copy ceiling for the kernel columns: a vec4<f32> WGSL copy,
// one vector per invocation, 256 per workgroup (the fastest copy measured through this Dawn),
// on a device of its own opened from the same library.
type deviceCopier struct {
	d        *dawn.Device
	p        *dawn.Pipeline
	src, dst *dawn.Buffer
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

func newDeviceCopier(lib string) (*deviceCopier, error) {
	d, err := dawn.OpenDevice(dawn.Options{LibPath: lib})
	if err != nil {
		return nil, err
	}
	c := &deviceCopier{d: d}
	if c.p, err = d.Pipeline("bench.copy", copyWGSL, "main"); err == nil {
		if c.src, err = d.CreateBuffer("bench.copy.src", copyMax, dawn.UsageStorage); err == nil {
			c.dst, err = d.CreateBuffer("bench.copy.dst", copyMax, dawn.UsageStorage)
		}
	}
	if err != nil {
		d.Close()
		return nil, err
	}
	return c, nil
}

func (c *deviceCopier) close() { c.d.Close() }

// gbps copies bytes/2 (at most copyMax, a multiple of 16) from one buffer to another, reps
// times after a warm-up, and returns the bytes read and written per second of the median
// pass.
func (c *deviceCopier) gbps(ctx context.Context, bytes int64, reps int) (float64, error) {
	n := uint64(min(max(bytes/2, 16), copyMax)) &^ 15
	vecs := n / 16
	wgs := (vecs + 255) / 256
	nx := min(wgs, 65535)
	groups := [3]uint32{uint32(nx), uint32((wgs + nx - 1) / nx), 1}
	binds := []dawn.Binding{{Binding: 0, Buffer: c.src, Size: n}, {Binding: 1, Buffer: c.dst, Size: n}}
	ts := make([]time.Duration, 0, reps)
	for i := range reps + 1 {
		d, err := c.d.RunTimed(ctx, c.p, binds, groups, nil)
		if err != nil {
			return 0, err
		}
		if i > 0 {
			ts = append(ts, d)
		}
	}
	slices.Sort(ts)
	if ts[len(ts)/2] <= 0 {
		return 0, fmt.Errorf("copy: no device time")
	}
	return float64(2*n) / ts[len(ts)/2].Seconds() / 1e9, nil
}
