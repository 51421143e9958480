// Package wgsl renders the two kernels of the tiny calls of issue 17 as the Go path renders
// them, for the C twin (internal/tinytwin in a Go process, cgo/bench/tiny_bench.c through
// internal/cmd/tinywgsl as a program). It is apart from the twin, which is cgo that links
// against package dawn's C, so that a program without package dawn can render them.
package wgsl

import (
	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/plan"
	"github.com/fusednorm/fusednorm/shaders"
)

// H is the row length of both tiny calls.
const H = 768

// Kernels renders the two kernels of the tiny calls as the Go path renders them, and the
// plan's 1/H that their parameters carry.
func Kernels() (embed, add string, invH float32, err error) {
	// The kernels do not depend on the contraction profile; the plan's width does not either.
	p := plan.For(H, false, plan.Contraction{})
	private := shaders.PrivateFor(p.H, p.W)
	// Its ids are a device tensor, bound where it is (SplitInts), as the Go path does.
	ek := shaders.Embed{W: p.W, Private: private, DType: ops.F32, SplitInts: true}
	ek.Vectorize(p) // as the Go path picks its kernel
	if embed, err = shaders.RenderEmbed(ek); err != nil {
		return "", "", 0, err
	}
	ak := shaders.AddLN{W: p.W, Private: private, X1: ops.F32, X2: ops.F32, Gamma: ops.F32, Out: ops.F32}
	ak.Vectorize(p)
	if add, err = shaders.RenderAddLN(ak); err != nil {
		return "", "", 0, err
	}
	return embed, add, p.InvH, nil
}
