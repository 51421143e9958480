// Package cases holds each op's test.json (the conformance suite's cases, tests/),
// bench.json (the benchmark's, cmd/fusednorm-bench) and sweep.json (its width sweep, -set
// sweep, written by sweep_gen.go), one folder per op as in package
// shaders, which keeps only the manifests the library reads. Only tests and the benchmark
// import it, so a program built on the library does not carry the cases (issue 14):
// `go list -deps` of such a program does not list this package.
package cases

import (
	"embed"
	"fmt"
)

//go:generate go run sweep_gen.go

//go:embed embedlayernorm/test.json embedlayernorm/bench.json embedlayernorm/sweep.json
//go:embed addlayernorm/test.json addlayernorm/bench.json addlayernorm/sweep.json
var files embed.FS

// Dir is this folder from the repository's root: the layout -cases of cmd/fusednorm-bench
// reads (<op>/bench.json, <op>/sweep.json).
const Dir = "internal/cases"

// File returns one of an op's case files, "test.json", "bench.json" or "sweep.json"; op is a folder name
// (shaders.OpEmbedLayerNorm, shaders.OpAddLayerNorm).
func File(op, file string) ([]byte, error) {
	b, err := files.ReadFile(op + "/" + file)
	if err != nil {
		return nil, fmt.Errorf("cases: %s/%s: %w", op, file, err)
	}
	return b, nil
}
