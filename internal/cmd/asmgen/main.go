// Command asmgen writes cpu/kernels_amd64.s: the AVX2+FMA+F16C kernels of the CPU backend.
//
// Run it through go generate in the cpu package (see cpu/kernels_amd64.go), or from the
// repository root:
//
//	go run -C internal/cmd/asmgen . -out ../../../cpu/kernels_amd64.s
//
// It lives in its own module so that the library does not depend on avo.
//
// Every kernel handles the multiple-of-8 prefix of its slices; the Go wrappers in
// cpu/kernels_amd64.go check lengths, finish the tails with the pure-Go twins and document
// the Go loop each kernel matches. Operand order follows the Go twins (x − mean, p + v, …),
// so even NaN payloads agree; no operation is fused unless its twin calls plan.FMA32.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/mmcloughlin/avo/attr"
	"github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/pass"
	"github.com/mmcloughlin/avo/printer"
	"github.com/mmcloughlin/avo/reg"
)

var c = build.NewContext()

func main() {
	// Own flag set: importing avo's build package registers its flags on the default one.
	fs := flag.NewFlagSet("asmgen", flag.ExitOnError)
	out := fs.String("out", "kernels_amd64.s", "assembly output file")
	fs.Parse(os.Args[1:])

	c.ConstraintExpr("amd64,!noasm,!purego")
	elementwise()
	conversions()
	reductions()
	sums()
	tree()
	embedF16()
	memory()

	f, err := c.Result()
	if err != nil {
		fail(err)
	}
	if err := pass.Compile.Execute(f); err != nil {
		fail(err)
	}
	// A fixed command line in the header, so regenerating into any path gives the same file.
	cfg := printer.Config{Argv: []string{"go", "generate", "./cpu"}, Pkg: "cpu"}
	b, err := printer.NewGoAsm(cfg).Print(f)
	if err != nil {
		fail(err)
	}
	if err := os.WriteFile(*out, b, 0o644); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "asmgen:", err)
	os.Exit(1)
}

func text(name, sig string, doc ...string) {
	c.Function(name)
	c.Attributes(attr.NOSPLIT)
	c.SignatureExpr(sig)
	c.Doc(doc...)
}

func base(name string) reg.GPVirtual  { return c.Load(c.Param(name).Base(), c.GP64()).(reg.GPVirtual) }
func length(name string) reg.Register { return c.Load(c.Param(name).Len(), c.GP64()) }

// f32 and u16 address element i (+off) of a float32 or a uint16 slice.
func f32(p, i reg.Register, off int) Mem { return Mem{Base: p, Index: i, Scale: 4, Disp: 4 * off} }
func u16(p, i reg.Register, off int) Mem { return Mem{Base: p, Index: i, Scale: 2, Disp: 2 * off} }

// broadcast32 returns a YMM register with v in every 32-bit lane.
func broadcast32(v uint32) reg.VecVirtual {
	g := c.GP32()
	c.MOVL(U32(v), g)
	x := c.XMM()
	c.VMOVD(g, x)
	y := c.YMM()
	c.VPBROADCASTD(x, y)
	return y
}

// broadcastParam returns a YMM register with the float32 parameter in every lane.
func broadcastParam(name string) reg.VecVirtual {
	p, err := c.Param(name).Resolve()
	if err != nil {
		fail(err)
	}
	y := c.YMM()
	c.VBROADCASTSS(p.Addr, y) // VEX only: no SSE/AVX transition
	return y
}

