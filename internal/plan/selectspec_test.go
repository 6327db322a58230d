package plan

import (
	"reflect"
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

// TestSameSelectorSeesEveryField: a selector that differs from another in any one field
// (a string, a count, a reference set or cleared) is another selector, so that a pass
// never starts a changed selector from the VMs the old one selected. The fields are
// found by reflection: a field added to the selector later is covered too.
func TestSameSelectorSeesEveryField(t *testing.T) {
	base := gpupoolv1.Selection{Profile: "grid_p100-4q", VGPUs: 1, VMSelector: gpupoolv1.VMSelector{
		NamePattern: "day-*", Folder: "gpu/day",
		Tag:               &gpupoolv1.TagReference{Category: "gpupool", Name: "day"},
		MachineDeployment: &gpupoolv1.MachineDeploymentReference{Namespace: "capi", Name: "day"},
	}}
	if !SameSelector(&base, base.DeepCopy()) {
		t.Fatal("a selector is not the same as its copy")
	}
	n := 0
	var walk func(path string, v func(*gpupoolv1.Selection) reflect.Value)
	walk = func(path string, at func(*gpupoolv1.Selection) reflect.Value) {
		typ := at(&base).Type()
		changed := func(what string, change func(reflect.Value)) {
			n++
			c := base.DeepCopy()
			change(at(c))
			if SameSelector(&base, c) || SameSelector(c, &base) {
				t.Errorf("a selector with %s %s is the same as before", path, what)
			}
		}
		switch typ.Kind() {
		case reflect.String:
			changed("changed", func(f reflect.Value) { f.SetString(f.String() + "x") })
		case reflect.Int32:
			changed("changed", func(f reflect.Value) { f.SetInt(f.Int() + 1) })
		case reflect.Pointer:
			changed("cleared", func(f reflect.Value) { f.Set(reflect.Zero(typ)) })
			walk(path, func(s *gpupoolv1.Selection) reflect.Value { return at(s).Elem() })
		case reflect.Struct:
			for i := range typ.NumField() {
				name := typ.Field(i).Name
				p := path + "." + name
				if typ.Field(i).Anonymous {
					p = path
				}
				walk(p, func(s *gpupoolv1.Selection) reflect.Value { return at(s).Field(i) })
			}
		default:
			t.Errorf("%s: a field of kind %s that this test cannot change; teach it", path, typ.Kind())
		}
	}
	walk("select", func(s *gpupoolv1.Selection) reflect.Value { return reflect.ValueOf(s).Elem() })
	if n < 10 {
		t.Errorf("changed %d fields, want every one of the selector's (at least 10)", n)
	}
}
