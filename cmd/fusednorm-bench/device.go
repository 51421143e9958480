package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/fusednorm/fusednorm"
	"github.com/fusednorm/fusednorm/cmd/fusednorm-bench/internal/twin"
)

// The -tiny mode: what a call costs beyond its kernel, through the public API with every
// per-call tensor on the device and the weights resident, beside its native twin
// (cgo/bench/tiny_twin.c through internal/twin) in the same process when the engine is
// Dawn: each round runs each op on both twins, in a new random order, and the medians are
// over every round's calls. Go's back-to-back calls share submits (the executor's batches);
// the C twin shows both a submit per call and shared submits.

// tinyOp is one prepared tiny call and what it holds.
type tinyOp struct {
	name    string
	twin    twin.Op // the same call in the C twin
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
		{name: "EmbedLayerNorm", twin: twin.Embed, call: func() error { return embed.Run(ctx, ein, &eout) }, closers: closers},
		{name: "AddLayerNorm", twin: twin.Add, call: func() error { return add.Run(ctx, x1, x2, &aout) }},
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
	info := eng.Info()
	fmt.Fprintf(stdout, "engine: %s\n", info)
	ops, err := newTinyOps(ctx, eng)
	if err != nil {
		return err
	}
	defer func() {
		for _, op := range ops {
			op.close()
		}
	}()
	// The C twin runs in this process on a device of its own, on the same Dawn library.
	withTwin := info.Backend == "dawn"
	if withTwin {
		if err := twin.Open(info.Library); err != nil {
			fmt.Fprintf(stdout, "C twin: %v\n", err)
			withTwin = false
		} else {
			fmt.Fprintf(stdout, "C twin: on %s, in this process\n", twin.Adapter())
		}
	}
	n, rounds := o.tiny, max(o.tinyRounds, 1)
	goAll, cAll := make([]tinySamples, len(ops)), make([]tinySamples, len(ops))
	// Each round's Go-over-C difference of medians, one by one and back to back, per op.
	eachDiff, b2bDiff := make([][]time.Duration, len(ops)), make([][]time.Duration, len(ops))
	for range rounds {
		for i, op := range ops {
			var g, c tinySamples
			runGo := func() (err error) { g, err = goTiny(ctx, eng, op, n); return err }
			runC := func() error {
				s, err := twin.Run(op.twin, n)
				c = tinySamples(s)
				return err
			}
			steps := []func() error{runGo}
			if withTwin {
				steps = append(steps, runC)
				rand.Shuffle(len(steps), func(a, b int) { steps[a], steps[b] = steps[b], steps[a] }) // a new order each round
			}
			for _, step := range steps {
				if err := step(); err != nil {
					return err
				}
			}
			goAll[i].add(g)
			if withTwin {
				cAll[i].add(c)
				eachDiff[i] = append(eachDiff[i], median(g.Each)-median(c.Each))
				b2bDiff[i] = append(b2bDiff[i], median(g.BackToBack)-median(c.Shared))
			}
		}
	}
	for i, op := range ops {
		if withTwin {
			cAll[i].print(stdout, "C ", op.name, rounds)
		}
		goAll[i].print(stdout, "Go", op.name, rounds)
		if withTwin {
			c, g := &cAll[i], &goAll[i]
			ce, ge, cb, gb := median(c.Each), median(g.Each), median(c.Shared), median(g.BackToBack)
			fmt.Fprintf(stdout, "Go over C, %s: one by one %+.2f us (%+.1f%%), back to back sharing submits %+.2f us a call\n",
				op.name, us(ge-ce), 100*(float64(ge)/float64(ce)-1), us(gb-cb))
			fmt.Fprintf(stdout, "   by round (us), one by one:%s\n   by round (us), back to back:%s\n",
				signedUs(eachDiff[i]), signedUs(b2bDiff[i]))
		}
	}
	return nil
}

// signedUs lists durations in microseconds, signed.
func signedUs(ds []time.Duration) string {
	var b strings.Builder
	for _, d := range ds {
		fmt.Fprintf(&b, " %+.2f", us(d))
	}
	return b.String()
}

// tinySamples are the times of tiny calls (twin.Samples, from either twin), pooled
// over rounds.
type tinySamples twin.Samples

