package fusednorm

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/fusednorm/fusednorm/internal/testkit"
	"github.com/stretchr/testify/require"
)

// deviceEngines are the engines the device-tensor tests run on: the CPU, and Dawn when it
// loads (lavapipe in CI; FUSEDNORM_REQUIRE_DAWN=1 makes its absence a failure).
func deviceEngines(t *testing.T, opts ...Option) map[string]*Engine {
	t.Helper()
	out := map[string]*Engine{}
	c, err := Open(append([]Option{WithBackend(BackendCPU)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	out["cpu"] = c
	if d := dawnEngine(t, opts...); d != nil {
		out["dawn"] = d
	}
	return out
}

func dawnEngine(t *testing.T, opts ...Option) *Engine {
	t.Helper()
	d, err := Open(append([]Option{WithBackend(BackendDawn)}, opts...)...)
	if err != nil {
		testkit.NoteWithoutDawn(t, err)
		return nil
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func upload(t *testing.T, e *Engine, x Tensor) Tensor {
	t.Helper()
	d, err := e.Upload(x)
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	return d.Tensor()
}

func devLike(t *testing.T, e *Engine, dt DType, shape ...int) *DeviceTensor {
	t.Helper()
	d, err := e.NewDeviceTensor(dt, shape...)
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	return d
}

func readBack(t *testing.T, d *DeviceTensor) Tensor {
	t.Helper()
	h, err := NewTensor(d.DType(), d.Shape()...)
	require.NoError(t, err)
	require.NoError(t, d.Read(context.Background(), h))
	return h
}

// TestDeviceTensorsSameBits runs both ops with host tensors, then with every input and
// output a device tensor, then mixed, and wants the same bits each time.
func TestDeviceTensorsSameBits(t *testing.T) {
	ctx := context.Background()
	for name, e := range deviceEngines(t) {
		t.Run(name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(7, 8))
			for _, dt := range []DType{Float32, Float16} {
				const B, S, H, V, P, G = 2, 5, 70, 30, 8, 2
				w := EmbedWeights{Word: allocTensor(r, dt, 0, V, H), Position: allocTensor(r, dt, 0, P, H),
					Segment: allocTensor(r, dt, 0, G, H), Gamma: allocTensor(r, dt, 0, H), Beta: allocTensor(r, dt, 0, H)}
				in := EmbedInputs{InputIDs: allocTensor(r, Int32, V, B, S), SegmentIDs: allocTensor(r, Int32, G, B, S),
					Mask: FromInt32([]int32{1, 1, 1, 0, 0, 1, 1, 1, 1, 1}, B, S), PositionIDs: allocTensor(r, Int32, P, 1, S)}
				op, err := e.NewEmbedLayerNorm(w)
				require.NoError(t, err)
				defer op.Close()
				want := EmbedOutputs{WantMaskIndex: true, WantEmbeddingSum: true}
				require.NoError(t, op.Run(ctx, in, &want))

				// Everything on the device, weights included.
				dw := EmbedWeights{Word: upload(t, e, w.Word), Position: upload(t, e, w.Position), Segment: upload(t, e, w.Segment),
					Gamma: upload(t, e, w.Gamma), Beta: upload(t, e, w.Beta)}
				dop, err := e.NewEmbedLayerNorm(dw)
				require.NoError(t, err)
				defer dop.Close()
				din := EmbedInputs{InputIDs: upload(t, e, in.InputIDs), SegmentIDs: upload(t, e, in.SegmentIDs),
					Mask: upload(t, e, in.Mask), PositionIDs: upload(t, e, in.PositionIDs)}
				o, mi, sum := devLike(t, e, dt, B, S, H), devLike(t, e, Int32, B), devLike(t, e, dt, B, S, H)
				require.NoError(t, dop.Run(ctx, din, &EmbedOutputs{Output: o.Tensor(), MaskIndex: mi.Tensor(), EmbeddingSum: sum.Tensor()}))
				require.Equal(t, want.Output.buf.Bytes(), readBack(t, o).buf.Bytes(), "%v output", dt)
				require.Equal(t, want.MaskIndex.Int32s(), readBack(t, mi).Int32s(), "%v mask_index", dt)
				require.Equal(t, want.EmbeddingSum.buf.Bytes(), readBack(t, sum).buf.Bytes(), "%v embedding_sum", dt)

				// Mixed: device ids, host weights, host output, device sum.
				mixed := EmbedOutputs{WantMaskIndex: true, EmbeddingSum: sum.Tensor()}
				require.NoError(t, op.Run(ctx, EmbedInputs{InputIDs: din.InputIDs, SegmentIDs: in.SegmentIDs, Mask: din.Mask,
					PositionIDs: in.PositionIDs}, &mixed))
				require.Equal(t, want.Output.buf.Bytes(), mixed.Output.buf.Bytes())
				require.Equal(t, want.MaskIndex.Int32s(), mixed.MaskIndex.Int32s())
				require.Equal(t, want.EmbeddingSum.buf.Bytes(), readBack(t, sum).buf.Bytes())
			}
			for _, row := range [][4]DType{{Float32, Float32, Float32, Float32}, {Float16, Float16, Float16, Float16},
				{BFloat16, BFloat16, Float32, BFloat16}, {Float32, Float16, Float32, Float32}} {
				const N, D = 6, 33
				in := AddLayerNormInputs{X1: allocTensor(r, row[0], 0, N, D), X2: allocTensor(r, row[1], 0, N, D),
					Gamma: allocTensor(r, row[2], 0, D), Beta: allocTensor(r, row[2], 0, D), Bias: allocTensor(r, row[3], 0, N, D)}
				var want AddLayerNormOutputs
				require.NoError(t, e.AddLayerNorm(ctx, in, &want, AdditionalOutput(true)))
				din := AddLayerNormInputs{X1: upload(t, e, in.X1), X2: upload(t, e, in.X2), Gamma: upload(t, e, in.Gamma),
					Beta: upload(t, e, in.Beta), Bias: upload(t, e, in.Bias)}
				y, x := devLike(t, e, row[3], N, D), devLike(t, e, row[3], N, D)
				mean, rstd := devLike(t, e, Float32, N, 1), devLike(t, e, Float32, N, 1)
				out := AddLayerNormOutputs{Y: y.Tensor(), X: x.Tensor(), Mean: mean.Tensor(), Rstd: rstd.Tensor()}
				err := e.AddLayerNorm(ctx, din, &out)
				if row[2] != Float32 && name == "dawn" {
					// gamma+beta of an odd 16-bit row cannot be joined on the device per call.
					require.ErrorIs(t, err, ErrNotSupported)
					din.Gamma, din.Beta = in.Gamma, in.Beta
					err = e.AddLayerNorm(ctx, din, &out)
				}
				require.NoError(t, err)
				require.Equal(t, want.Y.buf.Bytes(), readBack(t, y).buf.Bytes(), "%v y", row)
				require.Equal(t, want.X.buf.Bytes(), readBack(t, x).buf.Bytes(), "%v x", row)
				require.Equal(t, want.Mean.Float32s(), readBack(t, mean).Float32s(), "%v mean", row)
				require.Equal(t, want.Rstd.Float32s(), readBack(t, rstd).Float32s(), "%v rstd", row)

				// Prepared, weights on the device, host x2, host x and mean (given: a call whose y is
				// on the device allocates no host output).
				p, err := e.NewAddLayerNorm(AddLayerNormWeights{Gamma: upload(t, e, in.Gamma), Beta: upload(t, e, in.Beta), Bias: din.Bias},
					AdditionalOutput(true))
				require.NoError(t, err)
				defer p.Close()
				hx, _ := NewTensor(row[3], N, D)
				hmean, _ := NewTensor(Float32, N, 1)
				out = AddLayerNormOutputs{Y: y.Tensor(), Rstd: rstd.Tensor(), X: hx, Mean: hmean}
				require.NoError(t, p.Run(ctx, din.X1, in.X2, &out))
				require.Equal(t, want.Y.buf.Bytes(), readBack(t, y).buf.Bytes(), "%v prepared y", row)
				require.Equal(t, want.X.buf.Bytes(), out.X.buf.Bytes(), "%v prepared x", row)
				require.Equal(t, want.Mean.Float32s(), out.Mean.Float32s(), "%v prepared mean", row)
				require.Equal(t, want.Rstd.Float32s(), readBack(t, rstd).Float32s(), "%v prepared rstd", row)
			}
		})
	}
}

// TestDeviceTensorChain feeds one op's device output into the next op without reading back
// in between, and reads once at the end.
func TestDeviceTensorChain(t *testing.T) {
	ctx := context.Background()
	for name, e := range deviceEngines(t) {
		t.Run(name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(9, 10))
			const N, D = 4, 64
			g, b := allocTensor(r, Float32, 0, D), allocTensor(r, Float32, 0, D)
			x1, x2 := allocTensor(r, Float32, 0, N, D), allocTensor(r, Float32, 0, N, D)
			p, err := e.NewAddLayerNorm(AddLayerNormWeights{Gamma: g, Beta: b})
			require.NoError(t, err)
			defer p.Close()
			// Host reference: y1 = f(x1, x2), y2 = f(y1, x2), y3 = f(y2, x2).
			hy := x1
			for range 3 {
				var out AddLayerNormOutputs
				require.NoError(t, p.Run(ctx, hy, x2, &out))
				hy = out.Y
			}
			a, c := devLike(t, e, Float32, N, D), devLike(t, e, Float32, N, D)
			dx2 := upload(t, e, x2)
			require.NoError(t, a.Write(x1))
			src, dst := a, c
			for range 3 {
				require.NoError(t, p.Run(ctx, src.Tensor(), dx2, &AddLayerNormOutputs{Y: dst.Tensor(),
					Mean: devLike(t, e, Float32, N, 1).Tensor(), Rstd: devLike(t, e, Float32, N, 1).Tensor()}))
				src, dst = dst, src
			}
			require.Equal(t, hy.Float32s(), readBack(t, src).Float32s())
			require.NoError(t, e.Sync(ctx))
		})
	}
}

// TestDeviceTensorNoLeak counts the device's buffers: device tensors, calls on them and a
// prepared op leave none behind once closed.
func TestDeviceTensorNoLeak(t *testing.T) {
	e := dawnEngine(t)
	if e == nil {
		t.Skip("needs Dawn")
	}
	ctx := context.Background()
	before, ok := e.liveDeviceBuffers()
	require.True(t, ok)
	r := rand.New(rand.NewPCG(1, 2))
	const N, D = 3, 40
	var tensors []*DeviceTensor
	up := func(x Tensor) Tensor {
		d, err := e.Upload(x)
		require.NoError(t, err)
		tensors = append(tensors, d)
		return d.Tensor()
	}
	p, err := e.NewAddLayerNorm(AddLayerNormWeights{Gamma: up(allocTensor(r, Float32, 0, D)), Beta: up(allocTensor(r, Float32, 0, D))})
	require.NoError(t, err)
	x1, x2, y := up(allocTensor(r, Float32, 0, N, D)), up(allocTensor(r, Float32, 0, N, D)), up(allocTensor(r, Float32, 0, N, D))
	for range 3 {
		require.NoError(t, p.Run(ctx, x1, x2, &AddLayerNormOutputs{Y: y}))
	}
	require.NoError(t, e.Sync(ctx))
	during, _ := e.liveDeviceBuffers()
	require.Greater(t, during, before)
	// The op's resident weights go with it, although cached bind groups used them.
	require.NoError(t, p.Close())
	afterOp, _ := e.liveDeviceBuffers()
	// gamma+beta, and the uniform of the one cached call: with y on the device and mean and
	// rstd left zero, the call computes no statistics and keeps no scratch for them.
	require.Equal(t, during-2, afterOp, "closing the op should free its buffers")
	// A host-weight op on device tensors: its resident tables go with it too.
	r2 := rand.New(rand.NewPCG(2, 3))
	beforeE, _ := e.liveDeviceBuffers()
	eop, err := e.NewEmbedLayerNorm(EmbedWeights{Word: allocTensor(r2, Float32, 0, 7, D), Position: allocTensor(r2, Float32, 0, 2, D),
		Gamma: allocTensor(r2, Float32, 0, D), Beta: allocTensor(r2, Float32, 0, D)})
	require.NoError(t, err)
	eout := up(allocTensor(r2, Float32, 0, 1, 2, D))
	require.NoError(t, eop.Run(ctx, EmbedInputs{InputIDs: up(FromInt32([]int32{1, 6}, 1, 2))}, &EmbedOutputs{Output: eout}))
	require.NoError(t, eop.Close())
	afterE, _ := e.liveDeviceBuffers()
	// Left: the two new device tensors, and the device-wide id-status buffer that the first
	// call with device ids made (kept until the engine closes; the zero buffer that clears
	// the id flags was made by the first EmbedLayerNorm call, the calibration's).
	require.Equal(t, beforeE+2+1, afterE, "closing the op should free its tables and the call's scratch")
	for _, d := range tensors {
		require.NoError(t, d.Close())
		require.NoError(t, d.Close()) // twice is fine
	}
	after, _ := e.liveDeviceBuffers()
	require.Equal(t, before+1, after, "device buffers leaked (beyond the device-wide id-status buffer)")
	// A closed tensor is refused, not used.
	err = e.AddLayerNorm(ctx, AddLayerNormInputs{X1: x1, X2: allocTensor(r, Float32, 0, N, D), Gamma: allocTensor(r, Float32, 0, D),
		Beta: allocTensor(r, Float32, 0, D)}, &AddLayerNormOutputs{})
	require.ErrorIs(t, err, ErrInvalidArgument)
}

// TestDeviceIDsCheckedByTheKernel: an out-of-range id in a device tensor is not seen by the
// call (it returns once submitted); the next wait reports it, naming the call (spec §A.2a).
func TestDeviceIDsCheckedByTheKernel(t *testing.T) {
	e := dawnEngine(t)
	if e == nil {
		t.Skip("needs Dawn")
	}
	ctx := context.Background()
	r := rand.New(rand.NewPCG(3, 4))
	const S, H, V = 4, 16, 10
	op, err := e.NewEmbedLayerNorm(EmbedWeights{Word: allocTensor(r, Float32, 0, V, H), Position: allocTensor(r, Float32, 0, S, H),
		Gamma: allocTensor(r, Float32, 0, H), Beta: allocTensor(r, Float32, 0, H)})
	require.NoError(t, err)
	defer op.Close()
	good := upload(t, e, FromInt32([]int32{1, 2, 3, 4}, 1, S))
	bad := upload(t, e, FromInt32([]int32{1, 2, V, 4}, 1, S))
	out := devLike(t, e, Float32, 1, S, H)
	require.NoError(t, op.Run(ctx, EmbedInputs{InputIDs: good}, &EmbedOutputs{Output: out.Tensor()}))
	require.NoError(t, op.Run(ctx, EmbedInputs{InputIDs: bad}, &EmbedOutputs{Output: out.Tensor()}))
	dst := FromFloat32(make([]float32, S*H), 1, S, H)
	err = out.Read(ctx, dst)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.Contains(t, err.Error(), "EmbedLayerNorm")
	require.Contains(t, err.Error(), "out of range")
	for _, v := range dst.Float32s() {
		require.Zero(t, v, "a failed read wrote its destination")
	}
	// Reported once; the engine goes on.
	require.NoError(t, op.Run(ctx, EmbedInputs{InputIDs: good}, &EmbedOutputs{Output: out.Tensor()}))
	require.NoError(t, out.Read(ctx, dst))
	// A host-output call with device ids checks its own ids before writing the host output.
	host := FromFloat32(make([]float32, S*H), 1, S, H)
	err = op.Run(ctx, EmbedInputs{InputIDs: bad}, &EmbedOutputs{Output: host})
	require.ErrorIs(t, err, ErrInvalidArgument)
	for _, v := range host.Float32s() {
		require.Zero(t, v)
	}
}

// TestDeviceErrorAtNextWait: a device failure of a call that did not wait comes back from
// the next call that waits, naming the failed call.
func TestDeviceErrorAtNextWait(t *testing.T) {
	var fail bool
	e := dawnEngine(t, withFaultInjection(func(site string) error {
		if fail && site == "async" {
			return errors.New("injected")
		}
		return nil
	}))
	if e == nil {
		t.Skip("needs Dawn")
	}
	ctx := context.Background()
	r := rand.New(rand.NewPCG(5, 6))
	const N, D = 2, 8
	in := AddLayerNormInputs{X1: upload(t, e, allocTensor(r, Float32, 0, N, D)), X2: upload(t, e, allocTensor(r, Float32, 0, N, D)),
		Gamma: allocTensor(r, Float32, 0, D), Beta: allocTensor(r, Float32, 0, D)}
	y, mean, rstd := devLike(t, e, Float32, N, D), devLike(t, e, Float32, N, 1), devLike(t, e, Float32, N, 1)
	out := AddLayerNormOutputs{Y: y.Tensor(), Mean: mean.Tensor(), Rstd: rstd.Tensor()}
	fail = true
	require.NoError(t, e.AddLayerNorm(ctx, in, &out), "an all-device call returns once submitted")
	fail = false
	err := e.Sync(ctx)
	require.ErrorIs(t, err, ErrDevice)
	require.True(t, strings.Contains(err.Error(), "AddLayerNorm (call "), "%v", err)
	require.NoError(t, e.Sync(ctx))
}

// TestDeviceIDSlotsWrap makes more device-id calls than the id-check slots hold without
// waiting: the bad id among them is reported exactly once, by a later call or the Sync.
func TestDeviceIDSlotsWrap(t *testing.T) {
	e := dawnEngine(t)
	if e == nil {
		t.Skip("needs Dawn")
	}
	ctx := context.Background()
	r := rand.New(rand.NewPCG(11, 12))
	const S, H, V = 2, 8, 5
	op, err := e.NewEmbedLayerNorm(EmbedWeights{Word: allocTensor(r, Float32, 0, V, H), Position: allocTensor(r, Float32, 0, S, H),
		Gamma: allocTensor(r, Float32, 0, H), Beta: allocTensor(r, Float32, 0, H)})
	require.NoError(t, err)
	defer op.Close()
	good := upload(t, e, FromInt32([]int32{1, 2}, 1, S))
	bad := upload(t, e, FromInt32([]int32{1, -3}, 1, S))
	out := devLike(t, e, Float32, 1, S, H)
	var errs []error
	for i := range 700 {
		ids := good
		if i == 300 {
			ids = bad
		}
		if err := op.Run(ctx, EmbedInputs{InputIDs: ids}, &EmbedOutputs{Output: out.Tensor()}); err != nil {
			errs = append(errs, err)
		}
	}
	if err := e.Sync(ctx); err != nil {
		errs = append(errs, err)
	}
	require.Len(t, errs, 1, "%v", errs)
	require.ErrorIs(t, errs[0], ErrInvalidArgument)
	require.Contains(t, errs[0].Error(), "out of range")
}

// TestDeviceTensorsThroughKernel: the bind-key entry takes device tensors as inputs too.
func TestDeviceTensorsThroughKernel(t *testing.T) {
	ctx := context.Background()
	for name, e := range deviceEngines(t) {
		t.Run(name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(13, 14))
			k, err := e.GetKernel("ascend.AddLayerNorm", 1)
			require.NoError(t, err)
			in := map[string]Tensor{"x1T": allocTensor(r, Float32, 0, 3, 16), "x2T": allocTensor(r, Float32, 0, 3, 16),
				"gammaT": allocTensor(r, Float32, 0, 16), "betaT": allocTensor(r, Float32, 0, 16)}
			want, err := k.Run(ctx, in, nil)
			require.NoError(t, err)
			din := map[string]Tensor{}
			for key, x := range in {
				din[key] = upload(t, e, x)
			}
			got, err := k.Run(ctx, din, nil)
			require.NoError(t, err)
			for key := range want {
				require.Equal(t, want[key].buf.Bytes(), got[key].buf.Bytes(), key)
			}
		})
	}
}

