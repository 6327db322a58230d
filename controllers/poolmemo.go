package controllers

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// poolMemo remembers one value per pool, from one pass to the next (what its layouts by
// count last resolved to, what its select layouts last selected), so that a pass starts
// from it (expandSpec). A pool deleted and created again under its name (another UID)
// starts afresh. Safe for concurrent use: the demand watch reads it beside the pass.
type poolMemo[T any] struct {
	mu     sync.Mutex
	byPool map[string]poolMemoEntry[T]
}

type poolMemoEntry[T any] struct {
	uid types.UID
	v   T
}

// last is what was remembered for pool (the zero value: nothing).
func (m *poolMemo[T]) last(pool *gpupoolv1.GPUPoolProfile) T {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.byPool[pool.Name]; ok && e.uid == pool.UID {
		return e.v
	}
	var zero T
	return zero
}

func (m *poolMemo[T]) remember(pool *gpupoolv1.GPUPoolProfile, v T) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.byPool == nil {
		m.byPool = map[string]poolMemoEntry[T]{}
	}
	m.byPool[pool.Name] = poolMemoEntry[T]{uid: pool.UID, v: v}
}

func (m *poolMemo[T]) forget(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.byPool, name)
}

// all is every value remembered, in no order.
func (m *poolMemo[T]) all() []T {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]T, 0, len(m.byPool))
	for _, e := range m.byPool {
		out = append(out, e.v)
	}
	return out
}
