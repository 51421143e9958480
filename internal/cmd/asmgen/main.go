// Command asmgen writes the SIMD kernels of the CPU backend, once for AVX2+FMA+F16C (8
// lanes, YMM) and once for AVX-512 F/BW/VL (16 lanes, ZMM), family by family: each kernel
// group of the cpu package (families: sum, addsum, affine, convert, embedsum, mask, memory)
// gets its assembly, internal/cpu/<family>_amd64.s, and the kernels' Go declarations,
// internal/cpu/<family>_amd64.go; the family's twins and dispatch are in the Go file the map
// at the top of internal/cpu/kernels.go names (<family>.go, or sum.go for addsum and
// kernels.go for memory).
// It also writes each width's level, its table of the kernels family by family,
// internal/cpu/vectables_amd64.go (tables.go). Run it through go generate in the cpu package (see
// internal/cpu/levels_amd64.go), or from the repository root:
//
//	go run -C internal/cmd/asmgen . -dir ../../cpu
//
// It lives in its own module so that the library does not depend on avo.
//
// Every kernel handles the multiple-of-lanes prefix of its slices (at AVX-512 the
// elementwise kernels of loopTail and the blocked walks of chunkBlock take every element,
// the last few under a lane mask: the cpu level's tails); each family's dispatch
// in cpu (sum.go, affine.go, convert.go, embedsum.go, mask.go, kernels.go) checks
// lengths and finishes the tails with narrower kernels or the pure-Go twins beside it, which
// define what each kernel must compute. Operand order follows the
// twins (x − mean, p + v, …), so even NaN payloads agree; no operation is fused unless its
// twin calls plan.FMA32. The two widths run the same operations on each element in the
// same order: only how many elements one instruction covers differs.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/mmcloughlin/avo/attr"
	"github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/gotypes"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/pass"
	"github.com/mmcloughlin/avo/printer"
	"github.com/mmcloughlin/avo/reg"
)

// c is the context the generators emit into: generate points it at a fresh one for each
// family.
var c *build.Context

// isa is one vector width the kernels are written for.
type isa struct {
	name  string // function-name prefix
	lanes int    // float32 lanes per vector register
	block int    // partials a reduction keeps in registers while it walks the chunks
}

var (
	avx2   = isa{name: "avx2", lanes: 8, block: 32}
	avx512 = isa{name: "avx512", lanes: 16, block: 128}
)

// vec allocates a vector register of the width: YMM or ZMM.
func (v isa) vec() reg.VecVirtual {
	if v.lanes == 16 {
		return c.ZMM()
	}
	return c.YMM()
}

// half allocates the register that holds one vector's worth of 16-bit values: XMM or YMM.
func (v isa) half() reg.VecVirtual {
	if v.lanes == 16 {
		return c.YMM()
	}
	return c.XMM()
}

// zero sets r to +0 in every lane.
func (v isa) zero(r reg.VecVirtual) {
	if v.lanes == 16 {
		c.VPXORD(r, r, r)
		return
	}
	c.VXORPS(r, r, r)
}

// bytes is the size of one vector in bytes.
func (v isa) bytes() int { return 4 * v.lanes }

// family is one kernel group of the cpu package: its kernels go to <file>_amd64.s and their
// declarations to <file>_amd64.go; the Go file that holds the family's form struct, its Go
// twins and its dispatch is the one the file map at the top of internal/cpu/kernels.go names. A kernel
// belongs to the family whose table field in internal/cpu/vectables_amd64.go names it.
type family struct {
	file string
	gen  func(widths []isa) // emits the family's kernels into c, for the widths narrowest first
}

// families are the kernel groups, each emitting its kernels width by width, then those of
// one width only (the halving tree, the fence, the avx512fp16 sums).
var families = []family{
	{"sum", func(ws []isa) { // sumForm
		for _, v := range ws {
			reductions(v)
		}
		tree()
		foldQuads()
		foldTree512()
		sumTrees512()
		devTrees2()
	}},
	{"addsum", func(ws []isa) { // addForm
		for _, v := range ws {
			adds(v)
			sums(v)
			sums16(v)
		}
	}},
	{"affine", eachWidth(affines)},      // affineForm
	{"convert", eachWidth(conversions)}, // convForm
	{"embedsum", func(ws []isa) { // embedForm, and the avx512fp16 level's (internal/cpu/levels_amd64.go)
		for _, v := range ws {
			embedF16(v)
		}
		embedF16FP16(avx512)
		embedShiftTreeF32()
	}},
	{"mask", eachWidth(masks)}, // ops.MaskRule
	{"memory", func(ws []isa) {
		for _, v := range ws {
			copyNT(v)
		}
		memory()
	}},
}

// eachWidth is a family's gen that runs gen once per width.
func eachWidth(gen func(isa)) func([]isa) {
	return func(ws []isa) {
		for _, v := range ws {
			gen(v)
		}
	}
}

// tablesFile is the file of each width's level (tables.go).
const tablesFile = "vectables_amd64.go"

func main() {
	// Own flag set: importing avo's build package registers its flags on the default one.
	fs := flag.NewFlagSet("asmgen", flag.ExitOnError)
	dir := fs.String("dir", ".", "the cpu package's directory: each family's <file>_amd64.s and <file>_amd64.go, and "+tablesFile+", are written there")
	fs.Parse(os.Args[1:])

	files, err := generate()
	if err != nil {
		fail(err)
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(*dir, f.name), f.src, 0o644); err != nil {
			fail(err)
		}
	}
}

// genFile is one generated file: its name in the cpu package and its contents.
type genFile struct {
	name string
	src  []byte
}

// generate returns every generated file: each family's assembly and declarations, in the
// order of families, then the tables.
func generate() ([]genFile, error) {
	widths := []isa{avx2, avx512} // narrowest first
	// A fixed command line in the header, so regenerating into any path gives the same file.
	cfg := printer.Config{Argv: []string{"go", "generate", "./internal/cpu"}, Pkg: "cpu"}
	var files []genFile
	for _, fam := range families {
		// One avo context per family, since a context makes one file; the generators
		// all emit into c.
		c = build.NewContext()
		c.ConstraintExpr("amd64,!noasm,!purego")
		fam.gen(widths)
		f, err := c.Result()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", fam.file, err)
		}
		if err := pass.Compile.Execute(f); err != nil {
			return nil, fmt.Errorf("%s: %w", fam.file, err)
		}
		if err := encodeFP16(f); err != nil {
			return nil, fmt.Errorf("%s: %w", fam.file, err)
		}
		for _, out := range []struct {
			ext string
			p   printer.Printer
		}{{".s", printer.NewGoAsm(cfg)}, {".go", printer.NewStubs(cfg)}} {
			b, err := out.p.Print(f)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", fam.file, err)
			}
			files = append(files, genFile{fam.file + "_amd64" + out.ext, b})
		}
	}
	tab, err := tables(widths)
	if err != nil {
		return nil, err
	}
	return append(files, genFile{tablesFile, tab}), nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "asmgen:", err)
	os.Exit(1)
}

func text(name, sig string, doc ...string) {
	c.Function(name)
	c.Attributes(attr.NOSPLIT)
	c.Pragma("noescape")
	c.SignatureExpr(sig)
	c.Doc(doc...)
}

func base(name string) reg.GPVirtual  { return c.Load(c.Param(name).Base(), c.GP64()).(reg.GPVirtual) }
func length(name string) reg.Register { return c.Load(c.Param(name).Len(), c.GP64()) }

// f32 and u16 address element i (+off) of a float32 or a uint16 slice.
func f32(p, i reg.Register, off int) Mem { return Mem{Base: p, Index: i, Scale: 4, Disp: 4 * off} }
func u16(p, i reg.Register, off int) Mem { return Mem{Base: p, Index: i, Scale: 2, Disp: 2 * off} }

// broadcast32 returns a vector register with v in every 32-bit lane.
func (v isa) broadcast32(x uint32) reg.VecVirtual {
	g := c.GP32()
	c.MOVL(U32(x), g)
	t := c.XMM()
	c.VMOVD(g, t)
	y := v.vec()
	c.VPBROADCASTD(t, y)
	return y
}

// broadcastParam returns a vector register with the float32 parameter in every lane.
func (v isa) broadcastParam(name string) reg.VecVirtual {
	p, err := c.Param(name).Resolve()
	if err != nil {
		fail(err)
	}
	y := v.vec()
	c.VBROADCASTSS(p.Addr, y) // VEX/EVEX only: no SSE/AVX transition
	return y
}

// loop is walk, then VZEROUPPER and RET.
func (v isa) loop(name string, n reg.Register, unroll int, body func(i reg.Register, off int)) {
	v.walk(name, n, unroll, body)
	c.VZEROUPPER()
	c.RET()
}

// span is a kernel's doc line as the width's kernels walk: the AVX-512 width's take every
// element (loopTail) and any len(t) (chunkBlock's ragged walk), the others whole vectors
// and whole chunks.
func (v isa) span(doc string) string {
	if v.lanes != 16 {
		return doc
	}
	doc = regexp.MustCompile(`for whole vectors of (\w+)`).ReplaceAllString(doc, "for every element of $1 (the last few under a lane mask)")
	doc = strings.Replace(doc, "len(t)&^15", "len(t) (the last few under a lane mask)", 1)
	return strings.Replace(doc, "len(t) a positive multiple of W", "any len(t) (a last chunk short of W under lane masks)", 1)
}

