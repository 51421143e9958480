package twin

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/plan"
	"github.com/fusednorm/fusednorm/shaders"
)

// H is the row length of both tiny calls.
const H = 768

// Kernels renders the two kernels of the tiny calls as the Go path renders them (for the C
// twin in this process, and for tiny_bench through fusednorm-bench -tiny-wgsl), and the
// plan's 1/H that their parameters carry.
func Kernels() (embed, add string, invH float32, err error) {
	// The kernels do not depend on the contraction profile; the plan's width does not either.
	p := plan.For(H, false, plan.Contraction{})
	private := shaders.PrivateFor(p.H, p.W, false)
	// Its ids are a device tensor, bound where it is (SplitInts), as the Go path does.
	ek := shaders.Embed{W: p.W, Private: private, DType: ops.F32, SplitInts: true}
	ek.Vectorize(p) // as the Go path picks its kernel
	if embed, err = shaders.RenderEmbed(ek); err != nil {
		return "", "", 0, err
	}
	ak := shaders.AddLN{W: p.W, Private: private, X1: ops.F32, X2: ops.F32, Gamma: ops.F32, Out: ops.F32, Stats: true}
	ak.Vectorize(p)
	if add, err = shaders.RenderAddLN(ak); err != nil {
		return "", "", 0, err
	}
	return embed, add, p.InvH, nil
}

// WriteKernels writes the two kernels and the plan's 1/H into dir, for the C twin as a
// program (cgo/bench/tiny_bench.c).
func WriteKernels(dir string) error {
	embed, add, invH, err := Kernels()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, text := range map[string]string{"embed.wgsl": embed, "addln.wgsl": add, "invh.txt": fmt.Sprintf("%.9g\n", invH)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			return err
		}
	}
	return nil
}
