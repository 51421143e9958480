package tests

import (
	"testing"

	fn "github.com/fusednorm/fusednorm"
	"github.com/fusednorm/fusednorm/shaders"
)

// TestBindKeyLoader runs every test.json case of both ops through the bind-key entry alone,
// as a kernel-hub loader would: GetKernel by the file's op and version, inputs typed by the
// kernel's Manifest, Kernel.Run with the attr map encoding/json decoded (want as []any,
// numbers as float64, NaN as "NaN"), compared as the conformance suite compares.
func TestBindKeyLoader(t *testing.T) {
	eng, err := fn.Open(fn.WithBackend(fn.BackendCPU))
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	RunBindKey(t, eng)

	// Every case ran, at each of its types.
	for _, op := range []string{shaders.OpEmbedLayerNorm, shaders.OpAddLayerNorm} {
		f, err := loadCases(op)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range f.Cases {
			if len(c.Types) == 0 || len(variants(&c)) == 0 {
				t.Errorf("%s: case %s runs nothing", op, c.Name)
			}
		}
	}
}
