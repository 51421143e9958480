package main

import (
	"bytes"
	"testing"
)

// TestVADDPHEncoding checks vaddphYMM against GNU as 2.40, which encoded each Intel-order
// "vaddph ymm(d), ymm(a), ymm(b)" below (AT&T: vaddph %ymm(b), %ymm(a), %ymm(d)), the
// high registers (16-31) in every position included.
func TestVADDPHEncoding(t *testing.T) {
	for _, tc := range []struct {
		d, a, b int
		want    []byte
	}{
		{0, 0, 1, []byte{0x62, 0xf5, 0x7c, 0x28, 0x58, 0xc1}},
		{9, 17, 30, []byte{0x62, 0x15, 0x74, 0x20, 0x58, 0xce}},
		{31, 8, 16, []byte{0x62, 0x25, 0x3c, 0x28, 0x58, 0xf8}},
		{16, 31, 7, []byte{0x62, 0xe5, 0x04, 0x20, 0x58, 0xc7}},
		{3, 12, 25, []byte{0x62, 0x95, 0x1c, 0x28, 0x58, 0xd9}},
		{24, 5, 11, []byte{0x62, 0x45, 0x54, 0x28, 0x58, 0xc3}},
	} {
		if got := vaddphYMM(tc.d, tc.a, tc.b); !bytes.Equal(got, tc.want) {
			t.Errorf("VADDPH ymm%d, ymm%d, ymm%d = % x, GNU as gives % x", tc.d, tc.a, tc.b, got, tc.want)
		}
	}
}
