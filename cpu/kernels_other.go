//go:build !amd64 || noasm || purego

package cpu

// No SIMD kernels in this build: the pure-Go twins stay installed and Levels is ["go"].
