package webhook_test

import (
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
		{name: "kueue without flavors", mutate: withKueue(func(k *gpupoolv1.KueueSpec) { k.Flavors = nil }),
			path: "spec.kueue.flavors", fix: "Required"},
	}
}
