//go:build !linux

package fusednorm

// sysMemory is unknown here: the Go runtime's limit and the address space bound outputs.
func sysMemory() int64 { return 0 }
