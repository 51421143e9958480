package fusednorm

import (
	"log/slog"
	"sync"

	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/plan"
)

// Default epsilons of the two ops (spec §A.1 and §B.1).
const (
	DefaultEmbedEpsilon = float32(1e-12)
	DefaultAddEpsilon   = float32(1e-5)
)

// MaskRule selects how EmbedLayerNorm derives mask_index from the mask (spec §A.4).
type MaskRule = ops.MaskRule

const (
	// MaskFirstZero (the default): the first position whose mask is 0, else S. The Hugging
	// Face kernel card's rule, and ORT's CUDA kernel's.
	MaskFirstZero MaskRule = ops.MaskFirstZero
	// MaskIndexCountOnes: the number of mask entries equal to 1, for parity with ORT's CPU.
	MaskIndexCountOnes MaskRule = ops.MaskCountOnes
)

// OpOption sets an attribute of an op.
type OpOption func(*opConfig)

type opConfig struct {
	eps        float32
	epsSet     bool
	rule       ops.MaskRule
	ruleSet    bool // WithMaskRule was given: an EmbedLayerNorm option
	additional bool
	addSet     bool // AdditionalOutput was given: an AddLayerNorm option
}

// Epsilon sets the value added to the variance (defaults: 1e-12 EmbedLayerNorm, 1e-5
// AddLayerNorm). It must be finite, and >= 0 for EmbedLayerNorm (spec §A.1, §B.3).
func Epsilon(eps float32) OpOption { return func(c *opConfig) { c.eps, c.epsSet = eps, true } }

// WithMaskRule sets the mask_index rule of EmbedLayerNorm: MaskFirstZero (the default) or
// MaskIndexCountOnes; another value is an error. It applies to EmbedLayerNorm only: given
// to AddLayerNorm (with any value) it is an error wrapping ErrInvalidArgument.
func WithMaskRule(r MaskRule) OpOption { return func(c *opConfig) { c.rule, c.ruleSet = r, true } }

// AdditionalOutput makes AddLayerNorm also return x = x1 + x2 (+ bias) in OutT. It applies
// to AddLayerNorm only: given to EmbedLayerNorm (with any value) it is an error wrapping
// ErrInvalidArgument; EmbedLayerNorm's extra output is EmbedOutputs.WantEmbeddingSum.
func AdditionalOutput(on bool) OpOption {
	return func(c *opConfig) { c.additional, c.addSet = on, true }
}

// checkOptions refuses an option of the other op: each op takes Epsilon, and AddLayerNorm
// AdditionalOutput, EmbedLayerNorm WithMaskRule. The error is an *ArgError on the option's
// attribute, naming the option and the op it applies to.
func (c *opConfig) checkOptions(op string) error {
	switch {
	case op == opAdd && c.ruleSet:
		return argErr(op, "mask_index_rule", "WithMaskRule applies to EmbedLayerNorm only; AddLayerNorm takes Epsilon and AdditionalOutput")
	case op == opEmbed && c.addSet:
		return argErr(op, "additional_output", "AdditionalOutput applies to AddLayerNorm only; EmbedLayerNorm takes Epsilon and WithMaskRule (its extra output is EmbedOutputs.WantEmbeddingSum)")
	}
	return nil
}

func newOpConfig(defEps float32, opts []OpOption) opConfig {
	if len(opts) == 0 {
		return opConfig{eps: defEps}
	}
	// The options write through a pointer the compiler cannot follow, so the config they
	// write to would be allocated on every call: it comes from a pool instead.
	c := opConfigs.Get().(*opConfig)
	*c = opConfig{eps: defEps}
	for _, o := range opts {
		o(c)
	}
	v := *c
	opConfigs.Put(c)
	return v
}

var opConfigs = sync.Pool{New: func() any { return new(opConfig) }}

// EnvBackend is the environment variable consulted when no WithBackend option is given.
const EnvBackend = "FUSEDNORM_BACKEND"

// EnvDawnLib names the Dawn library to load, before the built-in search list.
const EnvDawnLib = "FUSEDNORM_DAWN_LIB"

// EnvCPULevel caps the CPU kernels when WithCPULevel is not given: "go", "avx2", "avx512"
// or "avx512fp16", in any case, spaces around ignored (as WithCPULevel).
const EnvCPULevel = "FUSEDNORM_CPU_LEVEL"

// Option configures Open.
type Option func(*config)

type config struct {
	backend     string
	dawnLib     string
	threads     int
	cpuLevel    string
	levelSource string // where cpuLevel came from: "WithCPULevel" or EnvCPULevel
	noHuge      bool   // WithHugePages(false)
	profile     *plan.Contraction
	inject      func(site string) error
	quietLoader bool // auto: the Vulkan loader's stderr goes to the logger
	logger      *slog.Logger
	// autoSoftware lets auto keep a software adapter (lavapipe) and route between it and
	// the CPU: tests of the routing on a machine without a GPU (route_export_test.go).
	autoSoftware bool
	adapter      string // WithAdapter's selector, when adapterSet
	adapterSet   bool
}

