//go:build cgo

package dawn

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/testkit"
)

// openRuntimeDevice opens a device or skips; with FUSEDNORM_REQUIRE_DAWN=1 it fails instead,
// so CI cannot pass by skipping.
func openRuntimeDevice(t *testing.T, opts deviceOptions) *device {
	t.Helper()
	d, err := openDevice(opts)
	if err != nil {
		testkit.SkipWithoutDawn(t, err)
	}
	t.Cleanup(func() {
		if err := d.close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return d
}

const affineWGSL = `
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) ng: vec3<u32>) {
    let i = id.y * ng.x * 64u + id.x;
    if (i < arrayLength(&x)) { y[i] = x[i] * 2.0 + 1.0; }
}
`

func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return b
}

// affine holds a ready x/y pair for the y = 2x + 1 kernel.
type affine struct {
	d    *device
	p    *pipeline
	x, y *buffer
	in   []float32
}

func newAffine(t *testing.T, d *device, n int) *affine {
	t.Helper()
	p, err := d.pipeline("test/affine", affineWGSL, "main")
	if err != nil {
		t.Fatal(err)
	}
	in := make([]float32, n)
	for i := range in {
		in[i] = float32(i)*0.75 - 123.5
	}
	x, err := d.createBuffer("x", uint64(4*n), usageStorage|usageCopyDst)
	if err != nil {
		t.Fatal(err)
	}
	y, err := d.createBuffer("y", uint64(4*n), usageStorage|usageCopySrc)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.writeBuffer(x, 0, f32Bytes(in)); err != nil {
		t.Fatal(err)
	}
	return &affine{d: d, p: p, x: x, y: y, in: in}
}

func (a *affine) run(ctx context.Context, groups [3]uint32) ([]byte, error) {
	out := make([]byte, 4*len(a.in))
	err := a.d.run(ctx, a.p, []binding{{Binding: 0, Buffer: a.x}, {Binding: 1, Buffer: a.y}}, groups,
		[]readback{{Src: a.y, Dst: out}})
	return out, err
}

func (a *affine) check(t *testing.T, out []byte) {
	t.Helper()
	for i, v := range a.in {
		got := math.Float32frombits(binary.LittleEndian.Uint32(out[4*i:]))
		if want := v*2 + 1; got != want {
			t.Fatalf("y[%d] = %v, want %v", i, got, want)
		}
	}
}

func TestRuntimeOpenAndInfo(t *testing.T) {
	d := openRuntimeDevice(t, deviceOptions{})
	info := d.info
	t.Logf("adapter: %s", info)
	t.Logf("limits: %+v", d.limits)
	t.Logf("features: %v", d.features())
	if info.Backend != "Vulkan" {
		t.Errorf("backend %q, want Vulkan", info.Backend)
	}
	if strings.Contains(info.Device, "Null") {
		t.Errorf("Null backend accepted: %s", info)
	}
	l := d.limits
	if l.MaxStorageBufferBindingSize < 128<<20 || l.MaxComputeInvocationsPerWorkgroup < 256 || l.MaxComputeWorkgroupsPerDimension < 65535 {
		t.Errorf("limits not raised to at least the WebGPU defaults: %+v", l)
	}
	if d.hasFeature("NoSuchFeature") {
		t.Error("hasFeature of an unknown name")
	}
}

// The generated Go table and the generated C header come from the same dawn.json run.
func TestRuntimeGeneratedTablesAgree(t *testing.T) {
	if err := checkGenerated(); err != nil {
		t.Error(err)
	}
	if usageStorage != 0x80 || usageMapRead != 1 || usageCopySrc != 4 || usageCopyDst != 8 || usageUniform != 0x40 {
		t.Error("buffer usage values")
	}
}

func TestRuntimeDispatch(t *testing.T) {
	d := openRuntimeDevice(t, deviceOptions{})
	ctx := context.Background()
	a := newAffine(t, d, 1000)
	out, err := a.run(ctx, [3]uint32{16, 1, 1}) // 1024 invocations
	if err != nil {
		t.Fatal(err)
	}
	a.check(t, out)

	t.Run("2-D grid", func(t *testing.T) {
		b := newAffine(t, d, 1000)
		out, err := b.run(ctx, [3]uint32{4, 4, 1}) // 4*64 wide, 4 rows: 1024 invocations
		if err != nil {
			t.Fatal(err)
		}
		b.check(t, out)
	})

	t.Run("odd readback length and offset", func(t *testing.T) {
		out := make([]byte, 7)
		guard := make([]byte, 16)
		dst := append(out[:7:7], guard...)[:7]
		if err := d.run(ctx, a.p, []binding{{Binding: 0, Buffer: a.x}, {Binding: 1, Buffer: a.y}}, [3]uint32{16, 1, 1},
			[]readback{{Src: a.y, Offset: 40, Dst: dst}}); err != nil {
			t.Fatal(err)
		}
		want := f32Bytes([]float32{a.in[10]*2 + 1, a.in[11]*2 + 1})[:7]
		if string(dst) != string(want) {
			t.Fatalf("got %x, want %x", dst, want)
		}
	})

	t.Run("odd write length pads", func(t *testing.T) {
		b, err := d.createBuffer("odd", 5, usageStorage|usageCopyDst|usageCopySrc)
		if err != nil {
			t.Fatal(err)
		}
		defer b.release()
		if b.size != 8 {
			t.Fatalf("size %d, want 8", b.size)
		}
		if err := d.writeBuffer(b, 0, []byte{1, 2, 3, 4, 5}); err != nil {
			t.Fatal(err)
		}
		out := make([]byte, 8)
		if err := d.run(ctx, a.p, []binding{{Binding: 0, Buffer: a.x}, {Binding: 1, Buffer: a.y}}, [3]uint32{0, 0, 0},
			[]readback{{Src: b, Dst: out}}); err != nil {
			t.Fatal(err)
		}
		if string(out) != string([]byte{1, 2, 3, 4, 5, 0, 0, 0}) {
			t.Fatalf("got %v", out)
		}
	})

	t.Run("no readback waits for the queue", func(t *testing.T) {
		if err := d.run(ctx, a.p, []binding{{Binding: 0, Buffer: a.x}, {Binding: 1, Buffer: a.y}}, [3]uint32{16, 1, 1}, nil); err != nil {
			t.Fatal(err)
		}
	})
}

func TestRuntimeErrors(t *testing.T) {
	d := openRuntimeDevice(t, deviceOptions{})
	ctx := context.Background()

	_, err := d.pipeline("test/bad", "fn main( {", "main")
	if !errors.Is(err, ops.ErrDevice) || !strings.Contains(err.Error(), "expected ')'") ||
		!strings.HasPrefix(err.Error(), "dawn: (*device).pipeline: ") {
		t.Errorf("bad WGSL: %v", err)
	}
	_, err = d.pipeline("test/noentry", affineWGSL, "nope")
	if !errors.Is(err, ops.ErrDevice) {
		t.Errorf("missing entry point: %v", err)
	}

	a := newAffine(t, d, 100)
	// A binding the layout does not have is a validation error that comes back from Run.
	err = d.run(ctx, a.p, []binding{{Binding: 0, Buffer: a.x}, {Binding: 1, Buffer: a.y}, {Binding: 7, Buffer: a.y}},
		[3]uint32{2, 1, 1}, nil)
	if !errors.Is(err, ops.ErrDevice) || !strings.HasPrefix(err.Error(), "dawn: (*device).run: ") {
		t.Errorf("extra binding: %v", err)
	}
	// The device stays usable after a scoped error.
	out, err := a.run(ctx, [3]uint32{2, 1, 1})
	if err != nil {
		t.Fatal(err)
	}
	a.check(t, out)

	if _, err := d.createBuffer("huge", d.limits.MaxBufferSize+4, usageStorage); !errors.Is(err, ops.ErrNotSupported) {
		t.Errorf("buffer over the limit: %v", err)
	}
	if err := d.run(ctx, a.p, nil, [3]uint32{d.limits.MaxComputeWorkgroupsPerDimension + 1, 1, 1}, nil); !errors.Is(err, ops.ErrNotSupported) {
		t.Errorf("grid over the limit: %v", err)
	}
	if err := d.writeBuffer(a.x, 2, []byte{1}); !errors.Is(err, ops.ErrInvalidArgument) {
		t.Errorf("unaligned write: %v", err)
	}
	if err := d.run(ctx, a.p, nil, [3]uint32{1, 1, 1}, []readback{{Src: a.y, Offset: 400, Dst: make([]byte, 4)}}); !errors.Is(err, ops.ErrInvalidArgument) {
		t.Errorf("readback past the end: %v", err)
	}
	released, _ := d.createBuffer("released", 16, usageStorage)
	released.release()
	released.release()
	if err := d.run(ctx, a.p, []binding{{Binding: 0, Buffer: released}}, [3]uint32{1, 1, 1}, nil); !errors.Is(err, ops.ErrInvalidArgument) {
		t.Errorf("released buffer: %v", err)
	}
}

// TestRuntimeLibrarySearch: an explicit library (option or environment) is the only one
// tried; a relative one is refused; the search list holds nothing derived from the working
// directory or the source tree.
func TestRuntimeLibrarySearch(t *testing.T) {
	t.Setenv(envLib, "/nonexistent/env/libwebgpu_dawn.so")
	cands, explicit := libCandidates("/nonexistent/explicit.so")
	if !explicit || len(cands) != 1 || cands[0].path != "/nonexistent/explicit.so" {
		t.Fatalf("explicit library: %+v", cands)
	}
	cands, explicit = libCandidates("")
	if !explicit || len(cands) != 1 || cands[0].path != "/nonexistent/env/libwebgpu_dawn.so" {
		t.Fatalf("library from the environment: %+v", cands)
	}
	for _, lib := range []string{"/nonexistent/explicit.so", ""} {
		_, err := openDevice(deviceOptions{LibPath: lib})
		want := lib
		if want == "" {
			want = "/nonexistent/env/libwebgpu_dawn.so"
		}
		if !errors.Is(err, ops.ErrUnavailable) || !strings.Contains(err.Error(), want+": no such file") ||
			!strings.Contains(err.Error(), "never replaced") {
			t.Errorf("missing explicit library %q: %v", want, err)
		}
	}
	if _, err := openDevice(deviceOptions{LibPath: "third_party/dawn/libwebgpu_wrapper.so"}); !errors.Is(err, ops.ErrUnavailable) ||
		!strings.Contains(err.Error(), "relative path") {
		t.Errorf("relative explicit library: %v", err)
	}

	t.Setenv(envLib, "")
	t.Setenv("LD_LIBRARY_PATH", "/usr/lib::/opt/lib")
	cands, explicit = libCandidates("")
	if explicit || len(cands) == 0 {
		t.Fatalf("search list: %+v", cands)
	}
	if last := cands[len(cands)-1]; strings.Contains(last.path, "/") || !strings.Contains(last.skip, "LD_LIBRARY_PATH") {
		t.Errorf("the system loader comes last, and not with an empty LD_LIBRARY_PATH entry: %+v", last)
	}
}

// TestRuntimeNoLibraryFromWorkingDirectory plants a Dawn library where the old search looked
// (third_party/dawn/ of the module above the working directory), stands there, and checks it
// is neither a candidate nor loaded.
func TestRuntimeNoLibraryFromWorkingDirectory(t *testing.T) {
	real := os.Getenv(envLib)
	dir := t.TempDir()
	planted := dir + "/third_party/dawn/libwebgpu_wrapper.so"
	if err := os.MkdirAll(dir+"/third_party/dawn", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/go.mod", []byte("module planted\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if real != "" {
		if err := os.Symlink(real, planted); err != nil {
			t.Fatal(err)
		}
	} else if err := os.WriteFile(planted, []byte("not a library"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir + "/third_party")
	t.Setenv(envLib, "")
	cands, _ := libCandidates("")
	for _, c := range cands {
		if strings.HasPrefix(c.path, dir) || !strings.HasPrefix(c.path, "/") && strings.Contains(c.path, "/") {
			t.Errorf("candidate derived from the working directory: %+v", c)
		}
	}
	d, err := openDevice(deviceOptions{})
	if err != nil {
		if strings.Contains(err.Error(), dir) {
			t.Errorf("the planted library was tried: %v", err)
		}
		return
	}
	defer d.close()
	if lib := d.library(); strings.HasPrefix(lib, dir) || lib == real {
		t.Errorf("loaded %s, the planted library", lib)
	}
}

// TestRuntimeLibraryNamed: a device says which file it loaded.
func TestRuntimeLibraryNamed(t *testing.T) {
	d := openRuntimeDevice(t, deviceOptions{})
	lib := d.library()
	if !strings.HasPrefix(lib, "/") {
		t.Fatalf("Library() = %q, want an absolute path", lib)
	}
	if want := os.Getenv(envLib); want != "" && lib != want {
		t.Errorf("Library() = %q, want %s", lib, want)
	}
}

// TestRuntimeDeviceLoss makes Dawn lose the device (wgpuDeviceForceLoss) while a dispatch is
// in flight: the dispatch fails with ErrDevice saying the device was lost, so does every later
// call, and Dawn's messages reach the logger.
func TestRuntimeDeviceLoss(t *testing.T) {
	var lose atomic.Bool
	var logged strings.Builder
	var logMu sync.Mutex
	d, err := openDevice(deviceOptions{
		Inject: func(site string) error {
			if site == "lose" && lose.Load() {
				return errors.New("test loss")
			}
			return nil
		},
		Logger: slog.New(slog.NewTextHandler(&lockedWriter{w: &logged, mu: &logMu}, nil)),
	})
	if err != nil {
		testkit.SkipWithoutDawn(t, err)
	}
	a := newAffine(t, d, 64)
	out, err := a.run(context.Background(), [3]uint32{1, 1, 1})
	if err != nil {
		t.Fatal(err)
	}
	a.check(t, out)
	lose.Store(true)
	for i := range 2 {
		_, err = a.run(context.Background(), [3]uint32{1, 1, 1})
		if !errors.Is(err, ops.ErrDevice) || !strings.Contains(err.Error(), "device lost") || !strings.Contains(err.Error(), "test loss") {
			t.Errorf("call %d on the lost device: %v", i, err)
		}
		t.Logf("call %d: %v", i, err)
	}
	if _, err := d.createBuffer("after", 4, usageStorage); !errors.Is(err, ops.ErrDevice) || !strings.Contains(err.Error(), "device lost") {
		t.Errorf("createBuffer on the lost device: %v", err)
	}
	if err := d.close(); !errors.Is(err, ops.ErrDevice) || !strings.Contains(err.Error(), "lost") {
		t.Errorf("Close of a lost device: %v", err)
	}
	logMu.Lock()
	defer logMu.Unlock()
	if !strings.Contains(logged.String(), "device lost") {
		t.Errorf("the logger did not hear of the loss: %q", logged.String())
	}
	t.Logf("log: %s", logged.String())
}

type lockedWriter struct {
	w  *strings.Builder
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestRuntimeInject(t *testing.T) {
	boom := errors.New("boom")
	if _, err := openDevice(deviceOptions{Inject: func(site string) error {
		if site == "load" {
			return boom
		}
		return nil
	}}); !errors.Is(err, boom) || !errors.Is(err, ops.ErrUnavailable) {
		t.Errorf("inject load: %v", err)
	}
	var mu sync.Mutex
	fail := ""
	d := openRuntimeDevice(t, deviceOptions{Inject: func(site string) error {
		mu.Lock()
		defer mu.Unlock()
		if site == fail {
			return boom
		}
		return nil
	}})
	set := func(s string) { mu.Lock(); fail = s; mu.Unlock() }
	a := newAffine(t, d, 64)
	for _, site := range []string{"create-buffer", "write-buffer", "pipeline", "submit", "map"} {
		set(site)
		var err error
		switch site {
		case "create-buffer":
			_, err = d.createBuffer("b", 4, usageStorage)
		case "write-buffer":
			err = d.writeBuffer(a.x, 0, []byte{1, 2, 3, 4})
		case "pipeline":
			_, err = d.pipeline("test/inject", affineWGSL, "main")
		default:
			_, err = a.run(context.Background(), [3]uint32{1, 1, 1})
		}
		if !errors.Is(err, boom) || !errors.Is(err, ops.ErrDevice) || !strings.Contains(err.Error(), site) {
			t.Errorf("inject %s: %v", site, err)
		}
	}
	set("")
	a.in = a.in[:64]
	if err := d.writeBuffer(a.x, 0, f32Bytes(a.in)); err != nil {
		t.Fatal(err)
	}
	out, err := a.run(context.Background(), [3]uint32{1, 1, 1})
	if err != nil {
		t.Fatalf("after injected faults: %v", err)
	}
	a.check(t, out)
}

func TestRuntimeConcurrent(t *testing.T) {
	d := openRuntimeDevice(t, deviceOptions{})
	const workers, rounds = 8, 5
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		a := newAffine(t, d, 500+w*37)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				out, err := a.run(context.Background(), [3]uint32{uint32(len(a.in)+63) / 64, 1, 1})
				if err != nil {
					errs <- fmt.Errorf("worker %d round %d: %w", w, r, err)
					return
				}
				for i, v := range a.in {
					if got := math.Float32frombits(binary.LittleEndian.Uint32(out[4*i:])); got != v*2+1 {
						errs <- fmt.Errorf("worker %d round %d: y[%d] = %v, want %v", w, r, i, got, v*2+1)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A heavy kernel keeps the GPU busy long enough for a deadline or cancel to land mid-wait.
const spinWGSL = `
@group(0) @binding(0) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    var acc = f32(id.x);
    for (var i = 0u; i < 20000u; i++) { acc = acc * 0.999 + 1.0; }
    y[id.x] = acc;
}
`

func TestRuntimeContext(t *testing.T) {
	d := openRuntimeDevice(t, deviceOptions{})
	p, err := d.pipeline("test/spin", spinWGSL, "main")
	if err != nil {
		t.Fatal(err)
	}
	const n = 64 * 256
	y, err := d.createBuffer("spin", 4*n, usageStorage|usageCopySrc)
	if err != nil {
		t.Fatal(err)
	}
	run := func(ctx context.Context) error {
		return d.run(ctx, p, []binding{{Binding: 0, Buffer: y}}, [3]uint32{n / 64, 1, 1},
			[]readback{{Src: y, Dst: make([]byte, 4*n)}})
	}

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := run(cancelled); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled before: %v", err)
	}

	start := time.Now()
	if err := run(context.Background()); err != nil {
		t.Fatal(err)
	}
	full := time.Since(start)
	t.Logf("spin kernel round trip: %v", full)

	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), time.Millisecond)
		}, context.DeadlineExceeded},
		{"cancel", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(time.Millisecond, cancel)
			return ctx, cancel
		}, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := tc.ctx()
			defer cancel()
			start := time.Now()
			err := run(ctx)
			took := time.Since(start)
			// On a fast GPU the dispatch may finish first; then err is nil and that is fine.
			if err != nil && !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if err != nil && took > full/2+100*time.Millisecond {
				t.Errorf("returned after %v, the dispatch takes %v: the wait did not honour ctx", took, full)
			}
			t.Logf("err=%v after %v", err, took)
		})
	}
	// Abandoned dispatches are reaped; the device keeps working.
	if err := run(context.Background()); err != nil {
		t.Fatalf("after abandoned dispatches: %v", err)
	}
}

