package demand

import (
	"context"
	"fmt"
	"sort"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/plan"
)

// Held is a Workload gpupool's admission check holds for the pool: its quota is reserved
// on flavors of the pool's layouts, and it waits for them.
type Held struct {
	Namespace, Name string
	// Layouts are the layouts of the pool's flavors it was assigned.
	Layouts []string
	// GPUs is what it asks of the GPU resource on them.
	GPUs int64
	// Owner is the UID of the object it was made for (its Job), whose pods Kueue creates
	// once it is admitted: kubectl gpupool record ties them to it.
	Owner string
}

// HeldLister lists the Workloads the pool's check holds. An error (Kueue's API not served
// or not readable) makes the Workloads' demand count as none.
type HeldLister func(ctx context.Context, pool *gpupoolv1.GPUPoolProfile) ([]Held, error)

// WorkloadsNotObserved begins the status.demand message of a pass that could not read
// Kueue.
const WorkloadsNotObserved = "Kueue demand not observed"

// Workloads is the demand of the Workloads gpupool's check holds (spec.kueue): per layout
// other than the active one, the GPUs they reserved on its flavors. Kueue's job
// integration keeps their pods suspended until admitted, so they are not counted as pods
// too.
//
// Kueue not served or not readable is no Kueue demand, never no demand: it answers zero
// with a note (Observed.NotObserved), and the pods' demand still counts.
type Workloads struct {
	Held HeldLister
}

// Observe implements Source.
func (wd Workloads) Observe(ctx context.Context, pool *gpupoolv1.GPUPoolProfile, _ Shapes, who Scope) (Observed, error) {
	if pool.Spec.Kueue == nil {
		return Observed{}, nil
	}
	held, err := wd.Held(ctx, pool)
	if err != nil {
		return Observed{NotObserved: fmt.Sprintf("%s, counted as none: %v", WorkloadsNotObserved, err)}, nil
	}
	obs := map[string]plan.LayoutDemand{}
	for _, h := range held {
		if !who.Selects(h.Namespace) {
			continue // only the Workloads of the namespaces demand selects count
		}
		for _, l := range h.Layouts {
			// A Workload of the active layout waits for no other layout (at most for a
			// switch in flight to end): it is no demand.
			if l == pool.Status.ActiveLayout {
				continue
			}
			o := obs[l]
			o.PendingGPUs += h.GPUs
			o.Pending = append(o.Pending, fmt.Sprintf("workload %s/%s", h.Namespace, h.Name))
			obs[l] = o
		}
	}
	for l, o := range obs {
		sort.Strings(o.Pending)
		obs[l] = o
	}
	return Observed{Layouts: obs}, nil
}
