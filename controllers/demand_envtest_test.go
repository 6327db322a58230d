package controllers

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nodes"
)

// demandPool is the day/night pool with demand: night may be brought in by training pods
// at any time, and is let go when it has been idle for 5 minutes, 10 minutes at least
// after it came.
func (h *harness) demandPool() *gpupoolv1.GPUPoolProfile {
	p := h.dayNight()
	p.Spec.Demand = &gpupoolv1.DemandPolicy{
		NamespaceSelector: &metav1.LabelSelector{},
		Rules: []gpupoolv1.DemandRule{{Layout: "night", Action: gpupoolv1.DemandBringIn,
			For: &metav1.Duration{Duration: 2 * time.Minute}, IdleFor: &metav1.Duration{Duration: 5 * time.Minute}}},
		MinDwell: &metav1.Duration{Duration: 10 * time.Minute},
		Cooldown: &metav1.Duration{Duration: 0},
	}
	return p
}

// dayPastDwell creates the pool, lets it come up at night and switch to day by the
// schedule, and steps the clock past day's dwell.
func (h *harness) dayPastDwell(pool *gpupoolv1.GPUPoolProfile) {
	h.t.Helper()
	h.create(pool)
	h.converge(pool.Name, "night", 40)
	h.clock.SetTime(monday0700.Add(50 * time.Minute))
	h.converge(pool.Name, "day", 60)
	h.clock.Step(20 * time.Minute)
}

// gpuPod is a pod asking for one GPU in the test's namespace: pending and unschedulable
// when node is empty, else bound to node. training selects the night layout's nodes.
func (h *harness) gpuPod(name, node string, training bool, annotations map[string]string) *corev1.Pod {
	h.t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.prefix + "apps", Annotations: annotations},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "train",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{nodes.DefaultGPUResource: resource.MustParse("1")}}}}},
	}
	if training {
		pod.Spec.NodeSelector = map[string]string{"lab.example/workload": "training"}
		pod.Spec.Tolerations = []corev1.Toleration{{Key: "lab.example/training", Operator: corev1.TolerationOpExists}}
	}
	h.must(k8s.Create(h.ctx, pod))
	h.t.Cleanup(func() { _ = k8s.Delete(h.ctx, pod, client.GracePeriodSeconds(0)) })
	if node == "" {
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, Message: "0/5 nodes are available"}}
		h.must(k8s.Status().Update(h.ctx, pod))
	}
	return pod
}

func layoutDemand(p *gpupoolv1.GPUPoolProfile, layout string) gpupoolv1.LayoutDemand {
	if p.Status.Demand != nil {
		for _, l := range p.Status.Demand.Layouts {
			if l.Layout == layout {
				return l
			}
		}
	}
	return gpupoolv1.LayoutDemand{Layout: layout}
}

