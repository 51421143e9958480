//go:build cgo

package dawn

import (
	"runtime"
	"sync"
	"testing"

	"github.com/fusednorm/fusednorm/internal/dawnrt"
	"github.com/fusednorm/fusednorm/internal/shadertest"
	"github.com/fusednorm/fusednorm/internal/testkit"
	"github.com/fusednorm/fusednorm/shaders"
)

// TestCompileShaders compiles every template of package shaders under every flag combination,
// so a template that renders but does not compile fails here. The kernels compile on devices
// of their own (the pipelines live as long as their device), one per CPU up to four: a device
// compiles one pipeline at a time, and lavapipe takes about 0.1 s for each of the hundreds.
func TestCompileShaders(t *testing.T) {
	if shaders.Entry != dawnrt.Entry {
		t.Fatalf("the kernels' entry point %q is not the one the runtime compiles, %q", shaders.Entry, dawnrt.Entry)
	}
	type kernel struct{ key, wgsl string }
	var kernels []kernel
	shadertest.RenderAll(t, func(key, wgsl string) error {
		kernels = append(kernels, kernel{key, wgsl})
		return nil
	})
	devs := make([]*dawnrt.Device, min(runtime.GOMAXPROCS(0), 4, len(kernels)))
	for i := range devs {
		d, err := dawnrt.Open(dawnrt.Options{})
		if err != nil {
			testkit.SkipWithoutDawn(t, err)
		}
		devs[i] = d
		defer func() {
			if err := d.Close(); err != nil {
				t.Error(err)
			}
		}()
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	for i, d := range devs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := i; k < len(kernels); k += len(devs) {
				if _, err := d.NewPipeline("shaderstest."+kernels[k].key, kernels[k].wgsl); err != nil {
					mu.Lock()
					if failed++; failed <= 3 {
						t.Errorf("%s: %v\n%s", kernels[k].key, err, kernels[k].wgsl)
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d kernels compiled on %d devices, %d failed", len(kernels), len(devs), failed)
}
