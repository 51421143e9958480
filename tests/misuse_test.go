package tests

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	fn "github.com/fusednorm/fusednorm"
	"github.com/fusednorm/fusednorm/internal/softauto"
	"github.com/fusednorm/fusednorm/internal/testkit"
)

// TestMisuse runs the misuse table on every backend the suite runs: the CPU at each kernel
// level, Dawn, auto as Open makes it here, and auto routing between Dawn and the CPU (on a
// software adapter too, where Dawn runs). Each row misuses the API once and wants the same
// answer everywhere: the error wraps the row's sentinels, names the tensor at fault (as an
// *ArgError where the row says so), the caller's data and output structs are as they were,
// nothing panics, no goroutine is left behind, and the engine works on afterwards.
func TestMisuse(t *testing.T) {
	before := runtime.NumGoroutine()
	for _, b := range misuseBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			x := openMisuse(t, b)
			defer x.close()
			for _, r := range misuseRows() {
				t.Run(r.name, func(t *testing.T) { x.runRow(t, &r) })
			}
		})
	}
	settleGoroutines(t, "after every engine of TestMisuse closed", before)
}

// misuseBackend is one kind of engine the rows run on.
type misuseBackend struct {
	name string
	open func() (*fn.Engine, error)
	dawn bool // Dawn must open: skipped without it, a failure where Dawn is required
}

func misuseBackends(t *testing.T) []misuseBackend {
	var bs []misuseBackend
	for _, level := range testCPULevels(t) {
		bs = append(bs, misuseBackend{name: "cpu-" + level, open: func() (*fn.Engine, error) {
			return fn.Open(fn.WithBackend(fn.BackendCPU), fn.WithCPULevel(level))
		}})
	}
	return append(bs,
		misuseBackend{name: "dawn", dawn: true, open: func() (*fn.Engine, error) {
			return fn.Open(fn.WithBackend(fn.BackendDawn))
		}},
		misuseBackend{name: "auto", open: func() (*fn.Engine, error) {
			return fn.Open(fn.WithBackend(fn.BackendAuto))
		}},
		misuseBackend{name: "auto-routed", dawn: true, open: openRouted},
	)
}

// openRouted opens auto mode keeping a software adapter, so that it routes between Dawn and
// the CPU here too; an error when Dawn does not load.
func openRouted() (*fn.Engine, error) {
	softauto.Keep(true)
	defer softauto.Keep(false)
	e, err := fn.Open(fn.WithBackend(fn.BackendAuto))
	if err != nil {
		return nil, err
	}
	if r := e.Info().Reason; !strings.Contains(r, "host-tensor calls on the cpu or dawn") {
		e.Close()
		return nil, fmt.Errorf("auto does not route here: %s: %w", r, fn.ErrUnavailable)
	}
	return e, nil
}

// misuseEnv is one backend's engine and what a row made, to check and release after it.
type misuseEnv struct {
	b     misuseBackend
	e     *fn.Engine
	other *fn.Engine // another engine of the same kind
	cpu   *fn.Engine // a CPU engine

	checks   []func(t *testing.T) // data and structs the row must leave as they were
	cleanups []func()             // run after the checks
}

func openMisuse(t *testing.T, b misuseBackend) *misuseEnv {
	t.Helper()
	x := &misuseEnv{b: b}
	var err error
	if x.e, err = b.open(); err != nil {
		if b.dawn {
			testkit.SkipWithoutDawn(t, err)
		}
		t.Fatal(err)
	}
	t.Logf("engine: %s", x.e.Info())
	if x.other, err = b.open(); err != nil {
		x.e.Close()
		t.Fatal(err)
	}
	if x.cpu, err = fn.Open(fn.WithBackend(fn.BackendCPU)); err != nil {
		x.close()
		t.Fatal(err)
	}
	x.warmUp(t)
	return x
}

func (x *misuseEnv) close() {
	for _, e := range []*fn.Engine{x.e, x.other, x.cpu} {
		if e != nil {
			e.Close()
		}
	}
}

// warmUp makes a good call of every kind first, so that a row's goroutine count is not
// raised by what a first call starts for good (workers, pipelines).
func (x *misuseEnv) warmUp(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if err := x.goodCalls(ctx); err != nil {
		x.close()
		t.Fatalf("warm-up: %v", err)
	}
}

// goodCalls makes one good call of each entry on the engine, host and device tensors.
func (x *misuseEnv) goodCalls(ctx context.Context) error {
	e := x.e
	in := misAddIn()
	var out fn.AddLayerNormOutputs
	if err := e.AddLayerNorm(ctx, in, &out); err != nil {
		return err
	}
	op, err := e.NewAddLayerNorm(misAddW())
	if err != nil {
		return err
	}
	defer op.Close()
	dx1, err := e.Upload(in.X1)
	if err != nil {
		return err
	}
	defer dx1.Close()
	dy, err := e.NewDeviceTensor(fn.Float32, misN, misD)
	if err != nil {
		return err
	}
	defer dy.Close()
	if err := op.Run(ctx, dx1.Tensor(), in.X2, &fn.AddLayerNormOutputs{Y: dy.Tensor()}); err != nil {
		return err
	}
	eop, err := e.NewEmbedLayerNorm(misEmbedW())
	if err != nil {
		return err
	}
	defer eop.Close()
	var eout fn.EmbedOutputs
	if err := eop.Run(ctx, misEmbedIn(), &eout); err != nil {
		return err
	}
	k, err := e.GetKernel("ascend.AddLayerNorm", 0)
	if err != nil {
		return err
	}
	defer k.Close()
	if _, err := k.Run(ctx, map[string]fn.Tensor{"x1T": in.X1, "x2T": in.X2, "gammaT": in.Gamma, "betaT": in.Beta}, nil); err != nil {
		return err
	}
	h, _ := fn.NewTensor(fn.Float32, misN, misD)
	return dy.Read(ctx, h)
}

