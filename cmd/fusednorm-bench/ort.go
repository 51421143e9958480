package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// ortRunner runs the oracle's ONNX Runtime benchmark (bench/bench_ort.js in a prepared copy
// of tools/oracle, with node_modules installed) for one config at a time, right
// after the case it matches, so both are measured at the same moment on the same machine.
type ortRunner struct {
	dir     string
	threads int
	minRuns int
	minSecs float64
}

// ortResult is the row of bench_ort.js's output that matches our thread count.
type ortResult struct {
	Config         string             `json:"config"`
	Threads        string             `json:"threads"`
	Bytes          int64              `json:"bytes"`
	KernelMsMedian float64            `json:"kernel_ms_median"`
	WallMsMedian   float64            `json:"wall_ms_median"`
	StreamGBps     map[string]float64 `json:"stream_GBps"`
}

func newORTRunner(dir string, threads, minRuns int, minTime time.Duration) (*ortRunner, error) {
	script := filepath.Join(dir, "bench", "bench_ort.js")
	if _, err := os.Stat(script); err != nil {
		return nil, fmt.Errorf("-ort %s: no bench/bench_ort.js there (want a copy of tools/oracle with node_modules, as make bench-ort makes): %w", dir, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "onnxruntime-node")); err != nil {
		return nil, fmt.Errorf("-ort %s: onnxruntime-node is not installed there; run `npm ci --ignore-scripts` in it first", dir)
	}
	if _, err := exec.LookPath("node"); err != nil {
		return nil, fmt.Errorf("-ort: node is not on PATH: %w", err)
	}
	return &ortRunner{dir: dir, threads: threads, minRuns: max(3, minRuns), minSecs: max(0.2, minTime.Seconds())}, nil
}

// run times ORT on one config. bench_ort.js measures its three thread settings ("1", "2",
// "2 nospin"); the row whose label is our thread count is kept.
func (o *ortRunner) run(ctx context.Context, config string) (*ortResult, error) {
	cmd := exec.CommandContext(ctx, "node", filepath.Join("bench", "bench_ort.js"), "--only", config,
		"--min-runs", strconv.Itoa(o.minRuns), "--min-secs", strconv.FormatFloat(o.minSecs, 'f', -1, 64))
	cmd.Dir = o.dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("ort: %s: %w: %s", config, err, lastLines(stderr.String(), 5))
	}
	var out struct {
		Results []ortResult `json:"results"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		return nil, fmt.Errorf("ort: %s: output is not JSON: %w", config, err)
	}
	want := strconv.Itoa(o.threads)
	for i := range out.Results {
		if r := &out.Results[i]; r.Config == config && r.Threads == want {
			return r, nil
		}
	}
	return nil, fmt.Errorf("ort: %s: no result for %s threads (bench_ort.js measures 1 and 2)", config, want)
}

func lastLines(s string, n int) string {
	lines := bytes.Split(bytes.TrimSpace([]byte(s)), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte(" | ")))
}