// WithBackend picks the backend: "auto", "cpu" or "dawn". It overrides FUSEDNORM_BACKEND.
func WithBackend(name string) Option { return func(c *config) { c.backend = name } }

// WithDawnLibrary names the Dawn shared library to load: an absolute path, or a bare file
// name for the system loader. It overrides FUSEDNORM_DAWN_LIB. An explicit library is a
// demand, not a hint: when it does not load, Dawn fails (naming the path and why) rather than
// load another from the search list; in auto mode the engine then runs on the CPU and Info's
// Reason says why. Without either, the library is looked for next to the executable, then by
// the system loader, then in the folder cmd/fusednorm-dawn installs into (the user cache's
// fusednorm/dawn-<version>, loaded only when its SHA-256 is the pinned build's), never in or
// above the working directory. One Dawn runs in a process: once one is loaded, later engines
// use it, and naming another file fails (two copies of Dawn break each other).
func WithDawnLibrary(path string) Option { return func(c *config) { c.dawnLib = path } }

// WithAdapter opens the GPU adapter sel names: its index in Adapters' list ("0", "1", …),
// else the first adapter whose name, vendor or driver contains sel, ignoring case ("H200",
// "llvmpipe"). Without it Dawn takes the first of that list. On a machine with several
// GPUs, open one engine per GPU. An adapter that does not exist is a demand that cannot be
// met: with Dawn forced, Open fails (wrapping ErrUnavailable, naming the adapters there
// are); in auto mode the engine runs on the CPU and Info's Reason says why. A negative index
// or an empty sel is an error wrapping ErrInvalidArgument in every mode.
func WithAdapter(sel string) Option { return func(c *config) { c.adapter, c.adapterSet = sel, true } }

// WithThreads bounds the goroutines one CPU call uses; 0, like no WithThreads, means
// GOMAXPROCS. A negative n makes Open fail with an error wrapping ErrInvalidArgument, in
// every mode.
func WithThreads(n int) Option { return func(c *config) { c.threads = n } }

// WithCPULevel caps the CPU kernels at a level: "go" (the pure-Go twins) or a SIMD level
// the processor has ("avx2", "avx512", "avx512fp16"; CPULevels lists those it has), in any
// case, spaces around ignored; empty means FUSEDNORM_CPU_LEVEL, else the best available.
// Every level gives the same bits. A level the CPU backend cannot run here (not one of
// CPULevels) makes Open fail, when it opens the CPU backend, with an error wrapping
// ErrUnavailable that lists the levels there are.
func WithCPULevel(level string) Option {
	return func(c *config) { c.cpuLevel, c.levelSource = level, "WithCPULevel" }
}

// WithHugePages(false) keeps the CPU backend from moving EmbedLayerNorm word tables of
// 16 MiB or more onto 2 MiB pages. By default, on Linux, NewEmbedLayerNorm has the kernel
// back such a table with huge pages (madvise MADV_COLLAPSE), so the rows it gathers do not
// each miss the TLB: 2-22% faster on the bench shapes. The move takes the kernel a while
// (0.4-0.8 s for BERT-base's 94 MiB table on a loaded machine), so it runs on a goroutine
// of its own, one huge page at a time, and NewEmbedLayerNorm returns at once: the op's
// first calls may find part of the table on small pages still. The goroutine holds the
// table until it ends; the op's Close and the engine's Close stop it and wait for it (one
// huge page at most). The table's values and address stay as they are, calls running
// meanwhile read them as usual, and a kernel that declines leaves the table on its small
// pages.
func WithHugePages(on bool) Option { return func(c *config) { c.noHuge = !on } }

// WithContraction makes the CPU backend mirror a GPU's contraction profile (spec §C.4), so
// its results are bit-identical to that GPU's. Ignored by the Dawn backend, which detects
// its own.
func WithContraction(p Contraction) Option { return func(c *config) { c.profile = &p } }

// withFaultInjection installs a hook the Dawn backend calls at each place the device can
// fail; a non-nil return is treated as that failure (the tests of error paths). The sites:
// "load", "open", "create-buffer", "write-buffer", "pipeline", "submit", "map", and "lose",
// where a non-nil return makes Dawn lose the device for real while a dispatch is in flight.
func withFaultInjection(hook func(site string) error) Option {
	return func(c *config) { c.inject = hook }
}

// WithLogger receives the messages of the Dawn backend: Dawn's own device log (warnings of
// its Vulkan backend among them), errors Dawn raised outside the library's error scopes, and
// device loss and recovery. Without it they are discarded. Messages that the Vulkan loader or
// a driver print themselves while Dawn looks for adapters, before a device exists, go to
// stderr regardless (see the README).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }
