// Command fusednorm-bench times EmbedLayerNorm and AddLayerNorm through the public API on
// the cases of internal/cases/*/bench.json, and puts each next to the machine's memory
// bandwidth over the same byte count, measured in the same run (and, with -ort, next to ONNX
// Runtime's CPU kernel time).
//
//	go run ./cmd/fusednorm-bench                    # every case, backend auto
//	go run ./cmd/fusednorm-bench -backend cpu -only addln -dtype f32
//	go run ./cmd/fusednorm-bench -quick             # small variants of every case: a smoke run
//	go run ./cmd/fusednorm-bench -json r.json -plot r.svg   # keep the results, draw the roofline
//	go run ./cmd/fusednorm-bench -set sweep -only d768 # the width sweep's cases (sweep.json)
//	go run ./cmd/fusednorm-bench -every-adapter     # an engine per GPU: each alone, then all at once
//
// The cases are compiled in; -cases DIR reads <op>/bench.json (or <op>/sweep.json with -set
// sweep) from a folder instead.
// Progress goes to stderr whenever a step takes longer than a second; the table to stdout.
//
// Effective GB/s is the case's bytes model (what the op must read and write, each tensor
// once; see bytes_rule in bench.json) over the median time; 1 GB = 1e9 B.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fusednorm/fusednorm"
	"github.com/fusednorm/fusednorm/cmd/fusednorm-bench/internal/twin"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := exitCode(run(ctx, os.Args[1:], os.Stdout, os.Stderr), os.Stderr)
	stop()
	os.Exit(code)
}

// exitCode is the process status for run's error: 0 for none and for -h (the usage was
// asked for), else 1 after printing the error.
func exitCode(err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintln(stderr, "fusednorm-bench:", err)
	return 1
}

