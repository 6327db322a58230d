package nodes

import (
	"fmt"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

func readyNode(gpus string, labels map[string]string, conds ...corev1.NodeCondition) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: labels}}
	n.Status.Conditions = append([]corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}, conds...)
	if gpus != "" {
		n.Status.Allocatable = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(gpus)}
	}
	return n
}

func TestReadinessGaps(t *testing.T) {
	str := func(s string) *string { return &s }
	lic := map[string]string{"nvidia.com/vgpu.present": "true"}
	notReady := readyNode("1", nil)
	notReady.Status.Conditions[0].Status = corev1.ConditionUnknown
	cases := []struct {
		name string
		node *corev1.Node
		spec gpupoolv1.ReadinessSpec
		gpus int64
		want []string
	}{
		{"ready with its GPU", readyNode("1", nil), gpupoolv1.ReadinessSpec{}, 1, nil},
		{"more GPUs than needed", readyNode("2", nil), gpupoolv1.ReadinessSpec{}, 1, nil},
		{"no device plugin yet", readyNode("", nil), gpupoolv1.ReadinessSpec{}, 1, []string{"nvidia.com/gpu (allocatable 0 of 1)"}},
		{"plugin gone (0)", readyNode("0", nil), gpupoolv1.ReadinessSpec{}, 1, []string{"nvidia.com/gpu (allocatable 0 of 1)"}},
		{"fewer than the VM's vGPUs", readyNode("1", nil), gpupoolv1.ReadinessSpec{}, 2, []string{"nvidia.com/gpu (allocatable 1 of 2)"}},
		{"not Ready", notReady, gpupoolv1.ReadinessSpec{}, 1, []string{"Ready"}},
		{"other resource", readyNode("1", nil), gpupoolv1.ReadinessSpec{GPUResource: str("example.com/vgpu")}, 1, []string{"example.com/vgpu (allocatable 0 of 1)"}},
		{"GPU wait off", readyNode("", nil), gpupoolv1.ReadinessSpec{GPUResource: str("")}, 1, nil},
		{"label missing", readyNode("1", nil), gpupoolv1.ReadinessSpec{NodeLabels: lic}, 1, []string{"label nvidia.com/vgpu.present=true (missing)"}},
		{"label wrong", readyNode("1", map[string]string{"nvidia.com/vgpu.present": "false"}), gpupoolv1.ReadinessSpec{NodeLabels: lic}, 1, []string{`label nvidia.com/vgpu.present=true (is "false")`}},
		{"label there", readyNode("1", lic), gpupoolv1.ReadinessSpec{NodeLabels: lic}, 1, nil},
		{"condition missing", readyNode("1", nil), gpupoolv1.ReadinessSpec{NodeConditions: []string{"VGPULicensed"}}, 1, []string{"condition VGPULicensed=True (is missing)"}},
		{"condition false", readyNode("1", nil, corev1.NodeCondition{Type: "VGPULicensed", Status: corev1.ConditionFalse}), gpupoolv1.ReadinessSpec{NodeConditions: []string{"VGPULicensed"}}, 1, []string{"condition VGPULicensed=True (is False)"}},
		{"condition true", readyNode("1", nil, corev1.NodeCondition{Type: "VGPULicensed", Status: corev1.ConditionTrue}), gpupoolv1.ReadinessSpec{NodeConditions: []string{"VGPULicensed"}}, 1, nil},
		{"everything missing, in order", readyNode("", nil), gpupoolv1.ReadinessSpec{NodeLabels: map[string]string{"b": "1", "a": "1"}, NodeConditions: []string{"X"}}, 1,
			[]string{"nvidia.com/gpu (allocatable 0 of 1)", "label a=1 (missing)", "label b=1 (missing)", "condition X=True (is missing)"}},
		{"no node", nil, gpupoolv1.ReadinessSpec{}, 1, []string{"node not registered"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := ReadinessGaps(c.node, c.spec, GPUWant{Count: c.gpus}, 0); !reflect.DeepEqual(got, c.want) {
				t.Errorf("ReadinessGaps = %q, want %q", got, c.want)
			}
		})
	}
	for vgpus, want := range map[int32]int64{0: 1, 1: 1, 2: 2, 16: 16} {
		if got := ExpectedGPUs(gpupoolv1.Worker{VM: "x", VGPUs: vgpus}); got != want {
			t.Errorf("ExpectedGPUs(vgpus %d) = %d, want %d", vgpus, got, want)
		}
	}
}

