//go:build cgo

package dawnrt

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// accumWGSL adds 2x + 1 to y: the result of several calls on one y shows which inputs each
// saw, and in which order nothing was lost.
const accumWGSL = `
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) ng: vec3<u32>) {
    let i = id.y * ng.x * 64u + id.x;
    if (i < arrayLength(&x)) { y[i] = y[i] + x[i] * 2.0 + 1.0; }
}
`

// holdBatches keeps the idle flush from submitting the open batch while the test runs, so
// what is recorded stays recorded until a wait or a bound; the test checks the batching
// itself, which the timer would make depend on the machine's speed.
func holdBatches(t *testing.T, d *Device) {
	t.Helper()
	// timerArmed is false exactly when no idle flush is pending (record arms the timer and
	// sets it; the flush clears it): wait for a pending one to run, then keep it set.
	deadline := time.Now().Add(10 * time.Second)
	for {
		d.lock(context.Background())
		if !d.x.timerArmed {
			break
		}
		d.unlock()
		if time.Now().After(deadline) {
			t.Fatal("the idle flush did not run within 10 s")
		}
		time.Sleep(time.Millisecond)
	}
	defer d.unlock()
	if d.x.batch != 0 {
		t.Fatal("holdBatches with a batch open and no idle flush pending")
	}
	d.x.timerArmed = true
	d.x.inflight = true
	t.Cleanup(func() {
		d.lock(context.Background())
		d.x.timerArmed = false
		d.unlock()
	})
}

// holdFirst has the next call gather in the open batch rather than be submitted at once,
// as if a submit were in flight.
func holdFirst(d *Device) {
	d.lock(context.Background())
	d.x.inflight = true
	d.unlock()
}

// batchState is the open batch's call count and arena bytes, and the submits so far.
func batchState(d *Device) (calls, arena, submits uint64) {
	d.lock(context.Background())
	defer d.unlock()
	return d.x.batch, d.x.arenaUsed, d.x.head
}

// TestBatchedHostInputs records calls that do not wait, each adding its own host input into
// one y: the host inputs of calls recorded after others are staged in the arena and copied
// in order (a queue write would land before the whole batch), so y is the sum of them all;
// the batch is submitted at batchCalls calls and when the arena is full.
func TestBatchedHostInputs(t *testing.T) {
	d := openDevice(t, Options{})
	ctx := context.Background()
	p := newPipeline(t, d, "test/accum", accumWGSL)
	holdBatches(t, d)
	for _, tc := range []struct {
		name  string
		n     int // elements
		calls int
	}{
		{"many small", 100, batchCalls*2 + 5},
		// 1.5 MiB each: a batch's first call writes its input directly, the arena takes two more.
		{"over the arena", (3 << 20) / 8, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			y := newBuffer(t, d, "y", uint64(4*tc.n), UsageStorage|UsageCopySrc|UsageCopyDst)
			defer y.Release()
			want := make([]float32, tc.n)
			_, _, submits0 := batchState(d)
			holdFirst(d) // the Read of the last case waited for everything
			groups := [3]uint32{uint32(tc.n+63) / 64, 1, 1}
			for k := range tc.calls {
				in := make([]float32, tc.n)
				for i := range in {
					in[i] = float32((i*7+k*13)%101 - 50) // small integers: every sum is exact
					want[i] += in[i]*2 + 1
				}
				var s Call
				s.Reset(fmt.Sprintf("accum %d", k))
				s.Kernel(p, groups)
				s.Input(0, "x", nil, f32Bytes(in), uint64(4*tc.n))
				s.Bind(1, "y", y, y.Size(), true)
				if err := d.Run(ctx, &s); err != nil {
					t.Fatal(err)
				}
				calls, arena, _ := batchState(d)
				switch {
				case tc.n == 100 && calls != uint64((k+1)%batchCalls):
					t.Fatalf("after call %d: %d calls in the open batch, want %d", k, calls, (k+1)%batchCalls)
				case tc.n == 100 && calls > 0 && arena != uint64(k%batchCalls)*4*uint64(tc.n):
					t.Fatalf("after call %d: %d arena bytes, want the inputs of the calls after the batch's first", k, arena)
				case tc.n > 100 && calls != uint64(k%3+1):
					t.Fatalf("after call %d: %d calls in the open batch, want %d", k, calls, k%3+1)
				}
			}
			got := make([]byte, 4*tc.n)
			if err := d.Read(ctx, "y", y, 0, got); err != nil {
				t.Fatal(err)
			}
			for i, v := range f32s(got) {
				if v != want[i] {
					t.Fatalf("y[%d] = %v, want %v: an input was lost or reordered", i, v, want[i])
				}
			}
			_, _, submits := batchState(d)
			t.Logf("%d calls in %d submits", tc.calls, submits-submits0)
		})
	}
}