// options are the command line, resolved.
type options struct {
	backend     string
	backendSet  bool
	casesDir    string
	set         string // -set: which file of each op, bench.json or sweep.json
	only        string
	dtype       string
	threads     int
	level       string
	reps        int
	minTime     time.Duration
	warmup      int
	maxBytes    int64
	quick       bool
	probe       bool
	hugePages   bool
	jsonPath    string
	plotPath    string
	from        []string
	ortDir      string
	tiny        int    // -tiny N: the tiny-call benchmark (device.go) instead of the cases
	tinyWGSL    string // -tiny-wgsl DIR: write the tiny calls' kernels for cgo/bench/tiny_bench.c
	tinyRounds  int    // -tiny-rounds R: its rounds, each N calls of each op on each twin
	device      bool   // -device-resident: also time each case on device tensors (device.go)
	compare     bool   // -compare: cpu, dawn and auto on the same cases, interleaved (compare.go)
	chain       string // -chain BxSxH,...: model-shaped chains of norms instead of the cases (chain.go)
	chainLayers int    // -chain-layers L: AddLayerNorms after the EmbedLayerNorm
	cpuProfile  string // -cpuprofile: where the run's CPU profile goes
	every       bool   // -every-adapter: a Dawn engine per adapter, alone and all at once (everyadapter.go)
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("fusednorm-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &options{}
	defBackend := os.Getenv(fusednorm.EnvBackend)
	if defBackend == "" {
		defBackend = fusednorm.BackendAuto
	}
	fs.StringVar(&o.backend, "backend", defBackend, "backend: auto, cpu or dawn (default from "+fusednorm.EnvBackend+", else auto)")
	fs.StringVar(&o.casesDir, "cases", "", "a folder holding <op>/bench.json (and <op>/sweep.json for -set sweep), e.g. the repository's internal/cases/ (default: the cases compiled in)")
	fs.StringVar(&o.set, "set", setBench, "the cases: bench (each op's bench.json) or sweep (sweep.json: hidden sizes 64 to 16384 at about 1 GiB a call, and one 128-token sequence; the cases tools/anchors times on torch and ONNX Runtime WebGPU)")
	fs.StringVar(&o.only, "only", "", "run only the cases whose name contains this (or one of these, comma-separated)")
	fs.StringVar(&o.dtype, "dtype", "all", "f32, f16, bf16 (AddLayerNorm) or all")
	fs.IntVar(&o.threads, "threads", runtime.GOMAXPROCS(0), "goroutines per CPU call, and for the bandwidth probe")
	fs.BoolVar(&o.hugePages, "huge-pages", true, "CPU: move EmbedLayerNorm's word tables onto huge pages (Linux; see fusednorm.WithHugePages)")
	fs.StringVar(&o.level, "level", "", "CPU kernel level: avx512fp16, avx512, avx2 or go (default: the widest this processor runs)")
	fs.IntVar(&o.reps, "reps", 3, "timed runs per case, at least")
	fs.DurationVar(&o.minTime, "min-time", time.Second, "time each case for at least this long (and -reps runs)")
	fs.IntVar(&o.warmup, "warmup", 1, "untimed runs before timing")
	maxBytes := fs.String("max-bytes", "auto", "skip a case that needs more memory than this (e.g. 8GiB, 500MB); auto: 75% of available memory")
	fs.BoolVar(&o.quick, "quick", false, "small variants of every case (batch or rows divided by the set's quick rule: 16 in bench.json, 64 in sweep.json), shorter timing: a smoke run")
	fs.BoolVar(&o.probe, "probe", true, "measure memory bandwidth over each case's byte count, in the same run: between the case's timed runs when both fit in -max-bytes, else after it")
	fs.StringVar(&o.jsonPath, "json", "", "write every result to this JSON file")
	fs.StringVar(&o.plotPath, "plot", "", "draw the roofline (GB/s against bytes moved per case, the probe's copy as the ceiling) into this SVG file")
	from := fs.String("from", "", "with -plot: draw the results of earlier -json files (comma-separated; e.g. a CPU and a GPU run in one picture) instead of running")
	fs.IntVar(&o.tiny, "tiny", 0, "instead of the cases: N tiny calls on device tensors, EmbedLayerNorm f32 (1,1,768) and AddLayerNorm f32 (1,768), one by one and back to back, beside the same calls from C in this process (cgo/bench/tiny_twin.c)")
	fs.StringVar(&o.tinyWGSL, "tiny-wgsl", "", "instead of the cases: write the tiny calls' kernels, as the Go path renders them, into this folder for the C program cgo/bench/tiny_bench.c")
	fs.IntVar(&o.tinyRounds, "tiny-rounds", 5, "-tiny: rounds, each N calls of each op from Go and from C in a new random order")
	fs.BoolVar(&o.device, "device-resident", true, "on a GPU, also time each case on the device: its kernel's device time, a chain of calls on device tensors divided by its length (one read-back at the end) and the copy probe of the same bytes; false leaves the host-tensor wall alone")
	fs.BoolVar(&o.compare, "compare", false, "time every case on three engines in one process, -backend cpu, dawn and auto, one call each in a random order per round: does auto run as fast as the faster backend? (-backend is ignored)")
	fs.StringVar(&o.chain, "chain", "", "instead of the cases: chains of norms as a transformer encoder runs them, one per BxSxH in this comma-separated list (e.g. 1x128x768,8x128x768,64x512x1024): EmbedLayerNorm then -chain-layers AddLayerNorms on device tensors, per call with and without the final read, beside the kernels' time and the CPU backend's host chain")
	fs.BoolVar(&o.every, "every-adapter", false, "a Dawn engine on every GPU adapter fusednorm.Adapters lists (the software ones only where there is no GPU): each case on each engine alone, then on all at once, per engine the kernel's device time and the host-tensor GB/s alone and together, and the engines' GB/s together summed beside one engine's alone (-backend is ignored)")
	fs.IntVar(&o.chainLayers, "chain-layers", 24, "-chain: AddLayerNorms after the EmbedLayerNorm (two per transformer layer)")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write the run's CPU profile to this file (go tool pprof reads it)")
	fs.StringVar(&o.ortDir, "ort", "", "a prepared copy of tools/oracle (with node_modules; make bench-ort makes one): also time ONNX Runtime's CPU kernel on the cases it has")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if o.plotPath != "" && !strings.HasSuffix(strings.ToLower(o.plotPath), ".svg") {
		return nil, fmt.Errorf("-plot %s: the picture is SVG; name it .svg (rsvg-convert or a browser turns it into PNG)", o.plotPath)
	}
	if *from != "" {
		if o.plotPath == "" {
			return nil, errors.New("-from needs -plot")
		}
		o.from = strings.Split(*from, ",")
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	o.backendSet = set["backend"]
	if o.quick {
		if !set["min-time"] {
			o.minTime = 20 * time.Millisecond
		}
	}
	switch o.dtype {
	case "f32", "f16", "bf16", "all":
	default:
		return nil, fmt.Errorf("-dtype %q: want f32, f16, bf16 or all", o.dtype)
	}
	if o.every && (o.compare || o.tiny > 0 || o.chain != "" || o.tinyWGSL != "") {
		return nil, errors.New("-every-adapter is a mode of its own: not with -compare, -tiny, -tiny-wgsl or -chain")
	}
	if o.chainLayers < 0 {
		return nil, errors.New("-chain-layers must be ≥ 0")
	}
	if o.threads < 1 || o.reps < 1 || o.warmup < 0 || o.minTime < 0 {
		return nil, errors.New("-threads and -reps must be ≥ 1, -warmup and -min-time ≥ 0")
	}
	var err error
	if o.maxBytes, err = parseBytes(*maxBytes); err != nil {
		return nil, fmt.Errorf("-max-bytes: %w", err)
	}
	return o, nil
}

// result is one case's row, as the table prints it and -json writes it.
type result struct {
	Case          string         `json:"case"`
	Op            string         `json:"op"`
	Shape         map[string]int `json:"shape"`
	DType         string         `json:"dtype"`
	Backend       string         `json:"backend,omitempty"`
	RanOn         string         `json:"ran_on,omitempty"` // where the timed host-tensor calls ran (auto routes per call)
	BytesRead     int64          `json:"bytes_read"`
	BytesWritten  int64          `json:"bytes_written"`
	AllocBytes    int64          `json:"alloc_bytes"`
	SetupSec      float64        `json:"setup_s,omitempty"`
	Runs          int            `json:"runs,omitempty"`
	MedianMs      float64        `json:"median_ms,omitempty"`
	MinMs         float64        `json:"min_ms,omitempty"`
	KernelMs      float64        `json:"kernel_ms_median,omitempty"` // device time per dispatch (GPU timestamps around kernel_repeat dispatches)
	KernelRepeat  int            `json:"kernel_repeat,omitempty"`
	KernelGBps    float64        `json:"kernel_GBps,omitempty"`
	CopyGBps      float64        `json:"device_copy_GBps,omitempty"`   // the fastest WGSL copy on the same device, same run
	CopyKernel    string         `json:"device_copy_kernel,omitempty"` // which copy was fastest
	KernelPctCopy float64        `json:"kernel_pct_of_copy,omitempty"`
	DeviceMs      float64        `json:"device_resident_ms,omitempty"` // per call of a chain on device tensors
	GBps          float64        `json:"GBps,omitempty"`
	Probe         *probeResult   `json:"probe,omitempty"`
	PctOfProbe    float64        `json:"pct_of_probe,omitempty"`
	ORT           *ortResult     `json:"ort,omitempty"`
	ORTError      string         `json:"ort_error,omitempty"`
	OursOverORT   float64        `json:"time_ratio_ours_over_ort,omitempty"`
	Skipped       string         `json:"skipped,omitempty"`
	Error         string         `json:"error,omitempty"`

	shape string // printed form
}

func (r *result) bytes() int64 { return r.BytesRead + r.BytesWritten }

// run is the whole command; main only adds the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("-cpuprofile %s: %w", o.cpuProfile, err)
		}
		defer pprof.StopCPUProfile()
	}
	if o.tiny > 0 {
		return runTiny(ctx, o, stdout)
	}
	if o.chain != "" {
		return runChains(ctx, o, stdout, stderr)
	}
	if o.tinyWGSL != "" {
		return twin.WriteKernels(o.tinyWGSL)
	}
	if len(o.from) > 0 {
		return replot(o, stdout)
	}
	src, where := embeddedCases, "the compiled-in internal/cases/*/"+o.set+".json"
	if o.casesDir != "" {
		src, where = dirCases(o.casesDir), o.casesDir+" ("+o.set+".json)"
	}
	cases, err := loadCases(src, o.set, o.quick)
	if err != nil {
		return err
	}
	cases = slices.DeleteFunc(cases, func(c benchCase) bool {
		return !slices.ContainsFunc(strings.Split(o.only, ","), func(part string) bool { return strings.Contains(c.Name, part) }) ||
			(o.dtype != "all" && c.shortDType() != o.dtype)
	})
	if len(cases) == 0 {
		return fmt.Errorf("no case matches -only %q -dtype %s", o.only, o.dtype)
	}

	if o.every {
		prog := newProgress(stderr)
		defer prog.end()
		rows, engs, err := runEveryAdapter(ctx, cases, o, stdout, prog)
		if o.jsonPath != "" && len(rows) > 0 {
			if werr := writeAdaptersJSON(o.jsonPath, o, engs, rows); werr != nil {
				return werr
			}
			fmt.Fprintf(stdout, "wrote %s\n", o.jsonPath)
		}
		return err
	}
	if o.compare {
		prog := newProgress(stderr)
		defer prog.end()
		rows, err := runCompare(ctx, cases, o, stdout, prog)
		if o.jsonPath != "" && len(rows) > 0 {
			if werr := writeCompareJSON(o.jsonPath, o, rows); werr != nil {
				return werr
			}
			fmt.Fprintf(stdout, "wrote %s\n", o.jsonPath)
		}
		return err
	}
	opts := []fusednorm.Option{fusednorm.WithThreads(o.threads), fusednorm.WithHugePages(o.hugePages)}
	if o.level != "" {
		opts = append(opts, fusednorm.WithCPULevel(o.level))
	}
	if o.backendSet {
		opts = append(opts, fusednorm.WithBackend(o.backend))
	}
	prog := newProgress(stderr)
	defer prog.end()
	prog.step("opening the " + o.backend + " engine")
	eng, err := fusednorm.Open(opts...)
	prog.end()
	if err != nil {
		return err
	}
	defer eng.Close()
	// On a GPU, also report the kernel's own device time and the device-resident wall: the
	// wall time of a host-tensor call includes uploading its inputs and reading its outputs back.
	info := eng.Info()
	timed := info.Backend == fusednorm.BackendDawn && o.device
	var copier *copyProbe
	if timed {
		fmt.Fprintln(stdout, "kernel: device time per dispatch, K back-to-back dispatches on device tensors between two timestamps (timestamp_quantization off) over K (fusednorm.TimeKernels); device-resident: wall per call of a chain on device tensors ended by one Sync; copy: the fastest of several WGSL copies of the same bytes (up to 1 GiB each way) on the same device, timed the same way")
		if copier, err = newCopyProbe(info.Library); err != nil {
			fmt.Fprintf(stdout, "copy: not measured: %v\n", err)
		} else {
			defer copier.close()
		}
	}
	fmt.Fprintf(stdout, "engine: %s\n", info)
	fmt.Fprintf(stdout, "timing: median of ≥%d runs and ≥%v after %d warm-up; threads %d; max-bytes %s; cases from %s\n",
		o.reps, o.minTime, o.warmup, o.threads, fmtGiB(o.maxBytes), where)

	var ort *ortRunner
	if o.ortDir != "" {
		if ort, err = newORTRunner(o.ortDir, o.threads, o.reps, o.minTime); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "ort: ONNX Runtime CPU kernel time from %s, %d thread(s), measured right after each case it has\n", o.ortDir, o.threads)
	} else {
		fmt.Fprintln(stdout, "ort: not run (make bench-ort, or -ort DIR: a copy of tools/oracle with node_modules, for ONNX Runtime's kernel time)")
	}

	tw := newTable(stdout, cases, o.probe, ort != nil, timed)
	tw.header()
	var results []*result
	failed := 0
	for i := range cases {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		c := &cases[i]
		say := func(what string) {
			prog.step(fmt.Sprintf("case %d/%d %s (%s) %s: %s", i+1, len(cases), c.Name, c.shapeString(), c.shortDType(), what))
		}
		r := benchOne(ctx, eng, c, o, ort, copier, say)
		prog.end()
		if r.Error != "" {
			failed++
		}
		results = append(results, r)
		tw.row(r)
	}
	if line := noiseLine(results); line != "" {
		fmt.Fprintln(stdout, line)
	}
	if o.jsonPath != "" {
		if err := writeJSON(o.jsonPath, info, o, results); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s\n", o.jsonPath)
	}
	if o.plotPath != "" {
		if err := writePlot(o.plotPath, info, results); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s\n", o.plotPath)
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d cases failed", failed, len(results))
	}
	return nil
}

