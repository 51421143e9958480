package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"time"

	"github.com/fusednorm/fusednorm"
	"github.com/fusednorm/fusednorm/internal/modelchain"
)

// The -chain mode: the norms of a transformer encoder as a model runs them (see
// internal/modelchain), every tensor on the device, only y wanted, through the public API.
// Per call: the chain's wall time ended by Engine.Sync (without the final read) and ended
// by reading the last output to the host, each divided by the chain's calls; beside them
// the sum of the same calls' kernel times (fusednorm.TimeKernels) and the CPU backend's time
// for the same chain on host tensors. The last output's bits are compared with the CPU's.

// chainResult is one chain's row, as -json writes it.
type chainResult struct {
	Chain        string  `json:"chain"`
	Calls        int     `json:"calls"`
	Backend      string  `json:"backend"`
	Runs         int     `json:"runs"`
	SyncUs       float64 `json:"per_call_us_without_read"`
	ReadUs       float64 `json:"per_call_us_with_read"`
	HostUs       float64 `json:"host_us_per_call"`             // until the chain's last call returns, before the Sync
	KernelUs     float64 `json:"kernel_us_per_call,omitempty"` // the sum of the calls' kernel times over the calls
	EmbedUs      float64 `json:"kernel_us_embed,omitempty"`
	AddUs        float64 `json:"kernel_us_add_median,omitempty"`
	AddMaxUs     float64 `json:"kernel_us_add_max,omitempty"`
	OverUs       float64 `json:"over_kernels_us_per_call,omitempty"`
	OverKernels  float64 `json:"ratio_to_kernels,omitempty"`
	CPUUs        float64 `json:"cpu_host_per_call_us,omitempty"`
	BitsDiffer   int     `json:"elements_differing_from_cpu"`
	Elements     int     `json:"elements"`
	Skipped      string  `json:"skipped,omitempty"`
	KernelRepeat int     `json:"kernel_repeat,omitempty"`
}