// loop emits "for i := 0; i < n&^7; i += 8 { body(i, 0) }", unrolled `unroll` times while
// enough elements remain, then VZEROUPPER and RET. body(i, off) handles elements
// i+off … i+off+7.
func loop(name string, n reg.Register, unroll int, body func(i reg.Register, off int)) {
	i := c.GP64()
	end := c.GP64()
	c.XORQ(i, i)
	if unroll > 1 {
		c.MOVQ(n, end)
		c.ANDQ(I32(-8*unroll), end)
		c.CMPQ(i, end)
		c.JAE(LabelRef(name + "_single"))
		c.Label(name + "_unrolled")
		for u := 0; u < unroll; u++ {
			body(i, 8*u)
		}
		c.ADDQ(U32(8*unroll), i)
		c.CMPQ(i, end)
		c.JB(LabelRef(name + "_unrolled"))
		c.Label(name + "_single")
	}
	c.MOVQ(n, end)
	c.ANDQ(I32(-8), end)
	c.CMPQ(i, end)
	c.JAE(LabelRef(name + "_done"))
	c.Label(name + "_loop")
	body(i, 0)
	c.ADDQ(U32(8), i)
	c.CMPQ(i, end)
	c.JB(LabelRef(name + "_loop"))
	c.Label(name + "_done")
	c.VZEROUPPER()
	c.RET()
}

func elementwise() {
	text("avx2Add2", "func(s, a, b []float32)",
		"avx2Add2 writes s[i] = a[i] + b[i] for i < len(s)&^7.")
	{
		s, a, b := base("s"), base("a"), base("b")
		loop("add2", length("s"), 4, func(i reg.Register, off int) {
			v := c.YMM()
			c.VMOVUPS(f32(a, i, off), v)
			c.VADDPS(f32(b, i, off), v, v)
			c.VMOVUPS(v, f32(s, i, off))
		})
	}

	text("avx2Add3", "func(s, a, b, d []float32)",
		"avx2Add3 writes s[i] = (a[i] + b[i]) + d[i] for i < len(s)&^7.")
	{
		s, a, b, d := base("s"), base("a"), base("b"), base("d")
		loop("add3", length("s"), 4, func(i reg.Register, off int) {
			v := c.YMM()
			c.VMOVUPS(f32(a, i, off), v)
			c.VADDPS(f32(b, i, off), v, v)
			c.VADDPS(f32(d, i, off), v, v)
			c.VMOVUPS(v, f32(s, i, off))
		})
	}

	text("avx2Add3NT", "func(s, x, a, b, d []float32)",
		"avx2Add3NT writes s[i] = (a[i] + b[i]) + d[i] and the same value to x[i], with a",
		"non-temporal store, for i < len(s)&^7: x must be 32-byte aligned, and the caller runs",
		"avx2Fence before the values are shared.")
	{
		s, x, a, b, d := base("s"), base("x"), base("a"), base("b"), base("d")
		loop("add3NT", length("s"), 4, func(i reg.Register, off int) {
			v := c.YMM()
			c.VMOVUPS(f32(a, i, off), v)
			c.VADDPS(f32(b, i, off), v, v)
			c.VADDPS(f32(d, i, off), v, v)
			c.VMOVUPS(v, f32(s, i, off))
			c.VMOVNTPS(v, f32(x, i, off))
		})
	}

	text("avx2AddTo", "func(s, b []float32)",
		"avx2AddTo writes s[i] += b[i] for i < len(s)&^7.")
	{
		s, b := base("s"), base("b")
		loop("addTo", length("s"), 4, func(i reg.Register, off int) {
			v := c.YMM()
			c.VMOVUPS(f32(s, i, off), v)
			c.VADDPS(f32(b, i, off), v, v)
			c.VMOVUPS(v, f32(s, i, off))
		})
	}

	for _, variant := range []struct{ fused, nt bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		fused, nt := variant.fused, variant.nt
		name, what := "avx2Affine", "f32(n·gamma[i]) + beta[i] (unfused)"
		if fused {
			name, what = "avx2AffineFMA", "fma(n, gamma[i], beta[i])"
		}
		doc := []string{name + " writes y[i] = " + what + ", n = f32((x[i] − mean)·rstd), for i < len(y)&^7."}
		if nt {
			name += "NT"
			doc = []string{name + " is " + name[:len(name)-2] + " with non-temporal stores (VMOVNTPS): y must be",
				"32-byte aligned, and the caller runs avx2Fence before the values are shared."}
		}
		text(name, "func(y, x, gamma, beta []float32, mean, rstd float32)", doc...)
		y, x, g, b := base("y"), base("x"), base("gamma"), base("beta")
		mean, rstd := broadcastParam("mean"), broadcastParam("rstd")
		loop(name, length("y"), 4, func(i reg.Register, off int) {
			v := c.YMM()
			c.VMOVUPS(f32(x, i, off), v)
			c.VSUBPS(mean, v, v)
			c.VMULPS(rstd, v, v)
			if fused {
				gv := c.YMM()
				c.VMOVUPS(f32(g, i, off), gv)
				c.VFMADD213PS(f32(b, i, off), gv, v) // v = gamma·v + beta, one rounding
			} else {
				c.VMULPS(f32(g, i, off), v, v)
				c.VADDPS(f32(b, i, off), v, v)
			}
			if nt {
				c.VMOVNTPS(v, f32(y, i, off))
			} else {
				c.VMOVUPS(v, f32(y, i, off))
			}
		})
	}
}

