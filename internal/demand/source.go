// Package demand observes the demand for a pool's layouts (spec.demand) and turns it into
// what plan.Decide takes and what status.demand shows. It acts on nothing: it reads
// through the readers and functions the controller gives it, and the deciding itself is
// plan.Decide's.
//
// A Source is one kind of demand: Pods (unschedulable pods, the pods on the pool's
// nodes) and Workloads (Kueue's Workloads that gpupool's admission check holds). Their
// observations are summed per layout (plan.LayoutDemand.Add), so that the decision does
// not know where demand came from. docs/demand.md says how to add a source.
package demand

import (
	"context"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/plan"
)

// Source sees one kind of demand for a pool's layouts, within the tenant scope.
//
// A source that is not served (its API absent) or cannot be read, and whose absence must
// not discard the others' demand, answers zero and says why in Observed.NotObserved. An
// error means that nothing may be decided from the demand (it is "not observed":
// docs/demand.md), as when the pods cannot be listed.
type Source interface {
	Observe(ctx context.Context, pool *gpupoolv1.GPUPoolProfile, shapes Shapes, who Scope) (Observed, error)
}

// Observed is what a source saw.
type Observed struct {
	// Layouts is the demand per layout name.
	Layouts map[string]plan.LayoutDemand
	// NotObserved says why the source counted as none (empty: it was read).
	NotObserved string
}

// Sum observes every source and sums their demand per layout. missing are the notes of
// the sources that counted as none, in the sources' order.
func Sum(ctx context.Context, pool *gpupoolv1.GPUPoolProfile, shapes Shapes, who Scope, sources []Source) (map[string]plan.LayoutDemand, []string, error) {
	sum := map[string]plan.LayoutDemand{}
	var missing []string
	for _, src := range sources {
		obs, err := src.Observe(ctx, pool, shapes, who)
		if err != nil {
			return nil, nil, err
		}
		if obs.NotObserved != "" {
			missing = append(missing, obs.NotObserved)
			continue
		}
		for l, o := range obs.Layouts {
			s := sum[l]
			s.Add(o)
			sum[l] = s
		}
	}
	return sum, missing, nil
}
