package webhook

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/cronspec"
)

// validateDemand checks spec.demand: every rule names a layout, at most one rule per
// layout and action, windows that parse and last, non-negative durations.
func validateDemand(dp *field.Path, d *gpupoolv1.DemandPolicy, known func(*field.Path, string) *field.Error) field.ErrorList {
	var errs field.ErrorList
	if len(d.Rules) == 0 {
		errs = append(errs, field.Required(dp.Child("rules"), "name at least one rule, such as {layout: night, action: BringIn}, or remove spec.demand"))
	}
	errs = append(errs, validateDemandScope(dp, d)...)
	seen := map[string]int{}
	// One pendingSince is kept per layout, so the BringIn and Skip rules of a layout
	// count demand with one threshold.
	threshold := map[string]int{}
	for i, r := range d.Rules {
		rp := dp.Child("rules").Index(i)
		if e := known(rp.Child("layout"), r.Layout); e != nil {
			errs = append(errs, e)
		}
		if r.Instead != "" {
			if e := known(rp.Child("instead"), r.Instead); e != nil {
				errs = append(errs, e)
			} else if r.Instead == r.Layout {
				errs = append(errs, field.Invalid(rp.Child("instead"), shown(r.Instead), "names the layout the rule skips; name the layout to end it for, or leave it out for defaultLayout"))
			}
			if r.Action != gpupoolv1.DemandSkip {
				errs = append(errs, field.Forbidden(rp.Child("instead"), "applies to Skip rules only; remove it or set action: Skip"))
			}
		}
		switch r.Action {
		case gpupoolv1.DemandBringIn, gpupoolv1.DemandSkip:
		default:
			errs = append(errs, field.NotSupported(rp.Child("action"), string(r.Action), []string{string(gpupoolv1.DemandBringIn), string(gpupoolv1.DemandSkip)}))
		}
		key := r.Layout + "/" + string(r.Action)
		if j, dup := seen[key]; dup {
			errs = append(errs, field.Duplicate(rp, fmt.Sprintf("a second %s rule for layout %q (the first is spec.demand.rules[%d]); merge them, listing both rules' windows in one", r.Action, r.Layout, j)))
		} else {
			seen[key] = i
		}
		gpus := int32(1)
		if r.MinGPUs != nil {
			gpus = *r.MinGPUs
		}
		if j, ok := threshold[r.Layout]; ok && d.Rules[j].Action != r.Action && minGPUs(d.Rules[j]) != gpus {
			errs = append(errs, field.Invalid(rp.Child("minGPUs"), gpus, fmt.Sprintf(
				"differs from spec.demand.rules[%d].minGPUs (%d) for the same layout %q: demand for a layout is counted with one threshold; write the same value in both", j, minGPUs(d.Rules[j]), r.Layout)))
		} else if !ok {
			threshold[r.Layout] = i
		}
		if r.MinGPUs != nil && *r.MinGPUs < 1 {
			errs = append(errs, field.Invalid(rp.Child("minGPUs"), *r.MinGPUs, "must be at least 1; leave it out for 1"))
		}
		errs = append(errs, notNegative(rp.Child("for"), r.For, "5m")...)
		errs = append(errs, notNegative(rp.Child("idleFor"), r.IdleFor, "10m")...)
		for j, w := range r.Windows {
			wp := rp.Child("windows").Index(j)
			if err := cronspec.Check(w.Start); err != nil {
				errs = append(errs, field.Invalid(wp.Child("start"), shown(w.Start), err.Error()))
			}
			if w.Duration.Duration <= 0 {
				errs = append(errs, field.Invalid(wp.Child("duration"), w.Duration.Duration.String(), "must be positive, such as 8h"))
			}
		}
	}
	errs = append(errs, notNegative(dp.Child("minDwell"), d.MinDwell, "30m")...)
	errs = append(errs, notNegative(dp.Child("cooldown"), d.Cooldown, "15m")...)
	if m := d.MaxSwitchesPerDay; m != nil && (*m < 1 || *m > 8) {
		errs = append(errs, field.Invalid(dp.Child("maxSwitchesPerDay"), *m, "must be between 1 and 8 (status.history, from which the budget is counted, keeps 10 switches); leave it out for 4"))
	}
	if m := d.MaxEvictions; m != nil && *m < 0 {
		errs = append(errs, field.Invalid(dp.Child("maxEvictions"), *m, "must not be negative; write 0 to reshape only nodes without GPU pods"))
	}
	return errs
}

