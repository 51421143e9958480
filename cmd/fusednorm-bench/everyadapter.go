package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fusednorm/fusednorm"
)

// The -every-adapter mode (one engine per GPU): a Dawn engine on each adapter
// fusednorm.Adapters lists (the hardware ones; the software ones only where there is none),
// and for each case, each engine alone, then all of them at once, a goroutine per engine,
// started together. Per engine: the kernel's device time per dispatch (fusednorm.TimeKernels,
// K dispatches of the call on device tensors between two timestamps, as the default table's
// kernel column) and the host-tensor call's GB/s (inputs uploaded and outputs read back: the
// case's bytes over the call's median wall), alone and together; per case, the engines'
// host-tensor GB/s together, summed, beside one engine's alone. While the engines run
// together, one that has its samples keeps calling, untimed, until the last has its own, so
// every sample is taken with all of them busy. Each engine is timed on the same host data
// (setupHostTensors), uploaded to each.

// engineFigures are one engine's figures for a case.
type engineFigures struct {
	Engine           int     `json:"engine"`
	Adapter          int     `json:"adapter"`
	KernelMsAlone    float64 `json:"kernel_ms_alone,omitempty"`
	KernelMsTogether float64 `json:"kernel_ms_together,omitempty"`
	KernelRatio      float64 `json:"kernel_together_over_alone,omitempty"`
	KernelRepeat     int     `json:"kernel_repeat,omitempty"`
	HostMsAlone      float64 `json:"host_ms_alone"`
	HostMsTogether   float64 `json:"host_ms_together"`
	HostGBpsAlone    float64 `json:"host_GBps_alone"`
	HostGBpsTogether float64 `json:"host_GBps_together"`
}

// adapterRow is one case of the -every-adapter table.
type adapterRow struct {
	Case    string          `json:"case"`
	Bytes   int64           `json:"bytes"`
	Engines []engineFigures `json:"engines,omitempty"`
	// CombinedGBps: the engines' host-tensor GB/s together, summed; OneGBps: engine 0's alone.
	CombinedGBps float64 `json:"combined_host_GBps_together,omitempty"`
	OneGBps      float64 `json:"one_engine_host_GBps_alone,omitempty"`
	Skipped      string  `json:"skipped,omitempty"`
	Error        string  `json:"error,omitempty"`
}

// adapterEngine is an engine of the mode and the adapter it runs on.
type adapterEngine struct {
	eng     *fusednorm.Engine
	adapter fusednorm.AdapterInfo
	info    fusednorm.Info // at Open (runEveryAdapter closes the engines before -json is written)
}

// pickAdapters is the adapters the mode opens, and a line saying which and why.
func pickAdapters(list []fusednorm.AdapterInfo) ([]fusednorm.AdapterInfo, string) {
	var hw []fusednorm.AdapterInfo
	for _, a := range list {
		if !a.Software {
			hw = append(hw, a)
		}
	}
	pick, kind := hw, "hardware"
	if len(hw) == 0 {
		pick, kind = list, "software (no hardware adapter here)"
	}
	if len(pick) == 1 {
		return pick, fmt.Sprintf("adapters: one %s adapter of %d listed: its engine runs alone, and the together figures are that engine once more (the method's noise)", kind, len(list))
	}
	return pick, fmt.Sprintf("adapters: %d %s adapters of %d listed, an engine on each", len(pick), kind, len(list))
}