func conversions() {
	text("avx2WidenF16", "func(dst []float32, src []uint16)",
		"avx2WidenF16 writes dst[i] = float32(binary16 src[i]) for i < len(dst)&^7.")
	{
		d, s := base("dst"), base("src")
		loop("widenF16", length("dst"), 4, func(i reg.Register, off int) {
			v := c.YMM()
			c.VCVTPH2PS(u16(s, i, off), v)
			c.VMOVUPS(v, f32(d, i, off))
		})
	}

	text("avx2WidenBF16", "func(dst []float32, src []uint16)",
		"avx2WidenBF16 writes dst[i] = float32frombits(src[i] << 16) for i < len(dst)&^7.")
	{
		d, s := base("dst"), base("src")
		loop("widenBF16", length("dst"), 4, func(i reg.Register, off int) {
			v := c.YMM()
			c.VPMOVZXWD(u16(s, i, off), v)
			c.VPSLLD(U8(16), v, v)
			c.VMOVDQU(v, f32(d, i, off))
		})
	}

	text("avx2NarrowF16", "func(dst []uint16, src []float32)",
		"avx2NarrowF16 writes dst[i] = binary16(src[i]), nearest-even, for i < len(dst)&^7.")
	{
		d, s := base("dst"), base("src")
		loop("narrowF16", length("dst"), 4, func(i reg.Register, off int) {
			v := c.YMM()
			c.VMOVUPS(f32(s, i, off), v)
			c.VCVTPS2PH(U8(0), v, u16(d, i, off))
		})
	}

	text("avx2NarrowBF16", "func(dst []uint16, src []float32)",
		"avx2NarrowBF16 writes dst[i] = F32ToBF16(src[i]) for i < len(dst)&^7:",
		"u + 0x7fff + (u>>16)&1, top half; NaN: (u>>16) | 0x40.")
	{
		d, s := base("dst"), base("src")
		one, bias := broadcast32(1), broadcast32(0x7fff)
		abs, inf, quiet := broadcast32(0x7fffffff), broadcast32(0x7f800000), broadcast32(0x40)
		loop("narrowBF16", length("dst"), 2, func(i reg.Register, off int) {
			u, hi, r, nan := c.YMM(), c.YMM(), c.YMM(), c.YMM()
			c.VMOVDQU(f32(s, i, off), u)
			c.VPSRLD(U8(16), u, hi)
			c.VPAND(one, hi, r)
			c.VPADDD(bias, r, r)
			c.VPADDD(u, r, r)
			c.VPSRLD(U8(16), r, r)
			c.VPAND(abs, u, nan)
			c.VPCMPGTD(inf, nan, nan) // |u| > inf bits: NaN
			c.VPOR(quiet, hi, hi)
			c.VPBLENDVB(nan, hi, r, r)
			lo, top := c.XMM(), c.XMM()
			c.VEXTRACTI128(U8(1), r, top)
			c.VPACKUSDW(top, r.AsX(), lo) // values ≤ 0xffff: no saturation
			c.VMOVDQU(lo, u16(d, i, off))
		})
	}
}

