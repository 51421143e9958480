package cpu

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// TestNonTemporalLevels reruns the whole-op comparisons on backends tuned to take the
// non-temporal stores, the streamed first passes and deeper prefetching at every size.
func TestNonTemporalLevels(t *testing.T) {
	tune := defaultTuning()
	tune.bigBytes, tune.gatherBytes, tune.prefetchAhead, tune.hwStreamRow, tune.hwGatherRow, tune.shortRow = 0, 0, 3, 1<<62, 1<<62, 0
	levels := func(name string, tune tuning) {
		t.Run("AddLayerNorm"+name, func(t *testing.T) { addLayerNormLevels(t, tune, shortWidths, values) })
		t.Run("EmbedLayerNorm"+name, func(t *testing.T) { embedLayerNormLevels(t, tune, shortWidths, 2, 6, values) })
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

// countWork counts how often each row is computed; depth > 0 makes every chunk run a
// whole nested forRows of its own, from whichever goroutine (a worker or a caller) runs it.
type countWork struct {
	t       *testing.T
	h, w    int
	threads int
	depth   int
	hits    []atomic.Int32
	join    rowJoin
}

// testWorkers is the worker set of the forRows tests.
var testWorkers = newWorkers()

func newCountWork(t *testing.T, rows, h, w, threads, depth int) *countWork {
	return &countWork{t: t, h: h, w: w, threads: threads, depth: depth, hits: make([]atomic.Int32, rows)}
}

func (c *countWork) run() {
	if !testWorkers.forRows(context.Background(), len(c.hits), c.h, c.w, c.threads, c, &c.join) {
		c.t.Error("forRows cut a call that was not cancelled")
	}
}

func (c *countWork) rows(lo, hi int, sc *scratch) {
	if len(sc.x) != c.h || len(sc.y) != c.h || len(sc.t) != c.h || len(sc.part) != 4*c.w {
		c.t.Errorf("scratch sized %d/%d/%d/%d, want %d and 4·%d", len(sc.x), len(sc.y), len(sc.t), len(sc.part), c.h, c.w)
	}
	for r := lo; r < hi; r++ {
		c.hits[r].Add(1)
	}
	if c.depth > 0 {
		inner := newCountWork(c.t, len(c.hits), c.h, c.w, c.threads, c.depth-1)
		inner.run()
		inner.check()
	}
}

func (c *countWork) check() {
	for r := range c.hits {
		if n := c.hits[r].Load(); n != 1 {
			c.t.Errorf("row %d computed %d times", r, n)
			return
		}
	}
}

// TestForRows checks that every row is computed once, with scratch of the right size, for
// calls from many goroutines at once, with more threads than GOMAXPROCS, and for calls
// made from inside a chunk (which must not deadlock however busy the workers are).
func TestForRows(t *testing.T) {
	const h = minElemsPerWorker / 4 // 4 rows per worker
	for _, threads := range []int{0, 1, 2, 3, 16} {
		for _, rows := range []int{1, 3, 7, 8, 64, 257} {
			for _, depth := range []int{0, 2} {
				t.Run(fmt.Sprintf("threads=%d/rows=%d/depth=%d", threads, rows, depth), func(t *testing.T) {
					var wg sync.WaitGroup
					for range 8 {
						wg.Go(func() {
							for range 4 {
								c := newCountWork(t, rows, h, 4, threads, depth)
								c.run()
								c.check()
							}
						})
					}
					wg.Wait()
				})
			}
		}
	}
}

// cancelWork calls cancel as soon as a step of rows starts, and counts the rows computed.
type cancelWork struct {
	cancel   func()
	once     sync.Once
	computed atomic.Int64
	join     rowJoin
}

func (c *cancelWork) rows(lo, hi int, sc *scratch) {
	c.once.Do(c.cancel)
	c.computed.Add(int64(hi - lo))
}

// TestForRowsCancel cancels a call once its first step of rows has started, through the
// call's context and through the closing of the worker set: each goroutine of the call may
// finish the step it is in and must compute no further one.
func TestForRowsCancel(t *testing.T) {
	const h = 256
	step := rowsPerStep(h)
	for _, threads := range []int{1, 2, 5} {
		for _, how := range []string{"ctx", "close"} {
			t.Run(fmt.Sprintf("threads=%d/%s", threads, how), func(t *testing.T) {
				rows := 40 * threads * step
				p := newWorkers()
				defer p.close()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				c := &cancelWork{cancel: cancel}
				if how == "close" {
					c.cancel = p.shut
				}
				if p.forRows(ctx, rows, h, 4, threads, c, &c.join) {
					t.Fatal("forRows reported a cancelled call whole")
				}
				if n, limit := c.computed.Load(), int64(threads*step); n > limit {
					t.Errorf("%d of %d rows computed after the cancel in the first step, want at most %d", n, rows, limit)
				}
			})
		}
	}
}
