// Package shadertest holds the parameter sets that cover every kernel template of package
// shaders, and the check that renders (and, given a compiler, compiles) them all. It is
// shared by the render test in shaders and the compile test in dawn: dawn imports shaders, so
// only dawn's tests can open a device to compile on.
package shadertest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/plan"
	"github.com/fusednorm/fusednorm/shaders"
)

// EmbedParams lists every flag combination of the embed kernel, under a few row shapes.
func EmbedParams() []shaders.Embed {
	type shape struct{ w, private int }
	var out []shaders.Embed
	for _, dt := range []ops.DType{ops.F32, ops.F16} {
		for seg := 0; seg < 3; seg++ { // none, table only, table + ids
			for _, pos := range []bool{false, true} {
				for mi := 0; mi < 3; mi++ { // none, first zero, count ones
					for _, sum := range []bool{false, true} {
						for _, odd := range []bool{false, true} {
							for _, sh := range []shape{{64, 2}, {1, 1}, {256, 0}} {
								p := shaders.Embed{
									W: sh.w, Private: sh.private, DType: dt,
									Segment: seg > 0, SegIDs: seg > 1, PosIDs: pos,
									MaskIndex: mi > 0, CountOnes: mi == 2, Sum: sum, OddH: odd,
								}
								out = append(out, p)
								if odd && sh.w >= 64 && dt == ops.F16 {
									q := p // the pair kernel: two odd token rows a workgroup, whole words
									q.Pair, q.Rows, q.Private = true, 2, max(2*sh.private, 1)
									out = append(out, q)
								}
								if p.Vec = true; !odd && sh.w >= shaders.VecLanes {
									out = append(out, p) // the vector kernel (H a multiple of 4)
									if sh.w == 256 {
										p.W, p.Private = 1024, 8 // long rows: four lanes up to W 1024
										out = append(out, p)
									}
									if p.W, p.Private = sh.w, sh.private; dt == ops.F16 && sh.w >= plan.WideLanes {
										p.Wide = true // eight lanes: 16-bit rows a multiple of 8 long
										out = append(out, p)
										if sh.w == 256 {
											p.W, p.Private = plan.MaxVecW, 4 // long rows: eight lanes up to plan.MaxVecW
											out = append(out, p)
										}
									}
								}
							}
						}
					}
				}
			}
		}
	}
	for _, p := range out {
		if (p.Vec || p.Pair) && p.DType == ops.F16 {
			p.Fast16 = true // the builtin conversions (a device that rounds them exactly)
			out = append(out, p)
		}
		if p.SplitInts = true; p.W == 64 && p.StorageBuffers() <= 8 {
			out = append(out, p) // device-resident int32 inputs bound where they are, within WebGPU's default limit
		}
	}
	return out
}

// AddLNParams lists every flag combination of the add kernel, for each dtype row of spec §B.2
// (x1, x2, gamma and beta, bias and output), under a few row shapes.
func AddLNParams() []shaders.AddLN {
	type shape struct{ w, private int }
	var out []shaders.AddLN
	for _, r := range ops.AddDTypeRows {
		for bias := 0; bias < 3; bias++ { // none, broadcast, full
			for _, wx := range []bool{false, true} {
				for _, odd := range []bool{false, true} {
					for _, sh := range []shape{{64, 2}, {1, 1}, {256, 0}} {
						p := shaders.AddLN{W: sh.w, Private: sh.private, X1: r[0], X2: r[1], Gamma: r[2],
							Out: r[3], BiasFull: bias == 2, WriteX: wx, OddD: odd}
						if bias > 0 {
							p.Bias = r[3]
						}
						out = append(out, p)
						if odd && sh.w >= 64 && r[0].Is16() && r[1].Is16() && r[3].Is16() {
							q := p // the pair kernel: two odd rows a workgroup, whole words
							q.Pair, q.Rows, q.Private = true, 2, max(2*sh.private, 1)
							out = append(out, q)
						}
						if p.Vec = true; !odd && sh.w >= shaders.VecLanes {
							out = append(out, p) // the vector kernel (D a multiple of 4)
							if sh.w == 256 {
								p.W, p.Private = 1024, 8 // long rows: four lanes up to W 1024
								out = append(out, p)
							}
							if p.W, p.Private = sh.w, sh.private; r[3].Is16() && sh.w >= plan.WideLanes {
								p.Wide = true // eight lanes: 16-bit outputs, D a multiple of 8
								out = append(out, p)
								if sh.w == 256 {
									p.W, p.Private = plan.MaxVecW, 4 // long rows: eight lanes up to plan.MaxVecW
									out = append(out, p)
								}
							}
						}
					}
				}
			}
		}
	}
	for _, p := range out {
		if (p.Vec || p.Pair) && p.HasF16() {
			p.Fast16 = true // the builtin conversions (a device that rounds them exactly)
			out = append(out, p)
		}
	}
	return out
}

// RenderAll renders every template for every parameter set and checks that each render is
// complete; with compile non-nil it also compiles every flag combination at one row shape
// (the WGSL differs by flags; the other shapes only change constants), so a bad template
// fails in a test, not in a user's process.
func RenderAll(t testing.TB, compile func(key, wgsl string) error) {
	t.Helper()
	check := func(key, src string, err error, wantCompile bool) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(src, "<no value>") || !strings.Contains(src, "fn "+shaders.Entry+"(") {
			t.Fatalf("%s: bad render:\n%s", key, src)
		}
		if compile != nil && wantCompile {
			if err := compile(key, src); err != nil {
				t.Fatalf("%s: %v\n%s", key, err, numbered(src))
			}
		}
	}
	for _, p := range EmbedParams() {
		src, err := shaders.RenderEmbed(p)
		check(p.Key(), src, err, p.W == 64 || (p.Segment && p.SegIDs && p.Sum && p.MaskIndex))
	}
	for _, p := range AddLNParams() {
		src, err := shaders.RenderAddLN(p)
		check(p.Key(), src, err, p.W == 64 || (p.WriteX && p.Bias != ops.Invalid))
	}
	for _, fast16 := range []bool{false, true} {
		src, err := shaders.RenderProbe(fast16)
		check(fmt.Sprintf("probe(fast16=%v)", fast16), src, err, true)
	}
}

// numbered prefixes line numbers, so a compiler message can be matched to the source.
func numbered(src string) string {
	var b strings.Builder
	for i, l := range strings.Split(src, "\n") {
		fmt.Fprintf(&b, "%4d: %s\n", i+1, l)
	}
	return b.String()
}
