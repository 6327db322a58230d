package controllers

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	clocktesting "k8s.io/utils/clock/testing"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/plan"
)

// TestDemandWatchWakesOnlyOnAChangedDecision: the demand watch wakes the pool's pass
// (which reads vCenter) when a pod starts a demand timer, and not for a pod that changes
// no decision: one outside the selected namespaces, or one more above the threshold.
func TestDemandWatchWakesOnlyOnAChangedDecision(t *testing.T) {
	now := time.Date(2031, 3, 17, 15, 0, 0, 0, time.UTC)
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = gpupoolv1.AddToScheme(s)
	pool := demandTestPool()
	pool.Spec.Demand = &gpupoolv1.DemandPolicy{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"gpupool.dev/demand": "lab"}},
		Rules: []gpupoolv1.DemandRule{{Layout: "night", Action: gpupoolv1.DemandBringIn, For: &metav1.Duration{Duration: 2 * time.Minute}}}}
	pool.Status.DesiredLayout, pool.Status.DesiredReason = "day", gpupoolv1.DesiredByDefault
	c := withPodIndexes(fake.NewClientBuilder().WithScheme(s).WithStatusSubresource(pool)).WithObjects(pool,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ml", Labels: map[string]string{"gpupool.dev/demand": "lab"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}}).Build()
	r := &GPUPoolProfileReconciler{Client: c, APIReader: c, podsIndexed: true, Clock: clocktesting.NewFakeClock(now)}
	dw := newDemandWatch(r)
	ctx := context.Background()
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(pool)}
	woken := func() bool {
		t.Helper()
		if _, err := dw.Reconcile(ctx, req); err != nil {
			t.Fatal(err)
		}
		select {
		case e := <-dw.wake:
			if e.Object.GetName() != pool.Name {
				t.Fatalf("woke %s", e.Object.GetName())
			}
			return true
		default:
			return false
		}
	}
	create := func(p *corev1.Pod) {
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	settle := func() {
		// The pass: it writes the decision the watch would make.
		var cur gpupoolv1.GPUPoolProfile
		if err := c.Get(ctx, req.NamespacedName, &cur); err != nil {
			t.Fatal(err)
		}
		v, err := r.viewDemand(ctx, &cur, now, &kueueView{})
		if err != nil || v.Unobserved != nil {
			t.Fatal(err, v.Unobserved)
		}
		cur.Status.Demand, cur.Status.DesiredLayout, cur.Status.DesiredReason = v.Status, v.Decision.Layout, v.Decision.Reason
		if err := c.Status().Update(ctx, &cur); err != nil {
			t.Fatal(err)
		}
	}
	settle()
	if woken() {
		t.Fatal("woken with nothing changed")
	}
	training := []podOpt{pendingUnschedulable, selecting("workload", "training"), tolerating("training")}
	tenant := testPod("t", 8, training...)
	tenant.Namespace = "tenant"
	create(tenant)
	if woken() {
		t.Fatal("a pod of a namespace demand does not select woke the pool")
	}
	if reqs := r.demandPools(ctx, tenant); len(reqs) != 0 {
		t.Fatalf("a tenant's pod maps to pools %v", reqs)
	}
	first := testPod("a", 1, training...)
	create(first)
	if reqs := r.demandPools(ctx, first); len(reqs) != 1 {
		t.Fatalf("a selected pod maps to pools %v, want the pool", reqs)
	}
	if !woken() {
		t.Fatal("a pending pod that starts night's pendingSince did not wake the pool")
	}
	settle()
	create(testPod("b", 1, training...))
	if woken() {
		t.Fatal("one more pending pod above the threshold woke the pool: no decision changed")
	}
	if !demandChanged(pool, demand.View{Decision: dwDecision("night"), Status: pool.Status.Demand}) {
		t.Fatal("another layout wanted is a change")
	}
}

func dwDecision(layout string) plan.DemandDecision {
	return plan.DemandDecision{Decision: plan.Decision{Layout: layout}}
}