// misuseRow is one misuse and the answer it must get on every backend.
type misuseRow struct {
	name string
	// is lists the sentinels the error must wrap (errors.Is).
	is []error
	// tensor, when set, is the *ArgError's Tensor.
	tensor string
	// names are what the message must name; not what it must not.
	names, not []string
	// deferred: ids on the device, which a GPU checks there (spec §A.2a): the error may come
	// from the next wait (the row's call is then followed by Sync) or from the call's own
	// wait, as the device's report: an *ArgError on the tensor all the same. The CPU, whose
	// device tensors are host memory, answers at the call, as for host ids.
	deferred bool
	// run misuses the API on x.e once and returns the error.
	run func(t *testing.T, x *misuseEnv) error
}

var errNoError = errors.New("the misuse was accepted")

// runRow runs r and checks its answer, the data and goroutines it must leave alone, and
// that the engine works on.
func (x *misuseEnv) runRow(t *testing.T, r *misuseRow) {
	ctx := context.Background()
	x.checks, x.cleanups = nil, nil
	base := runtime.NumGoroutine()
	err, panicked := x.call(t, r)
	if panicked != nil {
		t.Errorf("panic: %v", panicked)
	}
	fromSync := false
	if err == nil && r.deferred {
		err, fromSync = x.e.Sync(ctx), true
	}
	if err == nil && panicked == nil {
		err = errNoError
	}
	if panicked == nil {
		checkMisuseErr(t, r, err, fromSync || (r.deferred && x.e.Info().Backend != "cpu"))
	}
	for _, c := range x.checks {
		c(t)
	}
	for _, c := range slices.Backward(x.cleanups) {
		c()
	}
	if err := x.e.Sync(ctx); err != nil {
		t.Errorf("Sync after the row: %v", err)
	}
	if err := x.goodCalls(ctx); err != nil {
		t.Errorf("a good call after the row: %v", err)
	}
	settleGoroutines(t, "after the row", base)
}

// call runs the row, turning a panic into a value.
func (x *misuseEnv) call(t *testing.T, r *misuseRow) (err error, panicked any) {
	defer func() {
		if p := recover(); p != nil {
			panicked = fmt.Sprintf("%v\n%s", p, stack(false))
		}
	}()
	return r.run(t, x), nil
}

// misSentinels are the sentinels of the package: every error wraps one.
var misSentinels = []error{fn.ErrInvalidArgument, fn.ErrUnavailable, fn.ErrNotSupported, fn.ErrDevice, fn.ErrClosed, fn.ErrCanceled}

// checkMisuseErr checks err against r; report: err may be the device's report of ids
// checked on the device.
func checkMisuseErr(t *testing.T, r *misuseRow, err error, report bool) {
	t.Helper()
	where := "the call"
	if report {
		where = "the call or the Sync after it (the device's report)"
	}
	t.Logf("%s: %v", where, err)
	if !slices.ContainsFunc(misSentinels, func(s error) bool { return errors.Is(err, s) }) {
		t.Errorf("%s: %v wraps none of the package's sentinels", where, err)
	}
	for _, s := range r.is {
		if !errors.Is(err, s) {
			t.Errorf("%s: %v does not wrap %q", where, err, s)
		}
	}
	msg := err.Error()
	for _, n := range r.names {
		if !strings.Contains(msg, n) {
			t.Errorf("%s: %q does not name %s", where, msg, n)
		}
	}
	for _, n := range r.not {
		if strings.Contains(msg, n) {
			t.Errorf("%s: %q names %s, which is not at fault", where, msg, n)
		}
	}
	if r.tensor != "" {
		var ae *fn.ArgError
		switch {
		case !errors.As(err, &ae):
			t.Errorf("%s: %v is not an *ArgError (want one on %s)", where, err, r.tensor)
		case ae.Tensor != r.tensor:
			t.Errorf("%s: the *ArgError is on %q, want %q: %v", where, ae.Tensor, r.tensor, err)
		}
	}
}

// settleGoroutines waits a while for the goroutine count to fall to base, and fails t with
// the goroutines there are when it does not.
func settleGoroutines(t *testing.T, when string, base int) {
	t.Helper()
	n := runtime.NumGoroutine()
	for deadline := time.Now().Add(3 * time.Second); n > base && time.Now().Before(deadline); n = runtime.NumGoroutine() {
		time.Sleep(10 * time.Millisecond)
	}
	if n > base {
		t.Errorf("%s: %d goroutines, %d before:\n%s", when, n, base, stack(true))
	}
}

func stack(all bool) string {
	buf := make([]byte, 1<<16)
	return string(buf[:runtime.Stack(buf, all)])
}

// The fixtures: AddLayerNorm of two rows of 8, EmbedLayerNorm of one sequence of 3 over
// tables of 10 words, 4 positions and 2 segments.
const (
	misN, misD       = 2, 8
	misV, misP, misG = 10, 4, 2
	misB, misS       = 1, 3
	misAddKernel     = "ascend.AddLayerNorm"
	misEmbedKernel   = "com.microsoft.EmbedLayerNormalization"
)

func misF32(n int, f func(i int) float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = f(i)
	}
	return v
}

func misAddIn() fn.AddLayerNormInputs {
	w := misAddW()
	return fn.AddLayerNormInputs{
		X1:    fn.FromFloat32(misF32(misN*misD, func(i int) float32 { return float32(i%5) - 2 }), misN, misD),
		X2:    fn.FromFloat32(misF32(misN*misD, func(i int) float32 { return float32(i%3) * 0.5 }), misN, misD),
		Gamma: w.Gamma, Beta: w.Beta,
	}
}

