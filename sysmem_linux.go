package fusednorm

import (
	"sync"
	"syscall"
)

// sysMemory is the most memory this process can have: RAM plus swap, lowered by the
// address-space and data limits (RLIMIT_AS, RLIMIT_DATA); 0 when unknown.
var sysMemory = sync.OnceValue(func() int64 {
	var limit uint64
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) == nil {
		limit = (uint64(si.Totalram) + uint64(si.Totalswap)) * uint64(si.Unit)
	}
	for _, res := range []int{syscall.RLIMIT_AS, syscall.RLIMIT_DATA} {
		var r syscall.Rlimit
		if syscall.Getrlimit(res, &r) == nil && r.Cur != ^uint64(0) && (limit == 0 || r.Cur < limit) {
			limit = uint64(r.Cur)
		}
	}
	return int64(min(limit, 1<<62))
})
