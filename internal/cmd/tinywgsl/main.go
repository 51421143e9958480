// Command tinywgsl writes the two kernels of the tiny-call benchmark (issue 17), as the Go
// path renders them for EmbedLayerNorm f32 (1,1,768) and AddLayerNorm f32 (1,768), into a
// directory for the native twin as a program, cgo/bench/tiny_bench.c (internal/tinytwin/wgsl):
//
//	go run ./internal/cmd/tinywgsl build/tiny && build/tiny_bench third_party/dawn/libwebgpu_wrapper.so build/tiny
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/fusednorm/fusednorm/internal/tinytwin/wgsl"
)

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
	embed, add, invH, err := wgsl.Kernels()
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
		"invh.txt": fmt.Sprintf("%.9g\n", invH),
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			return err
		}
	}
	return nil
}
