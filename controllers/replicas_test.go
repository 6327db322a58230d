package controllers

import (
	"reflect"
	"testing"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
)

// TestGPUReplicasGaps: with the layout's gpuReplicas in force, the node must advertise
// exactly vgpus x gpuReplicas; fewer (the plugin still runs the node's old config, or a
// GPU is gone) and more (it still runs a shared config) both keep it waiting.
func TestGPUReplicasGaps(t *testing.T) {
	cases := []struct {
		name string
		gpus string
		want gpuWant
		gaps []string
	}{
		{name: "four replicas", gpus: "4", want: gpuWant{count: 4, replicas: 4}},
		{name: "old config, one per vGPU", gpus: "1", want: gpuWant{count: 4, replicas: 4},
			gaps: []string{"nvidia.com/gpu (allocatable 1 of 4: 4 per vGPU, the layout's gpuReplicas)"}},
		{name: "two vGPUs, eight replicas", gpus: "8", want: gpuWant{count: 8, replicas: 4}},
		{name: "whole GPU wanted, still shared", gpus: "4", want: gpuWant{count: 1, replicas: 1},
			gaps: []string{"nvidia.com/gpu (allocatable 4 of 1: 1 per vGPU, the layout's gpuReplicas)"}},
		{name: "without replicas more is fine", gpus: "4", want: gpuWant{count: 1}},
		{name: "no plugin yet", gpus: "", want: gpuWant{count: 4, replicas: 4},
			gaps: []string{"nvidia.com/gpu (allocatable 0 of 4: 4 per vGPU, the layout's gpuReplicas)"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := readinessGaps(readyNode(c.gpus, nil), gpupoolv1.ReadinessSpec{}, c.want); !reflect.DeepEqual(got, c.gaps) {
				t.Errorf("readinessGaps = %q, want %q", got, c.gaps)
			}
		})
	}
}

// TestGPUsWanted: the replicas apply to the nodes of the wanted layout that carry
// its labels (which select the device plugin's configuration); before the relabel, and
// in a layout without gpuReplicas, one per vGPU is enough.
func TestGPUsWanted(t *testing.T) {
	four := int32(4)
	day := gpupoolv1.Layout{Name: "day", GPUReplicas: &four, NodeLabels: map[string]string{"nvidia.com/device-plugin.config": "time-sliced-4"},
		Workers: []gpupoolv1.Worker{{VM: "day-1", Profile: "grid_p100-4q"}, {VM: "day-2", Profile: "grid_p100-8q", VGPUs: 2}}}
	night := gpupoolv1.Layout{Name: "night", Workers: []gpupoolv1.Worker{{VM: "night-1", Profile: "grid_p100-16q"}}}
	pool := &gpupoolv1.GPUPoolProfile{Spec: gpupoolv1.GPUPoolProfileSpec{Layouts: []gpupoolv1.Layout{day, night}}}
	pool.Name = "lab"
	s := &scope{pool: pool, wanted: &pool.Spec.Layouts[0], inv: &inventory.Inventory{},
		vms: map[string]*inventory.VM{}, specID: map[string]string{}}
	for _, vm := range []string{"day-1", "day-2", "night-1"} {
		s.vms[vm] = &inventory.VM{Name: vm}
		s.specID[vm] = vm
	}
	cases := []struct {
		name       string
		vm         string
		relabelled bool
		want       gpuWant
	}{
		{"day node before its relabel", "day-1", false, gpuWant{count: 1}},
		{"day node with the layout's labels", "day-1", true, gpuWant{count: 4, replicas: 4}},
		{"two vGPUs with the layout's labels", "day-2", true, gpuWant{count: 8, replicas: 4}},
		{"two vGPUs before the relabel", "day-2", false, gpuWant{count: 2}},
		{"a VM that leaves the layout", "night-1", false, gpuWant{count: 1}},
		{"unknown VM", "other", false, gpuWant{count: 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := readyNode("1", nil)
			if m, ok := s.metaFor(s.wanted, c.vm); ok && c.relabelled {
				applyMeta(n, m)
			}
			if got := s.gpusWanted(c.vm, n); got != c.want {
				t.Errorf("gpusWanted = %+v, want %+v", got, c.want)
			}
		})
	}
	s.wanted = &pool.Spec.Layouts[1]
	if got := s.gpusWanted("night-1", readyNode("1", nil)); got != (gpuWant{count: 1}) {
		t.Errorf("a layout without gpuReplicas: gpusWanted = %+v, want at least one per vGPU", got)
	}
}
