package fusednorm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func cpuKernel(t *testing.T, name string) *Kernel {
	t.Helper()
	e, err := Open(WithBackend(BackendCPU))
	require.NoError(t, err)
	t.Cleanup(func() { e.Close() })
	k, err := e.GetKernel(name, 1)
	require.NoError(t, err)
	return k
}

// embedKernelInputs are valid bind-key inputs of EmbedLayerNorm: ids (B, S) over a word
// table of V rows and a position table of S rows, H wide, float32.
func embedKernelInputs(B, S, H, V int) map[string]Tensor {
	ids := make([]int32, B*S)
	for i := range ids {
		ids[i] = int32(i % V)
	}
	f := func(n int, v float32) Tensor {
		d := make([]float32, n)
		for i := range d {
			d[i] = v + float32(i%7)/8
		}
		return FromFloat32(d, n)
	}
	word, pos := f(V*H, 0.5), f(S*H, -0.25)
	return map[string]Tensor{
		"inputIdsT": FromInt32(ids, B, S), "maskT": FromInt32(make([]int32, B*S), B, S),
		"wordEmbeddingT": FromFloat32(word.Float32s(), V, H), "positionEmbeddingT": FromFloat32(pos.Float32s(), S, H),
		"gammaT": f(H, 1), "betaT": f(H, 0),
	}
}

func addKernelInputs(N, D int) map[string]Tensor {
	f := func(v float32, shape ...int) Tensor {
		n := 1
		for _, d := range shape {
			n *= d
		}
		d := make([]float32, n)
		for i := range d {
			d[i] = v + float32(i%5)/4
		}
		return FromFloat32(d, shape...)
	}
	return map[string]Tensor{"x1T": f(1, N, D), "x2T": f(-1, N, D), "gammaT": f(1, D), "betaT": f(0, D)}
}

// allocated is the bytes the Go heap handed out while f ran.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestKernelRejectsBeforeAllocating: a call the kernel refuses (one id out of range, an
// epsilon past float32, a bias of the wrong shape) allocates no output first (issue 12,
// item 3: B=64, S=512, H=1024 with embeddingSumT wanted allocated 256 MiB).
func TestKernelRejectsBeforeAllocating(t *testing.T) {
	ctx := context.Background()
	const B, S, H, V = 64, 512, 1024, 8
	ek := cpuKernel(t, "com.microsoft.EmbedLayerNormalization")
	in := embedKernelInputs(B, S, H, V)
	ids := in["inputIdsT"].Int32s()
	ids[len(ids)-1] = V // out of range
	var outs map[string]Tensor
	var err error
	n := allocated(func() {
		outs, err = ek.Run(ctx, in, map[string]any{"want": []any{"embeddingSumT", "maskIndexT"}})
	})
	var ae *ArgError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, "input_ids", ae.Tensor)
	require.Nil(t, outs)
	require.Less(t, n, uint64(1<<20), "a rejected call allocated %d bytes (its outputs would take %d)", n, 2*B*S*H*4)
	t.Logf("rejected EmbedLayerNorm call (B=%d S=%d H=%d): %d bytes allocated", B, S, H, n)

	ids[len(ids)-1] = 0
	n = allocated(func() { _, err = ek.Run(ctx, in, map[string]any{"epsilon": 1e300, "want": []string{"embeddingSumT"}}) })
	require.ErrorAs(t, err, &ae)
	require.Equal(t, "epsilon", ae.Tensor)
	require.Less(t, n, uint64(1<<20))

	const N, D = 4096, 1024
	ak := cpuKernel(t, "ascend.AddLayerNorm")
	ain := addKernelInputs(N, D)
	ain["biasT"] = FromFloat32(make([]float32, 2*D), 2, D) // neither gamma's shape nor x1's
	n = allocated(func() { outs, err = ak.Run(ctx, ain, map[string]any{"additional_output": true}) })
	require.ErrorAs(t, err, &ae)
	require.Equal(t, "bias", ae.Tensor)
	require.Nil(t, outs)
	require.Less(t, n, uint64(1<<20), "a rejected call allocated %d bytes (its outputs would take %d)", n, 2*N*D*4)
	t.Logf("rejected AddLayerNorm call (N=%d D=%d): %d bytes allocated", N, D, n)
}

// TestKernelRefusesHugeOutputs: outputs past the memory the process may use are an
// ArgError naming the output, not a fatal "out of memory" (issue 12, item 2).
func TestKernelRefusesHugeOutputs(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(4 << 30))
	ctx := context.Background()
	// 64×256 tokens of a 2^20-wide table: outputs of 16 GiB each from 16 MiB of inputs.
	const B, S, H = 64, 256, 1 << 20
	k := cpuKernel(t, "com.microsoft.EmbedLayerNormalization")
	in := embedKernelInputs(B, S, 8, 1)
	in["wordEmbeddingT"] = FromFloat32(make([]float32, H), 1, H)
	in["positionEmbeddingT"] = FromFloat32(make([]float32, H), 1, H)
	in["positionIdsT"] = FromInt32(make([]int32, S), 1, S)
	in["gammaT"], in["betaT"] = FromFloat32(make([]float32, H), H), FromFloat32(make([]float32, H), H)
	var err error
	n := allocated(func() { _, err = k.Run(ctx, in, nil) })
	require.ErrorIs(t, err, ErrNotSupported)
	require.Contains(t, err.Error(), "EmbedLayerNorm")
	require.Contains(t, err.Error(), "output")
	require.Less(t, n, uint64(1<<20))
}

