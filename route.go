package fusednorm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/plan"
)

// In auto mode with a GPU open, the engine runs on a router: a call that involves a device
// tensor runs on the GPU; a call whose tensors all live in host memory runs where calls of
// its shape have finished sooner. A call shape (callShape) is the op (Engine.AddLayerNorm or
// one prepared op), its dimensions, its dtypes and which optional tensors it has. The first
// call of a new shape runs where a cost model measured at Open (calibrateRoute) says:
//
//	gpu(call) = launch + up/h2d + down/d2h
//	cpu(call) = touched/cpuBW
//
// up is the bytes of the call's host inputs (the prepared weights are resident on the GPU),
// down the bytes of its host outputs, touched the bytes the CPU reads and writes (up and
// down, plus the table rows EmbedLayerNorm gathers); launch is the round trip of a tiny
// upload and read-back (a submit and a buffer map), h2d and d2h the bandwidths of a timed
// copy through the device-tensor path, cpuBW the CPU backend's throughput on a timed
// AddLayerNorm. The model is a first guess only: it has no kernel term, its probes are small,
// and it cannot know how busy the machine will be (on the H200 machine it kept EmbedLayerNorm
// on the GPU at 1.4-2.4x the CPU's wall time). So the shape's second call runs on the other
// backend, and from then on the shape runs on the backend whose timed calls were faster (a
// backend's first call of a shape counts only as an upper bound: it may compile a pipeline or
// upload the prepared weights), the other getting a trial per as many calls of the chosen
// one as a call of it costs, until each has routeSamples timed calls; then the shape is
// chosen and runs on the lock-free path. A trial is two calls, only the second timed, and a
// call right after the other backend's is never timed: it would find the caches full of the
// other backend's data (see route). Every so often (routeRecheck calls, times that ratio, so
// the check costs about 1/routeRecheck of the shape's time) a call is timed on each backend,
// so a change in the machine's load moves the shape. Calls coming one at a time,
// exploring costs one call on the slower backend among a new shape's first four, so that even
// a benchmark of three timed runs after a warm-up times the faster backend in two. A shape the GPU refuses for a device limit
// (ErrNotSupported) runs on the CPU from then on; a call that fails on the backend its shape
// has not chosen runs on the other. The CPU backend mirrors the GPU's contraction profile,
// so a call gives the same bits on either: where it ran shows only in its time and in
// ReportBackend.

// routeModel is the measured cost model.
type routeModel struct {
	h2d, d2h, cpuBW float64 // bytes per second
	launch          float64 // seconds
	took            time.Duration
}

// gpuFaster says whether a host-tensor call moving up and down bytes, the CPU touching
// touched bytes, finishes sooner on the GPU.
func (m *routeModel) gpuFaster(up, down, touched int) bool {
	g := m.launch + float64(up)/m.h2d + float64(down)/m.d2h
	return g < float64(touched)/m.cpuBW
}

func (m *routeModel) String() string {
	return fmt.Sprintf("h2d %.2f GB/s, d2h %.2f GB/s, cpu %.2f GB/s, launch %.0f us; measured in %v",
		m.h2d/1e9, m.d2h/1e9, m.cpuBW/1e9, m.launch*1e6, m.took.Round(time.Millisecond))
}

// router is the backend of an auto engine with a GPU open: see the comment at the top.
type router struct {
	gpu ops.Backend // the dawn backend: also DeviceBackend, AddPreparer
	cpu ops.Backend
	m   routeModel

	shapes routeTable
	ops    atomic.Uint64    // the number of the last prepared op: part of its calls' shapes
	now    func() time.Time // time.Now; tests give a clock of their own

	// moved is set once the GPU's device was lost and could not be reopened: from then on
	// every host-tensor call runs on the CPU, and health says why.
	moved  atomic.Bool
	health atomic.Pointer[string]
}

// newRouter routes between gpu and cpu, m the model measured for them.
func newRouter(gpu, cpu ops.Backend, m routeModel) *router {
	return &router{gpu: gpu, cpu: cpu, m: m, now: time.Now}
}

