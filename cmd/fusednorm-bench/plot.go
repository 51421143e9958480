package main

import (
	"errors"
	"fmt"
	"html"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/fusednorm/fusednorm"
)

// The roofline picture (-plot): achieved GB/s of each measured case against the bytes it
// moves (log axis), one series per backend and dtype, and the measured memory ceilings as
// horizontal lines. Plain SVG written by hand: no plotting dependency for one chart.

// plotPoint is one case in the picture.
type plotPoint struct {
	series string // backend and dtype, e.g. "cpu f32"; "(kernel)" for device time
	op     string
	name   string
	bytes  float64
	gbps   float64
}

// ceiling is a measured bandwidth drawn across the picture.
type ceiling struct {
	label string
	gbps  float64
}

// palette is Okabe and Ito's, readable with the common colour-vision deficiencies.
var palette = []string{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000"}

// dramBytes is the case size from which the probe is taken to measure main memory: past
// the last-level cache of any current processor.
const dramBytes = 64e6

// rooflineData picks the points and ceilings out of the results: every measured case, its
// kernel time as a second point on a GPU, the probe of each case as the ceiling at that
// size, and as lines the median probe over the cases of dramBytes or more (main memory;
// the median, as one probe on a busy machine can be far off) and the fastest probe
// (caches, when well above it).
func rooflineData(results []*result) (pts []plotPoint, probes []plotPoint, ceils []ceiling) {
	var largest *result
	var fastest *result
	var dram []float64
	for _, r := range results {
		if r.Runs == 0 || r.GBps <= 0 {
			continue
		}
		dt := shortDType(r.DType)
		b := float64(r.bytes())
		pts = append(pts, plotPoint{series: r.Backend + " " + dt, op: r.Op, name: r.Case, bytes: b, gbps: r.GBps})
		if r.KernelGBps > 0 {
			pts = append(pts, plotPoint{series: r.Backend + " " + dt + " (kernel)", op: r.Op, name: r.Case, bytes: b, gbps: r.KernelGBps})
		}
		if r.Probe != nil && r.Probe.Best() > 0 {
			probes = append(probes, plotPoint{series: "probe", name: r.Case, bytes: b, gbps: r.Probe.Best()})
			if largest == nil || r.bytes() > largest.bytes() {
				largest = r
			}
			if b >= dramBytes {
				dram = append(dram, r.Probe.Best())
			}
			if fastest == nil || r.Probe.Best() > fastest.Probe.Best() {
				fastest = r
			}
		}
	}
	if largest != nil {
		mem, label := largest.Probe.Best(), fmt.Sprintf("CPU memory copy (probe over %s)", fmtBytes(float64(largest.bytes())))
		if len(dram) > 1 {
			slices.Sort(dram)
			mem, label = dram[len(dram)/2], fmt.Sprintf("CPU memory copy (median probe of %d cases ≥ %s)", len(dram), fmtBytes(dramBytes))
		}
		ceils = append(ceils, ceiling{fmt.Sprintf("%s: %.1f GB/s", label, mem), mem})
		if f := fastest.Probe.Best(); f > 1.3*mem {
			ceils = append(ceils, ceiling{fmt.Sprintf("CPU copy in caches (fastest probe, over %s): %.1f GB/s", fmtBytes(float64(fastest.bytes())), f), f})
		}
	}
	return pts, probes, ceils
}

// fmtBytes prints a byte count in decimal units, as the GB/s are.
func fmtBytes(b float64) string {
	switch {
	case b >= 1e9:
		return fmt.Sprintf("%.3g GB", b/1e9)
	case b >= 1e6:
		return fmt.Sprintf("%.3g MB", b/1e6)
	case b >= 1e3:
		return fmt.Sprintf("%.3g kB", b/1e3)
	}
	return fmt.Sprintf("%.0f B", b)
}

// writePlot writes the roofline of the results to path as SVG.
func writePlot(path string, info fusednorm.Info, results []*result) error {
	svg, err := rooflineSVG(info, results)
	if err != nil {
		return err
	}
	return os.WriteFile(path, []byte(svg), 0o644)
}

func rooflineSVG(info fusednorm.Info, results []*result) (string, error) {
	pts, probes, ceils := rooflineData(results)
	if len(pts) == 0 {
		return "", errors.New("-plot: no case was measured")
	}
	const W, H = 960.0, 600.0
	const left, right, top, bottom = 78.0, 250.0, 64.0, 62.0
	pw, ph := W-left-right, H-top-bottom

	// x: bytes moved, log10, whole decades around the data.
	lo, hi := math.Inf(1), math.Inf(-1)
	ymax, ymin := 0.0, math.Inf(1)
	for _, p := range pts {
		ymin = min(ymin, p.gbps)
	}
	for _, c := range ceils {
		ymin = min(ymin, c.gbps)
	}
	for _, p := range append(slices.Clone(pts), probes...) {
		lo, hi = min(lo, p.bytes), max(hi, p.bytes)
		ymax = max(ymax, p.gbps)
	}
	for _, c := range ceils {
		ymax = max(ymax, c.gbps)
	}
	x0, x1 := math.Floor(math.Log10(lo)-0.15), math.Ceil(math.Log10(hi)+0.15)
	xAt := func(b float64) float64 { return left + (math.Log10(b)-x0)/(x1-x0)*pw }
	// y: GB/s from 0, linear; logarithmic when the cases and ceilings span more than 30x
	// (a CPU run and a GPU run in one picture would otherwise flatten the CPU), then down
	// to the slowest probe too.
	logY := ymax/ymin > 30
	var yAt func(float64) float64
	var yTicks []float64
	if logY {
		for _, p := range probes {
			ymin = min(ymin, p.gbps)
		}
		y0, y1 := math.Floor(math.Log10(ymin)), math.Ceil(math.Log10(ymax*1.1))
		yAt = func(v float64) float64 { return top + ph - (math.Log10(v)-y0)/(y1-y0)*ph }
		for e := y0; e <= y1; e++ {
			yTicks = append(yTicks, math.Pow(10, e))
		}
	} else {
		step := niceStep(ymax * 1.12 / 6)
		yTop := math.Ceil(ymax*1.12/step) * step
		yAt = func(v float64) float64 { return top + ph - v/yTop*ph }
		for v := 0.0; v <= yTop+step/2; v += step {
			yTicks = append(yTicks, v)
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">`+"\n", W, H, W, H)
	fmt.Fprintf(&b, `<rect width="%.0f" height="%.0f" fill="white"/>`+"\n", W, H)
	// The device's name, without the driver detail in parentheses: a bold title of more
	// than about 80 characters runs off the picture.
	dev, _, _ := strings.Cut(info.Device, " (")
	title := "fusednorm roofline: " + info.Backend + " on " + dev
	if len(title) > 80 {
		title = title[:77] + "..."
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="24" font-size="15" font-weight="bold">%s</text>`+"\n", left, esc(title))
	fmt.Fprintf(&b, `<text x="%.0f" y="44" fill="#444">achieved GB/s = (bytes read + written) / median time, against the bytes each case moves; 1 GB = 1e9 B</text>`+"\n", left)

	// Grid and axes.
	fmt.Fprintf(&b, `<g stroke="#e4e4e4">`)
	for e := x0; e <= x1; e++ {
		for m := 1.0; m < 10 && e+math.Log10(m) <= x1; m++ {
			x := xAt(m * math.Pow(10, e))
			w := "0.6"
			if m == 1 {
				w = "1.2"
			}
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke-width="%s"/>`, x, top, x, top+ph, w)
		}
	}
	for _, v := range yTicks {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`, left, yAt(v), left+pw, yAt(v))
	}
	fmt.Fprintln(&b, `</g>`)
	fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#333"/>`+"\n", left, top, pw, ph)
	for e := x0; e <= x1; e++ {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", xAt(math.Pow(10, e)), top+ph+18, fmtBytes(math.Pow(10, e)))
	}
	for _, v := range yTicks {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-8, yAt(v)+4, fmtGB(v))
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">bytes moved per call (read + written, log scale)</text>`+"\n", left+pw/2, H-18)
	yLabel := "achieved GB/s"
	if logY {
		yLabel += " (log scale)"
	}
	fmt.Fprintf(&b, `<text transform="translate(20 %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", top+ph/2, yLabel)

	// Ceilings, then the probe at each case's size, then the series on top.
	for i, c := range ceils {
		y := yAt(c.gbps)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#555" stroke-width="1.5" stroke-dasharray="%s"/>`+"\n", left, y, left+pw, y, []string{"7 4", "2 3"}[i%2])
		ty := y - 5
		if i > 0 && math.Abs(yAt(ceils[0].gbps)-y) < 16 {
			ty = y + 14
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="#333" font-size="11" text-anchor="end" stroke="white" stroke-width="3" paint-order="stroke">%s</text>`+"\n", left+pw-6, ty, esc(c.label))
	}
	for _, p := range probes {
		x, y := xAt(p.bytes), yAt(p.gbps)
		fmt.Fprintf(&b, `<path d="M%.1f %.1fl8 8m0 -8l-8 8" stroke="#999" stroke-width="1.5"><title>probe over %s (%s): %.1f GB/s</title></path>`+"\n",
			x-4, y-4, fmtBytes(p.bytes), esc(p.name), p.gbps)
	}
	var series []string
	for _, p := range pts {
		if !slices.Contains(series, p.series) {
			series = append(series, p.series)
		}
	}
	ops := []string{opEmbed, opAdd}
	for si, s := range series {
		col := palette[si%len(palette)]
		dash := ""
		if strings.HasSuffix(s, "(kernel)") {
			dash = ` stroke-dasharray="4 3"`
		}
		for _, op := range ops {
			var line []plotPoint
			for _, p := range pts {
				if p.series == s && p.op == op {
					line = append(line, p)
				}
			}
			slices.SortFunc(line, func(a, b plotPoint) int { return int(math.Copysign(1, a.bytes-b.bytes)) })
			if len(line) > 1 {
				var d strings.Builder
				for i, p := range line {
					fmt.Fprintf(&d, "%s%.1f %.1f", map[bool]string{true: "M", false: " L"}[i == 0], xAt(p.bytes), yAt(p.gbps))
				}
				fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.4" opacity="0.6"%s/>`+"\n", d.String(), col, dash)
			}
			for _, p := range line {
				fmt.Fprintf(&b, "%s\n", marker(op, xAt(p.bytes), yAt(p.gbps), col,
					fmt.Sprintf("%s, %s: %s at %.2f GB/s", p.name, s, fmtBytes(p.bytes), p.gbps)))
			}
		}
	}

	// Legend: series (colour), ops (marker), probe (cross), ceilings (dashes).
	lx, ly := left+pw+20, top+8
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-weight="bold">backend, dtype</text>`+"\n", lx, ly)
	for si, s := range series {
		ly += 20
		col := palette[si%len(palette)]
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/><text x="%.1f" y="%.1f">%s</text>`+"\n", lx, ly-4, lx+22, ly-4, col, lx+30, ly, esc(s))
	}
	ly += 30
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-weight="bold">op</text>`+"\n", lx, ly)
	for _, op := range ops {
		ly += 20
		fmt.Fprintf(&b, "%s<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", marker(op, lx+11, ly-4, "#333", ""), lx+30, ly, op)
	}
	if len(probes) > 0 {
		ly += 30
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-weight="bold">ceilings (measured)</text>`+"\n", lx, ly)
		ly += 20
		fmt.Fprintf(&b, `<path d="M%.1f %.1fl8 8m0 -8l-8 8" stroke="#999" stroke-width="1.5"/><text x="%.1f" y="%.1f">copy probe at the case's size</text>`+"\n", lx+7, ly-8, lx+30, ly)
		for i := range ceils {
			ly += 20
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#555" stroke-width="1.5" stroke-dasharray="%s"/><text x="%.1f" y="%.1f">%s</text>`+"\n",
				lx, ly-4, lx+22, ly-4, []string{"7 4", "2 3"}[i%2], lx+30, ly, []string{"CPU main memory", "CPU caches"}[i%2])
		}
	}
	fmt.Fprintln(&b, `</svg>`)
	return b.String(), nil
}

// marker draws a case: a circle for EmbedLayerNorm, a square for AddLayerNorm.
func marker(op string, x, y float64, col, title string) string {
	t := ""
	if title != "" {
		t = "<title>" + esc(title) + "</title>"
	}
	if op == opEmbed {
		return fmt.Sprintf(`<circle cx="%.1f" cy="%.1f" r="5" fill="%s" stroke="white" stroke-width="1">%s</circle>`, x, y, col, t)
	}
	return fmt.Sprintf(`<rect x="%.1f" y="%.1f" width="9" height="9" fill="%s" stroke="white" stroke-width="1">%s</rect>`, x-4.5, y-4.5, col, t)
}

// niceStep rounds a tick spacing up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

func fmtGB(v float64) string {
	if v >= 10 || v == 0 {
		return fmt.Sprintf("%.0f", v)
	}
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.2f", v), "0"), ".")
}

func esc(s string) string { return html.EscapeString(s) }
