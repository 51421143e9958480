package fusednorm

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// The measured choice of route.go: the timings of each host-tensor call shape, and the
// choice they make.

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
