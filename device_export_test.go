package fusednorm

import "github.com/fusednorm/fusednorm/internal/ops"

// liveDeviceBuffers counts the device buffers of the engine's GPU backend; false on the CPU.
func (e *Engine) liveDeviceBuffers() (int, bool) {
	lb, ok := e.be.(ops.BufferCounter)
	if !ok {
		return 0, false
	}
	return lb.LiveBuffers(), true
}
