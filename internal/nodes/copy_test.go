package nodes

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestWriteCopy: every change gpupool makes to a node (the marks, the parked and layout
// metadata, cordons, warnings, their removal) changes the copy and never the node it was
// made from; the copy's status is the node's own, not a copy of it.
func TestWriteCopy(t *testing.T) {
	orig := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n", ResourceVersion: "7",
			Labels:      map[string]string{"a": "1", "gpupool.dev/pool": "p"},
			Annotations: map[string]string{"b": "2"}},
		Spec: corev1.NodeSpec{Taints: make([]corev1.Taint, 1, 4), ProviderID: "vsphere://x"},
		Status: corev1.NodeStatus{Capacity: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
	orig.Spec.Taints[0] = corev1.Taint{Key: "other", Effect: corev1.TaintEffectNoSchedule}
	want := orig.DeepCopy()
	changes := map[string]func(*corev1.Node){
		"parked":   func(n *corev1.Node) { ApplyMeta(n, ParkedMeta("p")) },
		"state":    func(n *corev1.Node) { SetState(n, "draining", "p") },
		"cordon":   Cordon,
		"uncordon": Uncordon,
		"strip":    StripMarks,
		"remove":   RemoveMeta,
		"label":    func(n *corev1.Node) { SetManagedLabel(n, "gpupool.dev/layout", "night") },
		"owner":    func(n *corev1.Node) { SetMarksOwner(n, "p") },
	}
	for name, change := range changes {
		c := WriteCopy(orig)
		change(c)
		c.Labels["x"], c.Annotations["y"] = "3", "4"
		c.Spec.Taints = append(c.Spec.Taints, corev1.Taint{Key: "z", Effect: corev1.TaintEffectNoExecute})
		if !equality.Semantic.DeepEqual(orig, want) {
			t.Fatalf("%s: the node a copy was made from changed: %+v", name, orig)
		}
		if &c.Status.Conditions[0] != &orig.Status.Conditions[0] {
			t.Errorf("%s: the copy's status was copied, want the node's own (read only)", name)
		}
	}
	// The spare room of the node's taints is not the copy's.
	if full := orig.Spec.Taints[:2]; full[1].Key != "" {
		t.Errorf("a copy's taint was written into the node's taints' room: %v", full)
	}
}
