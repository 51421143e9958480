package cpu

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// countWork counts how often each row is computed; depth > 0 makes every chunk run a
// whole nested forRows of its own, from whichever goroutine (a worker or a caller) runs it.
type countWork struct {
	t       *testing.T
	h, w    int
	threads int
	depth   int
	hits    []atomic.Int32
	wg      sync.WaitGroup
}

func newCountWork(t *testing.T, rows, h, w, threads, depth int) *countWork {
	return &countWork{t: t, h: h, w: w, threads: threads, depth: depth, hits: make([]atomic.Int32, rows)}
}

func (c *countWork) run() {
	forRows(len(c.hits), c.h, c.w, c.threads, c, &c.wg)
}

func (c *countWork) rows(lo, hi int, sc *scratch) {
	if len(sc.x) != c.h || len(sc.y) != c.h || len(sc.t) != c.h || len(sc.part) != c.w {
		c.t.Errorf("scratch sized %d/%d/%d/%d, want %d and %d", len(sc.x), len(sc.y), len(sc.t), len(sc.part), c.h, c.w)
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
