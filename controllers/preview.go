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

// Preview is what a pool would do, computed without acting: the layout wanted at a time
// and the plan from the state observed now.
type Preview struct {
	Decision plan.Decision
	Plan     *plan.Plan
	// Demand is status.demand as the pass would write it with the decision (nil: the
	// pool has no spec.demand, or it is paused).
	Demand *gpupoolv1.DemandStatus
}

// Preview observes the pool's world as a reconcile does and plans, but changes nothing:
// no node, no VM, no status, no metric. It decides as the pass does (want: the schedule,
// and with spec.demand the demand observed now, from the pool's status timers). With
// layout set, it plans for that layout instead of the one wanted at the given time.
//
// Note: a demand that cannot be read is an error here, where the pass would go on by
// the schedule: a preview from less than the operator sees would not be its decision.
func (r *GPUPoolProfileReconciler) Preview(ctx context.Context, pool *gpupoolv1.GPUPoolProfile, at time.Time, layout string) (*Preview, error) {
	s := &scope{pool: pool.DeepCopy(), now: at}
	w, err := r.want(ctx, s.pool, at, &s.kueue)
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
	s.decision = d
	for i := range s.pool.Spec.Layouts {
		if s.pool.Spec.Layouts[i].Name == d.Layout {
			s.wanted = &s.pool.Spec.Layouts[i]
		}
	}
	if s.wanted == nil {
		return nil, fmt.Errorf("pool %s has no layout %q", pool.Name, d.Layout)
	}
	if _, ok := r.observe(ctx, s); !ok {
		return nil, errors.New(cmp.Or(s.facts.credentials, s.facts.vcenter, "cannot observe the pool"))
	}
	p, err := plan.Build(plan.Input{Spec: &s.pool.Spec, Layout: d.Layout, Inventory: s.inv, Nodes: nodeStates(s, s.wanted), InFlight: plannedInFlight(s.pool), Held: s.nodeHolds})
	if err != nil {
		return nil, err
	}
	return &Preview{Decision: d, Plan: p, Demand: w.demand}, nil
}
