// Package tests is the cross-backend conformance suite: every case of each op's test.json
// (the spec's golden vectors, edge cases, every validation rule), the ONNX Runtime golden data, the
// hard rows and the sweeps of internal/testkit (sizes, optional inputs, dtype rows, grids),
// run on any engine and compared with the sequential and float64 references (spec §C.5) and,
// bit for bit, with the pure-Go CPU plan under the engine's contraction profile (spec §C.4).
//
// Import it to check a backend: tests.Run(t, engine).
package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/x448/float16"

	fn "github.com/fusednorm/fusednorm"
	"github.com/fusednorm/fusednorm/internal/cases"
	"github.com/fusednorm/fusednorm/internal/half"
)

// The schema of internal/cases/<op>/test.json, one for both ops. A file holds "op" and "version"
// (the GetKernel name and version) and "cases"; each case is run once per entry of "types"
// and per point of its "matrix":
//
//   - types: bindings of the manifest's dtype variables, e.g. {"T": "float16"} or {"TX1":
//     "float32", "TX2": "float16", "TG": "float32", "TOut": "float32"}. An input's dtype is
//     its "dtype" if it has one, else the binding of its manifest dtype variable, else that
//     variable's only allowed dtype (T1 = int32).
//   - inputs: explicit tensors by bind key ({"shape", "data", "dtype"}), or generate: the
//     op's seeded generator's parameters. base names an earlier case whose inputs and attrs
//     this one starts from; set replaces inputs, drop removes them.
//   - attrs: the attribute map handed to Kernel.Run as encoding/json decodes it, "want"
//     (optional outputs by bind key) included. NaN and infinities are written "NaN",
//     "Infinity", "-Infinity" (protobuf JSON), as the Kernel reads them.
//   - matrix: {"generate": {param: [values]}, "attrs": {name: [values]}}: the case runs at
//     every combination.
//   - expect: [{"types": {...}, "outputs": {bindKey or "bindKey[lo:hi]": [values]}}]: golden
//     values for the runs whose binding includes types.
//   - error: {"tensor", "rule"}: the call fails with an ArgError on tensor whose rule
//     contains rule. outputs: {bindKey: shape}: the error comes from caller-allocated
//     outputs of those shapes (typed API only; the bind-key entry allocates outputs itself,
//     so there the call succeeds).
//   - shapes: expected output shapes; absent: outputs that must not be returned; finite:
//     outputs that must hold only finite values; overflowRows: rows whose values overflow
//     (skipped by the comparisons, non-finite on the CPU).

// tensorJSON is an explicit tensor of test.json: values in float64, rounded to the input's
// dtype when the tensor is built.
type tensorJSON struct {
	Shape []int     `json:"shape"`
	Data  []float64 `json:"data"`
	DType string    `json:"dtype"` // overrides the binding of the manifest's dtype variable
}

// numbers are expected values: JSON numbers, or "NaN", "Infinity", "-Infinity".
type numbers []float64

func (n *numbers) UnmarshalJSON(b []byte) error {
	var raw []any
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*n = make(numbers, len(raw))
	for i, v := range raw {
		switch x := v.(type) {
		case float64:
			(*n)[i] = x
		case string:
			f, err := strconv.ParseFloat(strings.TrimPrefix(x, "+"), 64)
			if err != nil || !(math.IsNaN(f) || math.IsInf(f, 0)) {
				return fmt.Errorf("expected value %q is not a number, NaN or ±Infinity", x)
			}
			(*n)[i] = f
		default:
			return fmt.Errorf("expected value %v is not a number", v)
		}
	}
	return nil
}

// caseJSON is one case of a test.json file (schema above).
type caseJSON struct {
	Name     string                `json:"name"`
	Note     string                `json:"note"`
	Base     string                `json:"base"`
	Types    []map[string]string   `json:"types"`
	Inputs   map[string]tensorJSON `json:"inputs"`
	Set      map[string]tensorJSON `json:"set"`
	Drop     []string              `json:"drop"`
	Generate map[string]any        `json:"generate"`
	Matrix   struct {
		Generate map[string][]any `json:"generate"`
		Attrs    map[string][]any `json:"attrs"`
	} `json:"matrix"`
	Attrs  map[string]any `json:"attrs"`
	Expect []struct {
		Types   map[string]string  `json:"types"`
		Outputs map[string]numbers `json:"outputs"`
	} `json:"expect"`
	Error *struct {
		Tensor string `json:"tensor"`
		Rule   string `json:"rule"`
	} `json:"error"`
	Outputs      map[string][]int `json:"outputs"`
	Shapes       map[string][]int `json:"shapes"`
	Absent       []string         `json:"absent"`
	Finite       []string         `json:"finite"`
	OverflowRows []int            `json:"overflowRows"`
}

