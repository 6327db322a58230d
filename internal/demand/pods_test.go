package demand

import (
	"context"
	"slices"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nodes"
)

// TestPodsObserve classifies pods as a scheduler would: what only night could serve is
// night's demand; what day could serve, what asks for no GPU, what is not unschedulable
// or selects what no layout has is nobody's; pods on the nodes a switch drains are what
// it would evict, with do-not-disrupt pods and Jobs near completion named.
func TestPodsObserve(t *testing.T) {
	objs := []client.Object{
		testPod("train-selector", 2, pendingUnschedulable, selecting("workload", "training"), tolerating("training")),
		testPod("train-affinity", 1, pendingUnschedulable, requiring(gpupoolv1.LabelProfile, corev1.NodeSelectorOpIn, "grid_p100-16q"), tolerating("training")),
		testPod("train-memory", 1, pendingUnschedulable, requiring(gpupoolv1.LabelMemoryMiB, corev1.NodeSelectorOpGt, "8192"), tolerating("training")),
		testPod("train-untolerated", 1, pendingUnschedulable, selecting("workload", "training")),
		testPod("train-no-gpu", 0, pendingUnschedulable, selecting("workload", "training"), tolerating("training")),
		testPod("train-not-yet-tried", 1, selecting("workload", "training"), tolerating("training")),
		testPod("serve-waits-for-day", 1, pendingUnschedulable, selecting("workload", "inference")),
		testPod("anything-with-gpu", 1, pendingUnschedulable, tolerating("training")), // day serves it too
		testPod("elsewhere", 1, pendingUnschedulable, selecting("zone", "b"), tolerating("training")),
		testPod("init-gpus", 0, pendingUnschedulable, selecting("workload", "training"), tolerating("training"), func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "i", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{nodes.DefaultGPUResource: resource.MustParse("3")}}}}
		}),
		testPod("serve-1", 1, onNode("node-d1")),
		testPod("serve-2", 1, onNode("node-d2"), annotated(gpupoolv1.AnnotationDoNotDisrupt, "true")),
		testPod("job-almost-done", 1, onNode("node-n1"), ownedBy("Job", "batch/v1", "sweep")),
		testPod("logs", 0, onNode("node-d1"), ownedBy("DaemonSet", "apps/v1", "fluent")),
		testPod("done", 1, onNode("node-d1"), func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }),
		&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "sweep", Namespace: "ml"},
			Spec: batchv1.JobSpec{Completions: ptr.To(int32(8))}, Status: batchv1.JobStatus{Succeeded: 6}},
		// node-n2 is a night node already serving while the switch to night goes on.
		poolNode("node-d1", "day"), poolNode("node-d2", "day"), poolNode("node-n1", "day"), poolNode("node-n2", "night"),
		testPod("train-early", 2, onNode("node-n2"), tolerating("training")),
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-parked", Labels: map[string]string{gpupoolv1.LabelPool: "lab", gpupoolv1.LabelParked: "true"}}},
		testPod("on-parked", 1, onNode("node-parked")),
	}
	pool := testPool()
	obs, err := podsOf(fakeClient(objs...)).Observe(context.Background(), pool, ShapesOf(pool), Everyone(nodes.DefaultGPUResource))
	if err != nil {
		t.Fatal(err)
	}
	night, day := obs.Layouts["night"], obs.Layouts["day"]
	wantPending := []string{"pod ml/init-gpus", "pod ml/train-affinity", "pod ml/train-memory", "pod ml/train-selector"}
	if night.PendingGPUs != 7 || !slices.Equal(night.Pending, wantPending) {
		t.Errorf("night pending = %d GPUs %v, want 7 GPUs %v", night.PendingGPUs, night.Pending, wantPending)
	}
	if day.PendingGPUs != 0 {
		t.Errorf("day pending = %d %v: what the active layout serves is no demand for another layout", day.PendingGPUs, day.Pending)
	}
	if night.RunningGPUs != 2 {
		t.Errorf("night running GPUs = %d, want 2 (train-early, on a node already labelled for night)", night.RunningGPUs)
	}
	if day.RunningGPUs != 3 {
		t.Errorf("day running GPUs = %d, want 3 (serve-1, serve-2, job-almost-done; not the finished pod)", day.RunningGPUs)
	}
	// Day -> night drains d1, d2 (not in night) and n1 (its profile changes).
	if night.Evictions != 3 || !slices.Equal(night.DoNotDisrupt, []string{"pod ml/serve-2"}) || !slices.Equal(night.NearCompletion, []string{"pod ml/job-almost-done"}) {
		t.Errorf("a switch to night would evict %d, do-not-disrupt %v, near completion %v; want 3, [serve-2], [job-almost-done]",
			night.Evictions, night.DoNotDisrupt, night.NearCompletion)
	}
	if obs.NotObserved != "" {
		t.Errorf("pods observed, yet %q", obs.NotObserved)
	}
}

