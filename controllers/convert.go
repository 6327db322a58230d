package controllers

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/internal/text"
	"github.com/gpupool/gpupool/internal/world"
)

// Layouts by count (spec.layouts[].convert, docs/count-layouts.md). A pass works on an
// enumerated copy of the spec (plan.Expand, plan.ResolveSpec): expandSpec when the pass
// starts, resolveConversions once observe has matched the VMs' nodes, from the pods on
// them. The copy is never written: status patches carry only the status.

// expandSpec makes pool's spec the enumerated copy a pass starts from: each select
// layout lists what it last selected (plan.ExpandSelections, select.go), each layout by
// count what it last resolved to, or its candidates (plan.Expand), with the count in
// effect (countsInEffect).
func (r *GPUPoolProfileReconciler) expandSpec(pool *gpupoolv1.GPUPoolProfile) {
	if plan.HasSelections(&pool.Spec) {
		pool.Spec = *plan.ExpandSelections(&pool.Spec, r.selections.last(pool)).DeepCopy()
	}
	if plan.HasConversions(&pool.Spec) {
		last := r.conversions.last(pool)
		spec := plan.WithCounts(&pool.Spec, countsInEffect(pool, last))
		pool.Spec = *plan.Expand(spec, last).DeepCopy()
	}
}

// resolveConversions resolves the layouts by count on what observe read (w, matched to
// the nodes): the costs are counted on the nodes of the pool's running VMs. It makes the
// resolved spec the pass's (s.pool and s.persisted, so that no status patch carries a
// spec), points s.wanted into it and returns the world resolved and matched on it.
func (r *GPUPoolProfileReconciler) resolveConversions(ctx context.Context, s *scope, inv *inventory.Inventory, w *world.World, nodes []corev1.Node) *world.World {
	costs := r.conversionCosts(ctx, s.pool, w)
	sr := r.sizeCounts(s, inv, costs, plan.ResolveSpec(&s.pool.Spec, inv, costs))
	s.conversions = sr
	remember := sr.Layouts // only those resolved now: one that failed starts from its candidates
	if w.TasksInFlight || w.TasksEnded > 0 {
		remember = r.holdMovedChoices(s, sr)
	}
	r.conversions.remember(s.pool, remember)
	s.pool.Spec = *sr.Spec.DeepCopy()
	s.persisted.Spec = *sr.Spec.DeepCopy()
	if s.wanted != nil {
		s.wanted = s.pool.Spec.LayoutNamed(s.wanted.Name)
	}
	nw := world.Resolve(&s.pool.Spec, inv)
	nw.TasksInFlight, nw.TasksEnded = w.TasksInFlight, w.TasksEnded
	nw.Match(&s.pool.Spec, nodes)
	return nw
}

// holdMovedChoices is what to remember of the layouts by count resolved (sr) on a read
// taken while the pool's tasks ran or at the pass that saw some end. Such a read may catch
// a VM between two states (vSphere places a powering-on VM's vGPU before the VM reads as
// powered on): a choice it moves is not believed. A layout whose choice moved from the
// last pass's keeps the last one, in the pass's spec (the plan, the next switch's
// warnings and the node states read it) and as the one to compare the next read with.
// The layout the pass makes is also named in s.facts.choiceMoved (decide settles) when
// its choice moved, or when there is none of the same conversion to compare it with (the
// manager restarted, or the count changed, in the middle of a switch): then its first
// choice is made on a quiet read.
func (r *GPUPoolProfileReconciler) holdMovedChoices(s *scope, sr plan.SpecResolution) map[string]gpupoolv1.Layout {
	last := r.conversions.last(s.pool)
	keep := maps.Clone(sr.Layouts)
	for i := range sr.Spec.Layouts {
		name := sr.Spec.Layouts[i].Name
		now, resolved := sr.Layouts[name]
		if !resolved {
			continue
		}
		prev, ok := last[name]
		switch {
		case ok && plan.ChoiceMoved(prev, now):
			keep[name] = prev
			sr.Spec.Layouts[i].Workers = prev.Workers // the same conversion: only the choice differs
		case name == s.decision.Layout && (!ok || !plan.SameConversion(prev.Convert, now.Convert)):
			delete(keep, name)
		default:
			continue
		}
		if name == s.decision.Layout {
			s.facts.choiceMoved = append(s.facts.choiceMoved, name)
		}
	}
	return keep
}

