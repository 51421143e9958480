package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/fusednorm/fusednorm"
)

// table prints one row per case as soon as it is measured (the largest cases take a while),
// with column widths fixed up front from the case list.
type table struct {
	w                  io.Writer
	nameW              int
	shapeW             int
	probe, ort, kernel bool
}

func newTable(w io.Writer, cases []benchCase, probe, ort, kernel bool) *table {
	t := &table{w: w, nameW: len("case"), shapeW: len("shape"), probe: probe, ort: ort, kernel: kernel}
	for i := range cases {
		t.nameW = max(t.nameW, len(cases[i].Name))
		t.shapeW = max(t.shapeW, len(cases[i].shapeString()))
	}
	return t
}

func (t *table) header() {
	cols := []string{"dtype", "backend", "median ms", "min ms", "runs", "GB/s"}
	if t.kernel {
		cols = append(cols, "kernel ms", "kernel GB/s", "% copy", "device ms")
	}
	if t.probe {
		cols = append(cols, "probe GB/s", "% probe")
	}
	if t.ort {
		cols = append(cols, "ORT ms", "speedup")
	}
	fmt.Fprintln(t.w, t.line("case", "shape", cols))
	fmt.Fprintln(t.w, strings.Repeat("-", len(t.line("case", "shape", cols))))
}

var colW = map[string]int{"dtype": 5, "backend": 8, "median ms": 10, "min ms": 10, "runs": 5, "GB/s": 7,
	"probe GB/s": 10, "% probe": 7, "ORT ms": 9, "speedup": 7, "kernel ms": 9, "kernel GB/s": 11, "% copy": 6, "device ms": 9}

var colOrder = []string{"dtype", "backend", "median ms", "min ms", "runs", "GB/s", "kernel ms", "kernel GB/s", "% copy", "device ms", "probe GB/s", "% probe", "ORT ms", "speedup"}

// line lays out a row; cells are the values of the columns in use, in colOrder.
func (t *table) line(name, shape string, cells []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-*s  %-*s", t.nameW, name, t.shapeW, shape)
	i := 0
	for _, c := range colOrder {
		if (!t.probe && (c == "probe GB/s" || c == "% probe")) || (!t.ort && (c == "ORT ms" || c == "speedup")) ||
			(!t.kernel && (c == "kernel ms" || c == "kernel GB/s" || c == "% copy" || c == "device ms")) {
			continue
		}
		if i >= len(cells) {
			break
		}
		if c == "dtype" || c == "backend" {
			fmt.Fprintf(&b, "  %-*s", colW[c], cells[i])
		} else {
			fmt.Fprintf(&b, "  %*s", colW[c], cells[i])
		}
		i++
	}
	return strings.TrimRight(b.String(), " ")
}

func (t *table) row(r *result) {
	dt := shortDType(r.DType)
	if r.Skipped != "" || r.Error != "" {
		msg := "skipped: " + r.Skipped
		if r.Error != "" {
			msg = "error: " + r.Error
		}
		fmt.Fprintf(t.w, "%s  %s\n", t.line(r.Case, r.shape, []string{dt, r.Backend}), msg)
		return
	}
	ran := r.Backend
	if r.RanOn != "" && r.RanOn != r.Backend {
		ran = r.Backend + ">" + r.RanOn // auto routed the case's host-tensor calls
	}
	cells := []string{dt, ran, fmt.Sprintf("%.3f", r.MedianMs), fmt.Sprintf("%.3f", r.MinMs),
		fmt.Sprint(r.Runs), fmt.Sprintf("%.2f", r.GBps)}
	if t.kernel {
		dev := "-"
		if r.DeviceMs > 0 {
			dev = fmt.Sprintf("%.4f", r.DeviceMs)
		}
		pct := "-"
		if r.KernelPctCopy > 0 {
			pct = fmt.Sprintf("%.0f%%", r.KernelPctCopy)
		}
		cells = append(cells, fmt.Sprintf("%.4f", r.KernelMs), fmt.Sprintf("%.1f", r.KernelGBps), pct, dev)
	}
	if t.probe {
		cells = append(cells, fmt.Sprintf("%.2f", r.Probe.Best()), fmt.Sprintf("%.0f%%", r.PctOfProbe))
	}
	if t.ort {
		switch {
		case r.ORT != nil:
			cells = append(cells, fmt.Sprintf("%.3f", r.ORT.KernelMsMedian), fmt.Sprintf("%.2fx", r.ORT.KernelMsMedian/r.MedianMs))
		default:
			cells = append(cells, "-", "-")
		}
	}
	line := t.line(r.Case, r.shape, cells)
	if r.ORTError != "" {
		line += "  ort error: " + r.ORTError
	}
	fmt.Fprintln(t.w, line)
}