func runChains(ctx context.Context, o *options, stdout, stderr io.Writer) error {
	var dts []fusednorm.DType
	switch o.dtype {
	case "f32":
		dts = []fusednorm.DType{fusednorm.Float32}
	case "f16":
		dts = []fusednorm.DType{fusednorm.Float16}
	default:
		dts = []fusednorm.DType{fusednorm.Float32, fusednorm.Float16}
	}
	var shapes []modelchain.Shape
	for _, dt := range dts {
		s, err := modelchain.ParseShapes(o.chain, o.chainLayers, dt)
		if err != nil {
			return fmt.Errorf("-chain: %w", err)
		}
		shapes = append(shapes, s...)
	}
	opts := []fusednorm.Option{fusednorm.WithThreads(o.threads)}
	if o.backendSet {
		opts = append(opts, fusednorm.WithBackend(o.backend))
	}
	eng, err := fusednorm.Open(opts...)
	if err != nil {
		return err
	}
	defer eng.Close()
	// The CPU mirrors the GPU's contraction profile (spec §C.4), so the bits can be compared.
	cpuEng, err := fusednorm.Open(fusednorm.WithBackend(fusednorm.BackendCPU), fusednorm.WithThreads(o.threads),
		fusednorm.WithContraction(eng.Info().Profile))
	if err != nil {
		return err
	}
	defer cpuEng.Close()
	fmt.Fprintf(stdout, "engine: %s\n", eng.Info())
	fmt.Fprintf(stdout, "chain: EmbedLayerNorm (B,S,H), vocabulary %d, then L AddLayerNorm (H) with their own weights, device tensors, only y; per call = wall of the chain / its calls, median of ≥%d chains and ≥%v; kernels = the sum of each call's device time (%d dispatches per timed pass); host = the time until the chain's last call returns, before the Sync; CPU = the CPU backend on host tensors, %d threads\n",
		modelchain.Vocab, o.reps, o.minTime, chainRepeat, o.threads)
	fmt.Fprintf(stdout, "%-26s %12s %12s %12s %12s %8s %10s %12s %s\n", "chain", "no read us", "+read us", "kernels us", "over us", "ratio", "host us", "CPU us", "bits vs CPU")
	var rows []chainResult
	for _, s := range shapes {
		r, err := runChain(ctx, eng, cpuEng, s, o, stderr)
		if err != nil {
			return err
		}
		rows = append(rows, r)
		if r.Skipped != "" {
			fmt.Fprintf(stdout, "%-26s skipped: %s\n", r.Chain, r.Skipped)
			continue
		}
		kernel, over, ratio := "-", "-", "-"
		if r.KernelUs > 0 {
			kernel, over, ratio = fmt.Sprintf("%.2f", r.KernelUs), fmt.Sprintf("%+.2f", r.OverUs), fmt.Sprintf("%.3f", r.OverKernels)
		}
		fmt.Fprintf(stdout, "%-26s %12.2f %12.2f %12s %12s %8s %10.2f %12.2f %d of %d differ\n",
			r.Chain, r.SyncUs, r.ReadUs, kernel, over, ratio, r.HostUs, r.CPUUs, r.BitsDiffer, r.Elements)
		if r.KernelUs > 0 {
			fmt.Fprintf(stdout, "%-26s kernels: EmbedLayerNorm %.2f us, AddLayerNorm median %.2f us, slowest %.2f us\n", "", r.EmbedUs, r.AddUs, r.AddMaxUs)
		}
	}
	if o.jsonPath != "" {
		b, err := json.MarshalIndent(rows, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.jsonPath, append(b, '\n'), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s\n", o.jsonPath)
	}
	return nil
}

// chainRepeat is the dispatches per timed pass of a chain's kernel times: enough to hide a
// pass's own cost behind a tiny kernel.
const chainRepeat = 20

func runChain(ctx context.Context, eng, cpuEng *fusednorm.Engine, s modelchain.Shape, o *options, stderr io.Writer) (chainResult, error) {
	r := chainResult{Chain: s.String(), Calls: s.Calls(), Backend: eng.Info().Backend, KernelRepeat: chainRepeat}
	// The device chain and the CPU's host chain are built one after the other; both hold
	// their tables, so the budget is twice the chain's bytes.
	if need := 2 * s.Bytes(); need > o.maxBytes {
		r.Skipped = fmt.Sprintf("needs about %s, over -max-bytes %s", fmtGiB(need), fmtGiB(o.maxBytes))
		return r, nil
	}
	prog := newProgress(stderr)
	defer prog.end()
	prog.step("chain " + s.String() + ": building")
	dev, err := modelchain.New(eng, s, true)
	if err != nil {
		return r, err
	}
	defer dev.Close()
	host, err := modelchain.New(cpuEng, s, false)
	if err != nil {
		return r, err
	}
	defer host.Close()
	out, err := fusednorm.NewTensor(s.DType, s.Batch, s.Seq, s.Hidden)
	if err != nil {
		return r, err
	}
	r.Elements = out.Len()

	prog.step("chain " + s.String() + ": warming up")
	for range max(o.warmup, 1) {
		if err := dev.Run(ctx); err != nil {
			return r, err
		}
		if err := eng.Sync(ctx); err != nil {
			return r, err
		}
	}
	// Rounds: each times the chain ended by Sync and ended by the final read, in a new
	// random order.
	prog.step("chain " + s.String() + ": timing")
	var syncs, reads, hosts []time.Duration
	ends := []func() error{
		func() error { return timeChain(ctx, dev, &syncs, &hosts, func() error { return eng.Sync(ctx) }) },
		func() error { return timeChain(ctx, dev, &reads, nil, func() error { return dev.ReadFinal(ctx, out) }) },
	}
	for start := time.Now(); len(syncs) < o.reps || time.Since(start) < o.minTime; {
		rand.Shuffle(len(ends), func(a, b int) { ends[a], ends[b] = ends[b], ends[a] })
		for _, end := range ends {
			if err := end(); err != nil {
				return r, err
			}
		}
	}
	// The kernels alone, with the GPU's clocks up: chains back to back for a while first
	// (an idle GPU runs a lone dispatch several times slower), then each call's kernel
	// timed twice, the faster kept.
	prog.step("chain " + s.String() + ": kernel times")
	for start := time.Now(); time.Since(start) < 200*time.Millisecond; {
		if err := dev.Run(ctx); err != nil {
			return r, err
		}
	}
	kts, err := dev.KernelTimes(ctx, chainRepeat)
	if err != nil {
		return r, err
	}
	again, err := dev.KernelTimes(ctx, chainRepeat)
	if err != nil {
		return r, err
	}
	for i := range kts {
		kts[i] = min(kts[i], again[i])
	}
	var ksum time.Duration
	for _, k := range kts {
		ksum += k
	}
	prog.step("chain " + s.String() + ": the CPU on host tensors")
	var cpus []time.Duration
	for start := time.Now(); len(cpus) < o.reps || time.Since(start) < o.minTime; {
		if err := timeChain(ctx, host, &cpus, nil, func() error { return nil }); err != nil {
			return r, err
		}
	}
	want, err := fusednorm.NewTensor(s.DType, s.Batch, s.Seq, s.Hidden)
	if err != nil {
		return r, err
	}
	if err := host.ReadFinal(ctx, want); err != nil {
		return r, err
	}
	r.BitsDiffer = differing(out, want)

	calls := float64(s.Calls())
	per := func(d time.Duration) float64 { return us(d) / calls }
	r.Runs = len(syncs)
	r.SyncUs, r.ReadUs, r.HostUs, r.CPUUs = per(median(syncs)), per(median(reads)), per(median(hosts)), per(median(cpus))
	if ksum > 0 {
		r.KernelUs = per(ksum)
		r.EmbedUs, r.AddUs, r.AddMaxUs = us(kts[0]), us(median(kts[1:])), us(slices.Max(kts[1:]))
		r.OverUs = r.SyncUs - r.KernelUs
		r.OverKernels = r.SyncUs / r.KernelUs
	}
	return r, nil
}

// timeChain appends the wall time of one run of c ended by end, and when host is set the time
// until its last call returned (what the host spent recording and submitting).
func timeChain(ctx context.Context, c *modelchain.Chain, into, host *[]time.Duration, end func() error) error {
	t0 := time.Now()
	if err := c.Run(ctx); err != nil {
		return err
	}
	if host != nil {
		*host = append(*host, time.Since(t0))
	}
	if err := end(); err != nil {
		return err
	}
	*into = append(*into, time.Since(t0))
	return nil
}

// differing counts the elements of two same-shaped float tensors whose bits differ.
func differing(a, b fusednorm.Tensor) int {
	n := 0
	if a.DType() == fusednorm.Float32 {
		x, y := a.Float32s(), b.Float32s()
		for i := range x {
			if math.Float32bits(x[i]) != math.Float32bits(y[i]) {
				n++
			}
		}
		return n
	}
	x, y := a.Bits16(), b.Bits16()
	for i := range x {
		if x[i] != y[i] {
			n++
		}
	}
	return n
}
