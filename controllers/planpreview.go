package controllers

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/internal/text"
)

// Bounds of status.plan. A pool of 256 VMs has up to ~1000 steps; the preview keeps
// the first steps of each host and counts the rest, so the object stays a few KiB
// (TestPlanPreviewBounded checks a 256-VM plan stays under 16 KiB).
const (
	previewMaxSteps        = 48  // over all hosts
	previewMaxStepsPerHost = 8   // and per host
	previewMaxHosts        = 16  // hosts listed
	previewMaxProblems     = 8   // problems listed
	previewMaxReason       = 120 // characters of a step's reason
	// A problem says what to fix and how: cut it only where it would bloat the object.
	previewMaxProblem = 512
)

// publishPlan puts a preview of the plan the pass built into status.plan. When there is
// nothing to do for the layout wanted now, it previews the next scheduled switch instead
// (planNext); it is planned again when the switch starts, so the preview says what would
// happen if it started now.
func (r *GPUPoolProfileReconciler) publishPlan(ctx context.Context, s *scope, p *plan.Plan) {
	st := &s.pool.Status
	r.planNext(s)
	if !p.Done() || len(p.Problems) > 0 {
		st.Plan = previewOf(p, gpupoolv1.PlanForCurrent, nil, s.pool.Generation)
		st.Plan.Conversion = conversionPreview(s.conversions.Resolutions[p.Layout])
		return
	}
	if s.nextPlan == nil || s.nextPlan.Layout == p.Layout {
		st.Plan = nil
		return
	}
	at := metav1.NewTime(s.decision.Next.At)
	st.Plan = previewOf(s.nextPlan, gpupoolv1.PlanForNext, &at, s.pool.Generation)
	st.Plan.Conversion = conversionPreview(s.conversions.Resolutions[s.nextPlan.Layout])
}

// planNext plans the next scheduled switch into s.nextPlan, whatever the state of the
// current one (in progress, VMs held, aborted): the draining-soon warnings name its
// drains. It is planned on the inventory and nodes observed now (plan.Build is pure and
// cheap), so while the current switch is still under way it names the nodes the next
// switch would drain from where the pool stands now. nil when no switch to another
// layout is scheduled. s.nodeStates must be observed.
func (r *GPUPoolProfileReconciler) planNext(s *scope) {
	s.nextPlan = nil
	n := s.decision.Next
	if n == nil || n.Layout == s.decision.Layout || s.pool.Spec.LayoutNamed(n.Layout) == nil || s.w.Inventory == nil {
		return
	}
	// The nodes' wanted labels are the next layout's while planning it.
	nodes := labelledFor(&s.w, s.pool.Name, s.pool.Spec.LayoutNamed(n.Layout), s.nodeStates)
	next, err := plan.Build(plan.Input{Spec: &s.pool.Spec, Layout: n.Layout, Inventory: s.w.Inventory, Nodes: nodes, InFlight: plannedInFlight(s.pool), Held: s.w.Holds})
	if err == nil {
		if pr, ok := conversionProblem(s.conversions, n.Layout); ok {
			next.Hosts, next.Problems = nil, append(next.Problems, pr)
		}
		s.nextPlan = next
	}
}

// previewOf summarises a plan within the preview's bounds.
func previewOf(p *plan.Plan, kind gpupoolv1.PlanFor, at *metav1.Time, generation int64) *gpupoolv1.PlanPreview {
	pv := &gpupoolv1.PlanPreview{For: kind, Layout: p.Layout, At: at, Generation: generation}
	for i, pr := range p.Problems {
		if i == previewMaxProblems {
			pv.Truncated = fmt.Sprintf("+%d more problems", len(p.Problems)-i)
			break
		}
		pv.Problems = append(pv.Problems, text.Cut(pr.Reason+": "+pr.Message, previewMaxProblem))
	}
	shown, hiddenSteps, hiddenHosts := 0, 0, 0
	for _, hp := range p.Hosts {
		total := len(hp.Steps) + len(hp.Later)
		pv.Steps += int32(total)
		pv.WaitingSteps += int32(len(hp.Later))
		if len(pv.Hosts) == previewMaxHosts || shown == previewMaxSteps {
			hiddenSteps += total
			hiddenHosts++
			continue
		}
		h := gpupoolv1.HostPlanPreview{Host: hp.Host}
		add := func(steps []plan.Step, waits bool) {
			for _, st := range steps {
				if len(h.Steps) == previewMaxStepsPerHost || shown == previewMaxSteps {
					h.More++
					continue
				}
				h.Steps = append(h.Steps, gpupoolv1.PlanStepPreview{VM: st.VM, Action: st.Action, Profile: st.Profile, Reason: text.CutWith(st.Reason, previewMaxReason, "..."), WaitsForGPUs: waits})
				shown++
			}
		}
		add(hp.Steps, false)
		add(hp.Later, true)
		hiddenSteps += int(h.More)
		pv.Hosts = append(pv.Hosts, h)
	}
	if hiddenSteps > 0 && pv.Truncated == "" {
		pv.Truncated = fmt.Sprintf("+%d more steps", hiddenSteps)
		if hiddenHosts > 0 {
			pv.Truncated += fmt.Sprintf(" (%d hosts not listed)", hiddenHosts)
		}
	}
	return pv
}
