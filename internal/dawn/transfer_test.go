//go:build cgo

package dawn

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"unsafe"

	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/testkit"
)

// roundTrip uploads data at off into a fresh buffer filled with 0xEE (through the simple
// path), reads back the whole buffer, and returns it.
func roundTrip(t *testing.T, d *device, a *affine, off uint64, data []byte, chunk, minBytes uint64) []byte {
	t.Helper()
	size := align4(off+uint64(len(data))) + 8
	buf, err := d.createBuffer("transfer", size, usageStorage|usageCopySrc|usageCopyDst)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.release()
	d.setTransfer(chunk, math.MaxUint64)
	if err := d.writeBuffer(buf, 0, bytes.Repeat([]byte{0xEE}, int(size))); err != nil {
		t.Fatal(err)
	}
	d.setTransfer(chunk, minBytes)
	if err := d.writeBuffer(buf, off, data); err != nil {
		t.Fatal(err)
	}
	// Read back twice in one dispatch, from the start and from off, unaligned lengths included.
	whole := make([]byte, size)
	part := make([]byte, len(data))
	err = d.run(context.Background(), a.p, []binding{{Binding: 0, Buffer: a.x}, {Binding: 1, Buffer: a.y}}, [3]uint32{1, 1, 1},
		[]readback{{Src: buf, Dst: whole}, {Src: buf, Offset: off, Dst: part}})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(part, data) {
		t.Errorf("read back from %d: not the data uploaded", off)
	}
	return whole
}

// TestTransferChunks moves sizes around the chunk size (not multiples of it, nor of 4 bytes,
// more chunks than staging slots) through the ring and checks every byte, the zero padding of
// a partial last word, and the bytes around the range left alone.
func TestTransferChunks(t *testing.T) {
	d := openRuntimeDevice(t, deviceOptions{})
	a := newAffine(t, d, 64)
	const chunk = 1024
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 3, 4, 5, 6, 1022, 1023, 1024, 1025, 2048, 3 * 1024, 4*1024 + 2, 5*1024 + 3, 9*1024 + 1, 17 * 1024} {
		for _, off := range []uint64{0, 4, 1020} {
			t.Run(fmt.Sprintf("n%d_off%d", n, off), func(t *testing.T) {
				data := make([]byte, n)
				for i := range data {
					data[i] = byte(r.Uint32()) | 1 // never 0 nor 0xEE's pattern by chance alone
				}
				got := roundTrip(t, d, a, off, data, chunk, 1)
				want := bytes.Repeat([]byte{0xEE}, len(got))
				copy(want[off:], data)
				for i := off + uint64(n); i < align4(off+uint64(n)); i++ {
					want[i] = 0 // a partial last word is padded with zeros
				}
				if !bytes.Equal(got, want) {
					i := 0
					for got[i] == want[i] {
						i++
					}
					t.Fatalf("byte %d: got %#x, want %#x", i, got[i], want[i])
				}
				// The simple path gives the same bytes.
				if old := roundTrip(t, d, a, off, data, chunk, math.MaxUint64); !bytes.Equal(old, got) {
					t.Fatal("the ring and the simple path disagree")
				}
			})
		}
	}
	// Chunks large enough to be copied on several goroutines.
	t.Run("large", func(t *testing.T) {
		const chunk = 3<<20 + 256
		data := make([]byte, 7<<20+3)
		for i := range data {
			data[i] = byte(r.Uint32()) | 1
		}
		got := roundTrip(t, d, a, 4, data, chunk, 1)
		if !bytes.Equal(got[4:4+len(data)], data) || got[4+len(data)] != 0 || got[0] != 0xEE {
			t.Fatal("large transfer: other bytes")
		}
	})
	if d.xfer == nil {
		t.Fatal("no transfer went through the ring")
	}
	n := 0
	for _, s := range append(d.xfer.up[:], d.xfer.down[:]...) {
		if s.buf != nil {
			n++
		}
	}
	if n > 2*xferSlots {
		t.Fatalf("%d staging buffers, over %d", n, 2*xferSlots)
	}
}

