package controllers

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
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
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/testpods"
)

type podOpt = testpods.Opt

var (
	demandTestPool       = testpods.DayNightPool
	testPod              = testpods.Pod
	pendingUnschedulable = testpods.PendingUnschedulable
	onNode               = testpods.OnNode
	selecting            = testpods.Selecting
	tolerating           = testpods.Tolerating
	requiring            = testpods.Requiring
)

// TestDemandPodChanged: only pods that may ask for GPUs wake demand pools, whichever way
// they ask (an extended resource, or resource claims for a readiness.dra pool), and
// only on the changes demand reads.
func TestDemandPodChanged(t *testing.T) {
	pr := demandPodChanged()
	byClaim := func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "vgpu"}}}
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "vgpu", ResourceClaimTemplateName: ptr.To("one-vgpu")}}
	}
	for _, asks := range []struct {
		name string
		pod  func(name string, opts ...podOpt) *corev1.Pod
	}{
		{"extended resource", func(name string, opts ...podOpt) *corev1.Pod { return testPod(name, 1, opts...) }},
		{"resource claim", func(name string, opts ...podOpt) *corev1.Pod { return testPod(name, 0, append(opts, byClaim)...) }},
	} {
		t.Run(asks.name, func(t *testing.T) {
			gpu, plain := asks.pod("g"), testPod("p", 0)
			if !pr.Create(event.CreateEvent{Object: gpu}) || pr.Create(event.CreateEvent{Object: plain}) {
				t.Error("create: want a GPU pod through, a plain pod not")
			}
			if pr.Create(event.CreateEvent{Object: asks.pod("b", onNode("n"))}) {
				t.Error("create: a bound pod is no pending demand")
			}
			pending := asks.pod("g", pendingUnschedulable)
			if !pr.Update(event.UpdateEvent{ObjectOld: gpu, ObjectNew: pending}) {
				t.Error("update: becoming unschedulable must wake the pools")
			}
			statuses := pending.DeepCopy()
			statuses.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "vgpu", ResourceClaimName: ptr.To("g-vgpu-x")}}
			if pr.Update(event.UpdateEvent{ObjectOld: pending, ObjectNew: pending.DeepCopy()}) || pr.Update(event.UpdateEvent{ObjectOld: pending, ObjectNew: statuses}) {
				t.Error("update: no change demand reads must not wake the pools")
			}
			if !pr.Update(event.UpdateEvent{ObjectOld: pending, ObjectNew: asks.pod("g", onNode("n"))}) {
				t.Error("update: binding must wake the pools")
			}
			if pr.Update(event.UpdateEvent{ObjectOld: testPod("p", 0), ObjectNew: testPod("p", 0, pendingUnschedulable)}) {
				t.Error("update: a plain pod becoming unschedulable must not wake the pools")
			}
			if !pr.Delete(event.DeleteEvent{Object: gpu}) || pr.Delete(event.DeleteEvent{Object: plain}) {
				t.Error("delete: want a GPU pod through, a plain pod not")
			}
		})
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
	if msg := pool.Status.Demand.Message; !strings.HasPrefix(msg, demand.WorkloadsNotObserved) || !strings.Contains(msg, "pod ml/train") {
		t.Fatalf("demand message %q, want Kueue not observed, then the pod's demand", msg)
	}
	if want := now.Add(requeueKueue); !sc.demandRecheck.Equal(want) {
		t.Fatalf("recheck %s, want Kueue read again at %s", sc.demandRecheck, want)
	}
}