// reductions emits the plan's partial accumulation: len(part) = W, a multiple of 8, and
// len(x) a positive multiple of W. Blocks of 32 (or 8) partials stay in registers while the
// loop walks the chunks x[c·W + k], c = 0, 1, …, so each partial sees its elements in the
// plan's order.
func reductions() {
	type variant struct {
		name, sig, doc string
		step           func(acc reg.VecVirtual, m Mem, mean reg.VecVirtual)
	}
	variants := []variant{
		{"avx2Accumulate", "func(part, x []float32)", "part[k] += x[c·W+k]",
			func(acc reg.VecVirtual, m Mem, _ reg.VecVirtual) {
				c.VADDPS(m, acc, acc)
			}},
		{"avx2AccumulateSqDev", "func(part, x []float32, mean float32)", "part[k] += f32(d·d), d = x[c·W+k] − mean",
			func(acc reg.VecVirtual, m Mem, mean reg.VecVirtual) {
				d := c.YMM()
				c.VMOVUPS(m, d)
				c.VSUBPS(mean, d, d)
				c.VMULPS(d, d, d)
				c.VADDPS(d, acc, acc)
			}},
		{"avx2AccumulateSqDevFMA", "func(part, x []float32, mean float32)", "part[k] = fma(d, d, part[k]), d = x[c·W+k] − mean",
			func(acc reg.VecVirtual, m Mem, mean reg.VecVirtual) {
				d := c.YMM()
				c.VMOVUPS(m, d)
				c.VSUBPS(mean, d, d)
				c.VFMADD231PS(d, d, acc)
			}},
	}
	for _, vz := range []struct {
		variant
		zero bool
	}{{variants[0], false}, {variants[1], false}, {variants[2], false}, {variants[0], true}, {variants[1], true}, {variants[2], true}} {
		v, zero := vz.variant, vz.zero
		if zero {
			v.name += "Zero"
			text(v.name, v.sig, v.name+" is "+v.name[:len(v.name)-4]+" on partials that start at +0 (part is",
				"not read): the same as clearing part first, in one pass.")
		} else {
			text(v.name, v.sig, v.name+" does "+v.doc+" for every chunk c;",
				"len(part) = W must be a multiple of 8 and len(x) a positive multiple of W.")
		}
		part, x := base("part"), base("x")
		w := length("part")
		var mean reg.VecVirtual
		if v.sig != "func(part, x []float32)" {
			mean = broadcastParam("mean")
		}
		stride := c.GP64() // W·4 bytes
		c.MOVQ(w, stride)
		c.SHLQ(U8(2), stride)
		end := c.GP64() // &x[len(x)]
		c.MOVQ(length("x"), end)
		c.LEAQ(Mem{Base: x, Index: end, Scale: 4}, end)
		k := c.GP64() // element index of the block
		c.XORQ(k, k)
		w32 := c.GP64()
		c.MOVQ(w, w32)
		c.ANDQ(I32(-32), w32)

		block := func(label string, lanes int, limit reg.Register) {
			c.Label(v.name + "_" + label)
			c.CMPQ(k, limit)
			c.JAE(LabelRef(v.name + "_" + label + "_done"))
			accs := make([]reg.VecVirtual, lanes/8)
			for j := range accs {
				accs[j] = c.YMM()
				if zero {
					c.VXORPS(accs[j], accs[j], accs[j]) // +0, as clear leaves it
				} else {
					c.VMOVUPS(f32(part, k, 8*j), accs[j])
				}
			}
			q := c.GP64()
			c.LEAQ(Mem{Base: x, Index: k, Scale: 4}, q)
			c.Label(v.name + "_" + label + "_chunk")
			for j, acc := range accs {
				v.step(acc, Mem{Base: q, Disp: 32 * j}, mean)
			}
			c.ADDQ(stride, q)
			c.CMPQ(q, end)
			c.JB(LabelRef(v.name + "_" + label + "_chunk"))
			for j, acc := range accs {
				c.VMOVUPS(acc, f32(part, k, 8*j))
			}
			c.ADDQ(U32(lanes), k)
			c.JMP(LabelRef(v.name + "_" + label))
			c.Label(v.name + "_" + label + "_done")
		}
		block("by32", 32, w32)
		block("by8", 8, w)
		c.VZEROUPPER()
		c.RET()
	}
}

