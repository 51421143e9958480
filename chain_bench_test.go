package fusednorm_test

import (
	"context"
	"testing"

	"github.com/fusednorm/fusednorm"
	"github.com/fusednorm/fusednorm/internal/modelchain"
)

// BenchmarkChain runs a transformer encoder's norms as a model does (internal/modelchain:
// EmbedLayerNorm, then 24 AddLayerNorms, every tensor on the device, only y), b.N chains,
// each ended by Engine.Sync or by reading the last output. It reports us/call, the chain's
// time over its 25 calls. The engine comes from FUSEDNORM_BACKEND (auto when unset);
// cmd/fusednorm-bench -chain adds the kernels' time and the CPU's host chain beside it.
func BenchmarkChain(b *testing.B) {
	for _, s := range []modelchain.Shape{
		{Batch: 1, Seq: 128, Hidden: 768, Layers: 24, DType: fusednorm.Float32},
		{Batch: 8, Seq: 128, Hidden: 768, Layers: 24, DType: fusednorm.Float32},
	} {
		for _, end := range []string{"sync", "read"} {
			b.Run(s.String()+"/"+end, func(b *testing.B) { benchChain(b, s, end == "read") })
		}
	}
}

func benchChain(b *testing.B, s modelchain.Shape, read bool) {
	eng, err := fusednorm.Open()
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close()
	c, err := modelchain.New(eng, s, true)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	out, err := fusednorm.NewTensor(s.DType, s.Batch, s.Seq, s.Hidden)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	end := func() error { return eng.Sync(ctx) }
	if read {
		end = func() error { return c.ReadFinal(ctx, out) }
	}
	chain := func() {
		if err := c.Run(ctx); err != nil {
			b.Fatal(err)
		}
		if err := end(); err != nil {
			b.Fatal(err)
		}
	}
	chain() // the first chain makes the pipelines and bind groups
	b.ResetTimer()
	for range b.N {
		chain()
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*s.Calls()), "us/call")
}
