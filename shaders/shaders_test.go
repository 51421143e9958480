package shaders

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// compiler, when set (by compile_cgo_test.go in cgo builds), opens a Dawn device and returns a
// function that builds a compute pipeline from WGSL, so a bad template fails here.
var compiler func() (compile func(key, wgsl string) error, done func(), err error)

// SetTestCompiler installs compiler; test-only (the external test package can import dawn,
// which imports this package).
func SetTestCompiler(f func() (func(key, wgsl string) error, func(), error)) { compiler = f }

// embedParams lists every flag combination of the embed kernel, under a few row shapes.
func embedParams() []Embed {
	type shape struct{ w, private int }
	var out []Embed
	for _, dt := range []ops.DType{ops.F32, ops.F16} {
		for seg := 0; seg < 3; seg++ { // none, table only, table + ids
			for _, pos := range []bool{false, true} {
				for mi := 0; mi < 3; mi++ { // none, first zero, count ones
					for _, sum := range []bool{false, true} {
						for _, odd := range []bool{false, true} {
							for _, sh := range []shape{{64, 2}, {1, 1}, {256, 0}} {
								p := Embed{
									W: sh.w, Private: sh.private, DType: dt,
									Segment: seg > 0, SegIDs: seg > 1, PosIDs: pos,
									MaskIndex: mi > 0, CountOnes: mi == 2, Sum: sum, OddH: odd,
								}
								out = append(out, p)
								if p.Vec = true; !odd && sh.w >= VecLanes {
									out = append(out, p) // the vector kernel (H a multiple of 4)
									if sh.w == 256 {
										p.W, p.Private = 1024, 8 // long rows: W up to plan.MaxVecW
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
	for _, p := range out {
		if p.Vec && p.DType == ops.F16 {
			p.Fast16 = true // the builtin conversions (a device that rounds them exactly)
			out = append(out, p)
		}
		if p.SplitInts = true; p.W == 64 && p.StorageBuffers() <= 8 {
			out = append(out, p) // device-resident int32 inputs bound where they are, within WebGPU's default limit
		}
	}
	return out
}

// dtypeRows are the dtype combinations of SPEC §B.2: x1, x2, gamma(=beta), bias(=OutT).
var dtypeRows = ops.AddDTypeRows

func addlnParams() []AddLN {
	type shape struct{ w, private int }
	var out []AddLN
	for _, r := range dtypeRows {
		for bias := 0; bias < 3; bias++ { // none, broadcast, full
			for _, wx := range []bool{false, true} {
				for _, odd := range []bool{false, true} {
					for _, sh := range []shape{{64, 2}, {1, 1}, {256, 0}} {
						p := AddLN{W: sh.w, Private: sh.private, X1: r[0], X2: r[1], Gamma: r[2],
							Out: r[3], BiasFull: bias == 2, WriteX: wx, OddD: odd}
						if bias > 0 {
							p.Bias = r[3]
						}
						out = append(out, p)
						if p.Vec = true; !odd && sh.w >= VecLanes {
							out = append(out, p) // the vector kernel (D a multiple of 4)
							if sh.w == 256 {
								p.W, p.Private = 1024, 8 // long rows: W up to plan.MaxVecW
								out = append(out, p)
							}
						}
					}
				}
			}
		}
	}
	for _, p := range out {
		if p.Vec && (p.X1 == ops.F16 || p.X2 == ops.F16 || p.Gamma == ops.F16 || p.Out == ops.F16) {
			p.Fast16 = true // the builtin conversions (a device that rounds them exactly)
			out = append(out, p)
		}
	}
	return out
}

func TestRenderAll(t *testing.T) {
	var compile func(key, wgsl string) error
	if compiler != nil {
		c, done, err := compiler()
		switch {
		case err == nil:
			compile = c
			defer done()
		case os.Getenv("FUSEDNORM_REQUIRE_DAWN") == "1":
			t.Fatalf("Dawn required (FUSEDNORM_REQUIRE_DAWN=1) but unavailable: %v", err)
		default:
			t.Logf("rendering only, Dawn unavailable: %v", err)
		}
	} else if os.Getenv("FUSEDNORM_REQUIRE_DAWN") == "1" {
		t.Fatal("Dawn required (FUSEDNORM_REQUIRE_DAWN=1) but this build has no cgo")
	}
	check := func(key, src string, err error, wantCompile bool) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(src, "<no value>") || !strings.Contains(src, "fn "+Entry+"(") {
			t.Fatalf("%s: bad render:\n%s", key, src)
		}
		if compile != nil && wantCompile {
			if err := compile(key, src); err != nil {
				t.Fatalf("%s: %v\n%s", key, err, numbered(src))
			}
		}
	}
	// Compile every flag combination at one row shape (the WGSL differs by flags; the other
	// shapes only change constants), render all.
	for _, p := range embedParams() {
		src, err := RenderEmbed(p)
		check(p.Key(), src, err, p.W == 64 || (p.Segment && p.SegIDs && p.Sum && p.MaskIndex))
	}
	for _, p := range addlnParams() {
		src, err := RenderAddLN(p)
		check(p.Key(), src, err, p.W == 64 || (p.WriteX && p.Bias != ops.Invalid))
	}
	for _, fast16 := range []bool{false, true} {
		src, err := RenderProbe(fast16)
		check(fmt.Sprintf("probe(fast16=%v)", fast16), src, err, true)
	}
}

func TestRenderCached(t *testing.T) {
	p := Embed{W: 256, Private: 3, DType: ops.F16, OddH: true, Sum: true}
	a, err := RenderEmbed(p)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := RenderEmbed(p)
	if a != b {
		t.Fatal("second render differs")
	}
	q := p
	q.Sum = false
	c, _ := RenderEmbed(q)
	if c == a || p.Key() == q.Key() {
		t.Fatal("different parameters rendered the same kernel")
	}
}

func TestRenderRejects(t *testing.T) {
	bad := []Embed{
		{W: 3, DType: ops.F32},
		{W: 64, Private: MaxPrivate + 1, DType: ops.F32},
		{W: 64, DType: ops.BF16},
		{W: 64, DType: ops.F32, SegIDs: true},
	}
	for _, p := range bad {
		if _, err := RenderEmbed(p); err == nil {
			t.Errorf("%s: rendered", p.Key())
		}
	}
	if _, err := RenderAddLN(AddLN{W: 64, X1: ops.I32, X2: ops.F32, Gamma: ops.F32, Out: ops.F32}); err == nil {
		t.Error("int32 x1 rendered")
	}
}

func TestPrivateFor(t *testing.T) {
	for _, c := range []struct{ h, w, want int }{{1, 1, 1}, {3, 4, 1}, {768, 256, 3}, {4096, 256, 16}, {4097, 256, 0}} {
		if got := PrivateFor(c.h, c.w); got != c.want {
			t.Errorf("PrivateFor(%d, %d) = %d, want %d", c.h, c.w, got, c.want)
		}
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
