package controllers

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nodes"
	"github.com/gpupool/gpupool/internal/plan"
)

// demandTestPool is a day layout of two 4Q workers and a night layout of one 16Q worker
// with a taint, day active.
func demandTestPool() *gpupoolv1.GPUPoolProfile {
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
func onNode(n string) podOpt { return func(p *corev1.Pod) { p.Spec.NodeName = n } }
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

// TestPodDemand classifies pods as a scheduler would: what only night could serve is
// night's demand; what day could serve, what asks for no GPU, what is not unschedulable
// or selects what no layout has is nobody's; pods on the nodes a switch drains are what
// it would evict, with do-not-disrupt pods and Jobs near completion named.
func TestPodDemand(t *testing.T) {
	pods := []client.Object{
		testPod("train-selector", 2, pendingUnschedulable, selecting("workload", "training"), tolerating("training")),
		testPod("train-affinity", 1, pendingUnschedulable, requiring(LabelProfile, corev1.NodeSelectorOpIn, "grid_p100-16q"), tolerating("training")),
		testPod("train-memory", 1, pendingUnschedulable, requiring(LabelMemoryMiB, corev1.NodeSelectorOpGt, "8192"), tolerating("training")),
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
		testPod("serve-2", 1, onNode("node-d2"), func(p *corev1.Pod) { p.Annotations = map[string]string{AnnotationDoNotDisrupt: "true"} }),
		testPod("job-almost-done", 1, onNode("node-n1"), ownedBy("Job", "batch/v1", "sweep")),
		testPod("logs", 0, onNode("node-d1"), ownedBy("DaemonSet", "apps/v1", "fluent")),
		testPod("done", 1, onNode("node-d1"), func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }),
	}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "sweep", Namespace: "ml"},
		Spec: batchv1.JobSpec{Completions: ptr.To(int32(8))}, Status: batchv1.JobStatus{Succeeded: 6}}
	node := func(name, layout string) client.Object {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelPool: "lab", LabelLayout: layout}}}
	}
	// node-n2 is a night node already serving while the switch to night goes on.
	pods = append(pods, node("node-d1", "day"), node("node-d2", "day"), node("node-n1", "day"), node("node-n2", "night"),
		testPod("train-early", 2, onNode("node-n2"), tolerating("training")),
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-parked", Labels: map[string]string{LabelPool: "lab", LabelParked: "true"}}},
		testPod("on-parked", 1, onNode("node-parked")))
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = gpupoolv1.AddToScheme(s)
	c := withPodIndexes(fake.NewClientBuilder().WithScheme(s).WithObjects(append(pods, job)...)).Build()
	// Through the cache's index, and as a client straight to the API server lists them.
	for _, indexed := range []bool{true, false} {
		pool := demandTestPool()
		obs, err := podDemand{c: &GPUPoolProfileReconciler{Client: c, APIReader: c, podsIndexed: indexed}}.observeDemand(context.Background(), pool, shapesOf(pool), demandScope{all: true, gpu: nodes.DefaultGPUResource})
		if err != nil {
			t.Fatal(err)
		}
		checkPodDemand(t, obs)
	}
}

