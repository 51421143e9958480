// Package shaders holds the WGSL kernels of both ops as text/template templates,
// embedded in the binary, and renders them from a parameter struct. Rendered source is
// cached per parameter set, so a backend can ask for a kernel on every call.
//
// Who imports it: the dawn backend, and anyone who runs the kernels in a WebGPU runtime of
// their own. Everything exported is what running them takes: the variant structs (Embed,
// AddLN) and their choosers (VecOK, PrivateFor, Vectorize), the binding layout (each
// template's header, IntBindings), the probe kernel that calibrates a device (RenderProbe
// and its modes: which f16 conversions and contractions it rounds as the CPU does), and the
// ops' manifests. Users of the ops themselves import the root package instead.
//
// Every template includes common/common.wgsl.tmpl: the plan's tree reduction
// (internal/plan), the exact rstd routine of spec §C.4 and f16/bf16 conversions that
// need no shader-f16: in integer arithmetic, or for f16 by the builtins where the device was
// found to convert exactly (Fast16). The binding layout of each op is documented in its
// template and mirrored by the dawn backend.
package shaders

import (
	"bytes"
	"embed"
	"fmt"
	"sync"
	"text/template"

	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/plan"
)

//go:embed common/*.wgsl.tmpl embedlayernorm/*.wgsl.tmpl addlayernorm/*.wgsl.tmpl probe/*.wgsl.tmpl
var files embed.FS

// Entry is the entry point of every kernel.
const Entry = "main"

// MaxPrivate is the most elements per plan invocation a kernel keeps in registers across
// the passes; longer rows are re-read from memory in each pass (same order either way). The
// scalar kernels (rows whose length VecOK refuses) with float32 outputs keep up to
// maxPrivateScalar, one register each: on an H100, paired, AddLayerNorm f32 D 4097 0.739 ->
// 0.524 ms and EmbedLayerNorm f32 H 4097 0.799 -> 0.692 against re-reading it. With 16-bit
// outputs, which a kept row stages in workgroup memory (private·W/2 words), they stay at
// MaxPrivate: AddLayerNorm f16 and bf16 D 4097 staged ran 1.74x slower than re-read.
const (
	MaxPrivate       = 16
	maxPrivateScalar = 24
)

// Embed selects an EmbedLayerNormalization kernel.
type Embed struct {
	W         int       // invocations per row (plan.W)
	Private   int       // elements per invocation kept in registers (ceil(H/W)), 0: re-read
	DType     ops.DType // F32 or F16
	Segment   bool      // a segment table is bound
	SegIDs    bool      // segment_ids are given (else segment row 0)
	PosIDs    bool      // position_ids are given (else position s)
	MaskIndex bool      // mask given and mask_index requested
	CountOnes bool      // mask_index rule ops.MaskCountOnes (else first zero)
	Sum       bool      // embedding_sum requested
	OddH      bool      // H odd: 16-bit rows may share a word with their neighbours
	Vec       bool      // the vector kernel (H a multiple of 4, see VecOK)
	Wide      bool      // the vector kernel's eight-lane invocations (16-bit, H a multiple of 8)
	Rows      int       // token rows a workgroup (set by Vectorize; 0 is 1)
	Fast16    bool      // f16 by the builtin conversions, which the device was found to round exactly
	SplitInts bool      // each int32 input at its own binding (device tensors bound in place), see IntBindings
	Pair      bool      // the pair kernel (set by Vectorize): odd f16 token rows two a workgroup, see AddLN.Pair
}

