package fusednorm

import (
	"context"
	"errors"
	"math"
	"testing"
)

// The fuzz targets drive the validation entry points with arbitrary shapes, dtypes, data
// lengths, ids and attributes. Whatever the input, a call must return either a result of
// the contract's shape or an error wrapping a sentinel, and never panic. Seeds live in
// testdata/fuzz/<Target>/.

// byteSource hands out fuzz bytes as small numbers; it reads zeros when exhausted.
type byteSource struct{ b []byte }

func (s *byteSource) next() byte {
	if len(s.b) == 0 {
		return 0
	}
	v := s.b[0]
	s.b = s.b[1:]
	return v
}

func (s *byteSource) intn(n int) int { return int(s.next()) % n }

// tensor draws a tensor: maybe absent, one of the dtypes, rank 0..maxRank, dims 0..4, and a
// data length that usually (not always) matches the shape.
func (s *byteSource) tensor(maxRank int, ids bool) Tensor {
	if s.intn(8) == 0 {
		return Tensor{}
	}
	dt := []DType{Float32, Float16, BFloat16, Int32}[s.intn(4)]
	if ids && s.intn(4) != 0 {
		dt = Int32
	}
	shape := make([]int, s.intn(maxRank+1))
	n := 1
	for i := range shape {
		shape[i] = s.intn(5)
		n *= shape[i]
	}
	if s.intn(10) == 0 {
		n += s.intn(3) - 1
	}
	n = max(n, 0)
	switch dt {
	case Float32:
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(int(s.next())-128) / 32
		}
		return FromFloat32(v, shape...)
	case Float16, BFloat16:
		v := make([]uint16, n)
		for i := range v {
			v[i] = uint16(s.next())<<8 | 0x3c00&0x7fff
		}
		if dt == Float16 {
			return FromFloat16Bits(v, shape...)
		}
		return FromBFloat16Bits(v, shape...)
	}
	v := make([]int32, n)
	for i := range v {
		v[i] = int32(s.intn(11)) - 2
	}
	return FromInt32(v, shape...)
}

func fuzzEngine(t *testing.T) *Engine {
	e, err := Open(WithBackend(BackendCPU))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func checkFuzzErr(t *testing.T, err error) {
	if err == nil {
		return
	}
	if !errors.Is(err, ErrInvalidArgument) && !errors.Is(err, ErrNotSupported) {
		t.Fatalf("error without a sentinel: %v", err)
	}
}

func FuzzEmbedLayerNorm(f *testing.F) {
	f.Add([]byte{1, 0, 2, 2, 3, 9, 9, 9, 9, 9, 9})
	f.Fuzz(func(t *testing.T, data []byte) {
		s := &byteSource{b: data}
		w := EmbedWeights{Word: s.tensor(3, false), Position: s.tensor(3, false), Segment: s.tensor(3, false), Gamma: s.tensor(2, false), Beta: s.tensor(2, false)}
		in := EmbedInputs{InputIDs: s.tensor(3, true), SegmentIDs: s.tensor(3, true), Mask: s.tensor(3, true), PositionIDs: s.tensor(3, true)}
		out := EmbedOutputs{WantMaskIndex: s.intn(2) == 0, WantEmbeddingSum: s.intn(2) == 0}
		eps := []float32{1e-12, 0, -1, float32(math.NaN())}[s.intn(4)]
		e := fuzzEngine(t)
		defer e.Close()
		err := e.EmbedLayerNormOnce(context.Background(), w, in, &out, Epsilon(eps), WithMaskRule(MaskRule(s.intn(2))))
		checkFuzzErr(t, err)
		if err == nil {
			ids := in.InputIDs.Shape()
			if got := out.Output.Shape(); len(got) != 3 || got[0] != ids[0] || got[1] != ids[1] || got[2] != w.Word.Shape()[1] {
				t.Fatalf("output shape %v for ids %v", got, ids)
			}
		}
	})
}

func FuzzAddLayerNorm(f *testing.F) {
	f.Add([]byte{1, 0, 2, 2, 4, 1, 0, 2, 2, 4, 1, 0, 1, 4, 1, 0, 1, 4})
	f.Fuzz(func(t *testing.T, data []byte) {
		s := &byteSource{b: data}
		in := AddLayerNormInputs{X1: s.tensor(9, false), X2: s.tensor(9, false), Gamma: s.tensor(9, false), Beta: s.tensor(9, false), Bias: s.tensor(9, false)}
		var out AddLayerNormOutputs
		if s.intn(4) == 0 {
			out.Mean = s.tensor(3, false)
		}
		eps := []float32{1e-5, 0, float32(math.Inf(1)), float32(math.NaN())}[s.intn(4)]
		e := fuzzEngine(t)
		defer e.Close()
		err := e.AddLayerNorm(context.Background(), in, &out, Epsilon(eps), AdditionalOutput(s.intn(2) == 0))
		checkFuzzErr(t, err)
		if err == nil && !sameShape(out.Y.Shape(), in.X1.Shape()) {
			t.Fatalf("y shape %v, x1 shape %v", out.Y.Shape(), in.X1.Shape())
		}
	})
}

func FuzzKernel(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 2, 3, 9, 9, 9}, "first_zero")
	f.Add([]byte{1, 1, 0, 2, 2, 4}, "count_ones")
	f.Fuzz(func(t *testing.T, data []byte, rule string) {
		s := &byteSource{b: data}
		e := fuzzEngine(t)
		defer e.Close()
		c := []*opContract{&embedContract, &addContract}[s.intn(2)]
		k, err := e.GetKernel(c.FullName(), c.Version)
		if err != nil {
			t.Fatal(err)
		}
		inputs := map[string]Tensor{}
		for _, in := range c.Inputs {
			if t := s.tensor(4, in.DTypes[0] == Int32); !t.IsZero() {
				inputs[in.BindKey] = t
			}
		}
		if s.intn(16) == 0 {
			inputs["bogusT"] = FromFloat32([]float32{1}, 1)
		}
		attrs := map[string]any{"epsilon": float64(s.intn(3)) * 1e-6}
		if s.intn(2) == 0 {
			attrs["mask_index_rule"] = rule
		}
		if s.intn(2) == 0 {
			attrs["additional_output"] = s.intn(2) == 0
		}
		if s.intn(2) == 0 {
			attrs["want"] = []string{"outputT", "maskIndexT", "embeddingSumT", "xT"}[:1+s.intn(4)]
		}
		outs, err := k.Run(context.Background(), inputs, attrs)
		checkFuzzErr(t, err)
		for key, o := range outs {
			if o.IsZero() {
				t.Fatalf("output %s returned but absent", key)
			}
		}
	})
}
