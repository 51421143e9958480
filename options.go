package fusednorm

import (
	"sync"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// Default epsilons of the two ops (SPEC A.1 and B.1).
const (
	DefaultEmbedEpsilon = float32(1e-12)
	DefaultAddEpsilon   = float32(1e-5)
)

// MaskRule selects how EmbedLayerNorm derives mask_index from the mask (SPEC A.4).
type MaskRule = ops.MaskRule

const (
	// MaskFirstZero (the default): the first position whose mask is 0, else S. The Hugging
	// Face kernel card's rule, and ORT's CUDA kernel's.
	MaskFirstZero MaskRule = ops.MaskFirstZero
	// MaskIndexCountOnes: the number of mask entries equal to 1, for parity with ORT's CPU.
	MaskIndexCountOnes MaskRule = ops.MaskCountOnes
)

// OpOption sets an attribute of an op.
type OpOption func(*opConfig)

type opConfig struct {
	eps        float32
	epsSet     bool
	rule       ops.MaskRule
	additional bool
}

// Epsilon sets the value added to the variance (defaults: 1e-12 EmbedLayerNorm, 1e-5
// AddLayerNorm). It must be finite, and >= 0 for EmbedLayerNorm (SPEC A.1, B.3).
func Epsilon(eps float32) OpOption { return func(c *opConfig) { c.eps, c.epsSet = eps, true } }

// WithMaskRule sets the mask_index rule of EmbedLayerNorm: MaskFirstZero (the default) or
// MaskIndexCountOnes; another value is an error.
func WithMaskRule(r MaskRule) OpOption { return func(c *opConfig) { c.rule = r } }

// AdditionalOutput makes AddLayerNorm also return x = x1 + x2 (+ bias) in OutT.
func AdditionalOutput(on bool) OpOption { return func(c *opConfig) { c.additional = on } }

func newOpConfig(defEps float32, opts []OpOption) opConfig {
	if len(opts) == 0 {
		return opConfig{eps: defEps}
	}
	// The options write through a pointer the compiler cannot follow, so the config they
	// write to would be allocated on every call: it comes from a pool instead.
	c := opConfigs.Get().(*opConfig)
	*c = opConfig{eps: defEps}
	for _, o := range opts {
		o(c)
	}
	v := *c
	opConfigs.Put(c)
	return v
}

var opConfigs = sync.Pool{New: func() any { return new(opConfig) }}
