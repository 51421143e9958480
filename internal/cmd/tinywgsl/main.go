// Command tinywgsl writes the two kernels of the tiny-call benchmark (issue 17), as the Go
// path renders them for EmbedLayerNorm f32 (1,1,768) and AddLayerNorm f32 (1,768), into a
// directory for the native twin, cgo/bench/tiny_bench.c:
//
//	go run ./internal/cmd/tinywgsl build/tiny && build/tiny_bench third_party/dawn/libwebgpu_wrapper.so build/tiny
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/plan"
	"github.com/fusednorm/fusednorm/shaders"
)

// tinyH is the row length of both tiny calls.
const tinyH = 768

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: tinywgsl DIR")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "tinywgsl:", err)
		os.Exit(1)
	}
}

func run(dir string) error {
	// The kernels do not depend on the contraction profile; the plan's width does not either.
	p := plan.For(tinyH, plan.Contraction{})
	private := shaders.PrivateFor(p.H, p.W)
	// Its ids are a device tensor, bound where it is (SplitInts), as the Go path does.
	ek := shaders.Embed{W: p.W, Private: private, DType: ops.F32, SplitInts: true}
	ek.Vectorize(p.H) // as the Go path picks its kernel
	embed, err := shaders.RenderEmbed(ek)
	if err != nil {
		return err
	}
	ak := shaders.AddLN{W: p.W, Private: private, X1: ops.F32, X2: ops.F32, Gamma: ops.F32, Out: ops.F32}
	ak.Vectorize(p.H)
	add, err := shaders.RenderAddLN(ak)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	files := map[string]string{
		"embed.wgsl": embed,
		"addln.wgsl": add,
		// The workgroup size the kernels were rendered for is W; the C side only dispatches.
		"invh.txt": fmt.Sprintf("%.9g\n", p.InvH),
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			return err
		}
	}
	return nil
}
