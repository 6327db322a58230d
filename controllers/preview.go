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
}

// Preview observes the pool's world as a reconcile does and plans, but changes nothing:
// no node, no VM, no status. With layout set, it plans for that layout instead of the
// one the schedule wants at the given time.
func (r *GPUPoolProfileReconciler) Preview(ctx context.Context, pool *gpupoolv1.GPUPoolProfile, at time.Time, layout string) (*Preview, error) {
	s := &scope{pool: pool.DeepCopy(), now: at}
	d, err := plan.Desired(&s.pool.Spec, at)
	if err != nil {
		return nil, err
	}
	if layout != "" {
		d = plan.Decision{Layout: layout, Reason: gpupoolv1.DesiredByOverride, Message: "layout " + layout + " asked for by the preview", Window: -1}
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
	p, err := plan.Build(plan.Input{Spec: &s.pool.Spec, Layout: d.Layout, Inventory: s.w.Inventory, Nodes: nodeStates(&s.w, s.pool, s.now, s.wanted), InFlight: plannedInFlight(s.pool), Held: s.w.Holds})
	if err != nil {
		return nil, err
	}
	return &Preview{Decision: d, Plan: p}, nil
}
