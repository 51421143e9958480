//go:build cgo

package dawn

import (
	"testing"

	"github.com/fusednorm/fusednorm/internal/shadertest"
	"github.com/fusednorm/fusednorm/shaders"
)

// TestCompileShaders compiles every template of package shaders under every flag combination,
// so a template that renders but does not compile fails here.
func TestCompileShaders(t *testing.T) {
	d := openRuntimeDevice(t, deviceOptions{})
	shadertest.RenderAll(t, func(key, wgsl string) error {
		_, err := d.pipeline("shaderstest."+key, wgsl, shaders.Entry)
		return err
	})
}