func misAddW() fn.AddLayerNormWeights {
	return fn.AddLayerNormWeights{
		Gamma: fn.FromFloat32(misF32(misD, func(i int) float32 { return 1 + float32(i)/8 }), misD),
		Beta:  fn.FromFloat32(misF32(misD, func(i int) float32 { return float32(i) / 16 }), misD),
	}
}

func misEmbedW() fn.EmbedWeights {
	table := func(rows int, k float32) fn.Tensor {
		return fn.FromFloat32(misF32(rows*misD, func(i int) float32 { return k * float32(i%7-3) }), rows, misD)
	}
	return fn.EmbedWeights{Word: table(misV, 0.25), Position: table(misP, 0.125), Segment: table(misG, 0.5),
		Gamma: fn.FromFloat32(misF32(misD, func(int) float32 { return 1 }), misD),
		Beta:  fn.FromFloat32(misF32(misD, func(int) float32 { return 0 }), misD)}
}

func misEmbedIn() fn.EmbedInputs {
	return fn.EmbedInputs{InputIDs: fn.FromInt32([]int32{1, 2, 3}, misB, misS)}
}

func misIDs(ids ...int32) fn.Tensor { return fn.FromInt32(ids, misB, misS) }

// hostOut is a host output filled with a pattern the row must leave as it is.
func (x *misuseEnv) hostOut(dt fn.DType, shape ...int) fn.Tensor {
	h, _ := fn.NewTensor(dt, shape...)
	for i := range h.Float32s() {
		h.Float32s()[i] = 1000 + float32(i)
	}
	for i := range h.Int32s() {
		h.Int32s()[i] = -1000 - int32(i)
	}
	x.keepHost(h)
	return h
}

// keepHost checks after the row that h's data is as it is now.
func (x *misuseEnv) keepHost(h fn.Tensor) {
	f, i := slices.Clone(h.Float32s()), slices.Clone(h.Int32s())
	x.checks = append(x.checks, func(t *testing.T) {
		if !slices.Equal(h.Float32s(), f) || !slices.Equal(h.Int32s(), i) {
			t.Errorf("the caller's %v was written", h)
		}
	})
}

// keepStruct checks after the row that the tensor fields ts point to are as they are now
// (a zero field stays zero: no output the call allocated reached the caller).
func (x *misuseEnv) keepStruct(ts ...*fn.Tensor) {
	was := make([]fn.Tensor, len(ts))
	for i, p := range ts {
		was[i] = *p
	}
	x.checks = append(x.checks, func(t *testing.T) {
		for i, p := range ts {
			if p.IsZero() != was[i].IsZero() || p.DType() != was[i].DType() || !slices.Equal(p.Shape(), was[i].Shape()) ||
				(len(p.Float32s()) > 0 && &p.Float32s()[0] != &was[i].Float32s()[0]) ||
				(len(p.Int32s()) > 0 && &p.Int32s()[0] != &was[i].Int32s()[0]) {
				t.Errorf("output field %d changed from %v to %v", i, was[i], *p)
			}
		}
	})
}

// upload puts h on the engine e, checks after the row that its data is still h's (unless
// the row closes it), and closes it after the row.
func (x *misuseEnv) upload(t *testing.T, e *fn.Engine, h fn.Tensor, keep bool) *fn.DeviceTensor {
	t.Helper()
	d, err := e.Upload(h)
	if err != nil {
		t.Fatalf("upload %v: %v", h, err)
	}
	x.cleanups = append(x.cleanups, func() { d.Close() })
	if keep {
		want := slices.Clone(h.Float32s())
		wantI := slices.Clone(h.Int32s())
		x.checks = append(x.checks, func(t *testing.T) {
			got, _ := fn.NewTensor(h.DType(), h.Shape()...)
			if err := d.Read(context.Background(), got); err != nil {
				t.Errorf("read back %v: %v", h, err)
				return
			}
			if !slices.Equal(got.Float32s(), want) || !slices.Equal(got.Int32s(), wantI) {
				t.Errorf("the device tensor %v was written", d)
			}
		})
	}
	return d
}

// devOut is a device output of e holding a pattern; kept: checked after the row.
func (x *misuseEnv) devOut(t *testing.T, e *fn.Engine, keep bool, dt fn.DType, shape ...int) *fn.DeviceTensor {
	t.Helper()
	h, _ := fn.NewTensor(dt, shape...)
	for i := range h.Float32s() {
		h.Float32s()[i] = 2000 + float32(i)
	}
	for i := range h.Int32s() {
		h.Int32s()[i] = -2000 - int32(i)
	}
	return x.upload(t, e, h, keep)
}

// closed is a device tensor of e, closed.
func (x *misuseEnv) closed(t *testing.T, e *fn.Engine, h fn.Tensor) fn.Tensor {
	t.Helper()
	d := x.upload(t, e, h, false)
	if err := d.Close(); err != nil {
		t.Fatalf("close %v: %v", d, err)
	}
	return d.Tensor()
}

func (x *misuseEnv) addOp(t *testing.T, w fn.AddLayerNormWeights, opts ...fn.OpOption) *fn.AddLayerNorm {
	t.Helper()
	op, err := x.e.NewAddLayerNorm(w, opts...)
	if err != nil {
		t.Fatalf("NewAddLayerNorm: %v", err)
	}
	x.cleanups = append(x.cleanups, func() { op.Close() })
	return op
}

func (x *misuseEnv) embedOp(t *testing.T, w fn.EmbedWeights) *fn.EmbedLayerNorm {
	t.Helper()
	op, err := x.e.NewEmbedLayerNorm(w)
	if err != nil {
		t.Fatalf("NewEmbedLayerNorm: %v", err)
	}
	x.cleanups = append(x.cleanups, func() { op.Close() })
	return op
}

