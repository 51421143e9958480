package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/fusednorm/fusednorm/internal/ops"
	"github.com/fusednorm/fusednorm/internal/plan"
)

func TestAccumulateKernels(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	g := &goKernels
	for _, name := range simdLevels() {
		k := mustKernels(t, name)
		for _, w := range planWidths {
			for _, n := range kernelSizes {
				for _, special := range []bool{false, true} {
					tag := func(op string) string {
						return fmt.Sprintf("%s/%s/W=%d/n=%d/special=%v", name, op, w, n, special)
					}
					x := values(r, n, special)
					init, init2 := values(r, w, false), values(r, w, false)
					start := func(i int) float32 { return init[i] }
					start2 := func(i int) float32 { return init2[i] }
					shift := float32(r.NormFloat64()) // x0 of the first pass, the second shift of dev

					for _, f := range []sumForm{{}, {dev: true}, {dev: true, fma: true},
						{zero: true}, {dev: true, zero: true}, {dev: true, fma: true, zero: true}} {
						// dev writes e back into t; the first pass only reads it.
						gotT, wantT := out32(n, func(i int) float32 { return x[i] }), out32(n, func(i int) float32 { return x[i] })
						got, want := out32(w, start), out32(w, start)
						var got2, want2 []float32
						if f.dev {
							got2, want2 = out32(w, start2), out32(w, start2)
						}
						k.accumulate(f, got, got2, gotT, shift)
						g.accumulate(f, want, want2, wantT, shift)
						form := fmt.Sprintf("%+v", f)
						same32(t, tag(form), got, want)
						same32(t, tag(form+"/part2"), got2, want2)
						same32(t, tag(form+"/t"), gotT, wantT)
						if f.zero { // the zero-start forms ignore what the partials held
							clear(want)
							clear(want2)
							g.accumulate(sumForm{dev: f.dev, fma: f.fma}, want, want2, slices.Clone(x), shift)
							same32(t, tag(fmt.Sprintf("%+v/cleared", f)), got, want)
							same32(t, tag(fmt.Sprintf("%+v/cleared/part2", f)), got2, want2)
						}
					}
				}
			}
		}
	}
}

// The accumulation kernels must also follow the plan itself, not only their twins: the
// statistics are plan.Stats's, and the row's scratch ends holding e = f32(x − Shift).
func TestAccumulateFollowsPlan(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, name := range testLevels() {
		for _, h := range []int{1, 7, 8, 9, 255, 256, 257, 768, 1000, 4096, 4099} {
			for _, prof := range []plan.Contraction{{}, {FuseVariance: true, FuseAffine: true}} {
				for _, far := range []float32{0, 1000} { // far: the first element lies far from the mean
					p := plan.For(h, h%2 == 0, prof)
					x := values(r, h, false)
					if far != 0 {
						x = plainNormal(r, h)
						x[0] += far
					}
					part := make([]float32, 2*p.W)
					row := make([]float32, h)
					got := rowStats(kernelsOf(name), &p, x, row, part, 1e-5, nil)
					want := p.Stats(x, 1e-5, make([]float32, 2*p.W))
					if !sameStats(got, want) {
						t.Fatalf("%s: H=%d %v far=%v: rowStats = %+v, plan.Stats = %+v", name, h, prof, far, got, want)
					}
					e := make([]float32, h)
					for i, v := range x {
						e[i] = v - want.Shift
					}
					same32(t, fmt.Sprintf("%s/H=%d/%v/far=%v/e", name, h, prof, far), row, e)
				}
			}
		}
	}
}

func TestFoldQuadsKernel(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	for _, name := range testLevels() {
		k := mustKernels(t, name)
		for _, w := range []int{4, 8, 16, 32, 64, 96, 128, 256, 512, 1024, 1028} {
			for _, special := range []bool{false, true} {
				init := values(r, w, special)
				got, want := out32(w, func(i int) float32 { return init[i] }), slices.Clone(init)
				k.foldQuads(got[:w])
				plan.FoldQuads(want)
				same32(t, fmt.Sprintf("%s/foldQuads/W=%d/special=%v", name, w, special), got, want)
			}
		}
	}
}

