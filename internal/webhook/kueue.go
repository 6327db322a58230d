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

// flavorsAdded tells whether an update maps a ResourceFlavor it did not map before: always
// on create (old nil).
func flavorsAdded(old, cur *gpupoolv1.GPUPoolProfileSpec) bool {
	had := flavorNames(old)
	for name := range flavorNames(cur) {
		if !had[name] {
			return true
		}
	}
	return false
}

func flavorNames(s *gpupoolv1.GPUPoolProfileSpec) map[string]bool {
	names := map[string]bool{}
	if s == nil || s.Kueue == nil {
		return names
	}
	for _, f := range s.Kueue.Flavors {
		names[f.Name] = true
	}
	return names
}

// ValidateNewFlavors rejects the ResourceFlavors of cur's spec.kueue that another
// GPUPoolProfile already maps, whatever its vCenter: a flavor is one cluster-wide Kueue
// object, and two pools setting its quota and answering its checks would undo each
// other every pass. Only the flavors an update adds are checked (old nil: create), so a
// pool stored in conflict can still be edited or have the flavor removed.
func ValidateNewFlavors(name string, old, cur *gpupoolv1.GPUPoolProfileSpec, others []gpupoolv1.GPUPoolProfile) field.ErrorList {
	if cur.Kueue == nil {
		return nil
	}
	type mapping struct {
		pool  string
		index int
	}
	mapped := map[string]mapping{}
	for i := range others {
		o := &others[i]
		if o.Name == name || o.Spec.Kueue == nil {
			continue
		}
		for j, f := range o.Spec.Kueue.Flavors {
			if _, ok := mapped[f.Name]; !ok {
				mapped[f.Name] = mapping{pool: o.Name, index: j}
			}
		}
	}
	had := flavorNames(old)
	var errs field.ErrorList
	for i, f := range cur.Kueue.Flavors {
		m, taken := mapped[f.Name]
		if !taken || had[f.Name] {
			continue
		}
		errs = append(errs, field.Invalid(field.NewPath("spec", "kueue", "flavors").Index(i).Child("name"), shown(f.Name), fmt.Sprintf(
			"ResourceFlavor is already mapped by GPUPoolProfile %q (spec.kueue.flavors[%d]); a flavor's quota and admission checks can follow one pool only: map a ResourceFlavor of this pool's own (its nodeLabels selecting this pool's nodes), or remove it from GPUPoolProfile %q first",
			m.pool, m.index, m.pool)))
	}
	return errs
}