// TestWriteOrder: a Device.Write between calls takes effect after the calls recorded before
// it and before those recorded after it, whether it is staged in the arena (small) or the
// batch is submitted first (larger than the arena).
func TestWriteOrder(t *testing.T) {
	d := openDevice(t, Options{})
	ctx := context.Background()
	holdBatches(t, d)
	for _, n := range []int{256, arenaBytes/4 + 1000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			a := newAffine(t, d, n)
			defer a.x.Release()
			defer a.y.Release()
			y2 := newBuffer(t, d, "y2", uint64(4*n), UsageStorage|UsageCopySrc)
			defer y2.Release()
			var s Call
			a.call(&s, a.groups())
			if err := d.Run(ctx, &s); err != nil {
				t.Fatal(err)
			}
			old := a.in
			a.in = make([]float32, n)
			for i := range a.in {
				a.in[i] = float32(i%1000) - 0.5
			}
			if err := d.Write("x", a.x, 0, f32Bytes(a.in)); err != nil {
				t.Fatal(err)
			}
			calls, arena, _ := batchState(d)
			if staged := 4*n <= arenaBytes; staged != (calls == 1 && arena == uint64(4*n)) {
				t.Errorf("a %d-byte write after a recorded call: %d calls open, %d arena bytes", 4*n, calls, arena)
			}
			s.Reset("affine2")
			s.Kernel(a.p, a.groups())
			s.Bind(0, "x", a.x, a.x.Size(), false)
			s.Bind(1, "y", y2, y2.Size(), true)
			got1, got2 := make([]byte, 4*n), make([]byte, 4*n)
			s.Read(a.y, AtBuffer, 0, got1)
			s.Read(y2, AtBuffer, 0, got2)
			if err := d.Run(ctx, &s); err != nil {
				t.Fatal(err)
			}
			if err := checkAffine(old, got1); err != nil {
				t.Errorf("the call recorded before the write saw it: %v", err)
			}
			if err := checkAffine(a.in, got2); err != nil {
				t.Errorf("the call recorded after the write did not see it: %v", err)
			}
		})
	}
}

// TestIdleFlush: a call that does not wait is submitted by the idle flush, with no later
// call or Sync.
func TestIdleFlush(t *testing.T) {
	d := openDevice(t, Options{})
	a := newAffine(t, d, 64)
	var s Call
	a.call(&s, a.groups())
	holdFirst(d)
	if err := d.Run(context.Background(), &s); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		calls, _, _ := batchState(d)
		if calls == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the open batch of %d calls was not submitted within 10 s (idleFlush %v)", calls, idleFlush)
		}
		time.Sleep(time.Millisecond)
	}
	out := make([]byte, 4*len(a.in))
	if err := d.Read(context.Background(), "y", a.y, 0, out); err != nil {
		t.Fatal(err)
	}
	a.check(t, out)
}

