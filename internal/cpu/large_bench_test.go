package cpu

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// BenchmarkAddLayerNormLarge is the long-row bench shapes (rows of 3, 16 and 32 KiB), f32
// with a bias row and the x output, as the bench tool runs them (fewer rows). PFA sets
// tuning.prefetchAhead from the environment, to compare settings in one build
// (BenchmarkStreamAB compares them paired).
func BenchmarkAddLayerNormLarge(b *testing.B) {
	tune := defaultTuning()
	envInt("PFA", &tune.prefetchAhead)
	for _, sh := range [][2]int{{4096, 768}, {16384, 768}, {4096, 4096}, {2048, 8192}} {
		N, D := sh[0], sh[1]
		r := rand.New(rand.NewPCG(4, 4))
		f32 := func(n int) ops.Buf { return ops.Buf{DType: ops.F32, F32: normal(r, n)} }
		x1, x2, gamma, beta, bias := f32(N*D), f32(N*D), f32(D), f32(D), f32(D)
		b.Run(fmt.Sprintf("f32_%dx%d+x", N, D), func(b *testing.B) {
			be := newTunedBackend(b, Options{Threads: 1}, tune)
			a := ops.AddLN{N: N, D: D, X1: x1, X2: x2, Gamma: gamma, Beta: beta, Bias: bias,
				Epsilon: 1e-5, Y: f32(N * D), X: f32(N * D), Mean: make([]float32, N), Rstd: make([]float32, N)}
			b.SetBytes(int64(4*N*D*4 + 3*D*4 + 2*N*4))
			for b.Loop() {
				if err := be.AddLayerNorm(context.Background(), &a); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e6/float64(b.N), "ms/op")
		})
	}
}

// BenchmarkAddLayerNormShape runs one AddLayerNorm shape at every level, single-threaded,
// for comparing levels and row widths on one machine: SHAPE=N,D (default 4096,4096), DT=f16
// or f32 (default f16); 16-bit x1, x2, gamma, beta and bias row (or float32 ones), with the
// x output, as the bench cases run them.
func BenchmarkAddLayerNormShape(b *testing.B) {
	N, D := 4096, 4096
	if v := os.Getenv("SHAPE"); v != "" {
		if _, err := fmt.Sscanf(v, "%d,%d", &N, &D); err != nil {
			b.Fatal(err)
		}
	}
	dt := envDType(ops.F16)
	r := rand.New(rand.NewPCG(5, 5))
	mk := func(n int) ops.Buf { return randBuf(r, dt, n, 1) }
	a := ops.AddLN{N: N, D: D, X1: mk(N * D), X2: mk(N * D), Gamma: mk(D), Beta: mk(D), Bias: mk(D),
		Epsilon: 1e-5, Y: mk(N * D), X: mk(N * D), Mean: make([]float32, N), Rstd: make([]float32, N)}
	b.Run(fmt.Sprintf("%v_%dx%d", dt, N, D), func(b *testing.B) {
		atLevels(b, func(b *testing.B, level string) {
			be := newBackend(b, Options{Threads: 1, Level: level})
			b.SetBytes(int64(4*N*D*dt.Size() + 3*D*dt.Size() + 2*N*4))
			for b.Loop() {
				if err := be.AddLayerNorm(context.Background(), &a); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e6/float64(b.N), "ms/op")
		})
	})
}

// BenchmarkEmbedLayerNormShape runs one EmbedLayerNorm shape at every level, single-
// threaded, for comparing levels and settings on one machine: SHAPE=B,S,H (default
// 64,512,1024), DT=f16 or f32 (default f16), BIG (tuning.bigBytes: 1<<62 turns the
// non-temporal stores and the row prefetch off), PIECE (tuning.sumPiece), V (the vocabulary
// size).
func BenchmarkEmbedLayerNormShape(b *testing.B) {
	B, S, H := envShape(b, 64, 512, 1024)
	dt := envDType(ops.F16)
	tune := defaultTuning()
	envInt("BIG", &tune.bigBytes)
	envInt("PIECE", &tune.sumPiece)
	V, P, G := 30522, 512, 2
	envInt("V", &V) // a small vocabulary keeps the tables in the caches: the compute alone
	r := rand.New(rand.NewPCG(2, 2))
	mk := func(n int) ops.Buf { return randBuf(r, dt, n, 0.05) }
	w := ops.EmbedWeights{DType: dt, H: H, V: V, P: P, G: G,
		Word: mk(V * H), Pos: mk(P * H), Seg: mk(G * H), Gamma: mk(H), Beta: mk(H),
		Epsilon: 1e-12, Rule: ops.MaskCountOnes}
	in := benchEmbedInputs(r, B, S, V, G)
	out := ops.EmbedOutputs{Out: mk(B * S * H), MaskIndex: make([]int32, B)}
	b.Run(fmt.Sprintf("%v_%dx%dx%d", dt, B, S, H), func(b *testing.B) {
		atLevels(b, func(b *testing.B, level string) {
			op, err := newTunedBackend(b, Options{Threads: 1, Level: level}, tune).PrepareEmbed(&w)
			if err != nil {
				b.Fatal(err)
			}
			awaitHuge(op)
			for b.Loop() {
				if err := op.Run(context.Background(), &in, &out); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e6/float64(b.N), "ms/op")
		})
	})
}