// TestDemandBringsNightInAndLetsItGo: a training pod submitted by day waits with the
// reason in status; a do-not-disrupt pod on a day node holds the switch back; once it is
// gone, demand held for `for` brings night in (reason Demand, the pod named in the
// transition, the history and the events); night stays while the job runs and goes,
// back to the schedule's day, once idle for idleFor and past its dwell.
func TestDemandBringsNightInAndLetsItGo(t *testing.T) {
	h := newHarness(t, "dmd-")
	pool := h.demandPool()
	h.dayPastDwell(pool)

	// A do-not-disrupt GPU pod on a day node, and a training pod nothing can run.
	guard := h.gpuPod("serving", h.prefix+"day-1", false, map[string]string{AnnotationDoNotDisrupt: "true"})
	h.gpuPod("train-1", "", true, nil)
	h.reconcile(pool.Name)
	p := h.get(pool.Name)
	night := layoutDemand(p, "night")
	if night.PendingPods != 1 || night.PendingGPUs != 1 || night.PendingSince == nil || len(night.Pods) != 1 || !strings.Contains(night.Pods[0], "train-1") {
		t.Fatalf("status.demand for night = %+v, want the pending training pod", night)
	}
	if day := layoutDemand(p, "day"); day.RunningGPUs != 1 {
		t.Fatalf("status.demand for day = %+v, want the serving pod's GPU running", day)
	}
	if p.Status.DesiredLayout != "day" || !strings.Contains(p.Status.Demand.Message, "demand acts at") {
		t.Fatalf("before `for` ran out: desired %s, demand message %q", p.Status.DesiredLayout, p.Status.Demand.Message)
	}
	h.clock.Step(2 * time.Minute)
	h.reconcile(pool.Name)
	p = h.get(pool.Name)
	if p.Status.DesiredLayout != "day" || !strings.Contains(p.Status.Demand.Message, "do-not-disrupt") {
		t.Fatalf("with a do-not-disrupt pod on a day node: desired %s (%s), demand message %q", p.Status.DesiredLayout, p.Status.DesiredReason, p.Status.Demand.Message)
	}
	if !containsEvent(h.events(), "DemandHeldBack") {
		t.Fatal("no DemandHeldBack event")
	}

	// The guard goes: demand brings night in.
	h.must(k8s.Delete(h.ctx, guard, client.GracePeriodSeconds(0)))
	h.reconcile(pool.Name)
	p = h.get(pool.Name)
	if p.Status.DesiredLayout != "night" || p.Status.DesiredReason != gpupoolv1.DesiredByDemand {
		t.Fatalf("demand held 2m: desired %s (%s), demand message %q", p.Status.DesiredLayout, p.Status.DesiredReason, p.Status.Demand.Message)
	}
	if tr := p.Status.Transition; tr == nil || tr.Reason != gpupoolv1.DesiredByDemand || !strings.Contains(tr.Cause, "train-1") {
		t.Fatalf("transition %+v, want one caused by demand naming the pod", tr)
	}
	p = h.converge(pool.Name, "night", 60)
	if rec := p.Status.History[0]; rec.To != "night" || rec.Reason != gpupoolv1.DesiredByDemand || !strings.Contains(rec.Message, "train-1") {
		t.Fatalf("history[0] = %+v, want the demand switch naming the pod", rec)
	}
	if !containsEvent(h.events(), "Demand") {
		t.Fatal("no event says the switch was demand's")
	}

	// The job runs on the night node: night stays, against the schedule, past idleFor.
	var pending corev1.Pod
	h.must(k8s.Get(h.ctx, client.ObjectKey{Namespace: h.prefix + "apps", Name: "train-1"}, &pending))
	h.must(k8s.Delete(h.ctx, &pending, client.GracePeriodSeconds(0)))
	job := h.gpuPod("train-1-run", h.prefix+"night-1", true, nil)
	h.clock.Step(15 * time.Minute)
	h.reconcile(pool.Name)
	p = h.get(pool.Name)
	if p.Status.DesiredLayout != "night" || !strings.Contains(p.Status.Demand.Message, "in use") {
		t.Fatalf("job running on night: desired %s (%s), demand message %q", p.Status.DesiredLayout, p.Status.DesiredReason, p.Status.Demand.Message)
	}

	// The job ends: night is idle, and let go after idleFor.
	h.must(k8s.Delete(h.ctx, job, client.GracePeriodSeconds(0)))
	h.reconcile(pool.Name)
	if p = h.get(pool.Name); p.Status.DesiredLayout != "night" || layoutDemand(p, "night").IdleSince == nil {
		t.Fatalf("just idle: desired %s, night demand %+v", p.Status.DesiredLayout, layoutDemand(p, "night"))
	}
	h.clock.Step(5 * time.Minute)
	p = h.converge(pool.Name, "day", 60)
	if p.Status.DesiredReason != gpupoolv1.DesiredBySchedule {
		t.Fatalf("after the job: desired %s by %s, want the schedule's day", p.Status.DesiredLayout, p.Status.DesiredReason)
	}
}

