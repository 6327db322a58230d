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

// gpuResource is the resource the pool's nodes must advertise, "" for none.
func gpuResource(r gpupoolv1.ReadinessSpec) string {
	if r.GPUResource == nil {
		return DefaultGPUResource
	}
	return *r.GPUResource
}

// readinessGaps lists what a node still lacks to be ready for work, in a stable order,
// for the worker's message; none when it is ready. A node is ready for work when its
// Ready condition is True, it advertises at least gpus of the GPU resource (a kubelet
// reports a node Ready before the device plugin has registered, and pods asking for a
// GPU would stay Pending there), and it carries the labels and True conditions the
// spec names (such as GPU feature discovery's nvidia.com/vgpu.present).
func readinessGaps(n *corev1.Node, r gpupoolv1.ReadinessSpec, gpus int64) []string {
	if n == nil {
		return []string{"node not registered"}
	}
	var gaps []string
	if !nodeReady(n) {
		gaps = append(gaps, "Ready")
	}
	if res := gpuResource(r); res != "" && gpus > 0 {
		have := int64(0)
		if q, ok := n.Status.Allocatable[corev1.ResourceName(res)]; ok {
			have = q.Value()
		}
		if have < gpus {
			gaps = append(gaps, fmt.Sprintf("%s (allocatable %d of %d)", res, have, gpus))
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

// workerSpec returns the worker spec a VM (by inventory name) has in the layout being
// made, else in the first layout that names it: what its node must advertise.
func (s *scope) workerSpec(name string) (gpupoolv1.Worker, bool) {
	id, ok := s.specID[name]
	if !ok {
		return gpupoolv1.Worker{}, false
	}
	if s.layout != nil {
		for _, w := range s.layout.Workers {
			if w.VM == id {
				return w, true
			}
		}
	}
	for _, l := range s.pool.Spec.Layouts {
		for _, w := range l.Workers {
			if w.VM == id {
				return w, true
			}
		}
	}
	return gpupoolv1.Worker{}, false
}
