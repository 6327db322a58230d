package plan

import (
	"slices"
	"strings"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
)

// The spec as a pass plans with it. A layout by count (spec.layouts[].convert) lists no
// workers: what it runs is decided on each pass from what is observed (Resolve). Every
// other part of the controller, and the planner, takes enumerated layouts, so a pass
// works on an enumerated copy of the spec:
//
//   - Expand, before the world is observed: a layout by count lists its candidates (so
//     that they are pool VMs, read from vCenter, matched to their nodes and parked when
//     another layout is made), or the workers it last resolved to;
//   - ResolveSpec, once the world is observed: the layouts by count resolved.
//
// The copy keeps each layout's Convert, so that it is still known as a layout by count;
// it is never written back (gpupool writes no spec).

// ConversionOf is the planner's form of a layout by count; false when l lists workers.
func ConversionOf(l *gpupoolv1.Layout) (Conversion, bool) {
	c := l.Convert
	if c == nil {
		return Conversion{}, false
	}
	out := Conversion{Layout: l.Name, Base: c.Base, Count: int(c.Count), Profile: c.Profile, VGPUs: int(c.VGPUs),
		NodeLabels: l.NodeLabels, NodeTaints: l.NodeTaints, GPUReplicas: l.GPUReplicas}
	for _, cd := range c.Candidates {
		out.Candidates = append(out.Candidates, Candidate{VM: cd.VM, Node: cd.Node, NoNode: cd.NoNode})
	}
	if d := c.Disruption; d != nil {
		out.Disruption = Weights{DoNotDisrupt: int(d.DoNotDisrupt), JobNearCompletion: int(d.JobNearCompletion)}
	}
	return out, true
}

// HasConversions tells whether any layout of spec is by count.
func HasConversions(spec *gpupoolv1.GPUPoolProfileSpec) bool {
	return slices.ContainsFunc(spec.Layouts, func(l gpupoolv1.Layout) bool { return l.Convert != nil })
}

// poolWorkersOf are the VMs a layout makes pool VMs: its workers, and a layout by
// count's candidates (whether it runs them or not: a candidate not chosen is parked when
// the layout is made).
func poolWorkersOf(l *gpupoolv1.Layout) []gpupoolv1.Worker {
	if l.Convert == nil {
		return l.Workers
	}
	out := slices.Clone(l.Workers)
	for _, cd := range l.Convert.Candidates {
		out = append(out, gpupoolv1.Worker{VM: cd.VM, Node: cd.Node, NoNode: cd.NoNode})
	}
	return out
}

// Expand returns spec with every layout by count that lists no workers listing either
// its last resolution (last, by layout name, when its Convert is the same) or, without
// one, its candidates with the converted profile. Spec itself is not changed; without
// layouts by count it is returned as it is.
func Expand(spec *gpupoolv1.GPUPoolProfileSpec, last map[string]gpupoolv1.Layout) *gpupoolv1.GPUPoolProfileSpec {
	if !HasConversions(spec) {
		return spec
	}
	out := *spec
	out.Layouts = nil
	for _, l := range spec.Layouts {
		if l.Convert == nil || len(l.Workers) > 0 {
			out.Layouts = append(out.Layouts, l)
			continue
		}
		if r, ok := last[l.Name]; ok && r.Convert != nil && equalConvert(r.Convert, l.Convert) {
			r.Name, r.NodeLabels, r.NodeTaints, r.GPUReplicas = l.Name, l.NodeLabels, l.NodeTaints, l.GPUReplicas
			r.Convert = l.Convert
			out.Layouts = append(out.Layouts, r)
			continue
		}
		out.Layouts = append(out.Layouts, candidatesForm(l))
	}
	return &out
}

// candidatesForm is a layout by count listing its candidates, each with the converted
// profile, as its workers: how it is planned before it is resolved, and how the
// resolver sees it among the pool's layouts.
func candidatesForm(l gpupoolv1.Layout) gpupoolv1.Layout {
	conv, _ := ConversionOf(&l)
	l.Workers = nil
	for _, cd := range conv.Candidates {
		l.Workers = append(l.Workers, candidateAsWorker(cd, conv))
	}
	return l
}

func equalConvert(a, b *gpupoolv1.Conversion) bool {
	return a.Base == b.Base && a.Count == b.Count && a.Profile == b.Profile && a.VGPUs == b.VGPUs &&
		slices.Equal(a.Candidates, b.Candidates) && ((a.CandidatesFrom == nil) == (b.CandidatesFrom == nil)) &&
		(a.CandidatesFrom == nil || SameSelector(&gpupoolv1.Selection{VMSelector: *a.CandidatesFrom}, &gpupoolv1.Selection{VMSelector: *b.CandidatesFrom})) &&
		((a.Disruption == nil) == (b.Disruption == nil)) &&
		(a.Disruption == nil || *a.Disruption == *b.Disruption)
}

func candidateAsWorker(cd Candidate, conv Conversion) gpupoolv1.Worker {
	w := gpupoolv1.Worker{VM: cd.VM, Profile: conv.Profile, Node: cd.Node, NoNode: cd.NoNode}
	if conv.VGPUs > 1 {
		w.VGPUs = int32(conv.VGPUs) //nolint:gosec // at most 16 (admission)
	}
	return w
}

