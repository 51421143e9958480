package memo

import "testing"

// load is the value under key, through Hold.
func load(m *Last[int, string], key int) (string, bool) {
	v, ok := m.Hold(&key)
	if !ok {
		return "", false
	}
	defer m.Release()
	return *v, true
}

// TestLast: a value comes back under its key only, a held memo is busy for others, and a
// store replaces the value and key.
func TestLast(t *testing.T) {
	var m Last[int, string]
	if _, ok := load(&m, 1); ok {
		t.Fatal("an empty memo returned a value")
	}
	if _, _, ok := m.HoldLast(); ok {
		t.Fatal("HoldLast on an empty memo succeeded")
	}
	k1, k2 := 1, 2
	v := "one"
	m.Store(&k1, &v)
	if got, ok := load(&m, 1); !ok || got != "one" {
		t.Fatalf("Hold(1) = %q, %v", got, ok)
	}
	if _, ok := load(&m, 2); ok {
		t.Fatal("another key returned the value")
	}
	p, ok := m.Hold(&k1)
	if !ok || *p != "one" {
		t.Fatal("Hold(1) failed")
	}
	if _, ok := load(&m, 1); ok {
		t.Fatal("a held memo returned its value to another caller")
	}
	if _, _, ok := m.HoldLast(); ok {
		t.Fatal("HoldLast on a held memo succeeded")
	}
	w := "two"
	m.Store(&k2, &w) // busy: dropped
	m.Release()
	if got, ok := load(&m, 1); !ok || got != "one" {
		t.Fatal("a store while held replaced the value")
	}
	m.Store(&k2, &w)
	if _, ok := load(&m, 1); ok {
		t.Fatal("the old key still matched after Store(2)")
	}
	k, val, ok := m.HoldLast()
	if !ok || *k != 2 || *val != "two" {
		t.Fatalf("HoldLast after Store(2): %v, %v, %v", k, val, ok)
	}
	if _, ok := load(&m, 2); ok {
		t.Fatal("a memo held by HoldLast returned its value to another caller")
	}
	m.Release()
	if got, ok := load(&m, 2); !ok || got != "two" {
		t.Fatalf("after Release: %q, %v", got, ok)
	}
}
