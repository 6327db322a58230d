package demandsim

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// BenchPolicy is the policy make bench-demand measures: training may bring night in at
// any time once a GPU has waited 5 minutes, night is let go after 15 idle minutes, and a
// weekend night nobody queues for is skipped.
func BenchPolicy() *gpupoolv1.DemandPolicy {
	m := func(n int) *metav1.Duration { return &metav1.Duration{Duration: time.Duration(n) * time.Minute} }
	return &gpupoolv1.DemandPolicy{
		NamespaceSelector: &metav1.LabelSelector{},
		Rules: []gpupoolv1.DemandRule{
			{Layout: Night, Action: gpupoolv1.DemandBringIn, MinGPUs: ptr.To(int32(1)), For: m(5), IdleFor: m(15)},
			{Layout: Night, Action: gpupoolv1.DemandSkip, For: m(5), IdleFor: m(15),
				Windows: []gpupoolv1.DemandWindow{{Start: "0 20 * * 5,6", Duration: metav1.Duration{Duration: 12 * time.Hour}}}},
		},
		MinDwell: m(30), Cooldown: m(15), MaxSwitchesPerDay: ptr.To(int32(6)), MaxEvictions: ptr.To(int32(8)),
	}
}

// HeldTo is p with at most n GPU pods evicted by a switch.
func HeldTo(p *gpupoolv1.DemandPolicy, n int32) *gpupoolv1.DemandPolicy {
	p.MaxEvictions = ptr.To(n)
	return p
}

// WeekPool is the pool of Week as a manifest would name it, valid as admission checks
// it: a vCenter, day as the world's DayGPUs VMs of grid_p100-4q (four to a 16 GB P100)
// and night as NightGPUs of them with grid_p100-16q (one to a GPU), the schedule of Spec
// and demand as given. Replayed, its workers give the world's capacities.
func WeekPool(name, zone string, w *World, demand *gpupoolv1.DemandPolicy) *gpupoolv1.GPUPoolProfile {
	p := &gpupoolv1.GPUPoolProfile{Spec: *Spec(zone, demand)}
	p.APIVersion, p.Kind, p.Name = gpupoolv1.GroupVersion.String(), "GPUPoolProfile", name
	p.Spec.VCenter = gpupoolv1.VCenterSpec{Server: "vcenter.example.com", Datacenter: "dc1",
		CredentialsSecretRef: gpupoolv1.SecretReference{Name: "vcenter-credentials", Namespace: "gpupool-system"}}
	perGPU := w.DayGPUs / w.NightGPUs
	for i := range w.DayGPUs {
		vm := "gpu-" + itoa(i)
		p.Spec.Layouts[0].Workers = append(p.Spec.Layouts[0].Workers, gpupoolv1.Worker{VM: vm, Profile: "grid_p100-4q"})
		if i%perGPU == 0 {
			p.Spec.Layouts[1].Workers = append(p.Spec.Layouts[1].Workers, gpupoolv1.Worker{VM: vm, Profile: "grid_p100-16q"})
		}
	}
	return p
}