// TestTransferConcurrent runs uploads and read-backs through the ring from several goroutines
// (run it with -race) and checks the device holds no more buffers after than before.
func TestTransferConcurrent(t *testing.T) {
	d := openRuntimeDevice(t, deviceOptions{})
	a := newAffine(t, d, 64)
	d.setTransfer(4096, 1)
	before := d.liveBuffers()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			n := 3*4096 + 37*g + 1
			data := make([]byte, n)
			for i := range data {
				data[i] = byte(i*7 + g)
			}
			buf, err := d.createBuffer("transfer", uint64(n), usageStorage|usageCopySrc|usageCopyDst)
			if err != nil {
				errs <- err
				return
			}
			defer buf.release()
			for it := 0; it < 5; it++ {
				if err := d.writeBuffer(buf, 0, data); err != nil {
					errs <- err
					return
				}
				got := make([]byte, n)
				if err := d.run(context.Background(), a.p, []binding{{Binding: 0, Buffer: a.x}, {Binding: 1, Buffer: a.y}},
					[3]uint32{1, 1, 1}, []readback{{Src: buf, Dst: got}}); err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(got, data) {
					errs <- fmt.Errorf("goroutine %d, round %d: read back other bytes", g, it)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if after := d.liveBuffers(); after != before {
		t.Fatalf("%d buffers alive after, %d before", after, before)
	}
}

// TestTransferClose: Close releases the ring, and a transfer after it fails cleanly.
func TestTransferClose(t *testing.T) {
	d := openRuntimeDevice(t, deviceOptions{})
	d.setTransfer(1024, 1)
	buf, err := d.createBuffer("transfer", 4096, usageStorage|usageCopySrc|usageCopyDst)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.writeBuffer(buf, 0, make([]byte, 4000)); err != nil {
		t.Fatal(err)
	}
	if err := d.close(); err != nil {
		t.Fatal(err)
	}
	if d.xfer != nil {
		t.Fatal("the transfer ring outlived Close")
	}
	if err := d.writeBuffer(buf, 0, make([]byte, 4000)); err == nil {
		t.Fatal("a write after Close succeeded")
	}
}

// TestTransferOps runs AddLayerNorm and EmbedLayerNorm cases with every transfer through a
// ring of small chunks and checks the bits against the CPU reference as the other tests do.
func TestTransferOps(t *testing.T) {
	b := backend(t)
	ref := reference(t, b)
	b.dev.setTransfer(256, 1)
	defer b.dev.setTransfer(xferChunkDefault, xferMinDefault)
	cs := testkit.AddLNOptions()
	for i := 0; i < 4; i++ {
		c := cs[i%len(cs)]
		c.Seed = uint64(5000 + i)
		testkit.CheckAddLN(t, nil, b, ref, c)
	}
	testkit.CheckEmbed(t, nil, b, ref, testkit.EmbedCase{Name: "transfer", DType: ops.F16, B: 2, S: 3, H: 33,
		V: 5, P: 3, G: 2, SegIDs: true, Mask: true, WantMaskIndex: true, WantSum: true, Seed: 77})
}

// BenchmarkTransfer reports the bandwidth (MB/s) of uploads and read-backs of 256 MiB and
// 1 GiB, through the staging ring and through the simple path, each in one call of
// writeBuffer or one run's readback; an upload's time includes waiting for the GPU's copies.
// On a GPU: go test ./dawn/ -run '^$' -bench Transfer -benchtime 5x (-short: 256 MiB only).
func BenchmarkTransfer(bm *testing.B) {
	d, err := openDevice(deviceOptions{})
	if err != nil {
		bm.Skipf("Dawn unavailable: %v", err)
	}
	defer d.close()
	p, err := d.pipeline("test/affine", affineWGSL, "main")
	if err != nil {
		bm.Fatal(err)
	}
	x, err1 := d.createBuffer("x", 256, usageStorage|usageCopyDst)
	y, err2 := d.createBuffer("y", 256, usageStorage|usageCopySrc)
	if err1 != nil || err2 != nil {
		bm.Fatal(err1, err2)
	}
	binds := []binding{{Binding: 0, Buffer: x}, {Binding: 1, Buffer: y}}
	for _, size := range []int{256 << 20, 1 << 30} {
		if uint64(size) > d.limits.MaxBufferSize || testing.Short() && size > 256<<20 {
			continue
		}
		buf, err := d.createBuffer("transfer", uint64(size), usageStorage|usageCopySrc|usageCopyDst)
		if err != nil {
			bm.Fatal(err)
		}
		host := make([]byte, size)
		for i := range host {
			host[i] = byte(i)
		}
		for _, path := range []struct {
			name string
			min  uint64
		}{{"ring", xferMinDefault}, {"simple", math.MaxUint64}} {
			d.setTransfer(xferChunkDefault, path.min)
			bm.Run(fmt.Sprintf("upload/%s/%dMiB", path.name, size>>20), func(bm *testing.B) {
				bm.SetBytes(int64(size))
				for i := 0; i < bm.N; i++ {
					if err := d.writeBuffer(buf, 0, host); err != nil {
						bm.Fatal(err)
					}
					// Wait for the copies: a dispatch that reads nothing back.
					if err := d.run(context.Background(), p, binds, [3]uint32{1, 1, 1}, nil); err != nil {
						bm.Fatal(err)
					}
				}
			})
			bm.Run(fmt.Sprintf("readback/%s/%dMiB", path.name, size>>20), func(bm *testing.B) {
				bm.SetBytes(int64(size))
				for i := 0; i < bm.N; i++ {
					if err := d.run(context.Background(), p, binds, [3]uint32{1, 1, 1}, []readback{{Src: buf, Dst: host}}); err != nil {
						bm.Fatal(err)
					}
				}
			})
		}
		buf.release()
	}
}

// liveBuffers counts the buffers the device holds.
func (d *device) liveBuffers() int {
	_ = d.lock(context.Background())
	defer d.unlock()
	return len(d.buffers)
}

// TestParallelCopy checks the split copy at sizes around its parts, with several copiers.
func TestParallelCopy(t *testing.T) {
	for _, copiers := range []int{0, 1, 3, 7} {
		r := &xferRing{copiers: copiers}
		if copiers > 0 {
			r.work = make(chan copyJob, copiers)
			for i := 0; i < copiers; i++ {
				go r.copier(r.work)
			}
		}
		for _, n := range []int{1, copyPart - 1, 2 * copyPart, 2*copyPart + 1, 5*copyPart + 63, 9*copyPart + 1} {
			src := make([]byte, n)
			for i := range src {
				src[i] = byte(i*31 + n)
			}
			dst := make([]byte, n+1)
			dst[n] = 0x5A
			r.copy(unsafe.Pointer(&dst[0]), unsafe.Pointer(&src[0]), n)
			if !bytes.Equal(dst[:n], src) || dst[n] != 0x5A {
				t.Fatalf("copiers %d, n %d: wrong bytes", copiers, n)
			}
		}
		if r.work != nil {
			close(r.work)
		}
	}
}

// TestTransferDeviceTensors writes and reads device tensors through a ring of small chunks
// (odd 16-bit lengths included), reads them again through the simple path, and finds no
// buffer left behind.
func TestTransferDeviceTensors(t *testing.T) {
	b := backend(t)
	defer b.dev.setTransfer(xferChunkDefault, xferMinDefault)
	before := b.LiveBuffers()
	r := rand.New(rand.NewPCG(3, 4))
	for _, dt := range []ops.DType{ops.F16, ops.F32} {
		for _, n := range []int{1, 3, 129, 1001} {
			b.dev.setTransfer(256, 1)
			m, err := b.NewDeviceMem(dt, n)
			if err != nil {
				t.Fatal(err)
			}
			src := make([]byte, n*dt.Size())
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
				t.Fatalf("%v × %d: the ring read back other bytes", dt, n)
			}
			b.dev.setTransfer(256, math.MaxUint64)
			clear(got)
			if err := b.ReadDevice(context.Background(), m, got); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, src) {
				t.Fatalf("%v × %d: the simple path read back other bytes than the ring wrote", dt, n)
			}
			if err := b.FreeDevice(m); err != nil {
				t.Fatal(err)
			}
		}
	}
	if after := b.LiveBuffers(); after != before {
		t.Fatalf("%d buffers alive after, %d before", after, before)
	}
}