// TestDeviceTensorMisuse: wrong engine, wrong shape, closed tensors.
func TestDeviceTensorMisuse(t *testing.T) {
	ctx := context.Background()
	engines := deviceEngines(t)
	for name, e := range engines {
		t.Run(name, func(t *testing.T) {
			d, err := e.NewDeviceTensor(Float32, 2, 3)
			require.NoError(t, err)
			require.ErrorIs(t, d.Read(ctx, FromFloat32(make([]float32, 5), 5)), ErrInvalidArgument)
			require.ErrorIs(t, d.Write(FromInt32(make([]int32, 6), 2, 3)), ErrInvalidArgument)
			if name == "dawn" { // on the CPU, a device tensor is a host tensor
				require.ErrorIs(t, d.Read(ctx, d.Tensor()), ErrInvalidArgument, "a device tensor is no host destination")
			}
			_, err = e.NewDeviceTensor(Float32, -1)
			require.ErrorIs(t, err, ErrInvalidArgument)
			require.NoError(t, d.Close())
			require.ErrorIs(t, d.Read(ctx, FromFloat32(make([]float32, 6), 2, 3)), ErrClosed)
		})
	}
	if engines["dawn"] == nil {
		return
	}
	// A GPU engine's tensor given to the CPU engine, and to another GPU engine.
	d := devLike(t, engines["dawn"], Float32, 1, 4)
	g := FromFloat32([]float32{1, 1, 1, 1}, 4)
	in := AddLayerNormInputs{X1: d.Tensor(), X2: d.Tensor(), Gamma: g, Beta: g}
	require.ErrorIs(t, engines["cpu"].AddLayerNorm(ctx, in, &AddLayerNormOutputs{}), ErrInvalidArgument)
	if other := dawnEngine(t); other != nil {
		require.ErrorIs(t, other.AddLayerNorm(ctx, in, &AddLayerNormOutputs{}), ErrInvalidArgument)
	}
	// Writing a device tensor that the call also reads is refused at the call.
	y := devLike(t, engines["dawn"], Float32, 1, 4)
	err := engines["dawn"].AddLayerNorm(ctx, AddLayerNormInputs{X1: y.Tensor(), X2: d.Tensor(), Gamma: g, Beta: g},
		&AddLayerNormOutputs{Y: y.Tensor()})
	require.ErrorIs(t, err, ErrInvalidArgument)
}

