package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"

	"github.com/x448/float16"

	"github.com/fusednorm/fusednorm"
)

// workload is a case set up on an engine: inputs filled, outputs allocated, ready to be
// timed. run is one call of the public API.
type workload struct {
	run   func(ctx context.Context) error
	close func()
}

// setup builds the case's tensors outside any timing. The data is seeded: the same case
// gets the same bytes whatever the thread count.
func setup(eng *fusednorm.Engine, c *benchCase, threads int) (*workload, error) {
	host, err := setupHostTensors(c, threads)
	if err != nil {
		return nil, err
	}
	return setupOn(eng, c, host)
}

// setupOn makes the case's workload on eng from its host data (setupHostTensors), which
// several engines can share: a workload writes only its own outputs.
func setupOn(eng *fusednorm.Engine, c *benchCase, host []fusednorm.Tensor) (*workload, error) {
	switch c.op {
	case opEmbed:
		return setupEmbed(eng, c, host)
	case opAdd:
		return setupAdd(eng, c, host)
	}
	return nil, fmt.Errorf("unknown op %q", c.op)
}

func setupEmbed(eng *fusednorm.Engine, c *benchCase, host []fusednorm.Tensor) (*workload, error) {
	B, S, H := c.Shape["B"], c.Shape["S"], c.Shape["H"]
	w := fusednorm.EmbedWeights{Word: host[0], Position: host[1], Segment: host[2], Gamma: host[3], Beta: host[4]}
	op, err := eng.NewEmbedLayerNorm(w, fusednorm.Epsilon(c.epsilon))
	if err != nil {
		return nil, err
	}
	in := fusednorm.EmbedInputs{InputIDs: host[5], SegmentIDs: host[6], Mask: host[7]}
	var out fusednorm.EmbedOutputs
	if out.Output, err = fusednorm.NewTensor(dtypeOf(c.DType), B, S, H); err != nil {
		op.Close()
		return nil, err
	}
	if out.MaskIndex, err = fusednorm.NewTensor(fusednorm.Int32, B); err != nil {
		op.Close()
		return nil, err
	}
	return &workload{
		run:   func(ctx context.Context) error { return op.Run(ctx, in, &out) },
		close: func() { op.Close() },
	}, nil
}

func setupAdd(eng *fusednorm.Engine, c *benchCase, host []fusednorm.Tensor) (*workload, error) {
	N, D := c.Shape["N"], c.Shape["D"]
	dt := dtypeOf(c.DType)
	in := fusednorm.AddLayerNormInputs{X1: host[0], X2: host[1], Gamma: host[2], Beta: host[3], Bias: host[4]}
	var out fusednorm.AddLayerNormOutputs
	var err error
	for _, t := range []struct {
		p     *fusednorm.Tensor
		dt    fusednorm.DType
		shape []int
	}{{&out.Y, dt, []int{N, D}}, {&out.X, dt, []int{N, D}}, {&out.Mean, fusednorm.Float32, []int{N, 1}}, {&out.Rstd, fusednorm.Float32, []int{N, 1}}} {
		if *t.p, err = fusednorm.NewTensor(t.dt, t.shape...); err != nil {
			return nil, err
		}
	}
	opts := []fusednorm.OpOption{fusednorm.Epsilon(c.epsilon), fusednorm.AdditionalOutput(true)}
	return &workload{
		run:   func(ctx context.Context) error { return eng.AddLayerNorm(ctx, in, &out, opts...) },
		close: func() {},
	}, nil
}

func dtypeOf(name string) fusednorm.DType {
	switch name {
	case "float16":
		return fusednorm.Float16
	case "bfloat16":
		return fusednorm.BFloat16
	}
	return fusednorm.Float32
}

// bf16 rounds f to bfloat16 bits, to nearest even (the bench's values are finite).
func bf16(f float32) uint16 {
	b := math.Float32bits(f)
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// filler makes seeded uniform random tensors, in parallel: the largest cases hold several
// GiB of input, and one goroutine would spend longer filling them than timing the op.
type filler struct {
	seed    uint64
	threads int
}

// fillChunk is the element count per independent random stream; fixed so the data does
// not depend on the thread count.
const fillChunk = 1 << 16

// floats returns a tensor of the dtype and shape with values uniform in [-scale, scale).
// stream tells the tensors of one case apart.
func (f *filler) floats(dtype string, stream uint64, scale float32, shape ...int) fusednorm.Tensor {
	n := 1
	for _, d := range shape {
		n *= d
	}
	// 16-bit: draw from a table of 4096 evenly spaced values, converted once; the benchmark
	// needs varied data, not a continuous distribution, and the conversion would dominate.
	var table [4096]uint16
	half := dtype == "float16" || dtype == "bfloat16"
	if half {
		for i := range table {
			v := scale * (float32(i)/2048 - 1)
			if dtype == "bfloat16" {
				table[i] = bf16(v)
			} else {
				table[i] = float16.Fromfloat32(v).Bits()
			}
		}
	}
	var f32 []float32
	var u16 []uint16
	if half {
		u16 = make([]uint16, n)
	} else {
		f32 = make([]float32, n)
	}
	chunks := (n + fillChunk - 1) / fillChunk
	var next sync.Mutex
	ci := 0
	var wg sync.WaitGroup
	for range max(1, f.threads) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				next.Lock()
				k := ci
				ci++
				next.Unlock()
				if k >= chunks {
					return
				}
				r := rand.NewPCG(f.seed^stream<<32, uint64(k))
				lo, hi := k*fillChunk, min(n, (k+1)*fillChunk)
				if half {
					for i := lo; i < hi; i++ {
						u16[i] = table[r.Uint64()>>52]
					}
					continue
				}
				const inv = 1.0 / (1 << 24)
				for i := lo; i < hi; i++ {
					f32[i] = scale * (float32(r.Uint64()>>40)*inv*2 - 1)
				}
			}
		}()
	}
	wg.Wait()
	switch dtype {
	case "float16":
		return fusednorm.FromFloat16Bits(u16, shape...)
	case "bfloat16":
		return fusednorm.FromBFloat16Bits(u16, shape...)
	}
	return fusednorm.FromFloat32(f32, shape...)
}
