package controllers

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/plan"
)

// selectionMemo is, by pool, what its select layouts last selected.
type selectionMemo struct {
	mu     sync.Mutex
	byPool map[string]selectionEntry
}

type selectionEntry struct {
	uid     types.UID
	layouts map[string]plan.Selected
}

func (m *selectionMemo) last(pool *gpupoolv1.GPUPoolProfile) map[string]plan.Selected {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.byPool[pool.Name]; ok && e.uid == pool.UID {
		return e.layouts
	}
	return nil
}

func (m *selectionMemo) remember(pool *gpupoolv1.GPUPoolProfile, layouts map[string]plan.Selected) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.byPool == nil {
		m.byPool = map[string]selectionEntry{}
	}
	m.byPool[pool.Name] = selectionEntry{uid: pool.UID, layouts: layouts}
}

func (m *selectionMemo) forget(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.byPool, name)
}
