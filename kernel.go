package fusednorm

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"

	"runtime"
	"sync"
	"unsafe"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// Kernel is an op reached by name and version, the way a kernel hub's loader hands out
// kernels: inputs and outputs are keyed by the manifest's bind keys (inputIdsT,
// wordEmbeddingT, …; outputT, maskIndexT, …), attributes come as a map such as
// encoding/json decodes, and Manifest says all of it as data.
type Kernel struct {
	eng   *Engine
	c     *opContract
	m     *manifest
	cache *kernelCache // the op prepared for the last call's weights (kernelprep.go)
}

// KernelNames lists the names GetKernel accepts.
func KernelNames() []string {
	return []string{embedContract.FullName(), addContract.FullName()}
}

// GetKernel returns the kernel "com.microsoft.EmbedLayerNormalization" or
// "ascend.AddLayerNorm" at version 1. Version 0 means the latest.
func (e *Engine) GetKernel(name string, version int) (*Kernel, error) {
	if err := e.use(); err != nil {
		return nil, err
	}
	e.done()
	for _, c := range []*opContract{&embedContract, &addContract} {
		if name != c.FullName() {
			continue
		}
		if version != 0 && version != c.Version {
			return nil, fmt.Errorf("fusednorm: GetKernel: %s has version %d, not %d: %w", name, c.Version, version, ErrNotSupported)
		}
		m, err := loadManifest(c)
		if err != nil {
			return nil, err
		}
		return newKernel(e, c, m), nil
	}
	return nil, fmt.Errorf("fusednorm: GetKernel: unknown kernel %q (have %v): %w", name, KernelNames(), ErrNotSupported)
}

// Name is the kernel's full name.
func (k *Kernel) Name() string { return k.c.FullName() }

// Version is the kernel's version.
func (k *Kernel) Version() int { return k.c.Version }

// op is the name the kernel's errors give the op: the typed API's ("EmbedLayerNorm",
// "AddLayerNorm"), so ArgError.Op is one name per op whichever entry is used.
func (k *Kernel) op() string {
	if k.c == &embedContract {
		return opEmbed
	}
	return opAdd
}

// Manifest is an op's manifest.json (shaders/<op>/manifest.json) as a kernel-hub loader
// reads it: the kernel's identity, its bind keys with their dtype variables, ranks and
// presence, the output shape rules and the attributes with their defaults.
type Manifest struct {
	Domain  string // "com.microsoft", "ascend"
	Name    string // "EmbedLayerNormalization", "AddLayerNorm"
	Version int    // the manifest's sinceVersion

	// TypeConstraints maps each dtype variable named by Inputs and Outputs ("T", "T1",
	// "TX1", …) to the dtypes it may take: "float32", "float16", "bfloat16", "int32".
	TypeConstraints map[string][]string
	Inputs          []ManifestTensor // in the op's input order
	Outputs         []ManifestTensor // in the op's output order
	Attributes      []ManifestAttribute

	// JSON is the manifest's text, for the fields not above (AddLayerNorm's
	// dtypeCombinations, tunables, notes).
	JSON []byte
}

// ManifestTensor is one input or output of a Manifest.
type ManifestTensor struct {
	BindKey  string // the key in Run's inputs or outputs map
	Name     string // the ONNX / Ascend name, as ArgError.Tensor gives it
	DType    string // a variable of TypeConstraints
	Optional bool

	// Inputs: the allowed ranks.
	MinRank, MaxRank int
	// Outputs: the shape rule, one term per dim group: dim(K,i), shape(K), leading(K,G) (K's
	// dims before G's rank), ones(G) (rank(G) ones), K an input's bind key.
	Shape []string
}

// ManifestAttribute is one attribute of a Manifest.
type ManifestAttribute struct {
	Name    string
	Type    string // "float", "int", "string" or "bool"
	Default any    // as encoding/json decodes it: float64, string or bool
}

