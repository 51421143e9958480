//go:build !linux

package fusednorm

// memoryLimits: without a portable way to read the machine's memory, 64 GiB stands in for
// it; the Go memory limit (GOMEMLIMIT) can lower the bound further.
func memoryLimits() []uint64 { return []uint64{64 << 30} }
