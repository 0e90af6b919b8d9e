// Package cow holds the copy-on-write map that the sale's read-mostly state
// lives in: read by every request without a lock, replaced whole on each
// change. It suits maps that are small and change rarely (a sale has few
// vouchers), where a read-write lock would put every buy through one
// shared cache line.
package cow

import (
	"maps"
	"sync"
	"sync/atomic"
)

// Map is a map read without a lock and replaced whole by Update. Its zero
// value is empty and ready; it must not be copied after first use.
type Map[K comparable, V any] struct {
	mu sync.Mutex // held to replace m
	m  atomic.Pointer[map[K]V]
}

// Load returns the value stored for k, and whether there is one.
func (m *Map[K, V]) Load(k K) (V, bool) {
	if p := m.m.Load(); p != nil {
		v, ok := (*p)[k]
		return v, ok
	}
	var zero V
	return zero, false
}

// Len returns how many keys the map holds.
func (m *Map[K, V]) Len() int {
	if p := m.m.Load(); p != nil {
		return len(*p)
	}
	return 0
}

// Update calls edit with a copy of the map, one writer at a time, and
// stores the copy if edit returns true; else the map is left as it was.
// Readers see the map before or after, never a half-made edit. edit must
// not keep the map it is given, nor call the Map's methods.
func (m *Map[K, V]) Update(edit func(next map[K]V) bool) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	var next map[K]V
	if p := m.m.Load(); p != nil {
		next = maps.Clone(*p)
	}
	if next == nil {
		next = make(map[K]V, 1)
	}
	if !edit(next) {
		return false
	}
	m.m.Store(&next)
	return true
}
