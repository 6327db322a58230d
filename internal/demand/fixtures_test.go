package demand

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nodes"
)

// testPool is a day layout of three 4Q workers and a night layout of one 16Q worker with
// a taint, day active.
func testPool() *gpupoolv1.GPUPoolProfile {
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

type podOpt func(*corev1.Pod)

func testPod(name string, gpus int64, opts ...podOpt) *corev1.Pod {
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

func pendingUnschedulable(p *corev1.Pod) {
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}
}
func onNode(n string) podOpt       { return func(p *corev1.Pod) { p.Spec.NodeName = n } }
func inNamespace(ns string) podOpt { return func(p *corev1.Pod) { p.Namespace = ns } }
func selecting(k, v string) podOpt {
	return func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{k: v} }
}
func tolerating(key string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists})
	}
}
func requiring(key string, op corev1.NodeSelectorOperator, values ...string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: op, Values: values}}}}}}}
	}
}
func ownedBy(kind, apiVersion, name string) podOpt {
	return func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{Kind: kind, APIVersion: apiVersion, Name: name, UID: "u", Controller: ptr.To(true)}}
	}
}
func annotated(k, v string) podOpt {
	return func(p *corev1.Pod) { p.Annotations = map[string]string{k: v} }
}

func poolNode(name, layout string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{gpupoolv1.LabelPool: "lab", gpupoolv1.LabelLayout: layout}}}
}

func fakeClient(objs ...client.Object) client.Client {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = gpupoolv1.AddToScheme(s)
	return fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).Build()
}

// podsOf is the Pods source over a client: pending and node pods filtered from a list of
// every pod (the controller's caches are its own to test).
func podsOf(c client.Client) Pods {
	list := func(ctx context.Context, node string) ([]corev1.Pod, error) {
		var pl corev1.PodList
		if err := c.List(ctx, &pl); err != nil {
			return nil, err
		}
		var out []corev1.Pod
		for _, p := range pl.Items {
			if p.Spec.NodeName == node {
				out = append(out, p)
			}
		}
		return out, nil
	}
	return Pods{Nodes: c, Jobs: c, OnNode: list,
		Pending: func(ctx context.Context, _ corev1.ResourceName) ([]corev1.Pod, error) { return list(ctx, "") }}
}
