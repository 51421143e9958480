package main

import (
	"fmt"

	"github.com/mmcloughlin/avo/ir"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// The avx512fp16 kernels: the avx512 width's, with AVX512-FP16 arithmetic where it gives
// the plan's bits. Go's assembler has no AVX512-FP16 instructions, so each is emitted as
// an instruction the register allocator sees (operands, inputs, outputs), and encodeFP16
// rewrites it, once registers are allocated, into the BYTE directives of its encoding
// after a comment that names it.

// embedF16FP16 emits EmbedLayerNorm's staged binary16 sums with VADDPH: rnd16(w + p) and
// rnd16(rnd16(w + g) + p) are each one binary16 addition. Adding in binary16 gives the
// plan's double rounding exactly: the float32 sum of two binary16 values rounded to
// binary16 is their correctly rounded binary16 sum, as float32 has at least 2·11+2 bits.
// The operands keep the twin's order (w first, then the partial sum first), which decides
// a NaN's payload.
func embedF16FP16(v isa) {
	v.embedSums(v.name+"fp16", "(adding in binary16: VADDPH, nearest-even as Go leaves MXCSR).", func(bits, w, p, g reg.GPVirtual, i reg.Register, off int, k reg.Register) reg.VecVirtual {
		h, b := c.YMM(), c.YMM()
		ld := func(m Mem, r reg.VecVirtual) { // the masked-off lanes +0: their sums are never stored
			if k != nil {
				c.VMOVDQU16_Z(m, k, r)
				return
			}
			c.VMOVDQU16(m, r)
		}
		ld(u16(w, i, off), h)
		if g != nil {
			ld(u16(g, i, off), b)
			vaddph(b, h, h)
		}
		ld(u16(p, i, off), b)
		vaddph(b, h, h)
		v.store16(h, u16(bits, i, off), false, k)
		f := v.vec()
		c.VCVTPH2PS(h, f)
		return f
	})
}

// vaddph emits dst = a + b on 16 binary16 lanes (YMM), a being the first source operand
// (Intel's VADDPH dst, a, b).
func vaddph(b, a, dst reg.VecVirtual) {
	c.Instruction(&ir.Instruction{Opcode: "VADDPH", Operands: []Op{b, a, dst},
		Inputs: []Op{b, a}, Outputs: []Op{dst}, ISA: []string{"AVX512FP16"}})
}

// encodeFP16 replaces every VADDPH of the file's functions by its EVEX encoding.
func encodeFP16(f *ir.File) error {
	for _, fn := range f.Functions() {
		var nodes []ir.Node
		for _, n := range fn.Nodes {
			i, ok := n.(*ir.Instruction)
			if !ok || i.Opcode != "VADDPH" {
				nodes = append(nodes, n)
				continue
			}
			var r [3]int // b, a, dst
			for k, op := range i.Operands {
				p, ok := op.(reg.Physical)
				if !ok || p.Kind() != reg.KindVector || p.Size() != 32 {
					return fmt.Errorf("%s: VADDPH operand %s: want an allocated YMM register", fn.Name, op.Asm())
				}
				r[k] = int(p.PhysicalIndex())
			}
			nodes = append(nodes, ir.NewComment(fmt.Sprintf("VADDPH %s, %s, %s", i.Operands[0].Asm(), i.Operands[1].Asm(), i.Operands[2].Asm())))
			for _, x := range vaddphYMM(r[2], r[1], r[0]) {
				nodes = append(nodes, &ir.Instruction{Opcode: "BYTE", Operands: []Op{U8(x)}})
			}
		}
		fn.Nodes = nodes
	}
	return nil
}

// vaddphYMM is the encoding of VADDPH ymm(d), ymm(a), ymm(b) (Intel operand order):
// EVEX.256.NP.MAP5.W0 58 /r with a register operand, no masking, no broadcast or embedded
// rounding.
func vaddphYMM(d, a, b int) []byte {
	inv := func(x, bit int) byte { return byte(^(x >> bit) & 1) }
	p0 := inv(d, 3)<<7 | inv(b, 4)<<6 | inv(b, 3)<<5 | inv(d, 4)<<4 | 0b101 // R X B R' 0 mmm (map 5)
	p1 := byte(^a&15)<<3 | 1<<2                                             // W=0, vvvv = ~a, 1, pp = none
	p2 := byte(0b01)<<5 | inv(a, 4)<<3                                      // z=0, L'L = 256 bits, b=0, V' = ~a bit 4, aaa=0
	modrm := byte(0b11<<6 | (d&7)<<3 | b&7)
	return []byte{0x62, p0, p1, p2, 0x58, modrm}
}