// AddLN selects an AddLayerNorm kernel.
type AddLN struct {
	W        int       // invocations per row (plan.W)
	Private  int       // elements per invocation kept in registers (ceil(D/W)), 0: re-read
	X1, X2   ops.DType // F32, F16 or BF16 each
	Gamma    ops.DType // dtype of gamma and beta
	Bias     ops.DType // ops.Invalid: no bias
	BiasFull bool      // bias is (N, D) rather than (D)
	Out      ops.DType // OutT of y and x
	WriteX   bool      // the x output is requested
	Stats    bool      // mean and rstd are written (AddLNBindings.Mean and .Rstd bound)
	OddD     bool      // D odd: 16-bit rows may share a word with their neighbours
	Vec      bool      // the vector kernel (D a multiple of 4, see VecOK)
	Wide     bool      // the vector kernel's eight-lane invocations (16-bit, D a multiple of 8)
	Rows     int       // rows a workgroup (set by Vectorize; 0 is 1)
	Fast16   bool      // f16 by the builtin conversions, which the device was found to round exactly
	// Pair: the pair kernel (set by Vectorize): odd rows of 16-bit x1, x2 and outputs, two
	// rows a workgroup of W/2 invocations moving whole words; Private is then the words an
	// invocation keeps (see pairRows).
	Pair bool
}

// VecLanes is how many of the plan's invocations one invocation of a vector kernel stands
// for: invocation t owns the plan's lanes 4t … 4t+3 and loads their elements of a chunk as
// one vector (vec4<f32>, or vec2<u32> holding four 16-bit values), so the workgroup has
// W/VecLanes invocations and every partial sum keeps the plan's order (internal/plan).
const VecLanes = plan.VecLanes

// VecOK reports whether rows of h elements can use the vector kernels: every row then
// starts on a vector boundary (h a multiple of VecLanes), and so does every table row.
func VecOK(h int) bool { return h%VecLanes == 0 }

// Vectorize picks the vector kernel the plan's rows run in: none for rows whose length is
// not a multiple of VecLanes, the wide one where the plan gives each invocation WideLanes
// lanes (16-bit rows a multiple of eight long: 16-byte vectors of packed values, where four
// lanes moved 8 bytes an invocation). Every dispatch of the op sets it here, so the kernels
// chosen for host and device tensors are the same. (Eight lanes at the same W, half the
// invocations a row each holding twice the data, lost to four lanes on four of five f16
// cases on the H200, up to 2x: the plan doubles W for them.)
// It also sets Rows (rowsFor), and picks the pair kernel for odd 16-bit rows kept in
// registers (pairRows).
func (k *Embed) Vectorize(p plan.Plan) {
	k.Vec, k.Wide = p.Lanes >= VecLanes, p.Lanes == plan.WideLanes
	k.Rows = rowsFor(p, warp)
	k.Pair = false
	if pairRows(p, k.Vec, k.Private) && k.DType == ops.F16 {
		k.Pair, k.Rows, k.Private = true, 2, pairWords(p.H, p.W)
	}
}

// Vectorize is Embed.Vectorize for AddLayerNorm.
func (k *AddLN) Vectorize(p plan.Plan) {
	k.Vec, k.Wide = p.Lanes >= VecLanes, p.Lanes == plan.WideLanes
	k.Rows = rowsFor(p, group)
	k.Pair = false
	if pairRows(p, k.Vec, k.Private) && k.X1.Is16() && k.X2.Is16() && k.Out.Is16() {
		k.Pair, k.Rows, k.Private = true, 2, pairWords(p.H, p.W)
	}
}

// pairRows reports whether rows of the plan can run in a pair kernel, given that their
// dtypes are 16-bit (AddLayerNorm's x1, x2 and outputs, EmbedLayerNorm's tables): odd rows
// (two make whole words) of at least 64 invocations, kept in registers (private), at most
// MaxPrivate words an invocation. Measured on an H100, paired in a random order, three
// rounds: AddLayerNorm D 1023 f16 1.044 -> 0.790 ms, bf16 1.091 -> 0.818 (the scalar kernel
// staged its words through workgroup atomics and ran 256 invocations a row); EmbedLayerNorm
// f16 H 1023 (64,512), two rounds, 0.261 -> 0.226 ms. Float32 rows stay in the scalar
// kernel: the AddLayerNorm pair kernel with two float32 a unit ran D 1023 at 0.490 against
// 0.440 ms.
func pairRows(p plan.Plan, vec bool, private int) bool {
	return !vec && p.H%2 == 1 && p.W >= 64 && private > 0 && pairWords(p.H, p.W) <= MaxPrivate
}

