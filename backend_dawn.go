package fusednorm

import (
	"github.com/fusednorm/fusednorm/dawn"
	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/plan"
)

// openDawn opens the Dawn backend: the library from WithDawnLibrary or FUSEDNORM_DAWN_LIB
// alone when one is named, else dawn's search list; errors wrap ErrUnavailable with the cause
// (the path and why, no adapter, Null backend only, built without cgo). In auto mode a device
// that is lost and cannot be reopened hands over to the CPU backend, mirroring its profile.
func openDawn(c *config, auto bool) (Backend, error) {
	cfg := dawn.Config{LibPath: c.dawnLib, Inject: c.inject, Logger: c.logger}
	if auto {
		cfg.Fallback = func(p plan.Contraction) (ops.Backend, error) {
			cc := *c
			cc.profile = &p
			return newCPU(&cc)
		}
	}
	be, err := dawn.New(cfg)
	if err != nil {
		return nil, err
	}
	return be, nil
}
