package controllers

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// conversionMemo is, by pool, what its layouts by count last resolved to.
type conversionMemo struct {
	mu     sync.Mutex
	byPool map[string]conversionEntry
}

type conversionEntry struct {
	uid     types.UID
	layouts map[string]gpupoolv1.Layout
}

func (m *conversionMemo) last(pool *gpupoolv1.GPUPoolProfile) map[string]gpupoolv1.Layout {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.byPool[pool.Name]; ok && e.uid == pool.UID {
		return e.layouts
	}
	return nil
}

func (m *conversionMemo) remember(pool *gpupoolv1.GPUPoolProfile, layouts map[string]gpupoolv1.Layout) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.byPool == nil {
		m.byPool = map[string]conversionEntry{}
	}
	// Only the layouts resolved this time: one that failed starts from its candidates.
	m.byPool[pool.Name] = conversionEntry{uid: pool.UID, layouts: layouts}
}

func (m *conversionMemo) forget(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.byPool, name)
}
