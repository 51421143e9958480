//go:build cgo

package dawnrt

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/testkit"
)

// openDevice opens a device or skips; with FUSEDNORM_REQUIRE_DAWN=1 it fails instead, so a
// run cannot pass by skipping. The device is closed when the test ends.
func openDevice(t testing.TB, o Options) *Device {
	t.Helper()
	d, err := Open(o)
	if err != nil {
		testkit.SkipWithoutDawn(t, err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return d
}

// childEnv names the test a child process of the test binary runs alone (runInChild).
const childEnv = "FUSEDNORM_DAWNRT_CHILD"

// runInChild runs t alone in a child process of the test binary and reports its outcome as
// t's; in that child it returns false, and the caller runs the test's body.
func runInChild(t *testing.T) bool {
	t.Helper()
	if os.Getenv(childEnv) == t.Name() {
		return false
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+regexp.QuoteMeta(t.Name())+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	t.Logf("in a child process:\n%s", out)
	switch {
	case err != nil:
		t.Fatalf("the child process: %v", err)
	case bytes.Contains(out, []byte("--- SKIP: "+t.Name())):
		t.Skip("skipped in the child process")
	case !bytes.Contains(out, []byte("--- PASS: "+t.Name())):
		t.Fatal("the child process did not run the test")
	}
	return true
}

// affineWGSL computes y = 2x + 1 over a 1-D or 2-D grid of 64-wide workgroups.
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

func f32s(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// affine holds a ready x/y pair of device buffers for the y = 2x + 1 kernel.
type affine struct {
	d    *Device
	p    *Pipeline
	x, y *Buffer
	in   []float32
}

func newPipeline(t testing.TB, d *Device, label, wgsl string) *Pipeline {
	t.Helper()
	p, err := d.NewPipeline(label, wgsl)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newBuffer(t testing.TB, d *Device, label string, size uint64, usage Usage) *Buffer {
	t.Helper()
	b, err := d.NewBuffer(label, size, usage)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newAffine(t testing.TB, d *Device, n int) *affine {
	t.Helper()
	in := make([]float32, n)
	for i := range in {
		in[i] = float32(i)*0.75 - 123.5
	}
	a := &affine{d: d, p: newPipeline(t, d, "test/affine", affineWGSL), in: in,
		x: newBuffer(t, d, "x", uint64(4*n), UsageStorage|UsageCopyDst|UsageCopySrc),
		y: newBuffer(t, d, "y", uint64(4*n), UsageStorage|UsageCopySrc|UsageCopyDst)}
	if err := d.Write("x", a.x, 0, f32Bytes(in)); err != nil {
		t.Fatal(err)
	}
	return a
}

// groups is a 1-D grid that covers the input.
func (a *affine) groups() [3]uint32 { return [3]uint32{uint32(len(a.in)+63) / 64, 1, 1} }

// call sets s to the kernel over a's buffers, reading nothing back.
func (a *affine) call(s *Call, groups [3]uint32) {
	s.Reset("affine")
	s.Kernel(a.p, groups)
	s.Bind(0, "x", a.x, a.x.Size(), false)
	s.Bind(1, "y", a.y, a.y.Size(), true)
}

// run dispatches the kernel and reads y back.
func (a *affine) run(ctx context.Context, groups [3]uint32) ([]byte, error) {
	var s Call
	a.call(&s, groups)
	out := make([]byte, 4*len(a.in))
	s.Read(a.y, AtBuffer, 0, out)
	return out, a.d.Run(ctx, &s)
}

func (a *affine) check(t testing.TB, out []byte) {
	t.Helper()
	if err := checkAffine(a.in, out); err != nil {
		t.Fatal(err)
	}
}

// checkAffine reports the first element of out that is not 2·in + 1.
func checkAffine(in []float32, out []byte) error {
	for i, v := range in {
		got := math.Float32frombits(binary.LittleEndian.Uint32(out[4*i:]))
		if want := v*2 + 1; got != want {
			return fmt.Errorf("y[%d] = %v, want %v", i, got, want)
		}
	}
	return nil
}

// liveCount is LiveBuffers' count alone.
func liveCount(d *Device) int {
	n, _ := d.LiveBuffers()
	return n
}

// hostAffine sets s to the affine kernel over host tensors (through the call's scratch) and
// returns the bytes y is read back into.
func hostAffine(s *Call, p *Pipeline, in []float32) []byte {
	n := uint64(4 * len(in))
	out := make([]byte, n)
	s.Reset("affine-host")
	s.Kernel(p, [3]uint32{uint32(len(in)+63) / 64, 1, 1})
	s.Input(0, "x", nil, f32Bytes(in), n)
	s.Output(1, "y", nil, out, n)
	return out
}

// executorBuffers counts the buffers the executor holds itself: the cached calls' uniforms
// and scratch, the zero buffer, the id-check slots and the arena.
func executorBuffers(d *Device) int {
	d.lock(context.Background())
	defer d.unlock()
	n := 0
	for _, e := range d.x.cache {
		for _, s := range e.scratch {
			if s != nil {
				n++
			}
		}
		if e.params != nil {
			n++
		}
	}
	for _, b := range []*Buffer{d.x.zero, d.x.idBuf, d.x.arena} {
		if b != nil {
			n++
		}
	}
	return n
}

func TestOpenAndInfo(t *testing.T) {
	d := openDevice(t, Options{})
	info := d.Info()
	t.Logf("adapter: %s", info)
	t.Logf("limits: %+v", d.Limits())
	t.Logf("features: %v", d.Features())
	if info.Backend != "Vulkan" {
		t.Errorf("backend %q, want Vulkan", info.Backend)
	}
	if strings.Contains(info.Device, "Null") || info.Backend == "Null" {
		t.Errorf("Null backend accepted: %s", info)
	}
	if s := info.String(); !strings.Contains(s, "Vulkan") || !strings.Contains(s, info.AdapterType) {
		t.Errorf("String() = %q", s)
	}
	l := d.Limits()
	if l.MaxStorageBufferBindingSize < 128<<20 || l.MaxBufferSize < 256<<20 || l.MaxComputeInvocationsPerWorkgroup < 256 ||
		l.MaxComputeWorkgroupsPerDimension < 65535 || l.MaxStorageBuffersPerShaderStage < 8 || l.MaxComputeWorkgroupSizeX < 256 ||
		l.MaxComputeWorkgroupStorageSize < 16384 || l.MinStorageBufferOffsetAlignment == 0 || l.MaxUniformBufferBindingSize < 65536 {
		t.Errorf("limits not raised to at least the WebGPU defaults: %+v", l)
	}
	if d.HasFeature("NoSuchFeature") {
		t.Error("HasFeature of an unknown name")
	}
	feats := d.Features()
	if !slices.IsSorted(feats) {
		t.Errorf("Features not sorted: %v", feats)
	}
	for _, f := range feats {
		if !d.HasFeature(f) {
			t.Errorf("Features lists %s, HasFeature denies it", f)
		}
		// CoreFeaturesAndLimits comes with every core (not compatibility mode) device.
		if !slices.Contains([]string{"TimestampQuery", "ShaderF16", "Subgroups", "CoreFeaturesAndLimits"}, f) {
			t.Errorf("feature %s enabled, though never requested", f)
		}
	}
	if lib := d.Library(); !strings.HasPrefix(lib, "/") {
		t.Errorf("Library() = %q, want an absolute path", lib)
	}
	if d.Lost() || d.LossMessage() != "" {
		t.Errorf("a fresh device is lost: %q", d.LossMessage())
	}
	if n, bytes := d.LiveBuffers(); n != 0 || bytes != 0 {
		t.Errorf("a fresh device holds %d buffers (%d bytes)", n, bytes)
	}
}

// generatedSum is the dawn.json checksum on the first line of a file dawnhdr wrote.
func generatedSum(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	const pre = "// Code generated by internal/cmd/dawnhdr from dawn.json (sha256 "
	if !strings.HasPrefix(line, pre) {
		t.Fatalf("%s: not written by dawnhdr: %q", path, line)
	}
	sum, _, ok := strings.Cut(strings.TrimPrefix(line, pre), ")")
	if !ok {
		t.Fatalf("%s: no checksum: %q", path, line)
	}
	return sum
}

// TestGeneratedTablesAgree: the Go tables (zdawn_gen.go) and the C header (cgo/webgpu_gen.h)
// come from one dawnhdr run over the dawn.json committed beside the generator, and agree with
// it and with each other. scripts/check-generated.sh checks that they are what dawnhdr writes
// now.
func TestGeneratedTablesAgree(t *testing.T) {
	if err := checkGenerated(); err != nil {
		t.Error(err)
	}
	raw, err := os.ReadFile("../cmd/dawnhdr/dawn.json")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(raw)
	want := hex.EncodeToString(sum[:])
	for _, f := range []string{"zdawn_gen.go", "../../cgo/webgpu_gen.h"} {
		if got := generatedSum(t, f); got != want {
			t.Errorf("%s was generated from a dawn.json of sha256 %s, not the committed one (%s): run go generate ./internal/dawnrt", f, got, want)
		}
	}

	type value struct {
		Value uint64
		Name  string
		Tags  []string
	}
	// dawn.json holds entries of other shapes too: decode only these.
	var loose map[string]json.RawMessage
	if err := json.Unmarshal(raw, &loose); err != nil {
		t.Fatal(err)
	}
	api := map[string]struct{ Values []value }{}
	for _, k := range []string{"feature name", "backend type", "adapter type", "buffer usage"} {
		var v struct{ Values []value }
		if err := json.Unmarshal(loose[k], &v); err != nil {
			t.Fatalf("dawn.json %q: %v", k, err)
		}
		api[k] = v
	}
	camel := func(s string) string {
		var b strings.Builder
		for _, w := range strings.Fields(s) {
			b.WriteString(strings.ToUpper(w[:1]) + w[1:])
		}
		return b.String()
	}
	// Untagged values keep their number (tagged ones are moved into blocks of their own).
	for k, table := range map[string]map[uint32]string{"feature name": featureNames, "backend type": backendTypeNames, "adapter type": adapterTypeNames} {
		n := 0
		for _, v := range api[k].Values {
			if len(v.Tags) > 0 {
				continue
			}
			n++
			if got := table[uint32(v.Value)]; got != camel(v.Name) {
				t.Errorf("%s %d: the Go table says %q, dawn.json %q", k, v.Value, got, v.Name)
			}
		}
		if n == 0 {
			t.Errorf("dawn.json has no %q values", k)
		}
	}
	usages := map[string]Usage{"map read": UsageMapRead, "map write": UsageMapWrite, "copy src": UsageCopySrc, "copy dst": UsageCopyDst,
		"index": UsageIndex, "vertex": UsageVertex, "uniform": UsageUniform, "storage": UsageStorage, "indirect": UsageIndirect,
		"query resolve": UsageQueryResolve}
	seen := 0
	for _, v := range api["buffer usage"].Values {
		if u, ok := usages[v.Name]; ok {
			seen++
			if uint64(u) != v.Value {
				t.Errorf("buffer usage %q: %#x in Go, %#x in dawn.json", v.Name, uint64(u), v.Value)
			}
		}
	}
	if seen != len(usages) {
		t.Errorf("dawn.json has %d of the %d buffer usages the Go side declares", seen, len(usages))
	}
	if UsageStorage != 0x80 || UsageMapRead != 1 || UsageCopySrc != 4 || UsageCopyDst != 8 || UsageUniform != 0x40 {
		t.Error("buffer usage values")
	}
}

func TestDispatch(t *testing.T) {
	d := openDevice(t, Options{})
	ctx := context.Background()
	a := newAffine(t, d, 1000)
	out, err := a.run(ctx, [3]uint32{16, 1, 1}) // 1024 invocations
	if err != nil {
		t.Fatal(err)
	}
	a.check(t, out)

	t.Run("2-D grid", func(t *testing.T) {
		b := newAffine(t, d, 1000)
		out, err := b.run(ctx, [3]uint32{4, 4, 1}) // 4·64 wide, 4 rows: 1024 invocations
		if err != nil {
			t.Fatal(err)
		}
		b.check(t, out)
	})

	t.Run("host input and output", func(t *testing.T) {
		for _, in := range [][]float32{{1, -2, 3.5, 1e6, -0.25}, {7, 8, 9, 10, 11}, {0.5}} {
			var s Call
			out := hostAffine(&s, a.p, in)
			if err := d.Run(ctx, &s); err != nil {
				t.Fatal(err)
			}
			if err := checkAffine(in, out); err != nil {
				t.Fatal(err) // the second run of the same shape writes the cached scratch anew
			}
		}
	})

	t.Run("odd read-back length and offset", func(t *testing.T) {
		guard := make([]byte, 7+16)
		dst := guard[:7]
		var s Call
		a.call(&s, a.groups())
		s.Read(a.y, AtBuffer, 40, dst)
		if err := d.Run(ctx, &s); err != nil {
			t.Fatal(err)
		}
		want := f32Bytes([]float32{a.in[10]*2 + 1, a.in[11]*2 + 1})[:7]
		if string(dst) != string(want) {
			t.Fatalf("got %x, want %x", dst, want)
		}
		if slices.ContainsFunc(guard[7:], func(b byte) bool { return b != 0 }) {
			t.Fatal("the read-back wrote past its destination")
		}
	})

	t.Run("odd write length pads", func(t *testing.T) {
		b := newBuffer(t, d, "odd", 5, UsageStorage|UsageCopyDst|UsageCopySrc)
		defer b.Release()
		if b.Size() != 8 {
			t.Fatalf("size %d, want 8", b.Size())
		}
		if err := d.Write("odd", b, 0, []byte{9, 9, 9, 9, 9, 9, 9, 9}); err != nil {
			t.Fatal(err)
		}
		if err := d.Write("odd", b, 0, []byte{1, 2, 3, 4, 5}); err != nil {
			t.Fatal(err)
		}
		out := make([]byte, 8)
		if err := d.Read(ctx, "odd", b, 0, out); err != nil {
			t.Fatal(err)
		}
		if string(out) != string([]byte{1, 2, 3, 4, 5, 0, 0, 0}) {
			t.Fatalf("got %v", out)
		}
		if b := newBuffer(t, d, "empty", 0, UsageStorage); b.Size() != 4 {
			t.Fatalf("an empty buffer has %d bytes, want 4", b.Size())
		}
	})

	t.Run("no read-back", func(t *testing.T) {
		var s Call
		a.call(&s, a.groups())
		s.Wait()
		if err := d.Run(ctx, &s); err != nil {
			t.Fatal(err)
		}
		if err := d.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		out := make([]byte, 4*len(a.in))
		if err := d.Read(ctx, "y", a.y, 0, out); err != nil {
			t.Fatal(err)
		}
		a.check(t, out)
	})

	t.Run("copies", func(t *testing.T) {
		// Pre: zero y's first 16 bytes, then the kernel; post: copy y[4:8] into z at 8.
		z := newBuffer(t, d, "z", 32, UsageStorage|UsageCopyDst|UsageCopySrc)
		defer z.Release()
		if err := d.Write("z", z, 0, bytesOfLen(32, 0xAB)); err != nil {
			t.Fatal(err)
		}
		var s Call
		a.call(&s, [3]uint32{0, 0, 0}) // no invocations: y keeps what the copies leave
		s.Pre(Copy{SrcZero: true, SrcSlot: Nowhere, Dst: a.y, DstSlot: AtBuffer, DstName: "y", Size: 16})
		s.Post(Copy{Src: a.y, SrcSlot: AtBuffer, SrcOff: 16, SrcName: "y", Dst: z, DstSlot: AtBuffer, DstOff: 8, DstName: "z", Size: 16})
		got := make([]byte, 32)
		s.Read(z, AtBuffer, 0, got)
		yHead := make([]byte, 16)
		s.Read(a.y, AtBuffer, 0, yHead)
		if err := s.CheckAliases(); err == nil {
			t.Fatal("CheckAliases passed a copy into y, which the kernel writes")
		}
		if err := d.Run(ctx, &s); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(yHead, make([]byte, 16)) {
			t.Errorf("the zeroing pre copy: y starts %x", yHead)
		}
		want := append(append(bytesOfLen(8, 0xAB), f32Bytes([]float32{a.in[4]*2 + 1, a.in[5]*2 + 1, a.in[6]*2 + 1, a.in[7]*2 + 1})...), bytesOfLen(8, 0xAB)...)
		if !slices.Equal(got, want) {
			t.Errorf("the post copy: z = %x, want %x", got, want)
		}
	})
}

func bytesOfLen(n int, v byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = v
	}
	return b
}

func TestCheckAliases(t *testing.T) {
	d := openDevice(t, Options{})
	a := newAffine(t, d, 64)
	var s Call
	a.call(&s, a.groups())
	if err := s.CheckAliases(); err != nil {
		t.Fatalf("distinct buffers: %v", err)
	}
	s.Reset("alias")
	s.Kernel(a.p, a.groups())
	s.Bind(0, "x1", a.x, a.x.Size(), false)
	s.Bind(1, "y", a.x, a.x.Size(), true)
	if err := s.CheckAliases(); !errors.Is(err, ops.ErrInvalidArgument) || !strings.Contains(err.Error(), "alias: y and x1") {
		t.Errorf("written binding aliasing another: %v", err)
	}
	s.Reset("two-outputs")
	s.Post(Copy{Src: a.x, SrcSlot: AtBuffer, Dst: a.y, DstSlot: AtBuffer, DstName: "mask_index", Size: 4})
	s.Post(Copy{Src: a.x, SrcSlot: AtBuffer, Dst: a.y, DstSlot: AtBuffer, DstName: "out", Size: 4})
	if err := s.CheckAliases(); !errors.Is(err, ops.ErrInvalidArgument) || !strings.Contains(err.Error(), "mask_index and out") {
		t.Errorf("two copies into one buffer: %v", err)
	}
}

func TestErrors(t *testing.T) {
	d := openDevice(t, Options{})
	ctx := context.Background()

	_, err := d.NewPipeline("test/bad", "fn main( {")
	if !errors.Is(err, ops.ErrDevice) || !strings.Contains(err.Error(), "expected ')'") ||
		!strings.HasPrefix(err.Error(), "dawn: NewPipeline: ") || !strings.Contains(err.Error(), "test/bad") {
		t.Errorf("bad WGSL: %v", err)
	}
	if _, err = d.NewPipeline("test/noentry", strings.Replace(affineWGSL, "fn main(", "fn other(", 1)); !errors.Is(err, ops.ErrDevice) {
		t.Errorf("no entry point main: %v", err)
	}

	a := newAffine(t, d, 100)
	// A binding the layout does not have fails making the bind group: the call names itself.
	var s Call
	a.call(&s, [3]uint32{2, 1, 1})
	s.Bind(7, "extra", a.y, a.y.Size(), false)
	err = d.Run(ctx, &s)
	if !errors.Is(err, ops.ErrDevice) || !strings.HasPrefix(err.Error(), "dawn: affine: ") {
		t.Errorf("extra binding: %v", err)
	}
	// The device stays usable after a scoped error.
	out, err := a.run(ctx, [3]uint32{2, 1, 1})
	if err != nil {
		t.Fatal(err)
	}
	a.check(t, out)

	if _, err := d.NewBuffer("huge", d.Limits().MaxBufferSize+4, UsageStorage); !errors.Is(err, ops.ErrNotSupported) ||
		!strings.Contains(err.Error(), "huge") || !strings.Contains(err.Error(), "maxBufferSize") {
		t.Errorf("buffer over the limit: %v", err)
	}
	for _, tc := range []struct {
		off  uint64
		data int
	}{{2, 1}, {0, 401}, {400, 4}, {1 << 40, 4}} {
		if err := d.Write("x", a.x, tc.off, make([]byte, tc.data)); !errors.Is(err, ops.ErrInvalidArgument) || !strings.Contains(err.Error(), "dawn: x: ") {
			t.Errorf("write of %d bytes at %d into 400: %v", tc.data, tc.off, err)
		}
	}
	// A grid over the device limit and a read-back past the end are Dawn's validation errors,
	// reported by the call.
	_, err = a.run(ctx, [3]uint32{d.Limits().MaxComputeWorkgroupsPerDimension + 1, 1, 1})
	if !errors.Is(err, ops.ErrDevice) || !strings.Contains(err.Error(), "dawn: affine (call ") {
		t.Errorf("grid over the limit: %v", err)
	}
	t.Logf("grid over the limit: %v", err)
	a.call(&s, a.groups())
	s.Read(a.y, AtBuffer, 400, make([]byte, 4))
	if err := d.Run(ctx, &s); !errors.Is(err, ops.ErrDevice) || !strings.Contains(err.Error(), "dawn: affine (call ") {
		t.Errorf("read-back past the end: %v", err)
	}
	released := newBuffer(t, d, "released", 16, UsageStorage|UsageCopySrc)
	released.Release()
	released.Release()
	if !released.Released() || a.x.Released() {
		t.Error("Released")
	}
	s.Reset("affine")
	s.Kernel(a.p, [3]uint32{1, 1, 1})
	s.Bind(0, "x", released, 16, false)
	s.Bind(1, "y", a.y, a.y.Size(), true)
	if err := d.Run(ctx, &s); !errors.Is(err, ops.ErrInvalidArgument) || !strings.Contains(err.Error(), "x: device tensor closed") {
		t.Errorf("released buffer bound: %v", err)
	}
	if err := d.Read(ctx, "read", released, 0, make([]byte, 4)); !errors.Is(err, ops.ErrInvalidArgument) {
		t.Errorf("read of a released buffer: %v", err)
	}
	if err := d.Write("write", released, 0, make([]byte, 4)); !errors.Is(err, ops.ErrInvalidArgument) {
		t.Errorf("write into a released buffer: %v", err)
	}
	s.Reset("copy")
	s.Post(Copy{Src: released, SrcSlot: AtBuffer, SrcName: "src", Dst: a.y, DstSlot: AtBuffer, DstName: "dst", Size: 4})
	if err := d.Run(ctx, &s); !errors.Is(err, ops.ErrInvalidArgument) || !strings.Contains(err.Error(), "src: device tensor closed") {
		t.Errorf("copy from a released buffer: %v", err)
	}
	// None of this broke the device.
	out, err = a.run(ctx, a.groups())
	if err != nil {
		t.Fatal(err)
	}
	a.check(t, out)
	if err := d.Sync(ctx); err != nil {
		t.Fatalf("Sync after the errors, all reported: %v", err)
	}
}

// TestConcurrent runs calls from many goroutines on one device: waiting calls on buffers of
// their own, calls that do not wait followed by Sync, writes, host-tensor calls and buffer
// churn. Meant for -race.
func TestConcurrent(t *testing.T) {
	d := openDevice(t, Options{})
	const workers, rounds = 8, 6
	ctx := context.Background()
	affines := make([]*affine, workers)
	for w := range affines {
		affines[w] = newAffine(t, d, 500+w*37)
	}
	before := liveCount(d) - executorBuffers(d)
	var wg sync.WaitGroup
	errs := make(chan error, 4*workers)
	for w := range workers {
		a := affines[w]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				var err error
				switch (w + r) % 4 {
				case 0: // a waiting call
					var out []byte
					if out, err = a.run(ctx, a.groups()); err == nil {
						err = checkAffine(a.in, out)
					}
				case 1: // a call that does not wait, then Sync and a read
					var s Call
					a.call(&s, a.groups())
					if err = d.Run(ctx, &s); err == nil {
						err = d.Sync(ctx)
					}
					out := make([]byte, 4*len(a.in))
					if err == nil {
						err = d.Read(ctx, "y", a.y, 0, out)
					}
					if err == nil {
						err = checkAffine(a.in, out)
					}
				case 2: // host tensors
					in := a.in[:w*5+r+1]
					var s Call
					out := hostAffine(&s, a.p, in)
					if err = d.Run(ctx, &s); err == nil {
						err = checkAffine(in, out)
					}
				default: // a buffer of its own, written, read and released
					b, e := d.NewBuffer("churn", uint64(64+w*4), UsageStorage|UsageCopyDst|UsageCopySrc)
					if err = e; err != nil {
						break
					}
					data := f32Bytes([]float32{float32(w), float32(r)})
					got := make([]byte, len(data))
					if err = d.Write("churn", b, 8, data); err == nil {
						err = d.Read(ctx, "churn", b, 8, got)
					}
					if err == nil && string(got) != string(data) {
						err = fmt.Errorf("read back %x, wrote %x", got, data)
					}
					b.Release()
				}
				if err != nil {
					errs <- fmt.Errorf("worker %d round %d: %w", w, r, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// The host-tensor calls keep their scratch cached; nothing else stays.
	if after, x := liveCount(d), executorBuffers(d); after != before+x {
		t.Errorf("%d buffers alive after, %d before and %d the executor's", after, before, x)
	}
}

// spinWGSL keeps the GPU busy long enough for a deadline or cancel to land mid-wait.
const spinWGSL = `
@group(0) @binding(0) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    var acc = f32(id.x);
    for (var i = 0u; i < 20000u; i++) { acc = acc * 0.999 + 1.0; }
    y[id.x] = acc;
}
`

// spinner runs the spin kernel over n elements and reads them back.
func spinner(t *testing.T, d *Device) func(ctx context.Context) error {
	p := newPipeline(t, d, "test/spin", spinWGSL)
	const n = 64 * 256
	y := newBuffer(t, d, "spin", 4*n, UsageStorage|UsageCopySrc)
	return func(ctx context.Context) error {
		var s Call
		s.Reset("spin")
		s.Kernel(p, [3]uint32{n / 64, 1, 1})
		s.Bind(0, "y", y, y.Size(), true)
		s.Read(y, AtBuffer, 0, make([]byte, 4*n))
		return d.Run(ctx, &s)
	}
}

func TestContext(t *testing.T) {
	d := openDevice(t, Options{})
	run := spinner(t, d)

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := run(cancelled); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "dawn: spin: ") {
		t.Errorf("cancelled before: %v", err)
	}
	if err := d.Sync(cancelled); !errors.Is(err, context.Canceled) {
		t.Errorf("Sync, cancelled before: %v", err)
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
	// Abandoned waits are reaped once the GPU has finished them (at the next call recorded);
	// the device keeps working.
	if err := run(context.Background()); err != nil {
		t.Fatalf("after abandoned waits: %v", err)
	}
	if err := d.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	d.lock(context.Background())
	abandoned := len(d.x.abandoned)
	d.unlock()
	if abandoned != 0 {
		t.Errorf("%d abandoned waits not reaped once the GPU finished them", abandoned)
	}
}

// TestTimed times a kernel with ops.KernelClock: the kernel runs Repeat times in one timed
// pass, its results are those of one run, and PerCall is set where the device has timestamp
// queries (left zero elsewhere).
func TestTimed(t *testing.T) {
	d := openDevice(t, Options{})
	a := newAffine(t, d, 1000)
	for _, repeat := range []int{0, 1, 5, 5000} {
		clock := ops.KernelClock{Repeat: repeat}
		out, err := a.run(ops.WithKernelClock(context.Background(), &clock), a.groups())
		if err != nil {
			t.Fatal(err)
		}
		a.check(t, out)
		t.Logf("repeat %d: %v per call", repeat, clock.PerCall)
		if d.HasFeature("TimestampQuery") != (clock.PerCall > 0) {
			t.Errorf("TimestampQuery %v, PerCall %v", d.HasFeature("TimestampQuery"), clock.PerCall)
		}
	}
	// A timed call waits even with nothing to read back; a call without a kernel is not timed.
	clock := ops.KernelClock{Repeat: 1}
	ctx := ops.WithKernelClock(context.Background(), &clock)
	var s Call
	a.call(&s, a.groups())
	if err := d.Run(ctx, &s); err != nil {
		t.Fatal(err)
	}
	if d.HasFeature("TimestampQuery") && clock.PerCall <= 0 {
		t.Errorf("a timed call without read-backs: PerCall %v", clock.PerCall)
	}
	clock.PerCall = 0
	if err := d.Sync(ctx); err != nil || clock.PerCall != 0 {
		t.Errorf("Sync under a kernel clock: %v, PerCall %v", err, clock.PerCall)
	}
	d.lock(context.Background())
	timings := len(d.timings)
	d.unlock()
	if d.HasFeature("TimestampQuery") && timings != 1 {
		t.Errorf("%d timestamp sets pooled after one timed call at a time, want 1", timings)
	}
}

func TestClose(t *testing.T) {
	d, err := Open(Options{})
	if err != nil {
		testkit.SkipWithoutDawn(t, err)
	}
	a := newAffine(t, d, 64)
	// A call that does not wait is still recorded when Close comes: Close submits it.
	var s Call
	a.call(&s, a.groups())
	if err := d.Run(context.Background(), &s); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := a.run(context.Background(), a.groups()); !errors.Is(err, ops.ErrClosed) {
		t.Errorf("Run after Close: %v", err)
	}
	if _, err := d.NewBuffer("late", 4, UsageStorage); !errors.Is(err, ops.ErrClosed) {
		t.Errorf("NewBuffer after Close: %v", err)
	}
	if _, err := d.NewPipeline("late", affineWGSL); !errors.Is(err, ops.ErrClosed) {
		t.Errorf("NewPipeline after Close: %v", err)
	}
	if err := d.Write("x", a.x, 0, make([]byte, 4)); !errors.Is(err, ops.ErrClosed) {
		t.Errorf("Write after Close: %v", err)
	}
	if err := d.Read(context.Background(), "y", a.y, 0, make([]byte, 4)); !errors.Is(err, ops.ErrClosed) {
		t.Errorf("Read after Close: %v", err)
	}
	if err := d.Sync(context.Background()); !errors.Is(err, ops.ErrClosed) {
		t.Errorf("Sync after Close: %v", err)
	}
	if n, bytes := d.LiveBuffers(); n != 0 || bytes != 0 {
		t.Errorf("LiveBuffers after Close: %d, %d", n, bytes)
	}
	if !a.x.Released() || d.Lost() || d.LossMessage() != "" {
		t.Error("after Close: buffers not released, or the device lost")
	}
	a.x.Release() // a no-op after Close
}

// TestCloseWhileWaiting closes the device while another goroutine waits for a long kernel:
// the wait ends, with its results or ErrClosed, and nothing crashes. Meant for -race.
func TestCloseWhileWaiting(t *testing.T) {
	d, err := Open(Options{})
	if err != nil {
		testkit.SkipWithoutDawn(t, err)
	}
	run := spinner(t, d)
	done := make(chan error, 1)
	go func() { done <- run(context.Background()) }()
	time.Sleep(5 * time.Millisecond)
	if err := d.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := <-done; err != nil && !errors.Is(err, ops.ErrClosed) {
		t.Errorf("the call in flight at Close: %v", err)
	}
}