// Manifest returns the kernel's manifest. The caller owns the result.
func (k *Kernel) Manifest() Manifest {
	m := k.m
	out := Manifest{Domain: m.Domain, Name: m.Name, Version: m.SinceVersion, TypeConstraints: map[string][]string{}}
	for v, dts := range m.TypeConstraints {
		out.TypeConstraints[v] = slices.Clone(dts)
	}
	for _, in := range m.Inputs {
		lo, hi := manifestRank(in.Rank)
		out.Inputs = append(out.Inputs, ManifestTensor{BindKey: in.BindKey, Name: in.Name, DType: in.DType, Optional: in.Optional, MinRank: lo, MaxRank: hi})
	}
	for _, o := range m.Outputs {
		out.Outputs = append(out.Outputs, ManifestTensor{BindKey: o.BindKey, Name: o.Name, DType: o.DType, Optional: o.Optional, Shape: slices.Clone(o.Shape)})
	}
	for _, name := range sortedKeys(m.Attributes) {
		a := m.Attributes[name]
		out.Attributes = append(out.Attributes, ManifestAttribute{Name: name, Type: a.Type, Default: a.Default})
	}
	out.JSON, _ = contractJSON(k.c.Folder) // parsed once already, so it reads
	return out
}

// manifestRank decodes a manifest rank: n or [min, max].
func manifestRank(raw json.RawMessage) (lo, hi int) {
	var n int
	if json.Unmarshal(raw, &n) == nil {
		return n, n
	}
	var r [2]int
	_ = json.Unmarshal(raw, &r)
	return r[0], r[1]
}

// Run computes the op. inputs are keyed by bind key. attrs holds the op's attributes and
// "want", the bind keys of optional outputs to return; it takes what encoding/json decodes
// into a map[string]any as well as Go values:
//
//   - epsilon: any number; a finite value past float32's range is an error, and "NaN",
//     "Infinity", "-Infinity" (protobuf JSON's spelling) are read as such.
//   - mask_index_type (EmbedLayerNorm): an integer, accepted and ignored (spec §A.1).
//   - mask_index_rule (EmbedLayerNorm): "first_zero" or "count_ones", or the MaskRule value
//     as an integer.
//   - additional_output (AddLayerNorm): a bool, or 0/1 as ONNX writes bools.
//   - want: []string or []any of strings.
//
// An integer attribute may be any Go integer or an integral float64 (a JSON number).
// Unknown bind keys and attributes are errors. Every input, attribute and rule is checked
// before an output is allocated, outputs past the memory the process can hold are refused,
// and a failed call returns no outputs and writes nothing the caller passed.
func (k *Kernel) Run(ctx context.Context, inputs map[string]Tensor, attrs map[string]any) (map[string]Tensor, error) {
	op := k.op()
	if err := checkCall(op, ctx, false); err != nil {
		return nil, err
	}
	for _, key := range sortedKeys(inputs) {
		t := inputs[key]
		name, ok := k.inputName(key)
		if !ok {
			return nil, argErr(op, key, "unknown input bind key %q", key)
		}
		if err := checkTensor(op, name, &t); err != nil {
			return nil, err
		}
	}
	want, opts, err := k.attrs(attrs)
	if err != nil {
		return nil, err
	}
	// The typed API checks every rule before it allocates the outputs left zero here.
	in := func(key string) Tensor { return inputs[key] }
	var outs map[string]Tensor
	if k.c == &embedContract {
		eo := EmbedOutputs{WantMaskIndex: want["maskIndexT"], WantEmbeddingSum: want["embeddingSumT"]}
		ein := EmbedInputs{InputIDs: in("inputIdsT"), SegmentIDs: in("segmentIdsT"), Mask: in("maskT"), PositionIDs: in("positionIdsT")}
		// spec §A.2's order: the inputs' shapes before the weights, which preparing checks.
		if err := checkEmbedInputShapes(&ein); err != nil {
			return nil, err
		}
		w := EmbedWeights{Word: in("wordEmbeddingT"), Position: in("positionEmbeddingT"), Segment: in("segmentEmbeddingT"),
			Gamma: in("gammaT"), Beta: in("betaT")}
		key := preparedKey{w: [5]weightID{idOf(w.Word), idOf(w.Position), idOf(w.Segment), idOf(w.Gamma), idOf(w.Beta)},
			c: newOpConfig(DefaultEmbedEpsilon, opts)}
		err = k.cache.use(&key, func(p *preparedOp) (err error) {
			p.embed, err = k.eng.NewEmbedLayerNorm(w, opts...)
			return err
		}, func(p *preparedOp) error { return p.embed.Run(ctx, ein, &eo) })
		outs = map[string]Tensor{"outputT": eo.Output, "maskIndexT": eo.MaskIndex, "embeddingSumT": eo.EmbeddingSum}
	} else {
		if want["xT"] {
			opts = append(opts, AdditionalOutput(true))
		}
		w := AddLayerNormWeights{Gamma: in("gammaT"), Beta: in("betaT"), Bias: in("biasT")}
		key := preparedKey{w: [5]weightID{idOf(w.Gamma), idOf(w.Beta), idOf(w.Bias)}, c: newOpConfig(DefaultAddEpsilon, opts)}
		var ao AddLayerNormOutputs
		err = k.cache.use(&key, func(p *preparedOp) (err error) {
			p.add, err = k.eng.NewAddLayerNorm(w, opts...)
			return err
		}, func(p *preparedOp) error { return p.add.Run(ctx, in("x1T"), in("x2T"), &ao) })
		outs = map[string]Tensor{"yT": ao.Y, "meanT": ao.Mean, "rstdT": ao.Rstd, "xT": ao.X}
	}
	if err != nil {
		return nil, err
	}
	for key, t := range outs {
		if t.IsZero() {
			delete(outs, key)
		}
	}
	return outs, nil
}

