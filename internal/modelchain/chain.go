// Package modelchain builds the norms of a transformer encoder as a model runs them, for the
// benchmarks (cmd/fusednorm-bench -chain and the root package's BenchmarkChain): one
// EmbedLayerNorm, then one AddLayerNorm per sub-layer, each with its own weights, the
// activation ping-ponged between two tensors, a residual added at every step, only y wanted.
// It uses the public API only.
package modelchain

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/x448/float16"

	"github.com/fusednorm/fusednorm"
)

// Shape is one chain: EmbedLayerNorm (Batch, Seq, Hidden) over a BERT-sized vocabulary, then
// Layers AddLayerNorms of width Hidden.
type Shape struct {
	Batch, Seq, Hidden, Layers int
	DType                      fusednorm.DType // Float32 or Float16
}

// Vocab and Segments are BERT-base's; positions are Seq.
const (
	Vocab    = 30522
	Segments = 2
)

func (s Shape) String() string {
	dt := "f32"
	if s.DType == fusednorm.Float16 {
		dt = "f16"
	}
	return fmt.Sprintf("(%d,%d,%d)+%d %s", s.Batch, s.Seq, s.Hidden, s.Layers, dt)
}

// Calls is the chain's length.
func (s Shape) Calls() int { return 1 + s.Layers }

// Bytes is the memory the chain's calls read and write on the device, for a budget check:
// the embedding tables, the weights, the ids and four activations.
func (s Shape) Bytes() int64 {
	el := int64(4)
	if s.DType == fusednorm.Float16 {
		el = 2
	}
	h, rows := int64(s.Hidden), int64(s.Batch)*int64(s.Seq)
	return el*h*(Vocab+int64(s.Seq)+Segments+2+2*int64(s.Layers)) + 8*rows + 4*el*rows*h
}

// ParseShapes reads a comma-separated list of BxSxH (Layers and DType from the arguments).
func ParseShapes(list string, layers int, dt fusednorm.DType) ([]Shape, error) {
	var out []Shape
	for _, f := range strings.Split(list, ",") {
		parts := strings.Split(strings.TrimSpace(f), "x")
		if len(parts) != 3 {
			return nil, fmt.Errorf("chain %q: want BxSxH, e.g. 8x128x768", f)
		}
		var v [3]int
		for i, p := range parts {
			n, err := strconv.Atoi(p)
			if err != nil || n < 1 {
				return nil, fmt.Errorf("chain %q: %q is not a positive integer", f, p)
			}
			v[i] = n
		}
		out = append(out, Shape{Batch: v[0], Seq: v[1], Hidden: v[2], Layers: layers, DType: dt})
	}
	return out, nil
}

// Chain is a built chain on one engine. Run it, then wait (Engine.Sync) or read Final.
type Chain struct {
	Shape   Shape
	eng     *fusednorm.Engine
	embed   *fusednorm.EmbedLayerNorm
	adds    []*fusednorm.AddLayerNorm
	in      fusednorm.EmbedInputs
	act     [2]fusednorm.Tensor
	actDev  [2]*fusednorm.DeviceTensor // act's device tensors, on the device
	resid   fusednorm.Tensor
	closers []interface{ Close() error }
}

// ramp is deterministic data in [-1, 1): the same on every engine.
func ramp(n, seed int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32((i*7+seed*13)%997)/498.5 - 1
	}
	return s
}

