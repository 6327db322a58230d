package webhook

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/secretpolicy"
	"github.com/gpupool/gpupool/internal/testclock"
)

// withFlavors maps the pool's day layout to these ResourceFlavors.
func withFlavors(p *gpupoolv1.GPUPoolProfile, names ...string) *gpupoolv1.GPUPoolProfile {
	p.Spec.Kueue = &gpupoolv1.KueueSpec{}
	for _, n := range names {
		p.Spec.Kueue.Flavors = append(p.Spec.Kueue.Flavors, gpupoolv1.KueueFlavor{Name: n, Layout: "day",
			Quota: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("4")}})
	}
	return p
}

// TestFlavorOfAnotherPoolIsRefused: a ResourceFlavor another pool maps is refused when a
// pool starts mapping it (create, or an update that adds it), whatever the pools'
// vCenters; a pool already stored in conflict can still be edited and drop the flavor.
func TestFlavorOfAnotherPoolIsRefused(t *testing.T) {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	if err := gpupoolv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	b := withFlavors(pool("b", "vc-b.example", "vm-b1"), "day-t4", "night-a100")
	r := fake.NewClientBuilder().WithScheme(scheme).WithObjects(b).Build()
	now := testclock.Weekly(time.Monday, 12, 0, time.UTC)
	v := &Validator{Reader: r, Now: func() time.Time { return now }, Credentials: secretpolicy.Policy{Namespace: "default"}}
	const refusal = `spec.kueue.flavors[1].name: Invalid value: "night-a100": ResourceFlavor is already mapped by GPUPoolProfile "b" (spec.kueue.flavors[1]); ` +
		`a flavor's quota and admission checks can follow one pool only: map a ResourceFlavor of this pool's own (its nodeLabels selecting this pool's nodes), or remove it from GPUPoolProfile "b" first`
	stored := withFlavors(pool("a", "vc-a.example", "vm-a1"), "a-t4", "night-a100")

	for _, tc := range []struct {
		name     string
		old, cur *gpupoolv1.GPUPoolProfile
		want     string // "" admitted
	}{
		{name: "create mapping b's flavor, on another vCenter", cur: stored, want: refusal},
		{name: "create mapping flavors of its own", cur: withFlavors(pool("a", "vc-a.example", "vm-a1"), "a-t4", "a-a100")},
		{name: "create without spec.kueue", cur: pool("a", "vc-a.example", "vm-a1")},
		{name: "b itself, on update", old: b, cur: func() *gpupoolv1.GPUPoolProfile {
			c := b.DeepCopy()
			c.Spec.Kueue.Flavors[0].Quota = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}
			return c
		}()},
		{name: "update adding b's flavor", old: withFlavors(pool("a", "vc-a.example", "vm-a1"), "a-t4"), cur: stored, want: refusal},
		{name: "update of a pool stored in conflict, quota changed", old: stored, cur: func() *gpupoolv1.GPUPoolProfile {
			c := stored.DeepCopy()
			c.Spec.Kueue.Flavors[0].Quota = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")}
			return c
		}()},
		{name: "update of a pool stored in conflict, flavor dropped", old: stored, cur: withFlavors(pool("a", "vc-a.example", "vm-a1"), "a-t4")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.old == nil {
				_, err = v.ValidateCreate(ctx, tc.cur)
			} else {
				_, err = v.ValidateUpdate(ctx, tc.old, tc.cur)
			}
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want refused with %q", err, tc.want)
			}
		})
	}
}