// conversionCosts counts, for each pool VM with a node, what draining the node
// disrupts: its GPU pods that a drain evicts, and among them the do-not-disrupt pods and
// those of Jobs near completion. A node whose pods cannot be listed counts as holding a
// do-not-disrupt pod: no choice disrupts what gpupool cannot see, unless weighed.
func (r *GPUPoolProfileReconciler) conversionCosts(ctx context.Context, pool *gpupoolv1.GPUPoolProfile, w *world.World) plan.Costs {
	res := demand.GPUResource(pool)
	costs := make(plan.Costs, len(w.Nodes))
	jobs := map[types.NamespacedName]bool{}
	var running []string
	for vm := range w.Nodes {
		if w.Runs(vm) { // a VM that does not run disrupts nothing, and its pods are not watched
			running = append(running, vm)
		}
	}
	onNodes, errs := r.podsOnNodes(ctx, w, running)
	for k, vm := range running {
		if errs[k] != nil {
			costs[vm] = plan.VMCost{GPUPods: 1, DoNotDisrupt: 1}
			continue
		}
		pods := onNodes[k]
		var c plan.VMCost
		for i := range pods {
			p := &pods[i]
			if demand.Finished(p) || !demand.Evictable(p) || demand.PodGPUs(p, res) == 0 {
				continue
			}
			c.GPUPods++
			switch {
			case p.Annotations[gpupoolv1.AnnotationDoNotDisrupt] == "true":
				c.DoNotDisrupt++
			case demand.NearCompletion(ctx, r.APIReader, p, jobs):
				c.JobsNearCompletion++
			}
		}
		if c != (plan.VMCost{}) {
			costs[vm] = c
		}
	}
	return costs
}

// conversionProblem is why layout cannot be made when it is a layout by count that
// could not be resolved this pass (sr).
func conversionProblem(sr plan.SpecResolution, layout string) (plan.Problem, bool) {
	err, ok := sr.Errors[layout]
	if !ok {
		return plan.Problem{}, false
	}
	return plan.Problem{Reason: ReasonConversionUnresolved, Message: err.Error()}, true
}

// ReasonConversionUnresolved: a layout by count cannot be resolved (a count more than
// the candidates can fill, no choice the disruption weights allow, ...).
const ReasonConversionUnresolved = "ConversionUnresolved"

// conversionPreview is status.plan's account of a layout by count's choice.
func conversionPreview(r *plan.Resolution) *gpupoolv1.ConversionPreview {
	if r == nil {
		return nil
	}
	const maxChosen, maxNotChosen = 64, 16
	pv := &gpupoolv1.ConversionPreview{Profile: r.Profile, Count: int32(r.Count), Evicted: int32(r.Evicted), Cost: r.Cost, //nolint:gosec // bounded by the inventory
		Ineligible: int32(len(r.Ineligible))} //nolint:gosec // bounded by the inventory
	add := func(to *[]gpupoolv1.GPUChoicePreview, gs []plan.GPUChoice, most int) int {
		for i, g := range gs {
			if i == most {
				return len(gs) - i
			}
			*to = append(*to, gpupoolv1.GPUChoicePreview{Host: g.Host, GPU: g.GPU, Why: text.CutWith(g.Why, 512, "...")})
		}
		return 0
	}
	hidden := add(&pv.Chosen, r.Chosen, maxChosen) + add(&pv.NotChosen, r.NotChosen, maxNotChosen)
	if hidden > 0 {
		pv.Truncated = fmt.Sprintf("+%d GPUs not listed", hidden)
	}
	return pv
}