func runEveryAdapter(ctx context.Context, cases []benchCase, o *options, stdout io.Writer, prog *progress) ([]adapterRow, []adapterEngine, error) {
	list, err := fusednorm.Adapters()
	if err != nil {
		return nil, nil, fmt.Errorf("-every-adapter: %w", err)
	}
	pick, line := pickAdapters(list)
	fmt.Fprintln(stdout, line)
	var engs []adapterEngine
	defer func() {
		for _, e := range engs {
			e.eng.Close()
		}
	}()
	for _, a := range pick {
		prog.step(fmt.Sprintf("opening an engine on adapter %d (%s)", a.Index, a.Name))
		eng, err := fusednorm.Open(fusednorm.WithBackend(fusednorm.BackendDawn), fusednorm.WithAdapter(strconv.Itoa(a.Index)),
			fusednorm.WithThreads(o.threads))
		prog.end()
		if err != nil {
			return nil, nil, fmt.Errorf("-every-adapter: adapter %d (%s): %w", a.Index, a.Name, err)
		}
		info := eng.Info()
		fmt.Fprintf(stdout, "engine %d: adapter %d, %s, vendor 0x%04x device 0x%04x: %s\n", len(engs), a.Index, a.Name, a.VendorID, a.DeviceID, info)
		engs = append(engs, adapterEngine{eng: eng, adapter: a, info: info})
	}
	fmt.Fprintf(stdout, "timing: alone = the engine by itself, all = every engine at once (a goroutine each, started together, each busy until the last has its samples); kernel: device time per dispatch, K dispatches on device tensors between two timestamps over K (fusednorm.TimeKernels), after a chain of calls that brings the clocks up; host: the case's bytes over the median wall of a host-tensor call; median of ≥%d samples and ≥%v each, after %d warm-up calls\n",
		o.reps, o.minTime, o.warmup)
	fmt.Fprintf(stdout, "%-28s %6s %15s %15s %7s %15s %15s %7s\n", "case", "engine", "kernel ms alone", "kernel ms all", "all/1", "host GB/s alone", "host GB/s all", "all/1")
	var rows []adapterRow
	worst, worstAt := 0.0, ""
	for i := range cases {
		if err := ctx.Err(); err != nil {
			return rows, engs, err
		}
		c := &cases[i]
		prog.step(fmt.Sprintf("case %d/%d %s: setting up", i+1, len(cases), c.Name))
		row := everyAdapterCase(ctx, engs, c, o, prog)
		prog.end()
		rows = append(rows, row)
		runtime.GC()
		debug.FreeOSMemory()
		switch {
		case row.Skipped != "":
			fmt.Fprintf(stdout, "%-28s skipped: %s\n", row.Case, row.Skipped)
			continue
		case row.Error != "":
			fmt.Fprintf(stdout, "%-28s error: %s\n", row.Case, row.Error)
			continue
		}
		for _, f := range row.Engines {
			k1, kAll, kr := "-", "-", "-"
			if f.KernelMsAlone > 0 {
				k1, kAll, kr = fmt.Sprintf("%.4f", f.KernelMsAlone), fmt.Sprintf("%.4f", f.KernelMsTogether), fmt.Sprintf("%.3f", f.KernelRatio)
				if f.KernelRatio > worst {
					worst, worstAt = f.KernelRatio, fmt.Sprintf("%s, engine %d", row.Case, f.Engine)
				}
			}
			fmt.Fprintf(stdout, "%-28s %6d %15s %15s %7s %15.2f %15.2f %7.3f\n", row.Case, f.Engine, k1, kAll, kr,
				f.HostGBpsAlone, f.HostGBpsTogether, f.HostGBpsTogether/f.HostGBpsAlone)
		}
		fmt.Fprintf(stdout, "%-28s %6s %15s %15s %7s %15.2f %15.2f %7.3f   (host: engine 0 alone; every engine at once, summed)\n",
			row.Case, "sum", "", "", "", row.OneGBps, row.CombinedGBps, row.CombinedGBps/row.OneGBps)
	}
	if worstAt != "" {
		fmt.Fprintf(stdout, "kernel time together over alone: at most %.3f (%s)\n", worst, worstAt)
	}
	failed := 0
	for _, r := range rows {
		if r.Error != "" {
			failed++
		}
	}
	if failed > 0 {
		return rows, engs, fmt.Errorf("-every-adapter: %d of %d cases failed", failed, len(rows))
	}
	return rows, engs, nil
}

// member is one engine's case, set up: the host-tensor call and the call on device tensors.
type member struct {
	host  *workload
	dev   *deviceWorkload
	chain int                     // calls of the chain that brings the clocks up before kernel timing
	clock *fusednorm.KernelTiming // nil: the device has no timestamps
}

