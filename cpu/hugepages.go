package cpu

import "unsafe"

// Huge pages for the gathered tables. EmbedLayerNorm reads each token's word row from a
// random place in a table of tens or hundreds of MiB: on 4 KiB pages nearly every row
// misses the TLB (a core's second-level TLB covers 8 MiB of them) and waits for a page
// walk on top of the row's own memory latency. On 2 MiB pages the table fits the TLB.
// Paired against a table left on small pages (BenchmarkStreamAB CFGS=probe,now,smallpages),
// one thread, on every bench shape from (8,512,768) to (16,512,4096): 2-9% less time on
// the Xeon, 6-22% on the EPYC (docs/measurements/huge-pages.txt).

// hugeBytes is the table size from which PrepareEmbed collapses the word table into huge
// pages (twice the TLB reach of small pages). A variable so tests can lower it.
var hugeBytes = 16 << 20

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