func TestRuntimeTimed(t *testing.T) {
	d := openRuntimeDevice(t, deviceOptions{})
	a := newAffine(t, d, 1000)
	out := make([]byte, 4000)
	ns, err := d.runTimed(context.Background(), a.p, []binding{{Binding: 0, Buffer: a.x}, {Binding: 1, Buffer: a.y}},
		[3]uint32{16, 1, 1}, []readback{{Src: a.y, Dst: out}})
	if !d.hasFeature("TimestampQuery") {
		if !errors.Is(err, ops.ErrNotSupported) {
			t.Fatalf("without TimestampQuery: %v", err)
		}
		t.Skip("no TimestampQuery")
	}
	if err != nil {
		t.Fatal(err)
	}
	a.check(t, out)
	t.Logf("GPU time of the pass: %v", ns)
}

func TestRuntimeClose(t *testing.T) {
	d := openRuntimeDevice(t, deviceOptions{})
	a := newAffine(t, d, 64)
	if err := d.close(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.run(context.Background(), [3]uint32{1, 1, 1}); !errors.Is(err, ops.ErrClosed) {
		t.Errorf("Run after Close: %v", err)
	}
	if _, err := d.createBuffer("late", 4, usageStorage); !errors.Is(err, ops.ErrClosed) {
		t.Errorf("createBuffer after Close: %v", err)
	}
	a.x.release() // no-op after Close
}

// warnWGSL compiles with a Tint warning (unreachable code), which Dawn reports through the
// device log.
const warnWGSL = `
@group(0) @binding(0) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(1)
fn main() {
    return;
    y[0] = 1.0;
}
`

// TestRuntimeLogger: Dawn's device log goes to deviceOptions.Logger, and without one nowhere: not
// to stderr (Dawn's default).
func TestRuntimeLogger(t *testing.T) {
	var logged strings.Builder
	var mu sync.Mutex
	d := openRuntimeDevice(t, deviceOptions{Logger: slog.New(slog.NewTextHandler(&lockedWriter{w: &logged, mu: &mu}, nil))})
	if _, err := d.pipeline("test/warn", warnWGSL, "main"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := logged.String()
	mu.Unlock()
	t.Logf("log: %s", got)
	if !strings.Contains(got, "unreachable") || !strings.Contains(got, "level=WARN") {
		t.Errorf("the shader's warning did not reach the logger: %q", got)
	}

	stderr := captureStderr(t, func() {
		d := openRuntimeDevice(t, deviceOptions{})
		if _, err := d.pipeline("test/warn", warnWGSL, "main"); err != nil {
			t.Fatal(err)
		}
	})
	if strings.Contains(stderr, "unreachable") {
		t.Errorf("without a logger Dawn's message went to stderr: %q", stderr)
	}

	// No Vulkan driver: Dawn's instance reports the failed vkCreateInstance to the logger (only
	// the Vulkan loader's own "Found no drivers!", which Dawn's instance-creation callback
	// prints itself, still reaches stderr).
	t.Setenv("VK_ICD_FILENAMES", "/nonexistent/icd.json")
	t.Setenv("VK_DRIVER_FILES", "/nonexistent/icd.json")
	logged.Reset()
	if _, err := openDevice(deviceOptions{Logger: slog.New(slog.NewTextHandler(&lockedWriter{w: &logged, mu: &mu}, nil))}); err == nil {
		t.Skip("a Vulkan adapter without a driver file: nothing to report")
	}
	mu.Lock()
	got = logged.String()
	mu.Unlock()
	t.Logf("log without a driver: %s", got)
	if !strings.Contains(got, "VK_ERROR_INCOMPATIBLE_DRIVER") {
		t.Errorf("the instance's warning did not reach the logger: %q", got)
	}
	stderr = captureStderr(t, func() {
		if _, err := openDevice(deviceOptions{}); err == nil {
			t.Fatal("opened a device without a driver")
		}
	})
	t.Logf("stderr without a logger and a driver: %q", stderr)
	if strings.Contains(stderr, "VK_ERROR_INCOMPATIBLE_DRIVER") {
		t.Errorf("without a logger the instance's warning went to stderr: %q", stderr)
	}
}

// captureStderr runs f with file descriptor 2 redirected to a file and returns what was written.
func captureStderr(t *testing.T, f func()) string {
	t.Helper()
	tmp, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer tmp.Close()
	saved, err := syscall.Dup(2)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Dup2(int(tmp.Fd()), 2); err != nil {
		t.Fatal(err)
	}
	func() {
		defer syscall.Dup2(saved, 2)
		f()
	}()
	syscall.Close(saved)
	b, err := os.ReadFile(tmp.Name())
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