// loopTail is loop for kernels that take slices of any length: the AVX-512 width runs the
// elements after the whole vectors as one more body under a lane mask (body's k; nil for
// the whole vectors), so a row's tail costs no call to a narrower width or the twin; the
// avx2 width leaves them to its caller, as loop does.
func (v isa) loopTail(name string, n reg.Register, unroll int, body func(i reg.Register, off int, k reg.Register)) {
	end := v.walk(name, n, unroll, func(i reg.Register, off int) { body(i, off, nil) })
	if v.lanes == 16 {
		r := c.GP64()
		c.MOVQ(n, r)
		c.SUBQ(end, r)
		c.JZ(LabelRef(name + "_ret"))
		body(end, 0, v.laneMask(r, 0))
		c.Label(name + "_ret")
	}
	c.VZEROUPPER()
	c.RET()
}

// walk emits "for i := 0; i < n&^(lanes−1); i += lanes { body(i, 0) }", unrolled `unroll`
// times while enough elements remain, ending at the label name_done, and returns the
// register holding n&^(lanes−1). body(i, off) handles elements i+off … i+off+lanes−1.
// Labels take the function's name.
func (v isa) walk(name string, n reg.Register, unroll int, body func(i reg.Register, off int)) reg.Register {
	i := c.GP64()
	end := c.GP64()
	c.XORQ(i, i)
	if unroll > 1 {
		c.MOVQ(n, end)
		c.ANDQ(I32(-v.lanes*unroll), end)
		c.CMPQ(i, end)
		c.JAE(LabelRef(name + "_single"))
		c.Label(name + "_unrolled")
		for u := 0; u < unroll; u++ {
			body(i, v.lanes*u)
		}
		c.ADDQ(U32(v.lanes*unroll), i)
		c.CMPQ(i, end)
		c.JB(LabelRef(name + "_unrolled"))
		c.Label(name + "_single")
	}
	c.MOVQ(n, end)
	c.ANDQ(I32(-v.lanes), end)
	c.CMPQ(i, end)
	c.JAE(LabelRef(name + "_done"))
	c.Label(name + "_loop")
	body(i, 0)
	c.ADDQ(U32(v.lanes), i)
	c.CMPQ(i, end)
	c.JB(LabelRef(name + "_loop"))
	c.Label(name + "_done")
	return end
}

// widen16 loads one vector of 16-bit values (binary16 or bfloat16) from m as float32;
// under the lane mask k (nil: every lane; see laneMask) only k's lanes, the others +0.
func (v isa) widen16(bf bool, m Mem, k reg.Register) reg.VecVirtual {
	r := v.vec()
	switch {
	case !bf && k != nil:
		c.VCVTPH2PS_Z(m, k, r)
		return r
	case !bf:
		c.VCVTPH2PS(m, r)
		return r
	case k != nil:
		c.VPMOVZXWD_Z(m, k, r)
	default:
		c.VPMOVZXWD(m, r)
	}
	c.VPSLLD(U8(16), r, r)
	return r
}

// load loads one float32 vector from m into r; under the lane mask k (nil: every lane) only
// k's lanes, the others +0. A masked-off lane never reads memory (nor faults).
func load(m Mem, r reg.VecVirtual, k reg.Register) {
	if k != nil {
		c.VMOVUPS_Z(m, k, r)
		return
	}
	c.VMOVUPS(m, r)
}

// addInto adds the float32 vector at m into s. Under the lane mask k it first loads m,
// masked, into a register of its own from fresh: a memory operand reads every lane, past
// the end of a masked tail.
func addInto(m Mem, s reg.VecVirtual, k reg.Register, fresh func() reg.VecVirtual) {
	if k == nil {
		c.VADDPS(m, s, s)
		return
	}
	r := fresh()
	load(m, r, k)
	c.VADDPS(r, s, s)
}

// store stores one float32 vector r to m, non-temporally with nt (m aligned to the vector);
// under the lane mask k only k's lanes, with a plain store (a non-temporal store has no
// masked form).
func store(r reg.VecVirtual, m Mem, nt bool, k reg.Register) {
	switch {
	case k != nil:
		c.VMOVUPS(r, k, m)
	case nt:
		c.VMOVNTPS(r, m)
	default:
		c.VMOVUPS(r, m)
	}
}

// accumulate adds d into acc (acc + d, the partial first as the twins add), under the lane
// mask k only in k's lanes: the others keep their partials' bits.
func accumulate(d, acc reg.VecVirtual, k reg.Register) {
	if k != nil {
		c.VADDPS(d, acc, k, acc)
		return
	}
	c.VADDPS(d, acc, acc)
}

// laneMask returns an AVX-512 mask register holding the first min(max(r − off, 0), lanes)
// lanes of the width (r < off + 256): the lanes of the vector at element off of a tail of r
// elements that lie inside it. Only the AVX-512 width masks (avx2 has no 16-bit masked
// stores): its kernels finish their slices' tails and ragged chunks in the kernel instead of
// handing them to the narrower width and the twin.
func (v isa) laneMask(r reg.Register, off int) reg.Register {
	if v.lanes != 16 {
		panic("laneMask: AVX-512 only")
	}
	t, z := c.GP64(), c.GP64()
	c.XORQ(z, z)
	c.MOVQ(r, t)
	c.SUBQ(U32(off), t) // sets the flags even for off 0
	c.CMOVQLT(z, t)     // below 0: no lane
	ones, m := c.GP32(), c.GP32()
	c.MOVL(U32(0xffff), ones)
	c.BZHIL(t.As32(), ones, m) // the low t bits; t ≥ 16 keeps all 16
	k := c.K()
	c.KMOVW(m, k)
	return k
}

// narrowF16 stores one vector as binary16 to m, nearest-even (VCVTPS2PH imm 0). It converts
// into a register and stores that: AMD's Zen cores microcode VCVTPS2PH with a memory
// destination, several times slower than the two instructions.
func (v isa) narrowF16(r reg.VecVirtual, m Mem, nt bool, k reg.Register) {
	h := v.half()
	c.VCVTPS2PH(U8(0), r, h)
	v.store16(h, m, nt, k)
}

// store16 stores one vector's worth of 16-bit values; nt: non-temporally (m aligned to
// their size); under the lane mask k only k's lanes, with a plain store.
func (v isa) store16(h reg.VecVirtual, m Mem, nt bool, k reg.Register) {
	switch {
	case k != nil:
		c.VMOVDQU16(h, k, m)
	case nt:
		c.VMOVNTDQ(h, m)
	default:
		c.VMOVUPS(h, m)
	}
}

// bf16Consts are the constants of narrowBF16, loaded once per kernel.
type bf16Consts struct{ one, bias, abs, inf, quiet reg.VecVirtual }

func (v isa) bf16Consts() bf16Consts {
	return bf16Consts{v.broadcast32(1), v.broadcast32(0x7fff), v.broadcast32(0x7fffffff),
		v.broadcast32(0x7f800000), v.broadcast32(0x40)}
}

// narrowBF16 stores one vector as bfloat16 to m the way F32ToBF16 rounds: the top half of
// u + 0x7fff + (u>>16)&1, and (u>>16) | 0x40 for NaN. (VCVTNEPS2BF16 would flush
// subnormals, so the rounding is done in integers.) It clobbers u.
func (v isa) narrowBF16(k bf16Consts, u reg.VecVirtual, m Mem, nt bool, lanes reg.Register) {
	hi, r, nan := v.vec(), v.vec(), v.vec()
	c.VPSRLD(U8(16), u, hi)
	if v.lanes == 16 {
		c.VPANDD(k.one, hi, r)
		c.VPADDD(k.bias, r, r)
		c.VPADDD(u, r, r)
		c.VPSRLD(U8(16), r, r)
		c.VPANDD(k.abs, u, nan)
		isNaN := c.K()
		c.VPCMPGTD(k.inf, nan, isNaN) // |u| > inf bits: NaN
		c.VPORD(k.quiet, hi, hi)
		c.VPBLENDMD(hi, r, isNaN, r)
		h := c.YMM()
		c.VPMOVDW(r, h) // values ≤ 0xffff: truncation is exact
		v.store16(h, m, nt, lanes)
		return
	}
	c.VPAND(k.one, hi, r)
	c.VPADDD(k.bias, r, r)
	c.VPADDD(u, r, r)
	c.VPSRLD(U8(16), r, r)
	c.VPAND(k.abs, u, nan)
	c.VPCMPGTD(k.inf, nan, nan) // |u| > inf bits: NaN
	c.VPOR(k.quiet, hi, hi)
	c.VPBLENDVB(nan, hi, r, r)
	lo, top := c.XMM(), c.XMM()
	c.VEXTRACTI128(U8(1), r, top)
	c.VPACKUSDW(top, r.AsX(), lo) // values ≤ 0xffff: no saturation
	v.store16(lo, m, nt, lanes)
}