// SpecResolution is what ResolveSpec made of a spec's layouts by count.
type SpecResolution struct {
	// Spec is the spec with each layout by count resolved: its workers chosen, its
	// Convert kept (its candidates stay pool VMs: poolWorkersOf, world.PoolWorkers).
	Spec *gpupoolv1.GPUPoolProfileSpec
	// Resolutions are the layouts by count resolved, by name; Errors those that could
	// not be, with why. A layout that could not be resolved keeps its expanded form in
	// Spec: a pass must not make it (the controller reports the error as a problem).
	Resolutions map[string]*Resolution
	Errors      map[string]error
	// Layouts are the layouts by count resolved, by name: what Expand takes as the last
	// resolution.
	Layouts map[string]gpupoolv1.Layout
}

// ResolveSpec resolves every layout by count of spec (as Expand returned it) against the
// inventory and the costs the controller counted on the nodes.
func ResolveSpec(spec *gpupoolv1.GPUPoolProfileSpec, inv *inventory.Inventory, costs Costs) SpecResolution {
	out := SpecResolution{Spec: spec, Resolutions: map[string]*Resolution{}, Errors: map[string]error{}, Layouts: map[string]gpupoolv1.Layout{}}
	if !HasConversions(spec) {
		return out
	}
	// The resolver reads the other layouts' workers as the pool's VMs; the layouts by
	// count take part with their candidates (Expand's form), never with another pass's
	// choice.
	base := *spec
	base.Layouts = nil
	for _, l := range spec.Layouts {
		if l.Convert != nil {
			l = candidatesForm(l)
		}
		base.Layouts = append(base.Layouts, l)
	}
	resolved := base
	resolved.Layouts = slices.Clone(base.Layouts)
	for i := range base.Layouts {
		l := &base.Layouts[i]
		conv, ok := ConversionOf(l)
		if !ok {
			continue
		}
		conv.Disruption = boundedWeights(conv.Disruption, spec.Drain.MaxHold != nil)
		res, err := Resolve(&base, conv, inv, costs)
		if err != nil {
			out.Errors[l.Name] = err
			continue
		}
		// The resolved layout keeps Convert: its candidates not chosen stay pool VMs
		// (Resolve's own spec lists them in a layout of their own instead).
		res.Layout.Convert = l.Convert
		out.Resolutions[l.Name] = res
		resolved.Layouts[i] = res.Layout
		out.Layouts[l.Name] = res.Layout
	}
	out.Spec = &resolved
	return out
}

// HeldPodWeight is what a do-not-disrupt pod or a pod of a Job near completion weighs,
// in GPU pods, when spec.drain.maxHold is set and the conversion gives it no weight.
const HeldPodWeight = 1000

// boundedWeights are the disruption weights a choice uses. With spec.drain.maxHold the
// admin has bounded how long such pods hold a drain (after it they are evicted), so they
// cannot forbid a choice either: a weight left at 0 (never) becomes HeldPodWeight, so
// that such a GPU is chosen only when no other will do. Without maxHold, 0 stays never:
// a pod that may hold a drain until drain.timeout also keeps its GPU out of the choice.
func boundedWeights(w Weights, maxHold bool) Weights {
	if !maxHold {
		return w
	}
	if w.DoNotDisrupt == 0 {
		w.DoNotDisrupt = HeldPodWeight
	}
	if w.JobNearCompletion == 0 {
		w.JobNearCompletion = HeldPodWeight
	}
	return w
}

// WithCounts returns spec with the count of each layout by count named in counts
// replaced (the count demand sized it to, countFromDemand). Spec itself is not changed;
// with nothing to replace it is returned as it is.
func WithCounts(spec *gpupoolv1.GPUPoolProfileSpec, counts map[string]int) *gpupoolv1.GPUPoolProfileSpec {
	out := spec
	for i, l := range spec.Layouts {
		n, ok := counts[l.Name]
		if !ok || l.Convert == nil || n < 1 || int(l.Convert.Count) == n {
			continue
		}
		if out == spec {
			cp := *spec
			cp.Layouts = slices.Clone(spec.Layouts)
			out = &cp
		}
		conv := *l.Convert
		conv.Count = int32(n) //nolint:gosec // bounded by countFromDemand.max (admission: at most 4096)
		out.Layouts[i].Convert = &conv
	}
	return out
}

// ChoiceMoved tells whether now, a layout by count resolved again, chose other workers
// than prev, its last resolution, for the same conversion (the same count, candidates
// and weights): the GPUs to convert moved. The workers' order does not matter.
func ChoiceMoved(prev, now gpupoolv1.Layout) bool {
	if !SameConversion(prev.Convert, now.Convert) {
		return false
	}
	byVM := func(x, y gpupoolv1.Worker) int { return strings.Compare(x.VM, y.VM) }
	a, b := slices.Clone(prev.Workers), slices.Clone(now.Workers)
	slices.SortFunc(a, byVM)
	slices.SortFunc(b, byVM)
	return !slices.Equal(a, b)
}

// SameConversion tells whether a and b are the same conversion: the same base, count,
// profile, candidates and disruption weights (a resolution of one is a resolution of the
// other). Two nil conversions are not: neither is a layout by count.
func SameConversion(a, b *gpupoolv1.Conversion) bool {
	return a != nil && b != nil && equalConvert(a, b)
}
