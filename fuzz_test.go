package fusednorm

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"runtime/debug"
	"slices"
	"testing"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// The fuzz targets drive the entry points with arbitrary shapes, dtypes, data lengths, ids,
// attributes and output arrangements. Dims range from 0 to near int overflow over small
// data slices (lying shapes), so the size and overflow paths are reached without
// allocating what the shapes claim; the engine's allocation bound is drawn small at times,
// so real shapes reach the refusal of outputs too large to allocate. Whatever the input, a
// call returns either a result of the contract's shape or an error wrapping a sentinel,
// never panics, and on error leaves the caller's outputs as they were. Seeds live in
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

// u64 reads 8 bytes (zeros past the end).
func (s *byteSource) u64() uint64 {
	var b [8]byte
	for i := range b {
		b[i] = s.next()
	}
	return binary.LittleEndian.Uint64(b[:])
}

// hugeDims are dims near the limits: int32 and uint32 overflow, maxElems, int overflow.
var hugeDims = hugeDimsOf(1)

// hugeDimsOf builds hugeDims from one (1) at run time: 2^31 and 2^32+1 wrap on 32-bit
// platforms instead of failing to compile.
func hugeDimsOf(one uint64) []int {
	return []int{math.MaxInt32, int(one << 31), int(one<<32 + 1), 1 << 23, maxElems, maxElems + 1, math.MaxInt/2 + 1, math.MaxInt}
}

// maxFuzzData bounds the elements of one drawn tensor's real data.
const maxFuzzData = 1 << 10

// dim draws a dimension: mostly 0-4, so calls pass validation, at times up to 68 (real
// data, larger outputs), at times huge.
func (s *byteSource) dim() int {
	switch s.intn(16) {
	case 0:
		return hugeDims[s.intn(len(hugeDims))]
	case 1, 2:
		return 5 + s.intn(64)
	}
	return s.intn(5)
}

