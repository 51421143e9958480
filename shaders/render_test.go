package shaders_test

import (
	"testing"

	"github.com/fusednorm/fusednorm/internal/shadertest"
)

// TestRenderAll renders every template for every parameter set; dawn's TestCompileShaders
// compiles them too, where a device opens.
func TestRenderAll(t *testing.T) { shadertest.RenderAll(t, nil) }