// TestPodsOnSharedNodes: GPU pods on a node that every other layout keeps with the same
// profile run whatever layout is active, so they are no use of the layout the node is
// labelled for (or a layout demand brought in would never look idle); on a node that a
// layout would reconfigure they are.
func TestPodsOnSharedNodes(t *testing.T) {
	for _, tc := range []struct {
		name            string
		nightProfile    string // of the shared VM s1 in night
		third           *gpupoolv1.Layout
		wantNightOnNode int64
	}{
		{name: "shared with the same profile", nightProfile: "grid_p100-4q", wantNightOnNode: 0},
		{name: "reconfigured by day", nightProfile: "grid_p100-8q", wantNightOnNode: 1},
		{name: "a third layout drains it", nightProfile: "grid_p100-4q", wantNightOnNode: 1,
			third: &gpupoolv1.Layout{Name: "maintenance", Workers: []gpupoolv1.Worker{{VM: "d1", Profile: "grid_p100-4q"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := &gpupoolv1.GPUPoolProfile{ObjectMeta: metav1.ObjectMeta{Name: "lab"},
				Spec: gpupoolv1.GPUPoolProfileSpec{DefaultLayout: "day", Layouts: []gpupoolv1.Layout{
					{Name: "day", Workers: []gpupoolv1.Worker{{VM: "d1", Profile: "grid_p100-4q"}, {VM: "s1", Profile: "grid_p100-4q"}}},
					{Name: "night", Workers: []gpupoolv1.Worker{{VM: "n1", Profile: "grid_p100-16q"}, {VM: "s1", Profile: tc.nightProfile}}},
				}},
				Status: gpupoolv1.GPUPoolProfileStatus{ActiveLayout: "night", Workers: []gpupoolv1.WorkerStatus{
					{VM: "d1", Node: "node-d1"}, {VM: "n1", Node: "node-n1"}, {VM: "s1", Node: "node-s1"}}},
			}
			if tc.third != nil {
				pool.Spec.Layouts = append(pool.Spec.Layouts, *tc.third)
			}
			c := fakeClient(poolNode("node-n1", "night"), poolNode("node-s1", "night"),
				testPod("notebook", 1, onNode("node-s1")), testPod("train", 2, onNode("node-n1")))
			obs, err := podsOf(c).Observe(context.Background(), pool, ShapesOf(pool), Everyone(nodes.DefaultGPUResource))
			if err != nil {
				t.Fatal(err)
			}
			if got, want := obs.Layouts["night"].RunningGPUs, 2+tc.wantNightOnNode; got != want {
				t.Errorf("night running GPUs = %d, want %d", got, want)
			}
		})
	}
}

// TestPodsOnlyFromSelectedNamespaces: a tenant outside the selected namespaces neither
// brings night in (pending) nor keeps day (running); its pods still count in what a
// switch would evict, named by namespace only.
func TestPodsOnlyFromSelectedNamespaces(t *testing.T) {
	c := fakeClient(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ml", Labels: map[string]string{"gpupool.dev/demand": "lab"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}},
		poolNode("node-d1", "day"),
		testPod("train-ml", 2, pendingUnschedulable, selecting("workload", "training"), tolerating("training")),
		testPod("train-tenant", 4, pendingUnschedulable, selecting("workload", "training"), tolerating("training"), inNamespace("tenant")),
		testPod("serve-tenant", 1, onNode("node-d1"), inNamespace("tenant"), annotated(gpupoolv1.AnnotationDoNotDisrupt, "true")),
	)
	pool := testPool()
	pool.Spec.Demand = &gpupoolv1.DemandPolicy{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"gpupool.dev/demand": "lab"}}}
	ctx := context.Background()
	who, err := ReadScope(ctx, c, pool)
	if err != nil {
		t.Fatal(err)
	}
	obs, err := podsOf(c).Observe(ctx, pool, ShapesOf(pool), who)
	if err != nil {
		t.Fatal(err)
	}
	night, day := obs.Layouts["night"], obs.Layouts["day"]
	if night.PendingGPUs != 2 || !slices.Equal(night.Pending, []string{"pod ml/train-ml"}) {
		t.Errorf("night pending %d %v, want only the selected namespace's 2 GPUs", night.PendingGPUs, night.Pending)
	}
	if day.RunningGPUs != 0 {
		t.Errorf("day running GPUs %d: a pod of a namespace demand does not select must not keep a layout", day.RunningGPUs)
	}
	if night.Evictions != 1 || !slices.Equal(night.DoNotDisrupt, []string{"a pod in namespace tenant"}) {
		t.Errorf("a switch to night: %d evictions, do-not-disrupt %v; want the tenant's pod counted, named by namespace only", night.Evictions, night.DoNotDisrupt)
	}
}