// TestDemandWatchCoalescesABurst: the events of a burst of pods are one recheck of the
// pool, demandCoalesce after the first; pods that do not ask for the GPU are none.
func TestDemandWatchCoalescesABurst(t *testing.T) {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = gpupoolv1.AddToScheme(s)
	pool := demandTestPool()
	pool.Spec.Demand = &gpupoolv1.DemandPolicy{NamespaceSelector: &metav1.LabelSelector{}}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(pool).Build()
	dw := newDemandWatch(&GPUPoolProfileReconciler{Client: c})
	fc := clocktesting.NewFakeClock(time.Date(2031, 3, 17, 15, 0, 0, 0, time.UTC))
	q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request](),
		workqueue.TypedRateLimitingQueueConfig[reconcile.Request]{Clock: fc})
	defer q.ShutDown()
	h := dw.podHandler()
	for i := range 50 {
		p := testPod(fmt.Sprintf("p-%d", i), 1, pendingUnschedulable)
		h.Create(context.Background(), event.CreateEvent{Object: p}, q)
		h.Update(context.Background(), event.UpdateEvent{ObjectOld: p, ObjectNew: p}, q)
	}
	h.Create(context.Background(), event.CreateEvent{Object: testPod("cpu", 0, pendingUnschedulable)}, q)
	if n := q.Len(); n != 0 {
		t.Fatalf("%d rechecks queued before demandCoalesce passed, want none", n)
	}
	fc.Step(demandCoalesce)
	got := make(chan reconcile.Request, 1)
	go func() {
		r, _ := q.Get()
		got <- r
	}()
	select {
	case r := <-got:
		if r.Name != pool.Name {
			t.Fatalf("recheck of %q", r.Name)
		}
	case <-time.After(time.Minute): // a guard against a hang, not a measure
		t.Fatal("no recheck after demandCoalesce")
	}
	if n := q.Len(); n != 0 {
		t.Fatalf("%d more rechecks queued: the burst of 100 events must be one", n)
	}
}

// TestDemandInputChanged: the demand watch looks again after the pool writes that may
// change demand's decision, not after every status write of a transition.
func TestDemandInputChanged(t *testing.T) {
	pr := demandInputChanged()
	base := demandTestPool()
	for _, tc := range []struct {
		name   string
		change func(*gpupoolv1.GPUPoolProfile)
		want   bool
	}{
		{"progress and conditions", func(p *gpupoolv1.GPUPoolProfile) {
			p.Status.Progress = "3/5"
			setCond(p, gpupoolv1.ConditionReady, false, ReasonTransitioning, "on its way")
		}, false},
		{"the plan preview", func(p *gpupoolv1.GPUPoolProfile) { p.Status.Plan = &gpupoolv1.PlanPreview{Layout: "night"} }, false},
		{"the spec", func(p *gpupoolv1.GPUPoolProfile) { p.Generation++ }, true},
		{"the budget reset annotation", func(p *gpupoolv1.GPUPoolProfile) {
			p.Annotations = map[string]string{gpupoolv1.AnnotationResetDemandBudget: "now"}
		}, true},
		{"the layout wanted", func(p *gpupoolv1.GPUPoolProfile) { p.Status.DesiredLayout = "night" }, true},
		{"a demand timer", func(p *gpupoolv1.GPUPoolProfile) {
			p.Status.Demand = &gpupoolv1.DemandStatus{Layouts: []gpupoolv1.LayoutDemand{{Layout: "night", PendingSince: &metav1.Time{}}}}
		}, true},
		{"a transition starts", func(p *gpupoolv1.GPUPoolProfile) { p.Status.Transition = &gpupoolv1.TransitionStatus{To: "night"} }, true},
		{"the history", func(p *gpupoolv1.GPUPoolProfile) {
			p.Status.History = append(p.Status.History, gpupoolv1.TransitionRecord{To: "night"})
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := base.DeepCopy()
			tc.change(n)
			if got := pr.Update(event.UpdateEvent{ObjectOld: base, ObjectNew: n}); got != tc.want {
				t.Errorf("looks again: %v, want %v", got, tc.want)
			}
		})
	}
}
