package fusednorm_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/fusednorm/fusednorm"
)

// EmbedLayerNorm: bind the tables once, then run a batch of token ids through them.
func ExampleEngine_NewEmbedLayerNorm() {
	eng, err := fusednorm.Open(fusednorm.WithBackend("cpu"))
	if err != nil {
		log.Fatal(err)
	}
	defer eng.Close()

	const V, P, H = 3, 4, 4 // vocabulary, positions, hidden size
	word := []float32{
		0, 0, 0, 0,
		1, 2, 3, 4,
		4, 3, 2, 1,
	}
	pos := make([]float32, P*H) // all zero: the output is the normalized word row
	gamma := []float32{1, 1, 1, 1}
	beta := []float32{0, 0, 0, 0}
	op, err := eng.NewEmbedLayerNorm(fusednorm.EmbedWeights{
		Word:     fusednorm.FromFloat32(word, V, H),
		Position: fusednorm.FromFloat32(pos, P, H),
		Gamma:    fusednorm.FromFloat32(gamma, H),
		Beta:     fusednorm.FromFloat32(beta, H),
	}, fusednorm.Epsilon(1e-12))
	if err != nil {
		log.Fatal(err)
	}
	defer op.Close()

	ids := []int32{1, 2} // one sequence of two tokens
	mask := []int32{1, 0}
	out := fusednorm.EmbedOutputs{WantMaskIndex: true}
	err = op.Run(context.Background(), fusednorm.EmbedInputs{
		InputIDs: fusednorm.FromInt32(ids, 1, 2),
		Mask:     fusednorm.FromInt32(mask, 1, 2),
	}, &out)
	if err != nil {
		log.Fatal(err)
	}
	y := out.Output.Float32s()
	fmt.Println(out.Output)
	fmt.Printf("%.4f\n", y[:H])
	fmt.Printf("%.4f\n", y[H:])
	fmt.Println("mask_index:", out.MaskIndex.Int32s())

	// An id outside the word table is refused before anything is written.
	err = op.Run(context.Background(), fusednorm.EmbedInputs{InputIDs: fusednorm.FromInt32([]int32{7}, 1, 1)}, &fusednorm.EmbedOutputs{})
	fmt.Println(errors.Is(err, fusednorm.ErrInvalidArgument))
	// Output:
	// float32(1, 2, 4)
	// [-1.3416 -0.4472 0.4472 1.3416]
	// [1.3416 0.4472 -0.4472 -1.3416]
	// mask_index: [1]
	// true
}

// AddLayerNorm: y = LayerNorm(x1 + x2), with the mean and 1/std of each row and, on
// request, the sum x1 + x2.
func ExampleEngine_AddLayerNorm() {
	eng, err := fusednorm.Open(fusednorm.WithBackend("cpu"))
	if err != nil {
		log.Fatal(err)
	}
	defer eng.Close()

	const N, D = 2, 4
	x1 := []float32{1, 2, 3, 4, -2, -1, 0, 1}
	x2 := []float32{1, 1, 1, 1, 1, 0, 1, 0}
	gamma := []float32{1, 1, 1, 1}
	beta := []float32{0, 0, 0, 0}
	var res fusednorm.AddLayerNormOutputs
	err = eng.AddLayerNorm(context.Background(), fusednorm.AddLayerNormInputs{
		X1: fusednorm.FromFloat32(x1, N, D), X2: fusednorm.FromFloat32(x2, N, D),
		Gamma: fusednorm.FromFloat32(gamma, D), Beta: fusednorm.FromFloat32(beta, D),
	}, &res, fusednorm.Epsilon(1e-5), fusednorm.AdditionalOutput(true))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("y    %.4f\n", res.Y.Float32s())
	fmt.Printf("mean %.4f\n", res.Mean.Float32s())
	fmt.Printf("rstd %.4f\n", res.Rstd.Float32s())
	fmt.Printf("x    %v\n", res.X.Float32s())
	// Output:
	// y    [-1.3416 -0.4472 0.4472 1.3416 -1.0000 -1.0000 1.0000 1.0000]
	// mean [3.5000 0.0000]
	// rstd [0.8944 1.0000]
	// x    [2 3 4 5 -1 -1 1 1]
}

// The backend is chosen when the engine opens: WithBackend("cpu") always works;
// "auto" (the default) takes Dawn when it loads and finds a GPU. Info says what runs
// and why.
func ExampleOpen() {
	eng, err := fusednorm.Open(fusednorm.WithBackend("cpu"))
	if err != nil {
		log.Fatal(err)
	}
	defer eng.Close()
	info := eng.Info()
	fmt.Println(info.Backend)
	fmt.Println(info.Reason)

	_, err = fusednorm.Open(fusednorm.WithBackend("tpu"))
	fmt.Println(errors.Is(err, fusednorm.ErrInvalidArgument))
	// Output:
	// cpu
	// cpu requested by option
	// true
}