// TestDemandWithoutPolicyChangesNothing: a pool without spec.demand ignores pending pods
// and has no status.demand.
func TestDemandWithoutPolicyChangesNothing(t *testing.T) {
	h := newHarness(t, "dmn-")
	pool := h.dayNight()
	h.create(pool)
	h.converge(pool.Name, "night", 40)
	h.clock.SetTime(monday0700.Add(50 * time.Minute))
	h.converge(pool.Name, "day", 60)
	h.gpuPod("train-1", "", true, nil)
	h.clock.Step(10 * time.Minute)
	h.reconcile(pool.Name)
	p := h.get(pool.Name)
	if p.Status.DesiredLayout != "day" || p.Status.Demand != nil {
		t.Fatalf("without spec.demand: desired %s, status.demand %+v", p.Status.DesiredLayout, p.Status.Demand)
	}
}

// TestDemandSwitchIsWarnedAhead: a demand switch that would evict a GPU pod is announced
// warnAhead ahead: the day nodes get the draining-soon warning as before a scheduled
// switch, and the switch starts when the warning runs out.
func TestDemandSwitchIsWarnedAhead(t *testing.T) {
	h := newHarness(t, "dmw-")
	pool := h.demandPool()
	pool.Spec.Demand.MaxEvictions = ptr.To(int32(4))
	h.dayPastDwell(pool)

	h.gpuPod("serving", h.prefix+"day-1", false, nil)
	h.gpuPod("train-1", "", true, nil)
	h.reconcile(pool.Name)
	h.clock.Step(2 * time.Minute)
	h.reconcile(pool.Name)
	p := h.get(pool.Name)
	sw := p.Status.Demand.Switch
	if sw == nil || sw.Layout != "night" || !sw.At.Time.Equal(h.clock.Now().Add(10*time.Minute)) || p.Status.DesiredLayout != "day" {
		t.Fatalf("announced switch %+v, desired %s; want night announced warnAhead (10m) ahead", sw, p.Status.DesiredLayout)
	}
	if n := p.Status.NextTransition; n == nil || n.Layout != "night" || !n.At.Equal(&sw.At) {
		t.Fatalf("nextTransition %+v, want the announced switch", n)
	}
	if !containsEvent(h.events(), "DemandSwitchAnnounced") {
		t.Fatal("no DemandSwitchAnnounced event")
	}
	if !slices.ContainsFunc(h.node("day-1").Spec.Taints, func(t corev1.Taint) bool { return t.Key == TaintDrainingSoon }) {
		t.Fatalf("day-1 taints %+v, want the draining-soon warning", h.node("day-1").Spec.Taints)
	}
	h.clock.Step(9 * time.Minute)
	h.reconcile(pool.Name)
	if p = h.get(pool.Name); p.Status.Transition != nil {
		t.Fatalf("a minute before the announced start: transition %+v", p.Status.Transition)
	}
	h.clock.Step(time.Minute)
	h.reconcile(pool.Name)
	if p = h.get(pool.Name); p.Status.Transition == nil || p.Status.Transition.To != "night" || p.Status.DesiredReason != gpupoolv1.DesiredByDemand {
		t.Fatalf("at the announced start: desired %s (%s), transition %+v", p.Status.DesiredLayout, p.Status.DesiredReason, p.Status.Transition)
	}
}

// TestDemandBudgetShownAndReset: a spent switch budget holds demand back and shows in
// status.demand.budget with when it frees up; an admin's new
// gpupool.dev/reset-demand-budget value resets it on gpupool's clock, and demand acts.
func TestDemandBudgetShownAndReset(t *testing.T) {
	h := newHarness(t, "dbr-")
	pool := h.demandPool()
	pool.Spec.Demand.MaxSwitchesPerDay = ptr.To(int32(2))
	h.dayPastDwell(pool) // two switches: night, then day
	h.gpuPod("train-1", "", true, nil)
	h.reconcile(pool.Name)
	h.clock.Step(2 * time.Minute)
	h.reconcile(pool.Name)
	p := h.get(pool.Name)
	b := p.Status.Demand.Budget
	if p.Status.DesiredLayout != "day" || b == nil || b.Used != 2 || b.Max != 2 || b.NextAt == nil || !strings.Contains(p.Status.Demand.Message, "switch budget spent") {
		t.Fatalf("with the budget spent: desired %s, budget %+v, message %q", p.Status.DesiredLayout, b, p.Status.Demand.Message)
	}
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[gpupoolv1.AnnotationResetDemandBudget] = "after the maintenance"
	h.must(k8s.Update(h.ctx, p))
	h.reconcile(pool.Name)
	p = h.get(pool.Name)
	b = p.Status.Demand.Budget
	if b == nil || b.ResetToken != "after the maintenance" || b.ResetTime == nil || !b.ResetTime.Time.Equal(h.clock.Now()) {
		t.Fatalf("after the reset: budget %+v, want reset now on gpupool's clock", b)
	}
	if p.Status.DesiredLayout != "night" || p.Status.DesiredReason != gpupoolv1.DesiredByDemand || b.Used != 0 {
		t.Fatalf("after the reset: desired %s (%s), budget %+v; want night by demand, nothing counted yet", p.Status.DesiredLayout, p.Status.DesiredReason, b)
	}
	// The same value again resets nothing; the demand switch now counts.
	at := b.ResetTime.Time
	h.clock.Step(time.Minute)
	h.reconcile(pool.Name)
	if b := h.get(pool.Name).Status.Demand.Budget; b == nil || !b.ResetTime.Time.Equal(at) || b.Used != 1 {
		t.Fatalf("an unchanged annotation: budget %+v, want the reset kept and the demand switch counted", b)
	}
}

