package webhook_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// withKueue gives the pool a valid spec.kueue (night's flavor), then lets change spoil it.
func withKueue(change func(k *gpupoolv1.KueueSpec)) func(*gpupoolv1.GPUPoolProfile) {
	return func(p *gpupoolv1.GPUPoolProfile) {
		p.Spec.Kueue = &gpupoolv1.KueueSpec{Flavors: []gpupoolv1.KueueFlavor{{Name: "night-a100", Layout: "night",
			Quota:        corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("4")},
			WaitingQuota: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}}
		change(p.Spec.Kueue)
	}
}

// ownersFlavor is the ResourceFlavor the pool "owner" of TestBadSpecsAreRejected maps.
const ownersFlavor = "owner-a100"

func kueueCases() []badCase {
	const f0 = "spec.kueue.flavors[0]"
	gpus := func(q string) corev1.ResourceList {
		return corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(q)}
	}
	return []badCase{
		{name: "kueue flavor names no layout", mutate: withKueue(func(k *gpupoolv1.KueueSpec) { k.Flavors[0].Layout = "training" }),
			path: f0 + ".layout", value: `"training"`, fix: `the layouts are "day", "night"`},
		{name: "kueue waitingQuota above quota", mutate: withKueue(func(k *gpupoolv1.KueueSpec) { k.Flavors[0].WaitingQuota = gpus("8") }),
			path: f0 + ".waitingQuota[nvidia.com/gpu]", value: `"8"`, fix: "more than the flavor's quota of 4"},
		{name: "kueue waitingQuota of a resource quota lacks", mutate: withKueue(func(k *gpupoolv1.KueueSpec) {
			k.Flavors[0].WaitingQuota = corev1.ResourceList{"nvidia.com/mig-1g.10gb": resource.MustParse("1")}
		}), path: f0 + ".waitingQuota[nvidia.com/mig-1g.10gb]", fix: "is not in quota"},
		{name: "kueue flavor without quota", mutate: withKueue(func(k *gpupoolv1.KueueSpec) { k.Flavors[0].Quota, k.Flavors[0].WaitingQuota = nil, nil }),
			path: f0 + ".quota", fix: "Required"},
		{name: "kueue flavor name with capitals", mutate: withKueue(func(k *gpupoolv1.KueueSpec) { k.Flavors[0].Name = "Night_A100" }),
			path: f0 + ".name", value: `"Night_A100"`, fix: "must be a ResourceFlavor name"},
		{name: "kueue flavor mapped twice", mutate: withKueue(func(k *gpupoolv1.KueueSpec) {
			k.Flavors = append(k.Flavors, gpupoolv1.KueueFlavor{Name: "night-a100", Layout: "day", Quota: gpus("8")})
		}), path: "spec.kueue.flavors[1]", fix: "Duplicate value"},
		{name: "kueue negative quota", mutate: withKueue(func(k *gpupoolv1.KueueSpec) { k.Flavors[0].Quota, k.Flavors[0].WaitingQuota = gpus("-1"), nil }),
			path: f0 + ".quota[nvidia.com/gpu]", fix: "zero or positive"},
		{name: "kueue flavor another pool maps", mutate: withKueue(func(k *gpupoolv1.KueueSpec) {
			k.Flavors = append(k.Flavors, gpupoolv1.KueueFlavor{Name: ownersFlavor, Layout: "night", Quota: gpus("2")})
		}), path: "spec.kueue.flavors[1].name", value: `"` + ownersFlavor + `"`, fix: `already mapped by GPUPoolProfile "owner" (spec.kueue.flavors[0])`},
		{name: "kueue without flavors", mutate: withKueue(func(k *gpupoolv1.KueueSpec) { k.Flavors = nil }),
			path: "spec.kueue.flavors", fix: "Required"},
	}
}

// TestTwoPoolsCannotMapOneFlavor goes through the real API server: a second pool that
// maps the first one's ResourceFlavor is refused, on create and on an update that adds
// it; once the first pool is gone, the flavor can be mapped.
func TestTwoPoolsCannotMapOneFlavor(t *testing.T) {
	ctx := context.Background()
	flavor := func(names ...string) func(*gpupoolv1.GPUPoolProfile) {
		return func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.Kueue = &gpupoolv1.KueueSpec{}
			for _, n := range names {
				p.Spec.Kueue.Flavors = append(p.Spec.Kueue.Flavors, gpupoolv1.KueueFlavor{Name: n, Layout: "night",
					Quota: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")}})
			}
		}
	}
	first := valid("flavor-first")
	flavor("shared-a100")(first)
	if err := k8s.Create(ctx, first); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), first) })
	const refused = `spec.kueue.flavors[1].name: Invalid value: "shared-a100": ResourceFlavor is already mapped by GPUPoolProfile "flavor-first"`

	second := valid("flavor-second")
	flavor("second-t4", "shared-a100")(second)
	if err := k8s.Create(ctx, second); err == nil || !strings.Contains(err.Error(), refused) {
		t.Fatalf("second pool mapping the first one's flavor: %v, want refused with %q", err, refused)
	}
	flavor("second-t4")(second)
	if err := k8s.Create(ctx, second); err != nil {
		t.Fatalf("second pool with a flavor of its own: %v", err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), second) })
	flavor("second-t4", "shared-a100")(second)
	if err := k8s.Update(ctx, second); err == nil || !strings.Contains(err.Error(), refused) {
		t.Fatalf("update adding the first pool's flavor: %v, want refused with %q", err, refused)
	}

	if err := k8s.Delete(ctx, first); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Update(ctx, second); err != nil {
		t.Fatalf("update adding the flavor once the first pool is gone: %v", err)
	}
}
