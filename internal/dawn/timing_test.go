//go:build cgo

package dawn

import (
	"context"
	"testing"
)

// TestRuntimeTimedExact checks that the device was opened with timestamp_quantization
// disabled: quantized, every pass time is a whole multiple of 65.536 us.
func TestRuntimeTimedExact(t *testing.T) {
	d := openRuntimeDevice(t, deviceOptions{})
	if !d.hasFeature("TimestampQuery") {
		t.Skip("no TimestampQuery")
	}
	a := newAffine(t, d, 1<<16)
	out := make([]byte, 4<<16)
	const quantum = 65536
	var times []int64
	for range 5 {
		ns, err := d.runTimed(context.Background(), a.p, []binding{{Binding: 0, Buffer: a.x}, {Binding: 1, Buffer: a.y}},
			[3]uint32{1024, 1, 1}, []readback{{Src: a.y, Dst: out}})
		if err != nil {
			t.Fatal(err)
		}
		times = append(times, int64(ns))
		if int64(ns)%quantum != 0 {
			return
		}
	}
	t.Errorf("every pass time is a multiple of %d ns (%v): timestamps are still quantized", quantum, times)
}
