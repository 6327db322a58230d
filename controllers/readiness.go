package controllers

import (
	corev1 "k8s.io/api/core/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nodes"
	"github.com/gpupool/gpupool/internal/world"
)

// gpusWanted is what the node of a VM (by inventory name) must advertise. A node of
// the wanted layout (s.wanted) that sets gpuReplicas must advertise exactly vgpus x gpuReplicas
// once it carries the layout's labels: they select the device plugin's configuration
// (nvidia.com/device-plugin.config), so only then can the plugin advertise the replicas,
// and the count tells that it runs the layout's configuration and not the one the node
// had. Until then, and for a layout without gpuReplicas, at least one per vGPU.
//
// Note: the plan keeps such a node in WaitNodeReady after its Relabel step, and its
// Uncordon step waits behind that: the node is uncordoned only with the replicas.
func gpusWanted(wd *world.World, pool *gpupoolv1.GPUPoolProfile, wanted *gpupoolv1.Layout, name string, n *corev1.Node) nodes.GPUWant {
	w, ok := workerSpec(wd, pool, wanted, name)
	if !ok {
		return nodes.GPUWant{Count: 1}
	}
	want := nodes.GPUWant{Count: nodes.ExpectedGPUs(w)}
	if wanted == nil || wanted.GPUReplicas == nil {
		return want
	}
	if m, ok := wd.MetaFor(pool.Name, wanted, name); ok && n != nil && nodes.HasMeta(n, m) {
		want.Replicas = *wanted.GPUReplicas
		want.Count *= int64(want.Replicas)
	}
	return want
}

// readyOnceRelabelled tells whether the node of a VM (by inventory name), ready for work
// this pass, stays so once it carries the labels and taints of the layout being made:
// what readiness reads of the node that a relabel changes is the same before and after
// (the GPUs gpusWanted asks, which a layout's gpuReplicas raise once the node carries
// its labels; the labels spec.readiness names). Only then does its relabel uncordon it
// in the same patch (execute.Input.ReadyOnceRelabelled); otherwise the next pass judges
// the relabelled node before it is uncordoned.
func readyOnceRelabelled(s *scope) func(vm string) bool {
	return func(name string) bool {
		n := s.w.Nodes[name]
		m, ok := s.w.MetaFor(s.pool.Name, s.layout, name)
		if n == nil || !ok || !readyForWork(&s.w, name) {
			return false
		}
		after := n.DeepCopy()
		nodes.ApplyMeta(after, m)
		if gpusWanted(&s.w, s.pool, s.wanted, name, after) != gpusWanted(&s.w, s.pool, s.wanted, name, n) {
			return false
		}
		for k := range s.pool.Spec.Readiness.NodeLabels {
			was, had := n.Labels[k]
			if is, has := after.Labels[k]; has != had || is != was {
				return false
			}
		}
		return true
	}
}

// workerSpec returns the worker spec a VM (by inventory name) has in the wanted layout,
// else in the first layout that names it: what its node must advertise.
func workerSpec(wd *world.World, pool *gpupoolv1.GPUPoolProfile, wanted *gpupoolv1.Layout, name string) (gpupoolv1.Worker, bool) {
	id, ok := wd.SpecID[name]
	if !ok {
		return gpupoolv1.Worker{}, false
	}
	if w, ok := wd.WorkerByID(wanted, id); ok {
		return w, true
	}
	for l := range pool.Spec.Layouts {
		if w, ok := wd.WorkerByID(&pool.Spec.Layouts[l], id); ok {
			return w, true
		}
	}
	return gpupoolv1.Worker{}, false
}
