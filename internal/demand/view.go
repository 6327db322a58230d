package demand

import (
	"context"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/internal/text"
)

// MaxMessage bounds status.demand.message (the API allows 1024).
const MaxMessage = 1024

// Observer reads a pool's demand: the tenant scope from the namespaces, then each source.
type Observer struct {
	// Namespaces reads the namespaces' labels (metadata only, the manager's cache).
	Namespaces client.Reader
	// Sources are summed in their order; the first that fails leaves the demand
	// unobserved.
	Sources []Source
	// WarnAhead is how long a switch that evicts is announced ahead (the schedule's).
	WarnAhead time.Duration
}

// View is what demand decides from the demand observed now: the decision and the
// status.demand it leaves. The pool is not changed.
type View struct {
	In       *plan.DemandInput
	Decision plan.DemandDecision
	Status   *gpupoolv1.DemandStatus
	// Missing are why some demand counted as none (a source not served or unreadable,
	// the namespace selector unset).
	Missing []string
	// Unobserved: the pods (or namespaces) could not be read; nothing was decided.
	Unobserved error
}

// View observes the demand of the pool's selected namespaces and decides (plan.Decide).
// The pool is not changed. An error is a spec that cannot be decided on.
func (o Observer) View(ctx context.Context, pool *gpupoolv1.GPUPoolProfile, now time.Time) (View, error) {
	in := Input(pool, o.WarnAhead)
	var token string
	in.BudgetSince, token = BudgetReset(pool, now)
	who, err := ReadScope(ctx, o.Namespaces, pool)
	if err != nil {
		return View{Unobserved: err}, nil
	}
	var missing []string
	if who.Unset {
		missing = append(missing, NoNamespaceSelector)
	}
	obs, notes, err := Sum(ctx, pool, ShapesOf(pool), who, o.Sources)
	if err != nil {
		return View{Unobserved: err}, nil
	}
	missing = append(missing, notes...)
	in.Observed = obs
	dec, err := plan.Decide(&pool.Spec, now, in)
	if err != nil {
		return View{}, err
	}
	st := Status(pool, in, dec)
	st.Budget = BudgetStatus(dec.Budget, in.BudgetSince, token)
	if len(missing) > 0 {
		st.Message = text.Cut(strings.Join(append(missing, dec.Message), "; "), MaxMessage)
	}
	return View{In: in, Decision: dec, Status: st, Missing: missing}, nil
}

// Unobserved decides without the demand, which could not be read: the schedule, except
// that a layout demand holds (the last decision was Demand) is kept as it is, so that one
// failed read never drains the work demand keeps, but no longer than the layout's
// idleFor from when its use was last seen (unobservedHold). The other timers stay as
// they were. It returns the decision and status.demand after it; the pool is not changed.
func Unobserved(pool *gpupoolv1.GPUPoolProfile, now time.Time, err error) (plan.Decision, *gpupoolv1.DemandStatus, error) {
	ds := pool.Status.Demand.DeepCopy()
	d, derr := plan.Desired(&pool.Spec, now)
	if derr != nil {
		return d, ds, derr
	}
	msg := "demand not observed: " + err.Error()
	cur := pool.Status.ActiveLayout
	if t := pool.Status.Transition; t != nil && t.AbortedTime == nil {
		cur = t.To // an aborted switch is not what serves (docs/operations.md, "After an abort")
	}
	if pool.Status.DesiredReason == gpupoolv1.DesiredByDemand && cur != "" && cur != d.Layout && d.Reason != gpupoolv1.DesiredByOverride {
		if ds == nil {
			ds = &gpupoolv1.DemandStatus{}
		}
		if unobservedHold(ds, pool.Spec.Demand, cur, now) {
			d = plan.Decision{Layout: cur, Reason: gpupoolv1.DesiredByDemand, Window: -1,
				Message: fmt.Sprintf("demand keeps layout %s while it cannot be observed (%v)", cur, err)}
			msg += "; layout " + cur + " is kept"
		}
	}
	if ds != nil {
		ds.Message = text.Cut(msg, MaxMessage)
	}
	return d, ds, nil
}

// unobservedHold says whether a layout demand holds may still be kept while the demand
// cannot be read: unused (nothing seen in use) for less than its idleFor. Its idle timer
// starts when the reads fail, if it had not, and is kept in ds, so that a read that keeps
// failing cannot hold it for ever.
func unobservedHold(ds *gpupoolv1.DemandStatus, policy *gpupoolv1.DemandPolicy, layout string, now time.Time) bool {
	var ld *gpupoolv1.LayoutDemand
	for i := range ds.Layouts {
		if ds.Layouts[i].Layout == layout {
			ld = &ds.Layouts[i]
		}
	}
	if ld == nil {
		ds.Layouts = append(ds.Layouts, gpupoolv1.LayoutDemand{Layout: layout})
		ld = &ds.Layouts[len(ds.Layouts)-1]
	}
	if ld.IdleSince == nil {
		ld.IdleSince = &metav1.Time{Time: now}
	}
	return now.Before(ld.IdleSince.Add(plan.IdleFor(policy, layout)))
}
