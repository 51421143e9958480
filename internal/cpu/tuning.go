package cpu

// tuning is how a Backend meets the memory system: sizes and distances that change where
// data is fetched from and how it is stored, never a value (every tuning gives the same
// bits). New takes defaultTuning(); the tests and BenchmarkStreamAB build backends with
// other tunings (newTuned) to reach every path and to compare settings.
type tuning struct {
	// bigBytes is the size from which data counts as past the caches (well past a core's
	// L2): f32 outputs that large are stored non-temporally, which saves the read of every
	// written line, and streamed or gathered inputs that large are prefetched.
	bigBytes int
	// prefetchAhead is how many rows (tokens) ahead of the one being computed the ops
	// prefetch their streamed inputs: EmbedLayerNorm's gathered word rows, AddLayerNorm's
	// x1, x2 and full bias (0: none).
	prefetchAhead int
	// prefetchSteps is how many pieces a row's prefetch is cut into, one after each pass
	// over the current row: issued at once, a row's lines would fill the core's miss
	// buffers and stall the work they should overlap.
	prefetchSteps int
	// hwStreamRow is the input row size (bytes) from which AddLayerNorm leaves its rows,
	// which follow each other in memory, to the hardware prefetchers, and reads them in
	// address order; shorter rows are prefetched a row ahead, and take the fused first pass.
	hwStreamRow int
	// hwGatherRow is hwStreamRow for EmbedLayerNorm's gathered word rows, which start at
	// random addresses, so the hardware prefetchers pay only on longer rows.
	hwGatherRow int
	// rowLead is how many bytes of the next row's inputs AddLayerNorm's streamed rows and
	// EmbedLayerNorm's gathered rows of at least hwGatherRow prefetch a row ahead (0: none):
	// the plan's first shift x0 is the row's first element, read before its first pass, which
	// would otherwise wait on a DRAM miss with nothing else in flight.
	rowLead int
	// wideBytes is the most that 16-bit gamma and beta may take widened to float32 for the
	// affine step to read them so (widened once per prepared EmbedLayerNorm, per
	// AddLayerNorm call), converting one vector instead of three; longer rows keep them
	// 16-bit, where they take half the L1 beside x.
	wideBytes int
	// sumPiece is how many elements of a row the 16-bit first passes work on at a time,
	// rounded up to a multiple of the plan width (sumPieceOf) so that pieces add whole
	// chunks onto the partials, in the plan's order. 4096 takes rows up to 4096 whole: the
	// staged row (16 KiB of f32) and its two 8 KiB inputs stay in a 48 KiB L1, and the
	// pass ends in the plan's tree in one kernel. On the H200 machine's Xeon, against 1024
	// (one chunk a piece at W 1024), 16-bit AddLayerNorm (16384,4096) took 0.92x the time at
	// one thread and 0.90x at 16, EmbedLayerNorm (256,512,4096) 0.96x and 0.90x.
	sumPiece int
	// pageChunks is the distance (bytes of one 16-bit input) between a partial's elements
	// from which AddLayerNorm's streamed 16-bit rows take the first pass whole, without
	// the pieces' prefetch: register blocks of partials go down every chunk, each chunk a
	// page or more from the next, so each is a stream in a page of its own, which the
	// hardware prefetchers follow, and no partial leaves the registers between chunks
	// (wholeRow).
	pageChunks int
	// hugeBytes is the word table size from which PrepareEmbed moves the table onto huge
	// pages: twice the reach of a core's second-level TLB over 4 KiB pages.
	hugeBytes int
}

// defaultTuning is the tuning of New's backends, chosen with BenchmarkStreamAB (which times
// other tunings paired with it) on AVX-512 and AVX2 machines.
func defaultTuning() tuning {
	return tuning{
		bigBytes:      4 << 20,
		prefetchAhead: 1,
		prefetchSteps: 3,
		hwStreamRow:   4096,
		hwGatherRow:   8192,
		rowLead:       256,
		wideBytes:     8 << 10,
		sumPiece:      4096,
		pageChunks:    4096,
		hugeBytes:     16 << 20,
	}
}

// prefetchPiece is the piece of a row prefetched per step (bytes, a whole number of 64-byte
// lines) for rows of up to rowBytes bytes: computed once per call, not per row.
func (t *tuning) prefetchPiece(rowBytes int) int {
	return max((rowBytes/max(1, t.prefetchSteps)+63)&^63, 64)
}

// sumPieceOf is the piece for plan width w: sumPiece rounded up to a multiple of w, so every
// piece adds whole chunks onto the partials (all of them: the first piece sets them, the
// later ones add on).
func (t *tuning) sumPieceOf(w int) int {
	return roundUp(t.sumPiece, w)
}

// wholeRow reports whether a streamed 16-bit row of d elements of size bytes under plan
// width w takes its first pass whole (pageChunks): its chunks at least pageChunks apart,
// and at most four of them (W 2048 and D ≤ 8192 in plan v2), what was measured.
func (t *tuning) wholeRow(w, d, size int) bool {
	return w*size >= t.pageChunks && d <= 4*w
}