// tensor draws a tensor: maybe absent, one of the dtypes, rank 0..maxRank, dims from dim,
// and data whose length matches the shape when that is at most maxFuzzData elements
// (except now and then), else a few elements: the shape lies.
func (s *byteSource) tensor(maxRank int, ids bool) Tensor {
	if s.intn(8) == 0 {
		return Tensor{}
	}
	dt := []DType{Float32, Float16, BFloat16, Int32}[s.intn(4)]
	if ids && s.intn(4) != 0 {
		dt = Int32
	}
	shape := make([]int, s.intn(maxRank+1))
	for i := range shape {
		shape[i] = s.dim()
	}
	n, ok := numel(shape)
	if !ok || n > maxFuzzData {
		n = s.intn(8)
	} else if s.intn(10) == 0 {
		n = max(n+s.intn(3)-1, 0)
	}
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

// over draws an output over t's memory (from an element offset, the given shape): for
// the overlap rule. Absent when t has no data.
func (s *byteSource) over(t Tensor, shape ...int) Tensor {
	n, _ := numel(shape)
	off := s.intn(4)
	switch b := t.buf; {
	case b.Len() == 0 || off+n > b.Len():
		return Tensor{}
	case b.DType == Float32:
		return FromFloat32(b.F32[off:off+n], shape...)
	case b.DType == Int32:
		return FromInt32(b.I32[off:off+n], shape...)
	case b.DType == BFloat16:
		return FromBFloat16Bits(b.U16[off:off+n], shape...)
	}
	return FromFloat16Bits(t.buf.U16[off:off+n], shape...)
}

// ctx draws the call's context: nil at times (not when the bytes have run out).
func (s *byteSource) ctx() context.Context {
	if s.intn(16) == 15 {
		return nil
	}
	return context.Background()
}

// allocCap draws the engine's cap on the bytes a call allocates: the system's, or a
// small one that real shapes reach.
func (s *byteSource) allocCap() int {
	if s.intn(2) == 0 {
		return 0
	}
	return s.intn(256) * 16
}

// fill draws a tensor of the dtype and shape whose data comes from a small generator
// seeded by one byte, so a consistent problem costs few fuzz bytes. Int32 data are ids in
// [0, n), one in 16 out of range when bad.
func (s *byteSource) fill(dt DType, n int, bad bool, shape ...int) Tensor {
	count, _ := numel(shape)
	x := uint32(s.next())*2654435761 + 1
	next := func() uint32 { x ^= x << 13; x ^= x >> 17; x ^= x << 5; return x }
	switch dt {
	case Float32:
		v := make([]float32, count)
		for i := range v {
			v[i] = float32(int(next()%256)-128) / 32
		}
		return FromFloat32(v, shape...)
	case Float16, BFloat16:
		v := make([]uint16, count)
		for i := range v {
			v[i] = uint16(next()%64)<<8 | 0x3000
		}
		if dt == Float16 {
			return FromFloat16Bits(v, shape...)
		}
		return FromBFloat16Bits(v, shape...)
	}
	v := make([]int32, count)
	for i := range v {
		v[i] = int32(next() % uint32(max(n, 1)))
		if bad && next()%16 == 0 {
			v[i] = []int32{-1, int32(n), math.MaxInt32, math.MinInt32}[next()%4]
		}
	}
	return FromInt32(v, shape...)
}

// sizes draws n dimensions of a consistent problem: 1-4 mostly, at times up to 130 (real
// outputs that a small allocation cap refuses), with a product of at most 1<<12, so the
// data a draw fills stays small.
func (s *byteSource) sizes(n int) []int {
	d, prod := make([]int, n), 1
	for i := range d {
		d[i] = 1 + s.intn(4)
		if s.intn(8) == 0 {
			d[i] = 1 + s.intn(130)
		}
		d[i] = max(min(d[i], (1<<12)/prod), 1)
		prod *= d[i]
	}
	return d
}

// perturb replaces at times one of ts by a random draw (often lying about its shape), or
// one dim of one by a huge or zero one over the same data.
func (s *byteSource) perturb(ts []*Tensor, maxRank int, ids []bool) {
	switch s.intn(4) {
	case 0:
		i := s.intn(len(ts))
		*ts[i] = s.tensor(maxRank, ids[i])
	case 1:
		t := ts[s.intn(len(ts))]
		if len(t.shape) > 0 {
			sh := slices.Clone(t.shape)
			sh[s.intn(len(sh))] = append(hugeDims, 0)[s.intn(len(hugeDims)+1)]
			t.shape = sh
		}
	}
}

// embedProblem draws an EmbedLayerNorm problem: one in four wholly random tensors, else a
// consistent one (ids now and then out of range) with at most one tensor perturbed.
func (s *byteSource) embedProblem() (EmbedWeights, EmbedInputs) {
	if s.intn(4) == 0 {
		w := EmbedWeights{Word: s.tensor(3, false), Position: s.tensor(3, false), Segment: s.tensor(3, false), Gamma: s.tensor(2, false), Beta: s.tensor(2, false)}
		in := EmbedInputs{InputIDs: s.tensor(3, true), SegmentIDs: s.tensor(3, true), Mask: s.tensor(3, true), PositionIDs: s.tensor(3, true)}
		return w, in
	}
	bsh, V, G := s.sizes(3), 1+s.intn(8), 1+s.intn(3)
	B, S, H := bsh[0], bsh[1], bsh[2]
	dt := []DType{Float32, Float16}[s.intn(2)]
	bad := s.intn(4) == 0
	P := max(S+s.intn(3)-1, 1) // at times S > P: position_ids then needed
	w := EmbedWeights{Word: s.fill(dt, 0, false, V, H), Position: s.fill(dt, 0, false, P, H),
		Gamma: s.fill(dt, 0, false, H), Beta: s.fill(dt, 0, false, H)}
	in := EmbedInputs{InputIDs: s.fill(Int32, V, bad, B, S)}
	if s.intn(2) == 0 {
		w.Segment = s.fill(dt, 0, false, G, H)
		if s.intn(2) == 0 {
			in.SegmentIDs = s.fill(Int32, G, bad, B, S)
		}
	}
	if s.intn(2) == 0 {
		in.Mask = s.fill(Int32, 3, false, B, S)
	}
	if s.intn(2) == 0 {
		in.PositionIDs = s.fill(Int32, P, bad, []int{1, B}[s.intn(2)], S)
	}
	ts := []*Tensor{&w.Word, &w.Position, &w.Segment, &w.Gamma, &w.Beta, &in.InputIDs, &in.SegmentIDs, &in.Mask, &in.PositionIDs}
	s.perturb(ts, 3, []bool{false, false, false, false, false, true, true, true, true})
	return w, in
}

// addProblem draws an AddLayerNorm problem: one in four wholly random tensors, else a
// consistent one of a dtype row of spec §B.2 with at most one tensor perturbed.
func (s *byteSource) addProblem() AddLayerNormInputs {
	if s.intn(4) == 0 {
		return AddLayerNormInputs{X1: s.tensor(9, false), X2: s.tensor(9, false), Gamma: s.tensor(9, false), Beta: s.tensor(9, false), Bias: s.tensor(9, false)}
	}
	row := ops.AddDTypeRows[s.intn(len(ops.AddDTypeRows))]
	shape := s.sizes(1 + s.intn(4))
	g := shape[len(shape)-1-s.intn(len(shape)):]
	in := AddLayerNormInputs{X1: s.fill(row[0], 0, false, shape...), X2: s.fill(row[1], 0, false, shape...),
		Gamma: s.fill(row[2], 0, false, g...), Beta: s.fill(row[2], 0, false, g...)}
	switch s.intn(3) {
	case 0:
		in.Bias = s.fill(row[3], 0, false, g...)
	case 1:
		in.Bias = s.fill(row[3], 0, false, shape...)
	}
	s.perturb([]*Tensor{&in.X1, &in.X2, &in.Gamma, &in.Beta, &in.Bias}, 9, make([]bool, 5))
	return in
}

// sharedFuzzEngine opens the CPU engine one target shares across its calls, and bounds
// what the library allocates for one call to 64 MiB (GOMEMLIMIT, which allocBound
// honours).
func sharedFuzzEngine(f *testing.F) *Engine {
	e, err := Open(WithBackend(BackendCPU))
	if err != nil {
		f.Fatal(err)
	}
	limit := debug.SetMemoryLimit(64 << 20)
	f.Cleanup(func() {
		debug.SetMemoryLimit(limit)
		e.Close()
	})
	return e
}

func checkFuzzErr(t *testing.T, err error, ctx context.Context) {
	if err == nil {
		if ctx == nil {
			t.Fatal("nil ctx accepted")
		}
		return
	}
	if !errors.Is(err, ErrInvalidArgument) && !errors.Is(err, ErrNotSupported) {
		t.Fatalf("error without a sentinel: %v", err)
	}
	var ae *ArgError
	if ctx == nil && (!errors.As(err, &ae) || ae.Tensor != "ctx") {
		t.Fatalf("nil ctx: %v", err)
	}
}

// dataOf copies the bits of the given outputs' data, to compare after a failed call.
func dataOf(ts ...Tensor) [][]uint32 {
	d := make([][]uint32, len(ts))
	for i, t := range ts {
		for j := range t.Len() {
			d[i] = append(d[i], bitsAt(t, j))
		}
	}
	return d
}

func bitsAt(t Tensor, i int) uint32 {
	switch t.buf.DType {
	case Float32:
		return math.Float32bits(t.buf.F32[i])
	case Float16, BFloat16:
		return uint32(t.buf.U16[i])
	}
	return uint32(t.buf.I32[i])
}

func FuzzEmbedLayerNorm(f *testing.F) {
	f.Add([]byte{1, 0, 2, 2, 3, 9, 9, 9, 9, 9, 9})
	e := sharedFuzzEngine(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		s := &byteSource{b: data}
		w, in := s.embedProblem()
		out := EmbedOutputs{WantMaskIndex: s.intn(2) == 0, WantEmbeddingSum: s.intn(2) == 0}
		if ids := in.InputIDs.Shape(); len(ids) == 2 {
			switch s.intn(8) {
			case 0:
				out.Output = s.tensor(3, false)
			case 1:
				out.MaskIndex = s.over(in.InputIDs, ids[0])
			case 2:
				if len(w.Word.Shape()) == 2 {
					out.Output = s.over(w.Word, ids[0], ids[1], w.Word.Shape()[1])
				}
			}
		}
		eps := []float32{1e-12, 0, -1, float32(math.NaN()), float32(math.Inf(1)), math.MaxFloat32}[s.intn(6)]
		rule := MaskRule(s.intn(3))
		e.allocCap = s.allocCap()
		ctx := s.ctx()
		before, given := out, dataOf(out.Output, out.MaskIndex, out.EmbeddingSum)
		err := e.EmbedLayerNormOnce(ctx, w, in, &out, Epsilon(eps), WithMaskRule(rule))
		checkFuzzErr(t, err, ctx)
		if err != nil {
			if !reflect.DeepEqual(before, out) || !slices.EqualFunc(given, dataOf(out.Output, out.MaskIndex, out.EmbeddingSum), slices.Equal) {
				t.Fatalf("failed call changed the outputs: %v", err)
			}
			return
		}
		if eps < 0 || eps != eps || math.IsInf(float64(eps), 0) || rule > MaskIndexCountOnes {
			t.Fatalf("epsilon %g, rule %d accepted", eps, rule)
		}
		ids := in.InputIDs.Shape()
		if got := out.Output.Shape(); len(got) != 3 || got[0] != ids[0] || got[1] != ids[1] || got[2] != w.Word.Shape()[1] {
			t.Fatalf("output shape %v for ids %v", got, ids)
		}
	})
}

