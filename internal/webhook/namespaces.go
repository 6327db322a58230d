package webhook

import (
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/secretpolicy"
	"github.com/gpupool/gpupool/vsphere"
)

// ValidateCredentialsNamespace refuses a credentials Secret outside the namespaces the
// operator reads credentials from. Without this, anyone allowed to create a pool could
// have the operator log in to a server of their choosing with any Secret's username and
// password.
func ValidateCredentialsNamespace(spec *gpupoolv1.GPUPoolProfileSpec, policy secretpolicy.Policy) field.ErrorList {
	ns := spec.VCenter.CredentialsSecretRef.Namespace
	if policy.Allows(ns) {
		return nil
	}
	return field.ErrorList{field.Forbidden(field.NewPath("spec", "vcenter", "credentialsSecretRef", "namespace"), policy.Refusal(ns))}
}

// skipsValidation tells an update that must be admitted whatever the spec holds: a pool
// being deleted (its finalizer must be able to go), or one whose spec did not change
// except for spec.paused (status and metadata updates, and an admin pausing a pool in
// any state). Rejecting these would leave a pool whose claim now conflicts, or whose
// spec a newer rule rejects, impossible to pause or delete.
func skipsValidation(old, obj *gpupoolv1.GPUPoolProfile) bool {
	if obj.DeletionTimestamp != nil {
		return true
	}
	o, n := old.Spec.DeepCopy(), obj.Spec.DeepCopy()
	o.Paused, n.Paused = false, false
	return equality.Semantic.DeepEqual(o, n)
}

// claimsChanged tells whether an update changes what the pool claims: its vCenter,
// datacenter or set of VMs. An update that does not is not checked against the other
// pools' claims again: it adds no conflict, and the controller holds the younger of two
// conflicting pools anyway.
func claimsChanged(old, obj *gpupoolv1.GPUPoolProfile) bool {
	a, b := &old.Spec.VCenter, &obj.Spec.VCenter
	if vsphere.CanonicalServer(a.Server) != vsphere.CanonicalServer(b.Server) || a.Datacenter != b.Datacenter {
		return true
	}
	return !claimedVMs(&old.Spec).Equal(claimedVMs(&obj.Spec))
}

func claimedVMs(spec *gpupoolv1.GPUPoolProfileSpec) sets.Set[string] {
	out := sets.New[string]()
	for _, l := range spec.Layouts {
		for _, w := range l.Workers {
			out.Insert(vmKey(w.VM))
		}
	}
	return out
}