func checkPodDemand(t *testing.T, obs map[string]plan.LayoutDemand) {
	t.Helper()
	night, day := obs["night"], obs["day"]
	wantPending := []string{"pod ml/init-gpus", "pod ml/train-affinity", "pod ml/train-memory", "pod ml/train-selector"}
	if night.PendingGPUs != 7 || !equalStrings(night.Pending, wantPending) {
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
	if night.Evictions != 3 || !equalStrings(night.DoNotDisrupt, []string{"pod ml/serve-2"}) || !equalStrings(night.NearCompletion, []string{"pod ml/job-almost-done"}) {
		t.Errorf("a switch to night would evict %d, do-not-disrupt %v, near completion %v; want 3, [serve-2], [job-almost-done]",
			night.Evictions, night.DoNotDisrupt, night.NearCompletion)
	}
}

// TestPodDemandOnSharedNodes: GPU pods on a node that every other layout keeps with the
// same profile run whatever layout is active, so they are no use of the layout the node is
// labelled for (or a layout demand brought in would never look idle); on a node that a
// layout would reconfigure they are.
func TestPodDemandOnSharedNodes(t *testing.T) {
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
			node := func(name, layout string) client.Object {
				return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelPool: "lab", LabelLayout: layout}}}
			}
			s := runtime.NewScheme()
			_ = clientgoscheme.AddToScheme(s)
			c := withPodIndexes(fake.NewClientBuilder().WithScheme(s).WithObjects(node("node-n1", "night"), node("node-s1", "night"),
				testPod("notebook", 1, onNode("node-s1")), testPod("train", 2, onNode("node-n1")))).Build()
			obs, err := podDemand{c: &GPUPoolProfileReconciler{Client: c, APIReader: c, podsIndexed: true}}.observeDemand(context.Background(), pool, shapesOf(pool), demandScope{all: true, gpu: nodes.DefaultGPUResource})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := obs["night"].RunningGPUs, 2+tc.wantNightOnNode; got != want {
				t.Errorf("night running GPUs = %d, want %d", got, want)
			}
		})
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestDemandPodChanged: only pods that ask for an extended resource wake demand pools,
// and only on the changes demand reads.
func TestDemandPodChanged(t *testing.T) {
	pr := demandPodChanged()
	gpu, plain := testPod("g", 1), testPod("p", 0)
	if !pr.Create(event.CreateEvent{Object: gpu}) || pr.Create(event.CreateEvent{Object: plain}) {
		t.Error("create: want a GPU pod through, a plain pod not")
	}
	if pr.Create(event.CreateEvent{Object: testPod("b", 1, onNode("n"))}) {
		t.Error("create: a bound pod is no pending demand")
	}
	pending := testPod("g", 1, pendingUnschedulable)
	if !pr.Update(event.UpdateEvent{ObjectOld: gpu, ObjectNew: pending}) {
		t.Error("update: becoming unschedulable must wake the pools")
	}
	if pr.Update(event.UpdateEvent{ObjectOld: pending, ObjectNew: pending.DeepCopy()}) {
		t.Error("update: no change demand reads must not wake the pools")
	}
	if !pr.Update(event.UpdateEvent{ObjectOld: pending, ObjectNew: testPod("g", 1, onNode("n"))}) {
		t.Error("update: binding must wake the pools")
	}
	if !pr.Delete(event.DeleteEvent{Object: gpu}) || pr.Delete(event.DeleteEvent{Object: plain}) {
		t.Error("delete: want a GPU pod through, a plain pod not")
	}
}

// TestDemandUnobservedKeepsWhatDemandHolds: when the demand cannot be read, a layout
// demand holds is kept (one failed list must not drain its work), and the message says so.
func TestDemandUnobservedKeepsWhatDemandHolds(t *testing.T) {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = gpupoolv1.AddToScheme(s)
	c := fake.NewClientBuilder().WithScheme(s).WithInterceptorFuncs(interceptor.Funcs{
		List: func(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*corev1.PodList); ok {
				return errors.New("the cache is not synced")
			}
			return cl.List(ctx, list, opts...)
		},
	}).Build()
	pool := demandTestPool()
	pool.Spec.Demand = &gpupoolv1.DemandPolicy{NamespaceSelector: &metav1.LabelSelector{}, Rules: []gpupoolv1.DemandRule{{Layout: "night", Action: gpupoolv1.DemandBringIn}}}
	pool.Status.ActiveLayout, pool.Status.DesiredLayout, pool.Status.DesiredReason = "night", "night", gpupoolv1.DesiredByDemand
	pool.Status.Demand = &gpupoolv1.DemandStatus{}
	r := &GPUPoolProfileReconciler{Client: c}
	sc := &scope{pool: pool, now: time.Date(2026, 11, 30, 15, 0, 0, 0, time.UTC)}
	d, err := r.desire(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	if d.Layout != "night" || d.Reason != gpupoolv1.DesiredByDemand || !strings.Contains(pool.Status.Demand.Message, "not observed") {
		t.Fatalf("decision %+v, message %q; want night kept by demand while demand cannot be read", d, pool.Status.Demand.Message)
	}
	// Without a demand hold, the schedule decides.
	pool.Status.DesiredReason = gpupoolv1.DesiredByDefault
	if d, _ := r.desire(context.Background(), sc); d.Layout != "day" {
		t.Fatalf("without a demand hold: %+v, want the default day", d)
	}
}

