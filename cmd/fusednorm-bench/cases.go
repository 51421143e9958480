package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/fusednorm/fusednorm/internal/cases"
)

// The two ops as bench.json names them, and the folders under internal/cases/ that hold them.
const (
	opEmbed = "EmbedLayerNormalization"
	opAdd   = "AddLayerNorm"
)

// The case sets -set chooses: each op's <set>.json under internal/cases. bench is the default
// run; sweep is the width sweep (hidden sizes 64 to 16384, about 1 GiB moved per call, and
// the latency cases of one 128-token sequence) that tools/anchors times on the peers too.
const (
	setBench = "bench"
	setSweep = "sweep"
)

// caseFiles are the files of a set, by folder name: "embedlayernorm/bench.json".
func caseFiles(set string) []string {
	return []string{"embedlayernorm/" + set + ".json", "addlayernorm/" + set + ".json"}
}

// benchFile is one internal/cases/<op>/bench.json (or sweep.json: the same format).
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
		Divide string         `json:"divide"`
		By     int            `json:"by"`
		Cap    map[string]int `json:"cap,omitempty"` // dimensions capped at these sizes (EmbedLayerNorm's V in the sweep)
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
	if c.DType == "float32" {
		return 4
	}
	return 2 // float16, bfloat16
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

func (c *benchCase) shortDType() string { return shortDType(c.DType) }

// shortDType is a dtype's name in the table: f32, f16 or bf16.
func shortDType(name string) string {
	switch name {
	case "float16":
		return "f16"
	case "bfloat16":
		return "bf16"
	}
	return "f32"
}

// quick returns the smoke-run variant: the batch dimension divided (at least 1), the
// dimensions of capped held to at most their cap, bytes recomputed by the rule, no ORT
// config (ORT has none at these shapes).
func (c benchCase) quick(dim string, by int, capped map[string]int) benchCase {
	shape := make(map[string]int, len(c.Shape))
	for k, v := range c.Shape {
		shape[k] = v
	}
	shape[dim] = max(1, shape[dim]/by)
	for k, v := range capped {
		if _, ok := shape[k]; ok {
			shape[k] = min(shape[k], v)
		}
	}
	c.Shape = shape
	c.Name = c.Name + "-quick"
	c.ORT = ""
	c.Bytes.Read, c.Bytes.Write = c.bytesModel()
	return c
}

// caseSource reads an op's case file, by folder name: "embedlayernorm/bench.json".
type caseSource func(file string) ([]byte, error)

// embeddedCases are the cases compiled into the binary (package internal/cases embeds
// them), so the bench runs from any folder.
func embeddedCases(file string) ([]byte, error) {
	op, name, _ := strings.Cut(file, "/")
	return cases.File(op, name)
}

// dirCases reads the cases from a folder laid out like internal/cases/ (-cases).
func dirCases(dir string) caseSource {
	return func(file string) ([]byte, error) { return os.ReadFile(filepath.Join(dir, file)) }
}

// loadCases reads both files of the set (bench or sweep) and checks every case's byte counts
// against the rule, so the data and the code cannot drift.
func loadCases(read caseSource, set string, quick bool) ([]benchCase, error) {
	if set != setBench && set != setSweep {
		return nil, fmt.Errorf("case set %q: want %s or %s", set, setBench, setSweep)
	}
	var all []benchCase
	for _, path := range caseFiles(set) {
		raw, err := read(path)
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
				for k, v := range bf.Quick.Cap {
					if v < 1 {
						return nil, fmt.Errorf("%s: quick: cap %s at %d, want ≥ 1", path, k, v)
					}
				}
				c = c.quick(bf.Quick.Divide, bf.Quick.By, bf.Quick.Cap)
				if err := c.check(); err != nil { // a cap must leave a valid case (S ≤ P, ids < V)
					return nil, fmt.Errorf("%s: case %q: %w", path, c.Name, err)
				}
			}
			all = append(all, c)
		}
	}
	return all, nil
}

func (c *benchCase) check() error {
	switch {
	case c.DType == "float32" || c.DType == "float16":
	case c.DType == "bfloat16" && c.op == opAdd:
	default:
		return fmt.Errorf("dtype %q is not float32 or float16 (or bfloat16 for %s)", c.DType, opAdd)
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