// TestErrorsNameTheCall: Dawn's validation error of a call that does not wait is reported by
// the next wait, naming the call and its number, once; the device works on.
func TestErrorsNameTheCall(t *testing.T) {
	d := openDevice(t, Options{})
	ctx := context.Background()
	a := newAffine(t, d, 64)
	bad := func(s *Call) {
		s.Reset("bad-grid")
		s.Kernel(a.p, [3]uint32{d.Limits().MaxComputeWorkgroupsPerDimension + 1, 1, 1})
		s.Bind(0, "x", a.x, a.x.Size(), false)
		s.Bind(1, "y", a.y, a.y.Size(), true)
	}
	seq := func() uint64 {
		d.lock(ctx)
		defer d.unlock()
		return d.x.seq
	}
	// Alone in its batch: Sync, the failing call, Sync.
	if err := d.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	var s Call
	bad(&s)
	if err := d.Run(ctx, &s); err != nil {
		t.Fatalf("a call that does not wait: %v", err)
	}
	n := seq()
	err := d.Sync(ctx)
	if !errors.Is(err, ops.ErrDevice) || !strings.HasPrefix(err.Error(), fmt.Sprintf("dawn: bad-grid (call %d): ", n)) {
		t.Errorf("Sync after a failing call: %v", err)
	}
	t.Logf("reported: %v", err)
	if err := d.Sync(ctx); err != nil {
		t.Errorf("reported twice: %v", err)
	}
	// Reported by the next call that waits, which reads nothing of it.
	bad(&s)
	if err := d.Run(ctx, &s); err != nil {
		t.Fatal(err)
	}
	n = seq()
	// The idle flush may or may not have submitted the failing call alone: the error names it
	// as "bad-grid (call n)" or as the first of "the calls n to n+1 (from bad-grid, call n)".
	if _, err := a.run(ctx, a.groups()); !errors.Is(err, ops.ErrDevice) || !strings.Contains(err.Error(), fmt.Sprintf("bad-grid, call %d)", n)) &&
		!strings.Contains(err.Error(), fmt.Sprintf("bad-grid (call %d)", n)) {
		t.Errorf("a waiting call after a failing one: %v", err)
	}
	// In a batch with others: the whole batch is named, from its first call.
	holdBatches(t, d)
	a.call(&s, a.groups())
	if err := d.Run(ctx, &s); err != nil {
		t.Fatal(err)
	}
	first := seq()
	bad(&s)
	if err := d.Run(ctx, &s); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("dawn: the calls %d to %d (from affine, call %d): ", first, first+1, first)
	if err := d.Sync(ctx); !errors.Is(err, ops.ErrDevice) || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("a batch with a failing call: %v, want it to start %q", err, want)
	}
	out, err := a.run(ctx, a.groups())
	if err != nil {
		t.Fatal(err)
	}
	a.check(t, out)
}

// idWGSL flags an id outside [0, p.x) in its first word, as the ops' kernels do with device
// ids; it also copies the ids out, so it has an output.
const idWGSL = `
struct P { n: u32, limit: u32, a: u32, b: u32 }
@group(0) @binding(0) var<storage, read> ids: array<i32>;
@group(0) @binding(1) var<storage, read_write> flags: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<i32>;
@group(0) @binding(3) var<uniform> p: P;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if (i >= p.n) { return; }
    let v = ids[i];
    if (v < 0 || u32(v) >= p.limit) { flags[0] = 1u; }
    out[i] = v;
}
`

