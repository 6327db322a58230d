package controllers

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/internal/testworld"
)

func condIs(t *testing.T, p *gpupoolv1.GPUPoolProfile, typ string, want metav1.ConditionStatus) *metav1.Condition {
	t.Helper()
	c := findCondition(p, typ)
	if c == nil || c.Status != want {
		t.Errorf("%s condition %+v, want %s", typ, c, want)
		return &metav1.Condition{}
	}
	return c
}

// TestHistoryPlanAndReconciling follows day -> night -> (superseded) -> day and checks
// status.history, status.plan and the Reconciling condition kstatus reads at each stage.
func TestHistoryPlanAndReconciling(t *testing.T) {
	h := newHarness(t, "his-")
	pool := h.dayNight()
	h.clock.SetTime(monday1000)
	h.create(pool)

	// A new pool already at its wanted layout: Ready once its nodes are labelled; the
	// plan previews the next switch (night at 19:50).
	p := h.converge(pool.Name, "day", 30)
	condIs(t, p, gpupoolv1.ConditionReady, metav1.ConditionTrue)
	condIs(t, p, gpupoolv1.ConditionReconciling, metav1.ConditionFalse)
	if len(p.Status.History) != 1 || p.Status.History[0].To != "day" || p.Status.History[0].Result != gpupoolv1.TransitionCompleted {
		t.Fatalf("history %+v, want one completed transition to day", p.Status.History)
	}
	pv := p.Status.Plan
	if pv == nil || pv.For != gpupoolv1.PlanForNext || pv.Layout != "night" || pv.At == nil || !pv.At.Time.Equal(monday1950) || pv.Steps == 0 {
		t.Fatalf("plan %+v, want a preview of the switch to night at %s", pv, monday1950)
	}

	// The switch starts: Reconciling, and the plan is the current one.
	h.clock.SetTime(monday1950)
	h.reconcile(pool.Name)
	p = h.get(pool.Name)
	c := condIs(t, p, gpupoolv1.ConditionReconciling, metav1.ConditionTrue)
	if c.Reason != ReasonTransitioning && c.Reason != ReasonDrainBlocked {
		t.Errorf("Reconciling reason %s", c.Reason)
	}
	if pv := p.Status.Plan; pv == nil || pv.For != gpupoolv1.PlanForCurrent || pv.Layout != "night" {
		t.Errorf("plan %+v, want the current plan to night", pv)
	}
	p = h.converge(pool.Name, "night", 60)
	condIs(t, p, gpupoolv1.ConditionReconciling, metav1.ConditionFalse)
	got := p.Status.History
	if len(got) != 2 || got[0].From != "day" || got[0].To != "night" || got[0].Result != gpupoolv1.TransitionCompleted ||
		got[0].Reason != gpupoolv1.DesiredByDefault || got[0].SlowestWorker == "" || !got[0].EndTime.After(got[0].StartTime.Time) {
		t.Fatalf("history %+v, want night (completed, slowest worker named) then day", got)
	}

	// Night -> day is superseded by an override back to night halfway.
	h.clock.SetTime(tuesday0750)
	h.reconcile(pool.Name)
	h.settle()
	cur := h.get(pool.Name)
	if cur.Status.Transition == nil || cur.Status.Transition.To != "day" {
		t.Fatalf("no transition to day: %+v", cur.Status.Transition)
	}
	cur.Spec.Override = &gpupoolv1.Override{Layout: "night", Reason: "training run"}
	h.must(k8s.Update(h.ctx, cur))
	p = h.converge(pool.Name, "night", 60)
	// The pool goes back to night (a transition of its own, by the override).
	if got := p.Status.History; len(got) != 4 || got[1].Result != gpupoolv1.TransitionSuperseded || got[1].To != "day" ||
		got[0].To != "night" || got[0].Reason != gpupoolv1.DesiredByOverride || got[0].Result != gpupoolv1.TransitionCompleted {
		t.Fatalf("history %+v, want the transition to day superseded, then back to night", got)
	}
}

// TestNewPausedPoolSaysSo: kubectl wait --for=condition=Ready on a paused pool learns
// why it is not Ready from the first pass, and kstatus does not see it as reconciling.
func TestNewPausedPoolSaysSo(t *testing.T) {
	h := newHarness(t, "pnw-")
	pool := h.dayNight()
	pool.Spec.Paused = true
	h.clock.SetTime(monday1000)
	h.create(pool)
	h.reconcile(pool.Name)
	p := h.get(pool.Name)
	if c := condIs(t, p, gpupoolv1.ConditionReady, metav1.ConditionFalse); c.Reason != ReasonPaused {
		t.Errorf("Ready reason %s, want Paused", c.Reason)
	}
	condIs(t, p, gpupoolv1.ConditionReconciling, metav1.ConditionFalse)
}

