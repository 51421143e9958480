package fusednorm

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
)

// Kernel is an op reached by name and version, the way a kernel hub's loader hands out
// kernels: inputs and outputs are keyed by the manifest's bind keys (inputIdsT,
// wordEmbeddingT, …; outputT, maskIndexT, …) and output shapes come from the manifest.
type Kernel struct {
	eng *Engine
	c   *opContract
	m   *manifest
}

// KernelNames lists the names GetKernel accepts.
func KernelNames() []string {
	return []string{embedContract.FullName(), addContract.FullName()}
}

// GetKernel returns the kernel "com.microsoft.EmbedLayerNormalization" or
// "ascend.AddLayerNorm" at version 1.
func (e *Engine) GetKernel(name string, version int) (*Kernel, error) {
	if err := e.use(); err != nil {
		return nil, err
	}
	e.done()
	for _, c := range []*opContract{&embedContract, &addContract} {
		if name != c.FullName() {
			continue
		}
		if version != c.Version {
			return nil, fmt.Errorf("fusednorm: GetKernel: %s has version %d, not %d: %w", name, c.Version, version, ErrNotSupported)
		}
		m, err := loadManifest(c)
		if err != nil {
			return nil, err
		}
		return &Kernel{eng: e, c: c, m: m}, nil
	}
	return nil, fmt.Errorf("fusednorm: GetKernel: unknown kernel %q (have %v): %w", name, KernelNames(), ErrNotSupported)
}

// Name is the kernel's full name.
func (k *Kernel) Name() string { return k.c.FullName() }

// Run computes the op. attrs holds the op's attributes (epsilon, mask_index_type,
// mask_index_rule "first_zero"|"count_ones", additional_output) and "want": the bind keys of
// optional outputs to return ([]string). Unknown bind keys and attributes are errors.
func (k *Kernel) Run(ctx context.Context, inputs map[string]Tensor, attrs map[string]any) (map[string]Tensor, error) {
	op := k.c.Name
	if err := checkCall(op, ctx, false); err != nil {
		return nil, err
	}
	for key, t := range inputs {
		if !slices.ContainsFunc(k.c.Inputs, func(in contractInput) bool { return in.BindKey == key }) {
			return nil, argErr(op, key, "unknown input bind key %q", key)
		}
		name := k.inputName(key)
		if err := checkTensor(op, name, &t); err != nil {
			return nil, err
		}
	}
	want := map[string]bool{}
	var opts []OpOption
	for _, name := range sortedKeys(attrs) {
		v := attrs[name]
		switch name {
		case "want":
			keys, ok := v.([]string)
			if !ok {
				return nil, argErr(op, "want", "want must be a []string of output bind keys")
			}
			for _, key := range keys {
				if !slices.ContainsFunc(k.c.Outputs, func(o contractOutput) bool { return o.BindKey == key }) {
					return nil, argErr(op, "want", "unknown output bind key %q", key)
				}
				want[key] = true
			}
		case "epsilon":
			f, ok := toFloat(v)
			if !ok {
				return nil, argErr(op, "epsilon", "epsilon must be a number, got %T", v)
			}
			if f32 := float32(f); math.IsInf(float64(f32), 0) && !math.IsInf(f, 0) {
				return nil, argErr(op, "epsilon", "epsilon %g does not fit in float32", f)
			}
			opts = append(opts, Epsilon(float32(f)))
		case "mask_index_type":
			if k.c != &embedContract {
				return nil, argErr(op, name, "unknown attribute %q", name)
			}
		case "mask_index_rule":
			switch {
			case k.c != &embedContract:
				return nil, argErr(op, name, "unknown attribute %q", name)
			case v == "first_zero":
				opts = append(opts, WithMaskRule(MaskFirstZero))
			case v == "count_ones":
				opts = append(opts, WithMaskRule(MaskIndexCountOnes))
			default:
				return nil, argErr(op, name, "mask_index_rule must be first_zero or count_ones, got %v", v)
			}
		case "additional_output":
			b, ok := v.(bool)
			if !ok || k.c != &addContract {
				return nil, argErr(op, name, "additional_output must be a bool attribute of AddLayerNorm")
			}
			opts = append(opts, AdditionalOutput(b))
			want["xT"] = want["xT"] || b
		default:
			return nil, argErr(op, name, "unknown attribute %q", name)
		}
	}
	outs := k.allocOutputs(inputs, want)
	var err error
	in := func(key string) Tensor { return inputs[key] }
	if k.c == &embedContract {
		eo := EmbedOutputs{Output: outs["outputT"], MaskIndex: outs["maskIndexT"], EmbeddingSum: outs["embeddingSumT"]}
		err = k.eng.EmbedLayerNormOnce(ctx, EmbedWeights{
			Word: in("wordEmbeddingT"), Position: in("positionEmbeddingT"), Segment: in("segmentEmbeddingT"),
			Gamma: in("gammaT"), Beta: in("betaT"),
		}, EmbedInputs{
			InputIDs: in("inputIdsT"), SegmentIDs: in("segmentIdsT"), Mask: in("maskT"), PositionIDs: in("positionIdsT"),
		}, &eo, opts...)
		outs = map[string]Tensor{"outputT": eo.Output, "maskIndexT": eo.MaskIndex, "embeddingSumT": eo.EmbeddingSum}
	} else {
		ao := AddLayerNormOutputs{Y: outs["yT"], Mean: outs["meanT"], Rstd: outs["rstdT"], X: outs["xT"]}
		err = k.eng.AddLayerNorm(ctx, AddLayerNormInputs{
			X1: in("x1T"), X2: in("x2T"), Gamma: in("gammaT"), Beta: in("betaT"), Bias: in("biasT"),
		}, &ao, opts...)
		outs = map[string]Tensor{"yT": ao.Y, "meanT": ao.Mean, "rstdT": ao.Rstd, "xT": ao.X}
	}
	if err != nil {
		return nil, err
	}
	for key, t := range outs {
		if t.IsZero() {
			delete(outs, key)
		}
	}
	return outs, nil
}