// benchOne sets a case up, times it, frees it, then samples the bandwidth probe and ORT.
// say reports the step under way (setting up, timing, probe, ORT) to the progress line.
func benchOne(ctx context.Context, eng *fusednorm.Engine, c *benchCase, o *options, ort *ortRunner, copier *copyProbe, say func(string)) *result {
	r := &result{Case: c.Name, Op: c.op, Shape: c.Shape, DType: c.DType, shape: c.shapeString(),
		BytesRead: c.Bytes.Read, BytesWritten: c.Bytes.Write, AllocBytes: c.allocBytes()}
	need := r.AllocBytes
	if o.probe {
		need = max(need, r.bytes())
	}
	if need > o.maxBytes {
		r.Skipped = fmt.Sprintf("needs %s, over -max-bytes %s", fmtGiB(need), fmtGiB(o.maxBytes))
		return r
	}
	r.Backend = eng.Info().Backend
	// The probe runs between the case's timed runs when both fit in memory together, else
	// after the case.
	say("setting up")
	var pr *prober
	if o.probe && r.AllocBytes+r.bytes() <= o.maxBytes {
		pr = newProber(r.bytes(), o.threads)
	}
	if err := timeCase(fusednorm.ReportBackend(ctx, &r.RanOn), eng, c, o, r, pr, say); err != nil {
		r.Error = err.Error()
	}
	pr = nil
	// Give the memory back before the next allocation.
	runtime.GC()
	debug.FreeOSMemory()
	if r.Error == "" && o.device && r.Backend == fusednorm.BackendDawn {
		timeDeviceResident(ctx, eng, c, o, r)
		if copier != nil && r.Error == "" {
			say("device copy")
			if g, name, err := copier.gbps(ctx, r.bytes(), o.reps); err == nil {
				r.CopyGBps, r.CopyKernel = g, name
			}
		}
	}
	if r.Error != "" {
		return r
	}
	r.GBps = float64(r.bytes()) / (r.MedianMs * 1e6)
	if r.KernelMs > 0 {
		r.KernelGBps = float64(r.bytes()) / (r.KernelMs * 1e6)
		if r.CopyGBps > 0 {
			r.KernelPctCopy = 100 * r.KernelGBps / r.CopyGBps
		}
	}
	if o.probe {
		if r.Probe == nil {
			say("memory probe")
			p := probe(r.bytes(), o.threads)
			r.Probe = &p
			runtime.GC()
			debug.FreeOSMemory()
		}
		if !r.Probe.Paired { // the probe ran after the case: no pairs to take ratios of
			r.PctOfProbe = 100 * r.GBps / r.Probe.Best()
		}
	}
	if ort != nil && c.ORT != "" {
		say("ONNX Runtime")
		if or, err := ort.run(ctx, c.ORT); err != nil {
			r.ORTError = err.Error()
		} else {
			r.ORT = or
			r.OursOverORT = r.MedianMs / or.KernelMsMedian
			if or.Bytes != r.bytes() {
				r.ORTError = fmt.Sprintf("ORT's config counts %d bytes, this case %d: the ops do different work", or.Bytes, r.bytes())
			}
		}
	}
	return r
}