// attrs reads the attribute map into op options and the set of wanted optional outputs.
func (k *Kernel) attrs(attrs map[string]any) (map[string]bool, []OpOption, error) {
	op, embed := k.op(), k.c == &embedContract
	want := map[string]bool{}
	var opts []OpOption
	for _, name := range sortedKeys(attrs) {
		v := attrs[name]
		switch {
		case name == "want":
			keys, err := attrStrings(op, name, v)
			if err != nil {
				return nil, nil, err
			}
			for _, key := range keys {
				if !slices.ContainsFunc(k.c.Outputs, func(o contractOutput) bool { return o.BindKey == key }) {
					return nil, nil, argErr(op, "want", "unknown output bind key %q", key)
				}
				want[key] = true
			}
		case name == "epsilon":
			f, err := attrFloat32(op, name, v)
			if err != nil {
				return nil, nil, err
			}
			opts = append(opts, Epsilon(f))
		case name == "mask_index_type" && embed:
			if _, err := attrInt(op, name, v); err != nil {
				return nil, nil, err
			}
		case name == "mask_index_rule" && embed:
			r, err := attrMaskRule(op, name, v)
			if err != nil {
				return nil, nil, err
			}
			opts = append(opts, WithMaskRule(r))
		case name == "additional_output" && !embed:
			b, err := attrBool(op, name, v)
			if err != nil {
				return nil, nil, err
			}
			want["xT"] = want["xT"] || b
		default:
			return nil, nil, argErr(op, name, "unknown attribute %q", name)
		}
	}
	return want, opts, nil
}

func attrStrings(op, name string, v any) ([]string, error) {
	switch s := v.(type) {
	case []string:
		return s, nil
	case []any:
		out := make([]string, len(s))
		for i, e := range s {
			str, ok := e.(string)
			if !ok {
				return nil, argErr(op, name, "%s must be a list of strings, element %d is %T", name, i, e)
			}
			out[i] = str
		}
		return out, nil
	}
	return nil, argErr(op, name, "%s must be a list of strings ([]string or []any), got %T", name, v)
}

