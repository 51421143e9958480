package ortcase

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var root = filepath.Join("..", "..", "tests", "testdata", "ort")

func loadAll(t *testing.T) []*Case {
	t.Helper()
	cases, err := LoadAll(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) == 0 {
		t.Fatalf("no cases under %s", root)
	}
	return cases
}

func byName(t *testing.T, cases []*Case, name string) *Case {
	t.Helper()
	for _, c := range cases {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("case %s missing", name)
	return nil
}

func TestEveryCaseIsConsistent(t *testing.T) {
	cases := loadAll(t)
	if !slices.IsSortedFunc(cases, func(a, b *Case) int { return strings.Compare(a.Name, b.Name) }) {
		t.Error("LoadAll did not sort by name")
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			if filepath.Base(c.Dir) != c.Name {
				t.Errorf("folder %s holds case %s", c.Dir, c.Name)
			}
			if c.DType != "float32" && c.DType != "float16" {
				t.Errorf("dtype %q", c.DType)
			}
			for _, ts := range [][]Tensor{c.Inputs, c.Outputs} {
				for _, x := range ts {
					if x.DataLen() != x.Len() {
						t.Errorf("%s: %d elements for shape %v", x.Name, x.DataLen(), x.Shape)
					}
				}
			}
			if strings.Contains(c.Name, "_err_") {
				if c.Error == "" || len(c.Outputs) != 0 {
					t.Errorf("error case: error %q, %d outputs", c.Error, len(c.Outputs))
				}
				return
			}
			if c.Error != "" {
				t.Fatalf("ORT error: %s", c.Error)
			}
			for _, w := range c.Want {
				if c.Output(w) == nil {
					t.Errorf("output %s wanted but absent", w)
				}
			}
			switch c.Op {
			case "EmbedLayerNormalization":
				checkELNShapes(t, c)
			case "SkipLayerNormalization":
				checkSLNShapes(t, c)
			default:
				t.Errorf("op %q", c.Op)
			}
		})
	}
}

func checkELNShapes(t *testing.T, c *Case) {
	ids, word := c.Input("input_ids"), c.Input("word_embedding")
	if ids == nil || word == nil || c.Input("position_embedding") == nil || c.Input("gamma") == nil || c.Input("beta") == nil {
		t.Fatal("a required input is missing")
	}
	if (c.Input("segment_ids") == nil) != (c.Input("segment_embedding") == nil) {
		t.Error("segment_ids and segment_embedding must come together")
	}
	b, s, h := ids.Shape[0], ids.Shape[1], word.Shape[1]
	want := map[string][]int{"output": {b, s, h}, "mask_index": {b}, "embedding_sum": {b, s, h}}
	for _, o := range c.Outputs {
		if !slices.Equal(o.Shape, want[o.Name]) {
			t.Errorf("%s shape %v, want %v", o.Name, o.Shape, want[o.Name])
		}
		if o.Name == "mask_index" && o.DType != "int32" || o.Name != "mask_index" && o.DType != c.DType {
			t.Errorf("%s dtype %s", o.Name, o.DType)
		}
	}
}

func checkSLNShapes(t *testing.T, c *Case) {
	in := c.Input("input")
	if in == nil || c.Input("skip") == nil || c.Input("gamma") == nil {
		t.Fatal("a required input is missing")
	}
	stat := append(slices.Clone(in.Shape[:len(in.Shape)-1]), 1)
	for _, o := range c.Outputs {
		want, dt := in.Shape, c.DType
		if o.Name == "mean" || o.Name == "inv_std_var" {
			want, dt = stat, "float32"
		}
		if !slices.Equal(o.Shape, want) || o.DType != dt {
			t.Errorf("%s %s%v, want %s%v", o.Name, o.DType, o.Shape, dt, want)
		}
	}
}

// spec §A.6: ORT 1.30 CPU and our float32 rendition agree bit for bit on G1.
func TestELNG1MatchesSpec(t *testing.T) {
	c := byName(t, loadAll(t), "eln_g1")
	out := c.Output("output").F32
	want := map[int]string{
		0: "0.369171709 0.061503008 1.15989745 -0.850924134",
		1: "0.743019462 -0.0574349314 0.84324652 -0.851714075",
		4: "0.576687396 0.297913074 0.961589873 0.446270347",
		5: "0.64977932 0.110397369 1.18695354 0.144697487",
	}
	for tok, w := range want {
		if got := fmt.Sprintf("%.9g %.9g %.9g %.9g", out[4*tok], out[4*tok+1], out[4*tok+2], out[4*tok+3]); got != w {
			t.Errorf("t%d = %s, want %s", tok, got, w)
		}
	}
	sum := c.Output("embedding_sum").F32
	if got := fmt.Sprintf("%.9g %.9g %.9g %.9g", sum[0], sum[1], sum[2], sum[3]); got != "0.700000048 0.700000048 1.79999995 1.30000007" {
		t.Errorf("sum t0 = %s", got)
	}
	if got := c.Output("mask_index").I32; !slices.Equal(got, []int32{2, 2, 1}) {
		t.Errorf("mask_index = %v", got)
	}
}

// spec §B.7 A2: ORT's SkipLayerNormalization (single-pass variance) is a tolerance oracle
// for the canonical two-pass form.
func TestSLNA2MatchesSpec(t *testing.T) {
	c := byName(t, loadAll(t), "sln_a2")
	check := func(name string, want []float64, tol float64) {
		got := c.Output(name).F32
		for i, w := range want {
			// want is printed with 9 digits, so f32(want) is the exact float32 it names
			if math.Abs(float64(got[i])-float64(float32(w))) > tol {
				t.Errorf("%s[%d] = %.9g, want %.9g", name, i, got[i], w)
			}
		}
	}
	check("output", []float64{-0.939310312, -0.337541968, 0.426206827, -1.20129085, -0.263150454, -0.468019873, -0.623608053, -1.31099415}, 1e-6)
	check("mean", []float64{3.0625, 3.125}, 1e-6)
	check("inv_std_var", []float64{0.642263472, 0.256732136}, 1e-6)
	check("input_skip_bias_sum", []float64{1.60000002, 1.70000005, 3.54999995, 5.4000001, 2.0999999, -1.29999995, 2.29999995, 9.39999962}, 0)
}
