package memo

import "testing"

// TestLast: a value comes back under its key only, a held memo is busy for others, and a
// store replaces the value and key.
func TestLast(t *testing.T) {
	var m Last[int, string]
	var got string
	k1, k2 := 1, 2
	if m.Load(&k1, &got) {
		t.Fatal("an empty memo returned a value")
	}
	v := "one"
	m.Store(&k1, &v)
	if !m.Load(&k1, &got) || got != "one" {
		t.Fatalf("Load(1) = %q", got)
	}
	if m.Load(&k2, &got) {
		t.Fatal("another key returned the value")
	}
	p, ok := m.Hold(&k1)
	if !ok || *p != "one" {
		t.Fatal("Hold(1) failed")
	}
	if m.Load(&k1, &got) {
		t.Fatal("a held memo returned its value to another caller")
	}
	w := "two"
	m.Store(&k2, &w) // busy: dropped
	m.Release()
	if !m.Load(&k1, &got) || got != "one" {
		t.Fatal("a store while held replaced the value")
	}
	m.Store(&k2, &w)
	if m.Load(&k1, &got) || !m.Load(&k2, &got) || got != "two" {
		t.Fatalf("after Store(2): %q", got)
	}
}
