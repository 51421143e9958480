package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fusednorm/fusednorm"
	"github.com/fusednorm/fusednorm/internal/testkit"
)

// quickArgs runs one quick case on the CPU with the least timing the flags allow.
func quickArgs(only string, extra ...string) []string {
	return append([]string{"-backend", "cpu", "-quick", "-only", only, "-reps", "1", "-min-time", "0", "-warmup", "0"}, extra...)
}

func runBench(t *testing.T, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("run %v: %v\nstdout:\n%s\nstderr:\n%s", args, err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// row returns the table line of a case, or "" when it is missing.
func row(out, name string) string {
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == name {
			return line
		}
	}
	return ""
}

func TestQuickRunOneCaseOfEachOp(t *testing.T) {
	for _, tc := range []struct{ only, shape string }{
		{"eln-b8-s512-h768-f32", "B1 S512 H768"},
		{"addln-n4096-d768-f16", "N256 D768"},
	} {
		t.Run(tc.only, func(t *testing.T) {
			out := runBench(t, quickArgs(tc.only)...)
			lines := strings.Split(out, "\n")
			if !strings.HasPrefix(lines[0], "engine: cpu on ") || !strings.Contains(lines[0], "cpu requested by option") {
				t.Errorf("first line is not the engine's Info: %q", lines[0])
			}
			if !strings.Contains(out, "ort: not run") {
				t.Errorf("no line saying ORT was skipped:\n%s", out)
			}
			hdr := row(out, "case")
			for _, col := range []string{"shape", "dtype", "backend", "median ms", "min ms", "GB/s", "probe GB/s", "% probe"} {
				if !strings.Contains(hdr, col) {
					t.Errorf("header lacks %q: %q", col, hdr)
				}
			}
			if strings.Contains(hdr, "ORT ms") {
				t.Errorf("header has ORT columns without -ort: %q", hdr)
			}
			r := row(out, tc.only+"-quick")
			if r == "" {
				t.Fatalf("no row for %s-quick:\n%s", tc.only, out)
			}
			if !strings.Contains(r, tc.shape) || !strings.Contains(r, " cpu ") || !strings.HasSuffix(r, "%") {
				t.Errorf("row %q: want shape %q, backend cpu and a %%-of-probe cell", r, tc.shape)
			}
			if n := strings.Count(out, "-quick "); n != 1 {
				t.Errorf("%d case rows, want 1:\n%s", n, out)
			}
		})
	}
}

func TestSkipOverMaxBytesAndJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.json")
	out := runBench(t, quickArgs("768", "-max-bytes", "4MiB", "-probe=false", "-json", path)...)
	// addln-n4096-d768-f32-quick needs 3.2 MiB, the f16 one 1.6 MiB; eln tables are larger.
	if r := row(out, "addln-n4096-d768-f32-quick"); r == "" || strings.Contains(r, "skipped") {
		t.Errorf("f32 case should run under 4 MiB: %q", r)
	}
	if r := row(out, "eln-b8-s512-h768-f32-quick"); !strings.Contains(r, "skipped: needs") {
		t.Errorf("eln case should be skipped over 4 MiB: %q", r)
	}
	if strings.Contains(row(out, "case"), "probe") {
		t.Errorf("-probe=false still prints probe columns:\n%s", out)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Engine  struct{ Backend string }
		Results []struct {
			Case     string  `json:"case"`
			MedianMs float64 `json:"median_ms"`
			GBps     float64 `json:"GBps"`
			Skipped  string  `json:"skipped"`
			RanOn    string  `json:"ran_on"`
		}
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Engine.Backend != "cpu" || len(rep.Results) != 4 {
		t.Fatalf("JSON: backend %q, %d results; want cpu, 4", rep.Engine.Backend, len(rep.Results))
	}
	for _, r := range rep.Results {
		if r.Skipped == "" && (r.MedianMs <= 0 || r.GBps <= 0) {
			t.Errorf("JSON result %s has no timing: %+v", r.Case, r)
		}
		if r.Skipped == "" && r.RanOn != "cpu" {
			t.Errorf("JSON result %s: ran_on %q, want cpu", r.Case, r.RanOn)
		}
	}
}

func TestCasesMatchTheBrief(t *testing.T) {
	cases, err := loadCases(embeddedCases, setBench, false) // also checks every case's bytes against the rule
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, c := range cases {
		if seen[c.Name] {
			t.Errorf("case %s appears twice", c.Name)
		}
		seen[c.Name] = true
	}
	for _, dt := range []string{"f32", "f16"} {
		for _, name := range []string{"eln-b8-s512-h768", "eln-b64-s512-h1024", "eln-b256-s512-h4096",
			"addln-n4096-d768", "addln-n16384-d4096", "addln-n65536-d8192"} {
			if !seen[name+"-"+dt] {
				t.Errorf("missing case %s-%s", name, dt)
			}
		}
	}
	// The byte counts of the cases ORT also runs must equal bench_ort.js's, or the
	// comparison of GB/s is between different things.
	want := map[string]int64{"eln-b8-s512-h768-f32": 50386976, "addln-n4096-d768-f32": 50373632, "addln-n16384-d4096-f16": 537026560}
	for _, c := range cases {
		if w, ok := want[c.Name]; ok && c.Bytes.Read+c.Bytes.Write != w {
			t.Errorf("%s: %d bytes, ORT's bench counts %d", c.Name, c.Bytes.Read+c.Bytes.Write, w)
		}
	}
}

// sweepWidths are the hidden sizes the width sweep must hold for every op and dtype: from 64
// to 16384, the common model widths and odd ones no vector width divides.
var sweepWidths = []int{64, 256, 512, 768, 1000, 1023, 1024, 1536, 2048, 2560, 3072, 4096, 4097, 5120,
	6144, 8192, 12288, 16384}

// TestSweepSet checks -set sweep's files: they load (bytes by the rule), names are unique,
// every width is there for each op and dtype, each case but the latency ones moves at least
// 256 MiB with no more rows than that takes, the latency cases are one 128-token sequence,
// and the quick variants stay small.
func TestSweepSet(t *testing.T) {
	cases, err := loadCases(embeddedCases, setSweep, false)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]benchCase{}
	for _, c := range cases {
		if _, dup := byName[c.Name]; dup {
			t.Errorf("case %s appears twice", c.Name)
		}
		byName[c.Name] = c
	}
	const least = 256 << 20
	for _, op := range []struct {
		prefix, dim string
		dtypes      []string
	}{{"addln-d", "D", []string{"f32", "f16", "bf16"}}, {"eln-h", "H", []string{"f32", "f16"}}} {
		for _, dt := range op.dtypes {
			for _, w := range sweepWidths {
				name := fmt.Sprintf("%s%d-%s", op.prefix, w, dt)
				c, ok := byName[name]
				if !ok {
					t.Errorf("missing case %s", name)
					continue
				}
				if c.Shape[op.dim] != w || c.shortDType() != dt {
					t.Errorf("%s: %s %d, dtype %s", name, op.dim, c.Shape[op.dim], c.DType)
				}
			}
			lat := map[string]string{"D": "lat-addln-n128-d768-", "H": "lat-eln-b1-s128-h768-"}[op.dim] + dt
			if _, ok := byName[lat]; !ok {
				t.Errorf("missing latency case %s", lat)
			}
		}
	}
	for _, c := range cases {
		moved := c.Bytes.Read + c.Bytes.Write
		if strings.HasPrefix(c.Name, "lat-") {
			if (c.op == opAdd && c.Shape["N"] != 128) || (c.op == opEmbed && (c.Shape["B"] != 1 || c.Shape["S"] != 128)) {
				t.Errorf("%s (%s): a latency case is one sequence of 128 tokens", c.Name, c.shapeString())
			}
			continue
		}
		if moved < least {
			t.Errorf("%s (%s): moves %d bytes, want ≥ 256 MiB", c.Name, c.shapeString(), moved)
		}
		switch c.op {
		case opAdd: // each (N, D) tensor at least 256 MiB, one row fewer would be under
			N, row := c.dim("N"), c.dim("D")*c.esize()
			if N*row < least || (N-1)*row >= least {
				t.Errorf("%s: N %d, want the fewest rows of %d bytes that hold 256 MiB", c.Name, N, row)
			}
		case opEmbed: // S 512, BERT's vocabulary, B 64 or the smallest power of two above that reaches 256 MiB
			half := c
			half.Shape = map[string]int{"B": c.Shape["B"] / 2, "S": c.Shape["S"], "H": c.Shape["H"]}
			r, w := half.bytesModel()
			if c.Shape["S"] != 512 || c.Shape["V"] != 30522 || c.Shape["B"] < 64 || (c.Shape["B"] > 64 && r+w >= least) {
				t.Errorf("%s (%s V%d): want S 512, V 30522, B 64 or the power of two that first moves 256 MiB", c.Name, c.shapeString(), c.Shape["V"])
			}
		}
	}
	quick, err := loadCases(embeddedCases, setSweep, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(quick) != len(cases) {
		t.Fatalf("%d quick cases, %d cases", len(quick), len(cases))
	}
	for _, c := range quick {
		if a := c.allocBytes(); a > 128<<20 {
			t.Errorf("%s (%s): the quick variant allocates %s, want ≤ 128 MiB", c.Name, c.shapeString(), fmtGiB(a))
		}
	}
}

// TestSweepQuickRun runs one width of the sweep: its f32, f16 and bf16 cases and its
// latency cases run.
func TestSweepQuickRun(t *testing.T) {
	out := runBench(t, quickArgs("d768-", "-set", "sweep", "-probe=false")...)
	for _, name := range []string{"addln-d768-f32-quick", "addln-d768-f16-quick", "addln-d768-bf16-quick", "lat-addln-n128-d768-f32-quick"} {
		if row(out, name) == "" {
			t.Errorf("no row for %s:\n%s", name, out)
		}
	}
	if !strings.Contains(out, "sweep.json") || !strings.Contains(row(out, "addln-d768-bf16-quick"), "bf16") {
		t.Errorf("want the cases from sweep.json, bf16 among them:\n%s", out)
	}
	var buf bytes.Buffer
	if err := run(context.Background(), quickArgs("d768", "-set", "widths"), &buf, &buf); err == nil || !strings.Contains(err.Error(), "want bench or sweep") {
		t.Errorf("-set widths: %v, want an error naming the sets", err)
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"8GiB": 8 << 30, "512MiB": 512 << 20, "2GB": 2e9, "1.5 KiB": 1536, "100": 100} {
		if got, err := parseBytes(in); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "-1GB", "GiB"} {
		if _, err := parseBytes(in); err == nil {
			t.Errorf("parseBytes(%q) accepted", in)
		}
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-dtype", "bf16"}, {"-threads", "0"}, {"-only", "no-such-case"}, {"-backend", "tpu"}, {"extra"},
		{"-every-adapter", "-compare"}, {"-every-adapter", "-chain", "1x128x768"}} {
		var out bytes.Buffer
		if err := run(context.Background(), args, &out, &out); err == nil {
			t.Errorf("run %v: no error", args)
		}
	}
}

// TestPairedShare checks that % of probe is the median of the per-run ratios, not the ratio
// of the medians: with the op and the probe slowing down together in one run, the two
// differ.
func TestPairedShare(t *testing.T) {
	p := &prober{copyBytes: 1000, streamBytes: 1000}
	ns := func(v ...int) []time.Duration {
		d := make([]time.Duration, len(v))
		for i, x := range v {
			d[i] = time.Duration(x)
		}
		return d
	}
	// Per run: op 10 ns against the probe's best 10 ns (1.0); 20 against 10 (0.5); 40 against 40 (1.0).
	// The medians alone give 20 against 10: 0.5.
	got := p.pairedShare(1000, ns(10, 20, 40), ns(10, 10, 40), ns(20, 10, 80))
	if got != 1.0 {
		t.Errorf("pairedShare = %v, want the median of the per-run ratios, 1", got)
	}
	// The stream pass counts when it is the faster: 500 bytes per 5 ns beats 1000 per 20.
	p.streamBytes = 500
	if got := p.pairedShare(1000, ns(10), ns(20), ns(5)); got != 1.0 {
		t.Errorf("pairedShare = %v, want 1 (against the stream pass)", got)
	}
}

func TestHelpExitsZero(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), []string{"-h"}, &out, &out)
	if code := exitCode(err, &out); code != 0 {
		t.Errorf("-h: exit %d, want 0 (err %v)", code, err)
	}
	if !strings.Contains(out.String(), "-quick") || !strings.Contains(out.String(), "-plot") {
		t.Errorf("-h printed no usage:\n%s", out.String())
	}
	if code := exitCode(run(context.Background(), []string{"-dtype", "bf16"}, &out, &out), &out); code != 1 {
		t.Errorf("bad flag: exit %d, want 1", code)
	}
}

