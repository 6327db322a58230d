package controllers

import (
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/internal/text"
)

// Layouts by count sized by demand (a BringIn rule's countFromDemand,
// docs/count-layouts.md). The count in effect is status.activeCount (or, for a switch in
// flight, status.transition.count): a pass starts from it (countsInEffect), and once
// observe has resolved the layouts by count, plan.DecideCount says which count the pass
// makes (sizeCount). A count other than the active one is a transition of its own (a
// step), which startTransition tells by the count.

// countsInEffect are the counts the pool's sized layouts by count run with now: the
// count of the switch in flight to one, the active one's, else the count its last
// resolution used (last); a layout not among them runs its convert.count.
func countsInEffect(pool *gpupoolv1.GPUPoolProfile, last map[string]gpupoolv1.Layout) map[string]int {
	out := map[string]int{}
	st := &pool.Status
	for _, l := range pool.Spec.Layouts {
		if l.Convert == nil || !sized(&pool.Spec, l.Name) {
			continue
		}
		switch t := st.Transition; {
		case t != nil && t.AbortedTime == nil && t.To == l.Name && t.Count > 0:
			out[l.Name] = int(t.Count)
		case st.ActiveLayout == l.Name && st.ActiveCount > 0:
			out[l.Name] = int(st.ActiveCount)
		default:
			if r, ok := last[l.Name]; ok && r.Convert != nil {
				out[l.Name] = int(r.Convert.Count)
			}
		}
	}
	return out
}

// sized says whether demand sizes the layout's count (a BringIn rule with
// countFromDemand names it).
func sized(spec *gpupoolv1.GPUPoolProfileSpec, layout string) bool {
	if spec.Demand == nil {
		return false
	}
	for _, ru := range spec.Demand.Rules {
		if ru.Layout == layout && ru.Action == gpupoolv1.DemandBringIn && ru.CountFromDemand != nil {
			return true
		}
	}
	return false
}

// sizeCounts sets the count of the layout by count the pass makes (s.decision.Count):
// its convert.count in the resolved spec sr, or with countFromDemand the count
// plan.DecideCount decides on what observe read (a step's disruption is resolved on
// the same snapshot and costs), and publishes demand's account of it
// (status.demand.message, status.demand.step). The other sized layouts are resolved
// with the count a switch to them would make them with, so that the next pass's demand
// counts what bringing one in would evict (its nodes drained: demand.DrainedBySwitch).
// It returns the spec resolved with those counts.
func (r *GPUPoolProfileReconciler) sizeCounts(s *scope, inv *inventory.Inventory, costs plan.Costs, sr plan.SpecResolution) plan.SpecResolution {
	if st := &s.pool.Status; st.ActiveCount == 0 && st.Transition == nil {
		// A pool whose active layout by count was made before counts were recorded
		// runs the count it starts the pass with (countsInEffect): a step from it is a
		// transition, not a repair.
		if l := s.pool.Spec.LayoutNamed(st.ActiveLayout); l != nil && l.Convert != nil {
			st.ActiveCount = l.Convert.Count
		}
	}
	s.decision.Count = 0
	if l := s.pool.Spec.LayoutNamed(s.decision.Layout); l != nil && l.Convert != nil {
		s.decision.Count = int(l.Convert.Count)
	}
	if s.demandIn == nil {
		return sr
	}
	counts := map[string]int{}
	for i := range s.pool.Spec.Layouts {
		l := &s.pool.Spec.Layouts[i]
		if l.Convert == nil || !sized(&s.pool.Spec, l.Name) {
			continue
		}
		cd, ok := r.decideCount(s, l, inv, costs, sr)
		if ok && cd.Count > 0 && cd.Count != int(l.Convert.Count) {
			counts[l.Name] = cd.Count
		}
	}
	if len(counts) == 0 {
		return sr
	}
	return plan.ResolveSpec(plan.WithCounts(&s.pool.Spec, counts), inv, costs)
}

