package cpu

import (
	"unsafe"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// Huge pages for the gathered tables. EmbedLayerNorm reads each token's word row from a
// random place in a table of tens or hundreds of MiB: on 4 KiB pages nearly every row
// misses the TLB (a core's second-level TLB covers 8 MiB of them) and waits for a page
// walk on top of the row's own memory latency. On 2 MiB pages the table fits the TLB
// (BenchmarkStreamAB CFGS=probe,now,smallpages compares the two).

// The collapse of a large table takes the kernel up to seconds, so PrepareEmbed does not
// wait for it: a goroutine moves the table a huge page at a time, while the op may already
// run (the kernel keeps the values readable throughout), and the op's and the Backend's
// Close stop it between two pieces and wait for it.

// hugePage is the size of a transparent huge page over 4 KiB pages (x86-64, and arm64
// with 4 KiB pages; on other page sizes the kernel declines the misaligned ranges).
const hugePage = 2 << 20

// hugeInterior is the byte range [lo, hi) of b made of whole huge pages.
func hugeInterior(b []byte) (lo, hi int) {
	if len(b) == 0 {
		return 0, 0
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	lo = int((hugePage - p%hugePage) % hugePage)
	end := p + uintptr(len(b))
	hi = len(b) - int(end%hugePage)
	return lo, max(lo, hi)
}

// collapsePiece is how much of a table one madvise moves onto huge pages: one huge page, so
// that a Close waiting for a collapse waits for one such call at most (milliseconds).
const collapsePiece = hugePage

// collapse is a word table's move onto huge pages, on a goroutine of its own.
type collapse struct {
	done chan struct{} // closed when the collapse has ended
	err  error         // the kernel's answer (nil: all of it moved); read after done
}

// collapse starts moving the whole huge pages inside b onto huge pages, collapsePiece at a
// time, on a goroutine that holds b until it ends: when every piece is done, at the first
// piece the kernel declines, or once quit or the set's stop channel is closed. The set's
// close waits for it; nil when the set is already stopped.
func (p *workers) collapse(b []byte, quit <-chan struct{}) *collapse {
	c := &collapse{done: make(chan struct{})}
	if !p.spawn(func() {
		defer close(c.done)
		lo, hi := hugeInterior(b)
		for ; lo < hi && !stopped(quit, p.stop); lo += collapsePiece {
			if c.err = collapseHuge(b[lo:min(lo+collapsePiece, hi)]); c.err != nil {
				return
			}
		}
		if lo < hi {
			c.err = ops.ErrClosed
		}
	}) {
		return nil
	}
	return c
}