// TestPlanPreviewBounded: the preview of a 256-VM pool's plan stays small and says what
// it leaves out.
func TestPlanPreviewBounded(t *testing.T) {
	p := &plan.Plan{Layout: "night"}
	for h := 0; h < 32; h++ {
		hp := plan.HostPlan{Host: fmt.Sprintf("esx-%02d.lab.example.com", h)}
		for v := 0; v < 8; v++ {
			vm := fmt.Sprintf("/dc1/vm/gpu/pool-worker-%03d", h*8+v)
			for _, a := range []plan.Action{plan.Drain, plan.Suspend, plan.Relabel, plan.Uncordon} {
				hp.Steps = append(hp.Steps, plan.Step{VM: vm, Host: hp.Host, Action: a, Profile: "nvidia_h100xm-1-10cme",
					Reason: "parked: not in layout night, because the schedule window weekday-inference closed at 20:00 Europe/Berlin"})
			}
			hp.Later = append(hp.Later, plan.Step{VM: vm, Action: plan.PowerOn, Profile: "nvidia_h100xm-7-80c", Reason: "power on for layout night"})
		}
		p.Hosts = append(p.Hosts, hp)
	}
	pv := previewOf(p, gpupoolv1.PlanForCurrent, nil, 3)
	data, err := json.Marshal(pv)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 16<<10 {
		t.Errorf("preview is %d bytes, want under 16 KiB", len(data))
	}
	if pv.Steps != 32*8*5 || pv.WaitingSteps != 256 || pv.Truncated == "" {
		t.Errorf("steps %d waiting %d truncated %q", pv.Steps, pv.WaitingSteps, pv.Truncated)
	}
	shown := 0
	for _, hp := range pv.Hosts {
		shown += len(hp.Steps)
		if len(hp.Steps) > previewMaxStepsPerHost {
			t.Errorf("host %s lists %d steps", hp.Host, len(hp.Steps))
		}
	}
	if shown != previewMaxSteps {
		t.Errorf("shown %d steps, want %d", shown, previewMaxSteps)
	}
	t.Logf("preview of %d steps: %d bytes, %s", pv.Steps, len(data), pv.Truncated)
}

// TestNewPoolWithoutVCenterIsReconciling: a pool gpupool could not observe yet is not
// taken for current by kstatus (Reconciling=True) and says why it is not Ready; once
// vCenter answers, it becomes Ready and Reconciling=False.
func TestNewPoolWithoutVCenterIsReconciling(t *testing.T) {
	h := newHarness(t, "nvc-")
	pool := h.dayNight()
	h.clock.SetTime(monday1000)
	h.sim.RefuseConnections()
	h.create(pool)
	h.reconcile(pool.Name)
	p := h.get(pool.Name)
	if c := condIs(t, p, gpupoolv1.ConditionReconciling, metav1.ConditionTrue); c.Reason != ReasonVCenterUnavailable {
		t.Errorf("Reconciling reason %s, want %s", c.Reason, ReasonVCenterUnavailable)
	}
	if c := condIs(t, p, gpupoolv1.ConditionReady, metav1.ConditionFalse); c.Reason != ReasonVCenterUnavailable {
		t.Errorf("Ready reason %s, want %s", c.Reason, ReasonVCenterUnavailable)
	}
	h.must(h.sim.AcceptConnections())
	p = h.converge(pool.Name, "day", 30)
	condIs(t, p, gpupoolv1.ConditionReady, metav1.ConditionTrue)
	condIs(t, p, gpupoolv1.ConditionReconciling, metav1.ConditionFalse)
}

// TestNextLayoutInfeasibleIsAnnouncedAhead: a typo in the layout of the next switch shows
// before the switch: a Warning event naming the layout, the switch's time and the problem,
// once (not again on every pass), and again when the problems change.
func TestNextLayoutInfeasibleIsAnnouncedAhead(t *testing.T) {
	h := newHarness(t, "nxi-")
	pool := h.dayNight()
	night := testworld.Layout(pool, "night")
	night.Workers = append(night.Workers, gpupoolv1.Worker{VM: h.prefix + "nihgt-1", Profile: night.Workers[0].Profile})
	h.clock.SetTime(monday1000)
	h.create(pool)
	p := h.converge(pool.Name, "day", 30)
	condIs(t, p, gpupoolv1.ConditionReady, metav1.ConditionTrue)
	warned := func() []string {
		var out []string
		for _, e := range h.events() {
			if strings.Contains(e, "NextLayoutInfeasible") {
				out = append(out, e)
			}
		}
		return out
	}
	got := warned()
	if len(got) != 1 || !strings.HasPrefix(got[0], "Warning") || !strings.Contains(got[0], "layout night cannot be reached by the switch at 19:50 "+weekZone()) ||
		!strings.Contains(got[0], h.prefix+"nihgt-1") || !strings.Contains(got[0], "did you mean "+h.prefix+"night-1") {
		t.Fatalf("NextLayoutInfeasible events %q, want one Warning naming night, 19:50 and the VM", got)
	}
	h.reconcile(pool.Name)
	if got := warned(); len(got) != 0 {
		t.Fatalf("warned again with nothing changed: %q", got)
	}
	// Another problem is news.
	p = h.get(pool.Name)
	testworld.Layout(p, "night").Workers[1].VM = h.prefix + "ghost"
	h.must(k8s.Update(h.ctx, p))
	h.reconcile(pool.Name)
	if got := warned(); len(got) != 1 || !strings.Contains(got[0], h.prefix+"ghost") {
		t.Fatalf("after the problem changed: %q, want one new warning", got)
	}
}
