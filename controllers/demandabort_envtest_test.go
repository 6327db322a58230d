package controllers

import (
	"context"
	"strings"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
)

// blockDrain puts a pod on the VM's node that a PodDisruptionBudget allows no
// disruption of: its drain times out.
func (h *harness) blockDrain(vm string) {
	h.t.Helper()
	h.addPod("infer-a", h.prefix+vm, map[string]string{"app": "infer"})
	one := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "infer", Namespace: h.prefix + "apps"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "infer"}}},
	}
	h.must(k8s.Create(h.ctx, pdb))
	// envtest runs no disruption controller: stand in for it.
	pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation, DisruptionsAllowed: 0,
		CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1}
	h.must(k8s.Status().Update(h.ctx, pdb))
}

// TestDemandAbortedSwitchEnds: a demand switch whose drain times out (onTimeout: Abort)
// is not held for ever. On the next pass demand decides from the layout that serves
// (day, by the schedule; the cooldown holds the pending pod's demand back), the aborted
// transition is cleared, the abort is in the history once, and once the pod is gone day
// stays with no switch started.
func TestDemandAbortedSwitchEnds(t *testing.T) {
	h := newHarness(t, "dab-")
	pool := h.demandPool()
	pool.Spec.Drain.Timeout = &metav1.Duration{Duration: time.Minute}
	pool.Spec.Demand.Cooldown = &metav1.Duration{Duration: 30 * time.Minute}
	h.dayPastDwell(pool)
	h.clock.Step(20 * time.Minute) // past the cooldown of the switch to day too
	h.blockDrain("day-1")

	train := h.gpuPod("train-1", "", true, nil)
	h.reconcile(pool.Name)
	h.clock.Step(2 * time.Minute)
	var p *gpupoolv1.GPUPoolProfile
	for i := 0; i < 30; i++ {
		res := h.reconcile(pool.Name)
		h.settle()
		if p = h.get(pool.Name); p.Status.Transition != nil && p.Status.Transition.AbortedTime != nil {
			break
		}
		h.clock.Step(min(max(res.RequeueAfter, time.Second), 10*time.Second))
	}
	if tr := p.Status.Transition; tr == nil || tr.AbortedTime == nil || tr.To != "night" || tr.Reason != gpupoolv1.DesiredByDemand {
		t.Fatalf("transition %+v, want the demand switch to night aborted; desired %s (%s), demand %+v", tr, p.Status.DesiredLayout, p.Status.DesiredReason, p.Status.Demand)
	}

	// The next pass: the aborted switch is not in flight; demand holds nothing.
	h.clock.Step(10 * time.Second)
	h.reconcile(pool.Name)
	p = h.get(pool.Name)
	if p.Status.Transition != nil || p.Status.DesiredLayout != "day" || p.Status.DesiredReason == gpupoolv1.DesiredByDemand {
		t.Fatalf("after the abort: desired %s (%s), transition %+v, demand %q; want the schedule's day and no transition",
			p.Status.DesiredLayout, p.Status.DesiredReason, p.Status.Transition, p.Status.Demand.Message)
	}
	if !strings.Contains(p.Status.Demand.Message, "cooldown") {
		t.Fatalf("demand message %q, want the pending pod held back by the cooldown", p.Status.Demand.Message)
	}
	aborts := 0
	for _, rec := range p.Status.History {
		if rec.To == "night" && rec.Reason == gpupoolv1.DesiredByDemand {
			aborts++
			if rec.Result != gpupoolv1.TransitionAborted {
				t.Errorf("history %+v, want the demand switch recorded as aborted", rec)
			}
		}
	}
	if aborts != 1 {
		t.Fatalf("history %+v, want the aborted demand switch once", p.Status.History)
	}
	if n := h.node("day-1"); n.Spec.Unschedulable {
		t.Fatalf("node %s left cordoned after the abort", n.Name)
	}

	// The pod goes before the cooldown ends: day stays, nothing starts.
	h.must(k8s.Delete(h.ctx, train, client.GracePeriodSeconds(0)))
	h.clock.Step(30 * time.Minute)
	h.reconcile(pool.Name)
	if p = h.get(pool.Name); p.Status.Transition != nil || p.Status.ActiveLayout != "day" || p.Status.DesiredLayout != "day" {
		t.Fatalf("demand gone: active %s, desired %s (%s), transition %+v", p.Status.ActiveLayout, p.Status.DesiredLayout, p.Status.DesiredReason, p.Status.Transition)
	}
}

// TestDemandKueueAbsentPodsStillCount: a pool with spec.kueue whose Kueue API cannot be
// read (absent: every Kueue list fails with no match) still follows the pods' demand: a
// pending training pod brings night in; status.demand says Kueue was not read, and one
// event says so.
func TestDemandKueueAbsentPodsStillCount(t *testing.T) {
	h := newHarness(t, "dka-")
	h.client = func(c client.WithWatch) client.Client {
		return interceptor.NewClient(c, interceptor.Funcs{
			List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
				if u, ok := list.(*unstructured.UnstructuredList); ok && u.GroupVersionKind().Group == KueueGroupVersion.Group {
					return &meta.NoKindMatchError{GroupKind: u.GroupVersionKind().GroupKind(), SearchedVersions: []string{KueueGroupVersion.Version}}
				}
				return c.List(ctx, list, opts...)
			},
		})
	}
	pool := h.demandPool()
	pool.Spec.Kueue = &gpupoolv1.KueueSpec{Flavors: []gpupoolv1.KueueFlavor{
		{Name: h.prefix + "day", Layout: "day", Quota: gpuList("4")}, {Name: h.prefix + "night", Layout: "night", Quota: gpuList("1")}}}
	h.dayPastDwell(pool)

	h.gpuPod("train-1", "", true, nil)
	h.reconcile(pool.Name)
	p := h.get(pool.Name)
	if p.Status.Demand == nil {
		t.Fatalf("no status.demand (desired %s, %s): the pods' demand was discarded", p.Status.DesiredLayout, p.Status.DesiredReason)
	}
	if msg := p.Status.Demand.Message; !strings.HasPrefix(msg, demand.WorkloadsNotObserved) || !strings.Contains(msg, "demand acts at") {
		t.Fatalf("demand message %q, want Kueue not observed, then the pod's demand timing", msg)
	}
	h.clock.Step(2 * time.Minute)
	h.reconcile(pool.Name)
	if p = h.get(pool.Name); p.Status.DesiredLayout != "night" || p.Status.DesiredReason != gpupoolv1.DesiredByDemand {
		t.Fatalf("pod pending for `for`: desired %s (%s), demand %q; want night by demand", p.Status.DesiredLayout, p.Status.DesiredReason, p.Status.Demand.Message)
	}
	h.converge(pool.Name, "night", 60)
	n := 0
	for _, e := range h.events() {
		if strings.Contains(e, "KueueDemandNotObserved") {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d KueueDemandNotObserved events, want 1", n)
	}
}
