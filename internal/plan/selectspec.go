package plan

import (
	"slices"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// Layouts by selector (spec.layouts[].select) list no workers either: the controller
// finds the VMs the selector matches on every pass, before it reads the inventory, and
// the pass works on a copy of the spec whose select layouts list them (their Select
// kept, so that they are still known as selected). ExpandSelections starts a pass (and
// the demand watch) from the last selection. A layout by count may select its
// candidates the same way (convert.candidatesFrom): they are found at the same time,
// before plan.Expand and plan.ResolveSpec take them.

// SelectedVM is a VM a selector matched: its name (or inventory path) and, when the
// selector knows it (a Cluster API Machine's status.nodeRef), its node.
type SelectedVM struct {
	VM   string
	Node string
}

// HasSelections tells whether any layout of spec selects its VMs, or its candidates
// (convert.candidatesFrom).
func HasSelections(spec *gpupoolv1.GPUPoolProfileSpec) bool {
	return slices.ContainsFunc(spec.Layouts, func(l gpupoolv1.Layout) bool {
		return l.Select != nil || (l.Convert != nil && l.Convert.CandidatesFrom != nil)
	})
}

// SelectorOf is what a layout selects: its workers (select) or, as a selection without
// profile, its candidates (convert.candidatesFrom); false when it selects nothing.
func SelectorOf(l *gpupoolv1.Layout) (gpupoolv1.Selection, bool) {
	switch {
	case l.Select != nil:
		return *l.Select.DeepCopy(), true
	case l.Convert != nil && l.Convert.CandidatesFrom != nil:
		return gpupoolv1.Selection{VMSelector: *l.Convert.CandidatesFrom.DeepCopy()}, true
	}
	return gpupoolv1.Selection{}, false
}

// SetSelected makes l list the workers selected (select), or as its candidates
// (convert.candidatesFrom, on a copy of Convert: spec is never changed through it).
func SetSelected(l *gpupoolv1.Layout, workers []gpupoolv1.Worker) {
	if l.Select != nil {
		l.Workers = slices.Clone(workers)
		return
	}
	if l.Convert == nil {
		return
	}
	c := *l.Convert
	c.Candidates = nil
	for _, w := range workers {
		c.Candidates = append(c.Candidates, gpupoolv1.Candidate{VM: w.VM, Node: w.Node, NoNode: w.NoNode})
	}
	l.Convert = &c
}

// SelectedWorkers are the workers of a selection: each VM with the selector's profile
// and vGPUs, in the order given.
func SelectedWorkers(sel *gpupoolv1.Selection, vms []SelectedVM) []gpupoolv1.Worker {
	out := make([]gpupoolv1.Worker, 0, len(vms))
	for _, vm := range vms {
		w := gpupoolv1.Worker{VM: vm.VM, Profile: sel.Profile, Node: vm.Node}
		if sel.VGPUs > 1 {
			w.VGPUs = sel.VGPUs
		}
		out = append(out, w)
	}
	return out
}

// Selected is a select layout's last selection: the selector it was made with and the
// workers it found.
type Selected struct {
	Select  gpupoolv1.Selection
	Workers []gpupoolv1.Worker
}

// SameSelector tells whether two selectors select the same VMs the same way.
func SameSelector(a, b *gpupoolv1.Selection) bool {
	if a == nil || b == nil {
		return a == b
	}
	if (a.MachineDeployment == nil) != (b.MachineDeployment == nil) ||
		(a.MachineDeployment != nil && *a.MachineDeployment != *b.MachineDeployment) {
		return false
	}
	if (a.Tag == nil) != (b.Tag == nil) || (a.Tag != nil && *a.Tag != *b.Tag) {
		return false
	}
	return a.Profile == b.Profile && a.VGPUs == b.VGPUs && a.NamePattern == b.NamePattern && a.Folder == b.Folder
}

// ExpandSelections returns spec with every select layout listing its last selection
// (last, by layout name, when made with the same selector), or no workers. Spec itself
// is not changed; without select layouts it is returned as it is.
func ExpandSelections(spec *gpupoolv1.GPUPoolProfileSpec, last map[string]Selected) *gpupoolv1.GPUPoolProfileSpec {
	if !HasSelections(spec) {
		return spec
	}
	out := *spec
	out.Layouts = slices.Clone(spec.Layouts)
	for i := range out.Layouts {
		l := &out.Layouts[i]
		sel, ok := SelectorOf(l)
		if !ok {
			continue
		}
		var ws []gpupoolv1.Worker
		if s, ok := last[l.Name]; ok && SameSelector(&s.Select, &sel) {
			ws = s.Workers
		}
		SetSelected(l, ws)
	}
	return &out
}
