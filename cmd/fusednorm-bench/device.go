package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/fusednorm/fusednorm"
)

// The -tiny mode (issue 17): what a call costs beyond its kernel, through the public API
// with every per-call tensor on the device and the weights resident. Its native twin is
// cgo/bench/tiny_bench.c, which prints the same lines with "C" in front.

// tinyOp is one prepared tiny call and what it holds.
type tinyOp struct {
	name    string
	call    func() error
	closers []interface{ Close() error }
}

func (t *tinyOp) close() {
	for _, c := range slices.Backward(t.closers) {
		c.Close()
	}
}

// ramp is deterministic data of the same shape on both sides (cgo/bench/tiny_bench.c).
func ramp(n int, scale float32) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(i%97)*scale - 1
	}
	return s
}

func newTinyOps(ctx context.Context, eng *fusednorm.Engine) (ops []*tinyOp, err error) {
	const H, V, P = 768, 64, 8
	var closers []interface{ Close() error }
	defer func() {
		if err != nil {
			for _, c := range closers {
				c.Close()
			}
		}
	}()
	dev := func(t fusednorm.Tensor) fusednorm.Tensor {
		if err != nil {
			return fusednorm.Tensor{}
		}
		d, e := eng.Upload(t)
		if e != nil {
			err = e
			return fusednorm.Tensor{}
		}
		closers = append(closers, d)
		return d.Tensor()
	}
	embed, err := eng.NewEmbedLayerNorm(fusednorm.EmbedWeights{
		Word: dev(fusednorm.FromFloat32(ramp(V*H, 0.01), V, H)), Position: dev(fusednorm.FromFloat32(ramp(P*H, 0.02), P, H)),
		Gamma: dev(fusednorm.FromFloat32(ramp(H, 0.003), H)), Beta: dev(fusednorm.FromFloat32(ramp(H, 0.001), H))})
	if err != nil {
		return nil, err
	}
	closers = append(closers, embed)
	ein := fusednorm.EmbedInputs{InputIDs: dev(fusednorm.FromInt32([]int32{5}, 1, 1))}
	eout := fusednorm.EmbedOutputs{Output: dev(fusednorm.FromFloat32(make([]float32, H), 1, 1, H))}
	add, err := eng.NewAddLayerNorm(fusednorm.AddLayerNormWeights{
		Gamma: dev(fusednorm.FromFloat32(ramp(H, 0.003), H)), Beta: dev(fusednorm.FromFloat32(ramp(H, 0.001), H))})
	if err != nil {
		return nil, err
	}
	closers = append(closers, add)
	x1, x2 := dev(fusednorm.FromFloat32(ramp(H, 0.01), 1, H)), dev(fusednorm.FromFloat32(ramp(H, 0.01), 1, H))
	aout := fusednorm.AddLayerNormOutputs{Y: dev(fusednorm.FromFloat32(make([]float32, H), 1, H)),
		Mean: dev(fusednorm.FromFloat32(make([]float32, 1), 1, 1)), Rstd: dev(fusednorm.FromFloat32(make([]float32, 1), 1, 1))}
	if err != nil {
		return nil, err
	}
	return []*tinyOp{
		{name: "EmbedLayerNorm", call: func() error { return embed.Run(ctx, ein, &eout) }, closers: closers},
		{name: "AddLayerNorm", call: func() error { return add.Run(ctx, x1, x2, &aout) }},
	}, nil
}

func runTiny(ctx context.Context, o *options, stdout io.Writer) error {
	var opts []fusednorm.Option
	if o.backendSet {
		opts = append(opts, fusednorm.WithBackend(o.backend))
	}
	eng, err := fusednorm.Open(opts...)
	if err != nil {
		return err
	}
	defer eng.Close()
	fmt.Fprintf(stdout, "engine: %s\n", eng.Info())
	ops, err := newTinyOps(ctx, eng)
	if err != nil {
		return err
	}
	defer func() {
		for _, op := range ops {
			op.close()
		}
	}()
	n := o.tiny
	t := make([]time.Duration, n)
	for _, op := range ops {
		for range 20 {
			if err := op.call(); err != nil {
				return err
			}
		}
		if err := eng.Sync(ctx); err != nil {
			return err
		}
		for i := range n {
			t0 := time.Now()
			if err := op.call(); err != nil {
				return err
			}
			if err := eng.Sync(ctx); err != nil {
				return err
			}
			t[i] = time.Since(t0)
		}
		each := median(t)
		start := time.Now()
		for i := range n {
			t0 := time.Now()
			if err := op.call(); err != nil {
				return err
			}
			t[i] = time.Since(t0)
		}
		if err := eng.Sync(ctx); err != nil {
			return err
		}
		total := time.Since(start)
		b2b := median(t)
		fmt.Fprintf(stdout, "Go %-14s one-by-one median %9.2f us   back-to-back median %9.2f us   back-to-back mean (with the final wait) %9.2f us   (N=%d)\n",
			op.name, us(each), us(b2b), us(total/time.Duration(n)), n)
	}
	return nil
}

func median(t []time.Duration) time.Duration {
	s := slices.Clone(t)
	slices.Sort(s)
	return s[len(s)/2]
}

func us(d time.Duration) float64 { return float64(d) / 1e3 }
