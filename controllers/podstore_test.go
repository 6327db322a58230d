package controllers

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPodStoreWakesOnWhatADrainWaitsFor drives a node's pod store as its watch does
// (the initial list, watch events, a relist after a lost watch) and counts the wake-ups:
// one for each pod deleted, finished, or whose do-not-disrupt annotation changed, none
// for the other changes nor for the initial list; and the store holds lean pods.
func TestPodStoreWakesOnWhatADrainWaitsFor(t *testing.T) {
	pod := func(name string, phase corev1.PodPhase, dnd string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "apps"},
			Spec:   corev1.PodSpec{NodeName: "n", Containers: []corev1.Container{{Name: "c", Image: "i"}}},
			Status: corev1.PodStatus{Phase: phase}}
		if dnd != "" {
			p.Annotations = map[string]string{AnnotationDoNotDisrupt: dnd}
		}
		return p
	}
	wakes := 0
	s := newPodStore(func() { wakes++ })
	step := func(what string, err error, want int) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if wakes != want {
			t.Fatalf("%s: %d wake-ups in all, want %d", what, wakes, want)
		}
	}
	if s.synced.Load() {
		t.Fatal("synced before the initial list")
	}
	step("initial list", s.Replace([]any{pod("a", corev1.PodRunning, ""), pod("b", corev1.PodRunning, "")}, "1"), 0)
	if !s.synced.Load() {
		t.Fatal("not synced after the initial list")
	}
	step("a pod added", s.Add(pod("c", corev1.PodPending, "")), 0)
	step("a pod running", s.Update(pod("c", corev1.PodRunning, "")), 0)
	step("do-not-disrupt set", s.Update(pod("a", corev1.PodRunning, "true")), 1)
	step("the same again", s.Update(pod("a", corev1.PodRunning, "true")), 1)
	step("a pod finished", s.Update(pod("b", corev1.PodSucceeded, "")), 2)
	step("a pod deleted", s.Delete(pod("c", corev1.PodRunning, "")), 3)
	// A relist after a lost watch: b is unchanged, a lost its annotation: one wake-up.
	step("relist, one change", s.Replace([]any{pod("a", corev1.PodRunning, ""), pod("b", corev1.PodSucceeded, "")}, "2"), 4)
	step("relist, a pod gone", s.Replace([]any{pod("a", corev1.PodRunning, "")}, "3"), 5)
	step("relist, nothing changed", s.Replace([]any{pod("a", corev1.PodRunning, "")}, "4"), 5)
	step("relist, a pod new", s.Replace([]any{pod("a", corev1.PodRunning, ""), pod("d", corev1.PodRunning, "")}, "5"), 5)
	items := s.List()
	if len(items) != 2 {
		t.Fatalf("store holds %d pods, want a and d", len(items))
	}
	for _, it := range items {
		if p := it.(*corev1.Pod); len(p.Spec.Containers) != 0 {
			t.Errorf("pod %s held whole (%d containers), want lean", p.Name, len(p.Spec.Containers))
		}
	}
}
