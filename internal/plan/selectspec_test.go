package plan

import (
	"testing"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// TestExpandSelections: a pass starts a select layout from its last selection made with
// the same selector, from no VMs otherwise (another selector: the last selection is
// another set of VMs); a layout by count's candidatesFrom the same way, without
// changing the spec it was given; plan.Expand then takes the candidates.
func TestExpandSelections(t *testing.T) {
	sel := &gpupoolv1.Selection{Profile: "grid_p100-4q", VGPUs: 2, VMSelector: gpupoolv1.VMSelector{NamePattern: "day-*"}}
	from := &gpupoolv1.VMSelector{MachineDeployment: &gpupoolv1.MachineDeploymentReference{Namespace: "capi", Name: "night"}}
	spec := &gpupoolv1.GPUPoolProfileSpec{Layouts: []gpupoolv1.Layout{
		{Name: "day", Select: sel},
		{Name: "night", Convert: &gpupoolv1.Conversion{Base: "day", Count: 1, Profile: "grid_p100-16q", CandidatesFrom: from}},
	}}
	if !HasSelections(spec) {
		t.Fatal("HasSelections is false")
	}
	day := SelectedWorkers(sel, []SelectedVM{{VM: "day-1"}, {VM: "day-2", Node: "n2"}})
	if day[0].VGPUs != 2 || day[0].Profile != "grid_p100-4q" || day[1].Node != "n2" {
		t.Fatalf("selected workers %+v", day)
	}
	last := map[string]Selected{
		"day":   {Select: *sel, Workers: day},
		"night": {Select: gpupoolv1.Selection{VMSelector: *from}, Workers: []gpupoolv1.Worker{{VM: "night-1", Node: "m1"}}},
	}
	out := ExpandSelections(spec, last)
	if got := out.Layouts[0].Workers; len(got) != 2 || got[1].VM != "day-2" || out.Layouts[0].Select == nil {
		t.Errorf("day expands to %+v (select %v), want the last selection and its selector kept", got, out.Layouts[0].Select)
	}
	if c := out.Layouts[1].Convert; len(c.Candidates) != 1 || c.Candidates[0] != (gpupoolv1.Candidate{VM: "night-1", Node: "m1"}) || c.CandidatesFrom == nil {
		t.Errorf("night's candidates expand to %+v, want night-1 on m1", c.Candidates)
	}
	if spec.Layouts[0].Workers != nil || spec.Layouts[1].Convert.Candidates != nil {
		t.Error("ExpandSelections changed the spec it was given")
	}
	if ws := Expand(out, nil).Layouts[1].Workers; len(ws) != 1 || ws[0].VM != "night-1" || ws[0].Profile != "grid_p100-16q" {
		t.Errorf("plan.Expand of the selected candidates: %+v", ws)
	}

	// Another selector: the last selection is not this one's.
	other := *spec
	other.Layouts = []gpupoolv1.Layout{{Name: "day", Select: &gpupoolv1.Selection{Profile: "grid_p100-4q", VMSelector: gpupoolv1.VMSelector{NamePattern: "day-1*"}}}}
	if ws := ExpandSelections(&other, last).Layouts[0].Workers; len(ws) != 0 {
		t.Errorf("a changed selector starts from %+v, want no VMs until it is read", ws)
	}
	if SameSelector(sel, &gpupoolv1.Selection{Profile: "grid_p100-4q", VMSelector: gpupoolv1.VMSelector{NamePattern: "day-*"}}) {
		t.Error("selectors of different vGPU counts are the same")
	}
}