// Info is the GPU's, or the CPU's once the router moved there for good.
func (r *router) Info() ops.Info {
	if r.moved.Load() {
		info := r.cpu.Info()
		info.Health = *r.health.Load()
		return info
	}
	return r.gpu.Info()
}

// gpuFailed is told of a GPU call that failed: when the device was lost and cannot be
// reopened, the router moves to the CPU for good. The router is the one place that decides
// to run on the CPU instead; the Dawn backend only recovers or reports.
func (r *router) gpuFailed(err error) {
	rec, ok := r.gpu.(ops.Recoverer)
	if !ok || !errors.Is(err, ops.ErrDevice) || r.moved.Load() {
		return
	}
	if rerr := rec.Recover(); rerr != nil {
		h := fmt.Sprintf("%s; running on the CPU backend from now on, mirroring profile %v", rerr, r.gpu.Info().Profile)
		r.health.Store(&h)
		r.moved.Store(true)
	}
}
func (r *router) Plan(h int, half bool) plan.Plan { return r.gpu.Plan(h, half) }

// Close closes both backends.
func (r *router) Close() error {
	return errors.Join(r.gpu.Close(), r.cpu.Close())
}

func hostBytes(bs ...ops.Buf) (n int) {
	for _, b := range bs {
		n += len(b.Bytes())
	}
	return n
}

// addOnDevice: a call with any device tensor runs on the GPU.
func addOnDevice(a *ops.AddLN) bool {
	return a.X1.Dev != nil || a.X2.Dev != nil || a.Gamma.Dev != nil || a.Beta.Dev != nil || a.Bias.Dev != nil ||
		a.Y.Dev != nil || a.X.Dev != nil || a.MeanDev != nil || a.RstdDev != nil
}

// addGPU says where the model sends a host-tensor AddLayerNorm; prepared: the weights are
// resident.
func (r *router) addGPU(a *ops.AddLN, prepared bool) bool {
	in := hostBytes(a.X1, a.X2)
	w := hostBytes(a.Gamma, a.Beta, a.Bias)
	up := in
	if !prepared {
		up += w
	}
	down := hostBytes(a.Y, a.X) + 4*(len(a.Mean)+len(a.Rstd))
	return r.m.gpuFaster(up, down, in+w+down)
}

// runAdd runs a on the GPU (gpuRun) or the CPU, a host-tensor call where its shape runs
// (route); op is the prepared op's number, 0 for Engine.AddLayerNorm.
func (r *router) runAdd(ctx context.Context, a *ops.AddLN, op uint64, gpuRun func() error) error {
	t := onDevice()
	if !addOnDevice(a) {
		t = r.route(addShape(op, a), sideOf(r.addGPU(a, op != 0)))
	}
	return r.run(ctx, &t, gpuRun, func() error { return r.cpu.AddLayerNorm(ctx, a) })
}

// onDevice is the route of a call with a device tensor: the GPU, untimed.
func onDevice() routeTicket { return routeTicket{on: onGPU} }

// run runs a call where t says, and reports where it ran. A host-tensor call the GPU refuses
// for a device limit (ErrNotSupported) runs on the CPU, as its shape will from now on; one
// that failed on the backend its shape has not chosen (a trial) runs on the other, so that
// exploring shows in no call's result.
func (r *router) run(ctx context.Context, t *routeTicket, gpuRun, cpuRun func() error) error {
	if r.moved.Load() && t.s != nil {
		*t = routeTicket{s: t.s, on: onCPU}
	}
	on := func(b side) error {
		if b == onGPU {
			err := gpuRun()
			if err != nil {
				r.gpuFailed(err)
			}
			return err
		}
		return cpuRun()
	}
	err := on(t.on)
	if err != nil && t.s != nil {
		switch {
		case t.on == onGPU && errors.Is(err, ops.ErrNotSupported):
			t.refused()
			err = on(onCPU)
		case t.trial:
			r.finish(t, err)
			*t = routeTicket{s: t.s, on: t.on.other()}
			err = on(t.on)
		}
	}
	r.finish(t, err)
	if err == nil {
		reportRoute(ctx, t.on.name())
	}
	return err
}

func (r *router) AddLayerNorm(ctx context.Context, a *ops.AddLN) error {
	return r.runAdd(ctx, a, 0, func() error { return r.gpu.AddLayerNorm(ctx, a) })
}

