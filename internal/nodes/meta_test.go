package nodes

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// TestApplyMetaReplacesOnlyItsOwn: applying the next layout's meta replaces what gpupool
// set for the last one, and leaves an admin's labels and taints alone.
func TestApplyMetaReplacesOnlyItsOwn(t *testing.T) {
	admin := corev1.Taint{Key: "admin", Effect: corev1.TaintEffectNoSchedule}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"team": "a"}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{admin}}}
	training := corev1.Taint{Key: "lab.example/training", Value: "true", Effect: corev1.TaintEffectNoSchedule}
	night := &gpupoolv1.Layout{Name: "night", NodeLabels: map[string]string{"lab.example/workload": "training"}, NodeTaints: []corev1.Taint{training}}
	day := &gpupoolv1.Layout{Name: "day"}

	m := ActiveMeta("lab", night, "grid_p100-16q", 16384)
	if HasMeta(n, m) {
		t.Fatal("a bare node has the night meta")
	}
	ApplyMeta(n, m)
	if !HasMeta(n, m) || n.Labels[gpupoolv1.LabelMemoryMiB] != "16384" || n.Labels["team"] != "a" ||
		!reflect.DeepEqual(n.Spec.Taints, []corev1.Taint{admin, training}) {
		t.Fatalf("after night: labels %v taints %v", n.Labels, n.Spec.Taints)
	}
	m = ActiveMeta("lab", day, "grid_p100-4q", 4096)
	if HasMeta(n, m) {
		t.Fatal("a night node has the day meta: the night labels are gpupool's and must go")
	}
	ApplyMeta(n, m)
	if _, ok := n.Labels["lab.example/workload"]; ok || !HasMeta(n, m) || n.Labels["team"] != "a" ||
		!reflect.DeepEqual(n.Spec.Taints, []corev1.Taint{admin}) {
		t.Fatalf("after day: labels %v taints %v", n.Labels, n.Spec.Taints)
	}
	ApplyMeta(n, ParkedMeta("lab"))
	if n.Labels[gpupoolv1.LabelLayout] != "" || n.Labels[gpupoolv1.LabelParked] != "true" || !hasTaint(n, gpupoolv1.TaintParked) {
		t.Fatalf("parked: labels %v taints %v", n.Labels, n.Spec.Taints)
	}
	RemoveMeta(n)
	if !reflect.DeepEqual(n.Labels, map[string]string{"team": "a"}) || !reflect.DeepEqual(n.Spec.Taints, []corev1.Taint{admin}) || len(n.Annotations) != 0 {
		t.Fatalf("after RemoveMeta: labels %v taints %v annotations %v", n.Labels, n.Spec.Taints, n.Annotations)
	}
}

// TestCordonKeepsAnAdminsCordon: gpupool undoes its own cordon, never an admin's.
func TestCordonKeepsAnAdminsCordon(t *testing.T) {
	ours := &corev1.Node{}
	Cordon(ours)
	if !ours.Spec.Unschedulable || !CordonedByUs(ours) {
		t.Fatal("Cordon: not cordoned by gpupool")
	}
	Uncordon(ours)
	if ours.Spec.Unschedulable || CordonedByUs(ours) {
		t.Error("Uncordon left gpupool's cordon")
	}

	admins := &corev1.Node{Spec: corev1.NodeSpec{Unschedulable: true}}
	Cordon(admins)
	if CordonedByUs(admins) {
		t.Error("an admin's cordon taken for gpupool's")
	}
	Uncordon(admins)
	RemoveMeta(admins)
	if !admins.Spec.Unschedulable {
		t.Error("an admin's cordon undone")
	}
}

func TestSetManagedLabel(t *testing.T) {
	n := &corev1.Node{}
	SetManagedLabel(n, gpupoolv1.LabelPool, "lab")
	SetManagedLabel(n, gpupoolv1.LabelPool, "lab")
	if n.Labels[gpupoolv1.LabelPool] != "lab" || n.Annotations[gpupoolv1.AnnotationManagedLabels] != gpupoolv1.LabelPool {
		t.Fatalf("labels %v annotations %v", n.Labels, n.Annotations)
	}
	RemoveMeta(n)
	if _, ok := n.Labels[gpupoolv1.LabelPool]; ok {
		t.Error("a managed label survived RemoveMeta")
	}
}
