// Package testpods holds the pods and the pool the demand tests of several packages
// build (internal/demand, controllers): one copy, so that they test the same shapes.
package testpods

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nodes"
)

// DayNightPool is a day layout of three 4Q workers and a night layout of one 16Q worker with
// a taint, day active.
func DayNightPool() *gpupoolv1.GPUPoolProfile {
	return &gpupoolv1.GPUPoolProfile{
		ObjectMeta: metav1.ObjectMeta{Name: "lab"},
		Spec: gpupoolv1.GPUPoolProfileSpec{
			DefaultLayout: "day",
			Layouts: []gpupoolv1.Layout{
				{Name: "day", NodeLabels: map[string]string{"workload": "inference"},
					Workers: []gpupoolv1.Worker{{VM: "d1", Profile: "grid_p100-4q"}, {VM: "d2", Profile: "grid_p100-4q"}, {VM: "n1", Profile: "grid_p100-4q"}}},
				{Name: "night", NodeLabels: map[string]string{"workload": "training"},
					NodeTaints: []corev1.Taint{{Key: "training", Value: "true", Effect: corev1.TaintEffectNoSchedule}},
					Workers:    []gpupoolv1.Worker{{VM: "n1", Profile: "grid_p100-16q"}}},
			},
		},
		Status: gpupoolv1.GPUPoolProfileStatus{ActiveLayout: "day", Workers: []gpupoolv1.WorkerStatus{
			{VM: "d1", Node: "node-d1"}, {VM: "d2", Node: "node-d2"}, {VM: "n1", Node: "node-n1"}}},
	}
}

// Opt changes a pod Pod makes.
type Opt func(*corev1.Pod)

// Pod is a pod of namespace ml asking for gpus of the default GPU resource.
func Pod(name string, gpus int64, opts ...Opt) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
	if gpus > 0 {
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{nodes.DefaultGPUResource: *resource.NewQuantity(gpus, resource.DecimalSI)}
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// PendingUnschedulable is a pod option of the demand tests.
func PendingUnschedulable(p *corev1.Pod) {
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}
}

// OnNode is a pod option of the demand tests.
func OnNode(n string) Opt { return func(p *corev1.Pod) { p.Spec.NodeName = n } }

// InNamespace is a pod option of the demand tests.
func InNamespace(ns string) Opt { return func(p *corev1.Pod) { p.Namespace = ns } }

// Selecting is a pod option of the demand tests.
func Selecting(k, v string) Opt {
	return func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{k: v} }
}

// Tolerating is a pod option of the demand tests.
func Tolerating(key string) Opt {
	return func(p *corev1.Pod) {
		p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists})
	}
}

// Requiring is a pod option of the demand tests.
func Requiring(key string, op corev1.NodeSelectorOperator, values ...string) Opt {
	return func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: op, Values: values}}}}}}}
	}
}

// OwnedBy is a pod option of the demand tests.
func OwnedBy(kind, apiVersion, name string) Opt {
	return func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{Kind: kind, APIVersion: apiVersion, Name: name, UID: "u", Controller: ptr.To(true)}}
	}
}

// Annotated is a pod option of the demand tests.
func Annotated(k, v string) Opt {
	return func(p *corev1.Pod) { p.Annotations = map[string]string{k: v} }
}

// FromTemplate is a pod option of the DRA demand tests: a resource claim made from the
// ResourceClaimTemplate named.
func FromTemplate(template string) Opt {
	return func(p *corev1.Pod) {
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr.To(template)})
	}
}

// WithClaim is a pod option of the DRA demand tests: the ResourceClaim named.
func WithClaim(claim string) Opt {
	return func(p *corev1.Pod) {
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: "shared", ResourceClaimName: ptr.To(claim)})
	}
}