// TestPlanTree checks a row's whole tree (avx512's foldTree for vector rows) against the
// plan's, for every W a vector or scalar row can have.
func TestPlanTree(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for _, name := range testLevels() {
		k := mustKernels(t, name)
		for _, h := range []int{5, 8, 24, 100, 128, 256, 768, 1000, 1024, 2048, 4096, 8192} {
			for _, half := range []bool{false, true} {
				p := plan.For(h, half, plan.Contraction{})
				// values' spread of magnitudes (1e30 beside 1) tests the order of the
				// additions; a row of plain normal values also shows a partial taken twice
				// or dropped, which a 1e30 elsewhere in the row would swallow.
				tame := plainNormal(r, p.W)
				for i, init := range [][]float32{values(r, p.W, false), values(r, p.W, true), tame} {
					got, want := slices.Clone(init), slices.Clone(init)
					sum, wantSum := k.planTree(&p, got), p.Tree(want)
					same32(t, fmt.Sprintf("%s/planTree/%v/values=%d", name, p, i), []float32{sum}, []float32{wantSum})
				}
			}
		}
	}
}

// sameStats reports whether a and b have the same bits (NaNs alike).
func sameStats(a, b plan.Stats) bool {
	same := func(x, y float32) bool { return x != x && y != y || math.Float32bits(x) == math.Float32bits(y) }
	return same(a.Shift, b.Shift) && same(a.MeanD, b.MeanD) && same(a.Rstd, b.Rstd)
}

// TestDevSums checks the second pass with its two trees against the twin accumulation and
// the plan's tree, for every vector W from 64 to 2048 at one to three chunks and a row with
// a shorter last chunk, both profiles (e written back into the row too); and the first
// pass's sum in one kernel (sumTree) the same way.
func TestDevSums(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	for _, name := range testLevels() {
		k := mustKernels(t, name)
		for _, w := range []int{64, 128, 256, 512, 1024, 2048} {
			p := plan.Plan{H: w, W: w, Lanes: plan.VecLanes}
			for _, n := range []int{w, 2 * w, 3 * w, 2*w + 36} {
				for _, fma := range []bool{false, true} {
					p.Profile.FuseVariance = fma
					for i, row := range [][]float32{values(r, n, false), values(r, n, true), plainNormal(r, n)} {
						shift := float32(r.NormFloat64())
						part := out32(2*w, nil)
						gotRow := out32(n, func(i int) float32 { return row[i] })
						got, gotSq := k.devSums(&p, part, gotRow, shift)
						want, want2 := make([]float32, w), make([]float32, w)
						accumulateGo(sumForm{dev: true, fma: fma, zero: true}, want, want2, row, shift)
						wantSum, wantSq := p.Tree(want), p.Tree(want2)
						tag := fmt.Sprintf("%s/devSums/W=%d/n=%d/fma=%v/values=%d", name, w, n, fma, i)
						same32(t, tag, []float32{got, gotSq}, []float32{wantSum, wantSq})
						same32(t, tag+"/t", gotRow, row)
						checkGuards32(t, fmt.Sprintf("%s/devSums/W=%d/n=%d part", name, w, n), part)
					}
				}
				// The first pass's sum of a staged row, where the level has it in one kernel.
				if k.sums.sumTree == nil || n%w != 0 {
					continue
				}
				for i, row := range [][]float32{values(r, n, false), values(r, n, true), plainNormal(r, n)} {
					x0 := row[0]
					part := out32(w, nil)
					got := k.sums.sumTree(part, row, x0)
					want := make([]float32, w)
					accumulateGo(sumForm{zero: true}, want, nil, row, x0)
					same32(t, fmt.Sprintf("%s/sumTree/W=%d/n=%d/values=%d", name, w, n, i), []float32{got}, []float32{p.Tree(want)})
					checkGuards32(t, fmt.Sprintf("%s/sumTree/W=%d/n=%d part", name, w, n), part)
				}
			}
		}
	}
}

// plainNormal is n values of N(0,1): partials of one magnitude, where a partial taken twice
// or dropped shows (values' 1e30s would swallow it).
func plainNormal(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(r.NormFloat64())
	}
	return s
}

func TestTreeKernel(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	for _, name := range testLevels() {
		k := mustKernels(t, name)
		for _, w := range []int{1, 2, 4, 8, 16, 32, 64, 128, 256} {
			for _, special := range []bool{false, true} {
				init := values(r, w, special)
				got, want := out32(w, func(i int) float32 { return init[i] }), slices.Clone(init)
				sum := k.tree(got)
				wantSum := treeGo(want)
				tag := fmt.Sprintf("%s/tree/W=%d/special=%v", name, w, special)
				same32(t, tag, []float32{sum}, []float32{wantSum})
				same32(t, tag+"/part", got, want)
			}
		}
		// Lengths outside the plan's widths follow treeGo too (powers of two past MaxW run
		// the one-kernel tree, the others the step-by-step path).
		for _, w := range []int{3, 12, 24, 48, 200, 512, 1024} {
			init := values(r, w, true)
			got, want := out32(w, func(i int) float32 { return init[i] }), slices.Clone(init)
			sum, wantSum := k.tree(got), treeGo(want)
			tag := fmt.Sprintf("%s/tree/len=%d", name, w)
			same32(t, tag, []float32{sum}, []float32{wantSum})
			same32(t, tag+"/part", got, want)
		}
	}
}