// New builds s on eng: with device set every tensor (weights, ids, activations, residual) is
// a device tensor, as a model keeps them; otherwise host tensors.
func New(eng *fusednorm.Engine, s Shape, device bool) (c *Chain, err error) {
	if s.DType != fusednorm.Float32 && s.DType != fusednorm.Float16 {
		return nil, fmt.Errorf("chain %v: dtype %v: want Float32 or Float16", s, s.DType)
	}
	c = &Chain{Shape: s, eng: eng}
	defer func() {
		if err != nil {
			c.Close()
			c = nil
		}
	}()
	keep := func(t fusednorm.Tensor) fusednorm.Tensor {
		if err != nil || !device {
			return t
		}
		d, e := eng.Upload(t)
		if e != nil {
			err = e
			return fusednorm.Tensor{}
		}
		c.closers = append(c.closers, d)
		return d.Tensor()
	}
	floats := func(v []float32, shape ...int) fusednorm.Tensor {
		if s.DType == fusednorm.Float16 {
			bits := make([]uint16, len(v))
			for i, f := range v {
				bits[i] = float16.Fromfloat32(f).Bits()
			}
			return keep(fusednorm.FromFloat16Bits(bits, shape...))
		}
		return keep(fusednorm.FromFloat32(v, shape...))
	}
	B, S, H := s.Batch, s.Seq, s.Hidden
	gamma := func(seed int) []float32 {
		g := ramp(H, seed)
		for i := range g {
			g[i] = 1 + g[i]/8
		}
		return g
	}
	w := fusednorm.EmbedWeights{
		Word: floats(ramp(Vocab*H, 1), Vocab, H), Position: floats(ramp(S*H, 2), S, H),
		Segment: floats(ramp(Segments*H, 3), Segments, H), Gamma: floats(gamma(4), H), Beta: floats(ramp(H, 5), H),
	}
	ids, segs := make([]int32, B*S), make([]int32, B*S)
	for i := range ids {
		ids[i] = int32((i*7919 + 11) % Vocab)
		segs[i] = int32(i % S * Segments / S)
	}
	c.in = fusednorm.EmbedInputs{InputIDs: keep(fusednorm.FromInt32(ids, B, S)), SegmentIDs: keep(fusednorm.FromInt32(segs, B, S))}
	for i := range c.act {
		c.act[i] = floats(make([]float32, B*S*H), B, S, H)
		if device && err == nil {
			c.actDev[i] = c.closers[len(c.closers)-1].(*fusednorm.DeviceTensor)
		}
	}
	resid := ramp(B*S*H, 6)
	for i := range resid {
		resid[i] /= 4
	}
	c.resid = floats(resid, B, S, H)
	if err != nil {
		return nil, err
	}
	if c.embed, err = eng.NewEmbedLayerNorm(w); err != nil {
		return nil, err
	}
	c.closers = append(c.closers, c.embed)
	for l := range s.Layers {
		op, err := eng.NewAddLayerNorm(fusednorm.AddLayerNormWeights{Gamma: floats(gamma(10+2*l), H), Beta: floats(ramp(H, 11+2*l), H)})
		if err != nil {
			return nil, err
		}
		c.closers = append(c.closers, op)
		c.adds = append(c.adds, op)
	}
	return c, err
}

// Run records or runs the chain's calls in order; the last one's y is Final. On a GPU engine
// the calls may still be in flight when it returns: Engine.Sync or Final().Read waits.
func (c *Chain) Run(ctx context.Context) error {
	return c.run(ctx, nil)
}

// KernelTimes runs the chain once with each call's kernel timed over repeat dispatches
// (fusednorm.TimeKernels) and returns the device time per call; zero where the engine has no
// device timer.
func (c *Chain) KernelTimes(ctx context.Context, repeat int) ([]time.Duration, error) {
	times := make([]time.Duration, 0, c.Shape.Calls())
	err := c.run(ctx, func(call func(context.Context) error) error {
		t := fusednorm.KernelTiming{Repeat: repeat}
		if err := call(fusednorm.TimeKernels(ctx, &t)); err != nil {
			return err
		}
		times = append(times, t.PerCall)
		return nil
	})
	return times, err
}

func (c *Chain) run(ctx context.Context, wrap func(func(context.Context) error) error) error {
	do := func(call func(context.Context) error) error {
		if wrap != nil {
			return wrap(call)
		}
		return call(ctx)
	}
	if err := do(func(ctx context.Context) error {
		return c.embed.Run(ctx, c.in, &fusednorm.EmbedOutputs{Output: c.act[0]})
	}); err != nil {
		return fmt.Errorf("chain %v: EmbedLayerNorm: %w", c.Shape, err)
	}
	for l, op := range c.adds {
		x1, y := c.act[l%2], c.act[(l+1)%2]
		if err := do(func(ctx context.Context) error {
			return op.Run(ctx, x1, c.resid, &fusednorm.AddLayerNormOutputs{Y: y, NoStats: true})
		}); err != nil {
			return fmt.Errorf("chain %v: AddLayerNorm %d: %w", c.Shape, l, err)
		}
	}
	return nil
}

// Final is the last call's output: a device tensor's view when the chain is on the device.
func (c *Chain) Final() fusednorm.Tensor { return c.act[len(c.adds)%2] }

// ReadFinal copies the last call's output into dst (a host tensor of its shape and dtype),
// waiting for the chain.
func (c *Chain) ReadFinal(ctx context.Context, dst fusednorm.Tensor) error {
	if d := c.actDev[len(c.adds)%2]; d != nil {
		return d.Read(ctx, dst)
	}
	return copyTensor(dst, c.Final())
}

func copyTensor(dst, src fusednorm.Tensor) error {
	if !slices.Equal(dst.Shape(), src.Shape()) || dst.DType() != src.DType() {
		return errors.New("modelchain: destination differs from the chain's output in shape or dtype")
	}
	if src.DType() == fusednorm.Float32 {
		copy(dst.Float32s(), src.Float32s())
	} else {
		copy(dst.Bits16(), src.Bits16())
	}
	return nil
}

// Close releases everything the chain made.
func (c *Chain) Close() {
	for _, cl := range slices.Backward(c.closers) {
		cl.Close()
	}
	c.closers = nil
}
