package demand

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// What demand reads of one pod. Every field read here must survive the manager's lean
// pod cache (controllers/podcache.go, TestLeanPodKeeps).

// PodGPUs is how many of the GPU resource the pod requests: the larger of its containers'
// sum and its largest init container, as the scheduler counts.
func PodGPUs(p *corev1.Pod, res corev1.ResourceName) int64 {
	quantity := func(c corev1.Container) int64 {
		if q, ok := c.Resources.Limits[res]; ok {
			return q.Value()
		}
		if q, ok := c.Resources.Requests[res]; ok {
			return q.Value()
		}
		return 0
	}
	var sum, initMax int64
	for _, c := range p.Spec.Containers {
		sum += quantity(c)
	}
	for _, c := range p.Spec.InitContainers {
		initMax = max(initMax, quantity(c))
	}
	return max(sum, initMax)
}

// Unschedulable says whether the scheduler found no node for the pod.
func Unschedulable(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
		}
	}
	return false
}

// Evictable says whether a drain would evict the pod: not a DaemonSet's, not a mirror pod.
func Evictable(p *corev1.Pod) bool {
	if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return false
	}
	ref := metav1.GetControllerOf(p)
	return ref == nil || ref.Kind != "DaemonSet"
}

// Finished says whether the pod has ended (Succeeded or Failed).
func Finished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}