// TestKernelFailedCallLeavesCallerData: a failed call returns no outputs and leaves the
// inputs map and its tensors as they were.
func TestKernelFailedCallLeavesCallerData(t *testing.T) {
	k := cpuKernel(t, "com.microsoft.EmbedLayerNormalization")
	in := embedKernelInputs(2, 3, 4, 5)
	in["positionIdsT"] = FromInt32([]int32{0, 1, 7}, 1, 3) // out of range
	keys := sortedKeys(in)
	before := map[string][]float64{}
	for key, tt := range in {
		for i := range tt.Len() {
			before[key] = append(before[key], tt.At(i))
		}
	}
	outs, err := k.Run(context.Background(), in, map[string]any{"want": []string{"maskIndexT", "embeddingSumT"}})
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.Nil(t, outs)
	require.Equal(t, keys, sortedKeys(in))
	for key, tt := range in {
		for i := range tt.Len() {
			require.Equal(t, before[key][i], tt.At(i), "%s[%d]", key, i)
		}
	}
}

// TestKernelAttrsFromJSON: attributes as encoding/json decodes them (numbers as float64,
// lists as []any) give the same results as Go values, and bad ones are ArgErrors.
func TestKernelAttrsFromJSON(t *testing.T) {
	ctx := context.Background()
	decode := func(s string) map[string]any {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(s), &m))
		return m
	}
	same := func(k *Kernel, in map[string]Tensor, goAttrs map[string]any, jsonAttrs string) {
		t.Helper()
		want, err := k.Run(ctx, in, goAttrs)
		require.NoError(t, err)
		got, err := k.Run(ctx, in, decode(jsonAttrs))
		require.NoError(t, err)
		require.Equal(t, sortedKeys(want), sortedKeys(got))
		for key := range want {
			require.Equal(t, want[key], got[key], key)
		}
	}
	ek := cpuKernel(t, "com.microsoft.EmbedLayerNormalization")
	ein := embedKernelInputs(3, 4, 8, 5)
	ein["maskT"] = FromInt32([]int32{1, 1, 0, 1, 1, 1, 1, 1, 0, 1, 1, 0}, 3, 4)
	same(ek, ein, map[string]any{"epsilon": float32(1e-3), "mask_index_type": 1, "mask_index_rule": "count_ones", "want": []string{"maskIndexT", "embeddingSumT"}},
		`{"epsilon": 1e-3, "mask_index_type": 1, "mask_index_rule": "count_ones", "want": ["maskIndexT", "embeddingSumT"]}`)
	same(ek, ein, map[string]any{"mask_index_rule": "count_ones", "want": []string{"maskIndexT"}},
		`{"mask_index_rule": 1, "want": ["maskIndexT"]}`)
	ak := cpuKernel(t, "ascend.AddLayerNorm")
	ain := addKernelInputs(3, 8)
	same(ak, ain, map[string]any{"epsilon": 1e-4, "additional_output": true}, `{"epsilon": 1e-4, "additional_output": 1}`)
	same(ak, ain, map[string]any{"want": []string{"xT"}}, `{"additional_output": true}`)

	for _, c := range []struct {
		k           *Kernel
		in          map[string]Tensor
		attrs, attr string
	}{
		{ek, ein, `{"epsilon": 1e300}`, "epsilon"},
		{ek, ein, `{"epsilon": -1e300}`, "epsilon"},
		{ak, ain, `{"epsilon": 1e300}`, "epsilon"},
		{ak, ain, `{"epsilon": "NaN"}`, "epsilon"},
		{ak, ain, `{"epsilon": "Infinity"}`, "epsilon"},
		{ek, ein, `{"epsilon": "tiny"}`, "epsilon"},
		{ek, ein, `{"mask_index_type": 1.5}`, "mask_index_type"},
		{ek, ein, `{"mask_index_type": "1"}`, "mask_index_type"},
		{ek, ein, `{"mask_index_rule": 7}`, "mask_index_rule"},
		{ek, ein, `{"mask_index_rule": "last_one"}`, "mask_index_rule"},
		{ek, ein, `{"want": ["maskIndexT", 3]}`, "want"},
		{ek, ein, `{"want": "maskIndexT"}`, "want"},
		{ek, ein, `{"want": ["xT"]}`, "want"},
		{ek, ein, `{"additional_output": true}`, "additional_output"},
		{ak, ain, `{"additional_output": 2}`, "additional_output"},
		{ak, ain, `{"mask_index_rule": "first_zero"}`, "mask_index_rule"},
	} {
		_, err := c.k.Run(ctx, c.in, decode(c.attrs))
		var ae *ArgError
		require.ErrorAs(t, err, &ae, c.attrs)
		require.Equal(t, c.attr, ae.Tensor, c.attrs)
		require.Equal(t, c.k.op(), ae.Op, c.attrs)
	}
}

