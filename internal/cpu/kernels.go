package cpu

import (
	"slices"
)

// kernels is one level: for each family of hot loops, the assembly kernels of one vector
// width, each of which handles the whole vectors of its slices. The families' methods on it
// are the dispatch, one per family file: they check lengths the way the Go twins do (so a
// short slice panics instead of being overrun), run the whole vectors here, hand what is
// left to narrower, and the go level (no lanes, no kernels) runs the twins. Every level
// gives the twins' bits. Each Backend holds the level it runs.
//
// One file family per kernel group: F.go holds the form struct, the Go twins and the
// dispatch, and beside it internal/cmd/asmgen generates the group's kernels, F_amd64.s,
// and their declarations, F_amd64.go (go generate ./cpu); vectables_amd64.go, generated
// too, holds each width's table of them.
//
//	sum.go       the plan's accumulations and halving tree (sumForm)
//	addsum.go    the elementwise adds and a row's first pass fused with its sum (addForm)
//	affine.go    the affine step, float32 or rounded to 16 bits (affineForm)
//	convert.go   widening and narrowing of 16-bit data (convForm)
//	embedsum.go  EmbedLayerNorm's staged binary16 sums (embedForm), the avx512fp16 ones too
//	mask.go      mask_index's rules (ops.MaskRule)
//	memory.go    non-temporal copy, prefetch and fence
type kernels struct {
	lanes    int      // float32 lanes of the width; 0 at the go level
	narrower *kernels // takes what this width leaves: the next narrower width, else the go level
	sums     sumKernels
	adds     addKernels
	affines  affineKernels
	convs    convKernels
	embeds   embedKernels
	masks    maskKernels
	mem      memKernels
}

// goKernels is the pure-Go level, present on every build: no kernels, every family's twins.
var goKernels kernels

// simd reports whether k has kernels (it is not the go level).
func (k *kernels) simd() bool { return k.lanes != 0 }

// whole is the length of the whole vectors of an n-element slice.
func (k *kernels) whole(n int) int { return n &^ (k.lanes - 1) }

// from is v[i:], or nil for a nil v (an operand the form leaves out).
func from[E any](v []E, i int) []E {
	if v == nil {
		return nil
	}
	return v[i:]
}

type namedLevel struct {
	name string
	k    *kernels
}

// levels are the kernel sets this processor can run, widest first; "go" is always last, and
// the first is the default of a Backend whose Options.Level is empty.
var levels = []namedLevel{{"go", &goKernels}}

// addLevel registers a SIMD level, from an init that has checked cpuid; a wider level is
// registered after the narrower ones it builds on.
func addLevel(name string, k *kernels) {
	levels = slices.Insert(levels, 0, namedLevel{name, k})
}

// levelNames names the levels, widest first: "avx512fp16", "avx512", "avx2", "go" on a
// machine with AVX512-FP16 (and AVX-512 F/BW/VL); "avx512", "avx2", "go" on one with
// AVX-512 F/BW/VL; "avx2", "go" on an AVX2+FMA+F16C machine; "go" alone in noasm and
// purego builds and on other architectures.
func levelNames() []string {
	names := make([]string, len(levels))
	for i, l := range levels {
		names[i] = l.name
	}
	return names
}

// kernelsOf returns the named level's kernels, or nil when this processor or build lacks it.
func kernelsOf(name string) *kernels {
	i := slices.IndexFunc(levels, func(l namedLevel) bool { return l.name == name })
	if i < 0 {
		return nil
	}
	return levels[i].k
}

// Levels names the kernel levels this processor and build run, widest first and "go" last:
// the values Options.Level accepts here.
func Levels() []string { return levelNames() }

// CopyNT copies src into dst (len(dst) elements) with the non-temporal stores of the widest
// level, then fences: the store side of fusednorm-bench's bandwidth probe, which streams the
// way the ops stream their outputs. Without SIMD kernels it is copy.
func CopyNT(dst, src []float32) {
	k := levels[0].k
	k.copyNT(dst, src)
	k.fence()
}
