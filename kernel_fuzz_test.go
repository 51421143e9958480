package fusednorm

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
)

// FuzzKernelAttrs hands the bind-key entry attribute maps decoded from arbitrary JSON, as a
// hub loader would, over valid inputs of either op: a call either succeeds with the
// required outputs or fails with an ArgError naming one of the attributes; it never panics.
func FuzzKernelAttrs(f *testing.F) {
	for _, seed := range []string{
		`{"epsilon": 1e-5, "want": ["maskIndexT", "embeddingSumT"]}`,
		`{"epsilon": 1e300}`, `{"epsilon": -1e-300}`, `{"epsilon": "NaN"}`, `{"epsilon": "-Infinity"}`,
		`{"epsilon": [1]}`, `{"epsilon": null}`, `{"mask_index_type": 1e19}`, `{"mask_index_type": -0.0}`,
		`{"mask_index_rule": 1}`, `{"mask_index_rule": 1.0000001}`, `{"mask_index_rule": {"a": 1}}`,
		`{"additional_output": 1, "want": ["xT", "yT"]}`, `{"additional_output": "true"}`,
		`{"want": [null, 3, "outputT"]}`, `{"want": []}`, `{"": 0}`,
	} {
		f.Add(seed, false)
		f.Add(seed, true)
	}
	ctx := context.Background()
	e := sharedFuzzEngine(f)
	f.Fuzz(func(t *testing.T, attrJSON string, add bool) {
		var attrs map[string]any
		if json.Unmarshal([]byte(attrJSON), &attrs) != nil {
			return
		}
		name, in, required := "com.microsoft.EmbedLayerNormalization", embedKernelInputs(2, 3, 5, 4), []string{"outputT"}
		if add {
			name, in, required = "ascend.AddLayerNorm", addKernelInputs(3, 5), []string{"yT", "meanT", "rstdT"}
		}
		k, err := e.GetKernel(name, 0)
		if err != nil {
			t.Fatal(err)
		}
		outs, err := k.Run(ctx, in, attrs)
		if err != nil {
			var ae *ArgError
			if !errors.As(err, &ae) {
				t.Fatalf("error is not an ArgError: %v", err)
			}
			if _, ok := attrs[ae.Tensor]; !ok {
				t.Fatalf("error names %q, not one of the attributes: %v", ae.Tensor, err)
			}
			if outs != nil {
				t.Fatalf("failed call returned outputs: %v", err)
			}
			return
		}
		for _, key := range required {
			if _, ok := outs[key]; !ok {
				t.Fatalf("output %s missing (attrs %s)", key, attrJSON)
			}
		}
	})
}