// TestAddKernels checks the elementwise first pass (addRow: t, and x plain or
// non-temporal at every start alignment) and addTo against their twins.
func TestAddKernels(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	g := &goKernels
	for _, name := range simdLevels() {
		k := mustKernels(t, name)
		for _, n := range kernelSizes {
			tag := func(op string) string { return fmt.Sprintf("%s/%s/n=%d", name, op, n) }
			a, b, c := values(r, n, true), values(r, n, false), values(r, n, false)
			for _, bias := range []bool{false, true} {
				for _, xs := range []struct{ x, nt bool }{{false, false}, {true, false}, {true, true}} {
					for off := range 3 { // x's start: off elements past a 64-byte boundary
						f := addForm{dt: ops.F32, bias: bias, x: xs.x, nt: xs.nt}
						gotT, wantT := out32(n, nil), out32(n, nil)
						gotX, wantX := out32(n+off, nil)[off:], out32(n, nil)
						k.addRow(f, gotT, gotX, a, b, c)
						k.fence()
						g.addRow(f, wantT, wantX, a, b, c)
						form := tag(fmt.Sprintf("addRow/bias=%v/x=%v/nt=%v/off=%d", bias, xs.x, xs.nt, off))
						same32(t, form+"/t", gotT, wantT)
						if xs.x {
							same32(t, form+"/x", gotX, wantX)
						}
					}
				}
			}

			got, want := out32(n, func(i int) float32 { return a[i] }), out32(n, func(i int) float32 { return a[i] })
			k.addTo(got, b)
			g.addTo(want, b)
			same32(t, tag("addTo"), got, want)
		}
	}
}

