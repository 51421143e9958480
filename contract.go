package fusednorm

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/fusednorm/fusednorm/shaders"
)

// The Go side of each op's contract. manifest.json under shaders/<op>/ says the same as
// data; TestContractMatchesManifest keeps the two in agreement, and the generic entry
// (GetKernel) sizes its outputs by the manifest's shape rules before a call and hands the
// manifest out (Kernel.Manifest).

type contractInput struct {
	BindKey, Name string
	DTypes        []DType
	MinRank       int
	MaxRank       int
	Optional      bool
}

type contractOutput struct {
	BindKey, Name string
	Optional      bool
}

type opContract struct {
	Domain, Name string
	Version      int
	Folder       string
	Inputs       []contractInput
	Outputs      []contractOutput
	Attributes   map[string]any // name → default
}

// FullName is the name GetKernel takes: "domain.Name".
func (c *opContract) FullName() string { return c.Domain + "." + c.Name }

var (
	tEmbed = []DType{Float32, Float16}
	tIDs   = []DType{Int32}
	t16    = []DType{Float32, Float16, BFloat16}
)

var embedContract = opContract{
	Domain: "com.microsoft", Name: "EmbedLayerNormalization", Version: 1, Folder: shaders.OpEmbedLayerNorm,
	Inputs: []contractInput{
		{"inputIdsT", "input_ids", tIDs, 2, 2, false},
		{"segmentIdsT", "segment_ids", tIDs, 2, 2, true},
		{"wordEmbeddingT", "word_embedding", tEmbed, 2, 2, false},
		{"positionEmbeddingT", "position_embedding", tEmbed, 2, 2, false},
		{"segmentEmbeddingT", "segment_embedding", tEmbed, 2, 2, true},
		{"gammaT", "gamma", tEmbed, 1, 1, false},
		{"betaT", "beta", tEmbed, 1, 1, false},
		{"maskT", "mask", tIDs, 2, 2, true},
		{"positionIdsT", "position_ids", tIDs, 2, 2, true},
	},
	Outputs: []contractOutput{
		{"outputT", "output", false},
		{"maskIndexT", "mask_index", true},
		{"embeddingSumT", "embedding_sum", true},
	},
	Attributes: map[string]any{
		"epsilon":         float64(DefaultEmbedEpsilon),
		"mask_index_type": int64(1),
		"mask_index_rule": "first_zero",
	},
}

var addContract = opContract{
	Domain: "ascend", Name: "AddLayerNorm", Version: 1, Folder: shaders.OpAddLayerNorm,
	Inputs: []contractInput{
		{"x1T", "x1", t16, 1, 8, false},
		{"x2T", "x2", t16, 1, 8, false},
		{"gammaT", "gamma", t16, 1, 8, false},
		{"betaT", "beta", t16, 1, 8, false},
		{"biasT", "bias", t16, 1, 8, true},
	},
	Outputs: []contractOutput{
		{"yT", "y", false},
		{"meanT", "mean", false},
		{"rstdT", "rstd", false},
		{"xT", "x", true},
	},
	Attributes: map[string]any{
		"epsilon":           float64(DefaultAddEpsilon),
		"additional_output": false,
	},
}

// manifest is the part of manifest.json the library reads.
type manifest struct {
	ManifestSpec    string              `json:"manifestSpec"`
	Domain          string              `json:"domain"`
	Name            string              `json:"name"`
	SinceVersion    int                 `json:"sinceVersion"`
	TypeConstraints map[string][]string `json:"typeConstraints"`
	Inputs          []struct {
		BindKey  string          `json:"bindKey"`
		Name     string          `json:"name"`
		DType    string          `json:"dtype"`
		Rank     json.RawMessage `json:"rank"` // n or [min, max]
		Optional bool            `json:"optional"`
	} `json:"inputs"`
	Outputs []struct {
		BindKey  string   `json:"bindKey"`
		Name     string   `json:"name"`
		DType    string   `json:"dtype"`
		Optional bool     `json:"optional"`
		Shape    []string `json:"shape"`
	} `json:"outputs"`
	Attributes map[string]struct {
		Type    string `json:"type"`
		Default any    `json:"default"`
	} `json:"attributes"`
}

func contractJSON(folder string) ([]byte, error) {
	return shaders.Manifest(folder)
}

// manifests parses each op's embedded manifest once; GetKernel is called per request.
var manifests sync.Map // *opContract → func() (*manifest, error)

func loadManifest(c *opContract) (*manifest, error) {
	load, _ := manifests.LoadOrStore(c, sync.OnceValues(func() (*manifest, error) { return parseManifest(c) }))
	return load.(func() (*manifest, error))()
}

func parseManifest(c *opContract) (*manifest, error) {
	b, err := contractJSON(c.Folder)
	if err != nil {
		return nil, err
	}
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("fusednorm: %s manifest: %w", c.Name, err)
	}
	return &m, nil
}

// shapeOf evaluates a manifest output shape rule over the given input shapes. Terms:
// dim(K,i), shape(K), leading(K,G) (K's dims before G's rank), ones(G) (rank(G) ones).
func shapeOf(rule []string, in map[string][]int) ([]int, error) {
	var out []int
	for _, term := range rule {
		open, close := strings.IndexByte(term, '('), strings.LastIndexByte(term, ')')
		if open < 0 || close < open {
			return nil, fmt.Errorf("shape term %q", term)
		}
		fn, args := term[:open], strings.Split(term[open+1:close], ",")
		for i := range args {
			args[i] = strings.TrimSpace(args[i])
		}
		shape, ok := in[args[0]]
		if !ok {
			return nil, fmt.Errorf("shape term %q: %s absent", term, args[0])
		}
		switch {
		case fn == "dim" && len(args) == 2:
			i, err := strconv.Atoi(args[1])
			if err != nil || i < 0 || i >= len(shape) {
				return nil, fmt.Errorf("shape term %q: %s has rank %d", term, args[0], len(shape))
			}
			out = append(out, shape[i])
		case fn == "shape" && len(args) == 1:
			out = append(out, shape...)
		case fn == "leading" && len(args) == 2:
			g, ok := in[args[1]]
			if !ok || len(g) > len(shape) {
				return nil, fmt.Errorf("shape term %q: ranks", term)
			}
			out = append(out, shape[:len(shape)-len(g)]...)
		case fn == "ones" && len(args) == 1:
			out = append(out, ones(len(shape))...)
		default:
			return nil, fmt.Errorf("shape term %q: unknown", term)
		}
	}
	return out, nil
}