// TestDeviceTensorsConcurrent runs calls on device tensors from several goroutines, each
// with its own outputs, and checks every result (run it with -race).
func TestDeviceTensorsConcurrent(t *testing.T) {
	e := dawnEngine(t)
	if e == nil {
		t.Skip("needs Dawn")
	}
	ctx := context.Background()
	r := rand.New(rand.NewPCG(15, 16))
	const N, D = 2, 32
	g, b := allocTensor(r, Float32, 0, D), allocTensor(r, Float32, 0, D)
	p, err := e.NewAddLayerNorm(AddLayerNormWeights{Gamma: upload(t, e, g), Beta: upload(t, e, b)})
	require.NoError(t, err)
	defer p.Close()
	x1, x2 := allocTensor(r, Float32, 0, N, D), allocTensor(r, Float32, 0, N, D)
	var want AddLayerNormOutputs
	require.NoError(t, p.Run(ctx, x1, x2, &want))
	dx1, dx2 := upload(t, e, x1), upload(t, e, x2)
	errs := make(chan error, 4)
	for range 4 {
		y := devLike(t, e, Float32, N, D)
		go func() {
			for range 20 {
				if err := p.Run(ctx, dx1, dx2, &AddLayerNormOutputs{Y: y.Tensor()}); err != nil {
					errs <- err
					return
				}
				h := FromFloat32(make([]float32, N*D), N, D)
				if err := y.Read(ctx, h); err != nil {
					errs <- err
					return
				}
				if !slices.Equal(h.Float32s(), want.Y.Float32s()) {
					errs <- errors.New("a concurrent call read back other bits")
					return
				}
			}
			errs <- nil
		}()
	}
	for range 4 {
		require.NoError(t, <-errs)
	}
}