// attrFloat32 reads a float attribute as float32.
func attrFloat32(op, name string, v any) (float32, error) {
	var f float64
	switch x := v.(type) {
	case float32:
		return x, nil
	case float64:
		f = x
	case json.Number:
		var err error
		if f, err = strconv.ParseFloat(string(x), 64); err != nil {
			return 0, argErr(op, name, "%s must be a number, got %q", name, x)
		}
	case string:
		switch x {
		case "NaN":
			return float32(math.NaN()), nil
		case "Infinity":
			return float32(math.Inf(1)), nil
		case "-Infinity":
			return float32(math.Inf(-1)), nil
		}
		return 0, argErr(op, name, "%s must be a number, got %q", name, x)
	default:
		i, err := attrInt(op, name, v)
		if err != nil {
			return 0, argErr(op, name, "%s must be a number, got %T", name, v)
		}
		f = float64(i)
	}
	if !math.IsInf(f, 0) && !math.IsNaN(f) && math.Abs(f) > math.MaxFloat32 {
		return 0, argErr(op, name, "%s must be finite, got %g (past float32's range)", name, f)
	}
	return float32(f), nil
}

// attrInt reads an int attribute: any Go integer, or an integral number (JSON decodes
// numbers as float64).
func attrInt(op, name string, v any) (int64, error) {
	switch x := v.(type) {
	case int:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case int64:
		return x, nil
	case float64:
		if x == math.Trunc(x) && math.Abs(x) <= 1<<53 {
			return int64(x), nil
		}
		return 0, argErr(op, name, "%s must be an integer, got %g", name, x)
	case json.Number:
		i, err := x.Int64()
		if err != nil {
			return 0, argErr(op, name, "%s must be an integer, got %q", name, x)
		}
		return i, nil
	}
	return 0, argErr(op, name, "%s must be an integer, got %T", name, v)
}

func attrBool(op, name string, v any) (bool, error) {
	if b, ok := v.(bool); ok {
		return b, nil
	}
	switch i, err := attrInt(op, name, v); {
	case err == nil && (i == 0 || i == 1):
		return i == 1, nil
	case err == nil:
		return false, argErr(op, name, "%s must be a bool or 0/1, got %d", name, i)
	}
	return false, argErr(op, name, "%s must be a bool or 0/1, got %T", name, v)
}

func attrMaskRule(op, name string, v any) (MaskRule, error) {
	switch v {
	case "first_zero":
		return MaskFirstZero, nil
	case "count_ones":
		return MaskIndexCountOnes, nil
	}
	if _, ok := v.(string); !ok {
		if i, err := attrInt(op, name, v); err == nil && (i == int64(MaskFirstZero) || i == int64(MaskIndexCountOnes)) {
			return MaskRule(i), nil
		}
	}
	return 0, argErr(op, name, "mask_index_rule must be first_zero or count_ones (%d or %d), got %v", MaskFirstZero, MaskIndexCountOnes, v)
}

func (k *Kernel) inputName(key string) (string, bool) {
	for _, in := range k.c.Inputs {
		if in.BindKey == key {
			return in.Name, true
		}
	}
	return "", false
}

