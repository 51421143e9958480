// Package ortcase reads the ONNX Runtime golden cases under tests/testdata/ort.
//
// Each case is one folder written by tools/ortgolden: case.json names the op, dtype,
// attributes, the outputs asked for, and every tensor with its dtype, shape and raw
// little-endian file (in.<name>.bin for inputs, out.<name>.bin for what ONNX Runtime
// returned). A case whose run ORT refused carries ORT's message in Error and no outputs.
package ortcase

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
)

// Tensor is one input or output. Exactly one of F32 (float32), U16 (float16 bits) or I32
// (int32) holds the data, chosen by DType.
type Tensor struct {
	Name, DType string
	Shape       []int
	F32         []float32
	U16         []uint16
	I32         []int32
}

// Len is the element count the shape implies.
func (t *Tensor) Len() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// DataLen is the element count actually held.
func (t *Tensor) DataLen() int {
	switch t.DType {
	case "float32":
		return len(t.F32)
	case "float16":
		return len(t.U16)
	case "int32":
		return len(t.I32)
	}
	return 0
}

// Case is one golden case: ORT's inputs, the outputs it asked for, and what ORT returned.
type Case struct {
	Dir, Name, Op, DType string
	Attrs                map[string]float64
	Want                 []string
	Inputs, Outputs      []Tensor
	Error                string // ORT's message, or "" when the run succeeded
	Note                 string // why the case exists, when the generator said so
}

// Input returns the named input, or nil when the case leaves it out.
func (c *Case) Input(name string) *Tensor { return find(c.Inputs, name) }

// Output returns the named output, or nil when ORT did not produce it.
func (c *Case) Output(name string) *Tensor { return find(c.Outputs, name) }

func find(ts []Tensor, name string) *Tensor {
	for i := range ts {
		if ts[i].Name == name {
			return &ts[i]
		}
	}
	return nil
}

type tensorJSON struct {
	Name  string `json:"name"`
	DType string `json:"dtype"`
	Shape []int  `json:"shape"`
	File  string `json:"file"`
}

type caseJSON struct {
	Format  int                `json:"format"`
	Name    string             `json:"name"`
	Op      string             `json:"op"`
	DType   string             `json:"dtype"`
	Attrs   map[string]float64 `json:"attrs"`
	Want    []string           `json:"want"`
	Inputs  []tensorJSON       `json:"inputs"`
	Outputs []tensorJSON       `json:"outputs"`
	Error   *string            `json:"error"`
	Note    string             `json:"note"`
}

// Load reads the case in dir (its case.json and every tensor file it names).
func Load(dir string) (*Case, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "case.json"))
	if err != nil {
		return nil, fmt.Errorf("ortcase: %w", err)
	}
	var j caseJSON
	if err := json.Unmarshal(raw, &j); err != nil {
		return nil, fmt.Errorf("ortcase: %s: %w", dir, err)
	}
	if j.Format != 1 {
		return nil, fmt.Errorf("ortcase: %s: unknown format %d", dir, j.Format)
	}
	c := &Case{Dir: dir, Name: j.Name, Op: j.Op, DType: j.DType, Attrs: j.Attrs, Want: j.Want, Note: j.Note}
	if j.Error != nil {
		c.Error = *j.Error
		if c.Error == "" {
			c.Error = "unknown ORT error"
		}
	}
	if c.Inputs, err = loadTensors(dir, j.Inputs); err != nil {
		return nil, err
	}
	if c.Outputs, err = loadTensors(dir, j.Outputs); err != nil {
		return nil, err
	}
	return c, nil
}

func loadTensors(dir string, descs []tensorJSON) ([]Tensor, error) {
	out := make([]Tensor, 0, len(descs))
	for _, d := range descs {
		t, err := loadTensor(dir, d)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

func loadTensor(dir string, d tensorJSON) (Tensor, error) {
	t := Tensor{Name: d.Name, DType: d.DType, Shape: d.Shape}
	for _, n := range d.Shape {
		if n < 0 {
			return t, fmt.Errorf("ortcase: %s: %s: negative dimension in %v", dir, d.Name, d.Shape)
		}
	}
	if filepath.Base(d.File) != d.File {
		return t, fmt.Errorf("ortcase: %s: %s: file %q leaves the case folder", dir, d.Name, d.File)
	}
	raw, err := os.ReadFile(filepath.Join(dir, d.File))
	if err != nil {
		return t, fmt.Errorf("ortcase: %w", err)
	}
	size := map[string]int{"float32": 4, "float16": 2, "int32": 4}[d.DType]
	if size == 0 {
		return t, fmt.Errorf("ortcase: %s: %s: unsupported dtype %q", dir, d.Name, d.DType)
	}
	n := t.Len()
	if len(raw) != n*size {
		return t, fmt.Errorf("ortcase: %s: %s: %d bytes, shape %v of %s needs %d", dir, d.File, len(raw), d.Shape, d.DType, n*size)
	}
	le := binary.LittleEndian
	switch d.DType {
	case "float32":
		t.F32 = make([]float32, n)
		for i := range t.F32 {
			t.F32[i] = math.Float32frombits(le.Uint32(raw[4*i:]))
		}
	case "float16":
		t.U16 = make([]uint16, n)
		for i := range t.U16 {
			t.U16[i] = le.Uint16(raw[2*i:])
		}
	case "int32":
		t.I32 = make([]int32, n)
		for i := range t.I32 {
			t.I32[i] = int32(le.Uint32(raw[4*i:]))
		}
	}
	return t, nil
}

// LoadAll loads every case folder directly under root, sorted by case name.
func LoadAll(root string) ([]*Case, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("ortcase: %w", err)
	}
	var cases []*Case
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(root, e.Name())
		if _, err := os.Stat(filepath.Join(dir, "case.json")); err != nil {
			continue
		}
		c, err := Load(dir)
		if err != nil {
			return nil, err
		}
		cases = append(cases, c)
	}
	sort.Slice(cases, func(i, k int) bool { return cases[i].Name < cases[k].Name })
	return cases, nil
}
