package cpu

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// TestHugeInterior checks the whole huge pages found in a slice against a count made page
// by page, at starts and lengths around the page boundaries.
func TestHugeInterior(t *testing.T) {
	buf := make([]byte, 6*hugePage)
	base := uintptr(unsafe.Pointer(&buf[0]))
	first := int((hugePage - base%hugePage) % hugePage) // offset of the first aligned byte
	for _, off := range []int{first, first + 1, first + hugePage - 1, first + 64} {
		for _, n := range []int{0, 1, hugePage - 1, hugePage, hugePage + 1, 2*hugePage - 1, 2 * hugePage, 3*hugePage + 4096} {
			b := buf[off : off+n]
			lo, hi := hugeInterior(b)
			// The page-by-page count: every aligned address from b's start whose page ends
			// inside b.
			p := base + uintptr(off)
			var pages []int
			for a := (p + hugePage - 1) / hugePage * hugePage; a+hugePage <= p+uintptr(n); a += hugePage {
				pages = append(pages, int(a-p))
			}
			if len(pages) == 0 {
				if lo != hi {
					t.Errorf("start %d, length %d: [%d, %d), want empty", off-first, n, lo, hi)
				}
				continue
			}
			if lo != pages[0] || hi != pages[len(pages)-1]+hugePage {
				t.Errorf("start %d, length %d: [%d, %d), want [%d, %d)", off-first, n, lo, hi, pages[0], pages[len(pages)-1]+hugePage)
			}
		}
	}
}

// TestCollapseHugeKeepsValues moves a buffer onto huge pages and checks that every byte
// stayed and, where the kernel said yes, that the range is on huge pages now.
func TestCollapseHugeKeepsValues(t *testing.T) {
	b := make([]byte, 6*hugePage)
	fill := func(i int) byte { return byte(i*7 + i>>12) }
	for i := range b {
		b[i] = fill(i)
	}
	err := collapseHuge(b)
	for i := range b {
		if b[i] != fill(i) {
			t.Fatalf("byte %d changed to %d, was %d (err %v)", i, b[i], fill(i), err)
		}
	}
	if err != nil {
		t.Skipf("the kernel declined (%v): the buffer stays on small pages", err)
	}
	lo, _ := hugeInterior(b)
	kb, err := anonHugeKB(uintptr(unsafe.Pointer(&b[lo])))
	if err != nil {
		t.Skip(err)
	}
	if kb < 4*hugePage/1024 {
		t.Errorf("MADV_COLLAPSE succeeded but the mapping holds %d kB of huge pages, want at least %d", kb, 4*hugePage/1024)
	}
	runtime.KeepAlive(b)
}

// anonHugeKB is the AnonHugePages figure of the mapping holding address a.
func anonHugeKB(a uintptr) (int, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	in := false
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		var lo, hi uintptr
		if n, _ := fmt.Sscanf(line, "%x-%x ", &lo, &hi); n == 2 {
			in = lo <= a && a < hi
			continue
		}
		if v, ok := strings.CutPrefix(line, "AnonHugePages:"); ok && in {
			return strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
		}
	}
	return 0, fmt.Errorf("no mapping in /proc/self/smaps holds %#x", a)
}

