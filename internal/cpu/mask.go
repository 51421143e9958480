package cpu

import (
	"github.com/fusednorm/fusednorm/internal/ops"
)

// mask_index's rules over a row of the int32 mask (spec §A.4).

// maskKernels are a width's mask kernels, for the whole vectors of m.
type maskKernels struct {
	countOnes func(m []int32) int32 // how many are 1
	firstZero func(m []int32) int   // the index of the first 0, else their count
}

// maskGo is the twin of mask: MaskCountOnes counts the 1s of m, MaskFirstZero finds the
// first 0 (len(m) when there is none).
func maskGo(rule ops.MaskRule, m []int32) int32 {
	if rule == ops.MaskCountOnes {
		var n int32
		for _, v := range m {
			if v == 1 {
				n++
			}
		}
		return n
	}
	for i, v := range m {
		if v == 0 {
			return int32(i)
		}
	}
	return int32(len(m))
}

// mask applies the rule to m: the whole vectors here, the rest narrower.
func (k *kernels) mask(rule ops.MaskRule, m []int32) int32 {
	if !k.simd() {
		return maskGo(rule, m)
	}
	w := k.whole(len(m))
	if rule == ops.MaskCountOnes {
		return k.masks.countOnes(m[:w]) + k.narrower.mask(rule, m[w:])
	}
	if i := k.masks.firstZero(m[:w]); i < w {
		return int32(i)
	}
	return int32(w) + k.narrower.mask(rule, m[w:])
}

// maskIndex fills mask_index[b] by the rule; zeros when there is no mask (spec §A.4).
func maskIndex(k *kernels, dst, mask []int32, B, S int, rule ops.MaskRule) {
	for b := 0; b < B; b++ {
		if mask == nil {
			dst[b] = 0
			continue
		}
		dst[b] = k.mask(rule, mask[b*S:b*S+S])
	}
}