// TestIDChecks: a call's device-side id check (CheckIDs and a post copy into the id slot)
// fails the next wait with the error the report makes of the status word, wrapped in one
// that names the call and its number; calls with good ids pass; more calls with checks
// than there are slots make one of them wait and lose no report.
func TestIDChecks(t *testing.T) {
	d := openDevice(t, Options{})
	ctx := context.Background()
	p := newPipeline(t, d, "test/ids", idWGSL)
	const limit = 10
	out := newBuffer(t, d, "out", 4*64, UsageStorage|UsageCopySrc)
	errBadID := errors.New("id out of range")
	report := func(status uint32) error {
		return fmt.Errorf("ids: status %d: %w: %w", status, errBadID, ops.ErrInvalidArgument)
	}
	call := func(s *Call, name string, ids []int32, wait bool) {
		s.Reset(name)
		s.Kernel(p, [3]uint32{1, 1, 1})
		b := make([]byte, 4*len(ids))
		for i, v := range ids {
			binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
		}
		var params [16]byte
		binary.LittleEndian.PutUint32(params[0:], uint32(len(ids)))
		binary.LittleEndian.PutUint32(params[4:], limit)
		s.Params(3, params[:])
		s.Input(0, "ids", nil, b, uint64(len(b)))
		flags := s.Scratch(4, UsageStorage|UsageCopySrc|UsageCopyDst)
		s.BindScratch(1, "flags", flags, 4, true)
		s.Bind(2, "out", out, out.Size(), true)
		s.Pre(Copy{SrcZero: true, SrcSlot: Nowhere, DstSlot: flags, Size: 4})
		s.Post(Copy{SrcSlot: flags, DstIDCheck: true, DstSlot: Nowhere, Size: 4})
		s.CheckIDs(report)
		if wait {
			s.Wait()
		}
	}
	seq := func() uint64 {
		d.lock(ctx)
		defer d.unlock()
		return d.x.seq
	}
	var s Call
	call(&s, "good", []int32{0, 9, 3}, true)
	if err := d.Run(ctx, &s); err != nil {
		t.Fatalf("good ids: %v", err)
	}
	for _, ids := range [][]int32{{0, 10}, {-1, 0, 1}, {1 << 30}} {
		call(&s, "bad", ids, true)
		err := d.Run(ctx, &s)
		want := fmt.Sprintf("dawn: bad (call %d)", seq())
		if !errors.Is(err, errBadID) || !errors.Is(err, ops.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), want) ||
			!strings.Contains(err.Error(), "ids: status 1: id out of range") {
			t.Errorf("ids %v, the call waiting: %v, want the report's error, starting %q", ids, err, want)
		}
	}
	// Checks of calls that do not wait are read at the next wait.
	call(&s, "bad-later", []int32{limit}, false)
	if err := d.Run(ctx, &s); err != nil {
		t.Fatal(err)
	}
	n := seq()
	call(&s, "good-after", []int32{1}, false)
	if err := d.Run(ctx, &s); err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(ctx); !errors.Is(err, ops.ErrInvalidArgument) || !strings.Contains(err.Error(), fmt.Sprintf("bad-later (call %d)", n)) {
		t.Errorf("Sync after a bad id: %v", err)
	}
	if err := d.Sync(ctx); err != nil {
		t.Errorf("reported twice: %v", err)
	}
	// More checked calls than slots, one bad among them: a call finding the slots full waits,
	// and reports the bad id if it came before; else the Sync after them does.
	badAt := idSlots + idSlots/2
	var badSeq uint64
	var reported error
	for k := range 2 * idSlots {
		ids := []int32{int32(k % limit)}
		if k == badAt {
			ids[0] = -5
		}
		call(&s, fmt.Sprintf("many %d", k), ids, false)
		if err := d.Run(ctx, &s); err != nil {
			if k <= badAt || reported != nil {
				t.Fatalf("call %d: %v", k, err)
			}
			reported = err
		}
		if k == badAt {
			badSeq = seq()
		}
	}
	if err := d.Sync(ctx); reported == nil {
		reported = err
	} else if err != nil {
		t.Errorf("the bad id reported twice: %v", err)
	}
	if !errors.Is(reported, ops.ErrInvalidArgument) || !strings.Contains(reported.Error(), fmt.Sprintf("dawn: many %d (call %d)", badAt, badSeq)) {
		t.Errorf("one bad id among %d checked calls: %v", 2*idSlots, reported)
	}
	if err := d.Sync(ctx); err != nil {
		t.Errorf("after the checked calls: %v", err)
	}
}

// TestCacheBound: calls of many shapes on host tensors keep at most cacheCap bind groups with
// their scratch; each gives its results.
func TestCacheBound(t *testing.T) {
	d := openDevice(t, Options{})
	p := newPipeline(t, d, "test/affine", affineWGSL)
	for n := 1; n <= cacheCap+40; n++ {
		in := make([]float32, n)
		for i := range in {
			in[i] = float32(i - n)
		}
		var s Call
		out := hostAffine(&s, p, in)
		if err := d.Run(context.Background(), &s); err != nil {
			t.Fatal(err)
		}
		if err := checkAffine(in, out); err != nil {
			t.Fatalf("%d elements: %v", n, err)
		}
	}
	d.lock(context.Background())
	cached := len(d.x.cache)
	d.unlock()
	live := liveCount(d)
	t.Logf("%d calls of distinct shapes: %d cached, %d buffers alive", cacheCap+40, cached, live)
	if cached > cacheCap {
		t.Errorf("%d bind groups cached, over %d", cached, cacheCap)
	}
	if live != executorBuffers(d) || live > 2*cacheCap+3 {
		t.Errorf("%d buffers alive for %d cached calls", live, cached)
	}
}

