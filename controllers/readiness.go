package controllers

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// DefaultGPUResource is what the NVIDIA device plugin advertises, and what a node must
// advertise before it counts as ready for work unless spec.readiness.gpuResource says
// otherwise.
const DefaultGPUResource = "nvidia.com/gpu"

// expectedGPUs is how many GPUs the node of worker w must advertise: the device plugin
// advertises one per vGPU of the VM, and workers[].vgpus defaults to 1.
func expectedGPUs(w gpupoolv1.Worker) int64 {
	return int64(max(w.VGPUs, 1))
}

// gpuWant is how many of the GPU resource a node must advertise to be ready for work.
type gpuWant struct {
	// count is the least it must advertise; with replicas, exactly that many.
	count int64
	// replicas is the layout's gpuReplicas when it applies (the node carries the
	// layout's labels), else 0.
	replicas int32
}

// gpusWanted is what the node of a VM (by inventory name) must advertise. A node of
// the wanted layout (s.wanted) that sets gpuReplicas must advertise exactly vgpus x gpuReplicas
// once it carries the layout's labels: they select the device plugin's configuration
// (nvidia.com/device-plugin.config), so only then can the plugin advertise the replicas,
// and the count tells that it runs the layout's configuration and not the one the node
// had. Until then, and for a layout without gpuReplicas, at least one per vGPU.
//
// Note: the plan keeps such a node in WaitNodeReady after its Relabel step, and its
// Uncordon step waits behind that: the node is uncordoned only with the replicas.
func (s *scope) gpusWanted(name string, n *corev1.Node) gpuWant {
	w, ok := s.workerSpec(name)
	if !ok {
		return gpuWant{count: 1}
	}
	want := gpuWant{count: expectedGPUs(w)}
	if s.wanted == nil || s.wanted.GPUReplicas == nil {
		return want
	}
	if m, ok := s.metaFor(s.wanted, name); ok && n != nil && hasMeta(n, m) {
		want.replicas = *s.wanted.GPUReplicas
		want.count *= int64(want.replicas)
	}
	return want
}

// gpuResource is the resource the pool's nodes must advertise, "" for none.
func gpuResource(r gpupoolv1.ReadinessSpec) string {
	if r.GPUResource == nil {
		return DefaultGPUResource
	}
	return *r.GPUResource
}

// readinessGaps lists what a node still lacks to be ready for work, in a stable order,
// for the worker's message; none when it is ready. A node is ready for work when its
// Ready condition is True, it advertises the GPU resource gpus wants (a kubelet reports
// a node Ready before the device plugin has registered, and pods asking for a GPU would
// stay Pending there), and it carries the labels and True conditions the spec names
// (such as GPU feature discovery's nvidia.com/vgpu.present).
func readinessGaps(n *corev1.Node, r gpupoolv1.ReadinessSpec, gpus gpuWant) []string {
	if n == nil {
		return []string{"node not registered"}
	}
	var gaps []string
	if !nodeReady(n) {
		gaps = append(gaps, "Ready")
	}
	if res := gpuResource(r); res != "" && gpus.count > 0 {
		if gap := gpuGap(n, res, gpus); gap != "" {
			gaps = append(gaps, gap)
		}
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

// gpuGap says how the node's allocatable res falls short of gpus, "" when it does not.
func gpuGap(n *corev1.Node, res string, gpus gpuWant) string {
	have := int64(0)
	if q, ok := n.Status.Allocatable[corev1.ResourceName(res)]; ok {
		have = q.Value()
	}
	switch {
	case gpus.replicas == 0 && have < gpus.count:
		return fmt.Sprintf("%s (allocatable %d of %d)", res, have, gpus.count)
	case gpus.replicas > 0 && have != gpus.count:
		return fmt.Sprintf("%s (allocatable %d of %d: %d per vGPU, the layout's gpuReplicas)", res, have, gpus.count, gpus.replicas)
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

// waitingFor says what a worker's node is waited for, for its message.
func waitingFor(gaps []string) string {
	if len(gaps) == 0 {
		return "ready"
	}
	return "waiting for " + strings.Join(gaps, ", ")
}

// workerSpec returns the worker spec a VM (by inventory name) has in the wanted layout,
// else in the first layout that names it: what its node must advertise.
func (s *scope) workerSpec(name string) (gpupoolv1.Worker, bool) {
	id, ok := s.specID[name]
	if !ok {
		return gpupoolv1.Worker{}, false
	}
	if s.wanted != nil {
		if i, ok := s.layoutWorkers(s.wanted).byID[id]; ok {
			return s.wanted.Workers[i], true
		}
	}
	for l := range s.pool.Spec.Layouts {
		if i, ok := s.layoutWorkers(&s.pool.Spec.Layouts[l]).byID[id]; ok {
			return s.pool.Spec.Layouts[l].Workers[i], true
		}
	}
	return gpupoolv1.Worker{}, false
}