// TestDemandUnobservedHoldEndsAfterIdleFor: a layout kept while the demand cannot be
// read is kept no longer than its idleFor from when the reads began to fail.
func TestDemandUnobservedHoldEndsAfterIdleFor(t *testing.T) {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = gpupoolv1.AddToScheme(s)
	c := fake.NewClientBuilder().WithScheme(s).WithInterceptorFuncs(interceptor.Funcs{
		List: func(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			return errors.New("the cache is not synced")
		},
	}).Build()
	pool := demandTestPool()
	pool.Spec.Demand = &gpupoolv1.DemandPolicy{NamespaceSelector: &metav1.LabelSelector{}, Rules: []gpupoolv1.DemandRule{{Layout: "night", Action: gpupoolv1.DemandBringIn,
		IdleFor: &metav1.Duration{Duration: 5 * time.Minute}}}}
	pool.Status.ActiveLayout, pool.Status.DesiredLayout, pool.Status.DesiredReason = "night", "night", gpupoolv1.DesiredByDemand
	pool.Status.Demand = &gpupoolv1.DemandStatus{}
	r := &GPUPoolProfileReconciler{Client: c}
	start := time.Date(2026, 11, 30, 15, 0, 0, 0, time.UTC)
	for i, tc := range []struct {
		after time.Duration
		want  string
	}{{0, "night"}, {4 * time.Minute, "night"}, {5 * time.Minute, "day"}} {
		d, err := r.desire(context.Background(), &scope{pool: pool, now: start.Add(tc.after)})
		if err != nil {
			t.Fatal(err)
		}
		if d.Layout != tc.want {
			t.Fatalf("pass %d, %s after the reads failed: %s (%s), want %s; demand %+v", i, tc.after, d.Layout, d.Reason, tc.want, pool.Status.Demand)
		}
		pool.Status.DesiredReason = d.Reason
	}
}

// TestDemandKueueFailingCountsAsNone: with Kueue's API failing, the Kueue source counts
// as no demand and the pods' demand still decides: a pending training pod held for `for`
// brings night in, and status.demand says Kueue was not read.
func TestDemandKueueFailingCountsAsNone(t *testing.T) {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = gpupoolv1.AddToScheme(s)
	train := testPod("train", 1, pendingUnschedulable, selecting("workload", "training"), tolerating("training"))
	c := withPodIndexes(fake.NewClientBuilder().WithScheme(s).WithObjects(train)).WithInterceptorFuncs(interceptor.Funcs{
		List: func(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*unstructured.UnstructuredList); ok {
				return errors.New("the server could not find the requested resource")
			}
			return cl.List(ctx, list, opts...)
		},
	}).Build()
	now := time.Date(2026, 11, 30, 15, 0, 0, 0, time.UTC)
	pool := demandTestPool()
	pool.Spec.Kueue = &gpupoolv1.KueueSpec{Flavors: []gpupoolv1.KueueFlavor{{Name: "night", Layout: "night"}}}
	pool.Spec.Demand = &gpupoolv1.DemandPolicy{NamespaceSelector: &metav1.LabelSelector{}, Rules: []gpupoolv1.DemandRule{{Layout: "night", Action: gpupoolv1.DemandBringIn}}}
	pool.Status.Demand = &gpupoolv1.DemandStatus{Layouts: []gpupoolv1.LayoutDemand{{Layout: "night", PendingSince: &metav1.Time{Time: now.Add(-10 * time.Minute)}}}}
	r := &GPUPoolProfileReconciler{Client: c, APIReader: c, Recorder: events.NewFakeRecorder(10), podsIndexed: true}
	sc := &scope{pool: pool, now: now}
	d, err := r.desire(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	if d.Layout != "night" || d.Reason != gpupoolv1.DesiredByDemand {
		t.Fatalf("decision %s (%s), want night by demand from the pod; demand message %q", d.Layout, d.Reason, pool.Status.Demand.Message)
	}
	if msg := pool.Status.Demand.Message; !strings.HasPrefix(msg, kueueNotObserved) || !strings.Contains(msg, "pod ml/train") {
		t.Fatalf("demand message %q, want Kueue not observed, then the pod's demand", msg)
	}
	if want := now.Add(requeueKueue); !sc.demandRecheck.Equal(want) {
		t.Fatalf("recheck %s, want Kueue read again at %s", sc.demandRecheck, want)
	}
}