// PrepareAddLN prepares nothing yet: the CPU takes the weights with each call, and the GPU
// prepares on the first call that goes to it.
func (r *router) PrepareAddLN(gamma, beta, bias ops.Buf, biasFull bool) (ops.PreparedAddLN, error) {
	if gamma.Dev != nil || beta.Dev != nil || bias.Dev != nil {
		return r.gpu.(ops.AddPreparer).PrepareAddLN(gamma, beta, bias, biasFull)
	}
	return &routedAdd{r: r, id: r.ops.Add(1), gamma: gamma, beta: beta, bias: bias, biasFull: biasFull}, nil
}

type routedAdd struct {
	r                 *router
	id                uint64 // its calls' shapes are its own
	gamma, beta, bias ops.Buf
	biasFull          bool

	mu     sync.Mutex
	gpu    ops.PreparedAddLN
	gpuErr error // the GPU's prepare failed: host calls stay on the CPU
	closed bool
}

// gpuPrep prepares on the GPU once.
func (p *routedAdd) gpuPrep() (ops.PreparedAddLN, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, fmt.Errorf("prepared op: %w", ErrClosed) // the root names the op (callErr)
	}
	if p.gpu == nil && p.gpuErr == nil {
		p.gpu, p.gpuErr = p.r.gpu.(ops.AddPreparer).PrepareAddLN(p.gamma, p.beta, p.bias, p.biasFull)
	}
	return p.gpu, p.gpuErr
}

func (p *routedAdd) Run(ctx context.Context, a *ops.AddLN) error {
	return p.r.runAdd(ctx, a, p.id, func() error {
		g, err := p.gpuPrep()
		if err != nil {
			return err
		}
		return g.Run(ctx, a)
	})
}

func (p *routedAdd) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.gpu != nil {
		return p.gpu.Close()
	}
	return nil
}

// PrepareEmbed prepares on the CPU (it keeps references) and, on the first call that goes
// to the GPU, there; weights on the device prepare on the GPU alone.
func (r *router) PrepareEmbed(w *ops.EmbedWeights) (ops.PreparedEmbed, error) {
	if w.Word.Dev != nil || w.Pos.Dev != nil || w.Seg.Dev != nil || w.Gamma.Dev != nil || w.Beta.Dev != nil {
		return r.gpu.PrepareEmbed(w)
	}
	c, err := r.cpu.PrepareEmbed(w)
	if err != nil {
		return nil, err
	}
	return &routedEmbed{r: r, id: r.ops.Add(1), w: *w, cpu: c}, nil
}

type routedEmbed struct {
	r   *router
	id  uint64 // its calls' shapes are its own
	w   ops.EmbedWeights
	cpu ops.PreparedEmbed

	mu     sync.Mutex
	gpu    ops.PreparedEmbed
	gpuErr error
	closed bool
}

func (p *routedEmbed) gpuPrep() (ops.PreparedEmbed, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, fmt.Errorf("prepared op: %w", ErrClosed) // the root names the op (callErr)
	}
	if p.gpu == nil && p.gpuErr == nil {
		p.gpu, p.gpuErr = p.r.gpu.PrepareEmbed(&p.w)
	}
	return p.gpu, p.gpuErr
}

func (p *routedEmbed) Run(ctx context.Context, in *ops.EmbedInputs, out *ops.EmbedOutputs) error {
	gpuRun := func() error {
		g, err := p.gpuPrep()
		if err != nil {
			return err
		}
		return g.Run(ctx, in, out)
	}
	t := onDevice()
	if in.IDsDev == nil && in.SegIDsDev == nil && in.MaskDev == nil && in.PosIDsDev == nil &&
		out.MaskIndexDev == nil && out.Out.Dev == nil && out.Sum.Dev == nil {
		t = p.r.route(embedShape(p.id, in, out), sideOf(p.modelGPU(in, out)))
	}
	return p.r.run(ctx, &t, gpuRun, func() error {
		settling := p.settling()
		err := p.cpu.Run(ctx, in, out)
		if settling || p.settling() {
			t.cold = true // an upper bound of the CPU's time: the op ran slower than it will
		}
		return err
	})
}