type fileJSON struct {
	Op      string     `json:"op"`
	Version int        `json:"version"`
	Cases   []caseJSON `json:"cases"`
}

func loadCases(op string) (*fileJSON, error) {
	b, err := cases.File(op, "test.json")
	if err != nil {
		return nil, err
	}
	return parseCases(op, b)
}

func parseCases(op string, b []byte) (*fileJSON, error) {
	var f fileJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s/test.json: %w", op, err)
	}
	// Resolve "base" references: a case starts from an earlier case's inputs and attrs.
	byName := map[string]*caseJSON{}
	for i := range f.Cases {
		c := &f.Cases[i]
		if len(c.Types) == 0 {
			return nil, fmt.Errorf("%s: case %s: no types", op, c.Name)
		}
		if c.Base != "" {
			b, ok := byName[c.Base]
			if !ok {
				return nil, fmt.Errorf("%s: case %s: unknown base %s", op, c.Name, c.Base)
			}
			in := maps.Clone(b.Inputs)
			maps.Copy(in, c.Set)
			for _, k := range c.Drop {
				delete(in, k)
			}
			c.Inputs = in
			attrs := maps.Clone(b.Attrs)
			if attrs == nil {
				attrs = map[string]any{}
			}
			maps.Copy(attrs, c.Attrs)
			c.Attrs = attrs
		}
		byName[c.Name] = c
	}
	return &f, nil
}

// variant is one point of a case's matrix (or the case itself): the generator's parameters
// and the attrs of one run.
type variant struct {
	suffix string
	gen    map[string]any
	attrs  map[string]any
}

// variants expands a case's matrix: every combination of its generate and attrs values.
func variants(c *caseJSON) []variant {
	vs := []variant{{gen: c.Generate, attrs: c.Attrs}}
	axis := func(set func(v *variant, x any), name string, values []any) {
		var out []variant
		for _, v := range vs {
			for _, x := range values {
				n := variant{suffix: v.suffix, gen: maps.Clone(v.gen), attrs: maps.Clone(v.attrs)}
				if n.attrs == nil {
					n.attrs = map[string]any{}
				}
				set(&n, x)
				sep := "/"
				if n.suffix != "" {
					sep = ","
				}
				n.suffix += sep + name + "=" + label(x)
				out = append(out, n)
			}
		}
		vs = out
	}
	for _, k := range slices.Sorted(maps.Keys(c.Matrix.Generate)) {
		axis(func(v *variant, x any) { v.gen[k] = x }, k, c.Matrix.Generate[k])
	}
	for _, k := range slices.Sorted(maps.Keys(c.Matrix.Attrs)) {
		axis(func(v *variant, x any) { v.attrs[k] = x }, k, c.Matrix.Attrs[k])
	}
	return vs
}

func label(x any) string {
	if l, ok := x.([]any); ok {
		s := make([]string, len(l))
		for i, e := range l {
			s[i] = fmt.Sprint(e)
		}
		return strings.Join(s, "+")
	}
	return fmt.Sprint(x)
}

// typing resolves the dtypes of one run: a binding of the manifest's dtype variables.
type typing struct {
	m       fn.Manifest
	binding map[string]string
}

// of is the dtype of input key (tj, when given, may say it explicitly).
func (ty typing) of(key string, tj *tensorJSON) fn.DType {
	if tj != nil && tj.DType != "" {
		return dtypeOf(tj.DType)
	}
	for _, in := range ty.m.Inputs {
		if in.BindKey != key {
			continue
		}
		if d, ok := ty.binding[in.DType]; ok {
			return dtypeOf(d)
		}
		if c := ty.m.TypeConstraints[in.DType]; len(c) == 1 {
			return dtypeOf(c[0])
		}
		panic(fmt.Sprintf("tests: %s: dtype variable %s is not bound", key, in.DType))
	}
	panic("tests: unknown bind key " + key)
}

// label names the binding: its dtypes in the order the manifest's inputs use them.
func (ty typing) label() string {
	var names []string
	seen := map[string]bool{}
	for _, in := range ty.m.Inputs {
		if d, ok := ty.binding[in.DType]; ok && !seen[in.DType] {
			seen[in.DType] = true
			names = append(names, d)
		}
	}
	return strings.Join(names, ",")
}

