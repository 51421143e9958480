package shaders

import (
	"embed"
	"fmt"
)

// The ops' contracts as data (manifest.json), their correctness cases (test.json) and their
// benchmark cases (bench.json), one folder per op.
//
//go:embed embedlayernorm/*.json addlayernorm/*.json
var contracts embed.FS

// Op folder names.
const (
	OpEmbedLayerNorm = "embedlayernorm"
	OpAddLayerNorm   = "addlayernorm"
)

// ContractFile returns one of an op's JSON files: "manifest.json", "test.json" or "bench.json".
func ContractFile(op, file string) ([]byte, error) {
	b, err := contracts.ReadFile(op + "/" + file)
	if err != nil {
		return nil, fmt.Errorf("shaders: %s/%s: %w", op, file, err)
	}
	return b, nil
}