func (t *tinySamples) add(s tinySamples) {
	t.Each = append(t.Each, s.Each...)
	t.Call = append(t.Call, s.Call...)
	t.Wait = append(t.Wait, s.Wait...)
	t.BackToBack = append(t.BackToBack, s.BackToBack...)
	t.BackToBackTotal += s.BackToBackTotal
	t.Shared = append(t.Shared, s.Shared...)
	t.SharedTotal += s.SharedTotal
}

// print writes one twin's line: the C twin has back-to-back figures with a submit per call
// and with shared submits, the Go path its own back-to-back calls, which share submits.
func (t *tinySamples) print(w io.Writer, who, name string, rounds int) {
	n := len(t.Each)
	fmt.Fprintf(w, "%s %-14s one-by-one median %9.2f us (call %.2f + wait %.2f)", who, name, us(median(t.Each)), us(median(t.Call)), us(median(t.Wait)))
	if len(t.Shared) > 0 {
		fmt.Fprintf(w, "   back-to-back, a submit each: median %.2f us, mean with the final wait %.2f us", us(median(t.BackToBack)), us(t.BackToBackTotal/time.Duration(n)))
		fmt.Fprintf(w, "   sharing submits: median %.2f us, mean with the final wait %.2f us", us(median(t.Shared)), us(t.SharedTotal/time.Duration(n)))
	} else {
		fmt.Fprintf(w, "   back-to-back (sharing submits): median %.2f us, mean with the final wait %.2f us", us(median(t.BackToBack)), us(t.BackToBackTotal/time.Duration(n)))
	}
	fmt.Fprintf(w, "   (N=%d in %d rounds)\n", n, rounds)
}

// goTiny times op through the public API as the C twin times its calls: 20 calls to warm,
// n waited for one by one (Sync after each), n back to back (one Sync at the end).
func goTiny(ctx context.Context, eng *fusednorm.Engine, op *tinyOp, n int) (tinySamples, error) {
	s := tinySamples{Each: make([]time.Duration, n), Call: make([]time.Duration, n), Wait: make([]time.Duration, n),
		BackToBack: make([]time.Duration, n)}
	for range 20 {
		if err := op.call(); err != nil {
			return s, err
		}
	}
	if err := eng.Sync(ctx); err != nil {
		return s, err
	}
	for i := range n {
		t0 := time.Now()
		if err := op.call(); err != nil {
			return s, err
		}
		t1 := time.Now()
		if err := eng.Sync(ctx); err != nil {
			return s, err
		}
		s.Each[i] = time.Since(t0)
		s.Call[i], s.Wait[i] = t1.Sub(t0), s.Each[i]-t1.Sub(t0)
	}
	start := time.Now()
	for i := range n {
		t0 := time.Now()
		if err := op.call(); err != nil {
			return s, err
		}
		s.BackToBack[i] = time.Since(t0)
	}
	if err := eng.Sync(ctx); err != nil {
		return s, err
	}
	s.BackToBackTotal = time.Since(start)
	return s, nil
}

func median(t []time.Duration) time.Duration {
	s := slices.Clone(t)
	slices.Sort(s)
	return s[len(s)/2]
}

func us(d time.Duration) float64 { return float64(d) / 1e3 }

// deviceWorkload is a case with every tensor on the device: run is one call, read the
// read-back of its main output that ends a chain.
type deviceWorkload struct {
	run     func(ctx context.Context) error
	read    func(ctx context.Context) error
	closers []interface{ Close() error }
}

func (w *deviceWorkload) close() {
	for _, c := range slices.Backward(w.closers) {
		c.Close()
	}
}

// setupDevice builds the case as setup does (same seeded data), uploaded.
func setupDevice(eng *fusednorm.Engine, c *benchCase, threads int) (*deviceWorkload, error) {
	host, err := setupHostTensors(c, threads)
	if err != nil {
		return nil, err
	}
	return setupDeviceOn(eng, c, host)
}