func FuzzAddLayerNorm(f *testing.F) {
	f.Add([]byte{1, 0, 2, 2, 4, 1, 0, 2, 2, 4, 1, 0, 1, 4, 1, 0, 1, 4})
	e := sharedFuzzEngine(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		s := &byteSource{b: data}
		in := s.addProblem()
		var out AddLayerNormOutputs
		switch s.intn(8) {
		case 0:
			out.Mean = s.tensor(3, false)
		case 1:
			out.Y = s.over(in.X1, in.X1.Shape()...)
		case 2:
			out.Y = s.over(in.X2, in.X1.Shape()...)
		case 3:
			out.Y = s.tensor(9, false)
			out.X = s.over(out.Y, in.X1.Shape()...)
		}
		eps := []float32{1e-5, 0, float32(math.Inf(1)), float32(math.NaN()), -1}[s.intn(5)]
		additional := s.intn(2) == 0
		e.allocCap = s.allocCap()
		ctx := s.ctx()
		before, given := out, dataOf(out.Y, out.Mean, out.Rstd, out.X)
		err := e.AddLayerNorm(ctx, in, &out, Epsilon(eps), AdditionalOutput(additional))
		checkFuzzErr(t, err, ctx)
		if err != nil {
			if !reflect.DeepEqual(before, out) || !slices.EqualFunc(given, dataOf(out.Y, out.Mean, out.Rstd, out.X), slices.Equal) {
				t.Fatalf("failed call changed the outputs: %v", err)
			}
			return
		}
		if eps != eps || math.IsInf(float64(eps), 0) {
			t.Fatalf("epsilon %g accepted", eps)
		}
		if !sameShape(out.Y.Shape(), in.X1.Shape()) {
			t.Fatalf("y shape %v, x1 shape %v", out.Y.Shape(), in.X1.Shape())
		}
		if additional && out.X.IsZero() {
			t.Fatal("additional_output without x")
		}
	})
}

