package controllers

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/nodes"
	"github.com/gpupool/gpupool/internal/world"
)

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
	s := &scope{pool: pool, wanted: &pool.Spec.Layouts[0],
		w: world.World{Inventory: &inventory.Inventory{}, VMs: map[string]*inventory.VM{}, SpecID: map[string]string{}}}
	for _, vm := range []string{"day-1", "day-2", "night-1"} {
		s.w.VMs[vm] = &inventory.VM{Name: vm}
		s.w.SpecID[vm] = vm
	}
	cases := []struct {
		name       string
		vm         string
		relabelled bool
		want       nodes.GPUWant
	}{
		{"day node before its relabel", "day-1", false, nodes.GPUWant{Count: 1}},
		{"day node with the layout's labels", "day-1", true, nodes.GPUWant{Count: 4, Replicas: 4}},
		{"two vGPUs with the layout's labels", "day-2", true, nodes.GPUWant{Count: 8, Replicas: 4}},
		{"two vGPUs before the relabel", "day-2", false, nodes.GPUWant{Count: 2}},
		{"a VM that leaves the layout", "night-1", false, nodes.GPUWant{Count: 1}},
		{"unknown VM", "other", false, nodes.GPUWant{Count: 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := readyNode("1", nil)
			if m, ok := s.w.MetaFor(s.pool.Name, s.wanted, c.vm); ok && c.relabelled {
				nodes.ApplyMeta(n, m)
			}
			if got := gpusWanted(&s.w, s.pool, s.wanted, c.vm, n); got != c.want {
				t.Errorf("gpusWanted = %+v, want %+v", got, c.want)
			}
		})
	}
	s.wanted = &pool.Spec.Layouts[1]
	if got := gpusWanted(&s.w, s.pool, s.wanted, "night-1", readyNode("1", nil)); got != (nodes.GPUWant{Count: 1}) {
		t.Errorf("a layout without gpuReplicas: gpusWanted = %+v, want at least one per vGPU", got)
	}
}

func readyNode(gpus string, labels map[string]string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: labels}}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	if gpus != "" {
		n.Status.Allocatable = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(gpus)}
	}
	return n
}