// TestEmbedHugePages runs EmbedLayerNorm on a word table moved onto huge pages and on a copy
// left where it was: the outputs must be the same bits.
func TestEmbedHugePages(t *testing.T) {
	tune := defaultTuning()
	tune.hugeBytes = 4 << 20
	const B, S, H, V, P, G = 2, 64, 512, 4096, 64, 2 // an 8 MiB word table
	r := rand.New(rand.NewPCG(9, 9))
	in := benchEmbedInputs(r, B, S, V, G)
	w := ops.EmbedWeights{DType: ops.F32, H: H, V: V, P: P, G: G, Word: randBuf(r, ops.F32, V*H, 1),
		Pos: randBuf(r, ops.F32, P*H, 1), Seg: randBuf(r, ops.F32, G*H, 1), Gamma: randBuf(r, ops.F32, H, 1),
		Beta: randBuf(r, ops.F32, H, 1), Epsilon: 1e-12, Rule: ops.MaskCountOnes}
	small := w
	small.Word = ops.Buf{DType: ops.F32, F32: slices.Clone(w.Word.F32)}
	var outs [2][]float32
	for i, c := range []struct {
		w    *ops.EmbedWeights
		opts Options
	}{{&w, Options{}}, {&small, Options{NoHugePages: true}}} {
		op, err := newTunedBackend(t, c.opts, tune).PrepareEmbed(c.w)
		if err != nil {
			t.Fatal(err)
		}
		out := ops.EmbedOutputs{Out: ops.Buf{DType: ops.F32, F32: make([]float32, B*S*H)}, MaskIndex: make([]int32, B)}
		if err := op.Run(context.Background(), &in, &out); err != nil {
			t.Fatal(err)
		}
		outs[i] = out.Out.F32
	}
	same32(t, "output, table on huge pages against small pages", outs[0], outs[1])
	same32(t, "word table", w.Word.F32, small.Word.F32)
}

// TestEmbedHugePagesInBackground checks that PrepareEmbed leaves the collapse of a large
// word table to a goroutine that still moves it onto huge pages (where the kernel does),
// that the op's Close waits for that goroutine, and that a closed Backend starts none.
func TestEmbedHugePagesInBackground(t *testing.T) {
	tune := defaultTuning()
	tune.hugeBytes = 4 << 20
	const H, V = 256, 8192 // an 8 MiB word table
	r := rand.New(rand.NewPCG(5, 6))
	w := ops.EmbedWeights{DType: ops.F32, H: H, V: V, P: 4, Word: randBuf(r, ops.F32, V*H, 1),
		Pos: randBuf(r, ops.F32, 4*H, 1), Gamma: randBuf(r, ops.F32, H, 1), Beta: randBuf(r, ops.F32, H, 1),
		Epsilon: 1e-12}
	be := newTunedBackend(t, Options{}, tune)
	p, err := be.PrepareEmbed(&w)
	if err != nil {
		t.Fatal(err)
	}
	op := p.(*embedOp)
	if op.huge == nil {
		t.Fatal("PrepareEmbed started no collapse for an 8 MiB table")
	}
	<-op.huge.done
	if err := op.huge.err; err != nil {
		t.Logf("the kernel declined (%v): the table stays on small pages", err)
	} else {
		word := w.Word.Bytes()
		lo, _ := hugeInterior(word)
		kb, err := anonHugeKB(uintptr(unsafe.Pointer(&word[lo])))
		if err != nil {
			t.Log(err)
		} else if kb < 2*hugePage/1024 {
			t.Errorf("the collapse succeeded but the table's mapping holds %d kB of huge pages, want at least %d", kb, 2*hugePage/1024)
		}
	}
	if err := op.Close(); err != nil {
		t.Fatal(err)
	}

	// Closed at once: Close stops the collapse between two pieces and waits for it.
	p, err = be.PrepareEmbed(&w)
	if err != nil {
		t.Fatal(err)
	}
	op = p.(*embedOp)
	op.Close()
	select {
	case <-op.huge.done:
	default:
		t.Error("the op's Close returned before its collapse ended")
	}
	be.Close()
	if _, err := be.PrepareEmbed(&w); !errors.Is(err, ops.ErrClosed) {
		t.Errorf("PrepareEmbed on a closed backend: %v, want ErrClosed", err)
	}
	runtime.KeepAlive(w.Word)
}

// awaitHuge waits for the huge-page collapse of an op's word table, if one was started:
// for benchmarks, which are to time the table on the pages it ends on.
func awaitHuge(p ops.PreparedEmbed) {
	if op, ok := p.(*embedOp); ok && op.huge != nil {
		<-op.huge.done
	}
}
