package controllers

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nodes"
)

// TestNeedsLock: a node change that touches only labels, annotations and
// spec.unschedulable (each merged key by key, or one value) needs no resourceVersion in
// its merge patch; any other change does, the taints first (a list, replaced whole).
func TestNeedsLock(t *testing.T) {
	base := func() *corev1.Node {
		return &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "n", ResourceVersion: "7", Labels: map[string]string{"a": "1"}, Annotations: map[string]string{"x": "1"}},
			Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}}},
			Status:     corev1.NodeStatus{Capacity: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}},
		}
	}
	at := time.Date(2031, 6, 15, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name   string
		change func(*corev1.Node)
		want   bool
	}{
		{"nothing", func(*corev1.Node) {}, false},
		{"a label added", func(n *corev1.Node) { n.Labels["b"] = "2" }, false},
		{"a label removed", func(n *corev1.Node) { delete(n.Labels, "a") }, false},
		{"labels from none", func(n *corev1.Node) { n.Labels = nil; n.Labels = map[string]string{"c": "3"} }, false},
		{"an annotation", func(n *corev1.Node) { n.Annotations["y"] = "2" }, false},
		{"cordon", func(n *corev1.Node) { n.Spec.Unschedulable = true }, false},
		{"the state label", func(n *corev1.Node) { nodes.SetState(n, gpupoolv1.StateParked, "daynight") }, false},
		{"labels, annotations and cordon", func(n *corev1.Node) {
			n.Labels["b"], n.Annotations["y"], n.Spec.Unschedulable = "2", "2", true
		}, false},
		{"a taint added", func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "t", Effect: corev1.TaintEffectNoSchedule})
		}, true},
		{"a taint removed", func(n *corev1.Node) { n.Spec.Taints = nil }, true},
		{"a taint's effect", func(n *corev1.Node) { n.Spec.Taints[0].Effect = corev1.TaintEffectNoExecute }, true},
		{"the draining-soon warning", func(n *corev1.Node) { nodes.SetWarning(n, at, true) }, true},
		{"a taint and a label", func(n *corev1.Node) { n.Labels["b"] = "2"; n.Spec.Taints = nil }, true},
		{"the provider id", func(n *corev1.Node) { n.Spec.ProviderID = "vsphere://x" }, true},
		{"a finalizer", func(n *corev1.Node) { n.Finalizers = []string{"f"} }, true},
		{"the status", func(n *corev1.Node) { n.Status.Capacity = nil }, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := base()
			after := before.DeepCopy()
			c.change(after)
			if got := needsLock(before, after); got != c.want {
				t.Errorf("needsLock = %v, want %v", got, c.want)
			}
		})
	}
}

// TestLabelPatchOfAStaleNodeTakesOneWrite: a state label written from a copy of the node
// older than the API server's (the kubelet updated its status, another controller a
// label) is one patch: no conflict, no second read, and the other controller's label
// stays. A taint from the same stale copy still conflicts, is read again and keeps the
// other's taint (TestTaintPatchKeepsOtherControllersTaints).
func TestLabelPatchOfAStaleNodeTakesOneWrite(t *testing.T) {
	h := newHarness(t, "nlk-")
	stale := h.node("day-1")
	h.patchNodeObj("day-1", func(n *corev1.Node) { n.Labels["example.com/other"] = "yes" })
	patches, reads := 0, 0
	count := func(c client.WithWatch) client.Client {
		return interceptor.NewClient(c, interceptor.Funcs{
			Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				if _, ok := obj.(*corev1.Node); ok {
					patches++
				}
				return c.Patch(ctx, obj, patch, opts...)
			},
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if _, ok := obj.(*corev1.Node); ok {
					reads++
				}
				return c.Get(ctx, key, obj, opts...)
			},
		})
	}
	h.client = count
	r := h.reconciler()
	r.APIReader = count(operator)
	h.must(r.patchNode(h.ctx, stale, func(n *corev1.Node) { nodes.SetState(n, gpupoolv1.StateParked, "nlk-pool") }))
	if patches != 1 || reads != 0 {
		t.Errorf("%d patches and %d reads of the node, want 1 and 0", patches, reads)
	}
	got := h.node("day-1")
	if got.Labels["example.com/other"] != "yes" || got.Labels[gpupoolv1.LabelState] != gpupoolv1.StateParked {
		t.Errorf("labels %v, want the other controller's and the state %s", got.Labels, gpupoolv1.LabelState)
	}
}
