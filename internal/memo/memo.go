// Package memo keeps one value under a comparable key: a prepared op's last call on device
// tensors, so that a call with the same key reuses what the last one built (the root
// package's validated backend call, dawn's built callSpec) instead of building it again.
// Safe for concurrent use; a caller that finds the memo busy is told "not there" and builds
// its own, so no call waits on another.
package memo

import "sync"

// Last is the last value stored and its key; the zero value is empty.
type Last[K comparable, V any] struct {
	mu  sync.Mutex
	ok  bool
	key K
	val V
}

// Hold returns the value when key matches the stored one, with the memo locked: the caller
// uses the value in place and then calls Release. false when the key differs, nothing is
// stored, or another caller holds the memo.
func (m *Last[K, V]) Hold(key *K) (*V, bool) {
	if !m.mu.TryLock() {
		return nil, false
	}
	if !m.ok || m.key != *key {
		m.mu.Unlock()
		return nil, false
	}
	return &m.val, true
}

// Release ends a Hold.
func (m *Last[K, V]) Release() { m.mu.Unlock() }

// HoldLast returns the stored key and value with the memo locked: the caller compares the
// key in place (building a key to compare can cost more than the comparison), uses the value
// if it matches, and calls Release either way. false when nothing is stored or another caller
// holds the memo.
func (m *Last[K, V]) HoldLast() (*K, *V, bool) {
	if !m.mu.TryLock() {
		return nil, nil, false
	}
	if !m.ok {
		m.mu.Unlock()
		return nil, nil, false
	}
	return &m.key, &m.val, true
}

// Store keeps a copy of v under key, unless another caller holds the memo.
func (m *Last[K, V]) Store(key *K, v *V) {
	if !m.mu.TryLock() {
		return
	}
	m.ok, m.key, m.val = true, *key, *v
	m.mu.Unlock()
}
