package fusednorm

import (
	"time"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// liveDeviceBuffers counts the device buffers of the engine's GPU backend; false on the CPU.
func (e *Engine) liveDeviceBuffers() (int, bool) {
	lb, ok := e.be.(ops.MemoryReporter)
	if !ok {
		return 0, false
	}
	n, _ := lb.DeviceMemory()
	return n, true
}

// withAutoSoftware lets auto keep a software adapter, so the routing between it and the
// CPU can be tested on lavapipe.
func withAutoSoftware() Option { return func(c *config) { c.autoSoftware = true } }

// routeModelOf returns the engine's cost model; false when the engine does not route.
func (e *Engine) routeModelOf() (*routeModel, bool) {
	r, ok := e.be.(*router)
	if !ok {
		return nil, false
	}
	return &r.m, true
}

// routedEngine is an auto engine routing between the backends given, the model m making each
// new shape's first choice and now timing the calls: the routing tested without a GPU.
func routedEngine(gpu, cpu ops.Backend, m routeModel, now func() time.Time) *Engine {
	r := newRouter(gpu, cpu, m)
	r.now = now
	return &Engine{be: r, reason: "test: routed"}
}

// routedShapes is the number of call shapes the engine's router holds timings of, and of
// those still exploring.
func (e *Engine) routedShapes() (held, exploring int) { return e.be.(*router).shapes.len() }
