package shaders

import (
	"embed"
	"fmt"
)

// The ops' contracts as data, one folder per op: manifest.json, the contract the library
// reads. The ops' test.json and bench.json live in internal/cases, which only the tests and
// the benchmark import, so the library's programs do not carry them.
//
//go:embed embedlayernorm/manifest.json addlayernorm/manifest.json
var manifests embed.FS

// Op folder names.
const (
	OpEmbedLayerNorm = "embedlayernorm"
	OpAddLayerNorm   = "addlayernorm"
)

// Manifest returns an op's manifest.json.
func Manifest(op string) ([]byte, error) {
	b, err := manifests.ReadFile(op + "/manifest.json")
	if err != nil {
		return nil, fmt.Errorf("shaders: %s/manifest.json: %w", op, err)
	}
	return b, nil
}
