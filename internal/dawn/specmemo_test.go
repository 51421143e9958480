//go:build cgo

package dawn

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"

	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/testkit"
)

// TestRememberedSpecEntry: a prepared AddLayerNorm's remembered call keeps the bind-group
// entry it found; once the cache drops that entry (evicted, or a buffer it binds freed), the
// next call finds or makes another and still computes the host path's bits from the
// tensors' current data.
func TestRememberedSpecEntry(t *testing.T) {
	b := backend(t)
	ctx := context.Background()
	const N, D = 3, 40
	r := rand.New(rand.NewPCG(7, 8))
	gamma, beta := testkit.Float(ops.F32, testkit.Normal(r, D, 1, 0.5)), testkit.Float(ops.F32, testkit.Normal(r, D, 0.5, 0))
	p, err := b.PrepareAddLN(gamma, beta, ops.Buf{}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	dev := func(n int, data []byte) ops.DeviceMem {
		m, err := b.NewDeviceMem(ops.F32, n)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.FreeDevice(m) })
		if data != nil {
			if err := b.WriteDevice(m, data); err != nil {
				t.Fatal(err)
			}
		}
		return m
	}
	x2h := testkit.Float(ops.F32, testkit.Normal(r, N*D, 1, -0.5))
	x1, x2, y := dev(N*D, nil), dev(N*D, x2h.Bytes()), dev(N*D, nil)
	a := &ops.AddLN{N: N, D: D, Epsilon: 1e-5, X1: ops.Buf{DType: ops.F32, Dev: x1}, X2: ops.Buf{DType: ops.F32, Dev: x2},
		Y: ops.Buf{DType: ops.F32, Dev: y}, MeanDev: dev(N, nil), RstdDev: dev(N, nil)}
	// check writes x1 and runs the remembered call, against the host path on the same data.
	check := func(what string) *callEntry {
		t.Helper()
		x1h := testkit.Float(ops.F32, testkit.Normal(r, N*D, 2, 1))
		if err := b.WriteDevice(x1, x1h.Bytes()); err != nil {
			t.Fatal(err)
		}
		if err := p.Run(ctx, a); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		want := &ops.AddLN{N: N, D: D, Epsilon: 1e-5, X1: x1h, X2: x2h, Gamma: gamma, Beta: beta,
			Y: testkit.Zeros(ops.F32, N*D), Mean: make([]float32, N), Rstd: make([]float32, N)}
		if err := b.AddLayerNorm(ctx, want); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, N*D*4)
		if err := b.ReadDevice(ctx, y, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want.Y.Bytes()) {
			t.Fatalf("%s: the remembered call gave other bits than the host path", what)
		}
		key, _ := addKeyOf(a)
		s, ok := p.(*addPrep).memo.Hold(&key)
		if !ok {
			t.Fatalf("%s: the call is not remembered", what)
		}
		defer p.(*addPrep).memo.Release()
		if s.entry == nil || s.entry.dropped {
			t.Fatalf("%s: the remembered spec holds no live entry", what)
		}
		return s.entry
	}
	check("first call")
	e := check("remembered call")
	if err := b.dev.lock(ctx); err != nil {
		t.Fatal(err)
	}
	for h, ce := range b.dt.cache { // as eviction past cacheCap drops them
		b.dropEntry(h, ce)
	}
	b.dev.unlock()
	if !e.dropped {
		t.Fatal("dropEntry left the entry's dropped flag unset")
	}
	if e2 := check("after the cache dropped its entry"); e2 == e {
		t.Fatal("the remembered spec kept the dropped entry")
	}
}
