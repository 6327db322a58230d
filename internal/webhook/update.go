package webhook

import (
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation/field"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// specUnchangedOrPausing tells whether an update leaves the spec as it was, apart from
// setting paused to true. Unpausing is validated: a pool must not resume on a spec that
// no longer passes.
func specUnchangedOrPausing(old, cur *gpupoolv1.GPUPoolProfileSpec) bool {
	if cur.Paused != old.Paused && !cur.Paused {
		return false
	}
	o := old.DeepCopy()
	o.Paused = cur.Paused
	return equality.Semantic.DeepEqual(*o, *cur)
}

// claimsChanged tells whether an update can claim a VM it did not claim before: always
// on create (old nil), when the vCenter or the datacenter changes, or when a VM is added.
func claimsChanged(old, cur *gpupoolv1.GPUPoolProfileSpec) bool {
	if old == nil || !sameDatacenter(&old.VCenter, &cur.VCenter) {
		return true
	}
	had := vmKeys(old)
	for k := range vmKeys(cur) {
		if !had[k] {
			return true
		}
	}
	return false
}

// ValidateNewClaims is ValidateClaims for the VMs an update adds: with the same vCenter
// and datacenter as before, a VM that the pool already listed is not checked again, so
// a pool in conflict can still drop VMs, change profiles or labels. old nil means
// create: every VM is checked.
func ValidateNewClaims(name string, old, cur *gpupoolv1.GPUPoolProfileSpec, others []gpupoolv1.GPUPoolProfile) field.ErrorList {
	if old == nil || !sameDatacenter(&old.VCenter, &cur.VCenter) {
		return ValidateClaims(name, cur, others)
	}
	return validateClaims(name, cur, others, vmKeys(old))
}

func vmKeys(s *gpupoolv1.GPUPoolProfileSpec) map[string]bool {
	keys := map[string]bool{}
	for _, l := range s.Layouts {
		for _, w := range l.Workers {
			keys[vmKey(w.VM)] = true
		}
		if l.Convert != nil {
			for _, cd := range l.Convert.Candidates {
				keys[vmKey(cd.VM)] = true
			}
		}
	}
	return keys
}