func everyAdapterCase(ctx context.Context, engs []adapterEngine, c *benchCase, o *options, prog *progress) adapterRow {
	row := adapterRow{Case: c.Name, Bytes: c.Bytes.Read + c.Bytes.Write}
	// The host data is shared; each engine holds its own outputs, and on its GPU a copy of all.
	if need := int64(len(engs)) * c.allocBytes(); need > o.maxBytes {
		row.Skipped = fmt.Sprintf("needs %s, over -max-bytes %s", fmtGiB(need), fmtGiB(o.maxBytes))
		return row
	}
	host, err := setupHostTensors(c, o.threads)
	if err != nil {
		row.Error = err.Error()
		return row
	}
	mem := make([]*member, len(engs))
	defer func() {
		for _, m := range mem {
			if m != nil {
				m.host.close()
				if m.dev != nil {
					m.dev.close()
				}
			}
		}
	}()
	for i, e := range engs {
		m := &member{}
		if m.host, err = setupOn(e.eng, c, host); err != nil {
			row.Error = fmt.Sprintf("engine %d: setup: %v", i, err)
			return row
		}
		mem[i] = m
		if m.dev, err = setupDeviceOn(e.eng, c, host); err != nil {
			row.Error = fmt.Sprintf("engine %d: device setup: %v", i, err)
			return row
		}
		if err := m.calibrate(ctx, e.eng, o); err != nil {
			row.Error = fmt.Sprintf("engine %d: %v", i, err)
			return row
		}
	}
	host = nil

	kernel := func(sel []int) ([][]time.Duration, error) {
		var ss []sampler
		for _, i := range sel {
			if mem[i].clock != nil {
				ss = append(ss, mem[i].kernelSampler(ctx, engs[i].eng))
			}
		}
		return sampleTogether(ctx, o, ss)
	}
	hostCalls := func(sel []int) ([][]time.Duration, error) {
		var ss []sampler
		for _, i := range sel {
			ss = append(ss, mem[i].hostSampler(o))
		}
		return sampleTogether(ctx, o, ss)
	}
	all := make([]int, len(engs))
	row.Engines = make([]engineFigures, len(engs))
	for i := range engs {
		all[i] = i
		row.Engines[i] = engineFigures{Engine: i, Adapter: engs[i].adapter.Index}
		if mem[i].clock != nil {
			row.Engines[i].KernelRepeat = mem[i].clock.Repeat
		}
	}
	gbps := func(d time.Duration) float64 { return float64(row.Bytes) / float64(d.Nanoseconds()) }
	for i := range engs {
		prog.step(fmt.Sprintf("%s: engine %d alone", c.Name, i))
		k, err := kernel([]int{i})
		if err == nil && len(k) == 1 {
			row.Engines[i].KernelMsAlone = ms(median(k[0]))
		}
		var h [][]time.Duration
		if err == nil {
			h, err = hostCalls([]int{i})
		}
		if err != nil {
			row.Error = fmt.Sprintf("engine %d alone: %v", i, err)
			return row
		}
		med := median(h[0])
		row.Engines[i].HostMsAlone, row.Engines[i].HostGBpsAlone = ms(med), gbps(med)
	}
	prog.step(fmt.Sprintf("%s: %d engines together", c.Name, len(engs)))
	k, err := kernel(all)
	if err != nil {
		row.Error = "together: kernel: " + err.Error()
		return row
	}
	for j, i := 0, 0; i < len(engs); i++ {
		if mem[i].clock != nil {
			f := &row.Engines[i]
			f.KernelMsTogether = ms(median(k[j]))
			f.KernelRatio = f.KernelMsTogether / f.KernelMsAlone
			j++
		}
	}
	h, err := hostCalls(all)
	if err != nil {
		row.Error = "together: host: " + err.Error()
		return row
	}
	for i := range engs {
		med := median(h[i])
		row.Engines[i].HostMsTogether, row.Engines[i].HostGBpsTogether = ms(med), gbps(med)
		row.CombinedGBps += row.Engines[i].HostGBpsTogether
	}
	row.OneGBps = row.Engines[0].HostGBpsAlone
	// The work happened: read the device workloads' main output back once.
	for i, m := range mem {
		if err := m.dev.read(ctx); err != nil {
			row.Error = fmt.Sprintf("engine %d: read-back: %v", i, err)
			return row
		}
	}
	return row
}

// calibrate warms the member up (-warmup host calls, three device calls) and sizes its kernel
// timing as timeDeviceResident does: K dispatches filling about 2 ms, after a chain of calls
// that fills about -min-time (20 to 2000 calls). The first timed pass, which makes the
// timestamp objects, is run here, untimed; a device without timestamps leaves clock nil.
func (m *member) calibrate(ctx context.Context, eng *fusednorm.Engine, o *options) error {
	for range o.warmup {
		if err := m.host.run(ctx); err != nil {
			return err
		}
	}
	t := time.Now()
	for range 3 {
		if err := m.dev.run(ctx); err != nil {
			return err
		}
	}
	if err := eng.Sync(ctx); err != nil {
		return err
	}
	per := time.Since(t) / 3
	m.chain = int(min(max(int64(o.minTime/max(per, 1)), 20), 2000))
	clock := &fusednorm.KernelTiming{Repeat: kernelRepeat(per)}
	if err := m.dev.run(fusednorm.TimeKernels(ctx, clock)); err != nil {
		return fmt.Errorf("kernel timing: %w", err)
	}
	if clock.PerCall > 0 {
		m.clock = clock
	}
	return nil
}

