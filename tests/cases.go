// Package tests is the cross-backend conformance suite: every case of each op's test.json
// (SPEC golden vectors, edge cases, every validation rule) and the ONNX Runtime golden data,
// run on any engine and compared with the sequential and float64 references (SPEC §C.5) and,
// bit for bit, with the pure-Go CPU plan under the engine's contraction profile (SPEC §C.4).
//
// Import it to check a backend: tests.Run(t, engine).
package tests

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/x448/float16"

	fn "github.com/fusednorm/fusednorm"
	"github.com/fusednorm/fusednorm/internal/reference"
	"github.com/fusednorm/fusednorm/shaders"
)

// tensorJSON is an explicit tensor of test.json: values in float64, rounded to the case's
// dtype when the tensor is built.
type tensorJSON struct {
	Shape []int     `json:"shape"`
	Data  []float64 `json:"data"`
}

// caseJSON is one case of a test.json file; fields not used by an op stay empty.
type caseJSON struct {
	Name      string                       `json:"name"`
	Note      string                       `json:"note"`
	DTypes    []string                     `json:"dtypes"`    // EmbedLayerNorm
	DTypeRows [][]string                   `json:"dtypeRows"` // AddLayerNorm: x1, x2, gamma
	Inputs    map[string]tensorJSON        `json:"inputs"`
	Base      string                       `json:"base"`
	Set       map[string]tensorJSON        `json:"set"`
	Drop      []string                     `json:"drop"`
	Generate  map[string]any               `json:"generate"`
	Matrix    map[string][]json.RawMessage `json:"matrix"`
	Attrs     map[string]any               `json:"attrs"`
	Want      []string                     `json:"want"`
	Expect    json.RawMessage              `json:"expect"`
	MeanShape []int                        `json:"meanShape"`
	Error     *struct {
		Tensor string `json:"tensor"`
		Rule   string `json:"rule"`
	} `json:"error"`
	Outputs      map[string][]int `json:"outputs"` // caller-allocated output shapes (error cases)
	Absent       []string         `json:"absent"`
	OverflowRows []int            `json:"overflowRows"`
	FiniteY      bool             `json:"finiteY"`
	MixGamma16   bool             `json:"mixGamma16"`
	IdsAsFloat   bool             `json:"idsAsFloat"`
}

type fileJSON struct {
	Op      string     `json:"op"`
	Version int        `json:"version"`
	Cases   []caseJSON `json:"cases"`
}

func loadCases(op string) (*fileJSON, error) {
	b, err := shaders.ContractFile(op, "test.json")
	if err != nil {
		return nil, err
	}
	var f fileJSON
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s/test.json: %w", op, err)
	}
	// Resolve "base" references: a case starts from an earlier case's inputs.
	byName := map[string]*caseJSON{}
	for i := range f.Cases {
		c := &f.Cases[i]
		if c.Base != "" {
			b, ok := byName[c.Base]
			if !ok {
				return nil, fmt.Errorf("%s: case %s: unknown base %s", op, c.Name, c.Base)
			}
			in := map[string]tensorJSON{}
			for k, v := range b.Inputs {
				in[k] = v
			}
			for k, v := range c.Set {
				in[k] = v
			}
			for _, k := range c.Drop {
				delete(in, k)
			}
			c.Inputs = in
			if c.Want == nil {
				c.Want = b.Want
			}
		}
		byName[c.Name] = c
	}
	return &f, nil
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
			v[i] = reference.ToBF16(float32(d))
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