// pairWords is how many words of a pair of rows of h elements each of the pair kernel's w/2
// invocations holds.
func pairWords(h, w int) int { return (h + w/2 - 1) / (w / 2) }

// warp is the fewest invocations the plan gives a vector row (plan.For: one warp of 32);
// group is the workgroup rowsFor fills with short rows.
const (
	warp  = 32
	group = 64
)

// rowsFor is how many rows a workgroup of the plan's kernel normalizes: as many as make
// group invocations for the vector kernels whose rows take fewer than below invocations,
// one elsewhere. A row's invocations, order and tree are the plan's whatever the count
// (each row reduces in its own stretch of the workgroup's partials), so the bits do not
// change. A workgroup narrower than a warp leaves most of each warp idle, and a GPU holds
// only so many workgroups at once. Measured on an H100 (scripts/device-run.sh sweep and
// paired), 64 invocations a workgroup for every short row against one row, f16:
// AddLayerNorm D 64 1.43 -> 0.40 ms, D 128 0.74 -> 0.39, EmbedLayerNorm H 64 0.43 -> 0.13;
// at a warp a row (two rows a workgroup) AddLayerNorm (4096,768) gained 3-6% but
// EmbedLayerNorm lost 4% at H 768 and 1024 f16, so EmbedLayerNorm groups only rows narrower
// than a warp (below = warp), AddLayerNorm those narrower than group. (Two rows a workgroup
// for the scalar kernels of odd 16-bit rows, each row keeping its W invocations and its
// element-wise loads, so that their outputs start on a word and need no atomics, lost:
// AddLayerNorm D 1023 1.73 -> 2.19 ms, EmbedLayerNorm H 1023 0.41 -> 0.50. The pair kernel,
// W/2 invocations for both rows moving whole words, won: see pairRows.)
func rowsFor(p plan.Plan, below int) int {
	if n := p.W / p.Lanes; p.Lanes >= VecLanes && n < below {
		return max(1, group/n)
	}
	return 1
}

// RowsPer returns the kernel's rows a workgroup (Rows, at least 1): the dispatch needs
// ceil(rows/Rows) workgroups.
func (k Embed) RowsPer() int { return max(k.Rows, 1) }

// RowsPer is Embed.RowsPer for AddLayerNorm.
func (k AddLN) RowsPer() int { return max(k.Rows, 1) }

// HasF16 reports whether any of the kernel's tensors is float16: the kernels Fast16 changes.
func (k AddLN) HasF16() bool {
	return k.X1 == ops.F16 || k.X2 == ops.F16 || k.Gamma == ops.F16 || k.Bias == ops.F16 || k.Out == ops.F16
}

// PrivateFor is the Private parameter for rows of h elements over w invocations; out16 says
// the kernel's outputs are 16-bit.
func PrivateFor(h, w int, out16 bool) int {
	if n := (h + w - 1) / w; n <= privateMax(VecOK(h) || out16) {
		return n
	}
	return 0
}

// EmbedBindings number the bindings (group 0) of the EmbedLayerNormalization kernels: the
// template declares its tensors at them and the dawn backend binds them, from this one table.
// Ints holds every int32 input (ids | segment ids | mask | position ids, told apart by offsets
// in the parameters) unless the kernel is SplitInts, which binds each at its own (IDs shares
// Ints' number). Aux holds the id-check flags (word 0) and mask_index (words 1…B).
var EmbedBindings = struct {
	Params, Ints, IDs, SegIDs, Mask, PosIDs, Word, Pos, Seg, GammaBeta, Out, Sum, Aux uint32
}{Params: 0, Ints: 1, IDs: 1, Word: 2, Pos: 3, Seg: 4, GammaBeta: 5, Out: 6, Sum: 7, Aux: 8, SegIDs: 9, Mask: 10, PosIDs: 11}

