package controllers

import (
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/nodes"
)

// podUpdateMatters tells whether a pod update on a pool's node is one a drain or demand
// waits for (nodePods wakes the node's pools for it, and for every deletion): the pod
// ended (its phase became Succeeded or Failed) or its gpupool.dev/do-not-disrupt
// annotation changed. Without it a drain waiting for a held pod would notice only on its
// requeueDrain timer.
func podUpdateMatters(o, n any) bool {
	op, ok1 := o.(*corev1.Pod)
	np, ok2 := n.(*corev1.Pod)
	if !ok1 || !ok2 {
		return false
	}
	return (demand.Finished(np) && !demand.Finished(op)) || op.Annotations[AnnotationDoNotDisrupt] != np.Annotations[AnnotationDoNotDisrupt]
}

// nodeChanged lets through only the node updates that change what a pool reads of a
// node (nodes.Changed): heartbeats and everything else would only wake every pool for
// nothing.
func nodeChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			return nodes.Changed(e.ObjectOld.(*corev1.Node), e.ObjectNew.(*corev1.Node))
		},
	}
}

// demandPodChanged lets through the pod events that change demand (spec.demand): a pod
// created unscheduled, the scheduler finding no node for it or binding it, a pod ending
// or deleted; only for pods that may ask for GPUs (mayAskGPUs), so that the pods of a
// busy cluster do not wake the pools.
func demandPodChanged() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool {
			p, ok := e.Object.(*corev1.Pod)
			return ok && p.Spec.NodeName == "" && mayAskGPUs(p)
		},
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*corev1.Pod)
			n, ok2 := e.ObjectNew.(*corev1.Pod)
			if !ok1 || !ok2 || !mayAskGPUs(n) {
				return false
			}
			return o.Spec.NodeName != n.Spec.NodeName || demand.Unschedulable(o) != demand.Unschedulable(n) || demand.Finished(o) != demand.Finished(n)
		},
		DeleteFunc: func(e event.DeleteEvent) bool {
			p, ok := e.Object.(*corev1.Pod)
			return !ok || mayAskGPUs(p)
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// mayAskGPUs says whether the pod may ask for a pool's GPUs: through an extended
// resource (a GPU is one, whatever readiness.gpuResource names) or through resource
// claims (a pool's readiness.dra class). Which pools it concerns, wakes decides.
func mayAskGPUs(p *corev1.Pod) bool {
	return requestsExtended(p) || len(p.Spec.ResourceClaims) > 0
}

// requestsExtended says whether any container of the pod asks for an extended resource
// (a name with a domain outside kubernetes.io, such as nvidia.com/gpu).
func requestsExtended(p *corev1.Pod) bool {
	extended := func(rl corev1.ResourceList) bool {
		for name := range rl {
			if isExtended(name) {
				return true
			}
		}
		return false
	}
	for _, cs := range [][]corev1.Container{p.Spec.Containers, p.Spec.InitContainers} {
		for _, c := range cs {
			if extended(c.Resources.Limits) || extended(c.Resources.Requests) {
				return true
			}
		}
	}
	return false
}

// poolUpdated lets through a pool's creations, deletions and generic events, and its
// updates for which changed(old, new) holds: the predicates of the watches that follow
// part of a pool.
func poolUpdated(changed func(o, n *gpupoolv1.GPUPoolProfile) bool) predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*gpupoolv1.GPUPoolProfile)
			n, ok2 := e.ObjectNew.(*gpupoolv1.GPUPoolProfile)
			return !ok1 || !ok2 || changed(o, n)
		},
	}
}