// sums emits the first pass of a row fused with the plan's first accumulation: s = a + b
// or (a + b) + d, optionally also stored non-temporally to x, and part = the partial sums
// of s from +0 (what sumZero gives). Like reductions, blocks of 32 (or 8) partials stay in
// registers while the loop walks the chunks c·W + k of the inputs, so every s[i] is
// computed once and added to its partial in the plan's order.
func sums() {
	for _, v := range []struct{ three, nt bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		name, sig, what := "avx2Add2Sum", "func(part, s, a, b []float32)", "a[i] + b[i]"
		if v.three {
			name, sig, what = "avx2Add3Sum", "func(part, s, a, b, d []float32)", "(a[i] + b[i]) + d[i]"
		}
		if v.nt {
			name += "NT"
			sig = strings.Replace(sig, "s, ", "s, x, ", 1)
		}
		doc := []string{name + " writes s[i] = " + what + " and part[k] = Σ_c s[c·W+k] from +0 (chunks in order),"}
		if v.nt {
			doc = append(doc, "and x[i] = s[i] with non-temporal stores (x 32-byte aligned; the caller fences),")
		}
		doc = append(doc, "for i < len(s); len(part) = W must be a multiple of 8 and len(s) a positive multiple of W.")
		text(name, sig, doc...)
		part, sp := base("part"), base("s")
		var x, d reg.GPVirtual
		if v.nt {
			x = base("x")
		}
		a, b := base("a"), base("b")
		if v.three {
			d = base("d")
		}
		w := length("part")
		stride := c.GP64() // W·4 bytes
		c.MOVQ(w, stride)
		c.SHLQ(U8(2), stride)
		end := c.GP64() // len(s)·4 bytes
		c.MOVQ(length("s"), end)
		c.SHLQ(U8(2), end)
		k := c.GP64() // element index of the block
		c.XORQ(k, k)
		w32 := c.GP64()
		c.MOVQ(w, w32)
		c.ANDQ(I32(-32), w32)

		block := func(label string, lanes int, limit reg.Register) {
			c.Label(name + "_" + label)
			c.CMPQ(k, limit)
			c.JAE(LabelRef(name + "_" + label + "_done"))
			accs := make([]reg.VecVirtual, lanes/8)
			for j := range accs {
				accs[j] = c.YMM()
				c.VXORPS(accs[j], accs[j], accs[j]) // +0, as clear leaves it
			}
			q := c.GP64() // byte offset of the block in chunk c
			c.MOVQ(k, q)
			c.SHLQ(U8(2), q)
			c.Label(name + "_" + label + "_chunk")
			for j, acc := range accs {
				m := func(base reg.Register) Mem { return Mem{Base: base, Index: q, Scale: 1, Disp: 32 * j} }
				t := c.YMM()
				c.VMOVUPS(m(a), t)
				c.VADDPS(m(b), t, t)
				if v.three {
					c.VADDPS(m(d), t, t)
				}
				c.VMOVUPS(t, m(sp))
				if v.nt {
					c.VMOVNTPS(t, m(x))
				}
				c.VADDPS(t, acc, acc) // part[k] + s
			}
			c.ADDQ(stride, q)
			c.CMPQ(q, end)
			c.JB(LabelRef(name + "_" + label + "_chunk"))
			for j, acc := range accs {
				c.VMOVUPS(acc, f32(part, k, 8*j))
			}
			c.ADDQ(U32(lanes), k)
			c.JMP(LabelRef(name + "_" + label))
			c.Label(name + "_" + label + "_done")
		}
		block("by32", 32, w32)
		block("by8", 8, w)
		c.VZEROUPPER()
		c.RET()
	}
}