// adds emits the elementwise adds of a row's first pass when it is not fused with the
// partial sums (inputs streamed from DRAM, tails): Add2Row and Add3Row, with x stored or
// not, and AddTo (the tree's steps on partials that are not a power of two).
func adds(v isa) {
	n := v.name
	// The streamed first pass: s staged into t, x = s optionally.
	for _, three := range []bool{false, true} {
		for _, xs := range []xStore{xNone, xPlain, xNT} {
			name, sig, what := n+"Add2Row", "func(t, a, b []float32)", "a[i] + b[i]"
			if three {
				name, sig, what = n+"Add3Row", "func(t, a, b, d []float32)", "(a[i] + b[i]) + d[i]"
			}
			doc := []string{name + " writes t[i] = " + what + ","}
			switch xs {
			case xNT:
				name += "NT"
				doc = []string{name + " writes t[i] = " + what + ", and x[i] = t[i] with",
					"non-temporal stores (x aligned to the vector; the caller fences),"}
			case xPlain:
				name += "X"
				doc = []string{name + " writes t[i] = " + what + ", and x[i] = t[i],"}
			}
			doc = append(doc, v.span("for i < len(t)&^"+fmt.Sprint(v.lanes-1)+"."))
			if xs != xNone {
				sig = strings.Replace(sig, "t, ", "t, x, ", 1)
			}
			text(name, sig, doc...)
			tp := base("t")
			var x, d reg.GPVirtual
			if xs != xNone {
				x = base("x")
			}
			a, b := base("a"), base("b")
			if three {
				d = base("d")
			}
			v.loopTail(name, length("t"), 4, func(i reg.Register, off int, k reg.Register) {
				s := v.vec()
				load(f32(a, i, off), s, k)
				addInto(f32(b, i, off), s, k, v.vec)
				if three {
					addInto(f32(d, i, off), s, k, v.vec)
				}
				if xs != xNone {
					store(s, f32(x, i, off), xs == xNT, k)
				}
				store(s, f32(tp, i, off), false, k)
			})
		}
	}

	text(n+"AddTo", "func(s, b []float32)",
		n+"AddTo writes s[i] += b[i] for whole vectors of s.")
	{
		s, b := base("s"), base("b")
		v.loop(n+"AddTo", length("s"), 4, func(i reg.Register, off int) {
			t := v.vec()
			c.VMOVUPS(f32(s, i, off), t)
			c.VADDPS(f32(b, i, off), t, t)
			c.VMOVUPS(t, f32(s, i, off))
		})
	}

}

// affines emits the affine step on the row's deviations t (plan v3's e, which the second
// pass leaves in the row), with y in float32 (plain or non-temporal stores), binary16
// or bfloat16: the 16-bit forms round what the float32 form would store. The H forms read
// gamma and beta in y's 16-bit format, widened as they load (exactly).
func affines(v isa) {
	n := v.name
	for _, out := range []string{"", "NT", "F16", "F16NT", "BF16", "BF16NT", "F16H", "F16HNT", "BF16H", "BF16HNT"} {
		for _, fused := range []bool{false, true} {
			name, what := n+"Affine", "f32(n·gamma[i]) + beta[i] (unfused)"
			if fused {
				name, what = n+"AffineFMA", "fma(n, gamma[i], beta[i])"
			}
			name += out
			bf, half := strings.HasPrefix(out, "BF16"), strings.Contains(out, "16H")
			nt16 := strings.HasPrefix(out, "F16") || bf
			nt16 = nt16 && strings.HasSuffix(out, "NT")
			yT, doc := "[]float32", []string{name + " writes y[i] = " + what + ", n = f32((t[i] − meanD)·rstd),"}
			switch {
			case out == "":
				doc = append(doc, v.span("for whole vectors of y."))
			case out == "NT":
				doc = append(doc, v.span("for whole vectors of y, with non-temporal stores: y must be aligned to the"),
					"vector, and the caller fences before the values are shared.")
			case bf:
				yT = "[]uint16"
				doc = append(doc, v.span("rounded to bfloat16 as F32ToBF16 does, for whole vectors of y."))
			default:
				yT = "[]uint16"
				doc = append(doc, v.span("rounded to binary16 (nearest-even), for whole vectors of y."))
			}
			if half {
				doc = append(doc, "gamma and beta are in y's format.")
			}
			if nt16 {
				doc = append(doc, "Non-temporal stores: y aligned to the vector's 16-bit size; the caller fences.")
			}
			gT := "[]float32"
			if half {
				gT = "[]uint16"
			}
			text(name, "func(y "+yT+", t []float32, gamma, beta "+gT+", meanD, rstd float32)", doc...)
			y, x, g, b := base("y"), base("t"), base("gamma"), base("beta")
			mean, rstd := v.broadcastParam("meanD"), v.broadcastParam("rstd")
			var bk bf16Consts
			unroll := 4
			if bf {
				bk = v.bf16Consts()
				unroll = 2
			}
			v.loopTail(name, length("y"), unroll, func(i reg.Register, off int, k reg.Register) {
				t := v.vec()
				load(f32(x, i, off), t, k)
				c.VSUBPS(mean, t, t)
				c.VMULPS(rstd, t, t)
				switch {
				case half && fused:
					c.VFMADD213PS(v.widen16(bf, u16(b, i, off), k), v.widen16(bf, u16(g, i, off), k), t) // t = gamma·t + beta, one rounding
				case half:
					c.VMULPS(v.widen16(bf, u16(g, i, off), k), t, t)
					c.VADDPS(v.widen16(bf, u16(b, i, off), k), t, t)
				case k != nil: // the tail: gamma and beta through masked loads
					gv, bv := v.vec(), v.vec()
					load(f32(g, i, off), gv, k)
					load(f32(b, i, off), bv, k)
					if fused {
						c.VFMADD213PS(bv, gv, t)
					} else {
						c.VMULPS(gv, t, t)
						c.VADDPS(bv, t, t)
					}
				case fused:
					gv := v.vec()
					c.VMOVUPS(f32(g, i, off), gv)
					c.VFMADD213PS(f32(b, i, off), gv, t) // t = gamma·t + beta, one rounding
				default:
					c.VMULPS(f32(g, i, off), t, t)
					c.VADDPS(f32(b, i, off), t, t)
				}
				switch {
				case out == "" || out == "NT":
					store(t, f32(y, i, off), out == "NT", k)
				case bf:
					v.narrowBF16(bk, t, u16(y, i, off), nt16, k)
				default:
					v.narrowF16(t, u16(y, i, off), nt16, k)
				}
			})
		}
	}
}

func conversions(v isa) {
	n := v.name
	text(n+"WidenF16", "func(dst []float32, src []uint16)",
		v.span(n+"WidenF16 writes dst[i] = float32(binary16 src[i]) for whole vectors of dst."))
	{
		d, s := base("dst"), base("src")
		v.loopTail(n+"WidenF16", length("dst"), 4, func(i reg.Register, off int, k reg.Register) {
			store(v.widen16(false, u16(s, i, off), k), f32(d, i, off), false, k)
		})
	}

	text(n+"WidenBF16", "func(dst []float32, src []uint16)",
		v.span(n+"WidenBF16 writes dst[i] = float32frombits(src[i] << 16) for whole vectors of dst."))
	{
		d, s := base("dst"), base("src")
		v.loopTail(n+"WidenBF16", length("dst"), 4, func(i reg.Register, off int, k reg.Register) {
			store(v.widen16(true, u16(s, i, off), k), f32(d, i, off), false, k)
		})
	}

	for _, nt := range []bool{false, true} {
		sfx, doc := "", ""
		if nt {
			sfx, doc = "NT", " Non-temporal stores: dst aligned to the vector's 16-bit size; the caller fences."
		}
		text(n+"NarrowF16"+sfx, "func(dst []uint16, src []float32)",
			v.span(n+"NarrowF16"+sfx+" writes dst[i] = binary16(src[i]), nearest-even, for whole vectors of dst."+doc))
		{
			d, s := base("dst"), base("src")
			v.loopTail(n+"NarrowF16"+sfx, length("dst"), 4, func(i reg.Register, off int, k reg.Register) {
				t := v.vec()
				load(f32(s, i, off), t, k)
				v.narrowF16(t, u16(d, i, off), nt, k)
			})
		}

		text(n+"NarrowBF16"+sfx, "func(dst []uint16, src []float32)",
			v.span(n+"NarrowBF16"+sfx+" writes dst[i] = F32ToBF16(src[i]) for whole vectors of dst:"),
			"u + 0x7fff + (u>>16)&1, top half; NaN: (u>>16) | 0x40."+doc)
		{
			d, s := base("dst"), base("src")
			k := v.bf16Consts()
			v.loopTail(n+"NarrowBF16"+sfx, length("dst"), 2, func(i reg.Register, off int, m reg.Register) {
				u := v.vec()
				load(f32(s, i, off), u, m)
				v.narrowBF16(k, u, u16(d, i, off), nt, m)
			})
		}
	}
}

// blocks emits the plan's register-blocked walk over a row of n elements with W = w
// partials in each of the partial sets parts (one, or the second pass's two): for each
// block of v.block (then v.lanes) partials from element k, the accumulators start at +0
// (zero) or from parts[s][k…], the loop walks the chunks with element index e = k + c·W,
// c = 0, 1, … while e < n, calling step(e, j, acc) for vector j of the block (acc[s] the
// accumulator of set s), and the accumulators go back to the sets. Each partial thus sees
// its elements in the plan's order. Then VZEROUPPER and RET.
func (v isa) blocks(name string, parts []reg.GPVirtual, w, n reg.Register, zero bool, step stepFn) {
	k := c.GP64() // element index of the block
	c.XORQ(k, k)
	wBlock := c.GP64()
	c.MOVQ(w, wBlock)
	c.ANDQ(I32(-v.block), wBlock)
	block := func(label string, lanes int, limit reg.Register) {
		v.chunkBlock(name+"_"+label, k, w, n, limit, lanes, len(parts), func(s, j int, acc reg.VecVirtual) {
			if zero {
				v.zero(acc) // +0, as clear leaves it
			} else {
				c.VMOVUPS(f32(parts[s], k, v.lanes*j), acc)
			}
		}, step, func(accs [][]reg.VecVirtual) {
			for j, set := range accs {
				for s, acc := range set {
					c.VMOVUPS(acc, f32(parts[s], k, v.lanes*j))
				}
			}
		})
	}
	block("block", v.block, wBlock)
	block("vec", v.lanes, w)
	c.VZEROUPPER()
	c.RET()
}

