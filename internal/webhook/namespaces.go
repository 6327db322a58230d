package webhook

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/secretpolicy"
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