// TestRunsOutsideTheRepository runs from an empty folder: the cases are compiled in.
func TestRunsOutsideTheRepository(t *testing.T) {
	t.Chdir(t.TempDir())
	out := runBench(t, quickArgs("addln-n4096-d768-f32", "-probe=false")...)
	if !strings.Contains(out, "compiled-in") || row(out, "addln-n4096-d768-f32-quick") == "" {
		t.Errorf("no case ran from outside the repository:\n%s", out)
	}
	// -cases still reads a folder, and names it when it has no cases.
	var buf bytes.Buffer
	err := run(context.Background(), append(quickArgs("x"), "-cases", t.TempDir()), &buf, &buf)
	if err == nil || !strings.Contains(err.Error(), "bench.json") {
		t.Errorf("-cases over an empty folder: %v, want an error naming bench.json", err)
	}
}

func TestNoiseLine(t *testing.T) {
	steady := &result{Case: "a", Runs: 5, MedianMs: 1.1, MinMs: 1}
	noisy := &result{Case: "b", Runs: 5, MedianMs: 3, MinMs: 1}
	skipped := &result{Case: "c", Skipped: "too big"}
	if l := noiseLine([]*result{steady, skipped}); l != "" {
		t.Errorf("steady run: %q, want no line", l)
	}
	l := noiseLine([]*result{steady, noisy, skipped})
	if !strings.HasPrefix(l, "noise:") || !strings.Contains(l, "1 of 2 cases") || !strings.Contains(l, "3.0×") ||
		!strings.Contains(l, "b") || strings.Contains(l, "a,") || strings.Count(l, "\n") != 0 {
		t.Errorf("noise line %q: want one line naming case b, 1 of 2, 3.0×", l)
	}
}