func TestGetKernelVersions(t *testing.T) {
	e, err := Open(WithBackend(BackendCPU))
	require.NoError(t, err)
	defer e.Close()
	for _, name := range KernelNames() {
		k, err := e.GetKernel(name, 0)
		require.NoError(t, err, "version 0 is the latest")
		require.Equal(t, 1, k.Version())
		require.Equal(t, name, k.Name())
		_, err = e.GetKernel(name, 2)
		require.ErrorIs(t, err, ErrNotSupported)
	}
}

// TestKernelManifest: the manifest a Kernel hands out says what the kernel takes.
func TestKernelManifest(t *testing.T) {
	for _, c := range []*opContract{&embedContract, &addContract} {
		k := cpuKernel(t, c.FullName())
		m := k.Manifest()
		require.Equal(t, c.Domain+"."+c.Name, m.Domain+"."+m.Name)
		require.Equal(t, c.Version, m.Version)
		require.Len(t, m.Inputs, len(c.Inputs))
		for i, in := range m.Inputs {
			require.Equal(t, c.Inputs[i].BindKey, in.BindKey)
			require.Equal(t, c.Inputs[i].Name, in.Name)
			require.Equal(t, c.Inputs[i].Optional, in.Optional)
			require.Equal(t, [2]int{c.Inputs[i].MinRank, c.Inputs[i].MaxRank}, [2]int{in.MinRank, in.MaxRank}, in.BindKey)
			require.NotEmpty(t, m.TypeConstraints[in.DType], in.BindKey)
		}
		require.Len(t, m.Outputs, len(c.Outputs))
		for i, o := range m.Outputs {
			require.Equal(t, c.Outputs[i].BindKey, o.BindKey)
			require.NotEmpty(t, o.Shape, o.BindKey)
			require.NotEmpty(t, m.TypeConstraints[o.DType], o.BindKey)
		}
		var names []string
		for _, a := range m.Attributes {
			names = append(names, a.Name)
			require.NotNil(t, a.Default, a.Name)
		}
		require.Equal(t, sortedKeys(c.Attributes), names)
		var raw map[string]any
		require.NoError(t, json.Unmarshal(m.JSON, &raw))
		require.Equal(t, c.Name, raw["name"])
		// The caller owns the result.
		m.Inputs[0].BindKey, m.TypeConstraints[m.Inputs[0].DType][0] = "x", "x"
		require.Equal(t, c.Inputs[0].BindKey, k.Manifest().Inputs[0].BindKey)
		require.NotEqual(t, "x", k.Manifest().TypeConstraints[m.Inputs[0].DType][0])
	}
}

// TestKernelErrorsNameTheOpAsTheTypedAPI: ArgError.Op is one name per op, whichever entry
// the call came through.
func TestKernelErrorsNameTheOpAsTheTypedAPI(t *testing.T) {
	ctx := context.Background()
	e, err := Open(WithBackend(BackendCPU))
	require.NoError(t, err)
	defer e.Close()
	ek := cpuKernel(t, "com.microsoft.EmbedLayerNormalization")
	ak := cpuKernel(t, "ascend.AddLayerNorm")
	opOf := func(err error) string {
		t.Helper()
		var ae *ArgError
		require.True(t, errors.As(err, &ae), "%v", err)
		return ae.Op
	}
	ein := embedKernelInputs(2, 3, 4, 5)
	ein["betaT"] = FromFloat32(make([]float32, 3), 3)
	_, kerr := ek.Run(ctx, ein, nil)
	terr := e.EmbedLayerNormOnce(ctx, EmbedWeights{Word: ein["wordEmbeddingT"], Position: ein["positionEmbeddingT"], Gamma: ein["gammaT"], Beta: ein["betaT"]},
		EmbedInputs{InputIDs: ein["inputIdsT"]}, &EmbedOutputs{})
	require.Equal(t, opOf(terr), opOf(kerr))
	require.Equal(t, "EmbedLayerNorm", opOf(kerr))
	_, kerr = ek.Run(ctx, map[string]Tensor{"bogusT": {}}, nil)
	require.Equal(t, "EmbedLayerNorm", opOf(kerr))

	ain := addKernelInputs(2, 4)
	_, kerr = ak.Run(ctx, ain, map[string]any{"epsilon": math.NaN()})
	terr = e.AddLayerNorm(ctx, AddLayerNormInputs{X1: ain["x1T"], X2: ain["x2T"], Gamma: ain["gammaT"], Beta: ain["betaT"]}, &AddLayerNormOutputs{}, Epsilon(float32(math.NaN())))
	require.Equal(t, opOf(terr), opOf(kerr))
	_, kerr = ak.Run(ctx, ain, map[string]any{"colour": "blue"})
	require.Equal(t, "AddLayerNorm", opOf(kerr))
}

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
