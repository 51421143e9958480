//go:build cgo

package shaders_test

// This file lives in the external test package so it can import dawn (which imports
// shaders); it hands TestRenderAll a compiler through the exported hook below.

import (
	"github.com/fusednorm/fusednorm/dawn"
	"github.com/fusednorm/fusednorm/shaders"
)

func init() {
	shaders.SetTestCompiler(func() (func(key, wgsl string) error, func(), error) {
		dev, err := dawn.OpenDevice(dawn.Options{})
		if err != nil {
			return nil, nil, err
		}
		compile := func(key, wgsl string) error {
			_, err := dev.Pipeline("shaderstest."+key, wgsl, shaders.Entry)
			return err
		}
		return compile, func() { dev.Close() }, nil
	})
}
