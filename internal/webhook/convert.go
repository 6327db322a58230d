package webhook

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// validateLayoutShape checks that a layout either lists workers or converts GPUs, and a
// layout by count's fields that can be checked without vCenter (docs/count-layouts.md):
// its base a layout that lists workers, a profile, candidates each a clean VM name listed
// once, and at least one candidate per converted GPU. What needs the inventory (a
// profile the hosts offer, how many GPUs the candidates' hosts have) is the planner's:
// status.plan and the pool's conditions say it.
func validateLayoutShape(lp *field.Path, spec *gpupoolv1.GPUPoolProfileSpec, l *gpupoolv1.Layout) field.ErrorList {
	c := l.Convert
	switch {
	case c != nil && l.Select != nil:
		return field.ErrorList{field.Forbidden(lp.Child("select"), fmt.Sprintf(
			"layout %q converts GPUs (convert) and selects its VMs (select): a layout does one or the other; remove select, or remove convert", shown(l.Name)))}
	case l.Select != nil && len(l.Workers) > 0:
		return field.ErrorList{field.Forbidden(lp.Child("workers"), fmt.Sprintf(
			"layout %q selects its VMs (select) and lists workers: every VM the selector matches is a worker; remove workers, or remove select", shown(l.Name)))}
	case l.Select != nil:
		return validateSelection(lp.Child("select"), spec, l.Select)
	case c == nil && len(l.Workers) == 0:
		return field.ErrorList{field.Required(lp.Child("workers"), fmt.Sprintf(
			"layout %q has no workers: list the VMs it runs, each with its vGPU profile, convert GPUs of another layout (convert: base, count, profile, candidates), or select its VMs (select: profile and namePattern, folder or machineDeployment)", shown(l.Name)))}
	case c == nil:
		return nil
	case len(l.Workers) > 0:
		return field.ErrorList{field.Forbidden(lp.Child("workers"), fmt.Sprintf(
			"layout %q converts GPUs (convert) and lists workers: a layout by count runs convert.base's workers and convert.candidates; remove workers, or remove convert", shown(l.Name)))}
	}
	cp := lp.Child("convert")
	var errs field.ErrorList
	var names []string
	base := -1
	for i := range spec.Layouts {
		if spec.Layouts[i].Name != l.Name {
			names = append(names, spec.Layouts[i].Name)
		}
		if spec.Layouts[i].Name == c.Base {
			base = i
		}
	}
	switch {
	case c.Base == l.Name:
		errs = append(errs, field.Invalid(cp.Child("base"), shown(c.Base), fmt.Sprintf(
			"is the layout itself; name the layout whose workers run on the GPUs not converted, one of %s", quoteList(names))))
	case base < 0:
		errs = append(errs, field.Invalid(cp.Child("base"), shown(c.Base), fmt.Sprintf(
			"names no layout; write one of %s", quoteList(names))))
	case spec.Layouts[base].Convert != nil:
		errs = append(errs, field.Invalid(cp.Child("base"), shown(c.Base), fmt.Sprintf(
			"is a layout by count itself; a base lists its workers: write the layout %q converts from instead (its convert.base, %q)", shown(c.Base), shown(spec.Layouts[base].Convert.Base))))
	}
	if c.Count < 1 {
		errs = append(errs, field.Invalid(cp.Child("count"), c.Count, fmt.Sprintf(
			"must be at least 1 GPU; to convert none, use layout %q itself", shown(c.Base))))
	} else if int(c.Count) > len(c.Candidates) && len(c.Candidates) > 0 {
		errs = append(errs, field.Invalid(cp.Child("count"), c.Count, fmt.Sprintf(
			"needs at least %d candidates (a converted GPU takes at least one), and convert.candidates lists %d: lower count to at most %d, or list more candidates",
			c.Count, len(c.Candidates), len(c.Candidates))))
	}
	errs = append(errs, checkProfileAndVGPUs(cp, c.Profile, c.VGPUs, "candidate")...)
	switch {
	case len(c.Candidates) == 0 && c.CandidatesFrom == nil:
		errs = append(errs, field.Required(cp.Child("candidates"), fmt.Sprintf(
			"list the VMs that may run %s on a converted GPU, or select them (candidatesFrom)", shown(c.Profile))))
	case len(c.Candidates) > 0 && c.CandidatesFrom != nil:
		errs = append(errs, field.Forbidden(cp.Child("candidatesFrom"),
			"list the candidates or select them (candidatesFrom), not both; remove one"))
	case c.CandidatesFrom != nil:
		errs = append(errs, validateSources(cp.Child("candidatesFrom"), spec, c.CandidatesFrom)...)
	}
	seen := map[string]int{}
	for j, cd := range c.Candidates {
		vp := cp.Child("candidates").Index(j).Child("vm")
		if msg := checkVM(cd.VM, spec.VCenter.Datacenter); msg != "" {
			errs = append(errs, field.Invalid(vp, shown(cd.VM), msg))
			continue
		}
		key := vmKey(cd.VM)
		if k, dup := seen[key]; dup {
			errs = append(errs, field.Invalid(vp, shown(cd.VM), fmt.Sprintf(
				"is the VM of candidates[%d] again (by name or path); list each candidate once", k)))
			continue
		}
		seen[key] = j
	}
	if d := c.Disruption; d != nil {
		for _, x := range []struct {
			name string
			v    int32
		}{{"doNotDisrupt", d.DoNotDisrupt}, {"jobNearCompletion", d.JobNearCompletion}} {
			if x.v < 0 || x.v > 1000 {
				errs = append(errs, field.Invalid(cp.Child("disruption", x.name), x.v,
					"must be between 0 (never disrupt such a pod) and 1000 (GPU pods one such pod weighs)"))
			}
		}
	}
	return errs
}
