package fusednorm

import (
	"bufio"
	"context"
	"flag"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

var soakCalls = flag.Int("soak.calls", 0, "TestSoak: calls of each op (20000 for the release note); 0 skips it")

// procStatusKB is a kB field of /proc/self/status (VmHWM, VmRSS).
func procStatusKB(field string) (int, bool) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), field+":"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return n, err == nil
		}
	}
	return 0, false
}

// TestSoak runs -soak.calls calls of a small EmbedLayerNorm and of a small AddLayerNorm on
// the backend FUSEDNORM_BACKEND picks (auto without it) and logs the peak resident set
// (VmHWM) before and after: the number the release note gives per backend. It fails on an
// error, on a result that drifts from the first call's bits, or when the peak grows by more
// than 64 MiB after the first tenth of the calls (a leak of a few kB a call). Linux only.
//
//	go test -run TestSoak -soak.calls=20000 -v .
func TestSoak(t *testing.T) {
	if *soakCalls <= 0 || testing.Short() {
		t.Skip("set -soak.calls (and not -short)")
	}
	if _, ok := procStatusKB("VmHWM"); !ok {
		t.Skip("no /proc/self/status")
	}
	// Reset the peak to the current resident set, so VmHWM is this test's (Linux 4.0+; the
	// peak since the process started where the kernel refuses).
	reset := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
	e, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	t.Logf("engine: %s", e.Info())

	const B, S, H, V = 2, 32, 256, 1000
	f := func(n int, seed float32) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(math.Sin(float64(seed) + float64(i)*0.37))
		}
		return v
	}
	op, err := e.NewEmbedLayerNorm(EmbedWeights{Word: FromFloat32(f(V*H, 1), V, H), Position: FromFloat32(f(S*H, 2), S, H),
		Segment: FromFloat32(f(2*H, 3), 2, H), Gamma: FromFloat32(f(H, 4), H), Beta: FromFloat32(f(H, 5), H)})
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	ids, segs, mask := make([]int32, B*S), make([]int32, B*S), make([]int32, B*S)
	for i := range ids {
		ids[i], segs[i], mask[i] = int32(i*37%V), int32(i%2), int32(i%5/4^1)
	}
	in := EmbedInputs{InputIDs: FromInt32(ids, B, S), SegmentIDs: FromInt32(segs, B, S), Mask: FromInt32(mask, B, S)}
	eout, msk := make([]float32, B*S*H), make([]int32, B)
	add := AddLayerNormInputs{X1: FromFloat32(f(B*S*H, 6), B*S, H), X2: FromFloat32(f(B*S*H, 7), B*S, H),
		Gamma: FromFloat32(f(H, 8), H), Beta: FromFloat32(f(H, 9), H), Bias: FromFloat32(f(H, 10), H)}
	y, mean, rstd := make([]float32, B*S*H), make([]float32, B*S), make([]float32, B*S)

	ctx := context.Background()
	var first [2][]float32
	hwm0, _ := procStatusKB("VmHWM")
	var hwmWarm int
	start := time.Now()
	for i := range *soakCalls {
		out := EmbedOutputs{Output: FromFloat32(eout, B, S, H), MaskIndex: FromInt32(msk, B)}
		if err := op.Run(ctx, in, &out); err != nil {
			t.Fatalf("EmbedLayerNorm call %d: %v", i, err)
		}
		aout := AddLayerNormOutputs{Y: FromFloat32(y, B*S, H), Mean: FromFloat32(mean, B*S, 1), Rstd: FromFloat32(rstd, B*S, 1)}
		if err := e.AddLayerNorm(ctx, add, &aout); err != nil {
			t.Fatalf("AddLayerNorm call %d: %v", i, err)
		}
		if i == 0 {
			first = [2][]float32{slices.Clone(eout), slices.Clone(y)}
		}
		if i == *soakCalls/10 {
			hwmWarm, _ = procStatusKB("VmHWM")
		}
	}
	took := time.Since(start)
	if !slices.Equal(first[0], eout) || !slices.Equal(first[1], y) {
		t.Error("the last call's outputs differ from the first's")
	}
	hwm, _ := procStatusKB("VmHWM")
	rss, _ := procStatusKB("VmRSS")
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("%d calls of each op in %v; VmHWM %d kB before (reset %v), %d kB after a tenth, %d kB after; VmRSS %d kB; Go heap %d kB in use, %d kB from the OS; %d goroutines",
		*soakCalls, took, hwm0, reset, hwmWarm, hwm, rss, ms.HeapInuse/1024, ms.Sys/1024, runtime.NumGoroutine())
	if hwm-hwmWarm > 64<<10 {
		t.Errorf("the peak resident set grew by %d kB over the last nine tenths of the calls", hwm-hwmWarm)
	}
}
