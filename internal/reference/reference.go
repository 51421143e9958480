// Package reference holds the two independent references the tests compare backends with:
// the sequential form of spec §A.3/§B.4 in float32 (bit-exact with ONNX Runtime 1.30 CPU for
// f32 EmbedLayerNorm), and a float64 form for tolerance checks (spec §C.5).
package reference

import (
	"math"

	"github.com/x448/float16"

	"github.com/fusednorm/fusednorm/internal/half"
	"github.com/fusednorm/fusednorm/internal/ops"
)

func f16(h uint16) float32    { return float16.Frombits(h).Float32() }
func rnd16(f float32) float32 { return float16.Fromfloat32(f).Float32() }
func bf16(b uint16) float32   { return math.Float32frombits(uint32(b) << 16) }
func toF16(f float32) uint16  { return float16.Fromfloat32(f).Bits() }

// At returns element i of b as float32.
func At(b ops.Buf, i int) float32 {
	switch b.DType {
	case ops.F32:
		return b.F32[i]
	case ops.F16:
		return f16(b.U16[i])
	case ops.BF16:
		return bf16(b.U16[i])
	case ops.I32:
		return float32(b.I32[i])
	}
	return 0
}

// Set stores v into element i of b, rounding to b's dtype (RNE).
func Set(b ops.Buf, i int, v float32) {
	switch b.DType {
	case ops.F32:
		b.F32[i] = v
	case ops.F16:
		b.U16[i] = toF16(v)
	case ops.BF16:
		b.U16[i] = half.F32ToBF16(v)
	}
}

// EmbedRow returns the T-rounded embedding sum of token t as float32 (spec §A.3 orders).
func EmbedRow(w *ops.EmbedWeights, in *ops.EmbedInputs, t int) []float32 {
	H := w.H
	s := t % in.S
	wi, pi := int(in.IDs[t]), s
	if in.PosIDs != nil {
		if in.PosBatch == 1 {
			pi = int(in.PosIDs[s])
		} else {
			pi = int(in.PosIDs[t])
		}
	}
	gi := -1
	if w.G > 0 {
		gi = 0
		if in.SegIDs != nil {
			gi = int(in.SegIDs[t])
		}
	}
	x := make([]float32, H)
	for i := range x {
		wv, pv := At(w.Word, wi*H+i), At(w.Pos, pi*H+i)
		switch {
		case w.DType == ops.F32 && gi >= 0:
			x[i] = (wv + pv) + At(w.Seg, gi*H+i)
		case w.DType == ops.F32:
			x[i] = wv + pv
		case gi >= 0:
			x[i] = rnd16(rnd16(wv+At(w.Seg, gi*H+i)) + pv)
		default:
			x[i] = rnd16(wv + pv)
		}
	}
	return x
}

// MaskIndex is spec §A.4 for batch row b.
func MaskIndex(mask []int32, b, S int, rule ops.MaskRule) int32 {
	if mask == nil {
		return 0
	}
	row := mask[b*S : b*S+S]
	if rule == ops.MaskCountOnes {
		n := int32(0)
		for _, m := range row {
			if m == 1 {
				n++
			}
		}
		return n
	}
	for s, m := range row {
		if m == 0 {
			return int32(s)
		}
	}
	return int32(S)
}

// Embed is the sequential float32 EmbedLayerNorm of spec §A.3: sequential sums, two-pass
// variance, division by sqrt(var+eps), no fusion. It writes every output present in out.
func Embed(w *ops.EmbedWeights, in *ops.EmbedInputs, out *ops.EmbedOutputs) {
	H := w.H
	for t := 0; t < in.B*in.S; t++ {
		x := EmbedRow(w, in, t)
		if out.Sum.Present() {
			for i, v := range x {
				Set(out.Sum, t*H+i, v)
			}
		}
		mean, den := seqStats(x, w.Epsilon)
		for i, v := range x {
			n := float32((v - mean) / den)
			y := float32(n*At(w.Gamma, i)) + At(w.Beta, i)
			Set(out.Out, t*H+i, y)
		}
	}
	if out.MaskIndex != nil {
		for b := range out.MaskIndex {
			out.MaskIndex[b] = MaskIndex(in.Mask, b, in.S, w.Rule)
		}
	}
}

// seqStats: mean = Σx ⊘ H, var = Σ(x−mean)² ⊘ H, den = sqrt(var ⊕ eps), all sequential.
func seqStats(x []float32, eps float32) (mean, den float32) {
	var sum float32
	for _, v := range x {
		sum += v
	}
	mean = sum / float32(len(x))
	var acc float32
	for _, v := range x {
		d := v - mean
		acc += float32(d * d)
	}
	variance := acc / float32(len(x))
	return mean, float32(math.Sqrt(float64(variance + eps)))
}

// AddRow returns s = (x1 + x2) + bias of row r in float32 (spec §B.4).
func AddRow(a *ops.AddLN, r int) []float32 {
	s := make([]float32, a.D)
	for j := range s {
		i := r*a.D + j
		v := At(a.X1, i) + At(a.X2, i)
		if a.Bias.Present() {
			if a.BiasFull {
				v += At(a.Bias, i)
			} else {
				v += At(a.Bias, j)
			}
		}
		s[j] = v
	}
	return s
}

// AddLayerNorm is the canonical sequential form of spec §B.4.
func AddLayerNorm(a *ops.AddLN) {
	for r := 0; r < a.N; r++ {
		s := AddRow(a, r)
		mean, den := seqStats(s, a.Epsilon)
		rstd := 1 / den
		for j, v := range s {
			i := r*a.D + j
			if a.X.Present() {
				Set(a.X, i, v)
			}
			n := float32((v - mean) * rstd)
			Set(a.Y, i, float32(n*At(a.Gamma, j))+At(a.Beta, j))
		}
		a.Mean[r], a.Rstd[r] = mean, rstd
	}
}

// Stats64 returns mean, rstd and the normalized row in float64 from float32 inputs.
func Stats64(x []float32, eps float32, gamma, beta func(i int) float32) (mean, rstd float64, y []float64) {
	var sum float64
	for _, v := range x {
		sum += float64(v)
	}
	mean = sum / float64(len(x))
	var acc float64
	for _, v := range x {
		d := float64(v) - mean
		acc += d * d
	}
	rstd = 1 / math.Sqrt(acc/float64(len(x))+float64(eps))
	y = make([]float64, len(x))
	for i, v := range x {
		y[i] = (float64(v)-mean)*rstd*float64(gamma(i)) + float64(beta(i))
	}
	return mean, rstd, y
}
