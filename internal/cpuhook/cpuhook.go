// Package cpuhook lends the module's own tests and tools what they need of the CPU backend
// that is no part of any API: the kernel levels the machine runs, which the conformance
// suite tests one by one, and the non-temporal copy behind fusednorm-bench's bandwidth
// probe. Package cpu sets both when it is initialized (as grpc-go's internal package is
// filled in by grpc), so they are set in every program that links cpu, which the root
// package imports; nothing sets them later.
package cpuhook

// Levels names the CPU kernel levels this processor and build run, widest first and "go"
// last: the values cpu.Options.Level and fusednorm.WithCPULevel accept here.
var Levels func() []string

// CopyNT copies src into dst (len(dst) elements) with the non-temporal stores of the widest
// kernel level, then fences: the store side of a bandwidth probe that streams the way the
// ops stream their outputs. Without SIMD kernels it is copy.
var CopyNT func(dst, src []float32)