// TestProgressAfterASecond: a step shorter than the quiet time prints nothing; a longer one
// prints its line.
func TestProgressAfterASecond(t *testing.T) {
	var buf testkit.LockedBuffer
	p := newProgress(&buf)
	p.after, p.every = 50*time.Millisecond, 50*time.Millisecond
	p.step("case 1/2 quick")
	p.end()
	if buf.String() != "" {
		t.Errorf("a quick step printed %q", buf.String())
	}
	p.step("case 2/2 slow: timing")
	time.Sleep(180 * time.Millisecond)
	p.end()
	got := buf.String()
	if !strings.HasPrefix(got, "fusednorm-bench: case 2/2 slow: timing…\n") || strings.Count(got, "\n") < 2 {
		t.Errorf("a slow step printed %q, want its line then elapsed-time lines", got)
	}
	n := len(buf.String())
	time.Sleep(120 * time.Millisecond)
	if len(buf.String()) != n {
		t.Errorf("progress kept writing after end: %q", buf.String())
	}
}

// TestRooflineSVG checks the picture's content: one marker per case and series, the
// probe's crosses, the ceilings, well-formed XML; and that -plot -from redraws a -json file.
func TestRooflineSVG(t *testing.T) {
	mk := func(name, op, dt, backend string, bytes int64, ms, probe, kernelGBps float64) *result {
		return &result{Case: name, Op: op, DType: dt, Backend: backend, BytesRead: bytes / 2, BytesWritten: bytes / 2,
			Runs: 3, MedianMs: ms, MinMs: ms, GBps: float64(bytes) / (ms * 1e6), KernelGBps: kernelGBps,
			Probe: &probeResult{CopyGBps: probe, StreamGBps: probe * 0.9}}
	}
	res := []*result{
		mk("e1", opEmbed, "float32", "cpu", 2e6, 0.1, 60, 0),
		mk("e2", opEmbed, "float16", "cpu", 5e8, 50, 12, 0),
		mk("a1", opAdd, "float32", "cpu", 1e8, 10, 11, 0),
		mk("a2", opAdd, "float32", "cpu", 4e8, 40, 10, 0),
		{Case: "skipped", Skipped: "too big"},
	}
	svg, err := rooflineSVG(fusednorm.Info{Backend: "cpu", Device: "test <cpu>"}, res)
	if err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal([]byte(svg), new(struct{ XMLName xml.Name })); err != nil {
		t.Fatalf("not well-formed XML: %v", err)
	}
	for _, want := range []string{"cpu f32", "cpu f16", "EmbedLayerNormalization", "AddLayerNorm",
		"CPU memory copy (median probe of 3 cases", "CPU copy in caches (fastest probe, over 2 MB): 60.0 GB/s", "test &lt;cpu&gt;"} {
		if !strings.Contains(svg, want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
	// 2 ELN circles + 1 legend; 2 AddLN squares + 1 legend + the background rect and the frame.
	if n := strings.Count(svg, "<circle"); n != 3 {
		t.Errorf("%d circles, want 2 cases + 1 legend", n)
	}
	if n := strings.Count(svg, "<title>probe over"); n != 4 {
		t.Errorf("%d probe crosses, want 4", n)
	}
	if _, err := rooflineSVG(fusednorm.Info{}, res[4:]); err == nil {
		t.Error("a picture of no measured case: no error")
	}

	dir := t.TempDir()
	js, pic := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.svg")
	runBench(t, quickArgs("addln-n4096-d768", "-json", js)...)
	out := runBench(t, "-plot", pic, "-from", js)
	raw, err := os.ReadFile(pic)
	if err != nil || !strings.Contains(out, "from 2 result(s)") || strings.Count(string(raw), "<rect x=") < 2 {
		t.Errorf("-plot -from: %v\n%s", err, out)
	}
	var buf bytes.Buffer
	if err := run(context.Background(), []string{"-plot", "x.png"}, &buf, &buf); err == nil {
		t.Error("-plot x.png accepted; the picture is SVG")
	}
}

// TestPickAdapters: the GPUs when there are any, lavapipe only where there is none, and a line
// that says when one engine runs alone.
func TestPickAdapters(t *testing.T) {
	gpu := func(i int) fusednorm.AdapterInfo {
		return fusednorm.AdapterInfo{Index: i, Name: "NVIDIA H200", Type: "DiscreteGPU", Backend: "Vulkan"}
	}
	soft := func(i int) fusednorm.AdapterInfo {
		return fusednorm.AdapterInfo{Index: i, Name: "llvmpipe", Type: "CPU", Backend: "Vulkan", Software: true}
	}
	for _, tc := range []struct {
		list  []fusednorm.AdapterInfo
		want  []int
		alone bool
	}{
		{[]fusednorm.AdapterInfo{gpu(0), gpu(1), soft(2)}, []int{0, 1}, false},
		{[]fusednorm.AdapterInfo{gpu(0), soft(1)}, []int{0}, true},
		{[]fusednorm.AdapterInfo{soft(0)}, []int{0}, true},
		{[]fusednorm.AdapterInfo{soft(0), soft(1)}, []int{0, 1}, false},
	} {
		pick, line := pickAdapters(tc.list)
		var got []int
		for _, a := range pick {
			got = append(got, a.Index)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) || strings.Contains(line, "runs alone") != tc.alone {
			t.Errorf("pickAdapters(%v) = %v, %q; want %v, alone %v", tc.list, got, line, tc.want, tc.alone)
		}
	}
}

// TestEveryAdapterQuick runs -every-adapter on one quick case: on the adapters there are, and
// (where VK_ICD_FILENAMES names the driver, as on lavapipe) with the driver listed twice, so two
// engines run at once. Each engine has its row with figures alone and together, the summed row
// adds the together figures, and -json holds the same. Skips without Dawn.
func TestEveryAdapterQuick(t *testing.T) {
	const only = "addln-n4096-d768-f32"
	for _, twice := range []bool{false, true} {
		t.Run(map[bool]string{false: "as-listed", true: "driver-twice"}[twice], func(t *testing.T) {
			if twice && !testkit.ListDriverTwice(t) {
				t.Skip("VK_ICD_FILENAMES is unset: no manifest to list twice")
			}
			list, err := fusednorm.Adapters()
			if err != nil {
				testkit.SkipWithoutDawn(t, err)
			}
			pick, _ := pickAdapters(list)
			if twice && len(pick) < 2 {
				t.Fatalf("with the driver listed twice, %d adapter(s) to run: %v", len(pick), list)
			}
			path := filepath.Join(t.TempDir(), "adapters.json")
			out := runBench(t, "-every-adapter", "-quick", "-only", only, "-reps", "2", "-min-time", "0", "-warmup", "1", "-json", path)
			if !strings.HasPrefix(out, "adapters: ") || strings.Contains(out, "runs alone") != (len(pick) == 1) {
				t.Errorf("the first line does not say how many engines run:\n%s", out)
			}
			for i, a := range pick {
				if !strings.Contains(out, fmt.Sprintf("engine %d: adapter %d, %s", i, a.Index, a.Name)) {
					t.Errorf("no line for engine %d on adapter %d:\n%s", i, a.Index, out)
				}
			}
			var rep struct {
				Engines []struct{ Engine int }
				Results []adapterRow
			}
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(raw, &rep); err != nil {
				t.Fatal(err)
			}
			if len(rep.Engines) != len(pick) || len(rep.Results) != 1 {
				t.Fatalf("JSON: %d engines, %d results; want %d, 1:\n%s", len(rep.Engines), len(rep.Results), len(pick), raw)
			}
			r := rep.Results[0]
			if r.Case != only+"-quick" || r.Error != "" || r.Skipped != "" || len(r.Engines) != len(pick) {
				t.Fatalf("JSON result: %+v", r)
			}
			sum := 0.0
			for i, f := range r.Engines {
				if f.Engine != i || f.Adapter != pick[i].Index || f.HostGBpsAlone <= 0 || f.HostGBpsTogether <= 0 || f.HostMsAlone <= 0 {
					t.Errorf("engine %d: %+v", i, f)
				}
				if f.KernelMsAlone > 0 && (f.KernelMsTogether <= 0 || f.KernelRatio != f.KernelMsTogether/f.KernelMsAlone || f.KernelRepeat < 2) {
					t.Errorf("engine %d: kernel figures %+v", i, f)
				}
				sum += f.HostGBpsTogether
				line := ""
				for _, l := range strings.Split(out, "\n") {
					if f := strings.Fields(l); len(f) > 1 && f[0] == r.Case && f[1] == strconv.Itoa(i) {
						line = l
					}
				}
				if line == "" {
					t.Errorf("no table row for engine %d:\n%s", i, out)
				}
			}
			if r.CombinedGBps != sum || r.OneGBps != r.Engines[0].HostGBpsAlone {
				t.Errorf("combined %v, want the engines' together GB/s summed, %v; one engine %v, want engine 0's alone %v",
					r.CombinedGBps, sum, r.OneGBps, r.Engines[0].HostGBpsAlone)
			}
			if !strings.Contains(out, r.Case+" ") || !strings.Contains(out, " sum ") {
				t.Errorf("no summed row:\n%s", out)
			}
		})
	}
}
