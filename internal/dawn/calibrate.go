//go:build cgo

package dawn

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/plan"
)

// profiles are the four contraction profiles of spec §C.4, in order of preference.
var profiles = []plan.Contraction{
	{},
	{FuseVariance: true},
	{FuseAffine: true},
	{FuseVariance: true, FuseAffine: true},
}

// calibrationRows and calibrationH shape the calibration input: one workgroup per row, big
// enough that every profile predicts different bits somewhere, small enough to cost little.
// H exceeds plan.MaxW so every invocation accumulates several squares (with one, a fused
// and an unfused accumulation from zero round alike).
const (
	calibrationRows = 32
	calibrationH    = 768
	calibrationEps  = 1e-5
)

// calibrationData is a row-major (rows, h) input with a non-zero mean per row, plus gamma and
// beta, from a fixed seed. Every profile predicts different outputs for it (checked by the
// caller, which tries the next seed otherwise).
type calibrationData struct {
	x1, x2, gamma, beta []float32
}

func newCalibrationData(seed uint64) calibrationData {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	n := calibrationRows * calibrationH
	d := calibrationData{
		x1: make([]float32, n), x2: make([]float32, n),
		gamma: make([]float32, calibrationH), beta: make([]float32, calibrationH),
	}
	for row := 0; row < calibrationRows; row++ {
		offset := float32(r.NormFloat64() * 3)
		scale := float32(math.Exp2(float64(r.IntN(7) - 3)))
		for i := 0; i < calibrationH; i++ {
			d.x1[row*calibrationH+i] = offset + scale*float32(r.NormFloat64())
			d.x2[row*calibrationH+i] = float32(r.NormFloat64()) / 3
		}
	}
	for i := range d.gamma {
		d.gamma[i] = float32(r.NormFloat64())
		d.beta[i] = float32(r.NormFloat64())
	}
	return d
}

// prediction is the bits a device gives for the calibration data: y, then mean and rstd.
type prediction struct{ y, stats []uint32 }

// expect computes what a device with profile prof gives for the data (s = x1 + x2).
func (d calibrationData) expect(prof plan.Contraction) prediction {
	p := plan.For(calibrationH, false, prof)
	part := make([]float32, 2*p.W)
	s := make([]float32, calibrationH)
	var out prediction
	for row := 0; row < calibrationRows; row++ {
		for i := range s {
			s[i] = d.x1[row*calibrationH+i] + d.x2[row*calibrationH+i]
		}
		st := p.Stats(s, calibrationEps, part)
		for i, v := range s {
			out.y = append(out.y, math.Float32bits(p.Affine(v, st, d.gamma[i], d.beta[i])))
		}
		out.stats = append(out.stats, math.Float32bits(st.Mean()), math.Float32bits(st.Rstd))
	}
	return out
}

// matches reports whether a run's bits equal the prediction; stats is nil for a kernel
// without mean/rstd outputs.
func (p prediction) matches(y, stats []uint32) bool {
	return equalBits(y, p.y) && (stats == nil || equalBits(stats, p.stats))
}

func equalBits(a, b []uint32) bool { return slices.Equal(a, b) }