// stepFn is a blocked kernel's step over vector j of a block at element e (acc[s] its
// accumulator of set s): every lane, or with a lane mask k (laneMask) only k's lanes, the
// others neither read nor written and their accumulators' bits kept.
type stepFn func(e reg.Register, j int, acc []reg.VecVirtual, k reg.Register)

// chunkBlock emits the loop over blocks of lanes partials from element k (while k < limit,
// k advancing by lanes) in each of sets partial sets, under labels prefix, prefix_chunk
// and prefix_done: start sets each accumulator (vector j of set s), the chunk loop calls
// step(e, j, acc, nil) for e = k + c·W while e < n (acc[s]: vector j's accumulator of set
// s), and end takes the accumulators, accs[j][s]. At AVX-512 the walk is ragged: n need not
// be a multiple of W (nor reach k): the chunk with fewer than the block's elements left (the
// last; r = n − e of them, r ≤ 0 for a block past a short row's end) runs every vector
// under the mask of its lanes below n, so each partial takes exactly its elements below
// n, in the plan's order, and the others keep their bits, as the twin's shorter last chunk
// leaves them.
func (v isa) chunkBlock(prefix string, k reg.GPVirtual, w, n, limit reg.Register, lanes, sets int,
	start func(s, j int, acc reg.VecVirtual), step stepFn, end func(accs [][]reg.VecVirtual)) {
	c.Label(prefix)
	c.CMPQ(k, limit)
	c.JAE(LabelRef(prefix + "_done"))
	accs := make([][]reg.VecVirtual, lanes/v.lanes)
	for j := range accs {
		accs[j] = make([]reg.VecVirtual, sets)
		for s := range sets {
			accs[j][s] = v.vec()
			start(s, j, accs[j][s])
		}
	}
	e := c.GP64()
	c.MOVQ(k, e)
	c.Label(prefix + "_chunk")
	ragged := v.lanes == 16
	var r reg.GPVirtual
	if ragged {
		r = c.GP64()
		c.MOVQ(n, r)
		c.SUBQ(e, r)
		c.CMPQ(r, U32(lanes))
		c.JL(LabelRef(prefix + "_last")) // signed: r < 0 for a block past n
	}
	for j, acc := range accs {
		step(e, j, acc, nil)
	}
	c.ADDQ(w, e)
	c.CMPQ(e, n)
	c.JB(LabelRef(prefix + "_chunk"))
	if ragged {
		c.JMP(LabelRef(prefix + "_end"))
		c.Label(prefix + "_last") // e + W > n: no chunk after this one
		for j, acc := range accs {
			step(e, j, acc, v.laneMask(r, v.lanes*j))
		}
		c.Label(prefix + "_end")
	}
	end(accs)
	c.ADDQ(U32(lanes), k)
	c.JMP(LabelRef(prefix))
	c.Label(prefix + "_done")
}

// reductions emits the plan's partial accumulations: len(part) = W, a multiple of the lanes
// (len(part2) too), and len(t) a positive multiple of W. Blocks of v.block (or v.lanes)
// partials stay in registers while the loop walks the chunks c·W + k, so each partial sees
// its elements in the plan's order. AccumulateShift is a first pass over a row staged
// elsewhere: the partial sums of f32(t − x0), t only read. AccumulateDev is the second
// pass (plan v3): e = f32(t − shift) from the staged row, written back into t for the
// affine step, and the partial sums of e and of e², two partial sets in one sweep.
func reductions(v isa) {
	type variant struct {
		name, sig, doc string
		step           func(acc []reg.VecVirtual, t Mem, shift reg.VecVirtual, k reg.Register)
	}
	variants := []variant{
		{v.name + "AccumulateShift", "func(part, t []float32, shift float32)", "part[k] += f32(t[c·W+k] − shift)",
			func(acc []reg.VecVirtual, t Mem, shift reg.VecVirtual, k reg.Register) {
				d := v.vec()
				load(t, d, k)
				c.VSUBPS(shift, d, d)
				accumulate(d, acc[0], k)
			}},
		{v.name + "AccumulateDev", "func(part, part2, t []float32, shift float32)",
			"t[i] = e = f32(t[i] − shift), part[k] += e and part2[k] += f32(e·e), i = c·W+k,",
			func(acc []reg.VecVirtual, t Mem, shift reg.VecVirtual, k reg.Register) {
				d := v.vec()
				load(t, d, k)
				c.VSUBPS(shift, d, d)
				store(d, t, false, k)
				devStep(d, acc, false, k)
			}},
		{v.name + "AccumulateDevFMA", "func(part, part2, t []float32, shift float32)",
			"t[i] = e = f32(t[i] − shift), part[k] += e and part2[k] = fma(e, e, part2[k]), i = c·W+k,",
			func(acc []reg.VecVirtual, t Mem, shift reg.VecVirtual, k reg.Register) {
				d := v.vec()
				load(t, d, k)
				c.VSUBPS(shift, d, d)
				store(d, t, false, k)
				devStep(d, acc, true, k)
			}},
	}
	for _, zero := range []bool{false, true} {
		for _, vr := range variants {
			name := vr.name
			if zero {
				name += "Zero"
				text(name, vr.sig, name+" is "+vr.name+" on partials that start at +0 (the partials",
					"are not read): the same as clearing them first, in one pass.")
			} else {
				text(name, vr.sig, name+" does "+vr.doc+" for every chunk c;",
					v.span("len(part) = W must be a multiple of the lanes and len(t) a positive multiple of W."))
			}
			parts := []reg.GPVirtual{base("part")}
			if strings.Contains(vr.sig, "part2") {
				parts = append(parts, base("part2"))
			}
			t := base("t")
			shift := v.broadcastParam("shift")
			v.blocks(name, parts, length("part"), length("t"), zero, func(e reg.Register, j int, acc []reg.VecVirtual, k reg.Register) {
				vr.step(acc, f32(t, e, v.lanes*j), shift, k)
			})
		}
	}
}

// devStep adds the second pass's e (in d) to its partials: acc[0] += e, and acc[1] += e²,
// fma(e, e, acc[1]) with fma, else f32(e·e) then the add; under the lane mask k only in
// k's lanes.
func devStep(d reg.VecVirtual, acc []reg.VecVirtual, fma bool, k reg.Register) {
	accumulate(d, acc[0], k)
	if fma {
		if k != nil {
			c.VFMADD231PS(d, d, k, acc[1]) // merge-masked: the other lanes keep acc[1]
			return
		}
		c.VFMADD231PS(d, d, acc[1])
		return
	}
	sq := c.YMM()
	if d.Size() == 64 {
		sq = c.ZMM()
	}
	c.VMULPS(d, d, sq)
	accumulate(sq, acc[1], k)
}

// xStore is how a first pass writes the x output (s, or s rounded to the inputs' 16-bit
// format): not at all, with plain stores, or non-temporally.
type xStore int

const (
	xNone xStore = iota
	xPlain
	xNT
)

// sums emits the first pass of a row fused with the plan's first accumulation: s = a + b
// or (a + b) + d, staged into t = s (what the second pass reads), optionally x = s (plain
// or non-temporal stores), and part = the partial sums of f32(s − x0) from +0 (what a
// zero-start accumulation gives), or added onto part as it is (Acc: a later piece of a row
// that is summed a piece at a time). Like reductions, blocks of partials stay in registers
// while the loop walks the chunks c·W + k of the inputs, so every s[i] is computed once and
// its shifted value added to its partial in the plan's order.
func sums(v isa) {
	for _, vr := range []struct {
		three, acc bool
		x          xStore
	}{
		{false, false, xNone}, {true, false, xNone}, {false, false, xPlain}, {true, false, xPlain},
		{false, false, xNT}, {true, false, xNT}, {false, true, xNone}, {true, true, xNone},
	} {
		name, sig, what := v.name+"Add2Sum", "func(part, t, a, b []float32)", "a[i] + b[i]"
		if vr.three {
			name, sig, what = v.name+"Add3Sum", "func(part, t, a, b, d []float32)", "(a[i] + b[i]) + d[i]"
		}
		switch {
		case vr.x == xNT:
			name += "NT"
		case vr.x == xPlain:
			name += "X"
		case vr.acc:
			name += "Acc"
		}
		if vr.x != xNone {
			sig = strings.Replace(sig, "part, t, ", "part, t, x, ", 1)
		}
		from := "from +0"
		if vr.acc {
			from = "added onto part"
		}
		sig = strings.Replace(sig, "[]float32)", "[]float32, x0 float32)", 1)
		doc := []string{name + " writes t[i] = s[i] = " + what + ", and part[k] = Σ_c f32(s[c·W+k] − x0) " + from + " (chunks in order),"}
		switch vr.x {
		case xNT:
			doc = append(doc, "and x[i] = s[i] with non-temporal stores (x aligned to the vector; the caller fences),")
		case xPlain:
			doc = append(doc, "and x[i] = s[i],")
		}
		doc = append(doc, v.span("for i < len(t); len(part) = W must be a multiple of the lanes and len(t) a positive multiple of W."))
		text(name, sig, doc...)
		part, tp := base("part"), base("t")
		var x, d reg.GPVirtual
		if vr.x != xNone {
			x = base("x")
		}
		a, b := base("a"), base("b")
		if vr.three {
			d = base("d")
		}
		x0 := v.broadcastParam("x0")
		v.blocks(name, []reg.GPVirtual{part}, length("part"), length("t"), !vr.acc, func(e reg.Register, j int, acc []reg.VecVirtual, k reg.Register) {
			o := v.lanes * j
			s := v.vec()
			load(f32(a, e, o), s, k)
			addInto(f32(b, e, o), s, k, v.vec)
			if vr.three {
				addInto(f32(d, e, o), s, k, v.vec)
			}
			if vr.x != xNone {
				store(s, f32(x, e, o), vr.x == xNT, k)
			}
			store(s, f32(tp, e, o), false, k)
			sh := v.vec()
			c.VSUBPS(x0, s, sh)
			accumulate(sh, acc[0], k) // part[k] + (s − x0)
		})
	}
}