// validateDemandScope checks who may ask: a namespace selector is required (demand is
// not anyone's by default), and both selectors must parse.
func validateDemandScope(dp *field.Path, d *gpupoolv1.DemandPolicy) field.ErrorList {
	var errs field.ErrorList
	if d.NamespaceSelector == nil {
		errs = append(errs, field.Required(dp.Child("namespaceSelector"),
			`name the namespaces whose pods and Kueue Workloads may bring layouts in or keep them, such as namespaceSelector: {matchLabels: {gpupool.dev/demand: "true"}} (and label those namespaces), or namespaceSelector: {} for every namespace`))
	}
	opts := metav1validation.LabelSelectorValidationOptions{}
	for _, sel := range []struct {
		name string
		s    *metav1.LabelSelector
	}{{"namespaceSelector", d.NamespaceSelector}, {"podSelector", d.PodSelector}} {
		if sel.s != nil {
			errs = append(errs, metav1validation.ValidateLabelSelector(sel.s, opts, dp.Child(sel.name))...)
		}
	}
	return errs
}

func minGPUs(r gpupoolv1.DemandRule) int32 {
	if r.MinGPUs == nil {
		return 1
	}
	return *r.MinGPUs
}

func notNegative(p *field.Path, d *metav1.Duration, example string) field.ErrorList {
	if d == nil || d.Duration >= 0 {
		return nil
	}
	return field.ErrorList{field.Invalid(p, d.Duration.String(), "must not be negative; write 0s or a duration such as "+example)}
}

// demandWarnings are demand rules that are allowed but cannot do what they seem to say.
func demandWarnings(spec *gpupoolv1.GPUPoolProfileSpec) []string {
	d := spec.Demand
	if d == nil {
		return nil
	}
	var warns []string
	for i, r := range d.Rules {
		if r.Action == gpupoolv1.DemandSkip && r.Instead == "" && r.Layout == spec.DefaultLayout {
			warns = append(warns, fmt.Sprintf("spec.demand.rules[%d] skips the default layout %q without instead: demand can keep another layout over it, but never ends it (an idle layout is ended for defaultLayout, itself); set instead to the layout to end it for", i, r.Layout))
		}
	}
	return warns
}

// validateCountFromDemand checks the rules' countFromDemand: on a BringIn rule of a
// layout by count, with 1 <= min <= max and max no more than the layout's candidates.
func validateCountFromDemand(dp *field.Path, spec *gpupoolv1.GPUPoolProfileSpec) field.ErrorList {
	var errs field.ErrorList
	for i, r := range spec.Demand.Rules {
		cf := r.CountFromDemand
		if cf == nil {
			continue
		}
		cp := dp.Child("rules").Index(i).Child("countFromDemand")
		if r.Action != gpupoolv1.DemandBringIn {
			errs = append(errs, field.Forbidden(cp, "applies to BringIn rules only: demand sizes the count of a layout it brings in; remove it or set action: BringIn"))
			continue
		}
		var conv *gpupoolv1.Conversion
		for j := range spec.Layouts {
			if spec.Layouts[j].Name == r.Layout {
				conv = spec.Layouts[j].Convert
			}
		}
		if conv == nil {
			errs = append(errs, field.Invalid(cp, fmt.Sprintf("{min: %d, max: %d}", cf.Min, cf.Max), fmt.Sprintf(
				"layout %q lists its workers: countFromDemand sizes a layout by count; give layout %q convert: {base, count, profile, candidates} instead of workers (docs/count-layouts.md), or remove countFromDemand", r.Layout, r.Layout)))
			continue
		}
		if cf.Min < 1 {
			errs = append(errs, field.Invalid(cp.Child("min"), cf.Min, "must be at least 1 (a layout by count converts at least one GPU while it is active); leave it out for 1"))
		}
		switch {
		case cf.Max < max(cf.Min, 1):
			errs = append(errs, field.Invalid(cp.Child("max"), cf.Max, fmt.Sprintf("must be at least min (%d); write max: %d or more", cf.Min, max(cf.Min, 1))))
		case len(conv.Candidates) > 0 && int(cf.Max) > len(conv.Candidates):
			errs = append(errs, field.Invalid(cp.Child("max"), cf.Max, fmt.Sprintf(
				"is more than the %d candidates of layout %q can fill (each converted GPU takes at least one); write max: %d or fewer, or list more candidates", len(conv.Candidates), r.Layout, len(conv.Candidates))))
		case cf.Max > 4096:
			errs = append(errs, field.Invalid(cp.Child("max"), cf.Max, "must be at most 4096"))
		}
	}
	return errs
}