// tree emits the plan's halving tree for W = len(part), a power of two ≥ 8: for off = W/2
// … 1, part[k] += part[k+off] for k < off, in place, and returns part[0]. The steps form a
// dependency chain, so for W ≤ 256 the partials stay in registers after the first loads
// (one path per W); every step still stores what it wrote, so part ends as the Go tree
// leaves it. Longer parts first halve in memory down to 256.
func tree() {
	text("avx2Tree", "func(part []float32) float32",
		"avx2Tree runs part[k] += part[k+off] for k < off, off = len(part)/2 … 1, and returns part[0];",
		"len(part) must be a power of two ≥ 8.")
	p := base("part")
	n := length("part")
	ret, err := c.ReturnIndex(0).Resolve()
	if err != nil {
		fail(err)
	}
	vec := func(j int) Mem { return Mem{Base: p, Disp: 32 * j} } // part[8j : 8j+8]

	// W > 256: in-memory steps until off = 128.
	off, hi, i := c.GP64(), c.GP64(), c.GP64()
	c.MOVQ(n, off)
	c.SHRQ(U8(1), off)
	c.Label("tree_mem")
	c.CMPQ(off, U32(128))
	c.JBE(LabelRef("tree_256"))
	c.LEAQ(Mem{Base: p, Index: off, Scale: 4}, hi) // &part[off]
	c.XORQ(i, i)
	c.Label("tree_mem_add")
	v := c.YMM()
	c.VMOVUPS(f32(p, i, 0), v)
	c.VADDPS(f32(hi, i, 0), v, v) // lo + hi
	c.VMOVUPS(v, f32(p, i, 0))
	c.ADDQ(U32(8), i)
	c.CMPQ(i, off)
	c.JB(LabelRef("tree_mem_add"))
	c.SHRQ(U8(1), off)
	c.JMP(LabelRef("tree_mem"))

	widths := []int{256, 128, 64, 32, 16, 8}
	for _, w := range widths {
		c.Label(fmt.Sprintf("tree_%d", w))
		if w > 8 {
			c.CMPQ(n, U32(w))
			c.JB(LabelRef(fmt.Sprintf("tree_%d", w/2)))
		}
		nv := w / 8 // vectors
		var r []reg.VecVirtual
		switch {
		case nv == 1:
			r = []reg.VecVirtual{c.YMM()}
			c.VMOVUPS(vec(0), r[0])
		case nv == 2:
			r = []reg.VecVirtual{c.YMM()}
			c.VMOVUPS(vec(0), r[0])
			c.VADDPS(vec(1), r[0], r[0])
			c.VMOVUPS(r[0], vec(0))
		default:
			// The first step from memory; its upper quarter waits in registers for the
			// second step, which the lower quarter takes at once.
			half, quarter := nv/2, nv/4
			r = make([]reg.VecVirtual, half)
			for q := quarter; q < half; q++ {
				r[q] = c.YMM()
				c.VMOVUPS(vec(q), r[q])
				c.VADDPS(vec(half+q), r[q], r[q])
				c.VMOVUPS(r[q], vec(q))
			}
			for q := 0; q < quarter; q++ {
				r[q] = c.YMM()
				c.VMOVUPS(vec(q), r[q])
				c.VADDPS(vec(half+q), r[q], r[q])
				c.VMOVUPS(r[q], vec(q))
				c.VADDPS(r[q+quarter], r[q], r[q])
				c.VMOVUPS(r[q], vec(q))
			}
			r = r[:quarter]
			for len(r) > 1 {
				h := len(r) / 2
				for q := 0; q < h; q++ {
					c.VADDPS(r[q+h], r[q], r[q])
					c.VMOVUPS(r[q], vec(q))
				}
				r = r[:h]
			}
		}
		// The last three steps on part[0:8].
		lo, t := c.XMM(), c.XMM()
		c.VEXTRACTF128(U8(1), r[0], t)
		c.VADDPS(t, r[0].AsX(), lo) // off = 4: part[0:4] + part[4:8]
		c.VMOVUPS(lo, Mem{Base: p})
		c.VMOVHLPS(lo, lo, t) // t[0:2] = part[2:4]
		c.VADDPS(t, lo, lo)   // off = 2
		c.VMOVLPS(lo, Mem{Base: p})
		c.VMOVSHDUP(lo, t)  // t[0] = part[1]
		c.VADDSS(t, lo, lo) // off = 1
		c.VMOVSS(lo, Mem{Base: p})
		c.VZEROUPPER()
		c.VMOVSS(lo, ret.Addr)
		c.RET()
	}
}

