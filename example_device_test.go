package fusednorm_test

import (
	"context"
	"fmt"

	"github.com/fusednorm/fusednorm"
)

// Device tensors keep data on the engine's device between calls: here the output of one
// AddLayerNorm feeds the next one without a round trip, and only the final result is read
// back. The same code runs on the GPU; on the CPU backend (used here) a device tensor is
// host memory.
func ExampleDeviceTensor() {
	eng, err := fusednorm.Open(fusednorm.WithBackend(fusednorm.BackendCPU))
	if err != nil {
		panic(err)
	}
	defer eng.Close()
	ctx := context.Background()

	// gamma and beta bound once; on a GPU they stay resident.
	op, err := eng.NewAddLayerNorm(fusednorm.AddLayerNormWeights{
		Gamma: fusednorm.FromFloat32([]float32{1, 1, 1, 1}, 4),
		Beta:  fusednorm.FromFloat32([]float32{0, 0, 0, 0}, 4),
	})
	if err != nil {
		panic(err)
	}
	defer op.Close()

	x, err := eng.Upload(fusednorm.FromFloat32([]float32{1, 2, 3, 4}, 1, 4))
	if err != nil {
		panic(err)
	}
	defer x.Close()
	zero, _ := eng.NewDeviceTensor(fusednorm.Float32, 1, 4)
	defer zero.Close()
	y, _ := eng.NewDeviceTensor(fusednorm.Float32, 1, 4)
	defer y.Close()
	mean, _ := eng.NewDeviceTensor(fusednorm.Float32, 1, 1)
	defer mean.Close()
	rstd, _ := eng.NewDeviceTensor(fusednorm.Float32, 1, 1)
	defer rstd.Close()

	// Two chained calls: every tensor is on the device, so neither call waits.
	out := fusednorm.AddLayerNormOutputs{Y: y.Tensor(), Mean: mean.Tensor(), Rstd: rstd.Tensor()}
	if err := op.Run(ctx, x.Tensor(), zero.Tensor(), &out); err != nil {
		panic(err)
	}
	if err := op.Run(ctx, y.Tensor(), y.Tensor(), &fusednorm.AddLayerNormOutputs{Y: x.Tensor(), Mean: mean.Tensor(), Rstd: rstd.Tensor()}); err != nil {
		panic(err)
	}

	// Read waits for the work it depends on (and reports a device error of any call before).
	host := fusednorm.FromFloat32(make([]float32, 4), 1, 4)
	if err := x.Read(ctx, host); err != nil {
		panic(err)
	}
	for _, v := range host.Float32s() {
		fmt.Printf("%.3f ", v)
	}
	fmt.Println()
	// Output: -1.342 -0.447 0.447 1.342
}
