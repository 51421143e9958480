//go:build cgo

package dawn

import (
	"reflect"
	"testing"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// TestCallKeyHashEqual: keys that differ in a part in use are unequal (and, here, hash
// apart); keys that differ only past their used binds are the same bind group.
func TestCallKeyHashEqual(t *testing.T) {
	var p pipeline
	var b1, b2 buffer
	base := func() callKey {
		var s callSpec
		s.reset("test")
		s.key.pipe = &p
		s.setParams(make([]byte, 16))
		s.bind(bindRef{binding: 1, buf: &b1, scratch: atBuffer, size: 64})
		s.scratchFor(64, usageStorage)
		return s.key
	}
	k := base()
	if same := base(); !k.equal(&same) || k.hash() != same.hash() {
		t.Fatal("equal keys differ")
	}
	tail := base()
	tail.binds[5] = bindRef{binding: 9, buf: &b2} // past nbinds: not part of the bind group
	if !k.equal(&tail) || k.hash() != tail.hash() {
		t.Fatal("a key differs by a bind it does not use")
	}
	for name, change := range map[string]func(*callKey){
		"pipeline": func(c *callKey) { c.pipe = nil },
		"params":   func(c *callKey) { c.params[3] = 1 },
		"buffer":   func(c *callKey) { c.binds[0].buf = &b2 },
		"binding":  func(c *callKey) { c.binds[0].binding = 2 },
		"size":     func(c *callKey) { c.binds[0].size = 128 },
		"write":    func(c *callKey) { c.binds[0].write = true },
		"scratch":  func(c *callKey) { c.scratch[0].size = 128 },
		"binds":    func(c *callKey) { c.binds[1] = bindRef{binding: 2, buf: &b2}; c.nbinds++ },
	} {
		o := base()
		change(&o)
		if k.equal(&o) {
			t.Errorf("%s: keys that differ are equal", name)
		}
		if k.hash() == o.hash() {
			t.Errorf("%s: keys that differ hash alike", name)
		}
	}
}

// TestCallSpecReset: a pooled spec reset after a call is a new spec in every part a call
// reads, and keeps no pointer of the last call (reset clears only the entries it used);
// only the stale parameter bytes past nparams, which nothing reads, may remain.
func TestCallSpecReset(t *testing.T) {
	var p pipeline
	var b buffer
	var s callSpec
	s.reset("first")
	s.key.pipe = &p
	s.setParams(make([]byte, 32))
	for i := range 5 {
		s.bind(bindRef{binding: uint32(i), buf: &b, scratch: atBuffer, size: 64})
	}
	s.scratchFor(64, usageStorage)
	s.pre(copyOp{src: &b, dst: &b, size: 4})
	s.post(copyOp{src: &b, dst: &b, size: 4, dstIDStatus: true})
	s.write(writeOp{data: []byte{1, 2, 3, 4}})
	s.read(readOp{buf: &b, dst: make([]byte, 4)})
	s.groups, s.zeroBytes, s.idCheck, s.wait = [3]uint32{1, 2, 3}, 8, true, true
	s.clock = new(ops.KernelClock)

	s.reset("second")
	want := callSpec{name: "second"}
	want.key.params = s.key.params
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("after reset:\n got %+v\nwant %+v", s, want)
	}
}