// settling reports whether the CPU op is still preparing in the background (moving its word
// table onto huge pages): its calls' times are then no measure of its cost.
func (p *routedEmbed) settling() bool {
	s, ok := p.cpu.(interface{ Settling() bool })
	return ok && s.Settling()
}

// modelGPU says where the model sends a host-tensor call.
func (p *routedEmbed) modelGPU(in *ops.EmbedInputs, out *ops.EmbedOutputs) bool {
	up := 4 * (len(in.IDs) + len(in.SegIDs) + len(in.Mask) + len(in.PosIDs))
	down := hostBytes(out.Out, out.Sum) + 4*len(out.MaskIndex)
	tables := 2
	if p.w.G > 0 {
		tables = 3
	}
	gathered := tables * len(out.Out.Bytes())
	return p.r.m.gpuFaster(up, down, up+down+gathered)
}

func (p *routedEmbed) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	err := p.cpu.Close()
	if p.gpu != nil {
		err = errors.Join(err, p.gpu.Close())
	}
	return err
}

// The device-tensor methods are the GPU's.

func (r *router) NewDeviceMem(dt ops.DType, n int) (ops.DeviceMem, error) {
	return r.gpu.(ops.DeviceBackend).NewDeviceMem(dt, n)
}
func (r *router) WriteDevice(m ops.DeviceMem, src []byte) error {
	return r.gpu.(ops.DeviceBackend).WriteDevice(m, src)
}
func (r *router) ReadDevice(ctx context.Context, m ops.DeviceMem, dst []byte) error {
	return r.gpu.(ops.DeviceBackend).ReadDevice(ctx, m, dst)
}
func (r *router) FreeDevice(m ops.DeviceMem) error { return r.gpu.(ops.DeviceBackend).FreeDevice(m) }
func (r *router) Sync(ctx context.Context) error   { return r.gpu.(ops.DeviceBackend).Sync(ctx) }

// DeviceMemory is the GPU's.
func (r *router) DeviceMemory() (int, uint64) {
	if m, ok := r.gpu.(ops.MemoryReporter); ok {
		return m.DeviceMemory()
	}
	return 0, 0
}

// calibrateRoute measures the cost model: a copy of 4 MiB each way through the device-tensor
// path, the round trip of an 8-byte upload and read-back (a submit and a map: a host call's
// fixed cost; a tiny dispatch would first compile a pipeline, 0.2 s on lavapipe), and an
// AddLayerNorm of 4 MiB inputs on the CPU, each the best of two runs after a warm-up.
func calibrateRoute(gpu, cpu ops.Backend) (routeModel, error) {
	start := time.Now()
	var m routeModel
	ctx := context.Background()
	db := gpu.(ops.DeviceBackend)
	const n = 1 << 20 // f32 elements: 4 MiB
	host := make([]float32, n)
	hb := ops.Buf{DType: ops.F32, F32: host}.Bytes()
	dm, err := db.NewDeviceMem(ops.F32, n)
	if err != nil {
		return m, err
	}
	defer db.FreeDevice(dm)
	best := func(f func() error) (float64, error) {
		b := 0.0
		for i := 0; i < 3; i++ {
			t := time.Now()
			if err := f(); err != nil {
				return 0, err
			}
			if s := time.Since(t).Seconds(); i > 0 && (b == 0 || s < b) {
				b = s
			}
		}
		return max(b, 1e-9), nil
	}
	s, err := best(func() error {
		if err := db.WriteDevice(dm, hb); err != nil {
			return err
		}
		return db.Sync(ctx)
	})
	if err != nil {
		return m, err
	}
	m.h2d = float64(len(hb)) / s
	if s, err = best(func() error { return db.ReadDevice(ctx, dm, hb) }); err != nil {
		return m, err
	}
	m.d2h = float64(len(hb)) / s
	small, err := db.NewDeviceMem(ops.F32, 2)
	if err != nil {
		return m, err
	}
	defer db.FreeDevice(small)
	if m.launch, err = best(func() error {
		if err := db.WriteDevice(small, hb[:8]); err != nil {
			return err
		}
		return db.ReadDevice(ctx, small, hb[:8])
	}); err != nil {
		return m, err
	}
	addCase := func(rows, d int) *ops.AddLN {
		f := func(k int) ops.Buf { return ops.Buf{DType: ops.F32, F32: make([]float32, k)} }
		return &ops.AddLN{N: rows, D: d, X1: f(rows * d), X2: f(rows * d), Gamma: f(d), Beta: f(d), Epsilon: 1e-5,
			Y: f(rows * d), Mean: make([]float32, rows), Rstd: make([]float32, rows)}
	}
	c := addCase(n/1024, 1024)
	if s, err = best(func() error { return cpu.AddLayerNorm(ctx, c) }); err != nil {
		return m, err
	}
	m.cpuBW = float64(3*4*n) / s
	m.took = time.Since(start)
	return m, nil
}

