// Package twin is the native twin of the Go tiny calls, run inside the benchmark's process:
// the C of cgo/bench/tiny_twin.c, which records what one tiny device-resident call of the Go
// path records (EmbedLayerNorm f32 (1,1,768), AddLayerNorm f32 (1,768)) through the same C
// layer, on a device of its own. fusednorm-bench -tiny alternates it with the Go calls in
// one process, so both twins share the process's placement on the machine (separate
// processes each landed in one of two speeds, which swamped a difference of a few percent).
// cgo/bench/tiny_bench.c runs the same C as a program.
//
// Its C calls the C layer that internal/dawnrt compiles in, so a program that imports it must
// link internal/dawnrt (the root package does, in a cgo build). It lives with the benchmark:
// no package of the library imports it.
package twin

//go:generate go run ../../../../internal/cmd/cgohash

import "time"

// Op is one of the two tiny calls.
type Op int

const (
	Embed Op = iota // EmbedLayerNorm f32 (1,1,768)
	Add             // AddLayerNorm f32 (1,768)
)

// Samples are one run's times: per call one by one (Each = Call + Wait), per call back to back
// with a submit each and sharing submits, and each back-to-back run's whole time with its
// final wait.
type Samples struct {
	Each, Call, Wait, BackToBack, Shared []time.Duration
	BackToBackTotal, SharedTotal         time.Duration
}