// IntBindings are the bindings of the int32 inputs of a SplitInts kernel: input_ids,
// segment_ids, mask, position_ids.
var IntBindings = [4]uint32{EmbedBindings.IDs, EmbedBindings.SegIDs, EmbedBindings.Mask, EmbedBindings.PosIDs}

// AddLNBindings number the bindings (group 0) of the AddLayerNorm kernels. GammaBeta holds
// gamma (elements 0…D−1) then beta (D…2D−1); Mean and Rstd are bound only when Stats is set.
var AddLNBindings = struct {
	Params, X1, X2, GammaBeta, Bias, Y, X, Mean, Rstd uint32
}{Params: 0, X1: 1, X2: 2, GammaBeta: 3, Bias: 4, Y: 5, X: 6, Mean: 7, Rstd: 8}

// ProbeBindings number the bindings of the probe kernel (RenderProbe).
var ProbeBindings = struct{ Params, Src, Dst uint32 }{Params: 0, Src: 1, Dst: 2}

// StorageBuffers is how many storage buffers the kernel binds (a device limit per stage).
func (p Embed) StorageBuffers() int {
	n := 6 // ints or ids, word, pos, gamma+beta, output, aux
	for _, b := range [...]bool{p.Segment, p.Sum, p.SplitInts && p.SegIDs, p.SplitInts && p.MaskIndex, p.SplitInts && p.PosIDs} {
		if b {
			n++
		}
	}
	return n
}

// Key is the cache key of the kernel, also usable as a pipeline key.
func (p Embed) Key() string { return fmt.Sprintf("embed%+v", p) }

// Key is the cache key of the kernel, also usable as a pipeline key.
func (p AddLN) Key() string { return fmt.Sprintf("addln%+v", p) }

func (p Embed) check() error {
	rows, ok := pairShape(p.Pair, p.Vec, p.W, p.RowsPer(), p.Private)
	if !ok || p.Pair && p.DType != ops.F16 {
		return fmt.Errorf("shaders: embed: pair kernel with %+v", p)
	}
	if err := checkW(p.W, p.Private, p.Vec, p.Wide, rows); err != nil {
		return err
	}
	if p.DType != ops.F32 && p.DType != ops.F16 {
		return fmt.Errorf("shaders: embed: dtype %v", p.DType)
	}
	if p.SegIDs && !p.Segment {
		return fmt.Errorf("shaders: embed: segment ids without a segment table")
	}
	return nil
}

func (p AddLN) check() error {
	rows, ok := pairShape(p.Pair, p.Vec, p.W, p.RowsPer(), p.Private)
	if !ok || p.Pair && !(p.OddD && p.X1.Is16() && p.X2.Is16()) {
		return fmt.Errorf("shaders: addln: pair kernel with %+v", p)
	}
	if err := checkW(p.W, p.Private, p.Vec, p.Wide, rows); err != nil {
		return err
	}
	for _, d := range []ops.DType{p.X1, p.X2, p.Gamma, p.Out} {
		if wgslName(d) == "" {
			return fmt.Errorf("shaders: addln: dtype %v", d)
		}
	}
	if p.Bias != ops.Invalid && wgslName(p.Bias) == "" {
		return fmt.Errorf("shaders: addln: bias dtype %v", p.Bias)
	}
	return nil
}

// pairShape returns the rows checkW checks a kernel's workgroup for, and whether a pair
// kernel has the pair kernel's shape (a scalar kernel of W ≥ 64 over two rows, registers
// kept): its two rows share the W/2 invocations and W partials of one row.
func pairShape(pair, vec bool, w, rows, private int) (int, bool) {
	if !pair {
		return rows, true
	}
	return 1, !vec && w >= 64 && rows == 2 && private >= 1
}

