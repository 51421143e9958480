//go:build !cgo

package dawn

import (
	"context"
	"fmt"

	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/plan"
)

// Backend is the Dawn backend; without cgo it cannot be constructed.
type Backend struct{}

var errNoCgo = fmt.Errorf("dawn: built without cgo: %w", ops.ErrUnavailable)

// New reports that this build cannot load Dawn.
func New(Config) (*Backend, error) { return nil, errNoCgo }

// Info is empty: no Backend exists in a build without cgo.
func (b *Backend) Info() ops.Info { return ops.Info{Name: "dawn"} }

// Plan is the unfused plan.
func (b *Backend) Plan(h int, half bool) plan.Plan { return plan.For(h, half, plan.Contraction{}) }

// PrepareEmbed fails: no device.
func (b *Backend) PrepareEmbed(*ops.EmbedWeights) (ops.PreparedEmbed, error) { return nil, errNoCgo }

// AddLayerNorm fails: no device.
func (b *Backend) AddLayerNorm(context.Context, *ops.AddLN) error { return errNoCgo }

// Close does nothing.
func (b *Backend) Close() error { return nil }

// AdapterInfo describes an adapter; without cgo none is listed.
type AdapterInfo struct {
	Vendor, Architecture, Device, Description string
	Backend, AdapterType                      string
	VendorID, DeviceID                        uint32
}

// ListAdapters reports that this build cannot load Dawn.
func ListAdapters(string) ([]AdapterInfo, error) { return nil, errNoCgo }
