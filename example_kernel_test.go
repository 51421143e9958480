package fusednorm_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"

	"github.com/fusednorm/fusednorm"
)

// A kernel-hub loader reaches the op by name and version, binds tensors by the manifest's
// bind keys and passes the attributes as it decoded them from JSON.
func ExampleKernel_Run() {
	eng, err := fusednorm.Open(fusednorm.WithBackend(fusednorm.BackendCPU))
	if err != nil {
		log.Fatal(err)
	}
	defer eng.Close()
	k, err := eng.GetKernel("com.microsoft.EmbedLayerNormalization", 0) // 0: the latest version
	if err != nil {
		log.Fatal(err)
	}
	m := k.Manifest()
	fmt.Printf("%s.%s v%d, inputs %s, %s, …\n", m.Domain, m.Name, m.Version, m.Inputs[0].BindKey, m.Inputs[2].BindKey)

	var attrs map[string]any
	err = json.Unmarshal([]byte(`{"epsilon": 1e-12, "mask_index_rule": "count_ones", "want": ["maskIndexT"]}`), &attrs)
	if err != nil {
		log.Fatal(err)
	}
	inputs := map[string]fusednorm.Tensor{
		"inputIdsT": fusednorm.FromInt32([]int32{1, 2, 0, 1}, 2, 2), // B=2 sequences of S=2 tokens
		"maskT":     fusednorm.FromInt32([]int32{1, 1, 1, 0}, 2, 2),
		"wordEmbeddingT": fusednorm.FromFloat32([]float32{ // V=3 rows, H=3
			0, 1, 2,
			1, 2, 3,
			3, 1, 2,
		}, 3, 3),
		"positionEmbeddingT": fusednorm.FromFloat32([]float32{0, 0, 0, 1, 1, 1}, 2, 3),
		"gammaT":             fusednorm.FromFloat32([]float32{1, 1, 1}, 3),
		"betaT":              fusednorm.FromFloat32([]float32{0, 0, 0}, 3),
	}
	outs, err := k.Run(context.Background(), inputs, attrs)
	if err != nil {
		log.Fatal(err)
	}
	out := outs["outputT"]
	fmt.Println("output", out.Shape())
	fmt.Printf("token 0: %.4f\n", out.Float32s()[:3])
	fmt.Println("mask_index", outs["maskIndexT"].Int32s())
	// Output:
	// com.microsoft.EmbedLayerNormalization v1, inputs inputIdsT, wordEmbeddingT, …
	// output [2 2 3]
	// token 0: [-1.2247 0.0000 1.2247]
	// mask_index [2 1]
}