// decideCount is plan.DecideCount for the sized layout l: for the layout the pass
// makes, what it makes (set in s.decision, published in status.demand); for another,
// the count a switch to it would make.
func (r *GPUPoolProfileReconciler) decideCount(s *scope, l *gpupoolv1.Layout, inv *inventory.Inventory, costs plan.Costs, sr plan.SpecResolution) (plan.CountDecision, bool) {
	made := l.Name == s.decision.Layout
	in := plan.CountInput{Demand: s.demandIn, Layout: l.Name, Reason: s.decision.Reason, Estimate: !made,
		PerGPU: sr.Resolutions[l.Name].PerGPU(), Disruption: stepCost(&s.pool.Spec, l.Name, int(l.Convert.Count), inv, costs, sr)}
	st := &s.pool.Status
	if made {
		in.Step = announcedStep(s.persisted)
		if st.ActiveLayout == l.Name {
			in.Active = int(st.ActiveCount)
		}
		if t := st.Transition; t != nil && t.AbortedTime == nil && t.To == l.Name {
			in.InFlight = int(t.Count)
		}
	}
	cd, err := plan.DecideCount(&s.pool.Spec, s.now, in)
	if err != nil {
		// Decide read this spec already: not reached; the spec's count stands.
		return plan.CountDecision{}, false
	}
	if !made {
		return cd, true
	}
	s.decision.Count = cd.Count
	if !cd.Recheck.IsZero() && (s.demandRecheck.IsZero() || cd.Recheck.Before(s.demandRecheck)) {
		s.demandRecheck = cd.Recheck
	}
	if ds := st.Demand; ds != nil {
		ds.Step = stepStatus(cd.Step)
		if cd.Message != "" {
			ds.Message = text.Cut(joinNonEmpty(ds.Message, cd.Message), demand.MaxMessage)
		}
	}
	return cd, true
}

// stepCost is what making layout with n GPUs converted disrupts, resolved on the same
// snapshot and costs (sr is the resolution at count have).
func stepCost(spec *gpupoolv1.GPUPoolProfileSpec, layout string, have int, inv *inventory.Inventory, costs plan.Costs, sr plan.SpecResolution) func(int) (plan.StepCost, error) {
	return func(n int) (plan.StepCost, error) {
		v := sr
		if n != have {
			v = plan.ResolveSpec(plan.WithCounts(spec, map[string]int{layout: n}), inv, costs)
		}
		if err := v.Errors[layout]; err != nil {
			return plan.StepCost{}, err
		}
		res := v.Resolutions[layout]
		if len(res.Problems) > 0 {
			return plan.StepCost{}, errors.New(res.Problems[0].Message)
		}
		return plan.StepCost{Evictions: res.Evicted, DoNotDisrupt: res.DoNotDisrupt, NearCompletion: res.NearCompletion}, nil
	}
}

// announcedStep is the step status.demand.step announced, as the pool was last written.
func announcedStep(pool *gpupoolv1.GPUPoolProfile) *plan.AnnouncedStep {
	if pool.Status.Demand == nil || pool.Status.Demand.Step == nil {
		return nil
	}
	st := pool.Status.Demand.Step
	return &plan.AnnouncedStep{Layout: st.Layout, From: int(st.From), To: int(st.To), Decided: st.DecidedTime.Time, At: st.At.Time, Message: st.Message}
}

func stepStatus(st *plan.AnnouncedStep) *gpupoolv1.CountStep {
	if st == nil {
		return nil
	}
	return &gpupoolv1.CountStep{Layout: st.Layout, From: int32(st.From), To: int32(st.To), //nolint:gosec // counts, at most 4096
		DecidedTime: metav1.NewTime(st.Decided), At: metav1.NewTime(st.At), Message: text.Cut(st.Message, demand.MaxMessage)}
}

func joinNonEmpty(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}

// sameTarget says whether a transition to layout with count makes what the pass wants:
// the same layout, and the same count where both are known (0: a layout not by count,
// or a status written before counts were recorded).
func sameTarget(layout string, count int32, d plan.Decision) bool {
	return layout == d.Layout && (count == 0 || d.Count == 0 || int(count) == d.Count)
}

// targetName names a layout and, for a layout by count, its count, for messages.
func targetName(layout string, count int32) string {
	if count == 0 {
		return layout
	}
	return fmt.Sprintf("%s (%d GPUs converted)", layout, count)
}
