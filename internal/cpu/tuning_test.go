package cpu

import "testing"

// TestNonTemporalLevels reruns the whole-op comparisons on backends tuned to take the
// non-temporal stores, the streamed first passes and deeper prefetching at every size.
func TestNonTemporalLevels(t *testing.T) {
	tune := defaultTuning()
	tune.bigBytes, tune.prefetchAhead, tune.hwStreamRow, tune.hwGatherRow = 0, 3, 1<<62, 1<<62
	levels := func(name string, tune tuning) {
		t.Run("AddLayerNorm"+name, func(t *testing.T) { addLayerNormLevels(t, tune, shortWidths, values) })
		t.Run("EmbedLayerNorm"+name, func(t *testing.T) { embedLayerNormLevels(t, tune, shortWidths, values) })
	}
	levels("", tune)
	// Every row left to the hardware prefetchers (16-bit pieces prefetched just before use).
	hardware := tune
	hardware.hwStreamRow, hardware.hwGatherRow = 1, 1
	levels("HardwareStream", hardware)
	// Every streamed 16-bit row of up to four chunks summed whole (tuning.pageChunks).
	whole := hardware
	whole.pageChunks = 1
	levels("WholeRows", whole)
	// 16-bit gamma and beta widened at every width, and at none.
	tune.wideBytes = 1 << 62
	levels("WideWeights", tune)
	tune.wideBytes = 0
	levels("NarrowWeights", tune)
	// The 16-bit first passes in pieces of one W.
	tune.sumPiece = 1
	levels("Pieces", tune)
}
