//go:build cgo

package dawn

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/testkit"
)

// The transfer ring's mechanics (chunks, odd lengths, concurrency, Close) are tested in
// internal/dawnrt with small chunks; here the ops and device tensors go through it at its
// real sizes: an upload of 4 MiB or more through the ring, a read-back through it when it is
// larger than one 64 MiB chunk.

// TestTransferDeviceTensors writes and reads device tensors around the ring's sizes (odd
// 16-bit lengths, whose last word is half used, included) and finds no buffer left behind.
func TestTransferDeviceTensors(t *testing.T) {
	b := backend(t)
	before, _ := b.DeviceMemory()
	r := rand.New(rand.NewPCG(3, 4))
	sizes := []struct {
		dt ops.DType
		n  int
	}{
		{ops.F16, 1}, {ops.F16, 1001}, {ops.F32, 129},
		{ops.F16, 2<<20 + 1}, // 4 MiB and 2 bytes: up through the ring
		{ops.F32, 1 << 20},   // exactly 4 MiB
	}
	if !testing.Short() {
		sizes = append(sizes, struct {
			dt ops.DType
			n  int
		}{ops.F16, 32<<20 + 3}) // 64 MiB and 6 bytes: down through the ring too, in two chunks
	}
	for _, sz := range sizes {
		t.Run(fmt.Sprintf("%v×%d", sz.dt, sz.n), func(t *testing.T) {
			m, err := b.NewDeviceMem(sz.dt, sz.n)
			if err != nil {
				t.Fatal(err)
			}
			defer b.FreeDevice(m)
			src := make([]byte, sz.n*sz.dt.Size())
			for i := range src {
				src[i] = byte(r.Uint32())
			}
			if err := b.WriteDevice(m, src); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, len(src))
			if err := b.ReadDevice(context.Background(), m, got); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, src) {
				t.Fatal("read back other bytes than written")
			}
			if err := b.WriteDevice(m, src[1:]); err == nil {
				t.Fatal("a write of the wrong length")
			}
		})
	}
	if after, _ := b.DeviceMemory(); after != before {
		t.Fatalf("%d buffers alive after, %d before", after, before)
	}
}

// TestTransferOps runs AddLayerNorm with inputs (and a full bias) of 4 MiB and more, which go
// up through the ring, on host tensors and prepared, and checks the bits against the CPU
// reference; and EmbedLayerNorm with a table that large.
func TestTransferOps(t *testing.T) {
	b := backend(t)
	ref := reference(t, b)
	rows := ops.AddDTypeRows
	for _, c := range []testkit.AddLNCase{
		{Row: rows[0], N: 1024, D: 1025, Bias: 2, WriteX: true, Seed: 5000},
		{Row: rows[3], N: 2049, D: 1025, Bias: 1, WriteX: false, Seed: 5001}, // 16-bit rows of an odd length
	} {
		t.Run(c.String(), func(t *testing.T) {
			testkit.CheckAddLN(t, nil, b, ref, c)
			// Prepared: the weights (the full bias through the ring) resident, the inputs per call.
			want, got := c.Problem(), c.Problem()
			if err := ref.AddLayerNorm(context.Background(), want); err != nil {
				t.Fatal(err)
			}
			p, err := b.PrepareAddLN(got.Gamma, got.Beta, got.Bias, got.BiasFull)
			if err != nil {
				t.Fatal(err)
			}
			err = p.Run(context.Background(), got)
			p.Close()
			if err != nil {
				t.Fatal(err)
			}
			testkit.CompareBufs(t, nil, "prepared y", got.Y, want.Y)
			testkit.CompareBufs(t, nil, "prepared mean", testkit.Float(ops.F32, got.Mean), testkit.Float(ops.F32, want.Mean))
			testkit.CompareBufs(t, nil, "prepared rstd", testkit.Float(ops.F32, got.Rstd), testkit.Float(ops.F32, want.Rstd))
			if c.WriteX {
				testkit.CompareBufs(t, nil, "prepared x", got.X, want.X)
			}
		})
	}
	testkit.CheckEmbed(t, nil, b, ref, testkit.EmbedCase{Name: "transfer", DType: ops.F16, B: 2, S: 3, H: 1025,
		V: 2100, P: 3, G: 2, SegIDs: true, Mask: true, WantMaskIndex: true, WantSum: true, Seed: 77})
}
