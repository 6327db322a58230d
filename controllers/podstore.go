package controllers

import (
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
)

// podStore is a node's pods as the node's watch keeps them (runPodWatch): a plain store
// of lean pods (transformPod) whose writes call changed when a pod is deleted, finishes,
// or changes its do-not-disrupt annotation (podUpdateMatters). It takes the place of a
// shared informer per node, whose delta queue, listener and processor goroutines the
// manager paid for every pool node: at 64 hosts (1,281 nodes) the listeners' ring
// buffers alone held 23 of the 90 MB of heap live at rest (pprof during
// make bench-transition; docs/performance.md).
type podStore struct {
	toolscache.Store
	changed func()
	// synced is set by the first Replace: the watch's initial list is in.
	synced atomic.Bool
}

func newPodStore(changed func()) *podStore {
	return &podStore{Store: toolscache.NewStore(toolscache.MetaNamespaceKeyFunc), changed: changed}
}

// Add is Update: a watch's Added event for a pod the store holds (after a reconnect)
// counts as a change of it.
func (s *podStore) Add(obj any) error { return s.Update(obj) }

func (s *podStore) Update(obj any) error {
	obj, _ = transformPod(obj)
	old, existed, _ := s.Get(obj)
	if err := s.Store.Update(obj); err != nil {
		return err
	}
	if existed && podUpdateMatters(old, obj) {
		s.changed()
	}
	return nil
}

func (s *podStore) Delete(obj any) error {
	if err := s.Store.Delete(obj); err != nil {
		return err
	}
	s.changed()
	return nil
}

// Replace takes a new list (the initial one, or a relist after the watch was lost) and
// calls changed once when, against the pods held before, one is gone or changed what
// matters, as the informer's deletes and updates of a relist did.
func (s *podStore) Replace(list []any, rv string) error {
	before := map[string]any{}
	for _, o := range s.List() {
		if k, err := toolscache.MetaNamespaceKeyFunc(o); err == nil {
			before[k] = o
		}
	}
	matters := false
	for i, o := range list {
		list[i], _ = transformPod(o)
		k, err := toolscache.MetaNamespaceKeyFunc(list[i])
		if err != nil {
			continue
		}
		if old, ok := before[k]; ok {
			matters = matters || podUpdateMatters(old, list[i])
			delete(before, k)
		}
	}
	if err := s.Store.Replace(list, rv); err != nil {
		return err
	}
	s.synced.Store(true)
	if matters || len(before) > 0 {
		s.changed()
	}
	return nil
}

// pods is what the store holds.
func (s *podStore) pods() []corev1.Pod {
	items := s.List()
	out := make([]corev1.Pod, 0, len(items))
	for _, it := range items {
		if p, ok := it.(*corev1.Pod); ok {
			out = append(out, *p)
		}
	}
	return out
}