func checkW(w, private int, vec, wide bool, rows int) error {
	if w < 1 || w > 2048 || w&(w-1) != 0 {
		return fmt.Errorf("shaders: W %d is not a power of two in [1, 2048]", w)
	}
	if wide && !vec {
		return fmt.Errorf("shaders: the wide kernel is a vector kernel")
	}
	if lanes := VecLanes * quads(wide); vec && w < lanes {
		return fmt.Errorf("shaders: W %d is less than the vector kernels' %d lanes", w, lanes)
	}
	if w/VecLanes/quads(wide) > 256 || !vec && w > 256 {
		return fmt.Errorf("shaders: W %d needs more than 256 invocations", w)
	}
	if vec && (rows&(rows-1) != 0 || groupSize(w, vec, quads(wide))*rows > 256) || !vec && rows != 1 {
		return fmt.Errorf("shaders: %d rows a workgroup of W %d", rows, w)
	}
	if lim := privateMax(vec); private < 0 || private > lim {
		return fmt.Errorf("shaders: private %d outside [0, %d]", private, lim)
	}
	return nil
}

// privateMax is the most Private of a kernel: MaxPrivate for the vector kernels and those
// with 16-bit outputs (vecOr16), else maxPrivateScalar (checkW's bound for every scalar
// kernel).
func privateMax(vecOr16 bool) int {
	if vecOr16 {
		return MaxPrivate
	}
	return maxPrivateScalar
}

// wgslName is the template's short name of a float dtype.
func wgslName(d ops.DType) string {
	switch d {
	case ops.F32:
		return "f32"
	case ops.F16:
		return "f16"
	case ops.BF16:
		return "bf16"
	}
	return ""
}

// elemType is the WGSL array element a tensor of dtype d is bound as.
func elemType(d string) string {
	if d == "f32" {
		return "f32"
	}
	return "u32" // two 16-bit values per word
}

// vecElem is the WGSL array element a tensor of dtype d is bound as in the vector kernels:
// four f32, or the 4g 16-bit values of one vector.
func vecElem(d string, g int) string {
	switch {
	case d == "f32":
		return "vec4<f32>"
	case g == 2:
		return "vec4<u32>" // eight 16-bit values
	}
	return "vec2<u32>" // four 16-bit values
}

// elemFor is elemType, or vecElem in the vector kernels.
func elemFor(vec bool, g int) func(string) string {
	if vec {
		return func(d string) string { return vecElem(d, g) }
	}
	return elemType
}

// outElem is the array element of a written tensor: 16-bit rows that can share a word with a
// neighbour are written with atomics; the vector kernels write whole vectors.
func outElem(d string, odd, vec bool, g int) string {
	switch {
	case vec:
		return vecElem(d, g)
	case d == "f32":
		return "f32"
	case odd:
		return "atomic<u32>"
	}
	return "u32"
}

type tensorArg struct {
	Name, T string
	G       int // quads per vector (loaderv, storev)
}

type halveArg struct{ Name, Arr, T string }

type pairArg struct {
	N       string // the variable holding the row length: D or H
	Private int
	Out     string // the output the third pass stores (put_Out): y or out
}

type flushArg struct {
	Name string
	Odd  bool
}

var funcs = template.FuncMap{
	"tensor":  func(name, t string) tensorArg { return tensorArg{Name: name, T: t} },
	"vtensor": func(name, t string, g int) tensorArg { return tensorArg{name, t, g} },
	"flush":   func(name string, odd bool) flushArg { return flushArg{name, odd} },
	// halveArg names one halving function: its name, its workgroup array and their element.
	"halveArg": func(name, arr, t string) halveArg { return halveArg{name, arr, t} },
	// pairArg is the pair kernels' shared passes' argument: the row length's name, Private
	// and the normalized output.
	"pairArg": func(n string, private int, out string) pairArg { return pairArg{n, private, out} },
	"elem":    elemType,
	// partsLen is the length of the tree's workgroup arrays for n partials: at least 8,
	// the constant indices of the tree's last step (common.wgsl.tmpl).
	"partsLen": func(n int) int { return max(n, 8) },
}

// stageWords is the workgroup staging size for 16-bit rows of up to private·w elements:
// such a row spans at most private·w/2 + 1 words. 0 when the kernel does not stage.
func stageWords(out ops.DType, w, private int, vec bool) int {
	if !out.Is16() || private == 0 || vec {
		return 0
	}
	return private*w/2 + 1
}

