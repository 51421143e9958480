//go:build !cgo

package dawn

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/plan"
)

// Config chooses the Dawn library and, for tests, injects faults at named sites.
type Config struct {
	LibPath  string
	Inject   func(site string) error
	Logger   *slog.Logger
	Fallback func(plan.Contraction) (ops.Backend, error)
	Adapter  int
}

// Backend is the Dawn backend; without cgo it cannot be constructed.
type Backend struct{}

// New reports that this build cannot load Dawn.
func New(cfg Config) (*Backend, error) {
	return nil, fmt.Errorf("dawn: built without cgo: %w", ops.ErrUnavailable)
}

// Info is empty: no Backend exists in a build without cgo.
func (b *Backend) Info() ops.Info { return ops.Info{Name: "dawn"} }

// Plan is the unfused plan.
func (b *Backend) Plan(h int, half bool) plan.Plan { return plan.For(h, half, plan.Contraction{}) }

// PrepareEmbed fails: no device.
func (b *Backend) PrepareEmbed(*ops.EmbedWeights) (ops.PreparedEmbed, error) {
	return nil, fmt.Errorf("dawn: built without cgo: %w", ops.ErrUnavailable)
}

// AddLayerNorm fails: no device.
func (b *Backend) AddLayerNorm(context.Context, *ops.AddLN) error {
	return fmt.Errorf("dawn: built without cgo: %w", ops.ErrUnavailable)
}

// Close does nothing.
func (b *Backend) Close() error { return nil }

// AdapterInfo describes an adapter; without cgo none is listed.
type AdapterInfo struct {
	Vendor, Architecture, Device, Description string
	Backend, AdapterType                      string
	VendorID, DeviceID                        uint32
	SubgroupMinSize, SubgroupMaxSize          uint32
}

// ListAdapters reports that this build cannot load Dawn.
func ListAdapters(libPath string) ([]AdapterInfo, error) {
	return nil, fmt.Errorf("dawn: built without cgo: %w", ops.ErrUnavailable)
}

// CopyProbe measures a device's copy bandwidth; without cgo it cannot be constructed.
type CopyProbe struct{}

// NewCopyProbe reports that this build cannot load Dawn.
func NewCopyProbe(libPath string) (*CopyProbe, error) {
	return nil, fmt.Errorf("dawn: built without cgo: %w", ops.ErrUnavailable)
}

// GBps fails: no device.
func (p *CopyProbe) GBps(context.Context, int64, int) (float64, error) {
	return 0, fmt.Errorf("dawn: built without cgo: %w", ops.ErrUnavailable)
}

// Close does nothing.
func (p *CopyProbe) Close() error { return nil }
