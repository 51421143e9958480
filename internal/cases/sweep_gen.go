//go:build ignore

// sweep_gen writes each op's sweep.json: the width sweep of cmd/fusednorm-bench -set sweep
// and tools/anchors (torch, ONNX Runtime WebGPU), one case per hidden size and dtype, sized
// to move at least 256 MiB per call, plus the small-batch latency cases (one sequence of 128
// tokens). Run it from this folder (go generate ./internal/cases); the bench's tests check
// every rule below against the files, so an edit by hand that breaks one fails there.
package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
)

// widths are the hidden sizes swept: powers of two and the common model widths from 64 to
// 16384, and odd ones (1000, 1023, 4097) that no vector width divides.
var widths = []int{64, 128, 256, 384, 512, 768, 1000, 1023, 1024, 1536, 2048, 2560, 3072, 4096, 4097,
	5120, 6144, 8192, 12288, 16384}

// latencyWidths get a latency case: one sequence of 128 tokens.
var latencyWidths = []int{768, 4096}

const (
	target = 256 << 20 // AddLayerNorm: bytes of each (N, D) tensor; EmbedLayerNorm: bytes moved per call, at least
	seqLen = 512       // EmbedLayerNorm S of the sweep
	minB   = 64        // EmbedLayerNorm B of the sweep, raised (by powers of two) until the call moves target bytes
	vocab  = 30522     // BERT's vocabulary
	latS   = 128       // the latency cases: B 1, S 128 (N 128 rows for AddLayerNorm)
)

var short = map[string]string{"float32": "f32", "float16": "f16", "bfloat16": "bf16"}

func esize(dt string) int64 {
	if dt == "float32" {
		return 4
	}
	return 2
}

// The bytes rules of the files below (the same as bench.json's).
func addBytes(N, D, e int64) (int64, int64) { return 2*N*D*e + 3*D*e, 2*N*D*e + 2*N*4 }
func embedBytes(B, S, H, e int64) (int64, int64) {
	return 3*B*S*4 + 3*B*S*H*e + 2*H*e, B*S*H*e + B*4
}

func addCase(name string, dt string, N, D int64) string {
	r, w := addBytes(N, D, esize(dt))
	return fmt.Sprintf(`{"name": %q, "dtype": %q, "shape": {"N": %d, "D": %d}, "bytes": {"read": %d, "write": %d}}`, name, dt, N, D, r, w)
}

func embedCase(name string, dt string, B, S, H int64) string {
	r, w := embedBytes(B, S, H, esize(dt))
	return fmt.Sprintf(`{"name": %q, "dtype": %q, "shape": {"B": %d, "S": %d, "H": %d, "V": %d, "P": 512, "G": 2}, "bytes": {"read": %d, "write": %d}}`,
		name, dt, B, S, H, vocab, r, w)
}

func addCases() []string {
	var cs []string
	for _, dt := range []string{"float32", "float16", "bfloat16"} {
		e := esize(dt)
		for _, D := range widths {
			N := (target + int64(D)*e - 1) / (int64(D) * e) // each (N, D) tensor at least 256 MiB
			cs = append(cs, addCase(fmt.Sprintf("addln-d%d-%s", D, short[dt]), dt, N, int64(D)))
		}
		for _, D := range latencyWidths {
			cs = append(cs, addCase(fmt.Sprintf("lat-addln-n%d-d%d-%s", latS, D, short[dt]), dt, latS, int64(D)))
		}
	}
	return cs
}

func embedCases() []string {
	var cs []string
	for _, dt := range []string{"float32", "float16"} {
		e := esize(dt)
		for _, H := range widths {
			B := int64(minB)
			for {
				r, w := embedBytes(B, seqLen, int64(H), e)
				if r+w >= target {
					break
				}
				B *= 2
			}
			cs = append(cs, embedCase(fmt.Sprintf("eln-h%d-%s", H, short[dt]), dt, B, seqLen, int64(H)))
		}
		for _, H := range latencyWidths {
			cs = append(cs, embedCase(fmt.Sprintf("lat-eln-b1-s%d-h%d-%s", latS, H, short[dt]), dt, 1, latS, int64(H)))
		}
	}
	return cs
}