// outputDType resolves a manifest dtype variable against the inputs; false when the inputs
// do not determine it (validation then reports the cause).
func (k *Kernel) outputDType(v string, inputs map[string]Tensor) (DType, bool) {
	switch v {
	case "T1":
		return Int32, true
	case "TStat":
		return Float32, true
	case "T":
		w := inputs["wordEmbeddingT"]
		return w.DType(), !w.IsZero()
	case "TOut":
		x1, x2, g := inputs["x1T"], inputs["x2T"], inputs["gammaT"]
		b := inputs["biasT"]
		return addOutDType(x1.DType(), x2.DType(), g.DType(), inputs["betaT"].DType(), b.DType(), !b.IsZero())
	}
	return 0, false
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// A Kernel keeps the op it prepared for the weight tensors of its last call (EmbedLayerNorm's
// tables, gamma and beta; AddLayerNorm's gamma, beta and bias) and reuses it while the same
// tensors come back with the same attributes, so a bind-key call stops uploading (or, on the
// CPU, moving onto huge pages) a word table it already holds. "The same tensor" is identity,
// not value: the same dtype, shape and memory (a host tensor's first element and length, a
// device tensor's storage), as for NewEmbedLayerNorm, whose weights must not change while it
// is in use.

// weightID identifies a tensor by what it is rather than by its values.
type weightID struct {
	dt    DType
	shape []int
	ptr   unsafe.Pointer
	n     int
	dev   ops.DeviceMem
}

func idOf(t Tensor) weightID {
	id := weightID{dt: t.DType(), shape: t.shape, dev: t.buf.Dev}
	switch {
	case t.buf.F32 != nil:
		id.ptr, id.n = unsafe.Pointer(unsafe.SliceData(t.buf.F32)), len(t.buf.F32)
	case t.buf.U16 != nil:
		id.ptr, id.n = unsafe.Pointer(unsafe.SliceData(t.buf.U16)), len(t.buf.U16)
	case t.buf.I32 != nil:
		id.ptr, id.n = unsafe.Pointer(unsafe.SliceData(t.buf.I32)), len(t.buf.I32)
	}
	return id
}

func (a weightID) same(b weightID) bool {
	return a.dt == b.dt && a.ptr == b.ptr && a.n == b.n && a.dev == b.dev && slices.Equal(a.shape, b.shape)
}

// preparedKey is what a prepared op was made from: its weights and the options that bind.
type preparedKey struct {
	w [5]weightID
	c opConfig
}

func (k *preparedKey) same(o *preparedKey) bool {
	for i := range k.w {
		if !k.w[i].same(o.w[i]) {
			return false
		}
	}
	return k.c == o.c
}

// preparedOp is one prepared op a Kernel holds, closed once it is replaced and no call uses it.
type preparedOp struct {
	key   preparedKey
	embed *EmbedLayerNorm
	add   *AddLayerNorm
	users int
	stale bool
}

func (p *preparedOp) close() {
	if p.embed != nil {
		p.embed.Close()
	}
	if p.add != nil {
		p.add.Close()
	}
}

// kernelCache is a Kernel's prepared op, shared by its concurrent calls.
type kernelCache struct {
	mu       sync.Mutex
	cur      *preparedOp
	prepared int // ops prepared so far (tests read it)
}

// use runs call with the prepared op for key, preparing one with prepare when the cached one
// was made from other weights or options.
func (kc *kernelCache) use(key *preparedKey, prepare func(*preparedOp) error, call func(*preparedOp) error) error {
	p, err := kc.acquire(key, prepare)
	if err != nil {
		return err
	}
	defer kc.release(p)
	return call(p)
}

// acquire returns the prepared op for key (see use), counted as in use until release.
func (kc *kernelCache) acquire(key *preparedKey, prepare func(*preparedOp) error) (*preparedOp, error) {
	kc.mu.Lock()
	defer kc.mu.Unlock()
	if p := kc.cur; p != nil && p.key.same(key) {
		p.users++
		return p, nil
	}
	p := &preparedOp{key: *key}
	for i := range p.key.w {
		p.key.w[i].shape = slices.Clone(p.key.w[i].shape) // the caller may reuse its shape slices
	}
	if err := prepare(p); err != nil {
		return nil, err
	}
	kc.retire()
	p.users = 1
	kc.cur = p
	kc.prepared++
	return p, nil
}

// release ends a call's use of p.
func (kc *kernelCache) release(p *preparedOp) {
	kc.mu.Lock()
	defer kc.mu.Unlock()
	p.users--
	if p.stale && p.users == 0 {
		p.close()
	}
}

// retire drops the cached op, closing it now if no call uses it (else its last call does).
// Under kc.mu.
func (kc *kernelCache) retire() {
	if p := kc.cur; p != nil {
		kc.cur, p.stale = nil, true
		if p.users == 0 {
			p.close()
		}
	}
}

// Close releases the op the Kernel holds prepared (its device memory, on a GPU). The Kernel
// stays usable: its next call prepares again. A Kernel that becomes unreachable releases it
// too, at some point after.
func (k *Kernel) Close() error {
	k.cache.mu.Lock()
	defer k.cache.mu.Unlock()
	k.cache.retire()
	return nil
}

// newKernel makes a Kernel whose prepared op is released when the Kernel is garbage.
func newKernel(e *Engine, c *opContract, m *manifest) *Kernel {
	k := &Kernel{eng: e, c: c, m: m, cache: new(kernelCache)}
	runtime.AddCleanup(k, func(kc *kernelCache) {
		kc.mu.Lock()
		defer kc.mu.Unlock()
		kc.retire()
	}, k.cache)
	return k
}