// closedEngine opens another engine of the kind under test and closes it once the device
// tensors it makes are made.
func (x *misuseEnv) closedEngine(t *testing.T, with func(e *fn.Engine)) {
	t.Helper()
	e, err := x.b.open()
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	with(e)
	if err := e.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
}

// hostAddOut is an AddLayerNorm output with y given (a pattern) and the stats left zero.
func (x *misuseEnv) hostAddOut() *fn.AddLayerNormOutputs {
	out := &fn.AddLayerNormOutputs{Y: x.hostOut(fn.Float32, misN, misD)}
	x.keepStruct(&out.Y, &out.Mean, &out.Rstd, &out.X)
	return out
}

// hostEmbedOut is an EmbedLayerNorm output with output given (a pattern), mask_index wanted
// and left zero.
func (x *misuseEnv) hostEmbedOut() *fn.EmbedOutputs {
	out := &fn.EmbedOutputs{Output: x.hostOut(fn.Float32, misB, misS, misD), WantMaskIndex: true}
	x.keepStruct(&out.Output, &out.MaskIndex, &out.EmbeddingSum)
	return out
}

// devAddOut is an AddLayerNorm output on the device (y, mean, rstd), patterns kept when keep.
func (x *misuseEnv) devAddOut(t *testing.T, keep bool) *fn.AddLayerNormOutputs {
	return &fn.AddLayerNormOutputs{Y: x.devOut(t, x.e, keep, fn.Float32, misN, misD).Tensor(),
		Mean: x.devOut(t, x.e, keep, fn.Float32, misN, 1).Tensor(), Rstd: x.devOut(t, x.e, keep, fn.Float32, misN, 1).Tensor()}
}