// TestDeviceTensorRoundTrip uploads and reads back every dtype, odd lengths included (a
// 16-bit tensor of odd length ends inside a 4-byte word on the device).
func TestDeviceTensorRoundTrip(t *testing.T) {
	for name, e := range deviceEngines(t) {
		t.Run(name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(17, 18))
			for _, dt := range []DType{Float32, Float16, BFloat16, Int32} {
				for _, n := range []int{1, 3, 4, 1001} {
					x := allocTensor(r, dt, 1000, n)
					d, err := e.Upload(x)
					require.NoError(t, err)
					got := readBack(t, d)
					require.Equal(t, x.buf.Bytes(), got.buf.Bytes(), "%v × %d", dt, n)
					// Write replaces the contents.
					y := allocTensor(r, dt, 1000, n)
					require.NoError(t, d.Write(y))
					require.Equal(t, y.buf.Bytes(), readBack(t, d).buf.Bytes(), "%v × %d after Write", dt, n)
					require.NoError(t, d.Close())
				}
			}
		})
	}
}

// NoStats computes y alone: the same bits as a call with statistics, on host and device
// tensors, and a mean or rstd given beside it is an error naming it.
func TestAddLayerNormNoStats(t *testing.T) {
	ctx := context.Background()
	for name, e := range deviceEngines(t) {
		t.Run(name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(9, 10))
			for _, dt := range []DType{Float32, Float16} {
				const N, D = 5, 300
				in := AddLayerNormInputs{X1: allocTensor(r, dt, 0, N, D), X2: allocTensor(r, dt, 0, N, D),
					Gamma: allocTensor(r, dt, 0, D), Beta: allocTensor(r, dt, 0, D)}
				var want AddLayerNormOutputs
				require.NoError(t, e.AddLayerNorm(ctx, in, &want))
				host := AddLayerNormOutputs{NoStats: true}
				require.NoError(t, e.AddLayerNorm(ctx, in, &host))
				require.Equal(t, want.Y.buf.Bytes(), host.Y.buf.Bytes(), "%v host y", dt)
				require.True(t, host.Mean.IsZero() && host.Rstd.IsZero(), "%v: NoStats allocated mean or rstd", dt)
				y := devLike(t, e, dt, N, D)
				require.NoError(t, e.AddLayerNorm(ctx, in, &AddLayerNormOutputs{Y: y.Tensor(), NoStats: true}))
				require.Equal(t, want.Y.buf.Bytes(), readBack(t, y).buf.Bytes(), "%v device y", dt)

				err := e.AddLayerNorm(ctx, in, &AddLayerNormOutputs{NoStats: true, Mean: FromFloat32(make([]float32, N), N, 1)})
				var ae *ArgError
				require.ErrorAs(t, err, &ae)
				require.Contains(t, err.Error(), "mean")
			}
		})
	}
}
