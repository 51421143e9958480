package cpu

import (
	"math"

	"github.com/fusednorm/fusednorm/internal/half"
)

func widenF16Go(dst []float32, src []uint16) {
	t := half.F16Table()
	src = src[:len(dst)]
	for i, h := range src {
		dst[i] = t[h]
	}
}

func widenBF16Go(dst []float32, src []uint16) {
	src = src[:len(dst)]
	for i, b := range src {
		dst[i] = math.Float32frombits(uint32(b) << 16)
	}
}

func narrowF16Go(dst []uint16, src []float32) {
	src = src[:len(dst)]
	for i, f := range src {
		dst[i] = half.F32ToF16(f)
	}
}

func narrowBF16Go(dst []uint16, src []float32) {
	src = src[:len(dst)]
	for i, f := range src {
		dst[i] = half.F32ToBF16(f)
	}
}

// narrow16Go is narrowBF16Go (bf) or narrowF16Go.
func narrow16Go(bf bool, dst []uint16, src []float32) {
	if bf {
		narrowBF16Go(dst, src)
		return
	}
	narrowF16Go(dst, src)
}
