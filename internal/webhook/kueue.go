package webhook

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// validateKueue checks spec.kueue: every flavor names a layout and a ResourceFlavor name
// once, its quotas are resource names with non-negative quantities, and what it keeps
// while its layout is not ready (waitingQuota) is no more than its quota.
func validateKueue(kp *field.Path, k *gpupoolv1.KueueSpec, known func(*field.Path, string) *field.Error) field.ErrorList {
	var errs field.ErrorList
	if len(k.Flavors) == 0 {
		errs = append(errs, field.Required(kp.Child("flavors"), "map at least one ResourceFlavor to a layout, such as {name: night-a100, layout: night, quota: {nvidia.com/gpu: 8}}, or remove spec.kueue"))
	}
	seen := map[string]int{}
	for i, f := range k.Flavors {
		fp := kp.Child("flavors").Index(i)
		for _, msg := range validation.IsDNS1123Subdomain(f.Name) {
			errs = append(errs, field.Invalid(fp.Child("name"), shown(f.Name), "must be a ResourceFlavor name: "+msg))
		}
		if j, dup := seen[f.Name]; dup {
			errs = append(errs, field.Duplicate(fp.Child("name"), fmt.Sprintf("flavor %q is mapped twice (the first is spec.kueue.flavors[%d]); a flavor is served by one layout", f.Name, j)))
		} else {
			seen[f.Name] = i
		}
		if e := known(fp.Child("layout"), f.Layout); e != nil {
			errs = append(errs, e)
		}
		if len(f.Quota) == 0 {
			errs = append(errs, field.Required(fp.Child("quota"), "name at least one resource, such as nvidia.com/gpu: 8"))
		}
		errs = append(errs, validateQuota(fp.Child("quota"), f.Quota)...)
		errs = append(errs, validateQuota(fp.Child("waitingQuota"), f.WaitingQuota)...)
		for r, q := range f.WaitingQuota {
			full, ok := f.Quota[r]
			switch {
			case !ok:
				errs = append(errs, field.Invalid(fp.Child("waitingQuota").Key(string(r)), q.String(),
					fmt.Sprintf("resource %q is not in quota: list it in quota too, or remove it from waitingQuota", r)))
			case q.Cmp(full) > 0:
				errs = append(errs, field.Invalid(fp.Child("waitingQuota").Key(string(r)), q.String(),
					fmt.Sprintf("is more than the flavor's quota of %s: waitingQuota is what stays of it while the layout is not ready", full.String())))
			}
		}
	}
	return errs
}

func validateQuota(p *field.Path, rl corev1.ResourceList) field.ErrorList {
	var errs field.ErrorList
	for r, q := range rl {
		for _, msg := range validation.IsQualifiedName(string(r)) {
			errs = append(errs, field.Invalid(p.Key(string(r)), shown(string(r)), "must be a resource name such as nvidia.com/gpu: "+msg))
		}
		if q.Sign() < 0 {
			errs = append(errs, field.Invalid(p.Key(string(r)), q.String(), "must be zero or positive"))
		}
	}
	return errs
}
