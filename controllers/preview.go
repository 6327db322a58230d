package controllers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/plan"
)

// Preview is what a pool would do, computed without acting: the layout wanted at a time,
// the plan from the state observed now, and the layout that plan makes (the wanted one,
// or the one a transition that cannot finish goes back to).
type Preview struct {
	Decision plan.Decision
	Plan     *plan.Plan
	Layout   string
	// Demand is status.demand as the pass would write it with the decision (nil: the
	// pool has no spec.demand, or it is paused).
	Demand *gpupoolv1.DemandStatus
	// Conversion is the choice of the layout planned when it is a layout by count: the
	// GPUs chosen, not chosen and that cannot be converted, with why (nil otherwise).
	Conversion *plan.Resolution
	// Settling: the read was taken while the pool's vSphere tasks ran or had just ended,
	// and what it shows (a shortfall, a layout by count's choice) is not one a pass acts
	// on: the pass would wait for the next read.
	Settling bool
}

// Preview observes the pool's world and decides as a pass does, through the pass's own
// functions (want: the schedule, and with spec.demand the demand observed now, from the
// pool's status timers; its tasks in flight, observe, decideConfirmed), but changes
// nothing: no node, no VM, no status, no event, no metric. With layout set, it plans
// for that layout instead of the one wanted at the given time.
//
// Note: a demand that cannot be read is an error here, where the pass would go on by
// the schedule: a preview from less than the operator sees would not be its decision.
func (r *GPUPoolProfileReconciler) Preview(ctx context.Context, pool *gpupoolv1.GPUPoolProfile, at time.Time, layout string) (*Preview, error) {
	s := &scope{pool: pool.DeepCopy(), persisted: pool.DeepCopy(), now: at}
	r.expandSpec(s.pool)
	s.persisted.Spec = *s.pool.Spec.DeepCopy()
	var kv kueueView
	_, res, err := r.resolveRequests(ctx, s.pool, at)
	if err != nil {
		return nil, err
	}
	w, err := r.want(ctx, effective(s.pool, res), at, &kv)
	if err != nil {
		return nil, err
	}
	d := w.decision
	switch {
	case layout != "":
		d = plan.Decision{Layout: layout, Reason: gpupoolv1.DesiredByOverride, Message: "layout " + layout + " asked for by the preview", Window: -1}
	case w.unobserved != nil:
		return nil, fmt.Errorf("the demand of pool %s cannot be read: %w", pool.Name, w.unobserved)
	}
	s.decision, s.demandIn = d, w.in
	if layout != "" {
		s.demandIn = nil // a layout asked for by name is made with its convert.count
	}
	s.wanted = s.pool.Spec.LayoutNamed(d.Layout)
	if s.wanted == nil {
		return nil, fmt.Errorf("pool %s has no layout %q", pool.Name, d.Layout)
	}
	unseen := func() error {
		return errors.New(cmp.Or(s.facts.credentials, s.facts.vcenter, s.facts.conflict, "cannot observe the pool"))
	}
	vcc, _, ok := r.connectVCenter(ctx, s)
	if !ok {
		return nil, unseen()
	}
	s.vc = vcc
	// The tasks in flight are known before the inventory is read, as in a pass; what
	// the check records stays in this copy of the pool. An intent without a task id
	// counts as in flight (peek): the manager may be asking vCenter for it right now.
	s.tasks.inFlight = r.checkTasks(ctx, s, true) > 0
	if _, ok := r.observe(ctx, s); !ok {
		return nil, unseen()
	}
	p, making, _, ok, err := r.decideConfirmed(ctx, s)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, unseen()
	}
	return &Preview{Decision: d, Plan: p, Layout: making.Name, Demand: w.demand, Conversion: s.conversions.Resolutions[making.Name],
		Settling: s.facts.settling}, nil
}