func (k *Kernel) inputName(key string) string {
	for _, in := range k.c.Inputs {
		if in.BindKey == key {
			return in.Name
		}
	}
	return key
}

// allocOutputs allocates every wanted output whose shape the manifest derives from the
// inputs, in the dtype the op's contract gives it. Outputs whose shape cannot be derived
// (the inputs break a rule) are left for the op's own validation to report.
func (k *Kernel) allocOutputs(inputs map[string]Tensor, want map[string]bool) map[string]Tensor {
	shapes := map[string][]int{}
	for key, t := range inputs {
		if !t.IsZero() {
			shapes[key] = t.shape
		}
	}
	outs := map[string]Tensor{}
	for _, o := range k.m.Outputs {
		if o.Optional && !want[o.BindKey] {
			continue
		}
		dt, ok := k.outputDType(o.DType, inputs)
		if !ok {
			continue
		}
		shape, err := shapeOf(o.Shape, shapes)
		if err != nil {
			continue
		}
		t, err := NewTensor(dt, shape...)
		if err != nil {
			continue
		}
		outs[o.BindKey] = t
	}
	return outs
}

// outputDType resolves a manifest dtype variable against the inputs; false when the inputs
// do not determine it (validation then reports the cause).
func (k *Kernel) outputDType(v string, inputs map[string]Tensor) (DType, bool) {
	switch v {
	case "T1":
		return Int32, true
	case "TStat":
		return Float32, true
	case "T":
		w := inputs["wordEmbeddingT"]
		return w.DType(), !w.IsZero()
	case "TOut":
		x1, x2, g := inputs["x1T"], inputs["x2T"], inputs["gammaT"]
		b := inputs["biasT"]
		return addOutDType(x1.DType(), x2.DType(), g.DType(), inputs["betaT"].DType(), b.DType(), !b.IsZero())
	}
	return 0, false
}

func toFloat(v any) (float64, bool) {
	switch f := v.(type) {
	case float32:
		return float64(f), true
	case float64:
		return f, true
	case int:
		return float64(f), true
	}
	return 0, false
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