// TestGPUReplicasGaps: with the layout's gpuReplicas in force, the node must advertise
// exactly vgpus x gpuReplicas; fewer (the plugin still runs the node's old config, or a
// GPU is gone) and more (it still runs a shared config) both keep it waiting.
func TestGPUReplicasGaps(t *testing.T) {
	cases := []struct {
		name string
		gpus string
		want GPUWant
		gaps []string
	}{
		{name: "four replicas", gpus: "4", want: GPUWant{Count: 4, Replicas: 4}},
		{name: "old config, one per vGPU", gpus: "1", want: GPUWant{Count: 4, Replicas: 4},
			gaps: []string{"nvidia.com/gpu (allocatable 1 of 4: 4 per vGPU, the layout's gpuReplicas)"}},
		{name: "two vGPUs, eight replicas", gpus: "8", want: GPUWant{Count: 8, Replicas: 4}},
		{name: "whole GPU wanted, still shared", gpus: "4", want: GPUWant{Count: 1, Replicas: 1},
			gaps: []string{"nvidia.com/gpu (allocatable 4 of 1: 1 per vGPU, the layout's gpuReplicas)"}},
		{name: "without replicas more is fine", gpus: "4", want: GPUWant{Count: 1}},
		{name: "no plugin yet", gpus: "", want: GPUWant{Count: 4, Replicas: 4},
			gaps: []string{"nvidia.com/gpu (allocatable 0 of 4: 4 per vGPU, the layout's gpuReplicas)"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := ReadinessGaps(readyNode(c.gpus, nil), gpupoolv1.ReadinessSpec{}, c.want, 0); !reflect.DeepEqual(got, c.gaps) {
				t.Errorf("ReadinessGaps = %q, want %q", got, c.gaps)
			}
		})
	}
}

// TestDRAGaps: with readiness.dra, a node whose driver publishes the VM's vGPUs is ready
// for work whether or not it advertises the extended resource; short of both, the gap
// names both.
func TestDRAGaps(t *testing.T) {
	str := func(s string) *string { return &s }
	dra := &gpupoolv1.DRASpec{DeviceClassName: "vgpu.gpupool.dev", Driver: "vgpu.gpupool.dev"}
	cases := []struct {
		name      string
		gpus      string
		spec      gpupoolv1.ReadinessSpec
		want      GPUWant
		published int64
		gaps      []string
	}{
		{name: "published, no plugin", spec: gpupoolv1.ReadinessSpec{DRA: dra}, want: GPUWant{Count: 1}, published: 1},
		{name: "plugin, nothing published", gpus: "1", spec: gpupoolv1.ReadinessSpec{DRA: dra}, want: GPUWant{Count: 1}},
		{name: "neither", spec: gpupoolv1.ReadinessSpec{DRA: dra}, want: GPUWant{Count: 2}, published: 1,
			gaps: []string{"nvidia.com/gpu (allocatable 0 of 2) or devices of vgpu.gpupool.dev (published 1 of 2)"}},
		{name: "DRA only", spec: gpupoolv1.ReadinessSpec{GPUResource: str(""), DRA: dra}, want: GPUWant{Count: 2}, published: 0,
			gaps: []string{"devices of vgpu.gpupool.dev (published 0 of 2)"}},
		{name: "DRA only, published", spec: gpupoolv1.ReadinessSpec{GPUResource: str(""), DRA: dra}, want: GPUWant{Count: 2}, published: 2},
		{name: "replicas: one device per vGPU", spec: gpupoolv1.ReadinessSpec{DRA: dra}, want: GPUWant{Count: 8, Replicas: 4}, published: 2},
		{name: "without dra, published devices do not count", want: GPUWant{Count: 1}, published: 1,
			gaps: []string{"nvidia.com/gpu (allocatable 0 of 1)"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := ReadinessGaps(readyNode(c.gpus, nil), c.spec, c.want, c.published); !reflect.DeepEqual(got, c.gaps) {
				t.Errorf("ReadinessGaps = %q, want %q", got, c.gaps)
			}
		})
	}
}

func TestPublishedDevices(t *testing.T) {
	slice := func(driver, node, pool string, gen int64, devices int) resourcev1.ResourceSlice {
		s := resourcev1.ResourceSlice{Spec: resourcev1.ResourceSliceSpec{Driver: driver, NodeName: &node,
			Pool: resourcev1.ResourcePool{Name: pool, Generation: gen, ResourceSliceCount: 1}}}
		for i := range devices {
			s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: fmt.Sprintf("gpu-%d", i)})
		}
		return s
	}
	slices := []resourcev1.ResourceSlice{
		slice("gpu.example.com", "n1", "n1", 1, 4), // stale generation
		slice("gpu.example.com", "n1", "n1", 2, 2),
		slice("gpu.example.com", "n1", "n1-extra", 1, 1),
		slice("nic.example.com", "n1", "n1", 3, 8), // another driver
		slice("gpu.example.com", "n2", "n2", 1, 5), // another node
	}
	for _, c := range []struct {
		driver, node string
		want         int64
	}{{"gpu.example.com", "n1", 3}, {"gpu.example.com", "n2", 5}, {"nic.example.com", "n1", 8}, {"gpu.example.com", "n3", 0}} {
		if got := PublishedDevices(slices, c.driver, c.node); got != c.want {
			t.Errorf("PublishedDevices(%s, %s) = %d, want %d", c.driver, c.node, got, c.want)
		}
	}
}
