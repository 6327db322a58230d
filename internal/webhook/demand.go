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