// quads is G of the vector kernels: the quads of lanes one invocation owns, 2 in the wide kernel.
func quads(wide bool) int {
	if wide {
		return 2
	}
	return 1
}

// groupSize is the invocations of a row in a kernel: W, or W/(VecLanes·g) for the vector
// kernels (whose workgroup has Rows times that).
func groupSize(w int, vec bool, g int) int {
	if vec {
		return w / (VecLanes * g)
	}
	return w
}

// parts is how many partials a row's tree combines: W, or W/VecLanes quad sums (its
// workgroup arrays are partsLen of Rows times that long).
func parts(w int, vec bool) int {
	if vec {
		return w / VecLanes
	}
	return w
}

// invocations is a kernel's workgroup size: wg, times rows in the vector kernels, which run
// each of their rows in wg invocations of its own.
func invocations(wg, rows int, vec bool) int {
	if vec {
		return wg * rows
	}
	return wg
}

// parse builds the template set of one op: the shared include plus the op's file.
func parse(file string) *template.Template {
	return template.Must(template.New("").Funcs(funcs).ParseFS(files, "common/*.wgsl.tmpl", file))
}

var (
	embedTmpl = sync.OnceValue(func() *template.Template { return parse("embedlayernorm/embedlayernorm.wgsl.tmpl") })
	addlnTmpl = sync.OnceValue(func() *template.Template { return parse("addlayernorm/addlayernorm.wgsl.tmpl") })
	probeTmpl = sync.OnceValue(func() *template.Template { return parse("probe/probe.wgsl.tmpl") })
	cache     sync.Map // key → string
)

func render(key string, t *template.Template, name string, data any) (string, error) {
	if src, ok := cache.Load(key); ok {
		return src.(string), nil
	}
	var b bytes.Buffer
	if err := t.ExecuteTemplate(&b, name, data); err != nil {
		return "", fmt.Errorf("shaders: %s: %w", key, err)
	}
	src, _ := cache.LoadOrStore(key, b.String())
	return src.(string), nil
}

// packFrom is the fewest vectors an invocation keeps (Private) for which the f16 vector
// EmbedLayerNorm keeps its row's sums packed, two binary16 values a word, instead of one f32
// each: they are binary16 values (spec §A.3's rounding), so the round trip is exact where the
// device's builtin conversions are (Fast16). Measured on an H100, paired in random order,
// kernel time packed over unpacked: H 1024 0.96, 2048 0.97, 4096 0.95 (the (256,512,4096)
// bench case 1.059 -> 1.008 ms), 8192 0.87, where Private is 4 to 8; H 256 1.02 and 768
// 1.01, Private 1 and 3.
const packFrom = 4

// RenderEmbed returns the WGSL of an EmbedLayerNormalization kernel.
func RenderEmbed(p Embed) (string, error) {
	if err := p.check(); err != nil {
		return "", err
	}
	t := wgslName(p.DType)
	sw := stageWords(p.DType, p.W, p.Private, p.Vec)
	ints := [4]string{"ints", "ints", "ints", "ints"}
	if p.SplitInts {
		ints = [4]string{"ids", "segids", "maskv", "posids"}
	}
	g := quads(p.Wide)
	wg, r := groupSize(p.W, p.Vec, g), p.RowsPer()
	ni, nparts, oe := invocations(wg, r, p.Vec), parts(p.W, p.Vec)*r, outElem(t, p.OddH, p.Vec, g)
	if p.Pair {
		sw, wg, ni, nparts, oe = 0, p.W/2, p.W/2, p.W, elemType(t)
	}
	data := struct {
		Embed
		B                                   any
		T, Elem, OutElem                    string
		Half, Stage                         bool
		StageWords, WG, G, VL, Parts, R, NI int
		IDsVar, SegVar, MaskVar, PosVar     string // the arrays each int32 input is read from
		Pack                                bool   // sums kept packed (packFrom)
	}{p, EmbedBindings, t, elemFor(p.Vec, g)(t), oe, p.DType == ops.F16, sw > 0, sw, wg, g, VecLanes * g,
		nparts, r, ni, ints[0], ints[1], ints[2], ints[3],
		p.DType == ops.F16 && p.Fast16 && p.Vec && p.Private >= packFrom}
	return render(p.Key(), embedTmpl(), "embedlayernorm.wgsl.tmpl", data)
}