// TestTransferPrepared runs a prepared AddLayerNorm (the low-overhead path, whose host inputs
// go through the ring when large) with small chunks, against the host path through the simple
// transfers: the same bits.
func TestTransferPrepared(t *testing.T) {
	b := backend(t)
	defer b.dev.setTransfer(xferChunkDefault, xferMinDefault)
	const N, D = 5, 301 // 16-bit rows of an odd length: words shared across rows
	r := rand.New(rand.NewPCG(5, 6))
	for _, dt := range []ops.DType{ops.F16, ops.F32} {
		x1 := testkit.Float(dt, testkit.Normal(r, N*D, 2, 1))
		x2 := testkit.Float(dt, testkit.Normal(r, N*D, 1, -0.5))
		gamma := testkit.Float(dt, testkit.Normal(r, D, 1, 0.5))
		beta := testkit.Float(dt, testkit.Normal(r, D, 0.5, 0))
		bias := testkit.Float(dt, testkit.Normal(r, D, 0.3, 0.1))
		mk := func() *ops.AddLN {
			a := &ops.AddLN{N: N, D: D, Epsilon: 1e-5, X1: x1, X2: x2, Gamma: gamma, Beta: beta, Bias: bias,
				Y: testkit.Zeros(dt, N*D), X: testkit.Zeros(dt, N*D), Mean: make([]float32, N), Rstd: make([]float32, N)}
			testkit.Poison(a.Y)
			testkit.Poison(a.X)
			return a
		}
		b.dev.setTransfer(256, math.MaxUint64)
		want := mk()
		if err := b.AddLayerNorm(context.Background(), want); err != nil {
			t.Fatal(err)
		}
		b.dev.setTransfer(256, 1)
		p, err := b.PrepareAddLN(gamma, beta, bias, false)
		if err != nil {
			t.Fatal(err)
		}
		got := mk()
		err = p.Run(context.Background(), got)
		p.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Y.Bytes(), want.Y.Bytes()) || !bytes.Equal(got.X.Bytes(), want.X.Bytes()) ||
			!bytes.Equal(bytesOf(got.Mean), bytesOf(want.Mean)) || !bytes.Equal(bytesOf(got.Rstd), bytesOf(want.Rstd)) {
			t.Fatalf("%v: the prepared call through the ring gave other bits", dt)
		}
	}
}
