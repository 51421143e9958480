package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The two ops as bench.json names them, and the folders under shaders/ that hold them.
const (
	opEmbed = "EmbedLayerNormalization"
	opAdd   = "AddLayerNorm"
)

var caseFiles = []string{"embedlayernorm/bench.json", "addlayernorm/bench.json"}

// benchFile is one shaders/<op>/bench.json.
type benchFile struct {
	Format int      `json:"format"`
	Op     string   `json:"op"`
	Inputs []string `json:"inputs"`
	Output []string `json:"outputs"`
	Attrs  struct {
		Epsilon float32 `json:"epsilon"`
	} `json:"attrs"`
	Data struct {
		Seed uint64 `json:"seed"`
	} `json:"data"`
	Quick struct {
		Divide string `json:"divide"`
		By     int    `json:"by"`
	} `json:"quick"`
	Cases []benchCase `json:"cases"`
}

// benchCase is one row of a bench.json "cases" list, plus what the loader derives.
type benchCase struct {
	Name  string         `json:"name"`
	DType string         `json:"dtype"`
	Shape map[string]int `json:"shape"`
	Bytes struct {
		Read  int64 `json:"read"`
		Write int64 `json:"write"`
	} `json:"bytes"`
	ORT string `json:"ort,omitempty"` // config name in the oracle's bench_ort.js

	op      string
	epsilon float32
	seed    uint64
}

// esize is the element size of the case's float dtype.
func (c *benchCase) esize() int64 {
	if c.DType == "float16" {
		return 2
	}
	return 4
}

func (c *benchCase) dim(k string) int64 { return int64(c.Shape[k]) }

// bytesModel is the bytes_rule of the op's bench.json: what the op must read and write,
// each tensor once (the gathered rows for EmbedLayerNorm, not the whole tables).
func (c *benchCase) bytesModel() (read, write int64) {
	e := c.esize()
	switch c.op {
	case opEmbed:
		B, S, H := c.dim("B"), c.dim("S"), c.dim("H")
		return 3*B*S*4 + 3*B*S*H*e + 2*H*e, B*S*H*e + B*4
	case opAdd:
		N, D := c.dim("N"), c.dim("D")
		return 2*N*D*e + 3*D*e, 2*N*D*e + 2*N*4
	}
	return 0, 0
}

// allocBytes is what setting the case up allocates: every input and output tensor whole.
func (c *benchCase) allocBytes() int64 {
	e := c.esize()
	switch c.op {
	case opEmbed:
		B, S, H := c.dim("B"), c.dim("S"), c.dim("H")
		tables := (c.dim("V") + c.dim("P") + c.dim("G") + 2) * H * e
		return tables + 3*B*S*4 + B*S*H*e + B*4
	case opAdd:
		N, D := c.dim("N"), c.dim("D")
		return 4*N*D*e + 3*D*e + 2*N*4
	}
	return 0
}

// shapeString is the case's shape as the table prints it.
func (c *benchCase) shapeString() string {
	if c.op == opEmbed {
		return fmt.Sprintf("B%d S%d H%d", c.Shape["B"], c.Shape["S"], c.Shape["H"])
	}
	return fmt.Sprintf("N%d D%d", c.Shape["N"], c.Shape["D"])
}

func (c *benchCase) shortDType() string {
	if c.DType == "float16" {
		return "f16"
	}
	return "f32"
}

// quick returns the smoke-run variant: the batch dimension divided (at least 1), bytes
// recomputed by the rule, no ORT config (ORT has none at these shapes).
func (c benchCase) quick(dim string, by int) benchCase {
	shape := make(map[string]int, len(c.Shape))
	for k, v := range c.Shape {
		shape[k] = v
	}
	shape[dim] = max(1, shape[dim]/by)
	c.Shape = shape
	c.Name = c.Name + "-quick"
	c.ORT = ""
	c.Bytes.Read, c.Bytes.Write = c.bytesModel()
	return c
}

// loadCases reads both bench.json files under dir (the repository's shaders/ folder) and
// checks every case's byte counts against the rule, so the data and the code cannot drift.
func loadCases(dir string, quick bool) ([]benchCase, error) {
	var all []benchCase
	for _, f := range caseFiles {
		path := filepath.Join(dir, f)
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		var bf benchFile
		if err := json.Unmarshal(raw, &bf); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if bf.Format != 1 {
			return nil, fmt.Errorf("%s: format %d, want 1", path, bf.Format)
		}
		if bf.Op != opEmbed && bf.Op != opAdd {
			return nil, fmt.Errorf("%s: unknown op %q", path, bf.Op)
		}
		for _, c := range bf.Cases {
			c.op, c.epsilon, c.seed = bf.Op, bf.Attrs.Epsilon, bf.Data.Seed
			if err := c.check(); err != nil {
				return nil, fmt.Errorf("%s: case %q: %w", path, c.Name, err)
			}
			if quick {
				if bf.Quick.By < 1 || c.Shape[bf.Quick.Divide] == 0 {
					return nil, fmt.Errorf("%s: quick: divide %q by %d is not a valid rule", path, bf.Quick.Divide, bf.Quick.By)
				}
				c = c.quick(bf.Quick.Divide, bf.Quick.By)
			}
			all = append(all, c)
		}
	}
	return all, nil
}

func (c *benchCase) check() error {
	if c.DType != "float32" && c.DType != "float16" {
		return fmt.Errorf("dtype %q is not float32 or float16", c.DType)
	}
	keys := []string{"N", "D"}
	if c.op == opEmbed {
		keys = []string{"B", "S", "H", "V", "P", "G"}
	}
	for _, k := range keys {
		if c.Shape[k] < 1 {
			return fmt.Errorf("shape %s = %d, want ≥ 1", k, c.Shape[k])
		}
	}
	if c.op == opEmbed && c.Shape["S"] > c.Shape["P"] {
		return fmt.Errorf("S = %d exceeds the %d position rows", c.Shape["S"], c.Shape["P"])
	}
	r, w := c.bytesModel()
	if r != c.Bytes.Read || w != c.Bytes.Write {
		return fmt.Errorf("bytes read/write %d/%d, the bytes rule gives %d/%d", c.Bytes.Read, c.Bytes.Write, r, w)
	}
	return nil
}

// findCasesDir locates the repository's shaders/ folder by walking up from the working
// directory and from the executable's, since `go run` and installed binaries start in
// different places.
func findCasesDir() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		if exe, err := filepath.EvalSymlinks(exe); err == nil {
			starts = append(starts, filepath.Dir(exe))
		}
	}
	var tried []string
	for _, s := range starts {
		for d := s; ; d = filepath.Dir(d) {
			cand := filepath.Join(d, "shaders")
			if _, err := os.Stat(filepath.Join(cand, caseFiles[0])); err == nil {
				return cand, nil
			}
			tried = append(tried, cand)
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return "", errors.New("cannot find the benchmark cases (shaders/" + caseFiles[0] +
		"); run from inside the repository or pass -cases DIR (the shaders/ folder). Looked in: " +
		strings.Join(tried, ", "))
}
