package tests

import (
	"context"
	"slices"
	"testing"

	fn "github.com/fusednorm/fusednorm"
)

// The device-tensor twin of every successful case (issue 13): the same call through the
// typed API with every input and output a device tensor must give the same bits as the
// host-tensor call through the kernel entry.

// toDevice uploads every tensor of in.
func (s *Suite) toDevice(t *testing.T, in map[string]fn.Tensor) map[string]fn.Tensor {
	t.Helper()
	out := map[string]fn.Tensor{}
	for key, x := range in {
		if x.IsZero() {
			continue
		}
		d, err := s.Engine.Upload(x)
		if err != nil {
			t.Fatalf("upload %s: %v", key, err)
		}
		t.Cleanup(func() { d.Close() })
		out[key] = d.Tensor()
	}
	return out
}

// deviceOutputs allocates a device tensor like each output of got.
func (s *Suite) deviceOutputs(t *testing.T, got map[string]fn.Tensor) map[string]*fn.DeviceTensor {
	t.Helper()
	out := map[string]*fn.DeviceTensor{}
	for key, x := range got {
		d, err := s.Engine.NewDeviceTensor(x.DType(), x.Shape()...)
		if err != nil {
			t.Fatalf("device output %s: %v", key, err)
		}
		t.Cleanup(func() { d.Close() })
		out[key] = d
	}
	return out
}

// sameAsHost reads each device output back and wants the host call's bits.
func (s *Suite) sameAsHost(t *testing.T, dev map[string]*fn.DeviceTensor, got map[string]fn.Tensor) {
	t.Helper()
	for _, key := range slices.Sorted(func(yield func(string) bool) {
		for k := range got {
			if !yield(k) {
				return
			}
		}
	}) {
		h, _ := fn.NewTensor(got[key].DType(), got[key].Shape()...)
		if err := dev[key].Read(context.Background(), h); err != nil {
			t.Fatalf("device tensors: read %s: %v", key, err)
		}
		if d := ulpDiff(h, got[key], 1, nil); d != 0 {
			t.Errorf("device tensors: %s differs from the host-tensor call by %d ulp", key, d)
		}
	}
}

func opOptions(attrs map[string]any) []fn.OpOption {
	var opts []fn.OpOption
	if e, ok := attrs["epsilon"]; ok {
		switch v := e.(type) {
		case float64:
			opts = append(opts, fn.Epsilon(float32(v)))
		case float32:
			opts = append(opts, fn.Epsilon(v))
		}
	}
	if attrs["mask_index_rule"] == "count_ones" {
		opts = append(opts, fn.WithMaskRule(fn.MaskIndexCountOnes))
	}
	if b, _ := attrs["additional_output"].(bool); b {
		opts = append(opts, fn.AdditionalOutput(true))
	}
	return opts
}

func (s *Suite) addOnDevice(t *testing.T, in map[string]fn.Tensor, attrs map[string]any, got map[string]fn.Tensor) {
	t.Helper()
	din := s.toDevice(t, in)
	dout := s.deviceOutputs(t, got)
	out := fn.AddLayerNormOutputs{Y: dout["yT"].Tensor(), Mean: dout["meanT"].Tensor(), Rstd: dout["rstdT"].Tensor()}
	if x, ok := dout["xT"]; ok {
		out.X = x.Tensor()
	}
	opts := opOptions(attrs)
	op, err := s.Engine.NewAddLayerNorm(fn.AddLayerNormWeights{Gamma: din["gammaT"], Beta: din["betaT"], Bias: din["biasT"]}, opts...)
	if err != nil {
		t.Fatalf("device tensors: prepare: %v", err)
	}
	defer op.Close()
	if err := op.Run(context.Background(), din["x1T"], din["x2T"], &out); err != nil {
		t.Fatalf("device tensors: run: %v", err)
	}
	s.sameAsHost(t, dout, got)
}

func (s *Suite) embedOnDevice(t *testing.T, in map[string]fn.Tensor, attrs map[string]any, got map[string]fn.Tensor) {
	t.Helper()
	din := s.toDevice(t, in)
	dout := s.deviceOutputs(t, got)
	op, err := s.Engine.NewEmbedLayerNorm(fn.EmbedWeights{Word: din["wordEmbeddingT"], Position: din["positionEmbeddingT"],
		Segment: din["segmentEmbeddingT"], Gamma: din["gammaT"], Beta: din["betaT"]}, opOptions(attrs)...)
	if err != nil {
		t.Fatalf("device tensors: prepare: %v", err)
	}
	defer op.Close()
	out := fn.EmbedOutputs{Output: dout["outputT"].Tensor()}
	if d, ok := dout["maskIndexT"]; ok {
		out.MaskIndex = d.Tensor()
	}
	if d, ok := dout["embeddingSumT"]; ok {
		out.EmbeddingSum = d.Tensor()
	}
	err = op.Run(context.Background(), fn.EmbedInputs{InputIDs: din["inputIdsT"], SegmentIDs: din["segmentIdsT"],
		Mask: din["maskT"], PositionIDs: din["positionIdsT"]}, &out)
	if err != nil {
		t.Fatalf("device tensors: run: %v", err)
	}
	s.sameAsHost(t, dout, got)
}
