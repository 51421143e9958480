package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"slices"
	"time"

	"github.com/fusednorm/fusednorm"
)

// The -compare mode (issue 13): is auto as fast as the faster of the two backends? Three
// engines in one process, -backend cpu, -backend dawn and auto, run each case on the same
// host tensors, one timed call each in a new random order every round, so that the three
// columns come from the same minutes: a shared machine's drift, which moves a sub-millisecond
// case by ±10% from one run to the next, cancels instead of deciding the comparison. Each
// timed call follows an untimed one of the same engine (the other engines' calls in between
// flushed the caches it would find warm in a loop), and auto's first calls of a case (its
// exploring, -warmup) are untimed, as on the other two.

// comparison is one case's row of the -compare table.
type comparison struct {
	Case         string             `json:"case"`
	Runs         int                `json:"runs"`
	MedianMs     map[string]float64 `json:"median_ms"`        // by engine: cpu, dawn, auto
	AutoRanOn    map[string]int     `json:"auto_ran_on"`      // where auto's timed calls ran, counted
	AutoOverBest float64            `json:"auto_over_faster"` // auto's median over the faster of cpu and dawn
	Error        string             `json:"error,omitempty"`
}

var compareEngines = [...]string{fusednorm.BackendCPU, fusednorm.BackendDawn, fusednorm.BackendAuto}

func runCompare(ctx context.Context, cases []benchCase, o *options, stdout io.Writer, prog *progress) ([]comparison, error) {
	var engs [len(compareEngines)]*fusednorm.Engine
	for i, name := range compareEngines {
		opts := []fusednorm.Option{fusednorm.WithThreads(o.threads), fusednorm.WithHugePages(o.hugePages)}
		if o.level != "" {
			opts = append(opts, fusednorm.WithCPULevel(o.level))
		}
		if name != fusednorm.BackendAuto {
			opts = append(opts, fusednorm.WithBackend(name))
		}
		prog.step("opening the " + name + " engine")
		eng, err := fusednorm.Open(opts...)
		prog.end()
		if err != nil {
			return nil, fmt.Errorf("-compare: %s: %w", name, err)
		}
		defer eng.Close()
		engs[i] = eng
		fmt.Fprintf(stdout, "engine %s: %s\n", name, eng.Info())
	}
	fmt.Fprintf(stdout, "timing: each round times one call per engine in a random order, each after an untimed call of its own; median of ≥%d rounds and ≥%v of each engine's calls, after %d untimed calls per engine\n",
		o.reps, o.minTime, o.warmup)
	fmt.Fprintf(stdout, "%-26s %10s %10s %10s  %-20s %s\n", "case", "cpu ms", "dawn ms", "auto ms", "auto ran on", "auto / faster")
	var rows []comparison
	for i := range cases {
		c := &cases[i]
		if ctx.Err() != nil {
			return rows, ctx.Err()
		}
		prog.step(fmt.Sprintf("case %d/%d %s: setting up", i+1, len(cases), c.Name))
		row := compareOne(ctx, engs, c, o, prog)
		prog.end()
		rows = append(rows, row)
		if row.Error != "" {
			fmt.Fprintf(stdout, "%-26s error: %s\n", row.Case, row.Error)
			continue
		}
		ran := ""
		for _, b := range []string{fusednorm.BackendCPU, fusednorm.BackendDawn} {
			if n := row.AutoRanOn[b]; n > 0 {
				if ran != "" {
					ran += " "
				}
				ran += fmt.Sprintf("%s %d/%d", b, n, row.Runs)
			}
		}
		fmt.Fprintf(stdout, "%-26s %10.3f %10.3f %10.3f  %-20s %.3f\n", row.Case, row.MedianMs["cpu"], row.MedianMs["dawn"],
			row.MedianMs["auto"], ran, row.AutoOverBest)
		runtime.GC()
		debug.FreeOSMemory()
	}
	return rows, nil
}

func compareOne(ctx context.Context, engs [len(compareEngines)]*fusednorm.Engine, c *benchCase, o *options, prog *progress) comparison {
	row := comparison{Case: c.Name, MedianMs: map[string]float64{}, AutoRanOn: map[string]int{}}
	if need := 3 * c.allocBytes(); need > o.maxBytes {
		row.Error = fmt.Sprintf("skipped: needs %s, over -max-bytes %s", fmtGiB(need), fmtGiB(o.maxBytes))
		return row
	}
	host, err := setupHostTensors(c, o.threads)
	if err != nil {
		row.Error = err.Error()
		return row
	}
	var ws [len(compareEngines)]*workload
	for i, eng := range engs {
		if ws[i], err = setupOn(eng, c, host); err != nil {
			row.Error = fmt.Sprintf("%s: setup: %v", compareEngines[i], err)
			return row
		}
		defer ws[i].close()
	}
	prog.step(fmt.Sprintf("%s: timing", c.Name))
	for i, w := range ws {
		for range o.warmup {
			if err := w.run(ctx); err != nil {
				row.Error = fmt.Sprintf("%s: %v", compareEngines[i], err)
				return row
			}
		}
	}
	var ts [len(compareEngines)][]time.Duration
	var spent [len(compareEngines)]time.Duration
	var where string
	auto := fusednorm.ReportBackend(ctx, &where)
	order := []int{0, 1, 2}
	for len(ts[0]) < o.reps || slices.Min(spent[:]) < o.minTime {
		if err := ctx.Err(); err != nil {
			row.Error = err.Error()
			return row
		}
		rand.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		for _, i := range order {
			cctx := ctx
			if compareEngines[i] == fusednorm.BackendAuto {
				cctx = auto
			}
			if err := ws[i].run(cctx); err != nil { // re-warm after the other engines' calls
				row.Error = fmt.Sprintf("%s: %v", compareEngines[i], err)
				return row
			}
			t := time.Now()
			err := ws[i].run(cctx)
			d := time.Since(t)
			if err != nil {
				row.Error = fmt.Sprintf("%s: %v", compareEngines[i], err)
				return row
			}
			ts[i], spent[i] = append(ts[i], d), spent[i]+d
			if cctx == auto {
				row.AutoRanOn[where]++
			}
		}
	}
	for i, name := range compareEngines {
		row.MedianMs[name] = ms(median(ts[i]))
	}
	row.Runs = len(ts[0])
	row.AutoOverBest = row.MedianMs["auto"] / min(row.MedianMs["cpu"], row.MedianMs["dawn"])
	return row
}