// The measured choice: the timings of each host-tensor call shape, and the choice they
// make.

const (
	// routeSamples is how many timed calls of each backend a shape's choice compares once it
	// has them (their least: a slow call, a page fault or a busy moment, does not decide).
	routeSamples = 3
	// routeRecheck is the fewest calls of a chosen shape between two timed calls on each
	// backend; the interval is stretched by how much slower the other backend is, so that its
	// call costs about 1/routeRecheck of the shape's time.
	routeRecheck = 256
	// routeMaxRatio caps the spacing of the other backend's calls, in calls of the chosen one
	// per call of the other, so that even a backend far slower is timed again in bounded calls.
	routeMaxRatio = 1024
	// routeShapes is how many call shapes the router keeps timings of; past it, a new shape
	// drops the oldest, so a caller whose shapes never repeat does not grow memory.
	routeShapes = 256
)

// side is where a host-tensor call runs.
type side uint8

const (
	onCPU side = iota
	onGPU
)

func (s side) other() side { return 1 - s }

// name is the backend's name, as ReportBackend writes it.
func (s side) name() string {
	if s == onGPU {
		return BackendDawn
	}
	return BackendCPU
}

// sideOf is onGPU where gpu holds, else onCPU.
func sideOf(gpu bool) side {
	if gpu {
		return onGPU
	}
	return onCPU
}

// callShape is what a host-tensor call's cost depends on: the key of its timings.
type callShape struct {
	op    uint64       // 0: Engine.AddLayerNorm; else the prepared op's number (router.ops)
	dims  [3]int       // AddLayerNorm: N, D; EmbedLayerNorm: B, S, the position ids' batch
	dtype [5]ops.DType // AddLayerNorm: x1, x2, gamma, bias, y; EmbedLayerNorm: output
	has   uint8        // the optional tensors given, a bit each
}

// addShape is a's shape, for the op numbered op.
func addShape(op uint64, a *ops.AddLN) callShape {
	k := callShape{op: op, dims: [3]int{a.N, a.D},
		dtype: [5]ops.DType{a.X1.DType, a.X2.DType, a.Gamma.DType, a.Bias.DType, a.Y.DType}}
	for i, b := range [...]bool{a.BiasFull, a.X.Present(), len(a.Mean) > 0, len(a.Rstd) > 0} {
		if b {
			k.has |= 1 << i
		}
	}
	return k
}

// embedShape is the shape of an EmbedLayerNorm call, for the op numbered op.
func embedShape(op uint64, in *ops.EmbedInputs, out *ops.EmbedOutputs) callShape {
	k := callShape{op: op, dims: [3]int{in.B, in.S, in.PosBatch}, dtype: [5]ops.DType{out.Out.DType}}
	for i, b := range [...]bool{in.SegIDs != nil, in.Mask != nil, in.PosIDs != nil, out.MaskIndex != nil, out.Sum.Present()} {
		if b {
			k.has |= 1 << i
		}
	}
	return k
}

// A shape's state.
const (
	exploring uint32 = iota // timing both backends
	chosenCPU               // both timed routeSamples times; the state of the faster
	chosenGPU
	cpuOnly // the GPU refused the shape (ErrNotSupported): the CPU for good
)

