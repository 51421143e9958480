package fusednorm

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// memoryLimits are the machine's physical memory, the process's address-space limit and
// its cgroup v2 memory limit, in bytes; 0 where unknown or unlimited.
func memoryLimits() []uint64 {
	var ls []uint64
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) == nil {
		ls = append(ls, uint64(si.Totalram)*uint64(si.Unit))
	}
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_AS, &rl) == nil && rl.Cur != ^uint64(0) {
		ls = append(ls, rl.Cur)
	}
	if b, err := os.ReadFile("/sys/fs/cgroup/memory.max"); err == nil {
		if v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil {
			ls = append(ls, v)
		}
	}
	return ls
}