// twiceThenClosed runs call(false) on good inputs until it has run on each backend a router
// has (the second call of a shape runs on the other one; on the routed engine, host calls
// must have run on the CPU then), closes the op, and returns the first answer of four calls
// call(true) after that which is not ErrClosed, or the last.
func twiceThenClosed(t *testing.T, x *misuseEnv, host bool, call func(ctx context.Context, closed bool) error, closeOp func() error) error {
	t.Helper()
	ran := map[string]int{}
	for i := range 4 {
		var where string
		if err := call(fn.ReportBackend(context.Background(), &where), false); err != nil {
			t.Fatalf("good call %d: %v", i, err)
		}
		ran[where]++
	}
	t.Logf("the good calls ran on %v", ran)
	if host && x.b.name == "auto-routed" && (ran["cpu"] == 0 || ran["dawn"] == 0) {
		t.Errorf("the routed engine ran the good calls on %v, not on both backends", ran)
	}
	if err := closeOp(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	var err error
	for range 4 {
		if err = call(context.Background(), true); !errors.Is(err, fn.ErrClosed) {
			return err
		}
	}
	return err
}

// misuseRows is the table. Every row runs on every backend.
func misuseRows() []misuseRow {
	bg := context.Background()
	var nilCtx context.Context
	closedIs := []error{fn.ErrClosed}
	argIs := []error{fn.ErrInvalidArgument}
	cancelled, cancel := context.WithCancel(bg)
	cancel()
	expired, cancel2 := context.WithDeadline(bg, time.Now().Add(-time.Second))
	cancel2()
	return []misuseRow{
		// A device tensor closed before the call: ErrClosed naming it, as input, output or
		// weight, on the plain path and the prepared op's remembered one.
		{name: "closed/x1", is: closedIs, tensor: "x1", run: func(t *testing.T, x *misuseEnv) error {
			in := misAddIn()
			in.X1 = x.closed(t, x.e, in.X1)
			return x.e.AddLayerNorm(bg, in, x.hostAddOut())
		}},
		{name: "closed/x2-prepared", is: closedIs, tensor: "x2", run: func(t *testing.T, x *misuseEnv) error {
			in := misAddIn()
			return x.addOp(t, misAddW()).Run(bg, in.X1, x.closed(t, x.e, in.X2), x.hostAddOut())
		}},
		{name: "closed/y", is: closedIs, tensor: "y", run: func(t *testing.T, x *misuseEnv) error {
			out := &fn.AddLayerNormOutputs{Y: x.closed(t, x.e, misAddIn().X1),
				Mean: x.hostOut(fn.Float32, misN, 1), Rstd: x.hostOut(fn.Float32, misN, 1)}
			return x.e.AddLayerNorm(bg, misAddIn(), out)
		}},
		{name: "closed/mean", is: closedIs, tensor: "mean", run: func(t *testing.T, x *misuseEnv) error {
			out := x.devAddOut(t, true)
			out.Mean = x.closed(t, x.e, fn.FromFloat32(make([]float32, misN), misN, 1))
			return x.addOp(t, misAddW()).Run(bg, misAddIn().X1, misAddIn().X2, out)
		}},
		{name: "closed/gamma-at-prepare", is: closedIs, tensor: "gamma", run: func(t *testing.T, x *misuseEnv) error {
			w := misAddW()
			w.Gamma = x.closed(t, x.e, w.Gamma)
			op, err := x.e.NewAddLayerNorm(w)
			if err == nil {
				op.Close()
			}
			return err
		}},
		{name: "closed/input_ids", is: closedIs, tensor: "input_ids", run: func(t *testing.T, x *misuseEnv) error {
			in := misEmbedIn()
			in.InputIDs = x.closed(t, x.e, in.InputIDs)
			return x.embedOp(t, misEmbedW()).Run(bg, in, x.hostEmbedOut())
		}},
		{name: "closed/output", is: closedIs, tensor: "output", run: func(t *testing.T, x *misuseEnv) error {
			out := &fn.EmbedOutputs{Output: x.closed(t, x.e, fn.FromFloat32(make([]float32, misB*misS*misD), misB, misS, misD)),
				MaskIndex: x.hostOut(fn.Int32, misB)}
			return x.embedOp(t, misEmbedW()).Run(bg, misEmbedIn(), out)
		}},
		{name: "closed/word_embedding-at-prepare", is: closedIs, tensor: "word_embedding", run: func(t *testing.T, x *misuseEnv) error {
			w := misEmbedW()
			w.Word = x.closed(t, x.e, w.Word)
			op, err := x.e.NewEmbedLayerNorm(w)
			if err == nil {
				op.Close()
			}
			return err
		}},
		{name: "closed/x1-after-a-remembered-call", is: closedIs, tensor: "x1", run: func(t *testing.T, x *misuseEnv) error {
			in := misAddIn()
			op := x.addOp(t, misAddW())
			d1, d2 := x.upload(t, x.e, in.X1, false), x.upload(t, x.e, in.X2, true)
			out := x.devAddOut(t, false)
			if err := op.Run(bg, d1.Tensor(), d2.Tensor(), out); err != nil {
				t.Fatalf("good call: %v", err)
			}
			d1.Close()
			return op.Run(bg, d1.Tensor(), d2.Tensor(), out)
		}},
		{name: "closed/input_ids-after-a-remembered-call", is: closedIs, tensor: "input_ids", run: func(t *testing.T, x *misuseEnv) error {
			op := x.embedOp(t, misEmbedW())
			ids := x.upload(t, x.e, misEmbedIn().InputIDs, false)
			out := &fn.EmbedOutputs{Output: x.devOut(t, x.e, false, fn.Float32, misB, misS, misD).Tensor()}
			if err := op.Run(bg, fn.EmbedInputs{InputIDs: ids.Tensor()}, out); err != nil {
				t.Fatalf("good call: %v", err)
			}
			ids.Close()
			return op.Run(bg, fn.EmbedInputs{InputIDs: ids.Tensor()}, out)
		}},
		{name: "closed/Read", is: closedIs, run: func(t *testing.T, x *misuseEnv) error {
			d := x.upload(t, x.e, misAddIn().X1, false)
			d.Close()
			return d.Read(bg, x.hostOut(fn.Float32, misN, misD))
		}},

		// A device tensor of another engine, open or closed, of the same kind or a CPU engine.
		{name: "foreign/x1", is: argIs, tensor: "x1", run: func(t *testing.T, x *misuseEnv) error {
			in := misAddIn()
			in.X1 = x.upload(t, x.other, in.X1, true).Tensor()
			return x.e.AddLayerNorm(bg, in, x.hostAddOut())
		}},
		{name: "foreign/x1-of-a-cpu-engine", is: argIs, tensor: "x1", run: func(t *testing.T, x *misuseEnv) error {
			in := misAddIn()
			in.X1 = x.upload(t, x.cpu, in.X1, true).Tensor()
			return x.e.AddLayerNorm(bg, in, x.hostAddOut())
		}},
		{name: "foreign/y-prepared", is: argIs, tensor: "y", run: func(t *testing.T, x *misuseEnv) error {
			out := &fn.AddLayerNormOutputs{Y: x.devOut(t, x.other, true, fn.Float32, misN, misD).Tensor(),
				Mean: x.hostOut(fn.Float32, misN, 1), Rstd: x.hostOut(fn.Float32, misN, 1)}
			return x.addOp(t, misAddW()).Run(bg, misAddIn().X1, misAddIn().X2, out)
		}},
		{name: "foreign/gamma-at-prepare", is: argIs, tensor: "gamma", run: func(t *testing.T, x *misuseEnv) error {
			w := misAddW()
			w.Gamma = x.upload(t, x.other, w.Gamma, true).Tensor()
			op, err := x.e.NewAddLayerNorm(w)
			if err == nil {
				op.Close()
			}
			return err
		}},
		{name: "foreign/input_ids", is: argIs, tensor: "input_ids", run: func(t *testing.T, x *misuseEnv) error {
			in := misEmbedIn()
			in.InputIDs = x.upload(t, x.other, in.InputIDs, true).Tensor()
			return x.embedOp(t, misEmbedW()).Run(bg, in, x.hostEmbedOut())
		}},
		{name: "foreign/x1-of-a-closed-engine", is: argIs, tensor: "x1", run: func(t *testing.T, x *misuseEnv) error {
			in := misAddIn()
			x.closedEngine(t, func(e *fn.Engine) { in.X1 = x.upload(t, e, in.X1, false).Tensor() })
			return x.e.AddLayerNorm(bg, in, x.hostAddOut())
		}},
		{name: "foreign/output-of-a-closed-engine", is: argIs, tensor: "output", run: func(t *testing.T, x *misuseEnv) error {
			out := &fn.EmbedOutputs{WantMaskIndex: true}
			x.closedEngine(t, func(e *fn.Engine) { out.Output = x.devOut(t, e, false, fn.Float32, misB, misS, misD).Tensor() })
			x.keepStruct(&out.Output, &out.MaskIndex, &out.EmbeddingSum)
			return x.embedOp(t, misEmbedW()).Run(bg, misEmbedIn(), out)
		}},

		// A prepared op run after its Close: ErrClosed, whichever backend the call is routed to.
		{name: "closed-op/AddLayerNorm", is: closedIs, run: func(t *testing.T, x *misuseEnv) error {
			op := x.addOp(t, misAddW())
			in := misAddIn()
			var out *fn.AddLayerNormOutputs
			return twiceThenClosed(t, x, true, func(ctx context.Context, closed bool) error {
				if !closed {
					return op.Run(ctx, in.X1, in.X2, &fn.AddLayerNormOutputs{})
				}
				if out == nil {
					out = x.hostAddOut()
				}
				return op.Run(ctx, in.X1, in.X2, out)
			}, op.Close)
		}},
		{name: "closed-op/AddLayerNorm-device", is: closedIs, run: func(t *testing.T, x *misuseEnv) error {
			op := x.addOp(t, misAddW())
			in := misAddIn()
			d1, d2 := x.upload(t, x.e, in.X1, true), x.upload(t, x.e, in.X2, true)
			good, out := x.devAddOut(t, false), x.devAddOut(t, true)
			return twiceThenClosed(t, x, false, func(ctx context.Context, closed bool) error {
				if !closed {
					return op.Run(ctx, d1.Tensor(), d2.Tensor(), good)
				}
				return op.Run(ctx, d1.Tensor(), d2.Tensor(), out)
			}, op.Close)
		}},
		{name: "closed-op/EmbedLayerNorm", is: closedIs, run: func(t *testing.T, x *misuseEnv) error {
			op := x.embedOp(t, misEmbedW())
			var out *fn.EmbedOutputs
			return twiceThenClosed(t, x, true, func(ctx context.Context, closed bool) error {
				if !closed {
					return op.Run(ctx, misEmbedIn(), &fn.EmbedOutputs{})
				}
				if out == nil {
					out = x.hostEmbedOut()
				}
				return op.Run(ctx, misEmbedIn(), out)
			}, op.Close)
		}},
		{name: "closed-op/EmbedLayerNorm-device", is: closedIs, run: func(t *testing.T, x *misuseEnv) error {
			op := x.embedOp(t, misEmbedW())
			ids := x.upload(t, x.e, misEmbedIn().InputIDs, true)
			good := &fn.EmbedOutputs{Output: x.devOut(t, x.e, false, fn.Float32, misB, misS, misD).Tensor()}
			out := &fn.EmbedOutputs{Output: x.devOut(t, x.e, true, fn.Float32, misB, misS, misD).Tensor()}
			return twiceThenClosed(t, x, false, func(ctx context.Context, closed bool) error {
				if !closed {
					return op.Run(ctx, fn.EmbedInputs{InputIDs: ids.Tensor()}, good)
				}
				return op.Run(ctx, fn.EmbedInputs{InputIDs: ids.Tensor()}, out)
			}, op.Close)
		}},

		// A nil ctx at every entry that takes one: an *ArgError on ctx, never a panic.
		{name: "nil-ctx/Sync", is: argIs, tensor: "ctx", run: func(t *testing.T, x *misuseEnv) error {
			return x.e.Sync(nilCtx)
		}},
		{name: "nil-ctx/Read", is: argIs, tensor: "ctx", run: func(t *testing.T, x *misuseEnv) error {
			d := x.upload(t, x.e, misAddIn().X1, true)
			return d.Read(nilCtx, x.hostOut(fn.Float32, misN, misD))
		}},
		{name: "nil-ctx/AddLayerNorm", is: argIs, tensor: "ctx", run: func(t *testing.T, x *misuseEnv) error {
			return x.e.AddLayerNorm(nilCtx, misAddIn(), x.hostAddOut())
		}},
		{name: "nil-ctx/AddLayerNorm.Run", is: argIs, tensor: "ctx", run: func(t *testing.T, x *misuseEnv) error {
			in := misAddIn()
			return x.addOp(t, misAddW()).Run(nilCtx, in.X1, in.X2, x.hostAddOut())
		}},
		{name: "nil-ctx/AddLayerNorm.Run-device", is: argIs, tensor: "ctx", run: func(t *testing.T, x *misuseEnv) error {
			in := misAddIn()
			op := x.addOp(t, misAddW())
			d1, d2 := x.upload(t, x.e, in.X1, true), x.upload(t, x.e, in.X2, true)
			out := x.devAddOut(t, false)
			if err := op.Run(bg, d1.Tensor(), d2.Tensor(), out); err != nil {
				t.Fatalf("good call: %v", err)
			}
			return op.Run(nilCtx, d1.Tensor(), d2.Tensor(), out)
		}},
		{name: "nil-ctx/EmbedLayerNorm.Run", is: argIs, tensor: "ctx", run: func(t *testing.T, x *misuseEnv) error {
			return x.embedOp(t, misEmbedW()).Run(nilCtx, misEmbedIn(), x.hostEmbedOut())
		}},
		{name: "nil-ctx/EmbedLayerNormOnce", is: argIs, tensor: "ctx", run: func(t *testing.T, x *misuseEnv) error {
			return x.e.EmbedLayerNormOnce(nilCtx, misEmbedW(), misEmbedIn(), x.hostEmbedOut())
		}},
		{name: "nil-ctx/Kernel.Run", is: argIs, tensor: "ctx", run: func(t *testing.T, x *misuseEnv) error {
			k, err := x.e.GetKernel(misAddKernel, 0)
			if err != nil {
				t.Fatal(err)
			}
			in := misAddIn()
			outs, err := k.Run(nilCtx, map[string]fn.Tensor{"x1T": in.X1, "x2T": in.X2, "gammaT": in.Gamma, "betaT": in.Beta}, nil)
			if outs != nil {
				t.Errorf("a failed Kernel.Run returned outputs")
			}
			return err
		}},

		// Aliased device tensors: an *ArgError naming both tensors by their op names.
		{name: "alias/x-is-y", is: argIs, tensor: "x", names: []string{"x", "y"}, run: func(t *testing.T, x *misuseEnv) error {
			out := x.devAddOut(t, true)
			out.X = out.Y
			return x.addOp(t, misAddW(), fn.AdditionalOutput(true)).Run(bg, misAddIn().X1, misAddIn().X2, out)
		}},
		{name: "alias/rstd-is-mean", is: argIs, tensor: "rstd", names: []string{"mean", "rstd"}, run: func(t *testing.T, x *misuseEnv) error {
			out := x.devAddOut(t, true)
			out.Rstd = out.Mean
			return x.e.AddLayerNorm(bg, misAddIn(), out)
		}},
		{name: "alias/y-is-x1", is: argIs, tensor: "y", names: []string{"y", "x1"}, run: func(t *testing.T, x *misuseEnv) error {
			out := x.devAddOut(t, true)
			return x.addOp(t, misAddW()).Run(bg, out.Y, misAddIn().X2, out)
		}},
		{name: "alias/y-is-x2-all-device", is: argIs, tensor: "y", names: []string{"y", "x2"}, run: func(t *testing.T, x *misuseEnv) error {
			out := x.devAddOut(t, true)
			d1 := x.upload(t, x.e, misAddIn().X1, true)
			return x.addOp(t, misAddW()).Run(bg, d1.Tensor(), out.Y, out)
		}},
		{name: "alias/embedding_sum-is-output", is: argIs, tensor: "embedding_sum", names: []string{"embedding_sum", "output"},
			run: func(t *testing.T, x *misuseEnv) error {
				o := x.devOut(t, x.e, true, fn.Float32, misB, misS, misD).Tensor()
				out := &fn.EmbedOutputs{Output: o, EmbeddingSum: o}
				return x.embedOp(t, misEmbedW()).Run(bg, misEmbedIn(), out)
			}},

		// An id out of range, host ids: an *ArgError on the tensor at fault before anything is
		// written; device ids: the same error from the call (CPU), or named in the device's
		// report at the next wait (Dawn).
		{name: "ids/input_ids", is: argIs, tensor: "input_ids", not: []string{"segment_ids", "position_ids"},
			run: func(t *testing.T, x *misuseEnv) error {
				return x.embedOp(t, misEmbedW()).Run(bg, fn.EmbedInputs{InputIDs: misIDs(1, misV, 2)}, x.hostEmbedOut())
			}},
		{name: "ids/segment_ids", is: argIs, tensor: "segment_ids", not: []string{"input_ids", "position_ids"},
			run: func(t *testing.T, x *misuseEnv) error {
				return x.embedOp(t, misEmbedW()).Run(bg, fn.EmbedInputs{InputIDs: misIDs(1, 2, 3), SegmentIDs: misIDs(0, misG, 1)}, x.hostEmbedOut())
			}},
		{name: "ids/position_ids", is: argIs, tensor: "position_ids", not: []string{"input_ids", "segment_ids"},
			run: func(t *testing.T, x *misuseEnv) error {
				return x.embedOp(t, misEmbedW()).Run(bg, fn.EmbedInputs{InputIDs: misIDs(1, 2, 3), PositionIDs: misIDs(0, 1, misP)}, x.hostEmbedOut())
			}},
		{name: "ids/input_ids-on-device", is: argIs, tensor: "input_ids", not: []string{"segment_ids", "position_ids"}, deferred: true,
			run: func(t *testing.T, x *misuseEnv) error {
				ids := x.upload(t, x.e, misIDs(1, misV, 2), true)
				out := &fn.EmbedOutputs{Output: x.devOut(t, x.e, false, fn.Float32, misB, misS, misD).Tensor()}
				return x.embedOp(t, misEmbedW()).Run(bg, fn.EmbedInputs{InputIDs: ids.Tensor()}, out)
			}},
		{name: "ids/negative-input_ids-on-device-host-output", is: argIs, tensor: "input_ids", not: []string{"segment_ids", "position_ids"}, deferred: true,
			run: func(t *testing.T, x *misuseEnv) error {
				ids := x.upload(t, x.e, misIDs(-1, 1, 2), true)
				h, _ := fn.NewTensor(fn.Float32, misB, misS, misD) // unspecified after a device id check fails
				out := &fn.EmbedOutputs{Output: h}
				return x.embedOp(t, misEmbedW()).Run(bg, fn.EmbedInputs{InputIDs: ids.Tensor()}, out)
			}},
		{name: "ids/segment_ids-on-device", is: argIs, tensor: "segment_ids", not: []string{"input_ids", "position_ids"}, deferred: true,
			run: func(t *testing.T, x *misuseEnv) error {
				ids := x.upload(t, x.e, misIDs(1, 2, 3), true)
				seg := x.upload(t, x.e, misIDs(0, misG, 1), true)
				out := &fn.EmbedOutputs{Output: x.devOut(t, x.e, false, fn.Float32, misB, misS, misD).Tensor()}
				return x.embedOp(t, misEmbedW()).Run(bg, fn.EmbedInputs{InputIDs: ids.Tensor(), SegmentIDs: seg.Tensor()}, out)
			}},
		{name: "ids/position_ids-on-device", is: argIs, tensor: "position_ids", not: []string{"input_ids", "segment_ids"}, deferred: true,
			run: func(t *testing.T, x *misuseEnv) error {
				ids := x.upload(t, x.e, misIDs(1, 2, 3), true)
				pos := x.upload(t, x.e, misIDs(0, misP, 1), true)
				out := &fn.EmbedOutputs{Output: x.devOut(t, x.e, false, fn.Float32, misB, misS, misD).Tensor()}
				return x.embedOp(t, misEmbedW()).Run(bg, fn.EmbedInputs{InputIDs: ids.Tensor(), PositionIDs: pos.Tensor()}, out)
			}},

		// Sizes: NewDeviceTensor answers as NewTensor does.
		{name: "size/NewTensor-overflow", is: []error{fn.ErrNotSupported}, run: func(t *testing.T, x *misuseEnv) error {
			_, err := fn.NewTensor(fn.Float32, 1<<62, 4)
			return err
		}},
		{name: "size/NewDeviceTensor-overflow", is: []error{fn.ErrNotSupported}, run: func(t *testing.T, x *misuseEnv) error {
			d, err := x.e.NewDeviceTensor(fn.Float32, 1<<62, 4)
			if err == nil {
				d.Close()
			}
			return err
		}},
		{name: "size/NewDeviceTensor-over-the-bound", is: []error{fn.ErrNotSupported}, run: func(t *testing.T, x *misuseEnv) error {
			d, err := x.e.NewDeviceTensor(fn.Float32, 1<<40)
			if err == nil {
				d.Close()
			}
			return err
		}},
		{name: "size/NewDeviceTensor-negative", is: argIs, run: func(t *testing.T, x *misuseEnv) error {
			d, err := x.e.NewDeviceTensor(fn.Float32, 2, -1)
			if err == nil {
				d.Close()
			}
			return err
		}},

		// A call whose ctx has ended: the ctx's error and a sentinel of the package.
		{name: "cancelled/AddLayerNorm", is: []error{fn.ErrCanceled, context.Canceled}, run: func(t *testing.T, x *misuseEnv) error {
			return x.e.AddLayerNorm(cancelled, misAddIn(), x.hostAddOut())
		}},
		{name: "cancelled/AddLayerNorm-deadline", is: []error{fn.ErrCanceled, context.DeadlineExceeded}, run: func(t *testing.T, x *misuseEnv) error {
			return x.e.AddLayerNorm(expired, misAddIn(), x.hostAddOut())
		}},
		{name: "cancelled/AddLayerNorm.Run-remembered", is: []error{fn.ErrCanceled, context.Canceled}, run: func(t *testing.T, x *misuseEnv) error {
			in := misAddIn()
			op := x.addOp(t, misAddW())
			d1, d2 := x.upload(t, x.e, in.X1, true), x.upload(t, x.e, in.X2, true)
			out := x.devAddOut(t, false)
			if err := op.Run(bg, d1.Tensor(), d2.Tensor(), out); err != nil {
				t.Fatalf("good call: %v", err)
			}
			return op.Run(cancelled, d1.Tensor(), d2.Tensor(), out)
		}},
		{name: "cancelled/EmbedLayerNorm.Run", is: []error{fn.ErrCanceled, context.Canceled}, run: func(t *testing.T, x *misuseEnv) error {
			return x.embedOp(t, misEmbedW()).Run(cancelled, misEmbedIn(), x.hostEmbedOut())
		}},
		{name: "cancelled/Kernel.Run", is: []error{fn.ErrCanceled, context.Canceled}, run: func(t *testing.T, x *misuseEnv) error {
			k, err := x.e.GetKernel(misEmbedKernel, 0)
			if err != nil {
				t.Fatal(err)
			}
			w, in := misEmbedW(), misEmbedIn()
			_, err = k.Run(cancelled, map[string]fn.Tensor{"inputIdsT": in.InputIDs, "wordEmbeddingT": w.Word,
				"positionEmbeddingT": w.Position, "gammaT": w.Gamma, "betaT": w.Beta}, nil)
			return err
		}},
		{name: "cancelled/Sync", is: []error{fn.ErrCanceled, context.Canceled}, run: func(t *testing.T, x *misuseEnv) error {
			return x.e.Sync(cancelled)
		}},
		{name: "cancelled/Read", is: []error{fn.ErrCanceled, context.Canceled}, run: func(t *testing.T, x *misuseEnv) error {
			d := x.upload(t, x.e, misAddIn().X1, true)
			return d.Read(cancelled, x.hostOut(fn.Float32, misN, misD))
		}},

		// Close with calls in flight on an engine of the kind: the calls end well or with
		// ErrClosed, later ones with ErrClosed, and no goroutine is left (runRow's check).
		{name: "close/calls-in-flight", is: closedIs, run: closeWithCallsInFlight},
	}
}

// closeWithCallsInFlight opens an engine of the kind under test, has goroutines call it
// (host and device tensors, both ops) until it closes under them, and returns the first
// answer that is not ErrClosed, else ErrClosed from a call after Close.
func closeWithCallsInFlight(t *testing.T, x *misuseEnv) error {
	bg := context.Background()
	e, err := x.b.open()
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer e.Close()
	add, err := e.NewAddLayerNorm(misAddW())
	if err != nil {
		t.Fatal(err)
	}
	emb, err := e.NewEmbedLayerNorm(misEmbedW())
	if err != nil {
		t.Fatal(err)
	}
	in := misAddIn()
	dx1, err := e.Upload(in.X1)
	if err != nil {
		t.Fatal(err)
	}
	var dys [8]*fn.DeviceTensor // each goroutine's own device output
	for i := range dys {
		if dys[i], err = e.NewDeviceTensor(fn.Float32, misN, misD); err != nil {
			t.Fatal(err)
		}
	}
	calls := []func(i int) error{
		func(int) error { return e.AddLayerNorm(bg, in, &fn.AddLayerNormOutputs{}) },
		func(i int) error {
			return add.Run(bg, dx1.Tensor(), in.X2, &fn.AddLayerNormOutputs{Y: dys[i].Tensor()})
		},
		func(int) error { return emb.Run(bg, misEmbedIn(), &fn.EmbedOutputs{}) },
		func(int) error { return e.Sync(bg) },
	}
	var (
		wg      sync.WaitGroup
		started sync.WaitGroup
		mu      sync.Mutex
		bad     error
	)
	for i := range dys {
		wg.Add(1)
		started.Add(1)
		go func() {
			defer wg.Done()
			call := calls[i%len(calls)]
			for n := 0; ; n++ {
				err := call(i)
				if n == 0 {
					started.Done()
				}
				if err == nil {
					continue
				}
				if !errors.Is(err, fn.ErrClosed) {
					mu.Lock()
					bad = cmpOr(bad, err)
					mu.Unlock()
				}
				return
			}
		}()
	}
	started.Wait()
	if err := e.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	wg.Wait()
	dx1.Close()
	for _, d := range dys {
		d.Close()
	}
	add.Close()
	emb.Close()
	if bad != nil {
		return bad
	}
	return add.Run(bg, in.X1, in.X2, &fn.AddLayerNormOutputs{})
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
