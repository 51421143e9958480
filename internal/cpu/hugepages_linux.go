package cpu

import "syscall"

// madvCollapse is MADV_COLLAPSE (Linux 6.1): back a range with transparent huge pages now,
// contents kept, whatever the system's THP setting short of "never".
const madvCollapse = 25

// collapseHuge asks the kernel to back the whole 2 MiB pages inside b with huge pages. The
// values and addresses stay as they are; only the page tables change. It is a hint: an
// error (an older kernel, THP off, memory too fragmented) leaves b on its small pages.
func collapseHuge(b []byte) error {
	lo, hi := hugeInterior(b)
	if lo >= hi {
		return nil
	}
	return syscall.Madvise(b[lo:hi], madvCollapse)
}