// shapeRoute is one shape's timings and choice. A chosen shape's state is read without the
// lock: its call costs two atomic operations, and every so often a timed pair.
type shapeRoute struct {
	state atomic.Uint32
	calls atomic.Uint64 // calls since the shape was first chosen
	every atomic.Uint64 // calls between two timed pairs, once chosen

	mu     sync.Mutex
	choice side                           // the backend whose estimate is lower; at first the model's pick
	since  int                            // calls on choice since the other's last call
	trying bool                           // a call of the other backend is in flight
	tried  bool                           // the other backend has been given a call
	last   side                           // where the shape's previous call ran
	again  bool                           // the next call repeats a trial's warm-up call, timed
	cold   [2]time.Duration               // each backend's first call that succeeded: an upper bound of its time
	n      [2]int                         // each backend's later timed calls that succeeded
	times  [2][routeSamples]time.Duration // the latest of them, a ring per backend
}

// estimate is the time of a call on b: the least of its latest timed calls, else its first
// call's time; false before one has finished. The least, not the median: other work on the
// machine only ever slows a call, so the least is the backend's own time, and a choice made
// in a busy moment does not stick (on the H200 machine, shared, the median of three kept
// EmbedLayerNorm f16 (8,512,768) on the GPU at 1.28x the CPU's time).
func (s *shapeRoute) estimate(b side) (time.Duration, bool) {
	if n := min(s.n[b], routeSamples); n > 0 {
		return slices.Min(s.times[b][:n]), true
	}
	return s.cold[b], s.cold[b] > 0
}

// spacing is how many calls the chosen backend runs per call of the other, their estimated
// times being won and lost: as many as one of the other's takes, so that while exploring the
// other takes about half the shape's time at most (and, times routeRecheck once chosen,
// about 1/routeRecheck of it).
func spacing(won, lost time.Duration) int {
	return int(min(max((lost+won-1)/max(won, 1), 1), routeMaxRatio))
}

// routeTicket is where one host-tensor call runs, and how it is timed.
type routeTicket struct {
	s     *shapeRoute
	on    side
	timed bool
	cold  bool // on's first call of the shape to succeed: it may compile a pipeline or upload weights
	trial bool // a call of the backend not chosen
	warm  bool // the shape's previous call ran on the other backend: this one warms on's caches, no sample
	start time.Time
}

// routeTable maps call shapes to their routes. A lookup of a known shape takes the read lock
// and allocates nothing.
type routeTable struct {
	mu     sync.RWMutex
	shapes map[callShape]*shapeRoute
	order  []callShape // the shapes in the order they came, a ring once full
	next   int         // the oldest in order, once full
}

// get returns k's route, making it (first: the model's pick) when k is new.
func (t *routeTable) get(k callShape, first side) *shapeRoute {
	t.mu.RLock()
	s := t.shapes[k]
	t.mu.RUnlock()
	if s != nil {
		return s
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if s = t.shapes[k]; s != nil {
		return s
	}
	if t.shapes == nil {
		t.shapes = make(map[callShape]*shapeRoute)
	}
	if len(t.order) < routeShapes {
		t.order = append(t.order, k)
	} else {
		delete(t.shapes, t.order[t.next])
		t.order[t.next] = k
		t.next = (t.next + 1) % routeShapes
	}
	s = &shapeRoute{choice: first}
	t.shapes[k] = s
	return s
}

// len is the number of shapes held, and of those still exploring (tests).
func (t *routeTable) len() (held, unchosen int) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for _, s := range t.shapes {
		if s.state.Load() == exploring {
			unchosen++
		}
	}
	return len(t.shapes), unchosen
}