// report is the -json file.
type report struct {
	Tool     string         `json:"tool"`
	Time     string         `json:"time"`
	Go       string         `json:"go"`
	Host     map[string]any `json:"host"`
	Engine   fusednorm.Info `json:"engine"`
	Settings map[string]any `json:"settings"`
	Notes    []string       `json:"notes"`
	Results  []*result      `json:"results"`
}

func writeJSON(path string, info fusednorm.Info, o *options, results []*result) error {
	rep := report{
		Tool: "fusednorm-bench", Time: time.Now().UTC().Format(time.RFC3339), Go: runtime.Version(),
		Host:   hostFields(),
		Engine: info,
		Settings: map[string]any{"threads": o.threads, "reps": o.reps, "min_time": o.minTime.String(), "warmup": o.warmup,
			"quick": o.quick, "probe": o.probe, "huge_pages": o.hugePages, "max_bytes": o.maxBytes, "only": o.only, "dtype": o.dtype, "ort_dir": o.ortDir},
		Notes: []string{
			"GBps = (bytes_read + bytes_written) / median; 1 GB = 1e9 B; bytes follow bytes_rule in internal/cases/<op>/bench.json",
			"probe: over the case's byte count with the same thread count, right after the case: Go's copy (copy_GBps), two copies interleaved a 16 KiB row at a time with the CPU kernels' non-temporal stores (stream_GBps), and a read (read_GBps); pct_of_probe is, with the probe paired, the median over the timed runs of the run's GB/s over the better of the copy and stream passes right after it, else GBps over the higher of copy_GBps and stream_GBps",
			"kernel_ms_median: device time per dispatch: kernel_repeat dispatches of the call on device tensors in one compute pass between two timestamp queries (the device is opened with Dawn's timestamp_quantization off), over kernel_repeat; device_resident_ms: a chain of calls with every tensor on the device, then one Sync that waits for all of them, divided by the chain's length; device_copy_GBps: a vec4<f32> WGSL copy of the case's bytes (half read, half written, at most 1 GiB each way) on the same device, median of reps passes; kernel_pct_of_copy = kernel_GBps / device_copy_GBps",
			"ort: bench_ort.js row for the same thread count; kernel_ms_median is ORT's profiler time of the op",
		},
		Results: results,
	}
	return writeIndented(path, rep)
}

// writeCompareJSON writes the -compare rows.
func writeCompareJSON(path string, o *options, rows []comparison) error {
	return writeIndented(path, map[string]any{
		"tool": "fusednorm-bench -compare", "time": time.Now().UTC().Format(time.RFC3339), "go": runtime.Version(),
		"host":     hostFields(),
		"settings": map[string]any{"threads": o.threads, "reps": o.reps, "min_time": o.minTime.String(), "warmup": o.warmup, "huge_pages": o.hugePages},
		"notes":    []string{"median_ms: host-tensor calls (inputs and outputs in host memory) of three engines in one process, one timed call each per round in a random order, each after an untimed call of its own; auto_over_faster = auto's median over the lower of cpu's and dawn's"},
		"results":  rows,
	})
}

// hostFields describe the machine in a -json file.
func hostFields() map[string]any {
	return map[string]any{"goos": runtime.GOOS, "goarch": runtime.GOARCH, "cpus": runtime.NumCPU(), "gomaxprocs": runtime.GOMAXPROCS(0)}
}

// writeIndented writes v as indented JSON with a final newline.
func writeIndented(path string, v any) error {
	raw, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(raw, '\n'), 0o644)
}

// replot draws the -plot picture from earlier -json files: their results together, so
// runs on different backends share one roofline.
func replot(o *options, stdout io.Writer) error {
	var info fusednorm.Info
	var all []*result
	var backends []string
	for i, path := range o.from {
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var rep report
		if err := json.Unmarshal(raw, &rep); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if rep.Tool != "fusednorm-bench" {
			return fmt.Errorf("%s: not a fusednorm-bench -json file", path)
		}
		if i == 0 {
			info = rep.Engine
		}
		if !slices.Contains(backends, rep.Engine.Backend) {
			backends = append(backends, rep.Engine.Backend)
		}
		all = append(all, rep.Results...)
	}
	if len(backends) > 1 {
		info.Backend, info.Device = strings.Join(backends, " and "), strings.Join(o.from, ", ")
	}
	if err := writePlot(o.plotPath, info, all); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s from %d result(s)\n", o.plotPath, len(all))
	return nil
}