// sums16 emits the first pass for 16-bit x1 and x2 of one format (binary16 F16, bfloat16
// BF16), widened in the load: s = a + b, or (a + b) + d with d of the same format (Full:
// a full bias, or the bias row the caller passes a piece of), t = s, and part = the
// partial sums of f32(s − x0), from +0 or added onto part (Acc), in the plan's order as in sums. The
// X and NT variants also write the x output, s rounded back to the inputs' format, with
// plain or non-temporal stores in the same pass (a separate narrowing pass would need s,
// which only the x output keeps).
func sums16(v isa) {
	for _, bf := range []bool{false, true} {
		for _, full := range []bool{false, true} {
			for _, acc := range []bool{false, true} {
				for _, x := range []xStore{xNone, xPlain, xNT} {
					sum16Kernel(v, bf, full, acc, false, x)
				}
			}
			if v.lanes == 16 {
				for _, acc := range []bool{false, true} {
					for _, x := range []xStore{xNone, xPlain, xNT} {
						sum16Kernel(v, bf, full, acc, true, x)
					}
				}
			}
		}
	}
}

// sum16Kernel emits one kernel of sums16. A tree kernel (AVX-512 only) ends in the plan's
// tree (treeBlocks) and returns the row's sum; its signature is the same for every form
// (x and d are read only by the forms that have them), and W must be 64·2^k ≤ maxTree16W.
// The ops call it for a row's last piece: the whole row of a row summed in one piece, or,
// in the acc form, the last of a row's pieces of whole chunks.
//
// maxTree16W is the widest W of the 16-bit tree kernels (cpu's sum16Trees): foldTree's.
const maxTree16W = 2048

