package nodes

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// TestChanged: the node lifecycle controller's taints on a parked node, and heartbeats,
// do not wake the pools; what the plan reads does.
func TestChanged(t *testing.T) {
	base := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{gpupoolv1.LabelPool: "p"},
		Annotations: map[string]string{gpupoolv1.AnnotationCordoned: "true", "node.alpha.kubernetes.io/ttl": "0"}}}
	changed := func(f func(n *corev1.Node)) bool {
		n := base.DeepCopy()
		f(n)
		return Changed(base, n)
	}
	for name, tc := range map[string]struct {
		f    func(*corev1.Node)
		want bool
	}{
		"unreachable taint": {func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "node.kubernetes.io/unreachable", Effect: corev1.TaintEffectNoExecute})
		}, false},
		"heartbeat": {func(n *corev1.Node) {
			n.Status.Conditions = []corev1.NodeCondition{{Type: "MemoryPressure", LastHeartbeatTime: metav1.Now()}}
		}, false},
		"other annotation": {func(n *corev1.Node) { n.Annotations["node.alpha.kubernetes.io/ttl"] = "15" }, false},
		"ready": {func(n *corev1.Node) {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
		}, true},
		"readiness condition": {func(n *corev1.Node) {
			n.Status.Conditions = []corev1.NodeCondition{{Type: "VGPULicensed", Status: corev1.ConditionTrue}}
		}, true},
		"GPUs advertised": {func(n *corev1.Node) {
			n.Status.Allocatable = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
		}, true},
		"cordon": {func(n *corev1.Node) { n.Spec.Unschedulable = true }, true},
		"label":  {func(n *corev1.Node) { n.Labels["lab.example/workload"] = "x" }, true},
		"layout taint": {func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "lab.example/training", Effect: corev1.TaintEffectNoSchedule})
		}, true},
		"gpupool annotation":  {func(n *corev1.Node) { delete(n.Annotations, gpupoolv1.AnnotationCordoned) }, true},
		"Cluster API Machine": {func(n *corev1.Node) { n.Annotations[clusterv1.MachineAnnotation] = "m-1" }, true},
		"providerID":          {func(n *corev1.Node) { n.Spec.ProviderID = "vsphere://4203" }, true},
		"not-ready taint": {func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "node.cloudprovider.kubernetes.io/uninitialized", Effect: corev1.TaintEffectNoSchedule})
		}, false},
	} {
		if got := changed(tc.f); got != tc.want {
			t.Errorf("%s: wakes the pools = %v, want %v", name, got, tc.want)
		}
	}
}

// TestChangedParked: a node gpupool marked parked going dark (NotReady, its conditions
// Unknown, its GPUs withdrawn) does not wake the pools, in whatever order the kubelet's
// and the node lifecycle controller's updates come; the same on a node in any other
// state does, and so does a parked node coming back Ready, or any change to what gpupool
// and the layouts write.
func TestChangedParked(t *testing.T) {
	ready := func(s corev1.ConditionStatus) corev1.NodeCondition {
		return corev1.NodeCondition{Type: corev1.NodeReady, Status: s}
	}
	node := func(state string, conds ...corev1.NodeCondition) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{gpupoolv1.LabelPool: "p", gpupoolv1.LabelState: state}},
			Status: corev1.NodeStatus{Conditions: conds, Allocatable: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}
	}
	dark := func(state string, s corev1.ConditionStatus) *corev1.Node {
		n := node(state, ready(s), corev1.NodeCondition{Type: "VGPULicensed", Status: corev1.ConditionUnknown})
		n.Status.Allocatable = nil
		return n
	}
	for _, state := range []string{gpupoolv1.StateParked, gpupoolv1.StateDraining, gpupoolv1.StateReady, gpupoolv1.StatePending, gpupoolv1.StateReconfiguring, ""} {
		parked := state == gpupoolv1.StateParked
		for name, tc := range map[string]struct {
			o, n *corev1.Node
			want bool
		}{
			"goes NotReady":          {node(state, ready(corev1.ConditionTrue)), dark(state, corev1.ConditionFalse), !parked},
			"goes Unknown":           {node(state, ready(corev1.ConditionTrue)), dark(state, corev1.ConditionUnknown), !parked},
			"False to Unknown":       {dark(state, corev1.ConditionFalse), dark(state, corev1.ConditionUnknown), !parked},
			"loses its Ready":        {node(state, ready(corev1.ConditionTrue)), node(state), !parked},
			"comes back Ready":       {dark(state, corev1.ConditionUnknown), node(state, ready(corev1.ConditionTrue)), true},
			"state label while dark": {dark(state, corev1.ConditionUnknown), dark(state+"x", corev1.ConditionUnknown), true},
			"cordon while dark":      {dark(state, corev1.ConditionUnknown), func() *corev1.Node { n := dark(state, corev1.ConditionUnknown); n.Spec.Unschedulable = true; return n }(), true},
			"annotation while dark": {dark(state, corev1.ConditionUnknown), func() *corev1.Node {
				n := dark(state, corev1.ConditionUnknown)
				n.Annotations = map[string]string{gpupoolv1.AnnotationCordoned: "true"}
				return n
			}(), true},
			"GPUs while Ready": {node(state, ready(corev1.ConditionTrue)), func() *corev1.Node {
				n := node(state, ready(corev1.ConditionTrue))
				n.Status.Allocatable = nil
				return n
			}(), true},
			"nothing while dark":    {dark(state, corev1.ConditionUnknown), dark(state, corev1.ConditionUnknown), false},
			"heartbeat while Ready": {node(state, ready(corev1.ConditionTrue)), node(state, corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}), false},
		} {
			if got := Changed(tc.o, tc.n); got != tc.want {
				t.Errorf("state %q, %s: wakes the pools = %v, want %v", state, name, got, tc.want)
			}
		}
	}
}