// setupDeviceOn uploads the case's host data (setupHostTensors), which several engines can
// share, to eng and prepares the call there.
func setupDeviceOn(eng *fusednorm.Engine, c *benchCase, host []fusednorm.Tensor) (w *deviceWorkload, err error) {
	w = &deviceWorkload{}
	defer func() {
		if err != nil {
			w.close()
		}
	}()
	dev := func(t fusednorm.Tensor) fusednorm.Tensor {
		if err != nil || t.IsZero() {
			return fusednorm.Tensor{}
		}
		d, e := eng.Upload(t)
		if e != nil {
			err = e
			return fusednorm.Tensor{}
		}
		w.closers = append(w.closers, d)
		return d.Tensor()
	}
	empty := func(dt fusednorm.DType, shape ...int) *fusednorm.DeviceTensor {
		if err != nil {
			return nil
		}
		d, e := eng.NewDeviceTensor(dt, shape...)
		if e != nil {
			err = e
			return nil
		}
		w.closers = append(w.closers, d)
		return d
	}
	dt := dtypeOf(c.DType)
	switch c.op {
	case opEmbed:
		B, S, H := c.Shape["B"], c.Shape["S"], c.Shape["H"]
		weights := fusednorm.EmbedWeights{Word: dev(host[0]), Position: dev(host[1]), Segment: dev(host[2]),
			Gamma: dev(host[3]), Beta: dev(host[4])}
		in := fusednorm.EmbedInputs{InputIDs: dev(host[5]), SegmentIDs: dev(host[6]), Mask: dev(host[7])}
		o, mi := empty(dt, B, S, H), empty(fusednorm.Int32, B)
		if err != nil {
			return nil, err
		}
		op, e := eng.NewEmbedLayerNorm(weights, fusednorm.Epsilon(c.epsilon))
		if e != nil {
			return nil, e
		}
		w.closers = append(w.closers, op)
		out := fusednorm.EmbedOutputs{Output: o.Tensor(), MaskIndex: mi.Tensor()}
		dst, _ := fusednorm.NewTensor(dt, B, S, H)
		w.run = func(ctx context.Context) error { return op.Run(ctx, in, &out) }
		w.read = func(ctx context.Context) error { return o.Read(ctx, dst) }
	case opAdd:
		N, D := c.Shape["N"], c.Shape["D"]
		x1, x2 := dev(host[0]), dev(host[1])
		weights := fusednorm.AddLayerNormWeights{Gamma: dev(host[2]), Beta: dev(host[3]), Bias: dev(host[4])}
		y, x := empty(dt, N, D), empty(dt, N, D)
		mean, rstd := empty(fusednorm.Float32, N, 1), empty(fusednorm.Float32, N, 1)
		if err != nil {
			return nil, err
		}
		op, e := eng.NewAddLayerNorm(weights, fusednorm.Epsilon(c.epsilon), fusednorm.AdditionalOutput(true))
		if e != nil {
			return nil, e
		}
		w.closers = append(w.closers, op)
		out := fusednorm.AddLayerNormOutputs{Y: y.Tensor(), X: x.Tensor(), Mean: mean.Tensor(), Rstd: rstd.Tensor()}
		dst, _ := fusednorm.NewTensor(dt, N, D)
		w.run = func(ctx context.Context) error { return op.Run(ctx, x1, x2, &out) }
		w.read = func(ctx context.Context) error { return y.Read(ctx, dst) }
	default:
		return nil, fmt.Errorf("unknown op %q", c.op)
	}
	return w, nil
}

// setupHostTensors makes the case's host data as setup does: embed: word, position,
// segment, gamma, beta, ids, segment ids, mask; add: x1, x2, gamma, beta, bias.
func setupHostTensors(c *benchCase, threads int) ([]fusednorm.Tensor, error) {
	f := filler{seed: c.seed, threads: threads}
	switch c.op {
	case opEmbed:
		B, S, H := c.Shape["B"], c.Shape["S"], c.Shape["H"]
		V, P, G := c.Shape["V"], c.Shape["P"], c.Shape["G"]
		ids, seg, mask := embedIDs(c, B, S, V, G)
		return []fusednorm.Tensor{f.floats(c.DType, 1, 0.5, V, H), f.floats(c.DType, 2, 0.5, P, H),
			f.floats(c.DType, 3, 0.5, G, H), f.floats(c.DType, 4, 1, H), f.floats(c.DType, 5, 0.1, H),
			fusednorm.FromInt32(ids, B, S), fusednorm.FromInt32(seg, B, S), fusednorm.FromInt32(mask, B, S)}, nil
	case opAdd:
		N, D := c.Shape["N"], c.Shape["D"]
		return []fusednorm.Tensor{f.floats(c.DType, 1, 1, N, D), f.floats(c.DType, 2, 1, N, D),
			f.floats(c.DType, 3, 1, D), f.floats(c.DType, 4, 0.1, D), f.floats(c.DType, 5, 0.1, D)}, nil
	}
	return nil, fmt.Errorf("unknown op %q", c.op)
}