// BenchmarkStreamAB compares tunings of the ops past the caches with the configurations
// alternated run by run, so that a shared machine's drift (tens of percent from one minute
// to the next) cancels out of the ratios. One thread, at the widest level (-cpu.off to
// narrow it). OP=add (default): AddLayerNorm over N×D rows (default 4096×4096) with a bias
// row and the x output; OP=embed: EmbedLayerNorm over SHAPE=B,S,H (default 16,512,4096),
// vocabulary 30522. DT=f32 (default) or f16. CFGS lists the configurations, the first being
// the one the others are divided by (default probe,now,ahead,hardware); each but the probe
// runs on a backend of its own tuning:
//
//	probe     two non-temporal copies over the bytes the op must move, a row at a time (the bench's stream probe)
//	now       defaultTuning()
//	ahead     every row's inputs prefetched a row ahead (hwStreamRow and hwGatherRow past any row, shortRow 0)
//	hardware  no row prefetched ahead (hwStreamRow and hwGatherRow 0)
//	smallpages EmbedLayerNorm with a word table left on small pages (Options.NoHugePages)
//	narrowweights 16-bit gamma and beta widened on every row, not once (wideBytes 0)
//	aheadN    rows prefetched N rows ahead where they are prefetched (prefetchAhead = N)
//	stepsN    each row's prefetch cut into N pieces (prefetchSteps = N)
//	pieceN    16-bit first passes a piece of N elements at a time (sumPiece = N)
//	chunksN   streamed 16-bit rows whole from chunks N bytes apart (pageChunks = N)
//	bigN      data counts as past the caches from N bytes (bigBytes = N): big1099511627776 keeps every store cached and prefetches nothing
//	shortN    rows of at most N bytes of output count as in the caches (shortRow = N)
//	gatherN   EmbedLayerNorm's word tables of N bytes or more count as past the caches (gatherBytes = N)
//	a+b       the settings of a and b at once (hardware+steps1)
//
// It reports, per configuration, the median over pairs of its time divided by the first
// configuration's (…/first), and its median time in ms. REPS sets the pairs (default 9).
func BenchmarkStreamAB(b *testing.B) {
	N, D, reps := 4096, 4096, 9
	envInt("N", &N)
	envInt("D", &D)
	envInt("REPS", &reps)
	B, S, H := envShape(b, 16, 512, 4096)
	dt := envDType(ops.F32)
	cfgs := strings.Split(cmp.Or(os.Getenv("CFGS"), "probe,now,ahead,hardware"), ",")
	r := rand.New(rand.NewPCG(4, 4))
	mk := func(n int) ops.Buf { return randBuf(r, dt, n, 1) }
	// The probe copies a → c and b → d as float32 words, rows of `row` words: as many bytes
	// as the op must move (for EmbedLayerNorm: its three gathered rows per token and the
	// output, as bench.json counts them).
	words := func(t ops.Buf) []float32 {
		if t.DType == ops.F32 {
			return t.F32
		}
		return unsafe.Slice((*float32)(unsafe.Pointer(&t.U16[0])), len(t.U16)/2)
	}
	probeK := newBackend(b, Options{Threads: 1}).k
	// op prepares the op on a backend: what a configuration times.
	var op func(be *Backend, smallPages bool) func() error
	var pa, pb, pc, pd []float32
	var row int
	switch os.Getenv("OP") {
	case "", "add":
		a := ops.AddLN{N: N, D: D, X1: mk(N * D), X2: mk(N * D), Gamma: mk(D), Beta: mk(D), Bias: mk(D),
			Epsilon: 1e-5, Y: mk(N * D), X: mk(N * D), Mean: make([]float32, N), Rstd: make([]float32, N)}
		op = func(be *Backend, smallPages bool) func() error {
			if smallPages {
				b.Fatal("CFGS: smallpages is for OP=embed")
			}
			return func() error { return be.AddLayerNorm(context.Background(), &a) }
		}
		pa, pb, pc, pd, row = words(a.X1), words(a.X2), words(a.X), words(a.Y), D*dt.Size()/4
	case "embed":
		const V, P, G = 30522, 512, 2
		w := ops.EmbedWeights{DType: dt, H: H, V: V, P: P, G: G, Word: mk(V * H), Pos: mk(P * H),
			Seg: mk(G * H), Gamma: mk(H), Beta: mk(H), Epsilon: 1e-12, Rule: ops.MaskCountOnes}
		in := benchEmbedInputs(r, B, S, V, G)
		out := ops.EmbedOutputs{Out: mk(B * S * H), MaskIndex: make([]int32, B)}
		var small *ops.EmbedWeights // the same weights with a word table of its own, left on small pages
		op = func(be *Backend, smallPages bool) func() error {
			ws := &w
			if smallPages {
				if small == nil {
					c := w
					c.Word = mk(V * H)
					small = &c
				}
				ws = small
			}
			e, err := be.PrepareEmbed(ws)
			if err != nil {
				b.Fatal(err)
			}
			awaitHuge(e)
			return func() error { return e.Run(context.Background(), &in, &out) }
		}
		pa, pb, pc, pd, row = words(out.Out), words(mk(B*S*H)), words(mk(B*S*H)), words(mk(B*S*H)), H*dt.Size()/4
	default:
		b.Fatalf("OP=%q: want add or embed", os.Getenv("OP"))
	}
	probe := func() time.Duration {
		t := time.Now()
		for o := 0; o+row <= len(pa); o += row {
			probeK.copyNT(pc[o:o+row], pa[o:o+row])
			probeK.copyNT(pd[o:o+row], pb[o:o+row])
		}
		probeK.fence()
		return time.Since(t)
	}
	// runs[i] times one run of configuration i.
	runs := make([]func() time.Duration, len(cfgs))
	for i, cfg := range cfgs {
		if cfg == "probe" {
			runs[i] = probe
			continue
		}
		tune, opts := defaultTuning(), Options{Threads: 1}
		// The configurations that set one field to their number (aheadN, …).
		numbered := map[string]*int{"ahead": &tune.prefetchAhead, "steps": &tune.prefetchSteps,
			"piece": &tune.sumPiece, "chunks": &tune.pageChunks, "big": &tune.bigBytes,
			"short": &tune.shortRow, "gather": &tune.gatherBytes}
		for _, m := range strings.Split(cfg, "+") {
			name := strings.TrimRight(m, "0123456789")
			n, err := strconv.Atoi(m[len(name):])
			switch field := numbered[name]; {
			case m == "now":
			case m == "ahead":
				tune.hwStreamRow, tune.hwGatherRow, tune.shortRow = 1<<62, 1<<62, 0
			case m == "hardware":
				tune.hwStreamRow, tune.hwGatherRow = 0, 0
			case m == "narrowweights":
				tune.wideBytes = 0
			case m == "smallpages":
				opts.NoHugePages = true
			case field != nil && err == nil:
				*field = n
			default:
				b.Fatalf("CFGS: unknown configuration %q in %q", m, cfg)
			}
		}
		f := op(newTunedBackend(b, opts, tune), opts.NoHugePages)
		runs[i] = func() time.Duration {
			t := time.Now()
			if err := f(); err != nil {
				b.Fatal(err)
			}
			return time.Since(t)
		}
	}
	// Each round runs the configurations in a new random order: what ran just before
	// matters (the configuration after the probe ran up to 20% slower on the EPYC, the
	// untimed run between them notwithstanding), so no configuration keeps one neighbour.
	times := make([][]float64, len(cfgs))
	order := rand.New(rand.NewPCG(5, 5))
	for b.Loop() {
		for range reps {
			for _, i := range order.Perm(len(cfgs)) {
				runs[i]() // the same cache state before each timed run
				times[i] = append(times[i], float64(runs[i]().Nanoseconds()))
			}
		}
	}
	median := func(v []float64) float64 { v = slices.Clone(v); slices.Sort(v); return v[len(v)/2] }
	for i, cfg := range cfgs {
		ratio := make([]float64, len(times[i]))
		for j := range ratio {
			ratio[j] = times[i][j] / times[0][j]
		}
		b.ReportMetric(median(ratio), cfg+"/"+cfgs[0])
		b.ReportMetric(median(times[i])/1e6, cfg+"-ms")
	}
}

// envShape is SHAPE=B,S,H from the environment, else the defaults.
func envShape(b *testing.B, B, S, H int) (int, int, int) {
	if v := os.Getenv("SHAPE"); v != "" {
		if _, err := fmt.Sscanf(v, "%d,%d,%d", &B, &S, &H); err != nil {
			b.Fatal(err)
		}
	}
	return B, S, H
}

// envDType is DT=f32 or DT=f16 from the environment, else def.
func envDType(def ops.DType) ops.DType {
	switch os.Getenv("DT") {
	case "f32":
		return ops.F32
	case "f16":
		return ops.F16
	}
	return def
}

// envInt sets *p from the environment variable name when it holds an integer.
func envInt(name string, p *int) {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		*p = v
	}
}

// randBuf is n values from N(0, scale²) as a tensor of dt (f32, or f16 rounded by the twin).
func randBuf(r *rand.Rand, dt ops.DType, n int, scale float64) ops.Buf {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64() * scale)
	}
	if dt == ops.F32 {
		return ops.Buf{DType: ops.F32, F32: v}
	}
	u := make([]uint16, n)
	narrowF16Go(u, v)
	return ops.Buf{DType: ops.F16, U16: u}
}