// TestAddSumKernel checks the fused first pass (the staged row t, the optional x = s with
// plain or non-temporal stores, and the partial sums) against its twin for every plan
// width, with and without the third addend and x, x at every start alignment.
func TestAddSumKernel(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 20))
	g := &goKernels
	for _, name := range simdLevels() {
		k := mustKernels(t, name)
		for _, w := range append(planWidths, 32, 64, 128) {
			for _, n := range append(kernelSizes, 768, 3*w, 3*w+5) {
				for _, special := range []bool{false, true} {
					a, b, c := values(r, n, special), values(r, n, false), values(r, n, special)
					init := values(r, w, false)
					x0 := float32(r.NormFloat64()) // the plan's shift
					for _, three := range []bool{false, true} {
						cc := c
						if !three {
							cc = nil
						}
						sum := out32(n, nil) // s, which x must hold
						for i := range sum {
							sum[i] = a[i] + b[i]
							if three {
								sum[i] += c[i]
							}
						}
						for off := range 17 { // off = 16: no x
							tag := fmt.Sprintf("%s/addSum/W=%d/n=%d/special=%v/three=%v/off=%d", name, w, n, special, three, off)
							start := func(i int) float32 { return init[i] }
							gotP, wantP := out32(w, start), out32(w, start)
							gotS, wantS := out32(n, nil), out32(n, nil)
							var gotX, wantX []float32
							if off < 16 {
								gotX, wantX = out32(n+off, nil)[off:], out32(n+off, nil)[off:]
							}
							f := addForm{dt: ops.F32, bias: three, x: off < 16}
							g.addSum(f, wantP, wantS, wantX, a, b, cc, x0)
							if off < 16 {
								same32(t, tag+"/go/x", wantX, sum)
							}
							// The fused pass with x stored plainly or non-temporally, and the
							// two-pass form for streamed inputs: the same bits.
							for _, v := range []struct{ stream, nt bool }{{false, false}, {false, true}, {true, false}, {true, true}} {
								f.stream, f.nt = v.stream, v.nt
								form := fmt.Sprintf("/stream=%v/nt=%v", v.stream, v.nt)
								gotP, gotS = out32(w, start), out32(n, nil)
								if off < 16 {
									gotX = out32(n+off, nil)[off:]
								}
								k.addSum(f, gotP, gotS, gotX, a, b, cc, x0)
								k.fence()
								same32(t, tag+form+"/s", gotS, wantS)
								same32(t, tag+form+"/part", gotP, wantP)
								if off < 16 {
									same32(t, tag+form+"/x", gotX, wantX)
								}
							}
							if off != 16 {
								continue
							}
							// The same row summed a piece at a time: pieces of a few W onto
							// the partials, as the 16-bit paths of the ops run it.
							tag = fmt.Sprintf("%s/addSumAcc/W=%d/n=%d/special=%v/three=%v", name, w, n, special, three)
							// With x too (every piece's x from the separate passes).
							for _, withX := range []bool{false, true} {
								tag := fmt.Sprintf("%s/x=%v", tag, withX)
								gotP, wantP = out32(w, start), out32(w, start)
								gotS, wantS = out32(n, nil), out32(n, nil)
								gotX = out32(n, nil)
								step := w * (1 + r.IntN(3))
								for lo := 0; lo < n; lo += step {
									hi := min(lo+step, n)
									var cp, xp []float32
									if three {
										cp = cc[lo:hi]
									}
									if withX {
										xp = gotX[lo:hi]
									}
									k.addSum(addForm{dt: ops.F32, bias: three, x: withX, nt: lo%2 == 0, acc: true}, gotP, gotS[lo:hi], xp, a[lo:hi], b[lo:hi], cp, x0)
								}
								k.fence()
								g.addSum(addForm{dt: ops.F32, bias: three, acc: true}, wantP, wantS, nil, a, b, cc, x0)
								same32(t, tag+"/t", gotS, wantS)
								same32(t, tag+"/part", gotP, wantP)
								if withX {
									same32(t, tag+"/x", gotX, sum)
								}
							}

							// The 16-bit first pass against widening first, then the float32
							// pass: binary16 and bfloat16, without a bias and with a 16-bit one.
							h1, h2, h3 := halves(r, n), halves(r, n), halves(r, n)
							for _, dt := range []ops.DType{ops.F16, ops.BF16} {
								w1, w2, w3 := make([]float32, n), make([]float32, n), make([]float32, n)
								g.widen(convForm{dt: dt}, w1, h1)
								g.widen(convForm{dt: dt}, w2, h2)
								g.widen(convForm{dt: dt}, w3, h3)
								for bias := range 2 {
									for _, acc := range []bool{false, true} {
										var wc []float32
										var half []uint16
										if bias == 1 {
											half, wc = h3, w3
										}
										wantP, wantS = out32(w, start), out32(n, nil)
										wideX := out32(n, nil) // s, widened inputs summed
										g.addSum(addForm{dt: ops.F32, bias: bias == 1, x: true, acc: acc}, wantP, wantS, wideX, w1, w2, wc, x0)
										wantX := out16(n)
										g.narrow(convForm{dt: dt}, wantX, wideX)
										for _, off := range []int{-1, 0, 1, 5, 8, 9} { // x's start within a vector of halves; -1: no x
											nt := off >= 0 && off <= 5
											tag := fmt.Sprintf("%s/addSum16/W=%d/n=%d/%v/bias=%d/acc=%v/off=%d/nt=%v", name, w, n, dt, bias, acc, off, nt)
											gotP, gotS = out32(w, start), out32(n, nil)
											var gotX []uint16
											if off >= 0 {
												gotX = out16(n + off%8)[off%8:]
											}
											f := addForm{dt: dt, bias: bias == 1, x: off >= 0, nt: nt, acc: acc}
											k.addSum16(f, gotP, gotS, gotX, h1, h2, half, x0)
											k.fence()
											same32(t, tag+"/s", gotS, wantS)
											same32(t, tag+"/part", gotP, wantP)
											if off >= 0 {
												same16(t, tag+"/x", gotX, wantX)
											}
										}
									}
								}
							}
						}
					}
				}
			}
		}
	}
}