// route says where a host-tensor call of shape k runs; first is the model's pick, taken by a
// new shape's first call. The caller runs the call there and hands the ticket to finish.
//
// A new shape's first call runs on the model's pick, its second on the other backend: each
// is timed as an upper bound (a backend's first call of a shape may compile a pipeline or
// upload the prepared weights). From then on the calls run on the backend whose estimate is
// lower, and the other gets a trial each time the chosen one has run as many calls as a call
// of the other is estimated to cost, until each has routeSamples timed calls after its first.
// A trial is two calls in a row, the second timed: a call right after one on the other
// backend finds the caches holding the other backend's data (a GPU call streams its tensors
// through staging memory), and timing it would weigh a cold call of one backend against warm
// calls of the other (on the H200 machine that kept EmbedLayerNorm f32 (8,512,768) on the
// GPU at 1.7x the CPU's time); for the same reason the chosen backend's first call after a
// trial is not timed. The shape is then chosen; every so often, spaced by routeRecheck times
// that ratio, a timed call of the chosen backend and a trial of the other make the choice
// again.
func (r *router) route(k callShape, first side) routeTicket {
	s := r.shapes.get(k, first)
	switch st := s.state.Load(); st {
	case cpuOnly:
		return routeTicket{s: s, on: onCPU}
	case chosenCPU, chosenGPU:
		on := sideOf(st == chosenGPU)
		every := s.every.Load()
		switch s.calls.Add(1) % every {
		case every - 3:
			return r.timed(routeTicket{s: s, on: on})
		case every - 2:
			return routeTicket{s: s, on: on.other(), trial: true} // the trial's warm-up
		case every - 1:
			return r.timed(routeTicket{s: s, on: on.other(), trial: true})
		}
		return routeTicket{s: s, on: on}
	}
	s.mu.Lock()
	if s.state.Load() != exploring { // chosen or refused meanwhile
		s.mu.Unlock()
		return r.route(k, first)
	}
	t := routeTicket{s: s, on: s.choice}
	if s.again && !s.trying { // a trial's timed call, after its warm-up
		t.on, t.trial, s.again = s.last, s.last != s.choice, false
	} else if other := s.choice.other(); !s.trying {
		won, okWon := s.estimate(s.choice)
		lost, okLost := s.estimate(other)
		switch {
		case okWon && okLost:
			t.trial = s.since >= spacing(won, lost)
		case !okLost: // the second call, or, rarely, again after the other's calls failed
			t.trial = s.since >= 1 && (!s.tried || s.since >= routeRecheck)
		}
		if t.trial {
			t.on = other
		}
	}
	switch {
	case t.trial && t.on != s.last:
		s.trying, s.tried, s.since = true, true, 0
	case t.trial:
		s.trying = true
	default:
		s.since++
	}
	t.cold = s.cold[t.on] == 0 && s.n[t.on] == 0
	t.warm = t.on != s.last
	s.last = t.on
	s.mu.Unlock()
	return r.timed(t)
}

func (r *router) timed(t routeTicket) routeTicket {
	t.timed, t.start = true, r.now()
	return t
}

// refused records that the GPU refused the ticket's call for a device limit: the call, and
// the shape from now on, run on the CPU.
func (t *routeTicket) refused() {
	t.s.mu.Lock() // finish chooses under it: a choice must not overwrite the refusal
	t.s.state.Store(cpuOnly)
	t.s.mu.Unlock()
	t.on, t.timed = onCPU, false
}

// finish records the time of a timed call that succeeded, and chooses again: the backend
// whose estimate is lower, and, once both have routeSamples timed calls, the shape.
func (r *router) finish(t *routeTicket, err error) {
	if !t.timed {
		return
	}
	d := r.now().Sub(t.start)
	s := t.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.trial && s.state.Load() == exploring {
		s.trying = false
	}
	if err != nil || s.state.Load() == cpuOnly {
		return
	}
	switch {
	case t.cold:
		s.cold[t.on] = max(d, 1)
	case t.warm:
		// A warm-up: a trial's is followed by the timed call (a backend's first call is one
		// on its own, timed as an upper bound).
		s.again = t.trial && s.state.Load() == exploring
		return
	default:
		s.times[t.on][s.n[t.on]%routeSamples] = d
		s.n[t.on]++
	}
	cpu, okCPU := s.estimate(onCPU)
	gpu, okGPU := s.estimate(onGPU)
	if !okCPU || !okGPU {
		return
	}
	won, lost := cpu, gpu
	if gpu < cpu {
		won, lost = gpu, cpu
	}
	if w := sideOf(gpu < cpu); w != s.choice {
		s.choice, s.since = w, 0
	}
	if s.n[onCPU] >= routeSamples && s.n[onGPU] >= routeSamples {
		s.every.Store(uint64(routeRecheck * spacing(won, lost))) // before the state: a call that sees the choice sees it
		s.state.Store(chosenCPU + uint32(s.choice))
	}
}
