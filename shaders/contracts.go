package shaders

import (
	"embed"
	"fmt"
)

// The ops' contracts as data, one folder per op: manifest.json (the contract the library
// reads), test.json (correctness cases) and bench.json (benchmark cases). They sit in two
// file systems so that a program which only reads manifests (the library) does not carry
// the cases: the linker drops what nothing reaches.
var (
	//go:embed embedlayernorm/manifest.json addlayernorm/manifest.json
	manifests embed.FS
	//go:embed embedlayernorm/test.json embedlayernorm/bench.json addlayernorm/test.json addlayernorm/bench.json
	cases embed.FS
)

// Op folder names.
const (
	OpEmbedLayerNorm = "embedlayernorm"
	OpAddLayerNorm   = "addlayernorm"
)

// Manifest returns an op's manifest.json.
func Manifest(op string) ([]byte, error) {
	return read(manifests, op, "manifest.json")
}

// ContractFile returns one of an op's JSON files: "manifest.json", "test.json" or
// "bench.json". It is for the conformance suite and the benchmark: a binary that calls it
// carries every case; the library reads its manifests through Manifest.
func ContractFile(op, file string) ([]byte, error) {
	if file == "manifest.json" {
		return Manifest(op)
	}
	return read(cases, op, file)
}

func read(fs embed.FS, op, file string) ([]byte, error) {
	b, err := fs.ReadFile(op + "/" + file)
	if err != nil {
		return nil, fmt.Errorf("shaders: %s/%s: %w", op, file, err)
	}
	return b, nil
}