// RenderAddLN returns the WGSL of an AddLayerNorm kernel.
func RenderAddLN(p AddLN) (string, error) {
	if err := p.check(); err != nil {
		return "", err
	}
	out := wgslName(p.Out)
	sw := stageWords(p.Out, p.W, p.Private, p.Vec)
	g := quads(p.Wide)
	wg, r := groupSize(p.W, p.Vec, g), p.RowsPer()
	ni, nparts := invocations(wg, r, p.Vec), parts(p.W, p.Vec)*r
	outElem := outElem(out, p.OddD, p.Vec, g)
	if p.Pair {
		sw, ni, nparts, outElem = 0, p.W/2, p.W, "u32"
	}
	data := struct {
		B                                          any
		W, Private, WG, G, VL, Parts, R, NI        int
		X1, X2, Gamma, Bias, Out                   string
		BiasFull, WriteX, Stats, OddD, Vec, Fast16 bool
		OutElem                                    string
		Stage, Pair                                bool
		StageWords                                 int
		E                                          func(string) string
	}{AddLNBindings, p.W, p.Private, wg, g, VecLanes * g, nparts, r, ni, wgslName(p.X1), wgslName(p.X2),
		wgslName(p.Gamma), wgslName(p.Bias), out, p.BiasFull, p.WriteX, p.Stats, p.OddD, p.Vec, p.Fast16, outElem,
		sw > 0, p.Pair, sw, elemFor(p.Vec, g)}
	return render(p.Key(), addlnTmpl(), "addlayernorm.wgsl.tmpl", data)
}

// Probe modes: what the probe kernel applies to each input word.
const (
	ProbeRstd      = 0  // rstd_exact(f32) → f32 bits
	ProbeToF16     = 1  // integer f32 → f16 (RNE)
	ProbePackF16   = 2  // builtin pack2x16float, low half
	ProbeFromF16   = 3  // integer f16 → f32
	ProbeToBF16    = 4  // integer f32 → bf16 (RNE)
	ProbeUnpackF16 = 5  // builtin unpack2x16float, low half
	ProbeRound16   = 6  // round16(f32) → f32 bits
	ProbeF16x2Lo   = 7  // f16x2_to_f32, low half → f32 bits
	ProbeF16x2Hi   = 8  // f16x2_to_f32, high half → f32 bits
	ProbePackLo    = 9  // f32x2_to_f16x2, the value in the low half → f16 bits
	ProbePackHi    = 10 // f32x2_to_f16x2, the value in the high half → f16 bits
	ProbeRstdDigit = 11 // rstd_exact by the digit-by-digit routines alone → f32 bits
	ProbeWorkgroup = 64
)

// RenderProbe returns the WGSL of the kernel that exposes the shared helpers, with the
// 16-bit conversions in their Fast16 form or not (ProbeBindings: Params uniform {n, mode,
// zero, pad}, Src array<u32>, Dst array<u32>; workgroups of ProbeWorkgroup invocations, element =
// gid.x + gid.y·nwg.x·ProbeWorkgroup). The dawn backend calibrates with it; tests compare
// the helpers with the CPU through it.
func RenderProbe(fast16 bool) (string, error) {
	return render(fmt.Sprintf("probe(fast16=%v)", fast16), probeTmpl(), "probe.wgsl.tmpl", struct {
		B                        any
		W, WG, Parts, R, NI      int
		Stage, Vec, Fast16, Pair bool
	}{B: ProbeBindings, W: ProbeWorkgroup, WG: ProbeWorkgroup, Parts: ProbeWorkgroup, R: 1, NI: ProbeWorkgroup, Fast16: fast16})
}
