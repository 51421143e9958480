//go:build cgo

package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/fusednorm/fusednorm/internal/dawnrt"
	"github.com/fusednorm/fusednorm/internal/ops"
)

// copyProbe measures a device's copy bandwidth, the ceiling the benchmark puts beside the
// kernels' own: WGSL copies through the same runtime and Dawn library, on a device of its
// own. Every variant in copyVariants is timed once per case and the fastest counts, so "% of
// copy" divides by the best copy this Dawn does, not by one that flatters the kernels.
type copyProbe struct {
	d        *dawnrt.Device
	variants []*copyKernel
	src, dst *dawnrt.Buffer
}

// copyKernel is one copy variant: vectors per invocation and invocations per workgroup.
type copyKernel struct {
	name  string
	vecs  int // vec4<f32> per invocation, loaded then stored
	group int // invocations per workgroup
	p     *dawnrt.Pipeline
}

// copyMax is the most bytes copied each way: one binding of 4 GiB fails, and a copy this
// large already runs at the device's full rate.
const copyMax = 1 << 30

// copyVariants are the grids and widths tried: one vec4<f32> per invocation at 256 a
// workgroup (4.30 TB/s on the H200 in an earlier standalone probe), and wider or fewer
// invocations, which give each more bytes in flight.
var copyVariants = []struct{ vecs, group int }{{1, 256}, {1, 128}, {1, 512}, {2, 256}, {4, 256}, {4, 128}}

func copyWGSL(vecs, group int) string {
	return fmt.Sprintf(`@group(0) @binding(0) var<storage, read> src: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<f32>>;

// Invocation g copies vectors g, g + n, g + 2n, ... (%[1]d of them), n the grid's invocations:
// every load of a wave is contiguous, and the loads are issued before the stores.
@compute @workgroup_size(%[2]d)
fn main(@builtin(global_invocation_id) g: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
	let n = nwg.x * nwg.y * %[2]du;
	let i = g.x + g.y * nwg.x * %[2]du;
	let len = arrayLength(&dst);
	var v: array<vec4<f32>, %[1]d>;
	for (var k = 0u; k < %[1]du; k++) {
		let j = i + k * n;
		if (j < len) {
			v[k] = src[j];
		}
	}
	for (var k = 0u; k < %[1]du; k++) {
		let j = i + k * n;
		if (j < len) {
			dst[j] = v[k];
		}
	}
}
`, vecs, group)
}

// newCopyProbe opens a device of its own on the Dawn library the engine loaded and makes
// the copy kernels and two 1 GiB buffers.
func newCopyProbe(library string) (*copyProbe, error) {
	d, err := dawnrt.Open(dawnrt.Options{Library: library})
	if err != nil {
		return nil, err
	}
	p := &copyProbe{d: d}
	for _, v := range copyVariants {
		k := &copyKernel{name: fmt.Sprintf("%d vec4/inv, %d inv/wg", v.vecs, v.group), vecs: v.vecs, group: v.group}
		if k.p, err = d.NewPipeline("copy "+k.name, copyWGSL(v.vecs, v.group)); err != nil {
			break
		}
		p.variants = append(p.variants, k)
	}
	if err == nil {
		if p.src, err = d.NewBuffer("copyprobe.src", copyMax, dawnrt.UsageStorage); err == nil {
			p.dst, err = d.NewBuffer("copyprobe.dst", copyMax, dawnrt.UsageStorage)
		}
	}
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("copy probe: %w", err)
	}
	return p, nil
}

// gbps copies bytes/2 (a multiple of 16, at most 1 GiB) from one buffer to the other with
// every variant, reps times each after one warm-up, each pass timed on the device; it
// returns the best variant's median in GB/s (bytes read plus written) and its name.
func (p *copyProbe) gbps(ctx context.Context, bytes int64, reps int) (float64, string, error) {
	n := uint64(min(max(bytes/2, 16), copyMax)) &^ 15
	vecs := n / 16
	best, name := 0.0, ""
	for _, k := range p.variants {
		inv := (vecs + uint64(k.vecs) - 1) / uint64(k.vecs)
		wgs := (inv + uint64(k.group) - 1) / uint64(k.group)
		nx := min(wgs, 65535)
		groups := [3]uint32{uint32(nx), uint32((wgs + nx - 1) / nx), 1}
		var c dawnrt.Call
		ts := make([]time.Duration, 0, reps)
		for i := range max(reps, 1) + 1 {
			c.Reset("copy")
			c.Kernel(k.p, groups)
			c.Bind(0, "src", p.src, n, false)
			c.Bind(1, "dst", p.dst, n, true)
			clock := ops.KernelClock{Repeat: 1}
			if err := p.d.Run(ops.WithKernelClock(ctx, &clock), &c); err != nil {
				return 0, "", err
			}
			if clock.PerCall <= 0 {
				return 0, "", fmt.Errorf("copy probe: the device has no timestamps: %w", ops.ErrNotSupported)
			}
			if i > 0 {
				ts = append(ts, clock.PerCall)
			}
		}
		slices.Sort(ts)
		if g := float64(2*n) / ts[len(ts)/2].Seconds() / 1e9; g > best {
			best, name = g, k.name
		}
	}
	return best, name, nil
}

func (p *copyProbe) close() { p.d.Close() }