func sum16Kernel(v isa, bf, full, acc, tree bool, xs xStore) {
	t := "F16"
	if bf {
		t = "BF16"
	}
	name := v.name + "AddSum" + t
	sig, what := "func(part, t []float32, a, b []uint16)", "a[i] + b[i]"
	if full {
		name += "Full"
		sig, what = "func(part, t []float32, a, b, d []uint16)", "(a[i] + b[i]) + d[i]"
	}
	if acc {
		name += "Acc"
	}
	if tree {
		name += "Tree"
	}
	switch xs {
	case xNT:
		name += "NT"
	case xPlain:
		name += "X"
	}
	if xs != xNone {
		sig = strings.Replace(sig, "a, b", "x, a, b", 1)
	}
	sig = strings.Replace(sig, "[]uint16)", "[]uint16, x0 float32)", 1)
	from := "from +0"
	if acc {
		from = "added onto part"
	}
	if tree {
		sig = "func(part, t []float32, x, a, b, d []uint16, x0 float32) float32"
		from += ", then returns the plan's tree of them (part is left as scratch)"
	}
	doc := []string{name + " writes t[i] = s[i] = " + what + " with the " + strings.ToLower(t) + " inputs widened",
		"exactly, and part[k] = Σ_c f32(s[c·W+k] − x0) " + from + " (chunks in order),"}
	switch xs {
	case xNT:
		doc = append(doc, "and x[i] = s[i] rounded to "+strings.ToLower(t)+" with non-temporal stores (x aligned to a",
			"vector of 16-bit values; the caller fences),")
	case xPlain:
		doc = append(doc, "and x[i] = s[i] rounded to "+strings.ToLower(t)+",")
	}
	if tree {
		doc = append(doc, v.span(fmt.Sprintf("for i < len(t); len(part) = W must be 64·2^k ≤ %d, and len(t) a positive multiple of W.", maxTree16W)))
	} else {
		doc = append(doc, v.span("for i < len(t); len(part) = W must be a multiple of the lanes and len(t) a positive multiple of W."))
	}
	text(name, sig, doc...)
	part, tp := base("part"), base("t")
	var x, d reg.GPVirtual
	if xs != xNone {
		x = base("x")
	}
	a, b := base("a"), base("b")
	if full {
		d = base("d")
	}
	var k bf16Consts
	if xs != xNone && bf {
		k = v.bf16Consts()
	}
	x0 := v.broadcastParam("x0")
	step := func(e reg.Register, j int, acc []reg.VecVirtual, m reg.Register) {
		o := v.lanes * j
		r := v.widen16(bf, u16(a, e, o), m)
		c.VADDPS(v.widen16(bf, u16(b, e, o), m), r, r)
		if full {
			c.VADDPS(v.widen16(bf, u16(d, e, o), m), r, r)
		}
		store(r, f32(tp, e, o), false, m)
		sh := v.vec()
		c.VSUBPS(x0, r, sh)
		accumulate(sh, acc[0], m) // part[k] + (s − x0)
		switch {
		case xs != xNone && bf:
			v.narrowBF16(k, r, u16(x, e, o), xs == xNT, m) // clobbers r, after its last use
		case xs != xNone:
			v.narrowF16(r, u16(x, e, o), xs == xNT, m)
		}
	}
	if tree {
		treeBlocks(name, []reg.GPVirtual{part}, length("part"), length("t"), maxTree16W, !acc, step)
		return
	}
	v.blocks(name, []reg.GPVirtual{part}, length("part"), length("t"), !acc, step)
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

// foldQuads emits the first step of a vector row's tree (plan.FoldQuads): part[t] =
// (part[4t] + part[4t+1]) + (part[4t+2] + part[4t+3]), 32 partials a step. VHADDPS adds
// neighbours as (first + second), so two rounds give each quad in the plan's order; the
// quads come out lane-interleaved and a permute puts them back in order.
func foldQuads() {
	text("avx2FoldQuads", "func(part []float32)",
		"avx2FoldQuads folds part[4t:4t+4] into part[t] as (a + b) + (c + d) for t < len(part)/4;",
		"len(part) must be a multiple of 32.")
	p := base("part")
	n := length("part")
	idx := c.YMM()
	ord := c.GP64()
	// quads come out as [q0 q2 q4 q6 | q1 q3 q5 q7]: gather lanes 0 4 1 5 2 6 3 7
	c.MOVQ(U64(0x0000000400000000), ord) // dwords 0, 4
	c.VMOVQ(ord, idx.AsX())
	c.MOVQ(U64(0x0000000500000001), ord) // 1, 5
	t := c.XMM()
	c.VMOVQ(ord, t)
	c.VPUNPCKLQDQ(t, idx.AsX(), idx.AsX())
	hi := c.XMM()
	c.MOVQ(U64(0x0000000600000002), ord) // 2, 6
	c.VMOVQ(ord, hi)
	c.MOVQ(U64(0x0000000700000003), ord) // 3, 7
	c.VMOVQ(ord, t)
	c.VPUNPCKLQDQ(t, hi, hi)
	c.VINSERTI128(U8(1), hi, idx, idx)
	in, out := c.GP64(), c.GP64()
	c.XORQ(in, in)
	c.XORQ(out, out)
	c.Label("fold_loop")
	c.CMPQ(in, n)
	c.JAE(LabelRef("fold_done"))
	a, b, d, e := c.YMM(), c.YMM(), c.YMM(), c.YMM()
	c.VMOVUPS(f32(p, in, 0), a)
	c.VMOVUPS(f32(p, in, 8), b)
	c.VMOVUPS(f32(p, in, 16), d)
	c.VMOVUPS(f32(p, in, 24), e)
	c.VHADDPS(b, a, a) // [a01 a23 b01 b23 | a45 a67 b45 b67]
	c.VHADDPS(e, d, d) // [d01 d23 e01 e23 | d45 d67 e45 e67]
	c.VHADDPS(d, a, a) // [q0 q2 q4 q6 | q1 q3 q5 q7]
	c.VPERMPS(a, idx, a)
	c.VMOVUPS(a, f32(p, out, 0))
	c.ADDQ(U32(32), in)
	c.ADDQ(U32(8), out)
	c.JMP(LabelRef("fold_loop"))
	c.Label("fold_done")
	c.VZEROUPPER()
	c.RET()
}

// foldTree512 emits a vector row's whole tree for AVX-512 (plan.Plan.Tree with Vec): the
// quads folded a group of 64 partials at a time (foldGroup), the halving's steps between
// groups as whole-vector adds (the same position in each), the steps within the last
// vector in registers (groupTree), returning the sum. part is only read.
func foldTree512() {
	text("avx512FoldTree", "func(part []float32) float32",
		"avx512FoldTree returns plan.Plan.Tree of a vector row over part, without writing it: the quads",
		"folded as (a + b) + (c + d), then the halving; len(part) must be 64·2^k, k ≤ 5.")
	p := base("part")
	n := length("part")
	ret := returnSlot()
	fold := func(g int) reg.VecVirtual {
		var v [4]reg.VecVirtual
		for j := range v {
			v[j] = c.ZMM()
			c.VMOVUPS(Mem{Base: p, Disp: 4 * (64*g + 16*j)}, v[j])
		}
		return foldGroup(v)
	}
	upper := func(g int) Op { return fold(g) }
	byWidth("foldtree", n, 2048, func(w int) {
		groupTree(w/64, fold, upper, ret.Addr)
		c.VZEROUPPER()
		c.RET()
	})
}

// sumTrees512 emits the first pass's sum of a staged row t (a first pass that wrote t
// without summing it) that ends in the tree of a vector row, for AVX-512 (treeBlocks): the
// bits of avx512AccumulateShiftZero then avx512FoldTree, in one kernel.
func sumTrees512() {
	text("avx512SumTree", "func(part, t []float32, shift float32) float32",
		"avx512SumTree returns the plan's sum of f32(t[i] − shift) over a vector row: the partials from +0",
		"as avx512AccumulateShiftZero, then avx512FoldTree; len(part) = W must be 64·2^k, k ≤ 5, and",
		avx512.span("len(t) a positive multiple of W. part is scratch (its first W/4 written)."))
	p, t := base("part"), base("t")
	shift := avx512.broadcastParam("shift")
	treeBlocks("avx512SumTree", []reg.GPVirtual{p}, length("part"), length("t"), 2048, true, func(e reg.Register, j int, acc []reg.VecVirtual, k reg.Register) {
		d := c.ZMM()
		load(f32(t, e, 16*j), d, k)
		c.VSUBPS(shift, d, d)
		accumulate(d, acc[0], k)
	})
	for _, fma := range []bool{false, true} {
		form, how := "Dev", "f32(e·e)"
		if fma {
			form, how = "DevFMA", "fma(e, e, ·)"
		}
		name := "avx512" + form + "Tree"
		text(name, "func(part, part2, t []float32, shift float32) (sum, sumSq float32)",
			name+" is the second pass of a vector row with its two trees: e = f32(t[i] − shift) written",
			"back into t, and the plan's sums of e and of "+how+", the partials from +0 as",
			"avx512Accumulate"+form+"Zero, then avx512FoldTree of each set; len(part) = len(part2) = W must",
			avx512.span("be 64·2^k, k ≤ 5, and len(t) a positive multiple of W. part and part2 are scratch (their"),
			"first W/4 written).")
		parts := []reg.GPVirtual{base("part"), base("part2")}
		t := base("t")
		shift := avx512.broadcastParam("shift")
		treeBlocks(name, parts, length("part"), length("t"), 2048, true, func(e reg.Register, j int, acc []reg.VecVirtual, k reg.Register) {
			d := c.ZMM()
			load(f32(t, e, 16*j), d, k)
			c.VSUBPS(shift, d, d)
			store(d, f32(t, e, 16*j), false, k)
			devStep(d, acc, fma, k)
		})
	}
}

// devTrees2 emits avx512DevTree's kernels (the second pass of a vector row with its two
// trees) for AVX2 (treeBlocks2): the bits of avx2AccumulateDev[FMA]Zero then
// plan.Plan.Tree of each set, in place of the accumulation then planTree (avx2FoldQuads and
// avx2Tree per set: five calls, each set's partials stored, reloaded, folded and stored
// again). On the EPYC (Zen 5), old and new alternated: devSums of a 768-element row
// (W = 128) about 106 -> 75 ns; AddLayerNorm (4096, 768) f32 1.84 -> 1.71 ms, f16 1.90 ->
// 1.73 ms, EmbedLayerNorm f16 (64, 512, 1024) 27.8 -> 25.8 ms (medians of five, one thread).
func devTrees2() {
	for _, fma := range []bool{false, true} {
		form, how := "Dev", "f32(e·e)"
		if fma {
			form, how = "DevFMA", "fma(e, e, ·)"
		}
		name := "avx2" + form + "Tree"
		text(name, "func(part, part2, t []float32, shift float32) (sum, sumSq float32)",
			name+" is the second pass of a vector row with its two trees: e = f32(t[i] − shift) written",
			"back into t, and the plan's sums of e and of "+how+", the partials from +0 as",
			"avx2Accumulate"+form+"Zero, then plan.Plan.Tree of each set; len(part) = len(part2) = W must",
			"be 64·2^k, k ≤ 5, and len(t) a positive multiple of W. part and part2 are scratch (their",
			"first W/4 written).")
		parts := []reg.GPVirtual{base("part"), base("part2")}
		t := base("t")
		shift := avx2.broadcastParam("shift")
		treeBlocks2(name, parts, length("part"), length("t"), 2048, func(e reg.Register, j int, acc []reg.VecVirtual, _ reg.Register) {
			d := c.YMM()
			c.VMOVUPS(f32(t, e, 8*j), d)
			c.VSUBPS(shift, d, d)
			c.VMOVUPS(d, f32(t, e, 8*j))
			devStep(d, acc, fma, nil) // avx2: never masked
		})
	}
}

// treeBlocks2 is treeBlocks for AVX2, the partials from +0: blocks of 32 partials (four
// vectors a set, avx2.block) walk the chunks, each block's quads folded in registers
// (foldGroup2) and stored to each set from byte k (k the block's first element, so group
// g's vector lands at part[8g:], over partials already loaded), then the halving over
// the W/32 vectors of quads (groupTree2) returns set s's sum as result s.
func treeBlocks2(name string, parts []reg.GPVirtual, w, n reg.Register, maxW int, step stepFn) {
	rets := make([]*gotypes.Basic, len(parts))
	for s := range rets {
		r, err := c.ReturnIndex(s).Resolve()
		if err != nil {
			fail(err)
		}
		rets[s] = r
	}
	k := c.GP64()
	c.XORQ(k, k)
	avx2.chunkBlock(name+"_group", k, w, n, w, avx2.block, len(parts), func(_, _ int, acc reg.VecVirtual) {
		avx2.zero(acc) // +0, as clear leaves it
	}, step, func(accs [][]reg.VecVirtual) {
		for s, p := range parts {
			q := foldGroup2([4]reg.VecVirtual{accs[0][s], accs[1][s], accs[2][s], accs[3][s]})
			c.VMOVUPS(q, Mem{Base: p, Index: k, Scale: 1})
		}
	})
	byWidth(name, w, maxW, func(w int) {
		for s, p := range parts {
			groupTree2(w/32, p, rets[s])
		}
		c.VZEROUPPER()
		c.RET()
	})
}

// foldGroup2 folds one group of 32 partials (four vectors) into its 8 quads, (a + b) + (c
// + d), as avx2FoldQuads does but without its permute: in 128-bit lane l, position m of
// the result holds the group's quad 2m + l (groupTree2 adds by that layout).
func foldGroup2(v [4]reg.VecVirtual) reg.VecVirtual {
	c.VHADDPS(v[1], v[0], v[0]) // [a01 a23 b01 b23 | a45 a67 b45 b67]
	c.VHADDPS(v[3], v[2], v[2])
	c.VHADDPS(v[2], v[0], v[0]) // [q0 q2 q4 q6 | q1 q3 q5 q7]
	return v[0]
}

// groupTree2 emits the halving over the quads of a vector row after foldGroup2: groups
// vectors of quads (a power of two ≥ 2) at p, one layout in all, so the steps between
// vectors add the same positions; while more than 16 remain, a step adds in memory (the
// registers hold at most eight), then the rest in registers, and within the last vector
// quad distance 4 (positions 2-3 onto 0-1 of each lane), 2 (1 onto 0) and 1 (lane 1 onto
// lane 0), storing the sum to ret.
func groupTree2(groups int, p reg.GPVirtual, ret *gotypes.Basic) {
	vec := func(g int) Mem { return Mem{Base: p, Disp: 32 * g} }
	for ; groups > 16; groups /= 2 {
		for g := range groups / 2 {
			v := c.YMM()
			c.VMOVUPS(vec(g), v)
			c.VADDPS(vec(g+groups/2), v, v)
			c.VMOVUPS(v, vec(g))
		}
	}
	r := make([]reg.VecVirtual, groups/2)
	for g := range r {
		r[g] = c.YMM()
		c.VMOVUPS(vec(g), r[g])
		c.VADDPS(vec(g+groups/2), r[g], r[g])
	}
	for len(r) > 1 {
		h := len(r) / 2
		for q := range h {
			c.VADDPS(r[q+h], r[q], r[q])
		}
		r = r[:h]
	}
	q, t := r[0], c.YMM()
	c.VPERMILPS(U8(0xee), q, t) // positions 2, 3 onto 0, 1 of each lane
	c.VADDPS(t, q, q)           // quad distance 4
	c.VPERMILPS(U8(0x55), q, t) // 1 onto 0
	c.VADDPS(t, q, q)           // 2
	x := c.XMM()
	c.VEXTRACTF128(U8(1), q, x)
	c.VADDSS(x, q.AsX(), x) // 1: lane 0 with lane 1
	c.VMOVSS(x, ret.Addr)
}

// treeBlocks is blocks (AVX-512) ending in the plan's tree of a vector row with W = w =
// 64·2^k ≤ maxW (≤ 2048), for each of the partial sets parts (one, or the second pass's
// two): the accumulators start at +0 (zero) or from the set (a row's last piece, onto the
// partials of the earlier ones); each group of 64 partials is folded into its quads
// (foldGroup) before it leaves the registers, and only the W/4 quads go to the set (in the
// fold's order, group g's vector at part[16g:], over partials already loaded); the halving
// then runs over them as foldTree512's does and the function returns the sums, set s's as
// result s. Every addition is the plan's, in its order: the bits of the blocks kernel then
// avx512FoldTree, without the partials' round trip through memory and a call. The sets
// are scratch after; the walk needs n a multiple of W.
func treeBlocks(name string, parts []reg.GPVirtual, w, n reg.Register, maxW int, zero bool, step stepFn) {
	rets := make([]Mem, len(parts))
	for s := range rets {
		r, err := c.ReturnIndex(s).Resolve()
		if err != nil {
			fail(err)
		}
		rets[s] = r.Addr
	}
	treeBlocksTo(name, parts, rets, w, n, maxW, zero, step, func() {
		c.VZEROUPPER()
		c.RET()
	})
}

// treeBlocksTo is treeBlocks storing set s's sum to rets[s], each width's tree ending in
// finish (treeBlocks': VZEROUPPER and RET) instead of returning: a kernel that goes on
// (embedStats512's second pass after its first).
func treeBlocksTo(name string, parts []reg.GPVirtual, rets []Mem, w, n reg.Register, maxW int, zero bool, step stepFn, finish func()) {
	k := c.GP64() // element index of the block: its quads go to each set from byte k (element k/4)
	c.XORQ(k, k)
	block := func(label string, groups int, limit reg.Register) {
		avx512.chunkBlock(name+"_"+label, k, w, n, limit, 64*groups, len(parts), func(s, j int, acc reg.VecVirtual) {
			if zero {
				avx512.zero(acc) // +0, as clear leaves it
			} else {
				c.VMOVUPS(f32(parts[s], k, 16*j), acc)
			}
		}, step, func(accs [][]reg.VecVirtual) {
			for s, p := range parts {
				for g := range groups {
					q := foldGroup([4]reg.VecVirtual{accs[4*g][s], accs[4*g+1][s], accs[4*g+2][s], accs[4*g+3][s]})
					c.VMOVUPS(q, Mem{Base: p, Index: k, Scale: 1, Disp: 64 * g})
				}
			}
		})
	}
	pairs := c.GP64()
	c.MOVQ(w, pairs)
	c.ANDQ(I32(-avx512.block), pairs)
	block("pairs", avx512.block/64, pairs)
	block("group", 1, w) // W = 64: one group
	byWidth(name, w, maxW, func(w int) {
		for s, p := range parts {
			load := func(g int) reg.VecVirtual { // group g's quads, as the walk stored them
				q := c.ZMM()
				c.VMOVUPS(Mem{Base: p, Disp: 64 * g}, q)
				return q
			}
			upper := func(g int) Op { return Mem{Base: p, Disp: 64 * g} } // added from memory
			groupTree(w/64, load, upper, rets[s])
		}
		finish()
	})
}

// returnSlot is the current function's float32 result.
func returnSlot() *gotypes.Basic {
	ret, err := c.ReturnIndex(0).Resolve()
	if err != nil {
		fail(err)
	}
	return ret
}

// foldGroup folds one group of 64 partials (four vectors) into its 16 quads, (a + b) + (c
// + d), without VHADDPS (which has no ZMM form): VSHUFPS splits two vectors into the even
// and odd members of each pair, whose sum is the pairs; once more gives each quad's first
// and second pairs. In 128-bit lane l, position m of the result holds the group's quad
// 4m + l.
func foldGroup(v [4]reg.VecVirtual) reg.VecVirtual {
	pairs := func(lo, hi reg.VecVirtual) reg.VecVirtual {
		e, o := c.ZMM(), c.ZMM()
		c.VSHUFPS(U8(0x88), hi, lo, e) // per lane: lo0 lo2 hi0 hi2
		c.VSHUFPS(U8(0xdd), hi, lo, o) // lo1 lo3 hi1 hi3
		c.VADDPS(o, e, e)              // the even member first
		return e
	}
	return pairs(pairs(v[0], v[1]), pairs(v[2], v[3]))
}

// byWidth emits body once for each W = maxW, maxW/2, …, 64, under labels prefix_W, the
// widest that n (W at run time) is not below taken: a tree unrolled per width.
func byWidth(prefix string, n reg.Register, maxW int, body func(w int)) {
	for w := maxW; w >= 64; w /= 2 {
		c.Label(fmt.Sprintf("%s_%d", prefix, w))
		if w > 64 {
			c.CMPQ(n, U32(w))
			c.JB(LabelRef(fmt.Sprintf("%s_%d", prefix, w/2)))
		}
		body(w)
	}
}

// groupTree emits a vector row's tree after the fold: the halving over the folded quads of
// its groups (a power of two of them, each one vector, group(g) emitting g's into a
// register; the same position in each), then within the last vector, storing the sum to
// ret (the caller returns). The first step adds group g + groups/2 (upper: as a register or a memory operand) to
// g as the groups come. Within a vector the steps pair
// positions 4l+m with 4l+m+2 (quad distance 8), 4l with 4l+1 (4), lanes 0-1 with 2-3 (2),
// lane 0 with lane 1 (1): every addition is one of the plan's, its lower partial first, so
// no permute puts the quads back in order.
func groupTree(groups int, group func(g int) reg.VecVirtual, upper func(g int) Op, ret Mem) {
	var r []reg.VecVirtual
	if groups == 1 {
		r = append(r, group(0))
	}
	for g := range groups / 2 {
		lo := group(g)
		c.VADDPS(upper(g+groups/2), lo, lo)
		r = append(r, lo)
	}
	for len(r) > 1 {
		h := len(r) / 2
		for q := range h {
			c.VADDPS(r[q+h], r[q], r[q])
		}
		r = r[:h]
	}
	q, t := r[0], c.ZMM()
	c.VPERMILPS(U8(0xee), q, t) // positions 4l+2, 4l+3 onto 4l, 4l+1
	c.VADDPS(t, q, q)           // quad distance 8
	c.VPERMILPS(U8(0x55), q, t) // 4l+1 onto 4l
	c.VADDPS(t, q, q)           // 4
	y, hi := c.YMM(), c.YMM()
	c.VEXTRACTF64X4(U8(1), q, hi)
	c.VADDPS(hi, q.AsY(), y) // 2: lanes 0-1 with 2-3
	x, top := c.XMM(), c.XMM()
	c.VEXTRACTF128(U8(1), y, top)
	c.VADDPS(top, y.AsX(), x) // 1
	c.VMOVSS(x, ret)
}

// embedF16 emits EmbedLayerNorm's staged binary16 sums with F16C: each stage a float32
// addition between widening and narrowing conversions.
func embedF16(v isa) {
	v.embedSums(v.name, "(VCVTPS2PH imm 0: nearest-even).", func(bits, w, p, g reg.GPVirtual, i reg.Register, off int, k reg.Register) reg.VecVirtual {
		a := v.widen16(false, u16(w, i, off), k)
		h := v.half()
		if g != nil { // rnd16(w + g) first
			c.VADDPS(v.widen16(false, u16(g, i, off), k), a, a)
			c.VCVTPS2PH(U8(0), a, h)
			c.VCVTPH2PS(h, a)
		}
		c.VADDPS(v.widen16(false, u16(p, i, off), k), a, a)
		c.VCVTPS2PH(U8(0), a, h)
		v.store16(h, u16(bits, i, off), false, k)
		c.VCVTPH2PS(h, a)
		return a
	})
}

// embedStep computes the staged sum of the vector at element i+off, stores its bits and
// returns it as float32; under the lane mask k (nil: every lane) only k's lanes are read
// and stored.
type embedStep func(bits, w, p, g reg.GPVirtual, i reg.Register, off int, k reg.Register) reg.VecVirtual

// embedSums emits the staged-sum kernels prefix+"EmbedSumF16Seg" (with a segment row g)
// and prefix+"EmbedSumF16" (without: g is nil), h = rnd16(rnd16(w + g) + p) or
// rnd16(w + p) as bits and float32 x over whole vectors of x; and the row's first pass
// fused with them, prefix+"EmbedShiftF16[Seg][Acc]": h as bits, t = f32(h), and the
// partial sums of f32(t − x0) in the plan's order (the blocks of reductions), from +0 or added onto
// part (Acc). step computes the vector at element i+off, how says how (the doc's second line).
func (v isa) embedSums(prefix, how string, step embedStep) {
	for _, seg := range []bool{true, false} {
		name, sig, what := prefix+"EmbedSumF16Seg", "func(x []float32, bits []uint16, w, p, g []uint16)", "rnd16(rnd16(w[i] + g[i]) + p[i])"
		if !seg {
			name, sig, what = prefix+"EmbedSumF16", "func(x []float32, bits []uint16, w, p []uint16)", "rnd16(w[i] + p[i])"
		}
		text(name, sig, v.span(name+" writes h = "+what+" as bits[i] and float32 x[i], for whole vectors of x"), how)
		x, bits, w, p := base("x"), base("bits"), base("w"), base("p")
		var g reg.GPVirtual
		if seg {
			g = base("g")
		}
		v.loopTail(name, length("x"), 2, func(i reg.Register, off int, k reg.Register) {
			store(step(bits, w, p, g, i, off, k), f32(x, i, off), false, k)
		})

		for _, acc := range []bool{false, true} {
			name := strings.Replace(name, "EmbedSum", "EmbedShift", 1)
			from := "from +0"
			if acc {
				name += "Acc"
				from = "added onto part"
			}
			sig := strings.Replace(strings.Replace(sig, "x []float32", "part, t []float32", 1), "[]uint16)", "[]uint16, x0 float32)", 1)
			text(name, sig, name+" writes h = "+what+" as bits[i], t[i] = f32(h), and part[k] =",
				"Σ_c f32(t[c·W+k] − x0) "+from+" (chunks in order), for i < len(t); len(part) = W must be a",
				v.span("multiple of the lanes and len(t) a positive multiple of W "+how))
			part, t, bits, w, p := base("part"), base("t"), base("bits"), base("w"), base("p")
			var g reg.GPVirtual
			if seg {
				g = base("g")
			}
			x0 := v.broadcastParam("x0")
			v.blocks(name, []reg.GPVirtual{part}, length("part"), length("t"), !acc, func(e reg.Register, j int, sum []reg.VecVirtual, k reg.Register) {
				o := v.lanes * j
				f := step(bits, w, p, g, e, o, k)
				store(f, f32(t, e, o), false, k)
				c.VSUBPS(x0, f, f)
				accumulate(f, sum[0], k) // part[k] + (t − x0)
			})
		}
		if v.lanes == 16 {
			embedShiftTree512(prefix, how, what, seg, step)
		}
	}
}

// embedShiftTree512 emits prefix+"EmbedShiftTreeF16[Seg]", a short token's first pass and
// its shift in one kernel (AVX-512: the tree kernels are this width's): x0 = the staged
// sum of element 0, the first pass fused with the staged sum (EmbedShift's), its tree
// (treeBlocksTo), then m1 = f32(sum·invH) and shift = f32(x0 + m1) as plan.Plan.Stats
// computes them. Each step is one the Go path takes between EmbedShift and FoldTree, in its
// order, so the bits are theirs; what goes is x0's widening in Go (embedFirst), the
// partials' round trip through memory and a call. (The second pass, avx512DevTree, stays
// a kernel of its own: with both walks in one function avo's allocator runs out of
// registers.)
func embedShiftTree512(prefix, how, what string, seg bool, step embedStep) {
	name, sig := prefix+"EmbedShiftTreeF16", "func(part, t []float32, bits, w, p []uint16, invH float32) (shift float32)"
	if seg {
		name += "Seg"
		sig = strings.Replace(sig, "w, p []uint16", "w, p, g []uint16", 1)
	}
	text(name, sig, name+" writes h = "+what+" as bits[i] and t[i] = f32(h),",
		"and returns shift = f32(x0 + f32(sum·invH)), x0 = t[0] and sum the plan's sum of f32(t − x0)",
		"(plan.Plan.Stats' first steps); len(part) = W must be 64·2^k, k ≤ 5, and len(t) a positive",
		"multiple of W. part is scratch "+how)
	part, t, bits, w, p := base("part"), base("t"), base("bits"), base("w"), base("p")
	var g reg.GPVirtual
	if seg {
		g = base("g")
	}
	shiftTree512(name, part, t, bits, w, p, g, step)
}

// embedShiftTreeF32 emits avx512EmbedShiftTreeF32[Seg], embedShiftTree512's kernel for
// float32 rows without the embedding_sum output: s = w + p or (w + p) + g, added as
// avx512Add[23]Sum adds them (and Go's x0 = word[0] + pos[0] + g[0]), staged into t, then
// the first pass, its tree and the shift: the bits of avx512Add[23]Sum, avx512FoldTree and
// plan.Plan.Stats' first steps, without their calls and the Go between them.
func embedShiftTreeF32() {
	for _, seg := range []bool{false, true} {
		name, sig, what := "avx512EmbedShiftTreeF32", "func(part, t, w, p []float32, invH float32) (shift float32)", "w[i] + p[i]"
		if seg {
			name, sig, what = name+"Seg", "func(part, t, w, p, g []float32, invH float32) (shift float32)", "(w[i] + p[i]) + g[i]"
		}
		text(name, sig, name+" writes t[i] = "+what+" and returns shift = f32(x0 + f32(sum·invH)),",
			"x0 = t[0] and sum the plan's sum of f32(t − x0) (plan.Plan.Stats' first steps); len(part) =",
			"W must be 64·2^k, k ≤ 5, and len(t) a positive multiple of W. part is scratch.")
		part, t, w, p := base("part"), base("t"), base("w"), base("p")
		var g reg.GPVirtual
		if seg {
			g = base("g")
		}
		shiftTree512(name, part, t, nil, w, p, g, func(_, w, p, g reg.GPVirtual, i reg.Register, off int, k reg.Register) reg.VecVirtual {
			s := c.ZMM()
			load(f32(w, i, off), s, k)
			addInto(f32(p, i, off), s, k, c.ZMM)
			if g != nil {
				addInto(f32(g, i, off), s, k, c.ZMM)
			}
			return s
		})
	}
}

// shiftTree512 is the body of embedShiftTree512's and embedShiftTreeF32's kernels: x0 from
// step at element 0, the walk staging each vector into t with step (bits passed on), its
// tree, and the shift returned.
func shiftTree512(name string, part, t, bits, w, p, g reg.GPVirtual, step embedStep) {
	ret := returnSlot()
	// x0: element 0's staged sum, from the first vector (len(t) ≥ W ≥ 64); the walk stages
	// it again, to the same bits.
	zero := c.GP64()
	c.XORQ(zero, zero)
	x0s := step(bits, w, p, g, zero, 0, nil)
	x0 := c.ZMM()
	c.VBROADCASTSS(x0s.AsX(), x0)
	treeBlocksTo(name, []reg.GPVirtual{part}, []Mem{ret.Addr}, length("part"), length("t"), 2048, true, func(e reg.Register, j int, acc []reg.VecVirtual, k reg.Register) {
		o := 16 * j
		f := step(bits, w, p, g, e, o, k)
		store(f, f32(t, e, o), false, k)
		c.VSUBPS(x0, f, f)
		accumulate(f, acc[0], k) // part[k] + (t − x0)
	}, func() { c.JMP(LabelRef(name + "_shift")) })
	c.Label(name + "_shift")
	inv, err := c.Param("invH").Resolve()
	if err != nil {
		fail(err)
	}
	m1, sh := c.XMM(), c.XMM()
	c.VMOVSS(ret.Addr, m1)
	c.VMULSS(inv.Addr, m1, m1) // m1 = sum·InvH, sum the first operand
	c.VADDSS(m1, x0.AsX(), sh) // shift = x0 + m1, x0 the first operand
	c.VMOVSS(sh, ret.Addr)
	c.VZEROUPPER()
	c.RET()
}

// masks emits the two mask_index rules over a row of the int32 mask (spec §A.4), for the
// whole vectors of it: how many elements are 1, and where the first 0 is.
func masks(v isa) {
	n := v.name
	text(n+"MaskCountOnes", "func(m []int32) int32",
		n+"MaskCountOnes returns how many of the whole vectors' elements of m are 1.")
	{
		ones := v.broadcast32(1)
		acc := v.vec()
		v.zero(acc)
		v.maskWalk(n+"MaskCountOnes", func(m Mem, _ reg.Register) {
			if v.lanes == 16 {
				eq := c.K()
				c.VPCMPEQD(m, ones, eq)
				c.VPADDD(ones, acc, eq, acc) // +1 in the lanes that are 1
			} else {
				eq := v.vec()
				c.VPCMPEQD(m, ones, eq)
				c.VPSUBD(eq, acc, acc) // −(−1) in the lanes that are 1
			}
		})
		y := acc
		if v.lanes == 16 {
			hi := c.YMM()
			c.VEXTRACTI64X4(U8(1), acc, hi)
			y = c.YMM()
			c.VPADDD(hi, acc.AsY(), y)
		}
		x, t := c.XMM(), c.XMM()
		c.VEXTRACTI128(U8(1), y, x)
		c.VPADDD(x, y.AsX(), x)
		c.VPSHUFD(U8(0x4e), x, t) // lanes 2 3 0 1
		c.VPADDD(t, x, x)
		c.VPSHUFD(U8(0xb1), x, t) // lanes 1 0 3 2
		c.VPADDD(t, x, x)
		r := c.GP32()
		c.VMOVD(x, r)
		c.Store(r, c.ReturnIndex(0))
		c.VZEROUPPER()
		c.RET()
	}

	text(n+"MaskFirstZero", "func(m []int32) int",
		n+"MaskFirstZero returns the index of the first 0 among the whole vectors' elements of m,",
		"or their count when none is 0.")
	{
		zero := v.vec()
		v.zero(zero)
		bits := c.GP32()
		var at reg.Register
		end := v.maskWalk(n+"MaskFirstZero", func(m Mem, i reg.Register) {
			if v.lanes == 16 {
				eq := c.K()
				c.VPCMPEQD(m, zero, eq)
				c.KMOVW(eq, bits)
			} else {
				eq := v.vec()
				c.VPCMPEQD(m, zero, eq)
				c.VMOVMSKPS(eq, bits)
			}
			c.TESTL(bits, bits)
			c.JNZ(LabelRef(n + "MaskFirstZero_found"))
			at = i
		})
		c.Store(end, c.ReturnIndex(0)) // none is 0
		c.VZEROUPPER()
		c.RET()
		c.Label(n + "MaskFirstZero_found")
		r := c.GP64()
		c.BSFL(bits, r.As32()) // the lowest lane that is 0; writing the 32-bit half clears the rest
		c.ADDQ(at, r)
		c.Store(r, c.ReturnIndex(0))
		c.VZEROUPPER()
		c.RET()
	}
}

// maskWalk is walk over the whole vectors of the int32 slice m, one vector a step, with
// body given the address of m[i] and i; it returns the whole vectors' element count.
func (v isa) maskWalk(name string, body func(m Mem, i reg.Register)) reg.Register {
	p := base("m")
	return v.walk(name, length("m"), 1, func(i reg.Register, _ int) {
		body(Mem{Base: p, Index: i, Scale: 4}, i)
	})
}

func copyNT(v isa) {
	n := v.name
	text(n+"CopyNT", "func(dst, src []float32)",
		n+"CopyNT writes dst[i] = src[i] for whole vectors of dst with non-temporal stores: dst",
		"must be aligned to the vector, and the caller fences before the values are shared.")
	d, s := base("dst"), base("src")
	v.loop(n+"CopyNT", length("dst"), 4, func(i reg.Register, off int) {
		t := v.vec()
		c.VMOVUPS(f32(s, i, off), t)
		c.VMOVNTPS(t, f32(d, i, off))
	})
}

// memory emits the kernels that only steer the memory system, for every level: software
// prefetch of a row that is about to be read, and the store fence that orders
// non-temporal stores before the result is shared.
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

	text("avx2Fence", "func()",
		"avx2Fence is SFENCE: non-temporal stores before it are globally visible before any store after it.")
	c.SFENCE()
	c.RET()
}