// TestAddSum16Tree checks the 16-bit first passes that end in the plan's tree (AVX-512)
// against the twin first pass then plan.Plan.Tree: the sum, t and x, for every vector W
// they take, both formats, from +0 and onto earlier pieces' partials (acc), with and
// without a bias and x (x non-temporal from a vector boundary, plain elsewhere). A piece
// that is not whole chunks of W is left alone (ok false) but on a level whose kernels walk
// ragged rows (tails: the last chunk short, under lane masks), and so is every piece on a
// level without these kernels.
func TestAddSum16Tree(t *testing.T) {
	r := rand.New(rand.NewPCG(25, 26))
	g := &goKernels
	for _, name := range simdLevels() {
		k := mustKernels(t, name)
		has := k.adds.f16.trees.two != nil
		for _, w := range []int{64, 128, 256, 512, 1024, 2048} {
			p := plan.Plan{H: w, W: w, Lanes: plan.WideLanes}
			for _, n := range []int{w, 3 * w, w + 8, w - 24, 2*w + 40} {
				h1, h2, h3 := halves(r, n), halves(r, n), halves(r, n)
				x0 := float32(r.NormFloat64())
				earlier := values(r, w, false) // the partials of a row's earlier pieces
				for _, dt := range []ops.DType{ops.F16, ops.BF16} {
					for _, form := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
						bias, acc := form[0], form[1]
						var c []uint16
						if bias {
							c = h3
						}
						start := make([]float32, w)
						if acc {
							copy(start, earlier)
						}
						wantP, wantS, wantX := slices.Clone(start), out32(n, nil), out16(n)
						g.addSum16(addForm{dt: dt, bias: bias, x: true, acc: acc}, wantP, wantS, wantX, h1, h2, c, x0)
						wantSum := p.Tree(wantP)
						for _, off := range []int{-1, 0, 3, 8} { // x's start within a vector of halves; -1: no x
							tag := fmt.Sprintf("%s/addSum16Tree/W=%d/n=%d/%v/bias=%v/acc=%v/off=%d", name, w, n, dt, bias, acc, off)
							gotS := out32(n, nil)
							var gotX []uint16
							if off >= 0 {
								gotX = out16(n + off)[off:]
							}
							f := addForm{dt: dt, bias: bias, x: off >= 0, nt: off >= 0 && off%8 == 0, acc: acc}
							sum, ok := k.addSum16Tree(f, &p, slices.Clone(start), gotS, gotX, h1, h2, c, x0)
							k.fence()
							if ok != (has && (n%w == 0 || k.tails) && w <= maxTree16W) {
								t.Fatalf("%s: ok = %v", tag, ok)
							}
							if !ok {
								same32(t, tag+"/untouched", gotS, make([]float32, n))
								continue
							}
							same32(t, tag+"/sum", []float32{sum}, []float32{wantSum})
							same32(t, tag+"/s", gotS, wantS)
							if off >= 0 {
								same16(t, tag+"/x", gotX, wantX)
							}
						}
					}
				}
			}
		}
	}
}

// TestAddSumTree checks the float32 first pass with the plan's tree (addSumTree: the
// streamed form of a row that fits sums t in the kernel that ends in the tree) against the
// twin first pass then plan.Plan.Tree: the sum, t and x, streamed or not, with and without
// a bias and x, for every vector W and a row that does not fit.
func TestAddSumTree(t *testing.T) {
	r := rand.New(rand.NewPCG(27, 28))
	g := &goKernels
	for _, name := range simdLevels() {
		k := mustKernels(t, name)
		for _, w := range []int{64, 128, 256, 512, 1024, 2048} {
			p := plan.Plan{H: w, W: w, Lanes: plan.VecLanes}
			for _, n := range []int{w, 3 * w, w + 8} {
				a, b, c := values(r, n, false), values(r, n, true), values(r, n, false)
				x0 := float32(r.NormFloat64())
				for _, bias := range []bool{false, true} {
					cc := c
					if !bias {
						cc = nil
					}
					wantP, wantS, wantX := make([]float32, w), make([]float32, n), make([]float32, n)
					g.addSum(addForm{dt: ops.F32, bias: bias, x: true}, wantP, wantS, wantX, a, b, cc, x0)
					wantSum := p.Tree(wantP)
					for _, withX := range []bool{false, true} {
						for _, stream := range []bool{false, true} {
							tag := fmt.Sprintf("%s/addSumTree/W=%d/n=%d/bias=%v/x=%v/stream=%v", name, w, n, bias, withX, stream)
							gotS := out32(n, nil)
							var gotX []float32
							if withX {
								gotX = out32(n+1, nil)[1:] // x off a vector boundary: nt takes plain stores first
							}
							f := addForm{dt: ops.F32, bias: bias, x: withX, nt: withX, stream: stream}
							sum := k.addSumTree(f, &p, out32(w, nil), gotS, gotX, a, b, cc, x0)
							k.fence()
							same32(t, tag+"/sum", []float32{sum}, []float32{wantSum})
							same32(t, tag+"/s", gotS, wantS)
							if withX {
								same32(t, tag+"/x", gotX, wantX)
							}
						}
					}
				}
			}
		}
	}
}