// rewarmBelow is the case size (bytes read and written) under which, with the probe
// paired, an untimed run precedes each timed one: the probe's passes flush the caches,
// and a case this small would otherwise be timed cold where it runs warm in a loop.
const rewarmBelow = 1 << 30

// timeCase times the case; with a prober (pr), each timed run is followed by one copy and
// one stream pass of the probe, and r.Probe and r.PctOfProbe are set from those.
func timeCase(ctx context.Context, eng *fusednorm.Engine, c *benchCase, o *options, r *result, pr *prober, say func(string)) error {
	t0 := time.Now()
	w, err := setup(eng, c, o.threads)
	if err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	defer w.close()
	r.SetupSec = time.Since(t0).Seconds()
	say("timing")
	for range o.warmup {
		if err := w.run(ctx); err != nil {
			return err
		}
	}
	if pr != nil { // the passes' first run, after the pages were faulted in
		pr.copyPass()
		pr.streamPass()
	}
	var ts, copies, streams []time.Duration
	var timed time.Duration // the timed runs' total: what -min-time counts
	for len(ts) < o.reps || timed < o.minTime {
		if err := ctx.Err(); err != nil {
			return err
		}
		if pr != nil && len(ts) > 0 && r.bytes() < rewarmBelow {
			if err := w.run(ctx); err != nil {
				return err
			}
		}
		t := time.Now()
		if err := w.run(ctx); err != nil {
			return err
		}
		d := time.Since(t)
		ts, timed = append(ts, d), timed+d
		if pr != nil {
			copies, streams = append(copies, pr.copyPass()), append(streams, pr.streamPass())
		}
	}
	if pr != nil {
		p := pr.result(copies, streams, passes(3, pr.readPass), true)
		r.Probe = &p
		r.PctOfProbe = 100 * pr.pairedShare(r.bytes(), ts, copies, streams)
	}
	slices.Sort(ts)
	r.Runs = len(ts)
	r.MedianMs = ms(ts[len(ts)/2])
	r.MinMs = ms(ts[0])
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// parseBytes reads "auto" or a size such as 8GiB, 512MiB, 2GB or a plain byte count.
func parseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if strings.EqualFold(s, "auto") {
		return autoMaxBytes(), nil
	}
	units := []struct {
		suffix string
		mult   float64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1}}
	mult := 1.0
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%q is not a size like 8GiB", s)
	}
	return int64(v * mult), nil
}

