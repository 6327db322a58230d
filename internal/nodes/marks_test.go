package nodes

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

func TestMarksOwnedBy(t *testing.T) {
	node := func(name, owner, pool string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}, Annotations: map[string]string{}}}
		if owner != "" {
			n.Annotations[gpupoolv1.AnnotationMarkedBy] = owner
		}
		if pool != "" {
			n.Labels[gpupoolv1.LabelPool] = pool
		}
		return n
	}
	workers := map[string]bool{"w": true}
	cases := []struct {
		n    *corev1.Node
		want bool
	}{
		{node("x", "a", ""), true},
		{node("x", "b", ""), false},
		{node("x", "b", "a"), false}, // the owner record wins
		{node("w", "b", ""), false},  // another pool's node, even if a stale status names it
		{node("x", "", "a"), true},
		{node("x", "", "b"), false},
		{node("w", "", "b"), false},
		{node("w", "", ""), true}, // a worker's node never relabelled, marked before owners were recorded
		{node("x", "", ""), false},
	}
	for i, c := range cases {
		if got := MarksOwnedBy(c.n, "a", workers); got != c.want {
			t.Errorf("%d: MarksOwnedBy(%s owner %q pool %q) = %v, want %v", i, c.n.Name, c.n.Annotations[gpupoolv1.AnnotationMarkedBy], c.n.Labels[gpupoolv1.LabelPool], got, c.want)
		}
	}
}

func TestStripMarksKeepsParkedMarks(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n",
		Labels:      map[string]string{gpupoolv1.LabelState: gpupoolv1.StateParked, gpupoolv1.LabelParked: "true", gpupoolv1.LabelPool: "a"},
		Annotations: map[string]string{gpupoolv1.AnnotationMarkedBy: "a", gpupoolv1.AnnotationCordoned: "true"}}}
	n.Spec.Unschedulable = true
	SetWarning(n, time.Now(), true)
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: gpupoolv1.TaintParked, Effect: corev1.TaintEffectNoSchedule})
	StripMarks(n)
	if HasMarks(n) || n.Labels[gpupoolv1.LabelParked] != "true" || n.Labels[gpupoolv1.LabelPool] != "a" || !n.Spec.Unschedulable || !hasTaint(n, gpupoolv1.TaintParked) || n.Annotations[gpupoolv1.AnnotationCordoned] != "true" {
		t.Errorf("after StripMarks: labels %v annotations %v taints %v unschedulable %v", n.Labels, n.Annotations, n.Spec.Taints, n.Spec.Unschedulable)
	}
}

func hasTaint(n *corev1.Node, key string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}
