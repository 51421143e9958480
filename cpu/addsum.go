package cpu

import (
	"github.com/fusednorm/fusednorm/internal/half"
	"github.com/fusednorm/fusednorm/internal/ops"
)

// A row's first pass: s = a + b, or (a + b) + c, fused with the plan's first accumulation
// (the partial sums of s − x0), optionally writing s to the x output too; and the
// elementwise adds it is made of.

// addForm is the form of a first pass.
type addForm struct {
	dt   ops.DType // the format of a, b and c: F32, or a 16-bit format, widened as loaded
	bias bool      // c is added: s = (a + b) + c
	x    bool      // s is written to x too (16-bit: rounded to dt), non-temporally where x is aligned (the caller fences)
	acc  bool      // the partial sums are added onto part (a later piece of a row), else start at +0
	// stream and prefetch are for rows from DRAM, which the fused pass would stride through
	// W elements at a time, leaving the hardware prefetchers behind.
	stream   bool // float32: the sums in one sequential pass, then the partial sums of s from the caches
	prefetch bool // 16-bit: a and b prefetched in address order first, then the fused pass
}

// addKernels are a width's elementwise adds and fused first passes: the fused kernels take
// whole chunks of W = len(part), W a multiple of the lanes.
type addKernels struct {
	add2   func(s, a, b []float32)
	add3   func(s, a, b, d []float32)
	add3NT func(s, x, a, b, d []float32) // and x = s, non-temporally, x aligned to the vector
	addTo  func(s, b []float32)

	sum2, sum2Acc func(part, s, a, b []float32, x0 float32)
	sum3, sum3Acc func(part, s, a, b, d []float32, x0 float32)
	sum2NT        func(part, s, x, a, b []float32, x0 float32)
	sum3NT        func(part, s, x, a, b, d []float32, x0 float32)
	f16, bf16     sum16Kernels
}

// sum16Kernels are the fused first passes for 16-bit inputs of one format; the NT kernels
// also write x, s rounded to that format, with non-temporal stores (x aligned to a vector
// of 16-bit values).
type sum16Kernels struct {
	two, twoAcc       func(part, s []float32, a, b []uint16, x0 float32)
	full, fullAcc     func(part, s []float32, a, b, d []uint16, x0 float32)
	twoNT, twoAccNT   func(part, s []float32, x, a, b []uint16, x0 float32)
	fullNT, fullAccNT func(part, s []float32, x, a, b, d []uint16, x0 float32)
}

// run runs the form's fused kernel (one without x has no acc form: the caller adds x).
func (t *addKernels) run(f addForm, part, s, x, a, b, c []float32, x0 float32) {
	switch {
	case f.acc && f.bias:
		t.sum3Acc(part, s, a, b, c, x0)
	case f.acc:
		t.sum2Acc(part, s, a, b, x0)
	case f.bias && f.x:
		t.sum3NT(part, s, x, a, b, c, x0)
	case f.bias:
		t.sum3(part, s, a, b, c, x0)
	case f.x:
		t.sum2NT(part, s, x, a, b, x0)
	default:
		t.sum2(part, s, a, b, x0)
	}
}

// run16 runs the form's 16-bit fused kernel.
func (t *addKernels) run16(f addForm, part, s []float32, x, a, b, c []uint16, x0 float32) {
	k := &t.f16
	if f.dt == ops.BF16 {
		k = &t.bf16
	}
	switch {
	case f.x && f.bias && f.acc:
		k.fullAccNT(part, s, x, a, b, c, x0)
	case f.x && f.bias:
		k.fullNT(part, s, x, a, b, c, x0)
	case f.x && f.acc:
		k.twoAccNT(part, s, x, a, b, x0)
	case f.x:
		k.twoNT(part, s, x, a, b, x0)
	case f.bias && f.acc:
		k.fullAcc(part, s, a, b, c, x0)
	case f.bias:
		k.full(part, s, a, b, c, x0)
	case f.acc:
		k.twoAcc(part, s, a, b, x0)
	default:
		k.two(part, s, a, b, x0)
	}
}

func add2Go(s, a, b []float32) {
	a = a[:len(s)]
	b = b[:len(s)]
	for i := range s {
		s[i] = a[i] + b[i]
	}
}

func add3Go(s, a, b, c []float32) {
	a = a[:len(s)]
	b = b[:len(s)]
	c = c[:len(s)]
	for i := range s {
		s[i] = (a[i] + b[i]) + c[i]
	}
}

func addToGo(s, b []float32) {
	b = b[:len(s)]
	for i := range s {
		s[i] += b[i]
	}
}

// addSumGo is the twin of addSum: s = a + b, or (a + b) + c; x = s; then the partial sums
// of s − x0 from +0 or onto part (len(part) = W).
func addSumGo(f addForm, part, s, x, a, b, c []float32, x0 float32) {
	if f.bias {
		add3Go(s, a, b, c)
	} else {
		add2Go(s, a, b)
	}
	if f.x {
		copy(x[:len(s)], s)
	}
	accumulateGo(sumForm{zero: !f.acc}, part, s, x0, 0)
}

// addSum16Go is the twin of addSum16: the inputs widened, summed as addSumGo sums them, then
// x narrowed from s.
func addSum16Go(f addForm, part, s []float32, x, a, b, c []uint16, x0 float32) {
	widen := half.F16ToF32
	if f.dt == ops.BF16 {
		widen = half.BF16ToF32
	}
	a, b = a[:len(s)], b[:len(s)]
	if f.bias {
		c = c[:len(s)]
	}
	for i := range s {
		v := widen(a[i]) + widen(b[i])
		if f.bias {
			v += widen(c[i])
		}
		s[i] = v
	}
	accumulateGo(sumForm{zero: !f.acc}, part, s, x0, 0)
	if f.x {
		narrowGo(convForm{dt: f.dt}, x[:len(s)], s)
	}
}