// autoMaxBytes is 75% of the memory Linux reports available, else 8 GiB.
func autoMaxBytes() int64 {
	const fallback = 8 << 30
	raw, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return fallback
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemAvailable:" {
			if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				return kb * 1024 / 4 * 3
			}
		}
	}
	return fallback
}

func fmtGiB(b int64) string { return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30)) }

// noiseAt is the median-over-min ratio above which a case's timing is called noisy.
const noiseAt = 1.25

// noiseLine is one line naming the cases whose median is far above their minimum: the
// machine was busy (a shared VM, other jobs), and those rows are less trustworthy. Empty
// when every case was steady.
func noiseLine(results []*result) string {
	var noisy []string
	worst, measured := 0.0, 0
	for _, r := range results {
		if r.Runs == 0 || r.MinMs <= 0 {
			continue
		}
		measured++
		if q := r.MedianMs / r.MinMs; q > noiseAt {
			noisy = append(noisy, r.Case)
			worst = max(worst, q)
		}
	}
	if len(noisy) == 0 {
		return ""
	}
	return fmt.Sprintf("noise: median over %.2f× min in %d of %d cases (worst %.1f×: %s); the machine was busy, so rerun or raise -min-time before trusting those rows",
		noiseAt, len(noisy), measured, worst, strings.Join(noisy, ", "))
}
