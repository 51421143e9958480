package fusednorm

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
