package demand

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/testpods"
)

type podOpt = testpods.Opt

var (
	testPool             = testpods.DayNightPool
	testPod              = testpods.Pod
	pendingUnschedulable = testpods.PendingUnschedulable
	onNode               = testpods.OnNode
	inNamespace          = testpods.InNamespace
	selecting            = testpods.Selecting
	tolerating           = testpods.Tolerating
	requiring            = testpods.Requiring
	ownedBy              = testpods.OwnedBy
	annotated            = testpods.Annotated
)

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