const addHead = `{
  "format": 1,
  "op": "AddLayerNorm",
  "about": "Width sweep of AddLayerNorm for cmd/fusednorm-bench -set sweep and tools/anchors; written by sweep_gen.go (go generate ./internal/cases), do not edit by hand. One case per hidden size D and dtype, N rows so that each (N, D) tensor holds at least 256 MiB (the call moves about 1 GiB); the lat- cases are one sequence of 128 tokens (N 128). Data, attributes and outputs as in bench.json.",
  "inputs": ["x1", "x2", "gamma", "beta", "bias"],
  "outputs": ["y", "mean", "rstd", "x"],
  "attrs": {
    "epsilon": 1e-05,
    "additional_output": true
  },
  "data": {
    "seed": 2,
    "x1,x2": "uniform in [-1, 1)",
    "gamma": "uniform in [-1, 1)",
    "beta,bias": "uniform in [-0.1, 0.1)"
  },
  "bytes_rule": {
    "about": "What the op must read and write, each tensor once. mean and rstd are float32 whatever the dtype. 1 GB = 1e9 B. esize = 4 (float32) or 2 (float16, bfloat16).",
    "read": "2*N*D*esize + 3*D*esize",
    "write": "2*N*D*esize + 2*N*4"
  },
  "quick": {
    "about": "-quick divides N by 64 (at least 1) for a smoke run: about 4 MiB per tensor; bytes follow the rule.",
    "divide": "N",
    "by": 64
  },
  "cases": [
`

const embedHead = `{
  "format": 1,
  "op": "EmbedLayerNormalization",
  "about": "Width sweep of EmbedLayerNorm for cmd/fusednorm-bench -set sweep and tools/anchors; written by sweep_gen.go (go generate ./internal/cases), do not edit by hand. One case per hidden size H and dtype at S 512 and BERT's vocabulary, B 64 or the smallest power of two above it that moves at least 256 MiB per call; the lat- cases are one sequence of 128 tokens (B 1, S 128). Data, attributes and outputs as in bench.json.",
  "inputs": ["input_ids", "segment_ids", "word_embedding", "position_embedding", "segment_embedding", "gamma", "beta", "mask"],
  "outputs": ["output", "mask_index"],
  "attrs": {
    "epsilon": 1e-12,
    "mask_index_rule": "first_zero"
  },
  "data": {
    "seed": 1,
    "input_ids": "uniform in [0, V)",
    "segment_ids": "0 for s < S/2, else 1",
    "mask": "right-padded: 1 for s < len, then 0; len uniform in [S/2, S] per batch row",
    "word_embedding,position_embedding,segment_embedding": "uniform in [-0.5, 0.5)",
    "gamma": "uniform in [-1, 1)",
    "beta": "uniform in [-0.1, 0.1)"
  },
  "bytes_rule": {
    "about": "What the op must read and write, each tensor once; the gather counts the rows it touches (word, position and segment row per token), not the tables. 1 GB = 1e9 B. esize = 4 (float32) or 2 (float16).",
    "read": "3*B*S*4 + 3*B*S*H*esize + 2*H*esize",
    "write": "B*S*H*esize + B*4"
  },
  "quick": {
    "about": "-quick divides B by 64 (at least 1) and caps the vocabulary V at 256 rows for a smoke run: the word table at H 16384 f32 would otherwise hold 2 GB; bytes follow the rule (they count the rows gathered, not the table).",
    "divide": "B",
    "by": 64,
    "cap": {"V": 256}
  },
  "cases": [
`

func write(path, head string, cases []string) {
	var b bytes.Buffer
	b.WriteString(head)
	b.WriteString("    " + strings.Join(cases, ",\n    ") + "\n  ]\n}\n")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "sweep_gen:", err)
		os.Exit(1)
	}
}

func main() {
	write("addlayernorm/sweep.json", addHead, addCases())
	write("embedlayernorm/sweep.json", embedHead, embedCases())
}
