package fusednorm

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// runOut runs k and returns output's float32 values.
func runOut(t *testing.T, k *Kernel, in map[string]Tensor, attrs map[string]any, key string) []float32 {
	t.Helper()
	out, err := k.Run(context.Background(), in, attrs)
	require.NoError(t, err)
	return slices.Clone(out[key].Float32s())
}

func TestKernelKeepsPreparedWeights(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		in        map[string]Tensor
		weight    string // a weight to replace by an equal-shaped tensor of other values
	}{
		{embedContract.FullName(), "outputT", embedKernelInputs(2, 3, 8, 5), "wordEmbeddingT"},
		{addContract.FullName(), "yT", addKernelInputs(3, 8), "gammaT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := cpuKernel(t, tc.name)
			first := runOut(t, k, tc.in, nil, tc.out)
			require.Equal(t, first, runOut(t, k, tc.in, nil, tc.out))
			require.Equal(t, 1, k.cache.prepared, "the same weight tensors again: prepared once")

			// The same values in other memory are another tensor; its values are the ones used.
			other := maps.Clone(tc.in)
			w := slices.Clone(tc.in[tc.weight].Float32s())
			for i := range w {
				w[i] *= 2
			}
			other[tc.weight] = FromFloat32(w, tc.in[tc.weight].Shape()...)
			changed := runOut(t, k, other, nil, tc.out)
			require.Equal(t, 2, k.cache.prepared)
			require.NotEqual(t, first, changed, "the new weights' values")
			once, err := k.eng.GetKernel(tc.name, 1) // a fresh Kernel, nothing cached
			require.NoError(t, err)
			require.Equal(t, changed, runOut(t, once, other, nil, tc.out))

			// An attribute the op binds prepares again; Close drops what is held.
			runOut(t, k, other, map[string]any{"epsilon": 0.5}, tc.out)
			require.Equal(t, 3, k.cache.prepared)
			require.NoError(t, k.Close())
			require.Equal(t, changed, runOut(t, k, other, nil, tc.out))
			require.Equal(t, 4, k.cache.prepared)
		})
	}
}

// Concurrent calls alternating between two weight sets: each gets its own weights' result
// while the other's op is retired under it (run with -race).
func TestKernelPreparedConcurrent(t *testing.T) {
	k := cpuKernel(t, embedContract.FullName())
	a := embedKernelInputs(2, 3, 8, 5)
	b := maps.Clone(a)
	w := slices.Clone(a["wordEmbeddingT"].Float32s())
	for i := range w {
		w[i] += 1
	}
	b["wordEmbeddingT"] = FromFloat32(w, 5, 8)
	want := [2][]float32{runOut(t, k, a, nil, "outputT"), runOut(t, k, b, nil, "outputT")}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				which := (g + i) % 2
				in := [2]map[string]Tensor{a, b}[which]
				out, err := k.Run(context.Background(), in, nil)
				if err != nil {
					errs <- err
					return
				}
				if !slices.Equal(out["outputT"].Float32s(), want[which]) {
					errs <- fmt.Errorf("goroutine %d call %d: weights %d gave another result", g, i, which)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