// TestTenantOutsideTheSelectorCannotBringNightIn: two tenants' namespaces, one selected
// by spec.demand.namespaceSelector: the other tenant's pending training pod, held well
// past `for`, switches nothing and is not named; the same pod in the selected namespace
// brings night in.
func TestTenantOutsideTheSelectorCannotBringNightIn(t *testing.T) {
	h := newHarness(t, "dtn-")
	pool := h.demandPool()
	pool.Spec.Demand.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"gpupool.dev/demand": h.prefix + "lab"}}
	h.dayPastDwell(pool)
	selected := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: h.prefix + "ml", Labels: map[string]string{"gpupool.dev/demand": h.prefix + "lab"}}}
	tenant := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: h.prefix + "tenant"}}
	for _, ns := range []*corev1.Namespace{selected, tenant} {
		h.must(k8s.Create(h.ctx, ns))
	}
	pending := func(ns, name string) {
		h.t.Helper()
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "train",
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{nodes.DefaultGPUResource: resource.MustParse("4")}}}},
				NodeSelector: map[string]string{"lab.example/workload": "training"},
				Tolerations:  []corev1.Toleration{{Key: "lab.example/training", Operator: corev1.TolerationOpExists}}},
		}
		h.must(k8s.Create(h.ctx, pod))
		h.t.Cleanup(func() { _ = k8s.Delete(h.ctx, pod, client.GracePeriodSeconds(0)) })
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}
		h.must(k8s.Status().Update(h.ctx, pod))
	}
	pending(tenant.Name, "train-elsewhere")
	for range 3 {
		h.reconcile(pool.Name)
		h.clock.Step(5 * time.Minute)
	}
	h.reconcile(pool.Name)
	p := h.get(pool.Name)
	if p.Status.DesiredLayout != "day" || layoutDemand(p, "night").PendingPods != 0 {
		t.Fatalf("an unselected tenant's pod: desired %s, night demand %+v; want day, nothing pending", p.Status.DesiredLayout, layoutDemand(p, "night"))
	}
	if strings.Contains(p.Status.Demand.Message, "train-elsewhere") {
		t.Fatalf("the demand message names a pod of an unselected namespace: %q", p.Status.Demand.Message)
	}
	pending(selected.Name, "train-here")
	h.reconcile(pool.Name)
	h.clock.Step(2 * time.Minute)
	h.reconcile(pool.Name)
	p = h.get(pool.Name)
	if p.Status.DesiredLayout != "night" || p.Status.DesiredReason != gpupoolv1.DesiredByDemand {
		t.Fatalf("a selected namespace's pod held for `for`: desired %s (%s), demand %q", p.Status.DesiredLayout, p.Status.DesiredReason, p.Status.Demand.Message)
	}
	if d := layoutDemand(p, "night"); d.PendingPods != 1 || d.PendingGPUs != 4 {
		t.Fatalf("night demand %+v, want only the selected namespace's pod", d)
	}
}
