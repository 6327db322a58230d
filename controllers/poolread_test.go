package controllers

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// TestReadPoolKueuePoolsLive: the cache serves a pass's read of its pool at the
// reconciler's own last write, unless the Kueue controller may write the pool's status
// (spec.kueue set, or a status.kueue left): those are read from the API server.
func TestReadPoolKueuePoolsLive(t *testing.T) {
	for _, c := range []struct {
		name string
		set  func(*gpupoolv1.GPUPoolProfile)
		live bool
	}{
		{"no kueue", func(*gpupoolv1.GPUPoolProfile) {}, false},
		{"spec.kueue", func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.Kueue = &gpupoolv1.KueueSpec{Flavors: []gpupoolv1.KueueFlavor{{Name: "day", Layout: "day"}}}
		}, true},
		{"status.kueue left", func(p *gpupoolv1.GPUPoolProfile) { p.Status.Kueue = &gpupoolv1.KueueStatus{HeldWorkloads: 1} }, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			pool := &gpupoolv1.GPUPoolProfile{ObjectMeta: metav1.ObjectMeta{Name: "daynight", UID: "u1"}}
			c.set(pool)
			cl := fake.NewClientBuilder().WithScheme(testScheme).WithObjects(pool).WithStatusSubresource(pool).Build()
			reads := 0
			live := interceptor.NewClient(cl, interceptor.Funcs{
				Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					reads++
					return c.Get(ctx, key, obj, opts...)
				},
			})
			r := &GPUPoolProfileReconciler{Client: cl, APIReader: live}
			var cur gpupoolv1.GPUPoolProfile
			if err := cl.Get(context.Background(), client.ObjectKeyFromObject(pool), &cur); err != nil {
				t.Fatal(err)
			}
			r.wrote(&cur, nil) // as after the reconciler's own write of this version
			got, err := r.readPool(context.Background(), client.ObjectKeyFromObject(pool))
			if err != nil {
				t.Fatal(err)
			}
			if got.ResourceVersion != cur.ResourceVersion {
				t.Errorf("read version %s, want %s", got.ResourceVersion, cur.ResourceVersion)
			}
			if want := map[bool]int{true: 1, false: 0}[c.live]; reads != want {
				t.Errorf("%d reads from the API server, want %d", reads, want)
			}
		})
	}
}