// paramsWGSL scales x by a uniform into y.
const paramsWGSL = `
struct P { scale: f32, n: u32, a: u32, b: u32 }
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<uniform> p: P;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < p.n) { y[id.x] = x[id.x] * p.scale; }
}
`

// TestLiveBuffers: LiveBuffers counts the buffers made and not released, with their bytes;
// the bind groups cached for calls on a buffer go with it, their uniforms too, so releasing
// what one made brings the count back.
func TestLiveBuffers(t *testing.T) {
	d := openDevice(t, Options{})
	ctx := context.Background()
	p := newPipeline(t, d, "test/params", paramsWGSL)
	n0, b0 := d.LiveBuffers()
	x := newBuffer(t, d, "x", 400, UsageStorage|UsageCopyDst)
	y := newBuffer(t, d, "y", 401, UsageStorage|UsageCopySrc)
	if n, b := d.LiveBuffers(); n != n0+2 || b != b0+400+404 {
		t.Fatalf("after two buffers: %d buffers, %d bytes; before %d, %d", n, b, n0, b0)
	}
	if err := d.Write("x", x, 0, f32Bytes([]float32{1, 2, 3})); err != nil {
		t.Fatal(err)
	}
	for _, scale := range []float32{2, 3, 2} { // two uniforms, two cached calls
		var s Call
		s.Reset("scale")
		s.Kernel(p, [3]uint32{2, 1, 1})
		s.Bind(0, "x", x, x.Size(), false)
		s.Bind(1, "y", y, y.Size(), true)
		var params [16]byte
		binary.LittleEndian.PutUint32(params[0:], binary.LittleEndian.Uint32(f32Bytes([]float32{scale})))
		binary.LittleEndian.PutUint32(params[4:], 3)
		s.Params(2, params[:])
		got := make([]byte, 12)
		s.Read(y, AtBuffer, 0, got)
		if err := d.Run(ctx, &s); err != nil {
			t.Fatal(err)
		}
		if v := f32s(got); v[0] != scale || v[1] != 2*scale || v[2] != 3*scale {
			t.Fatalf("scale %v: %v", scale, v)
		}
	}
	if n, _ := d.LiveBuffers(); n != n0+2+2 {
		t.Errorf("%d buffers with two cached calls' uniforms, want %d", n, n0+4)
	}
	x.Release()
	if n, b := d.LiveBuffers(); n != n0+1 || b != b0+404 {
		t.Errorf("after releasing x (and the calls on it): %d buffers, %d bytes; want %d, %d", n, b, n0+1, b0+404)
	}
	y.Release()
	if n, b := d.LiveBuffers(); n != n0 || b != b0 {
		t.Errorf("after releasing both: %d buffers, %d bytes; before %d, %d", n, b, n0, b0)
	}
}

// BenchmarkIdleFlushTimer reports how long after it is armed a timer of 50 us and one of
// idleFlush fire in this process (the median; no device needed): the resolution the idle
// flush really has. go test ./internal/dawnrt -run XXX -bench IdleFlushTimer
func BenchmarkIdleFlushTimer(b *testing.B) {
	for _, d := range []time.Duration{50 * time.Microsecond, idleFlush} {
		b.Run(d.String(), func(b *testing.B) {
			fired := make(chan time.Duration, 1)
			lat := make([]time.Duration, 0, b.N)
			for b.Loop() {
				t0 := time.Now()
				time.AfterFunc(d, func() { fired <- time.Since(t0) })
				lat = append(lat, <-fired)
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "us-fired")
		})
	}
}