// calibrate runs the real kernels on the calibration data and returns the one profile that
// reproduces all of them. known is false (and the profile unfused) when none, or more than
// one, does. report says which kernel matched which profiles.
func (b *Backend) calibrate() (prof plan.Contraction, known bool, report string, err error) {
	var d calibrationData
	var want []prediction
	for seed := uint64(1); ; seed++ {
		d = newCalibrationData(seed)
		want = want[:0]
		for _, p := range profiles {
			want = append(want, d.expect(p))
		}
		if distinct(want) {
			break
		}
		if seed == 64 {
			return plan.Contraction{}, false, "", fmt.Errorf("no seed separates the profiles")
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	runs := []struct {
		name string
		run  func() (y, stats []uint32, err error)
	}{
		{"addln", func() ([]uint32, []uint32, error) { return b.calibrateAddLN(ctx, d, false) }},
		{"addln-reread", func() ([]uint32, []uint32, error) { return b.calibrateAddLN(ctx, d, true) }},
		{"embed", func() ([]uint32, []uint32, error) { return b.calibrateEmbed(ctx, d) }},
	}
	match := make([]bool, len(profiles))
	for i := range match {
		match[i] = true
	}
	var lines []string
	for _, r := range runs {
		y, stats, err := r.run()
		if err != nil {
			return plan.Contraction{}, false, "", fmt.Errorf("%s kernel: %w", r.name, err)
		}
		var names []string
		for i, w := range want {
			if w.matches(y, stats) {
				names = append(names, profiles[i].String())
			} else {
				match[i] = false
			}
		}
		if len(names) == 0 {
			names = []string{"none"}
		}
		lines = append(lines, r.name+": "+strings.Join(names, ","))
	}
	report = strings.Join(lines, "; ")
	found := -1
	for i, m := range match {
		if m {
			if found >= 0 {
				return plan.Contraction{}, false, report, nil
			}
			found = i
		}
	}
	if found < 0 {
		return plan.Contraction{}, false, report, nil
	}
	return profiles[found], true, report, nil
}

// distinct reports whether every pair of predictions differs, in y alone (the embed kernel
// has no mean/rstd outputs) and so also in y with the statistics.
func distinct(want []prediction) bool {
	for i := range want {
		for j := i + 1; j < len(want); j++ {
			if equalBits(want[i].y, want[j].y) {
				return false
			}
		}
	}
	return true
}

func (b *Backend) calibrateAddLN(ctx context.Context, d calibrationData, reread bool) (y, stats []uint32, err error) {
	n := calibrationRows * calibrationH
	a := ops.AddLN{
		N: calibrationRows, D: calibrationH,
		X1:      ops.Buf{DType: ops.F32, F32: d.x1},
		X2:      ops.Buf{DType: ops.F32, F32: d.x2},
		Gamma:   ops.Buf{DType: ops.F32, F32: d.gamma},
		Beta:    ops.Buf{DType: ops.F32, F32: d.beta},
		Epsilon: calibrationEps,
		Y:       ops.Buf{DType: ops.F32, F32: make([]float32, n)},
		Mean:    make([]float32, calibrationRows),
		Rstd:    make([]float32, calibrationRows),
	}
	if err := b.addLayerNorm(ctx, &a, nil, reread); err != nil {
		return nil, nil, err
	}
	for r := range a.Mean {
		stats = append(stats, math.Float32bits(a.Mean[r]), math.Float32bits(a.Rstd[r]))
	}
	return bitsOf(a.Y.F32), stats, nil
}

// calibrateEmbed feeds the sums x1 + x2 as the word table with a zero position table, so the
// embed kernel normalizes the same rows (x = w + 0 exactly). It has no mean/rstd outputs;
// y depends on both multiply-adds.
func (b *Backend) calibrateEmbed(ctx context.Context, d calibrationData) (y, stats []uint32, err error) {
	n := calibrationRows * calibrationH
	word := make([]float32, n)
	for i := range word {
		word[i] = d.x1[i] + d.x2[i]
	}
	ids := make([]int32, calibrationRows)
	for i := range ids {
		ids[i] = int32(i)
	}
	w := ops.EmbedWeights{
		DType: ops.F32, H: calibrationH, V: calibrationRows, P: calibrationRows,
		Word:    ops.Buf{DType: ops.F32, F32: word},
		Pos:     ops.Buf{DType: ops.F32, F32: make([]float32, n)},
		Gamma:   ops.Buf{DType: ops.F32, F32: d.gamma},
		Beta:    ops.Buf{DType: ops.F32, F32: d.beta},
		Epsilon: calibrationEps,
	}
	op := &embedOp{prepared: prepared{b: b}, w: w, plan: b.Plan(w.H, false)}
	if err := op.upload(); err != nil {
		return nil, nil, err
	}
	defer op.release()
	out := ops.EmbedOutputs{Out: ops.Buf{DType: ops.F32, F32: make([]float32, n)}}
	if err := op.run(ctx, &ops.EmbedInputs{B: 1, S: calibrationRows, IDs: ids}, &out); err != nil {
		return nil, nil, err
	}
	return bitsOf(out.Out.F32), nil, nil
}

func bitsOf(f []float32) []uint32 {
	out := make([]uint32, len(f))
	for i, v := range f {
		out[i] = math.Float32bits(v)
	}
	return out
}
