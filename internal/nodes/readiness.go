package nodes

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// DefaultGPUResource is what the NVIDIA device plugin advertises, and what a node must
// advertise before it counts as ready for work unless spec.readiness.gpuResource says
// otherwise.
const DefaultGPUResource = "nvidia.com/gpu"

// GPUResource is the resource the pool's nodes must advertise, "" for none.
func GPUResource(r gpupoolv1.ReadinessSpec) string {
	if r.GPUResource == nil {
		return DefaultGPUResource
	}
	return *r.GPUResource
}

// ExpectedGPUs is how many GPUs the node of worker w must advertise: the device plugin
// advertises one per vGPU of the VM, and workers[].vgpus defaults to 1.
func ExpectedGPUs(w gpupoolv1.Worker) int64 {
	return int64(max(w.VGPUs, 1))
}

// GPUWant is how many of the GPU resource a node must advertise to be ready for work.
type GPUWant struct {
	// Count is the least it must advertise; with Replicas, exactly that many.
	Count int64
	// Replicas is the layout's gpuReplicas when it applies (the node carries the
	// layout's labels), else 0.
	Replicas int32
}

// ReadinessGaps lists what a node still lacks to be ready for work, in a stable order,
// for the worker's message; none when it is ready. A node is ready for work when its
// Ready condition is True, it advertises the GPU resource gpus wants (a kubelet reports
// a node Ready before the device plugin has registered, and pods asking for a GPU would
// stay Pending there) or, with readiness.dra, its DRA driver publishes the VM's vGPUs
// as devices (published, from PublishedDevices), and it carries the labels and True
// conditions the spec names (such as GPU feature discovery's nvidia.com/vgpu.present).
func ReadinessGaps(n *corev1.Node, r gpupoolv1.ReadinessSpec, gpus GPUWant, published int64) []string {
	if n == nil {
		return []string{"node not registered"}
	}
	var gaps []string
	if !Ready(n) {
		gaps = append(gaps, "Ready")
	}
	if gap := gpusGap(n, r, gpus, published); gap != "" {
		gaps = append(gaps, gap)
	}
	keys := make([]string, 0, len(r.NodeLabels))
	for k := range r.NodeLabels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		got, ok := n.Labels[k]
		switch {
		case !ok:
			gaps = append(gaps, fmt.Sprintf("label %s=%s (missing)", k, r.NodeLabels[k]))
		case got != r.NodeLabels[k]:
			gaps = append(gaps, fmt.Sprintf("label %s=%s (is %q)", k, r.NodeLabels[k], got))
		}
	}
	for _, typ := range r.NodeConditions {
		if st := conditionStatus(n, typ); st != corev1.ConditionTrue {
			gaps = append(gaps, fmt.Sprintf("condition %s=True (is %s)", typ, st))
		}
	}
	return gaps
}

// gpusGap says how the node falls short of the GPUs gpus wants, "" when it does not:
// its allocatable GPU resource, or, with readiness.dra, the devices its driver publishes
// (one per vGPU: gpuReplicas shares a GPU through the device plugin's configuration,
// not through DRA). Either suffices, so a pool moving from the device plugin to a DRA
// driver needs no change of gpuResource.
func gpusGap(n *corev1.Node, r gpupoolv1.ReadinessSpec, gpus GPUWant, published int64) string {
	if gpus.Count <= 0 {
		return ""
	}
	res := GPUResource(r)
	resGap := ""
	if res != "" {
		resGap = gpuGap(n, res, gpus)
	}
	if r.DRA == nil {
		return resGap
	}
	vgpus := gpus.Count / int64(max(gpus.Replicas, 1))
	if published >= vgpus {
		return ""
	}
	devGap := fmt.Sprintf("devices of %s (published %d of %d)", r.DRA.Driver, published, vgpus)
	switch {
	case res == "":
		return devGap
	case resGap == "":
		return ""
	}
	return resGap + " or " + devGap
}

// PublishedDevices is how many devices driver publishes for node in slices (the
// node's ResourceSlices; others are ignored): per resource pool, the devices of the
// slices of its newest generation, as the scheduler reads them (a driver that
// republishes a pool bumps its generation, and the older slices are stale until
// deleted).
func PublishedDevices(slices []resourcev1.ResourceSlice, driver, node string) int64 {
	newest := map[string]int64{}
	mine := func(s *resourcev1.ResourceSlice) bool {
		return s.Spec.Driver == driver && s.Spec.NodeName != nil && *s.Spec.NodeName == node
	}
	for i := range slices {
		if s := &slices[i]; mine(s) {
			newest[s.Spec.Pool.Name] = max(newest[s.Spec.Pool.Name], s.Spec.Pool.Generation)
		}
	}
	var n int64
	for i := range slices {
		if s := &slices[i]; mine(s) && s.Spec.Pool.Generation == newest[s.Spec.Pool.Name] {
			n += int64(len(s.Spec.Devices))
		}
	}
	return n
}

// gpuGap says how the node's allocatable res falls short of gpus, "" when it does not.
func gpuGap(n *corev1.Node, res string, gpus GPUWant) string {
	have := int64(0)
	if q, ok := n.Status.Allocatable[corev1.ResourceName(res)]; ok {
		have = q.Value()
	}
	switch {
	case gpus.Replicas == 0 && have < gpus.Count:
		return fmt.Sprintf("%s (allocatable %d of %d)", res, have, gpus.Count)
	case gpus.Replicas > 0 && have != gpus.Count:
		return fmt.Sprintf("%s (allocatable %d of %d: %d per vGPU, the layout's gpuReplicas)", res, have, gpus.Count, gpus.Replicas)
	}
	return ""
}

func conditionStatus(n *corev1.Node, typ string) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if string(c.Type) == typ {
			return c.Status
		}
	}
	return "missing"
}

// WaitingFor says what a worker's node is waited for (gaps from ReadinessGaps), for its
// message.
func WaitingFor(gaps []string) string {
	if len(gaps) == 0 {
		return "ready"
	}
	return "waiting for " + strings.Join(gaps, ", ")
}
