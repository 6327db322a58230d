package controllers

import (
	"strings"
	"testing"
	"time"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// TestPreviewDecidesWithDemand: plan --live's preview decides as the operator's pass
// does, demand included. A training pod waits by day: before its `for` runs out both
// want the schedule's day; once it has, the preview wants night by demand and plans the
// switch, and the pass that follows publishes that same decision. The preview changes
// nothing.
func TestPreviewDecidesWithDemand(t *testing.T) {
	h := newHarness(t, "pvd-")
	pool := h.demandPool()
	h.dayPastDwell(pool)

	h.gpuPod("train-1", "", true, nil)
	var last *Preview
	for i, step := range []time.Duration{0, 2 * time.Minute} {
		h.clock.Step(step)
		before := h.get(pool.Name)
		pv, err := h.reconciler().Preview(h.ctx, before, h.clock.Now(), "")
		if err != nil {
			t.Fatal(err)
		}
		if after := h.get(pool.Name); after.ResourceVersion != before.ResourceVersion {
			t.Fatalf("step %d: the preview changed the pool", i)
		}
		h.reconcile(pool.Name)
		p := h.get(pool.Name)
		if pv.Decision.Layout != p.Status.DesiredLayout || pv.Decision.Reason != p.Status.DesiredReason {
			t.Fatalf("step %d: the preview wants %s (%s: %s), the pass %s (%s); demand message %q", i,
				pv.Decision.Layout, pv.Decision.Reason, pv.Decision.Message, p.Status.DesiredLayout, p.Status.DesiredReason, p.Status.Demand.Message)
		}
		if pv.Demand == nil || p.Status.Demand == nil || pv.Demand.Message != p.Status.Demand.Message {
			t.Fatalf("step %d: the preview's status.demand %+v, the pass's %+v", i, pv.Demand, p.Status.Demand)
		}
		last = pv
	}
	// The pass above decided night by demand: the preview did too, and planned it.
	if p := h.get(pool.Name); p.Status.DesiredLayout != "night" || p.Status.DesiredReason != gpupoolv1.DesiredByDemand {
		t.Fatalf("the pass wants %s (%s), want night by demand: the test's premise", p.Status.DesiredLayout, p.Status.DesiredReason)
	}
	if out := last.Plan.String(); !strings.Contains(out, "PowerOnRequired") || !strings.Contains(out, h.prefix+"night-1") {
		t.Errorf("the preview's plan does not bring night in:\n%s", out)
	}
}