// embedIDs is the id data of setupEmbed (same seed, same draws).
func embedIDs(c *benchCase, B, S, V, G int) (ids, seg, mask []int32) {
	ids, seg, mask = make([]int32, B*S), make([]int32, B*S), make([]int32, B*S)
	r := rand.New(rand.NewPCG(c.seed, 6))
	for i := range ids {
		ids[i] = int32(r.IntN(V))
	}
	for b := range B {
		n := S/2 + r.IntN(S-S/2+1)
		for s := range S {
			seg[b*S+s] = int32(min(G-1, s/max(1, (S+1)/2)))
			if s < n {
				mask[b*S+s] = 1
			}
		}
	}
	return ids, seg, mask
}

// kernelRepeat is K, the dispatches of one timed pass for a call that takes per on device
// tensors: enough to fill about 2 ms, 2 to 256.
func kernelRepeat(per time.Duration) int {
	return int(min(max(int64(2*time.Millisecond/max(per, 1)), 2), 256))
}

// timeDeviceResident sets r.DeviceMs and r.KernelMs from the case on device tensors. First
// the device-resident wall: a chain of calls sized to keep the GPU busy for about -min-time
// (at least 20 calls), then one Sync that waits for every call of the chain, divided by the
// chain's length; the median of -reps chains after one untimed chain. Then, the GPU's clocks
// up from those chains (an idle H200 runs a lone dispatch of the largest case 3.5 times
// slower), the kernel alone: K back-to-back dispatches of the call in one compute pass
// between two timestamps (fusednorm.TimeKernels), K chosen to fill about 2 ms, over K; the median
// of -reps. The main output is read back once at the end, untimed, so the work is checked to
// have happened. A failure is reported, not fatal.
func timeDeviceResident(ctx context.Context, eng *fusednorm.Engine, c *benchCase, o *options, r *result) {
	w, err := setupDevice(eng, c, o.threads)
	if err != nil {
		r.Error = "device-resident setup: " + err.Error()
		return
	}
	defer w.close()
	chain := func(n int) (time.Duration, error) {
		t := time.Now()
		for range n {
			if err := w.run(ctx); err != nil {
				return 0, err
			}
		}
		if err := eng.Sync(ctx); err != nil {
			return 0, err
		}
		return time.Since(t) / time.Duration(n), nil
	}
	est, err := chain(3) // warm: pipelines, bind groups; a first estimate
	if err != nil {
		r.Error = "device-resident: " + err.Error()
		return
	}
	n := int(min(max(int64(o.minTime/max(est, 1)), 20), 2000))
	if _, err := chain(n); err != nil { // the GPU's clocks up
		r.Error = "device-resident: " + err.Error()
		return
	}
	ts := make([]time.Duration, 0, o.reps)
	for range o.reps {
		d, err := chain(n)
		if err != nil {
			r.Error = "device-resident: " + err.Error()
			return
		}
		ts = append(ts, d)
	}
	per := median(ts)
	r.DeviceMs = ms(per)

	clock := &fusednorm.KernelTiming{Repeat: kernelRepeat(per)}
	cctx := fusednorm.TimeKernels(ctx, clock)
	ks := make([]time.Duration, 0, o.reps)
	for i := range o.reps + 1 {
		clock.PerCall = 0
		if err := w.run(cctx); err != nil {
			r.Error = "kernel timing: " + err.Error()
			return
		}
		if clock.PerCall <= 0 {
			break // no device timer
		}
		if i > 0 { // the first pass makes the timestamp objects
			ks = append(ks, clock.PerCall)
		}
	}
	if len(ks) > 0 {
		r.KernelMs = ms(median(ks))
		r.KernelRepeat = clock.Repeat
	}
	if err := w.read(ctx); err != nil {
		r.Error = "device-resident read-back: " + err.Error()
	}
}