func embedF16() {
	text("avx2EmbedSumF16Seg", "func(x []float32, bits []uint16, w, p, g []uint16)",
		"avx2EmbedSumF16Seg writes h = rnd16(rnd16(w[i] + g[i]) + p[i]) as bits[i] and float32 x[i],",
		"for i < len(x)&^7 (VCVTPS2PH imm 0: nearest-even).")
	{
		x, bits, w, p, g := base("x"), base("bits"), base("w"), base("p"), base("g")
		loop("embedF16Seg", length("x"), 2, func(i reg.Register, off int) {
			a, b := c.YMM(), c.YMM()
			h := c.XMM()
			c.VCVTPH2PS(u16(w, i, off), a)
			c.VCVTPH2PS(u16(g, i, off), b)
			c.VADDPS(b, a, a)
			c.VCVTPS2PH(U8(0), a, h)
			c.VCVTPH2PS(h, a)
			c.VCVTPH2PS(u16(p, i, off), b)
			c.VADDPS(b, a, a)
			c.VCVTPS2PH(U8(0), a, h)
			c.VMOVDQU(h, u16(bits, i, off))
			c.VCVTPH2PS(h, a)
			c.VMOVUPS(a, f32(x, i, off))
		})
	}

	text("avx2EmbedSumF16", "func(x []float32, bits []uint16, w, p []uint16)",
		"avx2EmbedSumF16 writes h = rnd16(w[i] + p[i]) as bits[i] and float32 x[i], for i < len(x)&^7.")
	{
		x, bits, w, p := base("x"), base("bits"), base("w"), base("p")
		loop("embedF16", length("x"), 2, func(i reg.Register, off int) {
			a, b := c.YMM(), c.YMM()
			h := c.XMM()
			c.VCVTPH2PS(u16(w, i, off), a)
			c.VCVTPH2PS(u16(p, i, off), b)
			c.VADDPS(b, a, a)
			c.VCVTPS2PH(U8(0), a, h)
			c.VMOVDQU(h, u16(bits, i, off))
			c.VCVTPH2PS(h, a)
			c.VMOVUPS(a, f32(x, i, off))
		})
	}
}

// memory emits the kernels that only steer the memory system: software prefetch of a
// row that is about to be read, non-temporal copies of output rows and the store fence
// that orders non-temporal stores before the result is shared.
func memory() {
	text("avx2Prefetch", "func(b []byte)",
		"avx2Prefetch issues PREFETCHT0 for every 64-byte line that b covers; it reads and writes",
		"nothing architecturally (prefetches never fault).")
	{
		p := base("b")
		end := c.GP64() // &b[len(b)-1]
		c.MOVQ(length("b"), end)
		c.TESTQ(end, end)
		c.JZ(LabelRef("prefetch_done"))
		c.LEAQ(Mem{Base: p, Index: end, Scale: 1, Disp: -1}, end)
		c.Label("prefetch_loop")
		c.PREFETCHT0(Mem{Base: p})
		c.ADDQ(U32(64), p)
		c.CMPQ(p, end)
		c.JBE(LabelRef("prefetch_loop"))
		c.PREFETCHT0(Mem{Base: end}) // the last line, when b does not start on a line
		c.Label("prefetch_done")
		c.RET()
	}

	text("avx2CopyNT", "func(dst, src []float32)",
		"avx2CopyNT writes dst[i] = src[i] for i < len(dst)&^7 with non-temporal stores:",
		"dst must be 32-byte aligned, and the caller runs avx2Fence before the values are shared.")
	{
		d, s := base("dst"), base("src")
		loop("copyNT", length("dst"), 4, func(i reg.Register, off int) {
			v := c.YMM()
			c.VMOVUPS(f32(s, i, off), v)
			c.VMOVNTPS(v, f32(d, i, off))
		})
	}

	text("avx2Fence", "func()",
		"avx2Fence is SFENCE: non-temporal stores before it are globally visible before any store after it.")
	c.SFENCE()
	c.RET()
}
