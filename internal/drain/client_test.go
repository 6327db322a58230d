package drain

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// TestFromClient: a drain over controller-runtime's fake client lists the node's pods
// through the spec.nodeName index, evicts through the eviction subresource, and reports
// a PodDisruptionBudget's refusal.
func TestFromClient(t *testing.T) {
	ctx := context.Background()
	objs := []client.Object{}
	for _, p := range []corev1.Pod{pod("web-1", "ReplicaSet"), pod("web-2", "ReplicaSet"),
		pod("other", "ReplicaSet", func(p *corev1.Pod) { p.Spec.NodeName = "n2" })} {
		objs = append(objs, p.DeepCopy())
	}
	c := fake.NewClientBuilder().WithObjects(objs...).
		WithIndex(&corev1.Pod{}, PodNodeNameField, func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourceCreate: func(ctx context.Context, c client.Client, sub string, obj client.Object, sr client.Object, opts ...client.SubResourceCreateOption) error {
				if sub == "eviction" && obj.GetName() == "web-2" {
					return pdbRefusal()
				}
				return c.SubResource(sub).Create(ctx, obj, sr, opts...)
			},
		}).Build()
	h := &Helper{Cluster: FromClient(c), Terminating: &TerminatingClock{}}
	res, err := h.Drain(ctx, readyNode(true), gpupoolv1.DrainSpec{}, t0, t0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Evicted != 1 || len(res.Blocked) != 1 || res.Done {
		t.Errorf("Drain = %+v (%s), want web-1 evicted and web-2 blocked", res, res.Message())
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "web-1"}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Errorf("web-1 after its eviction: %v, want it gone", err)
	}
	for _, name := range []string{"web-2", "other"} {
		if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: name}, &corev1.Pod{}); err != nil {
			t.Errorf("%s: %v, want it kept", name, err)
		}
	}
	if n, err := h.ForceDelete(ctx, "n1", gpupoolv1.DrainSpec{}); err != nil || n != 1 {
		t.Errorf("ForceDelete = %d, %v; want web-2 deleted", n, err)
	}
}
