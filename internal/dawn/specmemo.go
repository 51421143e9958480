//go:build cgo

package dawn

import (
	"context"
	"fmt"

	"github.com/fusednorm/fusednorm/internal/memo"
	"github.com/fusednorm/fusednorm/internal/ops"
)

// A prepared op remembers the callSpec of its last call whose every tensor was on the device:
// a call with the same tensors and dimensions builds the same spec (the kernel, its pipeline,
// parameters, bindings and copies depend on nothing else), so it submits the remembered one
// instead of building it again (issue 17: building it was about half of a tiny call's Go
// time). The spec names device buffers, never host memory; enqueue checks every buffer it
// names is still alive, as it does for a spec just built, so a device tensor closed since
// fails the call there.

// specMemo is one prepared op's remembered spec, under the key K of the call that built it.
type specMemo[K comparable] = memo.Last[K, callSpec]

// runRemembered submits m's spec when key matches it, with the memo held (a concurrent
// call of the op builds its own spec); ran reports whether it did.
func runRemembered[K comparable](ctx context.Context, b *Backend, name string, m *specMemo[K], key *K) (ran bool, err error) {
	s, ok := m.Hold(key)
	if !ok {
		return false, nil
	}
	defer m.Release()
	if err := b.exec(ctx, s); err != nil {
		return true, fmt.Errorf("dawn: %s: %w", name, deviceErr(err))
	}
	return true, nil
}

// addKey is what a prepared AddLayerNorm call's spec depends on beyond the op.
type addKey struct {
	n, d         int
	eps          float32
	x1, x2, y, x ops.DeviceMem
	x1T, x2T, yT ops.DType
	mean, rstd   ops.DeviceMem
}

// addKeyOf is a's key, false unless every tensor of a is on the device.
func addKeyOf(a *ops.AddLN) (addKey, bool) {
	if a.X1.Dev == nil || a.X2.Dev == nil || a.Y.Dev == nil || (a.X.Present() && a.X.Dev == nil) ||
		a.MeanDev == nil || a.RstdDev == nil {
		return addKey{}, false
	}
	return addKey{n: a.N, d: a.D, eps: a.Epsilon, x1: a.X1.Dev, x2: a.X2.Dev, y: a.Y.Dev, x: a.X.Dev,
		x1T: a.X1.DType, x2T: a.X2.DType, yT: a.Y.DType, mean: a.MeanDev, rstd: a.RstdDev}, true
}

// embedKey is what a prepared EmbedLayerNorm call's spec depends on beyond the op.
type embedKey struct {
	b, s, posBatch      int
	ids, seg, mask, pos ops.DeviceMem
	out, sum, maskIndex ops.DeviceMem
}

// embedKeyOf is the call's key, false unless every tensor of it is on the device.
func embedKeyOf(in *ops.EmbedInputs, out *ops.EmbedOutputs) (embedKey, bool) {
	if in.IDs != nil || in.SegIDs != nil || in.Mask != nil || in.PosIDs != nil || in.IDsDev == nil ||
		out.Out.Dev == nil || (out.Sum.Present() && out.Sum.Dev == nil) || out.MaskIndex != nil {
		return embedKey{}, false
	}
	return embedKey{b: in.B, s: in.S, posBatch: in.PosBatch, ids: in.IDsDev, seg: in.SegIDsDev, mask: in.MaskDev,
		pos: in.PosIDsDev, out: out.Out.Dev, sum: out.Sum.Dev, maskIndex: out.MaskIndexDev}, true
}