// attrValue draws an attribute value of any type: floats from raw bits (1e300, NaN, Inf,
// subnormals), ints, strings, bools, lists, nil.
func (s *byteSource) attrValue(str string) any {
	switch s.intn(10) {
	case 0:
		return math.Float64frombits(s.u64())
	case 1:
		return math.Float32frombits(uint32(s.u64()))
	case 2:
		return []float64{1e300, -1e300, 1e-6, 0, math.MaxFloat32, math.SmallestNonzeroFloat64}[s.intn(6)]
	case 3:
		return int(int64(s.u64()))
	case 4:
		return int64(s.intn(4))
	case 5:
		return str
	case 6:
		return s.intn(2) == 0
	case 7:
		return []string{"outputT", "maskIndexT", "embeddingSumT", "xT", "yT", str}[:s.intn(7)]
	case 8:
		return []any{str, 1}
	}
	return nil
}

// kernelAttrs are the attribute names the fuzzer draws: the ops' own, and one unknown.
var kernelAttrs = []string{"epsilon", "mask_index_type", "mask_index_rule", "additional_output", "want", "bogus"}

func FuzzKernel(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 2, 3, 9, 9, 9}, "first_zero")
	f.Add([]byte{1, 1, 0, 2, 2, 4}, "count_ones")
	e := sharedFuzzEngine(f)
	f.Fuzz(func(t *testing.T, data []byte, str string) {
		s := &byteSource{b: data}
		c := []*opContract{&embedContract, &addContract}[s.intn(2)]
		k, err := e.GetKernel(c.FullName(), c.Version)
		if err != nil {
			t.Fatal(err)
		}
		var ts []Tensor
		if c == &embedContract {
			w, in := s.embedProblem()
			ts = []Tensor{in.InputIDs, in.SegmentIDs, w.Word, w.Position, w.Segment, w.Gamma, w.Beta, in.Mask, in.PositionIDs}
		} else {
			in := s.addProblem()
			ts = []Tensor{in.X1, in.X2, in.Gamma, in.Beta, in.Bias}
		}
		inputs := map[string]Tensor{}
		for i, in := range c.Inputs {
			if !ts[i].IsZero() {
				inputs[in.BindKey] = ts[i]
			}
		}
		if s.intn(16) == 0 {
			inputs["bogusT"] = FromFloat32([]float32{1}, 1)
		}
		attrs := map[string]any{}
		for _, name := range kernelAttrs {
			_, own := c.Attributes[name]
			switch s.intn(8) {
			case 0:
				attrs[name] = s.attrValue(str)
			case 1, 2, 3: // a value of the type of one of the op's own attributes
				if !own && name != "want" {
					break
				}
				switch name {
				case "epsilon":
					attrs[name] = math.Float64frombits(s.u64())
				case "mask_index_rule":
					attrs[name] = []string{"first_zero", "count_ones", str}[s.intn(3)]
				case "additional_output":
					attrs[name] = s.intn(2) == 0
				case "mask_index_type":
					attrs[name] = int64(s.intn(2))
				case "want":
					attrs[name] = []string{"outputT", "maskIndexT", "embeddingSumT", "xT"}[:s.intn(5)]
				}
			}
		}
		ctx := s.ctx()
		outs, err := k.Run(ctx, inputs, attrs)
		checkFuzzErr(t, err, ctx)
		if err != nil {
			return
		}
		var eps float64
		switch v := attrs["epsilon"].(type) {
		case float64:
			eps = v
		case float32:
			eps = float64(v)
		}
		if eps != eps || math.IsInf(float64(float32(eps)), 0) {
			t.Fatalf("epsilon %v accepted", attrs["epsilon"])
		}
		for key, o := range outs {
			if o.IsZero() {
				t.Fatalf("output %s returned but absent", key)
			}
		}
	})
}
