//go:build !amd64 || noasm || purego

package cpu

// No SIMD kernels in this build: the pure-Go twins are the only level (levels holds "go" alone).