// kernelSampler times the kernel after a chain of calls that brings the GPU's clocks up.
func (m *member) kernelSampler(ctx context.Context, eng *fusednorm.Engine) sampler {
	cctx := fusednorm.TimeKernels(ctx, m.clock)
	return sampler{
		warm: func(ctx context.Context) error {
			for range m.chain {
				if err := m.dev.run(ctx); err != nil {
					return err
				}
			}
			return eng.Sync(ctx)
		},
		sample: func(context.Context) (time.Duration, time.Duration, error) {
			m.clock.PerCall = 0
			t := time.Now()
			if err := m.dev.run(cctx); err != nil {
				return 0, 0, err
			}
			if m.clock.PerCall <= 0 {
				return 0, 0, errors.New("kernel timing: no device time")
			}
			return m.clock.PerCall, time.Since(t), nil
		},
	}
}

// hostSampler times host-tensor calls.
func (m *member) hostSampler(o *options) sampler {
	return sampler{
		warm: func(ctx context.Context) error {
			for range o.warmup {
				if err := m.host.run(ctx); err != nil {
					return err
				}
			}
			return nil
		},
		sample: func(ctx context.Context) (time.Duration, time.Duration, error) {
			t := time.Now()
			err := m.host.run(ctx)
			d := time.Since(t)
			return d, d, err
		},
	}
}

// sampler is what one engine runs: warm, untimed, then sample, each call giving a figure and
// the wall it took.
type sampler struct {
	warm   func(ctx context.Context) error
	sample func(ctx context.Context) (figure, wall time.Duration, err error)
}

// sampleTogether runs each sampler on a goroutine of its own: all warm up, then all sample
// from the same moment, each until it has -reps figures over at least -min-time of wall; one
// done before the others keeps sampling, untimed, until all are. With one sampler it is that
// engine alone. The figures come back in the samplers' order.
func sampleTogether(ctx context.Context, o *options, ss []sampler) ([][]time.Duration, error) {
	figs := make([][]time.Duration, len(ss))
	errs := make([]error, len(ss))
	var warmed, wg sync.WaitGroup
	var pending atomic.Int32
	pending.Store(int32(len(ss)))
	warmed.Add(len(ss))
	for i, s := range ss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			counted := false
			finish := func() {
				if !counted {
					counted = true
					pending.Add(-1)
				}
			}
			defer finish()
			err := s.warm(ctx)
			warmed.Done()
			if err != nil {
				errs[i] = fmt.Errorf("warm-up: %w", err)
				return
			}
			warmed.Wait()
			var spent time.Duration
			for !counted || pending.Load() > 0 {
				if err := ctx.Err(); err != nil {
					errs[i] = err
					return
				}
				f, w, err := s.sample(ctx)
				if err != nil {
					errs[i] = err
					return
				}
				if !counted {
					figs[i], spent = append(figs[i], f), spent+w
					if len(figs[i]) >= o.reps && spent >= o.minTime {
						finish()
					}
				}
			}
		}()
	}
	wg.Wait()
	return figs, errors.Join(errs...)
}

// writeAdaptersJSON writes the -every-adapter results.
func writeAdaptersJSON(path string, o *options, engs []adapterEngine, rows []adapterRow) error {
	var list []map[string]any
	for i, e := range engs {
		list = append(list, map[string]any{"engine": i, "adapter": e.adapter, "info": e.info})
	}
	return writeIndented(path, map[string]any{
		"tool": "fusednorm-bench -every-adapter", "time": time.Now().UTC().Format(time.RFC3339), "go": runtime.Version(),
		"host":     hostFields(),
		"settings": map[string]any{"threads": o.threads, "reps": o.reps, "min_time": o.minTime.String(), "warmup": o.warmup},
		"engines":  list,
		"notes": []string{"kernel_ms: device time per dispatch (fusednorm.TimeKernels), the engine alone and with every engine busy at once; " +
			"host_GBps: the case's bytes over the median wall of a host-tensor call; combined_host_GBps_together: every engine's host_GBps_together, summed"},
		"results": rows,
	})
}