func (k *kernels) add2(s, a, b []float32) {
	a, b = a[:len(s)], b[:len(s)]
	if !k.simd() {
		add2Go(s, a, b)
		return
	}
	n := k.whole(len(s))
	if n > 0 {
		k.adds.add2(s[:n], a, b)
	}
	if n < len(s) {
		k.narrower.add2(s[n:], a[n:], b[n:])
	}
}

func (k *kernels) add3(s, a, b, c []float32) {
	a, b, c = a[:len(s)], b[:len(s)], c[:len(s)]
	if !k.simd() {
		add3Go(s, a, b, c)
		return
	}
	n := k.whole(len(s))
	if n > 0 {
		k.adds.add3(s[:n], a, b, c)
	}
	if n < len(s) {
		k.narrower.add3(s[n:], a[n:], b[n:], c[n:])
	}
}

func (k *kernels) addTo(s, b []float32) {
	b = b[:len(s)]
	if !k.simd() {
		addToGo(s, b)
		return
	}
	n := k.whole(len(s))
	if n > 0 {
		k.adds.addTo(s[:n], b)
	}
	if n < len(s) {
		k.narrower.addTo(s[n:], b[n:])
	}
}

// addRow is the first pass without the partial sums: s, and x = s (non-temporally).
func (k *kernels) addRow(f addForm, s, x, a, b, c []float32) {
	switch {
	case f.bias && f.x && k.simd():
		x, a, b, c = x[:len(s)], a[:len(s)], b[:len(s)], c[:len(s)]
		h := k.ntHead(x)
		add3Go(s[:h], a, b, c)
		copy(x[:h], s[:h])
		s, x, a, b, c = s[h:], x[h:], a[h:], b[h:], c[h:]
		n := k.whole(len(s))
		if n > 0 {
			k.adds.add3NT(s[:n], x, a, b, c)
		}
		add3Go(s[n:], a[n:], b[n:], c[n:])
		copy(x[n:], s[n:])
		return
	case f.bias:
		k.add3(s, a, b, c)
	default:
		k.add2(s, a, b)
	}
	if f.x {
		k.copyNT(x, s)
	}
}

// addSum runs the first pass of float32 inputs: the fused kernel over the whole chunks and
// the separate passes over the shorter last chunk (which the plan adds last). Shapes the
// kernel does not take (W not a multiple of the lanes, no whole chunk, an x that does not
// start on a vector boundary, x with acc) go to the narrower width, or run the separate
// passes at the narrowest.
func (k *kernels) addSum(f addForm, part, s, x, a, b, c []float32, x0 float32) {
	n := len(s)
	a, b = a[:n], b[:n]
	if f.bias {
		c = c[:n]
	}
	if f.x {
		x = x[:n]
	}
	if !k.simd() {
		addSumGo(f, part, s, x, a, b, c, x0)
		return
	}
	if f.stream {
		k.addRow(f, s, x, a, b, c)
		k.accumulate(sumForm{zero: !f.acc}, part, s, x0, 0)
		return
	}
	w := len(part)
	full := n - n%w
	if w%k.lanes != 0 || full == 0 || f.x && (f.acc || k.ntHead(x) != 0) {
		if k.narrower.simd() {
			k.narrower.addSum(f, part, s, x, a, b, c, x0)
			return
		}
		k.addRow(f, s, x, a, b, c)
		k.accumulate(sumForm{zero: !f.acc}, part, s, x0, 0)
		return
	}
	k.adds.run(f, part, s[:full], x, a, b, c, x0)
	if full < n {
		k.addRow(f, s[full:], from(x, full), a[full:], b[full:], from(c, full))
		k.accumulate(sumForm{}, part, s[full:], x0, 0)
	}
}

// addSum16 runs the first pass of 16-bit inputs: the kernel over the whole chunks and the
// twin over the shorter last chunk; a W the width does not divide goes to the narrower
// width. An x output goes through the kernel's non-temporal stores when x starts on a
// vector boundary, else through a non-temporal narrowing after the sum.
func (k *kernels) addSum16(f addForm, part, s []float32, x, a, b, c []uint16, x0 float32) {
	n := len(s)
	a, b = a[:n], b[:n]
	if f.bias {
		c = c[:n]
	}
	if f.x {
		x = x[:n]
	}
	if f.prefetch {
		k.prefetch(bytesOf(a))
		k.prefetch(bytesOf(b))
		f.prefetch = false
	}
	if !k.simd() {
		addSum16Go(f, part, s, x, a, b, c, x0)
		return
	}
	if f.x && k.nt16Head(x) != 0 {
		g := f
		g.x = false
		k.addSum16(g, part, s, nil, a, b, c, x0)
		k.narrow(convForm{dt: f.dt, nt: true}, x, s)
		return
	}
	w := len(part)
	full := n - n%w
	if w%k.lanes != 0 || full == 0 {
		k.narrower.addSum16(f, part, s, x, a, b, c, x0)
		return
	}
	k.adds.run16(f, part, s[:full], x, a, b, c, x0)
	if full < n {
		tail := f
		tail.acc, tail.x = true, false
		addSum16Go(tail, part, s[full:], nil, a[full:], b[full:], from(c, full), x0)
		if f.x {
			k.narrow(convForm{dt: f.dt, nt: true}, x[full:], s[full:])
		}
	}
}