// explicit builds a case's explicit inputs.
func (ty typing) explicit(c *caseJSON) map[string]fn.Tensor {
	in := map[string]fn.Tensor{}
	for k, tj := range c.Inputs {
		in[k] = makeTensor(ty.of(k, &tj), tj.Shape, tj.Data)
	}
	return in
}

// expectations are the case's golden values for this binding.
func (ty typing) expectations(c *caseJSON) ([]expectation, error) {
	var out []expectation
	for _, e := range c.Expect {
		match := true
		for k, v := range e.Types {
			match = match && ty.binding[k] == v
		}
		if !match {
			continue
		}
		m := map[string][]float64{}
		for k, v := range e.Outputs {
			m[k] = v
		}
		exps, err := parseExpect(m)
		if err != nil {
			return nil, err
		}
		out = append(out, exps...)
	}
	return out, nil
}

// wantOf is the attrs' "want" as strings ([]any as JSON decodes it, or []string).
func wantOf(attrs map[string]any) []string {
	switch w := attrs["want"].(type) {
	case []string:
		return w
	case []any:
		out := make([]string, 0, len(w))
		for _, e := range w {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// checkCaseOutputs applies a case's op-independent output checks: shapes, absent, finite.
func checkCaseOutputs(t *testing.T, c *caseJSON, got map[string]fn.Tensor) {
	t.Helper()
	for key, shape := range c.Shapes {
		if g, ok := got[key]; !ok || !slices.Equal(g.Shape(), shape) {
			t.Errorf("output %s shape %v, want %v", key, g.Shape(), shape)
		}
	}
	for _, key := range c.Absent {
		if _, ok := got[key]; ok {
			t.Errorf("output %s should be absent", key)
		}
	}
	for _, key := range c.Finite {
		for i, v := range values(got[key]) {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("%s[%d] = %g, want finite", key, i, v)
			}
		}
	}
}

// dtypeOf maps the JSON names to dtypes.
func dtypeOf(s string) fn.DType {
	switch s {
	case "float32":
		return fn.Float32
	case "float16":
		return fn.Float16
	case "bfloat16":
		return fn.BFloat16
	case "int32":
		return fn.Int32
	}
	panic("tests: dtype " + s)
}

// makeTensor builds a tensor of dtype dt from float64 values (rounded to dt).
func makeTensor(dt fn.DType, shape []int, data []float64) fn.Tensor {
	switch dt {
	case fn.Float32:
		v := make([]float32, len(data))
		for i, d := range data {
			v[i] = float32(d)
		}
		return fn.FromFloat32(v, shape...)
	case fn.Float16:
		v := make([]uint16, len(data))
		for i, d := range data {
			v[i] = float16.Fromfloat32(float32(d)).Bits()
		}
		return fn.FromFloat16Bits(v, shape...)
	case fn.BFloat16:
		v := make([]uint16, len(data))
		for i, d := range data {
			v[i] = half.F32ToBF16(float32(d))
		}
		return fn.FromBFloat16Bits(v, shape...)
	default:
		v := make([]int32, len(data))
		for i, d := range data {
			v[i] = int32(d)
		}
		return fn.FromInt32(v, shape...)
	}
}

// expectation is a list of expected values for an output, optionally over a [lo:hi) slice
// of it, parsed from keys like "embeddingSumT[0:4]".
type expectation struct {
	key    string
	lo, hi int // hi < 0: whole output
	vals   []float64
}

func parseExpect(m map[string][]float64) ([]expectation, error) {
	var out []expectation
	for k, v := range m {
		e := expectation{key: k, hi: -1, vals: v}
		if i := strings.IndexByte(k, '['); i >= 0 {
			var err1, err2 error
			parts := strings.Split(strings.TrimSuffix(k[i+1:], "]"), ":")
			if len(parts) != 2 {
				return nil, fmt.Errorf("expect key %q", k)
			}
			e.key = k[:i]
			e.lo, err1 = strconv.Atoi(parts[0])
			e.hi, err2 = strconv.Atoi(parts[1])
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("expect key %q", k)
			}
		}
		out = append(out, e)
	}
	return out, nil
}

// rng is the suite's seeded generator.
func rng(seed float64) *rand.Rand { return rand.New(rand.NewPCG(uint64(seed), 0x5eed)) }

func uniform(r *rand.Rand, n int, lo, hi float64) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = lo + (hi-lo)*r.Float64()
	}
	return v
}

func intAttr(g map[string]any, k string) int {
	v, _ := g[k].(float64)
	return int(v)
}

func strAttr(g map[string]any, k string) string {
	v, _ := g[k].(string)
	return v
}
